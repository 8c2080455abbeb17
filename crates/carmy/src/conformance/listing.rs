//! Conformance checks of listing executions (docs/semantics.md §12.4): by principal, session,
//! request id, in-flight state, tool and failure, oldest first up to the limit, the same on every
//! store.

use super::decisions::release_request;
use super::{complete, fp, intent, key, reserve, result_for};
use crate::decision::{ExecutionQuery, ListOrder};
use crate::outcome::{ExecutionId, ExecutionStatus};
use crate::store::{ExecutionIntent, IdempotencyStore, InFlightState, Reservation};
use serde_json::json;
use std::sync::Arc;

/// The execution ids of a listing, sorted (a listing's order between executions reserved in
/// the same millisecond is not defined).
fn ids(found: Vec<crate::store::ExecutionLookup>) -> Vec<ExecutionId> {
    sorted(found.into_iter().map(|lookup| lookup.record.execution_id))
}

fn sorted(ids: impl IntoIterator<Item = ExecutionId>) -> Vec<ExecutionId> {
    let mut ids: Vec<ExecutionId> = ids.into_iter().collect();
    ids.sort();
    ids
}

/// Reserves alice's `s/one` and `t/two` and bob's `s/one` (left running) and bob's `s/done`
/// (completed), in this order; returns their intents.
async fn four_to_list(store: &dyn IdempotencyStore) -> [ExecutionIntent; 4] {
    let f = fp(&json!({}));
    let intents = [intent(), intent(), intent(), intent()];
    let keys = [
        key("alice", "s", "one"),
        key("alice", "t", "two"),
        key("bob", "s", "one"),
        key("bob", "s", "done"),
    ];
    for (k, i) in keys.iter().zip(&intents) {
        assert_eq!(reserve(store, k, &f, i).await, Reservation::Reserved);
    }
    let finished = result_for(&intents[3], &keys[3], ExecutionStatus::Completed, json!(1));
    complete(store, &keys[3], &f, &finished.into())
        .await
        .unwrap();
    intents
}

/// Listing filters by principal, session, request id and in-flight state, oldest first, up to
/// the limit; released executions are not listed.
pub async fn listing_filters_and_scopes(store: Arc<dyn IdempotencyStore>) {
    let [a1, a2, b1, done] = four_to_list(&*store).await;
    let alice = key("alice", "s", "one");
    let query = |principal: Option<&str>, request_id: Option<&str>| ExecutionQuery {
        principal: principal.map(str::to_owned),
        in_flight: Some(InFlightState::Running),
        session_id: None,
        request_id: request_id.map(str::to_owned),
        limit: 10,
        ..ExecutionQuery::default()
    };
    let all = ids(store.list_executions(&query(None, None)).await.unwrap());
    let expected = [&a1, &a2, &b1].map(|intent| intent.execution_id.clone());
    assert_eq!(
        all,
        sorted(expected),
        "every principal's running executions"
    );
    let alices = ids(store
        .list_executions(&query(Some("alice"), None))
        .await
        .unwrap());
    let expected = [&a1, &a2].map(|intent| intent.execution_id.clone());
    assert_eq!(alices, sorted(expected));
    let found = store
        .list_executions(&query(Some("alice"), Some("one")))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, alice);
    let limited = ExecutionQuery {
        limit: 1,
        ..query(None, None)
    };
    assert_eq!(store.list_executions(&limited).await.unwrap().len(), 1);
    let any_state = ExecutionQuery {
        in_flight: None,
        ..query(Some("bob"), Some("done"))
    };
    assert_eq!(
        ids(store.list_executions(&any_state).await.unwrap()),
        vec![done.execution_id]
    );
    let interrupted = ExecutionQuery {
        in_flight: Some(InFlightState::Interrupted),
        ..query(None, None)
    };
    assert!(store
        .list_executions(&interrupted)
        .await
        .unwrap()
        .is_empty());

    store
        .release_execution(&release_request(&a1.execution_id, true))
        .await
        .unwrap()
        .unwrap();
    let after = ids(store
        .list_executions(&query(Some("alice"), None))
        .await
        .unwrap());
    assert_eq!(after, vec![a2.execution_id]);
}

