//! A reconciler that dies in the middle of its probes (docs/semantics.md §12.10): a round probes
//! everything it claimed at once, so its claims hold the executions from the other replicas for
//! one probe's time (the probe's `timeout_ms` and 5 s), not one per claimed execution: another
//! replica probes them within a minute, and not while the claim holds.

use super::reconciling::{payment_call, Reconciling, WAIT};
use crate::tools_file::write_tools_file;
use std::time::{Duration, Instant};

/// One tool whose probe's lookup hangs for a minute, with a 20 s probe deadline.
fn tools(base: &str) -> std::path::PathBuf {
    write_tools_file(&format!(
        "[[tools]]\nname = \"hanging_lookup\"\nurl = \"{base}/pay/commit-claims\"\n\
         [tools.reconcile]\nurl = \"{base}/lookup-slow?idempotency_key={{execution_id}}\"\n\
         timeout_ms = 20000\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_reconcilers_claims_are_probed_by_another_replica_within_a_minute() {
    let fixture = Reconciling::start(tools, &[]).await;
    let payments = &fixture.payments;
    let mut owner = fixture.replica("claims-owner", &[]);
    let mut first = fixture.replica("claims-first", &[]);
    let calls: Vec<_> = (1..=3)
        .map(|n| payment_call("hanging_lookup", &format!("claims-{n}")))
        .collect();
    let ids = fixture
        .interrupt(&mut owner, &first, &calls, "/pay/commit-claims")
        .await;

    // The only live reconciler claims the three and probes them all at once; each lookup hangs.
    carmy_test_support::eventually(WAIT, "every execution is being probed", || async {
        let asked: Vec<usize> = ids.iter().map(|id| payments.lookups_of(id)).collect();
        (asked == [1, 1, 1]).then_some(()).ok_or(asked)
    })
    .await;
    let probing_since = Instant::now();
    first.kill9();
    let killed = Instant::now();

    let second = fixture.replica("claims-second", &[]);
    // The dead replica's claim still holds (20 s and 5 s from the claim): a few of the second
    // replica's rounds (every 100 ms) probe nothing. Checked only while surely within the hold.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let looked: Vec<usize> = ids.iter().map(|id| payments.lookups_of(id)).collect();
    if probing_since.elapsed() < Duration::from_secs(15) {
        assert_eq!(looked, [1, 1, 1], "probed again while the claim held");
    }

    // Within a minute of the kill, the second replica probes every one of them.
    let left = Duration::from_secs(60).saturating_sub(killed.elapsed());
    carmy_test_support::eventually(left, "another replica probes them", || async {
        let asked: Vec<usize> = ids.iter().map(|id| payments.lookups_of(id)).collect();
        asked
            .iter()
            .all(|asked| *asked >= 2)
            .then_some(())
            .ok_or(asked)
    })
    .await;
    drop(second);
}
