//! Security properties of a real gateway process: API keys never reach the logs, principals
//! never see each other's executions, and anonymous mode stays on loopback.

use carmy_test_support::{call, client, Replica};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_never_logged_and_principals_are_isolated() {
    let name = format!("security-{}", uuid::Uuid::new_v4().simple());
    let mut gateway = Replica::start(
        &name,
        &[
            (
                "CARMY_API_KEYS",
                "secret-key-alpha=alice,secret-key-beta=bob",
            ),
            ("RUST_LOG", "trace"),
        ],
    );
    let http = client();
    let send = |key: &'static str, body: Value| {
        let (http, url) = (http.clone(), gateway.url("/v1/executions"));
        async move {
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {key}"))
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, alice) = send(
        "secret-key-alpha",
        call("create_order", json!({"sku": "S"}), "sec"),
    )
    .await;
    assert_eq!(status, 200);
    let (status, bob) = send(
        "secret-key-beta",
        call("create_order", json!({"sku": "S"}), "sec"),
    )
    .await;
    assert_eq!(
        (status, bob["replayed"].clone()),
        (200, json!(false)),
        "same request_id, other principal"
    );
    assert_ne!(alice["execution_id"], bob["execution_id"]);
    let (status, denied) = send("guessed-key-gamma", call("echo", json!({}), "x")).await;
    assert_eq!(
        (status, denied["code"].clone()),
        (401, json!("UNAUTHORIZED"))
    );

    let alice_id = alice["execution_id"].as_str().unwrap();
    for (key, expected) in [
        ("secret-key-alpha", 200),
        ("secret-key-beta", 404),
        ("guessed-key-gamma", 401),
    ] {
        for path in [
            format!("/v1/executions/{alice_id}"),
            format!("/v1/executions/{alice_id}/cancel"),
        ] {
            let request = if path.ends_with("/cancel") {
                http.post(gateway.url(&path))
            } else {
                http.get(gateway.url(&path))
            };
            let response = request
                .header("authorization", format!("Bearer {key}"))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            // alice may read her finished execution; cancelling it is 409 EXECUTION_FINISHED
            let expected = if path.ends_with("/cancel") && expected == 200 {
                409
            } else {
                expected
            };
            assert_eq!(status, expected, "{key} {path}");
            let body = response.text().await.unwrap();
            if key != "secret-key-alpha" {
                assert!(
                    !body.contains("order_id"),
                    "no data of another principal: {body}"
                );
            }
        }
    }

    gateway.terminate();
    let log = std::fs::read_to_string(gateway.log_path()).unwrap();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log ran at a verbose level"
    );
    for secret in ["secret-key-alpha", "secret-key-beta", "guessed-key-gamma"] {
        assert!(!log.contains(secret), "{secret} appears in the log");
    }
}

#[test]
fn anonymous_mode_refuses_a_non_loopback_address() {
    let output = std::process::Command::new(carmy_test_support::replica::gateway_binary())
        .env_remove("DATABASE_URL")
        .env_remove("CARMY_API_KEYS")
        .env("CARMY_LISTEN", "0.0.0.0:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refusing to serve anonymously"), "{stderr}");
}
