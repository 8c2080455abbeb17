//! Tests of the retry rules: the decision table, the backoff bounds and the budget.

use super::*;
use crate::error::TransportKind;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn problem(status: u16, code: Option<&str>, state: Option<InFlightState>) -> Problem {
    Problem {
        kind: "urn:test".into(),
        title: "t".into(),
        status,
        detail: "d".into(),
        code: code.map(str::to_owned),
        execution_id: Some("exec_1".into()),
        state,
        differs: vec![],
    }
}

fn answer(status: u16, code: Option<&str>, state: Option<InFlightState>) -> Answer {
    Answer::Problem {
        problem: problem(status, code, state),
        retry_after: None,
    }
}

fn transport(kind: TransportKind) -> Answer {
    Answer::Transport(TransportError {
        kind,
        message: "m".into(),
    })
}

/// What a decision amounts to, for the table.
#[derive(Debug, PartialEq)]
enum Want {
    Accept,
    Retry,
    Fail(Error),
}

fn outcome(decision: Decision) -> Want {
    match decision {
        Decision::Accept => Want::Accept,
        Decision::Retry { .. } => Want::Retry,
        Decision::Fail(error) => Want::Fail(error),
    }
}

#[test]
fn decision_table() {
    use InFlightState::{Interrupted, Running};
    let detail = || "d".to_owned();
    let table: Vec<(&str, Answer, Want)> = vec![
        ("2xx", Answer::Success, Want::Accept),
        ("connect", transport(TransportKind::Connect), Want::Retry),
        ("timeout", transport(TransportKind::Timeout), Want::Retry),
        (
            "reset/incomplete",
            transport(TransportKind::Interrupted),
            Want::Retry,
        ),
        (
            "unsendable request",
            transport(TransportKind::Request),
            Want::Fail(Error::Transport(TransportError {
                kind: TransportKind::Request,
                message: "m".into(),
            })),
        ),
        (
            "store unavailable",
            answer(503, Some("STORE_UNAVAILABLE"), None),
            Want::Retry,
        ),
        (
            "recording pending",
            answer(503, Some("EXECUTION_UNCERTAIN"), Some(Running)),
            Want::Retry,
        ),
        (
            "upstream unavailable",
            answer(503, Some("UPSTREAM_UNAVAILABLE"), None),
            Want::Retry,
        ),
        ("503 from a proxy", answer(503, None, None), Want::Retry),
        ("502 from a proxy", answer(502, None, None), Want::Retry),
        ("504 from a proxy", answer(504, None, None), Want::Retry),
        (
            "502 with a code",
            answer(502, Some("BAD_GATEWAY"), None),
            Want::Fail(Error::Problem(Box::new(problem(
                502,
                Some("BAD_GATEWAY"),
                None,
            )))),
        ),
        (
            "body timeout",
            answer(408, Some("REQUEST_TIMEOUT"), None),
            Want::Retry,
        ),
        ("rate limited", answer(429, None, None), Want::Retry),
        (
            "running duplicate",
            answer(409, Some("EXECUTION_UNCERTAIN"), Some(Running)),
            Want::Retry,
        ),
        (
            "interrupted",
            answer(409, Some("EXECUTION_UNCERTAIN"), Some(Interrupted)),
            Want::Fail(Error::Interrupted {
                execution_id: "exec_1".into(),
            }),
        ),
        (
            "uncertain without a state",
            answer(409, Some("EXECUTION_UNCERTAIN"), None),
            Want::Fail(Error::Interrupted {
                execution_id: "exec_1".into(),
            }),
        ),
        (
            "conflict",
            answer(409, Some("IDEMPOTENCY_CONFLICT"), None),
            Want::Fail(Error::Conflict {
                execution_id: "exec_1".into(),
                differs: vec![],
            }),
        ),
        (
            "capacity",
            answer(507, Some("IDEMPOTENCY_CAPACITY"), None),
            Want::Fail(Error::Capacity),
        ),
        (
            "unauthorized",
            answer(401, Some("UNAUTHORIZED"), None),
            Want::Fail(Error::Unauthorized),
        ),
        (
            "invalid",
            answer(400, Some("INVALID_REQUEST"), None),
            Want::Fail(Error::InvalidRequest { detail: detail() }),
        ),
        (
            "unknown tool",
            answer(404, Some("UNKNOWN_TOOL"), None),
            Want::Fail(Error::UnknownTool { detail: detail() }),
        ),
        (
            "not found",
            answer(404, Some("NOT_FOUND"), None),
            Want::Fail(Error::NotFound { detail: detail() }),
        ),
        (
            "internal",
            answer(500, Some("INTERNAL"), None),
            Want::Fail(Error::Problem(Box::new(problem(
                500,
                Some("INTERNAL"),
                None,
            )))),
        ),
        (
            "too large",
            answer(413, Some("PAYLOAD_TOO_LARGE"), None),
            Want::Fail(Error::Problem(Box::new(problem(
                413,
                Some("PAYLOAD_TOO_LARGE"),
                None,
            )))),
        ),
    ];
    for (name, answer, want) in table {
        assert_eq!(outcome(classify(answer)), want, "{name}");
    }
}

