//! docs/embedding.md's example (`examples/embed.rs`) serves for real: its builder code on a
//! real PostgreSQL, over TCP, with its own tool, the replay cache and a graceful shutdown; and
//! on a database nobody migrated, `/readyz` says so.

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/embed.rs"]
mod embed;

use carmy_test_support::{client, TestDb};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// Serves `app` on an ephemeral loopback port until the sender is used or dropped.
async fn serve(app: carmy_http::App) -> (String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        app.serve(listener, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (base, stop, served)
}

async fn post(http: &reqwest::Client, base: &str, body: &Value) -> (u16, Option<String>, Value) {
    let response = http
        .post(format!("{base}/v1/executions"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (status, retry_after, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedding_example_serves_its_tool_and_replays() {
    let db = TestDb::migrated().await;
    let app = embed::app_on(&db.url, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (base, stop, served) = serve(app).await;
    let http = client();
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    let call = json!({"tool": "send_invoice", "arguments": {"customer": "acme", "cents": 1200},
                      "request_id": "invoice-1"});
    let (status, _, first) = post(&http, &base, &call).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["data"]["cents"], 1200);
    let (status, _, replay) = post(&http, &base, &call).await;
    assert_eq!((status, &replay["replayed"]), (200, &json!(true)));
    assert_eq!(replay["data"], first["data"]);

    let offline = json!({"tool": "send_invoice", "arguments": {"customer": "offline", "cents": 5},
                         "request_id": "invoice-2"});
    let (status, retry_after, problem) = post(&http, &base, &offline).await;
    assert_eq!(
        (status, retry_after.as_deref(), problem["code"].as_str()),
        (503, Some("2"), Some("BILLING_UNREACHABLE"))
    );

    // Graceful shutdown: serve returns after the drain and ends the store's lease.
    stop.send(()).unwrap();
    served.await.unwrap();
    let pool = db.pool().await;
    let live: i64 =
        sqlx::query_scalar("SELECT count(*) FROM carmy.instances WHERE lease_expires_at > now()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(live, 0);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_migrations_readyz_says_to_run_them() {
    let db = TestDb::create().await;
    let app = embed::app_on(&db.url, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (base, stop, served) = serve(app).await;
    let http = client();
    let response = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "NOT_READY");
    assert_eq!(
        problem["detail"],
        format!(
            "not ready: schema carmy is not migrated (found no table \
             carmy.refinery_schema_history, need version {}): run migrations (carmy-gateway \
             migrate, or carmy_postgres::migrate)",
            carmy_postgres::latest_migration_version()
        )
    );
    stop.send(()).unwrap();
    served.await.unwrap();
}
