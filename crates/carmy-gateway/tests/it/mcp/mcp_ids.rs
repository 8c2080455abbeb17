//! Two conversations never share an action by accident (docs/semantics.md §11), on real
//! spawned gateways over `/mcp`: ids that only look random are refused and nothing runs; the
//! same random id written by two conversations of a known client (VS Code, Codex) or of a
//! Carmy-aware one (`io.carmy/session_id`) makes two orders while each conversation's retry
//! replays; a model's unscoped id replays within its window (the replay saying how old the
//! record is) and is refused after it, the tool never running twice; and no id printed in the
//! documentation, the tool descriptions or the server instructions works when copied.

use super::mcp_client::{call_with_meta, connect, execution, structured, text, Client};
use carmy_test_support::{client as http_client, tool_runs, Replica};
use rmcp::model::CallToolResult;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn random_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn mcp(replica: &Replica) -> String {
    replica.url("/mcp")
}

/// `create_order {"sku": sku, "request_id": id}` with `meta` (plus a fresh tool-use id, as a
/// model's every tool call has).
async fn order(client: &Client, sku: &str, id: &str, meta: Value) -> CallToolResult {
    let mut meta = meta;
    meta["claudecode/toolUseId"] = json!(format!("toolu_01{}", uuid::Uuid::new_v4().simple()));
    client
        .call_tool(call_with_meta(
            "create_order",
            json!({"sku": sku, "quantity": 2, "request_id": id}),
            meta,
        ))
        .await
        .unwrap()
}

