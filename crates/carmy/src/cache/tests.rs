//! The replay cache's own rules: what it answers from memory, what it leaves to the store,
//! and which copies a heard change drops.

use super::*;
use crate::memory::InMemoryIdempotencyStore;
use crate::outcome::{ExecutionResult, ExecutionStatus};

fn finished(request_id: &str) -> RecordedResult {
    let now = chrono::Utc::now();
    RecordedResult::new(ExecutionResult {
        execution_id: ExecutionId::generate(),
        status: ExecutionStatus::Completed,
        data: serde_json::json!({"n": 1}),
        error: None,
        tool: "echo".into(),
        request_id: Some(request_id.into()),
        session_id: "s".into(),
        started_at: now,
        finished_at: now,
        resolution: None,
    })
}

fn cache() -> ReplayCache {
    let store = Arc::new(InMemoryIdempotencyStore::default());
    ReplayCache::new(store, 100, Duration::from_secs(600))
}

fn fp() -> Fingerprint {
    Fingerprint {
        version: "v1".into(),
        digest: "a".repeat(64),
    }
}

fn cached_id(cache: &ReplayCache, key: &IdempotencyKey) -> Option<ExecutionId> {
    cache.cached(key).map(|record| record.execution_id)
}

/// A change heard for one identity drops that copy only; an unknown change drops all.
#[test]
fn a_heard_change_drops_the_copies_it_names() {
    let cache = cache();
    let (a, b) = (
        IdempotencyKey::new("p", "s", "a"),
        IdempotencyKey::new("p", "s", "b"),
    );
    let (ra, rb) = (finished("a"), finished("b"));
    cache.remember(cache.changes_seen(), &a, &fp(), &ra);
    cache.remember(cache.changes_seen(), &b, &fp(), &rb);
    assert_eq!(
        cached_id(&cache, &a),
        Some(ra.result().execution_id.clone())
    );

    cache.drop_cached(&RecordChange::Changed(a.clone()));
    assert_eq!(cached_id(&cache, &a), None);
    assert_eq!(
        cached_id(&cache, &b),
        Some(rb.result().execution_id.clone())
    );

    cache.remember(cache.changes_seen(), &a, &fp(), &ra);
    cache.drop_cached(&RecordChange::Unknown);
    assert_eq!((cached_id(&cache, &a), cached_id(&cache, &b)), (None, None));
}

fn parts(byte: u8) -> FingerprintParts {
    FingerprintParts {
        tool: [byte; 8],
        arguments: [byte; 8],
        metadata: [byte; 8],
    }
}

fn other_fp() -> Fingerprint {
    Fingerprint {
        version: "v1".into(),
        digest: "b".repeat(64),
    }
}

fn intent(tool: &str, parts: FingerprintParts) -> ExecutionIntent {
    ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: tool.into(),
        parts: Some(parts),
        retention: None,
        arguments: None,
    }
}

/// A conflict with a copy that holds its call's digests is answered from the copy, with
/// them (docs/semantics.md §12.8): the store, which holds nothing, is not asked (it would
/// have reserved the identity).
#[tokio::test]
async fn a_conflict_with_a_copy_with_digests_is_answered_from_the_copy() {
    let cache = cache();
    let key = IdempotencyKey::new("p", "s", "a");
    let record = finished("a").with_parts(parts(1));
    cache.remember(cache.changes_seen(), &key, &fp(), &record);
    let claim = Claim {
        key: &key,
        fingerprint: &other_fp(),
    };
    let answer = cache.reserve(claim, &intent("echo", parts(2))).await;
    assert_eq!(
        answer.unwrap(),
        Reservation::Existing(Existing::Conflict {
            execution_id: record.result().execution_id.clone(),
            parts: Some(parts(1)),
        })
    );
}