/// Listing filters by tool and by failure (finished, status not `completed`) in the store, so
/// that the limit counts only matching records, and lists newest first on request: exactly the
/// oldest-first order reversed, the limit keeping the newest.
pub async fn listing_filters_by_tool_and_failure_in_either_order(store: Arc<dyn IdempotencyStore>) {
    let f = fp(&json!({}));
    let waiting = || ExecutionIntent {
        tool: "wait".into(),
        ..intent()
    };
    // Reserved in this order, each at a later instant; the statuses they end with (None: left
    // running).
    let planned = [
        (
            key("alice", "s", "ok"),
            intent(),
            Some(ExecutionStatus::Completed),
        ),
        (
            key("alice", "s", "bad"),
            intent(),
            Some(ExecutionStatus::Failed),
        ),
        (
            key("bob", "s", "slow"),
            waiting(),
            Some(ExecutionStatus::TimedOut),
        ),
        (key("bob", "s", "run"), waiting(), None),
        (
            key("alice", "s", "gone"),
            intent(),
            Some(ExecutionStatus::Cancelled),
        ),
    ];
    for (k, i, status) in &planned {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert_eq!(reserve(&*store, k, &f, i).await, Reservation::Reserved);
        if let Some(status) = status {
            let data = if *status == ExecutionStatus::Completed {
                json!(1)
            } else {
                json!(null)
            };
            let finished = result_for(i, k, *status, data);
            complete(&*store, k, &f, &finished.into()).await.unwrap();
        }
    }
    let id = |n: usize| planned[n].1.execution_id.clone();
    let list = |query: ExecutionQuery| {
        let store = Arc::clone(&store);
        async move {
            store
                .list_executions(&query)
                .await
                .unwrap()
                .into_iter()
                .map(|lookup| lookup.record.execution_id)
                .collect::<Vec<_>>()
        }
    };
    let newest = |query: ExecutionQuery| ExecutionQuery {
        order: ListOrder::NewestFirst,
        ..query
    };
    let failures = ExecutionQuery {
        failures_only: true,
        limit: 10,
        ..ExecutionQuery::default()
    };
    assert_eq!(
        list(failures.clone()).await,
        vec![id(1), id(2), id(4)],
        "failures: failed, timed_out and cancelled, not completed nor running, oldest first"
    );
    assert_eq!(
        list(newest(failures.clone())).await,
        vec![id(4), id(2), id(1)],
        "failures newest first"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            limit: 1,
            ..failures.clone()
        }))
        .await,
        vec![id(4)],
        "the limit keeps the newest failure"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            principal: Some("alice".into()),
            ..failures.clone()
        }))
        .await,
        vec![id(4), id(1)],
        "alice's failures"
    );
    assert_eq!(
        list(ExecutionQuery {
            tool: Some("wait".into()),
            ..failures.clone()
        })
        .await,
        vec![id(2)],
        "the failures of tool wait"
    );
    assert!(
        list(ExecutionQuery {
            in_flight: Some(InFlightState::Running),
            ..failures.clone()
        })
        .await
        .is_empty(),
        "a running record is no failure"
    );
    let by_tool = ExecutionQuery {
        tool: Some("wait".into()),
        limit: 10,
        ..ExecutionQuery::default()
    };
    assert_eq!(list(by_tool.clone()).await, vec![id(2), id(3)], "tool wait");
    assert_eq!(
        list(newest(by_tool.clone())).await,
        vec![id(3), id(2)],
        "tool wait, newest first"
    );
    assert_eq!(
        list(ExecutionQuery {
            in_flight: Some(InFlightState::Running),
            ..by_tool
        })
        .await,
        vec![id(3)],
        "tool wait, running"
    );
    assert!(
        list(ExecutionQuery {
            tool: Some("nope".into()),
            limit: 10,
            ..ExecutionQuery::default()
        })
        .await
        .is_empty(),
        "no record of tool nope"
    );
    let everything = ExecutionQuery {
        limit: 10,
        ..ExecutionQuery::default()
    };
    let oldest_first = list(everything.clone()).await;
    assert_eq!(
        oldest_first,
        (0..5).map(id).collect::<Vec<_>>(),
        "oldest first"
    );
    let mut reversed = oldest_first;
    reversed.reverse();
    assert_eq!(
        list(newest(everything.clone())).await,
        reversed,
        "newest first"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            limit: 2,
            ..everything.clone()
        }))
        .await,
        vec![id(4), id(3)],
        "the limit keeps the newest"
    );
    assert_eq!(
        list(ExecutionQuery {
            limit: 2,
            ..everything
        })
        .await,
        vec![id(0), id(1)],
        "oldest first, the limit keeps the oldest"
    );
}

/// Listing by what was asked (docs/semantics.md §8.5): only records whose kept arguments contain
/// the value (jsonb `@>`), within the principal's scope; records that kept none never match.
pub async fn listing_finds_by_arguments(store: Arc<dyn IdempotencyStore>) {
    let f = fp(&json!({}));
    let kept = |text: &str| ExecutionIntent {
        arguments: Some(text.to_owned()),
        ..intent()
    };
    let intents = [
        kept(r#"{"amount":5,"customer":"cus_42","items":[{"sku":"a"},{"sku":"b"}]}"#),
        kept(r#"{"amount":5,"customer":"cus_43"}"#),
        kept(r#"{"customer":"cus_42"}"#),
        intent(),
    ];
    let keys = [
        key("alice", "s", "a1"),
        key("alice", "s", "a2"),
        key("bob", "s", "b1"),
        key("alice", "s", "none"),
    ];
    for (k, i) in keys.iter().zip(&intents) {
        assert_eq!(reserve(&*store, k, &f, i).await, Reservation::Reserved);
    }
    let list = |principal: Option<&str>, needle: &str| {
        let store = Arc::clone(&store);
        let query = ExecutionQuery {
            principal: principal.map(str::to_owned),
            arguments: Some(crate::arguments::search_value(needle).unwrap()),
            limit: 10,
            ..ExecutionQuery::default()
        };
        async move { ids(store.list_executions(&query).await.unwrap()) }
    };
    let id = |n: usize| intents[n].execution_id.clone();
    assert_eq!(
        list(None, r#"{"customer":"cus_42"}"#).await,
        sorted([id(0), id(2)])
    );
    assert_eq!(
        list(Some("alice"), r#"{"customer":"cus_42"}"#).await,
        vec![id(0)]
    );
    assert_eq!(
        list(None, r#"{"amount":5.0}"#).await,
        sorted([id(0), id(1)])
    );
    assert_eq!(list(None, r#"{"items":[{"sku":"b"}]}"#).await, vec![id(0)]);
    assert_eq!(list(None, r#"{"customer":"cus_4"}"#).await, vec![]);
    assert_eq!(
        list(None, "{}").await,
        sorted([id(0), id(1), id(2)]),
        "a record without kept arguments never matches"
    );
}
