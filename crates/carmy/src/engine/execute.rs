//! One call through the engine (docs/semantics.md §3): counted and traced in a task of its own,
//! the tool and its arguments checked, the identity reserved, and the reservation's answer
//! followed: a new execution, an answer from the existing record, a takeover or a
//! reconciliation of an interrupted one.

use super::answer;
use super::run::Run;
use super::{Answer, Engine, Refusal};
use crate::call::ValidatedCall;
use crate::fault;
use crate::metrics::UNREGISTERED_TOOL;
use crate::outcome::ExecutionId;
use crate::registry::RegisteredTool;
use crate::store::{Claim, ExecutionIntent, Existing, InFlightState, Reservation, StoreError};
use crate::tool::OnInterrupted;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

impl Engine {
    /// Executes one call per docs/semantics.md §3: the identity's record is consulted before any
    /// gate that depends on state, the tool runs only after a successful reservation, and the
    /// answer is given only after the outcome is recorded.
    ///
    /// The work runs in a task of its own: a caller that stops waiting (a client that
    /// disconnected, a cancelled MCP request) never leaves a reservation whose tool does not
    /// start; the execution runs on and is recorded, and a retry replays it (docs/semantics.md
    /// §4). An answer the store holds in memory (a replay or a conflict of a cached record,
    /// §8.4) reserves nothing and is given at once, without a task.
    ///
    /// # Errors
    /// The [`Refusal`] of docs/semantics.md §3 for every row without an outcome.
    ///
    /// Every call is counted once in `carmy_calls_total` by its [`CallOutcome`](crate::metrics::CallOutcome) and runs in a
    /// `carmy.call` span (fields `tool`, `principal`, `request_id`, `session_id`,
    /// `traceparent`, and `execution_id` and `outcome` once known), a child of the incoming
    /// `traceparent` in exported traces; the reservation runs in `carmy.reserve`, a tool run in
    /// `carmy.execution` (logs) with `carmy.tool` and `carmy.complete` below the call
    /// (docs/semantics.md §13, docs/operations.md "Traces").
    pub async fn execute(self: &Arc<Self>, call: ValidatedCall) -> Result<Answer, Refusal> {
        let tool_label = if self.tools.snapshot().get(call.tool()).is_some() {
            call.tool().to_owned()
        } else {
            UNREGISTERED_TOOL.to_owned()
        };
        let span = tracing::info_span!(
            "carmy.call",
            tool = call.tool(),
            principal = call.principal(),
            request_id = call.request_id(),
            session_id = call.session_id(),
            traceparent = call.traceparent(),
            execution_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        crate::trace::link_to_caller(&span, call.traceparent());
        // A finished record held in memory answers at once (§8.4): nothing is reserved, so
        // there is nothing a caller who stops waiting could leave behind, and no task is needed.
        if let Some(answer) = span.in_scope(|| self.answer_from_memory(&call)) {
            let recorded = call.request_id().is_some();
            return span.in_scope(|| self.answered(answer, call.tool(), recorded, &tool_label));
        }
        let engine = Arc::clone(self);
        // Counted inside the task, so a caller that stops waiting is counted all the same. Boxed:
        // the task then moves a pointer, not the whole call's state, each time tokio moves it.
        let task = self.executions.spawn(Box::pin(
            async move {
                let tool = call.tool().to_owned();
                let recorded = call.request_id().is_some();
                let answer = engine.execute_attached(call).await;
                engine.answered(answer, &tool, recorded, &tool_label)
            }
            .instrument(span),
        ));
        match task.await {
            Ok(answer) => answer,
            // A panic here is a bug in the engine (a tool's panic is caught and recorded);
            // surface it where it would have surfaced without the task.
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }

    /// The answer to `call` from a finished record held in memory, as the store would give it
    /// (docs/semantics.md §8.4): a replay or a conflict, before the tool's checks or a new
    /// intent; `None` for a call without a request id or whose record memory does not hold.
    fn answer_from_memory(&self, call: &ValidatedCall) -> Option<Result<Answer, Refusal>> {
        let key = call.key()?;
        let claim = Claim {
            key: &key,
            fingerprint: call.fingerprint(),
        };
        let Reservation::Existing(existing @ (Existing::Replay(_) | Existing::Conflict { .. })) =
            self.store
                .answer_from_memory(claim, self.config.retention)?
        else {
            return None;
        };
        let answer = answer::from_existing(existing, call);
        // The reservation's step in an exported trace, as the store's answer has it (the same
        // span tree whichever answered), naming the record's execution.
        drop(crate::trace::exported_span(|| {
            let execution_id = answer::execution_id_of(&answer).map(ExecutionId::as_str);
            tracing::info_span!("carmy.reserve", execution_id, from_memory = true)
        }));
        Some(answer)
    }

    /// `answer` to a call of `tool` completed with its hints, recorded in the current
    /// `carmy.call` span (`execution_id`, `outcome`) and counted in `carmy_calls_total` under
    /// `tool_label`; `recorded`: the call had a request id.
    fn answered(
        &self,
        answer: Result<Answer, Refusal>,
        tool: &str,
        recorded: bool,
        tool_label: &str,
    ) -> Result<Answer, Refusal> {
        let answer = self.complete_answer(answer, tool, recorded);
        let current = tracing::Span::current();
        if let Some(execution_id) = answer::execution_id_of(&answer) {
            current.record("execution_id", execution_id.as_str());
        }
        let outcome = answer::call_outcome(&answer);
        current.record("outcome", outcome.trace_label());
        self.metrics.call_answered(tool_label, outcome);
        answer
    }

    /// [`Engine::execute`] in the caller's task: what a retry answered from a record (a
    /// takeover, a reconciliation, a wait) runs again with.
    pub(super) async fn execute_attached(
        self: &Arc<Self>,
        call: ValidatedCall,
    ) -> Result<Answer, Refusal> {
        let Some(key) = call.key() else {
            let registered = self.runnable_tool(&call)?;
            let tool = Arc::clone(&registered.tool);
            return self
                .start_execution(Run {
                    tool,
                    call,
                    execution_id: ExecutionId::generate(),
                    key: None,
                    attempt: 1,
                    replaces: None,
                })
                .await;
        };
        let registered = match self.runnable_tool(&call) {
            Ok(registered) => registered,
            Err(rejection) => return self.recorded_or(&key, &call, rejection).await,
        };
        // Arguments too large to keep refuse a new identity only: an existing one answers from
        // its record, as a memory answer would (§3 step 7).
        let intent = match self.intent(&registered, &call) {
            Ok(intent) => intent,
            Err(rejection) => return self.recorded_or(&key, &call, rejection).await,
        };
        let reserving = Instant::now();
        let reserved = self
            .store
            .reserve(
                Claim {
                    key: &key,
                    fingerprint: call.fingerprint(),
                },
                &intent,
            )
            .instrument(crate::trace::exported_span(|| {
                tracing::info_span!("carmy.reserve", execution_id = intent.execution_id.as_str())
            }))
            .await;
        self.metrics.reserve_took(reserving.elapsed());
        let replaces = match reserved {
            Ok(Reservation::Reserved) => None,
            Ok(Reservation::Replaced(replaced)) => Some(replaced),
            Ok(Reservation::Existing(Existing::Uncertain {
                execution_id,
                state: InFlightState::Interrupted,
            })) if registered.tool.probe().is_some() => {
                let tool = Arc::clone(&registered.tool);
                return self.reconcile_retry(tool, call, key, execution_id).await;
            }
            Ok(Reservation::Existing(Existing::Uncertain {
                execution_id,
                state: InFlightState::Interrupted,
            })) if registered.tool.on_interrupted() == OnInterrupted::Rerun => {
                let tool = Arc::clone(&registered.tool);
                return self.take_over(tool, call, key, execution_id).await;
            }
            Ok(Reservation::Existing(existing)) => {
                return self.answer_existing(call, &key, existing).await
            }
            Err(error) => {
                if matches!(error, StoreError::Indeterminate(_)) {
                    self.release_in_background(key, intent.execution_id);
                }
                return Err(self.refusal(error));
            }
        };
        fault::point(fault::AFTER_RESERVE);
        let tool = Arc::clone(&registered.tool);
        self.start_execution(Run {
            tool,
            call,
            execution_id: intent.execution_id,
            key: Some(key),
            attempt: 1,
            replaces,
        })
        .await
    }

    /// The record of `key` for a call whose tool refused it: an honest retry still gets its
    /// record even if the tool is gone or its schema changed; otherwise `rejection` stands and
    /// nothing is reserved.
    pub(super) async fn recorded_or(
        &self,
        key: &crate::store::IdempotencyKey,
        call: &ValidatedCall,
        rejection: Refusal,
    ) -> Result<Answer, Refusal> {
        match self.lookup(key).await? {
            Some(record) => {
                answer::from_existing(Existing::for_record(record, call.fingerprint()), call)
            }
            None => Err(rejection),
        }
    }

    /// A new execution's intent for `call` of `registered`: a fresh id, the call's parts, the
    /// retention and the kept arguments (docs/semantics.md §8.5).
    ///
    /// # Errors
    /// [`Refusal::ArgumentsTooLarge`] and [`Refusal::Invalid`] from [`Self::kept_arguments`].
    pub(super) fn intent(
        &self,
        registered: &RegisteredTool,
        call: &ValidatedCall,
    ) -> Result<ExecutionIntent, Refusal> {
        Ok(ExecutionIntent {
            execution_id: ExecutionId::generate(),
            tool: call.tool().to_owned(),
            parts: Some(call.parts()),
            retention: self.config.retention,
            arguments: self.kept_arguments(registered, call)?,
        })
    }

    /// The arguments to keep with `call`'s execution (docs/semantics.md §8.5): redacted per the
    /// tool and `CARMY_KEEP_ARGUMENTS`, refused when longer than a record may keep.
    fn kept_arguments(
        &self,
        registered: &RegisteredTool,
        call: &ValidatedCall,
    ) -> Result<Option<String>, Refusal> {
        let kept = crate::arguments::kept_text(
            self.config.keep_arguments,
            registered.tool.redaction(),
            call.arguments(),
        )
        .map_err(|error| Refusal::Invalid(format!("arguments: {error}")))?;
        match kept {
            Some(text) if text.len() > self.config.max_result_bytes => {
                Err(Refusal::ArgumentsTooLarge {
                    bytes: text.len(),
                    limit: self.config.max_result_bytes,
                })
            }
            kept => Ok(kept),
        }
    }

    /// The registered tool `call` names, if its arguments pass the schema and the tool's own
    /// checks.
    fn runnable_tool(&self, call: &ValidatedCall) -> Result<Arc<RegisteredTool>, Refusal> {
        let registered = self
            .tools
            .snapshot()
            .get(call.tool())
            .cloned()
            .ok_or_else(|| Refusal::UnknownTool {
                tool: call.tool().to_owned(),
                closest: None,
            })?;
        if registered.tool.held_by_client() {
            return Err(Refusal::Invalid(format!(
                "tool {:?} is run by its client, not by the gateway: reserve it with POST /v1/held and record its outcome there (docs/semantics.md §16)",
                call.tool()
            )));
        }
        registered.validate(call.arguments()).map_err(|problems| {
            Refusal::Invalid(format!(
                "arguments do not match the tool's schema: {problems}"
            ))
        })?;
        registered
            .tool
            .check_arguments(call.arguments())
            .map_err(|problem| Refusal::Invalid(format!("arguments: {problem}")))?;
        Ok(registered)
    }
}
