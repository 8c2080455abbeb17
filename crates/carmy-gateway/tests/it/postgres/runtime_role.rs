//! Gateways running as the least-privilege runtime role (docs/semantics.md §14.2): the owner
//! runs `carmy-gateway migrate --grant-runtime ROLE`; two real gateway processes connected as
//! that role serve calls (the example orders included), decide on an interrupted execution and
//! prune by retention, while the role cannot delete or rewrite the audit trail.

use crate::recovery_replicas::{audit_rows, interrupted_execution};
use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{client, eventually, post, request, server_url, Replica, TestDb};
use reqwest::Method;
use serde_json::json;
use sqlx::Connection;
use std::time::Duration;

/// `url` with its user replaced by `role`.
fn as_role(url: &str, role: &str) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_username(role).unwrap();
    parsed.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gateways_as_the_runtime_role_serve_decide_and_prune_but_cannot_rewrite_history() {
    let db = TestDb::create().await;
    let role = format!("carmy_rt_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&server_url()).await.unwrap();
    sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&mut admin)
        .await
        .unwrap();
    let granted = std::process::Command::new(gateway_binary())
        .args(["migrate", "--grant-runtime", &role])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(
        granted.status.success(),
        "migrate --grant-runtime: {}",
        String::from_utf8_lossy(&granted.stderr)
    );

    let runtime_url = as_role(&db.url, &role);
    let env = [
        ("DATABASE_URL", runtime_url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1000"),
        ("CARMY_OPERATOR_KEYS", "ko=ops"),
        ("CARMY_RETENTION", "2s"),
        ("CARMY_PRUNE_INTERVAL_MS", "200"),
    ];
    let mut a = Replica::start("runtime-role-a", &env);
    let b = Replica::start("runtime-role-b", &env);
    let http = client();
    let call =
        json!({"tool": "create_order", "arguments": {"sku": "A-1"}, "request_id": "as-runtime"});
    let (status, first) = post(&http, &a, &call).await;
    assert_eq!(status, 200, "{first}");
    let (status, replay) = post(&http, &b, &call).await;
    assert_eq!((status, &replay["data"]), (200, &first["data"]), "{replay}");

    // Deciding: an execution whose owner died is resolved through the other replica.
    let id = interrupted_execution(&mut a, &b, "decided").await;
    let path = format!("/v1/executions/{id}/resolve");
    let body = json!({"status": "completed", "data": {"order_id": 5}, "note": "checked"});
    let (status, decided) = request(&http, &b, Method::POST, &path, Some("ko"), Some(&body)).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(audit_rows(&db, &id).await.len(), 1);

    // The role cannot rewrite history.
    let mut session = sqlx::PgConnection::connect(&runtime_url).await.unwrap();
    for refused in [
        "DELETE FROM carmy.audit_log",
        "UPDATE carmy.audit_log SET note = 'rewritten'",
        "DELETE FROM carmy.late_arrivals",
        "DROP TABLE carmy.example_orders",
    ] {
        let error = sqlx::raw_sql(refused)
            .execute(&mut session)
            .await
            .unwrap_err();
        assert_eq!(
            error.as_database_error().and_then(|e| e.code()).as_deref(),
            Some("42501"),
            "{refused}: {error}"
        );
    }
    assert_eq!(audit_rows(&db, &id).await.len(), 1, "the audit row is kept");

    // Pruning by retention, as the runtime role, through carmy.prune_expired.
    eventually(
        Duration::from_secs(20),
        "the finished records are pruned",
        || async {
            let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM carmy.reservations WHERE request_id IN ('as-runtime', 'decided')",
        )
        .fetch_one(&mut db.connect().await)
        .await
        .unwrap();
            (left == 0).then_some(()).ok_or(left)
        },
    )
    .await;

    drop((a, b, session));
    let mut owner = db.connect().await;
    sqlx::raw_sql(&format!("DROP OWNED BY {role}"))
        .execute(&mut owner)
        .await
        .unwrap();
    owner.close().await.unwrap();
    drop(db);
    sqlx::raw_sql(&format!("DROP ROLE {role}"))
        .execute(&mut admin)
        .await
        .unwrap();
}
