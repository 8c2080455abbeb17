//! Test-only crash and stall points (feature `fault-injection`), named after the boundaries of
//! an execution. Without the feature every point compiles to nothing.
//!
//! With the feature, the `fail` crate's `FAILPOINTS` environment variable configures them (the
//! gateway calls `fail::FailScenario::setup()` at start), e.g.
//! `FAILPOINTS=carmy::after_reserve=return` aborts the process at that point and
//! `FAILPOINTS=carmy::after_tool=sleep(5000)` stalls it there.

/// After the reservation is durable, before the tool starts.
pub const AFTER_RESERVE: &str = "carmy::after_reserve";
/// Right after the tool started (evaluated beside the running tool).
pub const DURING_TOOL: &str = "carmy::during_tool";
/// After the tool returned, before the outcome is recorded.
pub const AFTER_TOOL: &str = "carmy::after_tool";
/// After the outcome is recorded, before the response is written.
pub const AFTER_COMPLETE: &str = "carmy::after_complete";

/// Evaluates the point `name`: with the `return` action the process aborts at once, as a
/// `kill -9` would end it; other actions (`sleep(ms)`, `pause`, `panic`) behave as in `fail`.
#[cfg(feature = "fault-injection")]
pub fn point(name: &str) {
    fail::fail_point!(name, |_| {
        eprintln!("fault injection: aborting at {name}");
        std::process::abort();
    });
}

/// Without the `fault-injection` feature: nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}
