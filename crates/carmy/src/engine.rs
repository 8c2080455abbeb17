//! The execution engine: reserve, run detached, record, answer (contract §3, §4).

use crate::error::ApiError;
use crate::fault;
use crate::fingerprint::Fingerprint;
use crate::metrics::Metrics;
use crate::outcome::{ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus};
use crate::runtime::{
    ExecutionIntent, IdempotencyKey, IdempotencyStore, InFlightState, RecordState, Reservation,
    StoreError, DEFAULT_SESSION,
};
use crate::tool::{RegisteredTool, Tool, ToolContext, ToolRegistry};
use chrono::{DateTime, SubsecRound, Utc};
use futures::FutureExt;
use serde_json::Value;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Limits and timings of the engine. All durations are wall-clock.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Deadline of a tool that sets none (`CARMY_TOOL_TIMEOUT_MS`, default 30 s); reaching it
    /// records `timed_out`.
    pub default_tool_timeout: Duration,
    /// Largest recorded `data`, in bytes of compact JSON (default 1 MiB); a larger result is
    /// recorded as `failed` with `RESULT_TOO_LARGE` (contract §4).
    pub max_result_bytes: usize,
    /// How long shutdown waits for running executions before recording them `cancelled`.
    pub drain_period: Duration,
    /// First pause between attempts to record an outcome after a store failure; it doubles up
    /// to [`EngineConfig::complete_retry_max`].
    pub complete_retry_initial: Duration,
    /// Longest pause between attempts to record an outcome.
    pub complete_retry_max: Duration,
    /// How long `POST /v1/executions/{id}/cancel` waits for the cancelled outcome to be recorded
    /// before answering 202 (cancel requested, outcome not recorded yet).
    pub cancel_wait: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            default_tool_timeout: Duration::from_secs(30),
            max_result_bytes: 1024 * 1024,
            drain_period: Duration::from_secs(30),
            complete_retry_initial: Duration::from_millis(100),
            complete_retry_max: Duration::from_secs(5),
            cancel_wait: Duration::from_secs(10),
        }
    }
}

/// A call that passed every stateless check: identifiers valid, JSON strict, fingerprint made.
#[derive(Clone, Debug)]
pub struct ValidatedCall {
    /// The authenticated principal.
    pub principal: String,
    /// The tool's name (it may still be unknown).
    pub tool: String,
    /// The arguments object.
    pub arguments: Value,
    /// The caller's `request_id`; `None` runs without replay protection.
    pub request_id: Option<String>,
    /// The session; `None` means [`DEFAULT_SESSION`].
    pub session_id: Option<String>,
    /// The call's fingerprint (contract §2).
    pub fingerprint: Fingerprint,
}

/// A successful answer: the outcome and whether it was replayed from the record.
#[derive(Clone, Debug, PartialEq)]
pub struct CallAnswer {
    /// The recorded outcome.
    pub result: ExecutionResult,
    /// True when the tool did not run for this call.
    pub replayed: bool,
}

/// The answer to a cancel request.
#[derive(Clone, Debug, PartialEq)]
pub enum CancelAnswer {
    /// The execution finished (normally `cancelled`; a tool that returned first keeps its
    /// outcome): the recorded outcome.
    Finished(ExecutionResult),
    /// Cancellation was requested but no outcome was recorded within the wait (202).
    Pending(ExecutionId),
}

/// Runs tool calls under the idempotency rules. Cheap to share behind an `Arc`.
pub struct Engine {
    store: Arc<dyn IdempotencyStore>,
    tools: ToolRegistry,
    config: EngineConfig,
    metrics: Metrics,
    executions: TaskTracker,
    /// Cancelled at the end of the drain period: every running execution is recorded `cancelled`.
    cancel_executions: CancellationToken,
    /// This process's running executions, each with its own token (a child of the above).
    running: Mutex<HashMap<ExecutionId, CancellationToken>>,
}

