//! The MCP front on real `carmy-gateway` processes sharing one PostgreSQL database
//! (docs/semantics.md §11): a call whose replica dies reads as uncertain (running, then
//! interrupted) on the other, and 50 identical calls spread over two replicas run the tool once.

use super::mcp_client::{call, completed, connect, execution, structured, text, Client};
use carmy_test_support::{client, eventually, eventually_eq, tool_runs, Replica, TestDb};
use serde_json::{json, Value};
use sqlx::Row;
use std::time::Duration;

fn mcp(replica: &Replica) -> String {
    replica.url("/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_whose_replica_dies_is_interrupted_on_the_other() {
    let db = TestDb::migrated().await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1500"),
    ];
    let mut a = Replica::start("mcp-a", &env);
    let b = Replica::start("mcp-b", &env);
    let http = client();
    let sleep = || call("sleep", json!({"ms": 10000}), "mcp-k11");
    let on_a = connect(&mcp(&a), None).await;
    let pending = tokio::spawn(async move { on_a.call_tool(sleep()).await });
    eventually_eq(Duration::from_secs(10), "sleep started on A", 1, || {
        tool_runs(&http, &a, "sleep")
    })
    .await;
    a.kill9();
    assert!(pending.await.unwrap().is_err(), "A died before answering");

    let on_b = connect(&mcp(&b), None).await;
    let at_once = on_b.call_tool(sleep()).await.unwrap();
    assert_eq!(at_once.is_error, Some(false));
    assert_eq!(structured(&at_once)["code"], "EXECUTION_UNCERTAIN");
    assert_eq!(
        structured(&at_once)["state"],
        "running",
        "A's lease still holds"
    );
    let later = eventually(Duration::from_secs(15), "A's lease lapsed", || async {
        let result = on_b.call_tool(sleep()).await.unwrap();
        if structured(&result)["state"] == "interrupted" {
            Ok(result)
        } else {
            Err(structured(&result))
        }
    })
    .await;
    assert_eq!(
        structured(&later)["execution_id"],
        structured(&at_once)["execution_id"]
    );
    assert_eq!(execution(&later)["status"], "interrupted");
    let words = text(&later);
    assert!(
        words.contains("Check with a read-only tool (for example `find_orders`, `get_order`)"),
        "{words}"
    );
    assert!(words.contains("Carmy will not run it again"), "{words}");
    assert_eq!(tool_runs(&http, &b, "sleep").await, 0);
}

/// The outcome of one of the racing calls: `Some(replayed)` for a result, `None` for
/// `EXECUTION_UNCERTAIN` (the winner still running).
fn settled(result: &rmcp::model::CallToolResult) -> Option<(bool, Value)> {
    if completed(result) {
        let meta = execution(result);
        return Some((meta["replayed"] == true, meta["execution_id"].clone()));
    }
    assert_eq!(
        structured(result)["code"],
        "EXECUTION_UNCERTAIN",
        "{result:?}"
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_identical_calls_over_two_replicas_run_once() {
    let db = TestDb::migrated().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let a = Replica::start("mcp50-a", &env);
    let b = Replica::start("mcp50-b", &env);
    let clients: Vec<std::sync::Arc<Client>> = vec![
        std::sync::Arc::new(connect(&mcp(&a), None).await),
        std::sync::Arc::new(connect(&mcp(&b), None).await),
    ];
    let order = || call("create_order", json!({"sku": "MCP50"}), "mcp-50");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let calls: Vec<_> = (0..50)
        .map(|index| {
            let client = std::sync::Arc::clone(&clients[index % 2]);
            let barrier = std::sync::Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                client.call_tool(order()).await.unwrap()
            })
        })
        .collect();
    let mut fresh = Vec::new();
    let mut ids = Vec::new();
    for task in calls {
        if let Some((replayed, id)) = settled(&task.await.unwrap()) {
            if !replayed {
                fresh.push(id.clone());
            }
            ids.push(id);
        }
    }
    assert_eq!(fresh.len(), 1, "exactly one call ran the tool: {fresh:?}");
    let replay = clients[1].call_tool(order()).await.unwrap();
    let winner = execution(&replay)["execution_id"].clone();
    assert!(ids.iter().all(|id| *id == winner), "one execution for all");
    let http = client();
    let runs =
        tool_runs(&http, &a, "create_order").await + tool_runs(&http, &b, "create_order").await;
    assert_eq!(runs, 1);
    let orders: i64 = sqlx::query("SELECT count(*) FROM carmy.example_orders WHERE sku = 'MCP50'")
        .fetch_one(&mut db.connect().await)
        .await
        .unwrap()
        .get(0);
    assert_eq!(orders, 1);
}
