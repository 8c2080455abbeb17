//! The retry discipline, free of I/O: which answers are retried ([`classify`]), how long to wait
//! ([`backoff`]), and when to stop ([`RetryPolicy`]).
//!
//! Rules (docs/semantics.md §3, §4, §12, §13):
//!
//! - **retried**: transport failures where the request may have reached the gateway (connect
//!   errors, timeouts, resets, a connection closed before the answer or its body was complete);
//!   every 503 (`STORE_UNAVAILABLE`: nothing ran; `EXECUTION_UNCERTAIN` "recording pending": the
//!   tool ran and its outcome will be replayed; `UPSTREAM_UNAVAILABLE`: the upstream did not run
//!   the call); 502 and 504 without a machine code (a proxy in front of the gateway); 408 and 429;
//!   409 `EXECUTION_UNCERTAIN` with state `running` (a duplicate whose outcome is replayed once
//!   recorded);
//! - **never retried**: `IDEMPOTENCY_CONFLICT`, an `interrupted` execution, and every other
//!   answer (400, 401, 404, 500, 507, ...);
//! - **waits**: exponential backoff with full jitter: before retry `n` (1 for the first retry)
//!   a wait drawn uniformly from `[0, min(max_backoff, initial_backoff * multiplier^(n-1))]`; a
//!   `Retry-After` header (delay-seconds) is a floor on that wait;
//! - **bounds**: at most `max_attempts` requests and `deadline` per call, waits included; a wait
//!   that would end past the deadline is not started.
//!
//! Retrying is safe only because every attempt carries the same request_id: the gateway then
//! runs the tool at most once and replays its recorded outcome.

use crate::error::{Error, Failure, TransportError};
use crate::wire::{InFlightState, Problem};
use rand::Rng;
use std::time::{Duration, Instant};

/// Bounds and pacing of one call's retries. `Default` gives the values documented per field
/// (the same as the Python client's).
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Requests per call, the first included (at least 1). Default 10.
    pub max_attempts: u32,
    /// Total time per call, waits included. Default 60 s.
    pub deadline: Duration,
    /// Backoff ceiling before the first retry. Default 100 ms.
    pub initial_backoff: Duration,
    /// Growth of the ceiling per retry (at least 1). Default 2.
    pub multiplier: f64,
    /// Largest backoff ceiling. Default 5 s.
    pub max_backoff: Duration,
    /// Longest wait for one answer, bounded by the time left. Default 35 s.
    pub attempt_timeout: Duration,
    /// Seconds sent as `Prefer: wait=N` (RFC 7240; docs/semantics.md §12.6) so that a gateway
    /// supporting it holds the answer to a running duplicate until its outcome is recorded; lowered
    /// to fit one second under the attempt's timeout; `None` sends no header. Gateways without
    /// support ignore it. Default `Some(10)`.
    pub prefer_wait: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            deadline: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(35),
            prefer_wait: Some(10),
        }
    }
}

impl RetryPolicy {
    /// Checks the bounds.
    ///
    /// # Errors
    /// [`Error::Config`] when `max_attempts` is 0, `deadline` or `attempt_timeout` is zero, or
    /// `multiplier` is below 1 (or not a number).
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_attempts == 0 {
            return Err(Error::Config("max_attempts must be at least 1".into()));
        }
        if self.deadline.is_zero() || self.attempt_timeout.is_zero() {
            return Err(Error::Config(
                "deadline and attempt_timeout must be positive".into(),
            ));
        }
        if self.multiplier.is_nan() || self.multiplier < 1.0 {
            return Err(Error::Config("multiplier must be at least 1".into()));
        }
        Ok(())
    }
}

/// The largest wait before retry `retry_number` (1 for the first retry):
/// `min(max_backoff, initial_backoff * multiplier^(retry_number - 1))`.
pub fn backoff_ceiling(policy: &RetryPolicy, retry_number: u32) -> Duration {
    if policy.initial_backoff.is_zero() {
        return Duration::ZERO;
    }
    let exponent = i32::try_from(retry_number.saturating_sub(1).min(1024)).unwrap_or(1024);
    // May be infinite for large exponents; the cap below makes it finite.
    let seconds = policy.initial_backoff.as_secs_f64() * policy.multiplier.powi(exponent);
    Duration::try_from_secs_f64(seconds.min(policy.max_backoff.as_secs_f64()))
        .map_or(policy.max_backoff, |ceiling| {
            ceiling.min(policy.max_backoff)
        })
}

/// The wait before retry `retry_number`: drawn uniformly from `[0, backoff_ceiling]` ("full
/// jitter"), so that many clients failing together do not retry together.
pub fn backoff(policy: &RetryPolicy, retry_number: u32, rng: &mut impl Rng) -> Duration {
    let ceiling = backoff_ceiling(policy, retry_number).as_secs_f64();
    Duration::from_secs_f64(rng.gen_range(0.0..=ceiling))
}

