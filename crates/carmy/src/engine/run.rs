//! Starting an execution and running its tool, in the call's own detached, tracked task (what
//! remains after the caller's answer, in one of its own), for calls with and without replay
//! protection alike.

use super::{Answer, Engine, Refusal};
use crate::call::ValidatedCall;
use crate::fault;
use crate::outcome::{
    ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
use crate::store::IdempotencyKey;
use crate::tool::{Tool, ToolContext, ToolError, ToolErrorKind};
use chrono::{DateTime, SubsecRound, Utc};
use futures::future::Either;
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How a finished tool run ended, before it becomes an [`ExecutionResult`].
pub(super) type Ending = (ExecutionStatus, Value, Option<ExecutionError>);

/// What a tool's call gives once it ends: its value or error, or the panic it raised.
type RunOutput = std::thread::Result<Result<Value, ToolError>>;

/// What a waiting caller is told by an execution's task: the outcome (recorded, when the call
/// was protected) or why there is none.
pub(super) type Delivery = Result<RecordedResult, Refusal>;

/// One run of a tool, as [`Engine::start_execution`] takes it.
pub(super) struct Run {
    /// The tool to run.
    pub tool: Arc<dyn Tool>,
    /// The call it runs for.
    pub call: ValidatedCall,
    /// The execution the run belongs to.
    pub execution_id: ExecutionId,
    /// The reserved identity, when the call is protected; `None` for an unprotected run.
    pub key: Option<IdempotencyKey>,
    /// Which attempt of the execution this is: 1, or later after a takeover
    /// (docs/semantics.md §12.7).
    pub attempt: u32,
    /// The released execution this run replaces, if the store named one
    /// ([`crate::store::Reservation::Replaced`]).
    pub replaces: Option<crate::store::Replaced>,
}

impl Engine {
    /// Runs `run.tool` for `run.call` in the calling task, which is the call's own detached,
    /// tracked task ([`Engine::execute`]'s: a caller that goes away does not stop it); what the
    /// run still does once the answer is given goes on in a tracked task of its own. With a
    /// reserved identity (`run.key`) the outcome is recorded, as made by `run.attempt`, before
    /// it is answered; without, it is answered as is.
    ///
    /// # Errors
    /// [`Refusal::RecordingPending`] when the outcome could not be recorded at the first
    /// attempt (the task keeps trying); [`Refusal::Lost`] when an unprotected run's task ended
    /// without an outcome.
    pub(super) async fn start_execution(self: &Arc<Self>, run: Run) -> Result<Answer, Refusal> {
        let Run {
            tool,
            call,
            execution_id,
            key,
            attempt,
            replaces,
        } = run;
        // A rerun says so (docs/semantics.md §12.1): the released execution the store named,
        // or, for a takeover, the same execution's interrupted earlier attempt.
        let rerun_of = replaces.or_else(|| {
            (attempt > 1).then(|| crate::store::Replaced {
                execution_id: execution_id.clone(),
                ended: crate::store::ReplacedEnd::TakenOver { attempt },
            })
        });
        let context = ToolContext {
            principal: call.principal().to_owned(),
            session_id: call.session_id().to_owned(),
            request_id: call.request_id().map(str::to_owned),
            execution_id: execution_id.clone(),
            traceparent: call.traceparent().map(str::to_owned),
            timeout: tool.timeout().unwrap_or(self.config.default_tool_timeout),
        };
        let span = tracing::info_span!(
            "carmy.execution",
            execution_id = execution_id.as_str(),
            tool = tool.name(),
            traceparent = call.traceparent(),
        );
        // The call's span (this runs inside it): the tool's and the completion's spans are its
        // children in exported traces, whatever task they run in.
        let call_span = tracing::Span::current();
        let tool_span = crate::trace::exported_span(|| {
            tracing::info_span!(
                parent: &call_span,
                "carmy.tool",
                tool = tool.name(),
                execution_id = execution_id.as_str(),
                attempt = i64::from(attempt),
            )
        });
        let complete_span = crate::trace::exported_span(|| {
            tracing::info_span!(
                parent: &call_span,
                "carmy.complete",
                execution_id = execution_id.as_str(),
            )
        });
        let fingerprint = call.fingerprint().clone();
        let parts = call.parts();
        let arguments = call.into_arguments();
        let protected = key.is_some();
        let (done_tx, done_rx) = oneshot::channel();
        let cancel = self.track(&execution_id, protected);
        let engine = Arc::clone(self);
        let task = async move {
            let _running = engine.running_guard(context.execution_id.clone());
            let _counted = engine.metrics.running(tool.name());
            let execution_id = context.execution_id.clone();
            let result = match engine
                .run_tool(tool.as_ref(), context, arguments, &cancel)
                .instrument(tool_span)
                .await
            {
                Ok(result) => result,
                Err(not_executed) => {
                    if let Some(key) = key {
                        engine
                            .release_now(key, execution_id.clone())
                            .instrument(complete_span)
                            .await;
                    }
                    let _ = done_tx.send(Err(not_executed.into_refusal(execution_id, attempt)));
                    return;
                }
            };
            // Serialised once, here; the store, the cache and the response use this text.
            let result = RecordedResult::new(result)
                .with_attempt(attempt)
                .with_parts(parts);
            match key {
                Some(key) => {
                    fault::point(fault::AFTER_TOOL);
                    engine
                        .record(&key, &fingerprint, result, done_tx)
                        .instrument(complete_span)
                        .await;
                }
                // The caller may have gone; nothing else wants the outcome.
                None => drop(done_tx.send(Ok(result))),
            }
        };
        // Run here, in the call's own task (`Engine::execute` started it, so a caller who
        // stops waiting does not stop the run), until the caller has its answer; whatever the
        // run still does then (retrying its record) goes on in a tracked task of its own. One
        // task per call, not two, on the common path (issue 39). A panic of the run (a bug: a
        // tool's own panic is caught in `run_tool`) drops `done_tx`, as the run's own task did.
        let run = Box::pin(
            AssertUnwindSafe(task.instrument(span))
                .catch_unwind()
                .map(drop),
        );
        let delivered = match futures::future::select(run, done_rx).await {
            Either::Left(((), done_rx)) => done_rx.await,
            Either::Right((delivered, rest)) => {
                self.executions.spawn(rest);
                delivered
            }
        };
        match delivered {
            Ok(Ok(result)) => Ok(Answer {
                result,
                replayed: false,
                expires_at: None,
                rerun_of,
            }),
            Ok(Err(refusal)) => Err(refusal),
            Err(_) if protected => Err(Refusal::RecordingPending { execution_id }),
            Err(_) => Err(Refusal::Lost { execution_id }),
        }
    }

    /// Runs the tool under its deadline and its cancellation token; never panics.
    ///
    /// # Errors
    /// The tool's [`ToolErrorKind::NotExecuted`] error: its effect provably did not happen and
    /// nothing must be recorded.
    async fn run_tool(
        &self,
        tool: &dyn Tool,
        context: ToolContext,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<ExecutionResult, NotExecuted> {
        let deadline = tool.timeout().unwrap_or(self.config.default_tool_timeout);
        let started_at = now_millis();
        let clock = std::time::Instant::now();
        let execution_id = context.execution_id.clone();
        let request_id = context.request_id.clone();
        let session_id = context.session_id.clone();
        self.metrics.tool_started(tool.name());
        let run = AssertUnwindSafe(tool.call(context, arguments)).catch_unwind();
        if cfg!(feature = "fault-injection") {
            tokio::spawn(async {
                tokio::task::yield_now().await;
                fault::point(fault::DURING_TOOL);
            });
        }
        let run = tokio::time::timeout(deadline, run);
        tokio::pin!(run);
        let ran = tokio::select! {
            outcome = &mut run => Some(outcome),
            () = cancel.cancelled() => match self.grace_after_stop(&execution_id) {
                // Stopped because the lease lapsed: the tool may be finishing an effect whose
                // identity (an order id) only its outcome names, so it gets a bounded grace.
                Some(grace) => tokio::time::timeout(grace, &mut run).await.ok(),
                None => None,
            },
        };
        let (status, data, error) = match ran {
            Some(outcome) => self.ending(tool, outcome, deadline, clock)?,
            None => (
                ExecutionStatus::Cancelled,
                Value::Null,
                Some(if self.cancel_executions.is_cancelled() {
                    ExecutionError::cancelled_at_shutdown()
                } else if self.stopped_for_lease_loss(&execution_id) {
                    ExecutionError::cancelled_on_lease_loss()
                } else {
                    ExecutionError::cancelled_on_request()
                }),
            ),
        };
        self.metrics
            .tool_finished(tool.name(), status, clock.elapsed());
        Ok(ExecutionResult {
            execution_id,
            status,
            data,
            error,
            tool: tool.name().to_owned(),
            request_id,
            session_id,
            started_at,
            finished_at: now_millis(),
            resolution: None,
        })
    }

    /// How a tool run that ended by itself (or reached its deadline) is recorded.
    ///
    /// # Errors
    /// The tool's [`ToolErrorKind::NotExecuted`] error.
    fn ending(
        &self,
        tool: &dyn Tool,
        outcome: Result<RunOutput, tokio::time::error::Elapsed>,
        deadline: std::time::Duration,
        clock: std::time::Instant,
    ) -> Result<Ending, NotExecuted> {
        let failed = |error| (ExecutionStatus::Failed, Value::Null, Some(error));
        Ok(match outcome {
            Ok(Ok(Ok(data))) => self.check_recordable(data),
            Ok(Ok(Err(tool_error))) => {
                if let ToolErrorKind::NotExecuted { retry_after } = tool_error.kind {
                    self.metrics.tool_not_executed(tool.name(), clock.elapsed());
                    return Err(NotExecuted {
                        error: tool_error,
                        retry_after,
                    });
                }
                if tool_error.kind == ToolErrorKind::TimedOut {
                    (
                        ExecutionStatus::TimedOut,
                        Value::Null,
                        Some(tool_error.into()),
                    )
                } else {
                    failed(tool_error.into())
                }
            }
            Ok(Err(_panic)) => failed(ExecutionError::panicked()),
            Err(_elapsed) => (
                ExecutionStatus::TimedOut,
                Value::Null,
                Some(ExecutionError::timeout(deadline)),
            ),
        })
    }

    /// Admits a tool's value as a `completed` outcome only if it can be recorded and replayed
    /// exactly (docs/semantics.md §4): at most
    /// [`EngineConfig::max_result_bytes`](super::EngineConfig) of JSON (`RESULT_TOO_LARGE`
    /// otherwise), and reading its stored text back gives the same value (`RESULT_NOT_RECORDABLE`
    /// otherwise: serde_json gives a few member names a special meaning and bounds nesting depth
    /// when reading, so such a value would replay differently or not at all). Either failure is
    /// itself recorded as `failed` and replayed.
    pub(super) fn check_recordable(&self, data: Value) -> Ending {
        let failed = |error| (ExecutionStatus::Failed, Value::Null, Some(error));
        let Ok(text) = serde_json::to_string(&data) else {
            return failed(ExecutionError::not_recordable(
                "the result cannot be written as JSON",
            ));
        };
        if text.len() > self.config.max_result_bytes {
            return failed(ExecutionError::result_too_large(
                text.len(),
                self.config.max_result_bytes,
            ));
        }
        // A record nests `data` one level down, as this probe does.
        #[derive(serde::Deserialize)]
        struct Probe {
            data: Value,
        }
        match serde_json::from_str::<Probe>(&format!(r#"{{"data":{text}}}"#)) {
            Ok(probe) if probe.data == data => (ExecutionStatus::Completed, data, None),
            _ => failed(ExecutionError::not_recordable(
                "the result would not read back unchanged (reserved member names or nesting deeper than 126 levels)",
            )),
        }
    }
}

/// A tool's report that its effect provably did not happen ([`ToolErrorKind::NotExecuted`]).
struct NotExecuted {
    error: ToolError,
    retry_after: Option<std::time::Duration>,
}

impl NotExecuted {
    /// The refusal of attempt `attempt` of `execution_id` (above 1: a takeover, handed back).
    fn into_refusal(self, execution_id: ExecutionId, attempt: u32) -> Refusal {
        Refusal::NotExecuted {
            execution_id,
            handed_back: attempt > 1,
            code: self.error.code,
            message: self.error.message,
            retry_after: self.retry_after,
        }
    }
}

/// The current time at the millisecond precision outcomes are recorded with, so a recorded
/// outcome reads back equal to the one returned first.
fn now_millis() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}