#[test]
fn a_conflict_keeps_what_differs() {
    let mut conflict = problem(409, Some("IDEMPOTENCY_CONFLICT"), None);
    conflict.differs = vec!["arguments".into(), "metadata".into()];
    let decision = classify(Answer::Problem {
        problem: conflict,
        retry_after: Some(Duration::from_secs(1)),
    });
    assert_eq!(
        decision,
        Decision::Fail(Error::Conflict {
            execution_id: "exec_1".into(),
            differs: vec!["arguments".into(), "metadata".into()],
        })
    );
}

#[test]
fn retry_after_is_carried_by_the_decision() {
    let decision = classify(Answer::Problem {
        problem: problem(503, Some("STORE_UNAVAILABLE"), None),
        retry_after: Some(Duration::from_secs(3)),
    });
    let Decision::Retry { retry_after, .. } = decision else {
        panic!("retry expected, got {decision:?}");
    };
    assert_eq!(retry_after, Some(Duration::from_secs(3)));
}

#[test]
fn retry_after_reads_delay_seconds_only() {
    assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)));
    assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
    assert_eq!(parse_retry_after("0"), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("99999999999999999999999"),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(parse_retry_after("-1"), None);
    assert_eq!(parse_retry_after("1.5"), None);
    assert_eq!(parse_retry_after(""), None);
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
}

#[test]
fn backoff_ceilings_grow_and_are_capped() {
    let policy = RetryPolicy {
        initial_backoff: Duration::from_millis(100),
        multiplier: 2.0,
        max_backoff: Duration::from_millis(1000),
        ..RetryPolicy::default()
    };
    let ceilings: Vec<u128> = (1..=6)
        .map(|n| backoff_ceiling(&policy, n).as_millis())
        .collect();
    assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
    assert_eq!(
        backoff_ceiling(&policy, u32::MAX),
        Duration::from_millis(1000)
    );
    let zero = RetryPolicy {
        initial_backoff: Duration::ZERO,
        ..policy
    };
    assert_eq!(backoff_ceiling(&zero, u32::MAX), Duration::ZERO);
}