/// Reads a `Retry-After` header value given as delay-seconds (RFC 9110 §10.2.3). HTTP dates
/// and unreadable values give `None` (the backoff alone then decides).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let text = value.trim();
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    // Longer than u64 seconds: wait "forever", which the deadline turns into giving up.
    Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)))
}

/// What one attempt produced, as [`classify`] sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A 2xx answer.
    Success,
    /// A non-2xx answer with its problem body and its `Retry-After`, if any.
    Problem {
        /// The answer's problem (see [`Problem::from_answer`]).
        problem: Problem,
        /// The `Retry-After` header, read by [`parse_retry_after`].
        retry_after: Option<Duration>,
    },
    /// No answer.
    Transport(TransportError),
}

/// What to do after an attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Take the answer.
    Accept,
    /// Send the same request again (same request_id), waiting at least `retry_after`.
    Retry {
        /// The server's `Retry-After`, a floor on the backoff.
        retry_after: Option<Duration>,
        /// What failed, reported if retries run out.
        failure: Failure,
    },
    /// Stop with this error; retrying cannot change the answer or would be unsafe.
    Fail(Error),
}

/// The retry decision for one attempt (rules in the [module docs](self)).
pub fn classify(answer: Answer) -> Decision {
    match answer {
        Answer::Success => Decision::Accept,
        Answer::Transport(error) if error.kind.is_retryable() => Decision::Retry {
            retry_after: None,
            failure: Failure::Transport(error),
        },
        Answer::Transport(error) => Decision::Fail(Error::Transport(error)),
        Answer::Problem {
            problem,
            retry_after,
        } => {
            if is_retryable(&problem) {
                Decision::Retry {
                    retry_after,
                    failure: Failure::Problem(Box::new(problem)),
                }
            } else {
                Decision::Fail(Error::from_problem(problem))
            }
        }
    }
}

fn is_retryable(problem: &Problem) -> bool {
    match problem.status {
        503 | 408 | 429 => true,
        502 | 504 => problem.code.is_none(),
        409 => {
            problem.has_code("EXECUTION_UNCERTAIN") && problem.state == Some(InFlightState::Running)
        }
        _ => false,
    }
}

/// What the next attempt may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttemptPlan {
    /// Longest wait for the answer.
    pub(crate) timeout: Duration,
    /// Seconds for `Prefer: wait=N`, if any.
    pub(crate) prefer_wait: Option<u32>,
}

/// The retry state of one call: attempts made and time left.
pub(crate) struct Budget<'p> {
    policy: &'p RetryPolicy,
    start: Instant,
    attempts: u32,
}

impl<'p> Budget<'p> {
    pub(crate) fn new(policy: &'p RetryPolicy, start: Instant) -> Self {
        Self {
            policy,
            start,
            attempts: 0,
        }
    }

    fn remaining(&self, now: Instant) -> Duration {
        self.policy
            .deadline
            .saturating_sub(now.saturating_duration_since(self.start))
    }

    /// Counts an attempt and bounds its timeout by the time left.
    pub(crate) fn plan(&mut self, now: Instant) -> AttemptPlan {
        self.attempts += 1;
        let left = self.remaining(now).max(Duration::from_millis(1));
        let timeout = self.policy.attempt_timeout.min(left);
        let fits = u32::try_from(timeout.as_secs().saturating_sub(1)).unwrap_or(u32::MAX);
        let prefer_wait = self
            .policy
            .prefer_wait
            .map(|wait| wait.min(fits))
            .filter(|wait| *wait > 0);
        AttemptPlan {
            timeout,
            prefer_wait,
        }
    }

    /// The wait before the next attempt after `failure`, or the error to give the caller when
    /// attempts or time ran out.
    pub(crate) fn next_delay(
        &self,
        retry_after: Option<Duration>,
        failure: Failure,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Result<Duration, Error> {
        let exhausted = |failure: Failure| match failure {
            Failure::Problem(problem)
                if problem.status == 409 && problem.state == Some(InFlightState::Running) =>
            {
                Error::StillRunning {
                    execution_id: problem.execution_id.clone().unwrap_or_default(),
                }
            }
            last => Error::Unavailable {
                attempts: self.attempts,
                last,
            },
        };
        if self.attempts >= self.policy.max_attempts {
            return Err(exhausted(failure));
        }
        let mut delay = backoff(self.policy, self.attempts, rng);
        if let Some(floor) = retry_after {
            delay = delay.max(floor);
        }
        if delay >= self.remaining(now) {
            return Err(exhausted(failure));
        }
        Ok(delay)
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