/// Removes an execution from [`Engine::running`] when its task ends, however it ends.
struct RunningGuard<'a> {
    engine: &'a Engine,
    execution_id: ExecutionId,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.engine.running_map().remove(&self.execution_id);
    }
}

impl Engine {
    pub(crate) fn new(
        store: Arc<dyn IdempotencyStore>,
        tools: ToolRegistry,
        config: EngineConfig,
        metrics: Metrics,
    ) -> Self {
        Self {
            store,
            tools,
            config,
            metrics,
            executions: TaskTracker::new(),
            cancel_executions: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
        }
    }

    fn running_map(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, CancellationToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a running execution and returns its cancellation token.
    fn track(&self, execution_id: &ExecutionId) -> CancellationToken {
        let token = self.cancel_executions.child_token();
        self.running_map()
            .insert(execution_id.clone(), token.clone());
        token
    }

    /// Forwards cancel requests published by other processes (see
    /// [`IdempotencyStore::cancel_requests`]) to the executions this process runs. Needs a
    /// Tokio runtime; does nothing for process-local stores.
    pub fn listen_for_remote_cancels(self: &Arc<Self>) {
        let Some(mut requests) = self.store.cancel_requests() else {
            return;
        };
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let execution_id = match requests.recv().await {
                    Ok(execution_id) => execution_id,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "missed cancel requests");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let token = engine.running_map().get(&execution_id).cloned();
                if let Some(token) = token {
                    tracing::info!(%execution_id, "cancelling on request of another process");
                    token.cancel();
                }
            }
        });
    }

    /// Cancels a running execution of `principal` (contract: cancel endpoint).
    ///
    /// - not `principal`'s, or unknown → [`ApiError::NotFound`];
    /// - already finished → [`ApiError::ExecutionFinished`] (the record is unchanged);
    /// - interrupted (its process died) → [`ApiError::ExecutionUncertain`]: nothing can stop it;
    /// - running here or on another replica → cancelled, and once its outcome is recorded
    ///   (normally `cancelled`) [`CancelAnswer::Finished`]; if that takes longer than
    ///   [`EngineConfig::cancel_wait`], [`CancelAnswer::Pending`].
    ///
    /// # Errors
    /// The [`ApiError`]s above, or [`ApiError::StoreUnavailable`].
    pub async fn cancel(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<CancelAnswer, ApiError> {
        let state = self.execution_state(principal, execution_id).await?;
        match state {
            RecordState::Finished(_) => {
                return Err(ApiError::ExecutionFinished {
                    execution_id: execution_id.clone(),
                })
            }
            RecordState::InFlight(InFlightState::Interrupted) => {
                return Err(ApiError::ExecutionUncertain {
                    execution_id: execution_id.clone(),
                    state: InFlightState::Interrupted,
                })
            }
            RecordState::InFlight(InFlightState::Running) => {}
        }
        let local = self.running_map().get(execution_id).cloned();
        match local {
            Some(token) => token.cancel(),
            None => self
                .store
                .request_cancel(execution_id)
                .await
                .map_err(store_failure)?,
        }
        let deadline = Instant::now() + self.config.cancel_wait;
        loop {
            if let RecordState::Finished(result) =
                self.execution_state(principal, execution_id).await?
            {
                return Ok(CancelAnswer::Finished(result));
            }
            if Instant::now() >= deadline {
                return Ok(CancelAnswer::Pending(execution_id.clone()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn execution_state(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<RecordState, ApiError> {
        self.store
            .find_execution(principal, execution_id)
            .await
            .map_err(store_failure)?
            .map(|found| found.record.state)
            .ok_or_else(|| ApiError::NotFound("no such execution".into()))
    }

    /// The store this engine records into.
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.store
    }

    /// The registered tools, by name.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    /// How long shutdown lets running executions finish.
    pub fn drain_period(&self) -> Duration {
        self.config.drain_period
    }

    /// The process metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Executes one call per contract §3: the identity's record is consulted before any gate
    /// that depends on state, the tool runs only after a successful reservation, and the answer is
    /// sent only after the outcome is recorded.
    ///
    /// # Errors
    /// The [`ApiError`] of contract §3 for every non-200 row.
    pub async fn execute(self: &Arc<Self>, call: ValidatedCall) -> Result<CallAnswer, ApiError> {
        let session_id = call
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION.to_owned());
        let Some(request_id) = call.request_id.clone() else {
            let registered = self.runnable_tool(&call)?;
            let tool = Arc::clone(&registered.tool);
            let execution_id = ExecutionId::generate();
            let result = self
                .spawn_unprotected(tool, &call, session_id, execution_id)
                .await?;
            return Ok(CallAnswer {
                result,
                replayed: false,
            });
        };
        let key = IdempotencyKey::new(call.principal.clone(), session_id, request_id);

        let registered = match self.runnable_tool(&call) {
            Ok(registered) => registered,
            Err(rejection) => {
                // An honest retry still gets its record even if the tool is gone or its schema
                // changed; otherwise the rejection stands and nothing is reserved.
                let record = self.store.lookup(&key).await.map_err(store_failure)?;
                return match record {
                    Some(record) => answer(Reservation::for_existing(record, &call.fingerprint)),
                    None => Err(rejection),
                };
            }
        };

        let intent = ExecutionIntent {
            execution_id: ExecutionId::generate(),
            tool: call.tool.clone(),
        };
        let reservation = match self.store.reserve(&key, &call.fingerprint, &intent).await {
            Ok(reservation) => reservation,
            Err(error) => {
                if matches!(error, StoreError::Indeterminate(_)) {
                    self.release_in_background(key.clone(), intent.execution_id.clone());
                }
                return Err(store_failure(error));
            }
        };
        if reservation != Reservation::Reserved {
            return answer(reservation);
        }
        fault::point(fault::AFTER_RESERVE);

        let tool = Arc::clone(&registered.tool);
        let (recorded_tx, recorded_rx) = oneshot::channel();
        let engine = Arc::clone(self);
        let execution_id = intent.execution_id.clone();
        let fingerprint = call.fingerprint.clone();
        let context = ToolContext {
            principal: call.principal,
            session_id: key.session_id.clone(),
            request_id: Some(key.request_id.clone()),
            execution_id: execution_id.clone(),
        };
        let arguments = call.arguments;
        let cancel = self.track(&execution_id);
        self.executions.spawn(async move {
            let _running = RunningGuard {
                engine: &engine,
                execution_id: context.execution_id.clone(),
            };
            let result = engine
                .run_tool(tool.as_ref(), context, arguments, &cancel)
                .await;
            fault::point(fault::AFTER_TOOL);
            engine.record(&key, &fingerprint, result, recorded_tx).await;
        });
        match recorded_rx.await {
            Ok(Some(result)) => Ok(CallAnswer {
                result,
                replayed: false,
            }),
            _ => Err(ApiError::RecordingPending { execution_id }),
        }
    }

    /// Waits for running executions up to the drain period, then cancels the rest (recorded
    /// `cancelled`) and waits for their records, at most `record_grace` more.
    pub async fn drain(&self, record_grace: Duration) {
        self.executions.close();
        if tokio::time::timeout(self.config.drain_period, self.executions.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.executions.len(),
                "drain period over; cancelling running executions"
            );
            self.cancel_executions.cancel();
            if tokio::time::timeout(record_grace, self.executions.wait())
                .await
                .is_err()
            {
                tracing::error!(
                    pending = self.executions.len(),
                    "outcomes still unrecorded at exit; they will read as interrupted"
                );
            }
        }
    }

    /// Starts cancelling running executions now (each is recorded `cancelled`).
    pub fn cancel_all(&self) {
        self.cancel_executions.cancel();
    }

    fn runnable_tool(&self, call: &ValidatedCall) -> Result<&RegisteredTool, ApiError> {
        let registered = self
            .tools
            .get(&call.tool)
            .ok_or_else(|| ApiError::UnknownTool(call.tool.clone()))?;
        registered.validate(&call.arguments).map_err(|problems| {
            ApiError::InvalidRequest(format!(
                "arguments do not match the tool's schema: {problems}"
            ))
        })?;
        Ok(registered)
    }

    async fn spawn_unprotected(
        self: &Arc<Self>,
        tool: Arc<dyn Tool>,
        call: &ValidatedCall,
        session_id: String,
        execution_id: ExecutionId,
    ) -> Result<ExecutionResult, ApiError> {
        let engine = Arc::clone(self);
        let context = ToolContext {
            principal: call.principal.clone(),
            session_id,
            request_id: None,
            execution_id,
        };
        let arguments = call.arguments.clone();
        let cancel = self.track(&context.execution_id);
        self.executions
            .spawn(async move {
                let _running = RunningGuard {
                    engine: &engine,
                    execution_id: context.execution_id.clone(),
                };
                engine
                    .run_tool(tool.as_ref(), context, arguments, &cancel)
                    .await
            })
            .await
            .map_err(|error| {
                tracing::error!(%error, "unprotected execution task failed");
                ApiError::Internal
            })
    }

    /// Runs the tool under its deadline and its cancellation token; never panics.
    async fn run_tool(
        &self,
        tool: &dyn Tool,
        context: ToolContext,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> ExecutionResult {
        let deadline = tool.timeout().unwrap_or(self.config.default_tool_timeout);
        let started_at = now_millis();
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
        let (status, data, error) = tokio::select! {
            outcome = tokio::time::timeout(deadline, run) => match outcome {
                Ok(Ok(Ok(data))) => self.check_recordable(data),
                Ok(Ok(Err(tool_error))) => (
                    ExecutionStatus::Failed,
                    Value::Null,
                    Some(ExecutionError { code: tool_error.code, message: tool_error.message }),
                ),
                Ok(Err(_panic)) => (
                    ExecutionStatus::Failed,
                    Value::Null,
                    Some(ExecutionError {
                        code: "TOOL_PANICKED".into(),
                        message: "the tool panicked; its effects are unknown".into(),
                    }),
                ),
                Err(_elapsed) => (
                    ExecutionStatus::TimedOut,
                    Value::Null,
                    Some(ExecutionError {
                        code: "TIMEOUT".into(),
                        message: format!(
                            "the tool's deadline of {} ms passed; its effects are unknown",
                            deadline.as_millis()
                        ),
                    }),
                ),
            },
            () = cancel.cancelled() => (
                ExecutionStatus::Cancelled,
                Value::Null,
                Some(ExecutionError {
                    code: "CANCELLED".into(),
                    message: if self.cancel_executions.is_cancelled() {
                        "the execution was cancelled at shutdown, after the drain period; its effects are unknown".into()
                    } else {
                        "the execution was cancelled on request; its effects are unknown".into()
                    },
                }),
            ),
        };
        self.metrics.tool_finished(tool.name(), status);
        ExecutionResult {
            execution_id,
            status,
            data,
            error,
            tool: tool.name().to_owned(),
            request_id,
            session_id,
            started_at,
            finished_at: now_millis(),
        }
    }

    /// Admits a tool's value as a `completed` outcome only if it can be recorded and replayed
    /// exactly (contract §4): at most [`EngineConfig::max_result_bytes`] of JSON
    /// (`RESULT_TOO_LARGE` otherwise), and reading its stored text back gives the same value
    /// (`RESULT_NOT_RECORDABLE` otherwise: serde_json gives a few member names a special meaning
    /// and bounds nesting depth when reading, so such a value would replay differently or not at
    /// all). Either failure is itself recorded as `failed` and replayed.
    fn check_recordable(&self, data: Value) -> (ExecutionStatus, Value, Option<ExecutionError>) {
        let failed = |code: &str, message: String| {
            (
                ExecutionStatus::Failed,
                Value::Null,
                Some(ExecutionError {
                    code: code.into(),
                    message,
                }),
            )
        };
        let Ok(text) = serde_json::to_string(&data) else {
            return failed(
                "RESULT_NOT_RECORDABLE",
                "the result cannot be written as JSON".into(),
            );
        };
        if text.len() > self.config.max_result_bytes {
            return failed(
                "RESULT_TOO_LARGE",
                format!(
                    "the result is {} bytes of JSON; the limit is {} bytes",
                    text.len(),
                    self.config.max_result_bytes
                ),
            );
        }
        // A record nests `data` one level down, as this probe does.
        #[derive(serde::Deserialize)]
        struct Probe {
            data: Value,
        }
        match serde_json::from_str::<Probe>(&format!(r#"{{"data":{text}}}"#)) {
            Ok(probe) if probe.data == data => (ExecutionStatus::Completed, data, None),
            _ => failed(
                "RESULT_NOT_RECORDABLE",
                "the result would not read back unchanged (reserved member names or nesting deeper than 126 levels)".into(),
            ),
        }
    }

    /// Frees a reservation that may have been made for an execution that will never run (the
    /// store failed mid-`reserve`), retrying until the store answers.
    fn release_in_background(self: &Arc<Self>, key: IdempotencyKey, execution_id: ExecutionId) {
        let engine = Arc::clone(self);
        self.executions.spawn(async move {
            let mut pause = engine.config.complete_retry_initial;
            loop {
                match engine.store.release(&key, &execution_id).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(%execution_id, %error, "freeing an unused reservation failed; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(engine.config.complete_retry_max);
                    }
                }
            }
        });
    }

    /// Records the outcome, telling the waiting caller after the first attempt (`Some` when it
    /// succeeded) and retrying failures in the background until the store accepts it.
    async fn record(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        result: ExecutionResult,
        recorded: oneshot::Sender<Option<ExecutionResult>>,
    ) {
        let mut recorded = Some(recorded);
        let mut pause = self.config.complete_retry_initial;
        loop {
            match self.store.complete(key, fingerprint, &result).await {
                Ok(()) => {
                    fault::point(fault::AFTER_COMPLETE);
                    if let Some(sender) = recorded.take() {
                        // The caller may have gone; the record stands either way.
                        let _ = sender.send(Some(result));
                    } else {
                        tracing::info!(execution_id = %result.execution_id, "outcome recorded after retries");
                    }
                    return;
                }
                Err(StoreError::NotOwner { execution_id }) => {
                    tracing::error!(%execution_id, "the reservation is no longer held by this execution; outcome not recorded");
                    if let Some(sender) = recorded.take() {
                        let _ = sender.send(None);
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(execution_id = %result.execution_id, %error, "recording the outcome failed; retrying");
                    if let Some(sender) = recorded.take() {
                        let _ = sender.send(None);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.config.complete_retry_max);
                }
            }
        }
    }
}

/// The current time at the millisecond precision outcomes are recorded with, so a recorded
/// outcome reads back equal to the one returned first.
fn now_millis() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

fn store_failure(error: StoreError) -> ApiError {
    match error {
        StoreError::Capacity => ApiError::Capacity,
        StoreError::Unavailable(reason) | StoreError::Indeterminate(reason) => {
            tracing::warn!(%reason, "idempotency store unavailable");
            ApiError::StoreUnavailable
        }
        StoreError::NotOwner { execution_id } => {
            tracing::error!(%execution_id, "store answered NotOwner to a reservation");
            ApiError::StoreUnavailable
        }
    }
}

fn answer(reservation: Reservation) -> Result<CallAnswer, ApiError> {
    match reservation {
        Reservation::Replay(result) => Ok(CallAnswer {
            result,
            replayed: true,
        }),
        Reservation::Conflict { execution_id } => {
            Err(ApiError::IdempotencyConflict { execution_id })
        }
        Reservation::Uncertain {
            execution_id,
            state,
        } => Err(ApiError::ExecutionUncertain {
            execution_id,
            state,
        }),
        Reservation::Reserved => {
            tracing::error!("answer() called for a fresh reservation");
            Err(ApiError::Internal)
        }
    }
}
