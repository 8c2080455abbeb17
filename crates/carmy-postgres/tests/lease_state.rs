//! `PostgresStore::lease_state` (docs/semantics.md §12.2) through a link the test cuts: `Held`
//! while renewals land, `Lapsed` once they failed past the moment the lease surely held (the
//! store then refuses to reserve), `Held` again after the link is back and a renewal landed;
//! and a lease connection that went silent is given up, so the lease comes back over a new one.

use carmy::fingerprint::Fingerprint;
use carmy::outcome::ExecutionId;
use carmy::store::{
    Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, LeaseState, Reservation, StoreError,
};
use carmy_postgres::PostgresStore;
use carmy_test_support::{CutProxy, TestDb};
use std::time::Duration;

fn intent() -> ExecutionIntent {
    ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "create_order".to_owned(),
        parts: None,
        retention: None,
        arguments: None,
    }
}

/// A store with a 900 ms lease reaching its database through a [`CutProxy`], its lease held;
/// the database, the proxy, the store and the lease state.
async fn store_behind_a_proxy() -> (
    TestDb,
    CutProxy,
    PostgresStore,
    tokio::sync::watch::Receiver<LeaseState>,
) {
    let db = TestDb::migrated().await;
    let proxy = CutProxy::start(&db.url).await;
    let mut options = db.options();
    options.database_url = proxy.url(&db.url);
    options.lease_ttl = Duration::from_millis(900);
    options.acquire_timeout = Duration::from_millis(300);
    let store = PostgresStore::connect(options).await.unwrap();
    let mut state = store.lease_state().expect("a store with a lease");
    assert_eq!(*state.borrow_and_update(), LeaseState::Held);
    (db, proxy, store, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_state_lapses_while_cut_off_and_holds_again_after_a_renewal() {
    let (_db, proxy, store, mut state) = store_behind_a_proxy().await;
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "a".repeat(64),
    };

    proxy.cut();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|now| *now == LeaseState::Lapsed),
    )
    .await
    .expect("the lease lapses while cut off")
    .unwrap();
    let refused = store
        .reserve(
            Claim {
                key: &IdempotencyKey::new("p", "s", "cut"),
                fingerprint: &fingerprint,
            },
            &intent(),
        )
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Unavailable(text)) if text.contains("lease lapsed")),
        "{refused:?}"
    );

    proxy.restore();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|now| *now == LeaseState::Held),
    )
    .await
    .expect("a renewal lands once the link is back")
    .unwrap();
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &IdempotencyKey::new("p", "s", "back"),
                    fingerprint: &fingerprint
                },
                &intent()
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    store.shutdown().await.unwrap();
}

/// A link that goes silent under the lease's one connection (a failover: that connection's
/// packets go nowhere, new connections reach the server): the lease connection is given up
/// (its check on acquire gets no answer within the acquire timeout), so a renewal connects anew
/// and the lease holds again, long before TCP would give up on the old connection. (A renewal
/// whose statement was already sent when the link went silent is bounded by its own deadline of
/// one renewal interval, `Lease::renew`; that window is too narrow to hit from a test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_connection_gone_silent_is_given_up_and_the_lease_comes_back() {
    let (_db, proxy, store, mut state) = store_behind_a_proxy().await;

    proxy.freeze();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|now| *now == LeaseState::Lapsed),
    )
    .await
    .expect("the lease lapses while the link is silent")
    .unwrap();
    proxy.restore_new_only();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|now| *now == LeaseState::Held),
    )
    .await
    .expect("a renewal over a new connection lands although the old one stays silent")
    .unwrap();
    store.shutdown().await.unwrap();
}