/// Every text block of a result, joined.
fn all_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .filter_map(|block| block["text"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn ids_that_only_look_random_are_refused_and_nothing_runs() {
    let gateway = Replica::start("ids-classes", &[]);
    let client = connect(&mcp(&gateway), None).await;
    for (id, reason) in [
        (
            "CreateOrderSkuA1Quantity2",
            "is made of words (create, order, sku, quantity)",
        ),
        (
            "20261207-0001",
            "is made of dates, times or counts (20261207, 0001)",
        ),
        (
            "order-2026-12-07-001",
            "is made of words and numbers (order; 2026, 12, 07, 001)",
        ),
        (
            "3f2b8c1e-9d4a-4e7b-a6c5-0e1f2d3c4b5a",
            "is an example id printed in documentation",
        ),
        (
            "550e8400-e29b-41d4-a716-446655440000",
            "is an example id printed in documentation",
        ),
        (
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "is an example id printed in documentation",
        ),
        ("create-order-A1", "is made of words (create, order)"),
    ] {
        let refused = order(&client, "A1", id, json!({})).await;
        assert_eq!(refused.is_error, Some(true), "{id}");
        assert_eq!(structured(&refused)["code"], "REQUEST_ID_INVALID", "{id}");
        let words = text(&refused);
        assert!(
            words.starts_with(&format!(
                "Carmy refused this call: its `request_id` \"{id}\" is not random enough: it {reason}"
            )),
            "{words}"
        );
        assert!(
            words.contains("set to a new random UUID that you generate now"),
            "{words}"
        );
    }
    assert_eq!(tool_runs(&http_client(), &gateway, "create_order").await, 0);
}

/// The `_meta` a client sends with every call of the conversation it names.
type Conversation = fn(&str) -> Value;

/// The same random id, as a model that samples deterministically writes it in two
/// conversations with the same prompt: two orders, one per conversation; each conversation's
/// own retry replays its order.
#[tokio::test]
async fn two_conversations_of_a_known_client_make_two_orders_and_each_retry_replays() {
    let gateway = Replica::start("ids-conversations", &[]);
    let client = connect(&mcp(&gateway), None).await;
    let conversations: [(&str, Conversation); 3] = [
        (
            "vscode",
            |c| json!({"vscode.conversationId": c, "vscode.requestId": random_id()}),
        ),
        (
            "codex",
            |c| json!({"x-codex-turn-metadata": {"session_id": c, "turn_id": random_id()}}),
        ),
        ("carmy", |c| json!({"io.carmy/session_id": c})),
    ];
    for (n, (client_kind, meta)) in conversations.into_iter().enumerate() {
        let id = random_id();
        let (a, b) = (random_id(), random_id());
        let first_a = order(&client, "KB-03", &id, meta(&a)).await;
        let first_b = order(&client, "KB-03", &id, meta(&b)).await;
        for first in [&first_a, &first_b] {
            assert_eq!(first.is_error, Some(false), "{client_kind}: {first:?}");
            assert_eq!(execution(first)["replayed"], false, "{client_kind}");
        }
        assert_ne!(
            execution(&first_a)["execution_id"],
            execution(&first_b)["execution_id"],
            "{client_kind}: two conversations, two executions"
        );
        assert_ne!(
            structured(&first_a)["order_id"],
            structured(&first_b)["order_id"],
            "{client_kind}: two orders"
        );
        // Conversation A lost its answer and repeats the action with its id.
        let retry_a = order(&client, "KB-03", &id, meta(&a)).await;
        assert_eq!(execution(&retry_a)["replayed"], true, "{client_kind}");
        assert_eq!(
            execution(&retry_a)["execution_id"],
            execution(&first_a)["execution_id"]
        );
        assert_eq!(
            structured(&retry_a)["order_id"],
            structured(&first_a)["order_id"]
        );
        let runs = tool_runs(&http_client(), &gateway, "create_order").await;
        assert_eq!(runs, 2 * (n as u64 + 1), "{client_kind}");
    }
}

/// Without a session or a conversation, the model's id replays within its window, the replay
/// saying how old the record is; a repeat after it (the same prompt the next night) is refused
/// without running and without showing the earlier outcome, and a new id, as the refusal says
/// for a new action, makes the next order.
#[tokio::test]
async fn an_unscoped_models_id_replays_within_its_window_and_is_refused_after_it() {
    let gateway = Replica::start("ids-window", &[("CARMY_MCP_ARGUMENT_REPLAY_WINDOW", "2s")]);
    let client = connect(&mcp(&gateway), None).await;
    let id = random_id();
    let first = order(&client, "KB-07", &id, json!({})).await;
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let recorded = Instant::now();
    let retry = order(&client, "KB-07", &id, json!({})).await;
    assert_eq!(execution(&retry)["replayed"], true);
    assert_eq!(
        execution(&retry)["execution_id"],
        execution(&first)["execution_id"]
    );
    let note = all_text(&retry);
    assert!(
        regex::Regex::new(r"\(execution exec_\S+, recorded [0-2] s ago\); it was not done again")
            .unwrap()
            .is_match(&note),
        "{note}"
    );
    // The window has passed: as a nightly run that writes the same id again.
    tokio::time::sleep(Duration::from_millis(2_200).saturating_sub(recorded.elapsed())).await;
    let later = order(&client, "KB-07", &id, json!({})).await;
    assert_eq!(later.is_error, Some(true), "{later:?}");
    let fields = structured(&later);
    assert_eq!(fields["code"], "REQUEST_ID_REUSED");
    assert_eq!(fields["execution_id"], execution(&first)["execution_id"]);
    assert_eq!(fields["replay_window_seconds"], 2);
    assert_eq!(fields["effect_may_have_happened"], false);
    assert!(fields.get("order_id").is_none(), "the outcome is not shown");
    let words = text(&later);
    assert!(
        words.contains("longer ago than Carmy replays an id a model chose (2 s)")
            && words.contains("check with a read-only tool (for example `find_orders`, `get_order`)")
            && words.ends_with("Only if this is a new action, call again with a new random UUID that you generate now as `request_id`."),
        "{words}"
    );
    assert!(!words.contains("order_id"), "{words}");
    assert_eq!(tool_runs(&http_client(), &gateway, "create_order").await, 1);
    // A new action under a new id runs.
    let next = order(&client, "KB-07", &random_id(), json!({})).await;
    assert_eq!(next.is_error, Some(false));
    assert_eq!(execution(&next)["replayed"], false);
    assert_eq!(tool_runs(&http_client(), &gateway, "create_order").await, 2);
}

/// The workspace's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The id-looking strings of `text`: UUIDs, ULIDs, tool-use and call ids, and the values of
/// `request_id`, `idempotencyKey` and `io.carmy/request_id` in JSON, Python and shell examples.
fn id_looking(text: &str) -> Vec<String> {
    let patterns = [
        r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
        r"\b[0-9A-HJKMNP-TV-Z]{26}\b",
        r"\b(?:toolu|call)_[0-9A-Za-z]{6,}",
        r#"(?:request_id|idempotencyKey|io\.carmy/request_id)\\?"\s*:\s*\\?"([^"\\<]+)"#,
        r#"request_id\s*=\s*["']([^"'<{]+)["']"#,
    ];
    let mut found = Vec::new();
    for pattern in patterns {
        for captures in regex::Regex::new(pattern).unwrap().captures_iter(text) {
            let id = captures.get(1).unwrap_or_else(|| captures.get(0).unwrap());
            found.push(id.as_str().to_owned());
        }
    }
    found
}

/// Every id-looking string in the README, docs/*.md, the tool descriptions (with the request
/// id argument's) and the server instructions is refused by the gateway as a model's id: none
/// works when copied.
#[tokio::test]
async fn no_id_in_the_documentation_works_when_copied() {
    let gateway = Replica::start("ids-documented", &[]);
    let client = connect(&mcp(&gateway), None).await;
    let mut sources = vec![(
        "README.md".to_owned(),
        std::fs::read_to_string(root().join("README.md")).unwrap(),
    )];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "md") {
            let name = path.strip_prefix(root()).unwrap().display().to_string();
            sources.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    let info = client.peer_info().expect("initialize answered");
    sources.push((
        "instructions".to_owned(),
        info.instructions.clone().unwrap_or_default(),
    ));
    let tools = client.list_all_tools().await.unwrap();
    sources.push((
        "tools/list".to_owned(),
        serde_json::to_string(&tools).unwrap(),
    ));
    let mut checked = 0;
    for (source, text) in &sources {
        for id in id_looking(text) {
            let refused = order(&client, "A1", &id, json!({})).await;
            assert_eq!(
                structured(&refused)["code"],
                "REQUEST_ID_INVALID",
                "{source}: {id:?} works when copied: {refused:?}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 5,
        "only {checked} ids found: the patterns are stale"
    );
    assert_eq!(tool_runs(&http_client(), &gateway, "create_order").await, 0);
}