#[test]
fn full_jitter_stays_within_its_ceiling_and_spreads() {
    let policy = RetryPolicy::default();
    let mut rng = StdRng::seed_from_u64(12);
    for retry in 1..=12 {
        let ceiling = backoff_ceiling(&policy, retry);
        let waits: Vec<Duration> = (0..200)
            .map(|_| backoff(&policy, retry, &mut rng))
            .collect();
        assert!(waits.iter().all(|wait| *wait <= ceiling), "retry {retry}");
        // Jitter, not a constant: the draws use the lower and the upper half of the range.
        assert!(
            waits.iter().any(|wait| *wait < ceiling / 2),
            "retry {retry}"
        );
        assert!(
            waits.iter().any(|wait| *wait > ceiling / 2),
            "retry {retry}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_waits() {
    let policy = RetryPolicy::default();
    let draw = |seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        (1..=5)
            .map(|n| backoff(&policy, n, &mut rng))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

fn store_unavailable() -> Failure {
    Failure::Problem(Box::new(problem(503, Some("STORE_UNAVAILABLE"), None)))
}

#[test]
fn attempts_run_out_into_unavailable() {
    let policy = RetryPolicy {
        max_attempts: 2,
        ..RetryPolicy::default()
    };
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(1);
    let mut budget = Budget::new(&policy, start);
    budget.plan(start);
    let delay = budget
        .next_delay(None, store_unavailable(), start, &mut rng)
        .unwrap();
    assert!(delay <= backoff_ceiling(&policy, 1));
    budget.plan(start);
    assert_eq!(
        budget.next_delay(None, store_unavailable(), start, &mut rng),
        Err(Error::Unavailable {
            attempts: 2,
            last: store_unavailable(),
        })
    );
}

#[test]
fn a_running_duplicate_that_outlasts_the_budget_is_still_running() {
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    let start = Instant::now();
    let mut budget = Budget::new(&policy, start);
    budget.plan(start);
    let running = Failure::Problem(Box::new(problem(
        409,
        Some("EXECUTION_UNCERTAIN"),
        Some(InFlightState::Running),
    )));
    assert_eq!(
        budget.next_delay(None, running, start, &mut StdRng::seed_from_u64(1)),
        Err(Error::StillRunning {
            execution_id: "exec_1".into()
        })
    );
}

#[test]
fn retry_after_is_a_floor_and_a_wait_past_the_deadline_is_not_started() {
    let policy = RetryPolicy {
        deadline: Duration::from_secs(10),
        ..RetryPolicy::default()
    };
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(3);
    let mut budget = Budget::new(&policy, start);
    budget.plan(start);
    let floor = Duration::from_secs(2);
    let delay = budget
        .next_delay(Some(floor), store_unavailable(), start, &mut rng)
        .unwrap();
    assert_eq!(
        delay, floor,
        "the first backoff ceiling (100 ms) is below the floor"
    );
    let late = start + Duration::from_secs(9);
    assert_eq!(
        budget.next_delay(Some(floor), store_unavailable(), late, &mut rng),
        Err(Error::Unavailable {
            attempts: 1,
            last: store_unavailable(),
        })
    );
}

#[test]
fn attempt_timeouts_and_prefer_wait_fit_the_time_left() {
    let policy = RetryPolicy {
        deadline: Duration::from_secs(60),
        attempt_timeout: Duration::from_secs(35),
        prefer_wait: Some(10),
        ..RetryPolicy::default()
    };
    let start = Instant::now();
    let mut budget = Budget::new(&policy, start);
    assert_eq!(
        budget.plan(start),
        AttemptPlan {
            timeout: Duration::from_secs(35),
            prefer_wait: Some(10)
        }
    );
    assert_eq!(
        budget.plan(start + Duration::from_secs(54)),
        AttemptPlan {
            timeout: Duration::from_secs(6),
            prefer_wait: Some(5)
        }
    );
    assert_eq!(
        budget.plan(start + Duration::from_millis(59_500)),
        AttemptPlan {
            timeout: Duration::from_millis(500),
            prefer_wait: None
        }
    );
    assert_eq!(
        budget.plan(start + Duration::from_secs(61)).timeout,
        Duration::from_millis(1)
    );
}

#[test]
fn policies_are_validated() {
    assert!(RetryPolicy::default().validate().is_ok());
    for bad in [
        RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        },
        RetryPolicy {
            deadline: Duration::ZERO,
            ..RetryPolicy::default()
        },
        RetryPolicy {
            multiplier: 0.5,
            ..RetryPolicy::default()
        },
        RetryPolicy {
            multiplier: f64::NAN,
            ..RetryPolicy::default()
        },
    ] {
        assert!(matches!(bad.validate(), Err(Error::Config(_))), "{bad:?}");
    }
}
