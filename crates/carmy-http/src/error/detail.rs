//! The `detail` texts of the HTTP API's problems (docs/semantics.md §5): what happened and what
//! the caller does next, with the pause before a retry in whole seconds.

use carmy::engine::Refusal;
use carmy::outcome::ExecutionId;
use carmy::store::InFlightState;

/// The engine's text for an unknown tool (the same on every front) and where the tools are listed.
pub(super) fn unknown_tool_detail(tool: &str, closest: Option<&str>) -> String {
    let refusal = Refusal::UnknownTool {
        tool: tool.to_owned(),
        closest: closest.map(str::to_owned),
    };
    format!("{refusal}; GET /v1/tools lists the tools")
}

/// The detail of a tool's "not executed" answer: for a first attempt, the call had no effect;
/// for a takeover that was handed back, only this attempt had none.
pub(super) fn not_executed_detail(
    message: &str,
    handed_back: Option<&ExecutionId>,
    retry_after: Option<std::time::Duration>,
) -> String {
    match handed_back {
        None => format!(
            "{message}. The call had no effect and nothing was recorded; retry the same call (same request_id){}",
            retry_hint(retry_after)
        ),
        Some(execution_id) => format!(
            "{message}. This attempt had no effect, but it was a rerun of execution {execution_id}, whose earlier attempt was interrupted and may have taken effect; the execution is interrupted again and nothing was recorded. Retrying the same call (same request_id) runs it again as the same execution, so the upstream sees the same idempotency key{}",
            retry_hint(retry_after)
        ),
    }
}

fn retry_hint(retry_after: Option<std::time::Duration>) -> String {
    retry_after.map_or_else(String::new, |pause| {
        format!(" after {} s", retry_after_seconds(pause))
    })
}

/// A pause as whole seconds for `Retry-After`: rounded up, at least 1.
pub(super) fn retry_after_seconds(pause: std::time::Duration) -> u64 {
    (pause.as_secs() + u64::from(pause.subsec_nanos() > 0)).max(1)
}

pub(super) fn superseded_detail(current: Option<&ExecutionId>) -> String {
    let now = current.map_or_else(
        || "the identity is free now: a retry with the same request_id runs the tool again, so check first whether this run's effect happened".to_owned(),
        |current| format!("the identity's record is now execution {current} (GET /v1/executions/{current}); do not retry with a new request_id"),
    );
    format!("this execution was resolved, released or taken over before the tool finished; its outcome was not recorded but kept as a late arrival in the audit log, and its effect may have happened in addition to the recorded one; {now}")
}

/// The detail of `IDEMPOTENCY_CONFLICT`, naming the parts that differ when they are known.
pub(super) fn conflict_detail(differs: Option<&[&'static str]>) -> String {
    let parts = match differs {
        Some(parts) if !parts.is_empty() => format!("its {} differ", parts.join(" and ")),
        _ => "its tool, arguments or metadata differ".to_owned(),
    };
    format!(
        "request_id was already used for a different call ({parts}); to get that call's \
         outcome, repeat it exactly; for a new call, use a new request_id"
    )
}

pub(super) fn uncertain_detail(
    state: InFlightState,
    reconciling: bool,
    retry_after: Option<std::time::Duration>,
) -> String {
    let when = retry_after.map_or_else(
        || "later".to_owned(),
        |pause| format!("in {} s", retry_after_seconds(pause)),
    );
    match state {
        InFlightState::Running => format!(
            "an execution with this request_id is still running; retry the same call {when} to get its outcome"
        ),
        InFlightState::Interrupted if reconciling => format!(
            "an execution with this request_id was interrupted and is being reconciled: the gateway is asking the upstream whether its effect happened; retry the same call {when} to get the outcome it finds"
        ),
        InFlightState::Interrupted => {
            "an execution with this request_id was interrupted and its outcome is unknown; reconcile (e.g. search for its effect) instead of retrying".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ApiError;
    use carmy::outcome::ExecutionId;
    use carmy::store::InFlightState;
    use std::time::Duration;

    fn uncertain(state: InFlightState, reconciling: bool, pause: Option<Duration>) -> String {
        ApiError::ExecutionUncertain {
            execution_id: ExecutionId::generate(),
            state,
            reconciling,
            retry_after: pause,
        }
        .to_string()
    }

    #[test]
    fn an_uncertain_detail_says_when_to_retry_the_same_call() {
        assert_eq!(
            uncertain(InFlightState::Running, false, Some(Duration::from_millis(4200))),
            "an execution with this request_id is still running; retry the same call in 5 s to get its outcome"
        );
        assert_eq!(
            uncertain(InFlightState::Running, false, None),
            "an execution with this request_id is still running; retry the same call later to get its outcome"
        );
        assert!(uncertain(
            InFlightState::Interrupted,
            true,
            Some(Duration::from_secs(2))
        )
        .ends_with("retry the same call in 2 s to get the outcome it finds"));
        // Interrupted without a probe: no retry is advised, whatever the pause.
        assert_eq!(
            uncertain(InFlightState::Interrupted, false, Some(Duration::from_secs(2))),
            "an execution with this request_id was interrupted and its outcome is unknown; reconcile (e.g. search for its effect) instead of retrying"
        );
    }
}
