//! Polls with a deadline: a condition that never holds fails the test with what it last saw,
//! instead of hanging it.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long to wait between two attempts.
const INTERVAL: Duration = Duration::from_millis(20);

/// Runs `attempt` every 20 ms until it returns `Ok`, and returns that value.
///
/// `Err(seen)` means "not yet": `seen` is what the attempt observed.
///
/// # Panics
/// When `deadline` passes first, with `what` and the last `seen`.
pub async fn eventually<T, S, F, Fut>(deadline: Duration, what: &str, mut attempt: F) -> T
where
    S: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, S>>,
{
    let start = Instant::now();
    loop {
        let seen = match attempt().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}; last saw: {seen:?}"
        );
        tokio::time::sleep(INTERVAL).await;
    }
}

/// Polls `observe` until it returns `expected`.
///
/// # Panics
/// When `deadline` passes first, with `what` and the last value observed.
pub async fn eventually_eq<T, F, Fut>(deadline: Duration, what: &str, expected: T, mut observe: F)
where
    T: PartialEq + Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    eventually(deadline, what, || {
        let observed = observe();
        let expected = &expected;
        async move {
            let value = observed.await;
            if value == *expected {
                Ok(())
            } else {
                Err(value)
            }
        }
    })
    .await;
}