/// A copy cached from a replay has no digests: its conflict goes to the store, whose
/// answer names the parts, and they are kept with the copy for the next conflict.
#[tokio::test]
async fn a_copy_without_digests_learns_them_from_the_stores_conflict() {
    let cache = cache();
    let key = IdempotencyKey::new("p", "s", "a");
    let claim = Claim {
        key: &key,
        fingerprint: &fp(),
    };
    let first = intent("echo", parts(1));
    assert_eq!(
        cache.inner.reserve(claim, &first).await.unwrap(),
        Reservation::Reserved
    );
    let mut result = finished("a").into_result();
    result.execution_id = first.execution_id.clone();
    let record = RecordedResult::new(result);
    cache.inner.complete(claim, &record).await.unwrap();
    cache.remember(cache.changes_seen(), &key, &fp(), &record);
    assert_eq!(cache.cached(&key).unwrap().parts, None);

    let other = Claim {
        key: &key,
        fingerprint: &other_fp(),
    };
    let conflict = Reservation::Existing(Existing::Conflict {
        execution_id: first.execution_id.clone(),
        parts: Some(parts(1)),
    });
    let answer = cache.reserve(other, &intent("echo", parts(2))).await;
    assert_eq!(answer.unwrap(), conflict);
    assert_eq!(cache.cached(&key).unwrap().parts, Some(parts(1)));
}

/// A copy read from the store before a change was heard may predate the change: it is not
/// kept, whichever identity the change named; one read after it is.
#[test]
fn a_copy_read_before_a_change_was_heard_is_not_kept() {
    let cache = cache();
    let a = IdempotencyKey::new("p", "s", "a");
    let record = finished("a");
    let seen = cache.changes_seen();
    cache.drop_cached(&RecordChange::Changed(IdempotencyKey::new(
        "p", "s", "other",
    )));
    cache.remember(seen, &a, &fp(), &record);
    assert_eq!(cached_id(&cache, &a), None);
    cache.remember(cache.changes_seen(), &a, &fp(), &record);
    assert_eq!(
        cached_id(&cache, &a),
        Some(record.result().execution_id.clone())
    );
}

/// What memory holds answers without the store (docs/semantics.md §8.4): a replay of the
/// same fingerprint, a conflict with a copy that holds its digests; nothing for an identity
/// not cached, a conflict with a copy without digests, or a copy past the caller's
/// retention (dropped).
#[test]
fn memory_answers_replays_and_conflicts_of_cached_records_only() {
    let cache = cache();
    let (a, b) = (
        IdempotencyKey::new("p", "s", "a"),
        IdempotencyKey::new("p", "s", "b"),
    );
    let with_parts = finished("a").with_parts(parts(1));
    let without = finished("b");
    cache.remember(cache.changes_seen(), &a, &fp(), &with_parts);
    cache.remember(cache.changes_seen(), &b, &fp(), &without);
    let claim = |key, fingerprint| Claim { key, fingerprint };
    let (same, other) = (fp(), other_fp());

    match cache.answer_from_memory(claim(&a, &same), None) {
        Some(Reservation::Existing(Existing::Replay(replay))) => assert_eq!(
            replay.result().execution_id,
            with_parts.result().execution_id
        ),
        other => panic!("expected a replay, got {other:?}"),
    }
    assert_eq!(
        cache.answer_from_memory(claim(&a, &other), None),
        Some(Reservation::Existing(Existing::Conflict {
            execution_id: with_parts.result().execution_id.clone(),
            parts: Some(parts(1)),
        }))
    );
    assert_eq!(cache.answer_from_memory(claim(&b, &other), None), None);
    let unknown = IdempotencyKey::new("p", "s", "c");
    assert_eq!(cache.answer_from_memory(claim(&unknown, &same), None), None);

    // Finished now, so a retention of zero has passed: the copy is dropped.
    assert_eq!(
        cache.answer_from_memory(claim(&a, &same), Some(Duration::ZERO)),
        None
    );
    assert_eq!(cached_id(&cache, &a), None);
}
