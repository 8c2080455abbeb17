//! What completes the engine's answer to a call, so that every front answers the same without
//! asking the engine again (docs/semantics.md §5): the record's `expires_at`, the registered
//! tool closest to an unknown name, and how long to wait before retrying a call whose execution
//! is still running.

use super::{Answer, Engine, Refusal};
use crate::store::InFlightState;
use std::time::Duration;

/// Longest `Retry-After` suggested for a running execution: a tool with a long deadline usually
/// finishes sooner, and a retry that comes early only gets the same answer again.
const MAX_RUNNING_RETRY_AFTER: Duration = Duration::from_secs(5);

impl Engine {
    /// `answer` to a call of `tool`, completed: `expires_at` on an answer to a call with a
    /// request id (`recorded`; an unprotected call holds no identity that could expire),
    /// [`Refusal::UnknownTool::closest`] and, for a running execution,
    /// [`Refusal::Uncertain::retry_after`].
    pub(super) fn complete_answer(
        &self,
        answer: Result<Answer, Refusal>,
        tool: &str,
        recorded: bool,
    ) -> Result<Answer, Refusal> {
        match answer {
            Ok(mut answer) => {
                // A call without a request id holds no identity, so nothing expires.
                answer.expires_at = if recorded {
                    self.expires_at(answer.result.result())
                } else {
                    None
                };
                Ok(answer)
            }
            Err(Refusal::UnknownTool { tool, .. }) => Err(Refusal::UnknownTool {
                closest: self.closest_tool(&tool),
                tool,
            }),
            Err(Refusal::Uncertain {
                execution_id,
                state: InFlightState::Running,
                reconciling,
                ..
            }) => Err(Refusal::Uncertain {
                execution_id,
                state: InFlightState::Running,
                reconciling,
                retry_after: Some(self.running_retry_after(tool)),
            }),
            Err(refusal) => Err(refusal),
        }
    }

    /// The registered tool whose name is closest to `name`, if one is close enough to be a
    /// likely typo: a case-insensitive match, or an edit distance (Damerau-Levenshtein) of at
    /// most a third of the longer name, and at least 1.
    fn closest_tool(&self, name: &str) -> Option<String> {
        let wanted = name.to_lowercase();
        self.tools
            .snapshot()
            .iter()
            .map(|tool| {
                let candidate = tool.name();
                let distance = strsim::damerau_levenshtein(&wanted, &candidate.to_lowercase());
                (distance, candidate)
            })
            .filter(|(distance, candidate)| {
                *distance <= (wanted.chars().count().max(candidate.chars().count()) / 3).max(1)
            })
            .min()
            .map(|(_, candidate)| candidate.to_owned())
    }

    /// How long a caller should wait before retrying a call whose execution of `tool` is
    /// `running` (the `retry_after` of [`Refusal::Uncertain`], HTTP's `Retry-After`; also for a
    /// front that stops waiting for a running call on a deadline of its own, as MCP's
    /// `CARMY_MCP_ANSWER_WITHIN_MS`): the tool's deadline (its own, or
    /// [`EngineConfig::default_tool_timeout`](super::EngineConfig)), by which a live owner has
    /// an outcome, capped at 5 s. An owner that died is reported
    /// `interrupted` once its lease lapses, which the stores keep at a few seconds to tens of
    /// seconds, so the cap also bounds the wait for that answer.
    pub fn running_retry_after(&self, tool: &str) -> Duration {
        let deadline = self
            .tools
            .snapshot()
            .get(tool)
            .and_then(|registered| registered.tool.timeout())
            .unwrap_or(self.config.default_tool_timeout);
        deadline.min(MAX_RUNNING_RETRY_AFTER)
    }
}
