//! The execution engine: reserve, run detached, record, answer (docs/semantics.md §3, §4).
//!
//! Submodules: `execute` (one call: counted, traced, the tool checked, the identity reserved
//! and the reservation's answer followed), [`answer`] (the engine's answers and refusals, and
//! the one mapping of store failures), `run` (starting an execution and running its tool), `record` (recording outcomes
//! and freeing unused reservations, with one backoff), `cancel` (local and remote cancellation),
//! `hints` (what completes an answer: the closest tool, `retry_after`), `lease_loss`
//! (stopping the tools of reserved executions when the lease lapses), [`decide`]
//! (resolve, release and listing, docs/semantics.md §12.1), `wait` (waiting for a running
//! duplicate's outcome), `takeover` (re-running an interrupted execution of a `rerun` tool),
//! [`reconcile`] (probing interrupted executions and deciding what the probe found), `held`
//! (executions held by a client, docs/semantics.md §16).

pub mod answer;
mod cancel;
mod changes;
pub mod decide;
mod execute;
mod existing;
mod held;
mod hints;
mod lease_loss;
pub mod reconcile;
mod record;
mod run;
mod takeover;

pub use answer::{Answer, CancelAnswer, Refusal};
pub use decide::{OperatorDetail, Release, Resolve};
pub use held::{HeldAnswer, HeldOutcome};

use crate::metrics::Metrics;
use crate::outcome::{ExecutionId, ExecutionResult};
use crate::registry::{SharedRegistry, ToolRegistry};
use crate::store::{
    ExecutionLookup, IdempotencyKey, IdempotencyStore, LeaseState, StoreError, StoredRecord,
};
use crate::tool::{Tool, ToolRegistryError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a scrape of `GET /metrics` waits for the store's readings
/// ([`Engine::metrics_text`]).
pub const READINGS_DEADLINE: Duration = Duration::from_secs(2);

/// Limits and timings of the engine. All durations are wall-clock.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Deadline of a tool that sets none (`CARMY_TOOL_TIMEOUT_MS`, default 30 s); reaching it
    /// records `timed_out`.
    pub default_tool_timeout: Duration,
    /// Largest recorded `data`, in bytes of compact JSON (default 1 MiB); a larger result is
    /// recorded as `failed` with `RESULT_TOO_LARGE` (docs/semantics.md §4).
    pub max_result_bytes: usize,
    /// How long shutdown waits for running executions before recording them `cancelled`.
    pub drain_period: Duration,
    /// First pause between attempts to record an outcome (or free an unused reservation) after
    /// a store failure; it doubles up to [`EngineConfig::complete_retry_max`].
    pub complete_retry_initial: Duration,
    /// Longest pause between such attempts.
    pub complete_retry_max: Duration,
    /// How long a cancel request waits for the cancelled outcome to be recorded before
    /// answering [`CancelAnswer::Pending`].
    pub cancel_wait: Duration,
    /// The longest a call may wait for a running duplicate's outcome (`CARMY_MAX_WAIT_MS`,
    /// default 30 s; docs/semantics.md §12.6): a longer `Prefer: wait=N` is cut to it.
    pub max_wait: Duration,
    /// How long a finished record holds its identity (`CARMY_RETENTION`, default 7 days;
    /// `None` keeps records forever; docs/semantics.md §12.9). Every answer states the record's
    /// `expires_at` ([`Engine::expires_at`]); a call reusing a request_id after it runs as new.
    pub retention: Option<Duration>,
    /// How often this process prunes what outlived the retention (`CARMY_PRUNE_INTERVAL_MS`,
    /// default 60 s; [`crate::retention::run_pruner`]).
    pub prune_interval: Duration,
    /// Rows of each kind one pruning step deletes at most (default 1000).
    pub prune_batch: usize,
    /// The request id a model holds (docs/semantics.md §11): its name and whether tools
    /// require it, unless a tool chooses otherwise ([`crate::key_argument::resolve`]).
    pub key_argument: crate::key_argument::KeyArgumentConfig,
    /// How long a tool that was running when this process's lease lapsed may still take to
    /// finish after it is asked to stop (default 2 s; docs/semantics.md §12.2): its real outcome
    /// (an order id) is recorded or kept as a late arrival; past the grace it is dropped and
    /// recorded `cancelled`.
    pub lease_loss_grace: Duration,
    /// How often a replica looks for interrupted executions due for a reconciliation probe
    /// (docs/semantics.md §12.10); also the first backoff step.
    pub reconcile_interval: Duration,
    /// The longest pause between two probes of one execution.
    pub reconcile_backoff_max: Duration,
    /// Probes per execution before it is left for a person.
    pub reconcile_max_attempts: u32,
    /// The longest a retry that meets an interrupted execution waits for its probe.
    pub reconcile_inline: Duration,
    /// Which arguments are kept with each execution (`CARMY_KEEP_ARGUMENTS`, default
    /// `redacted`; docs/semantics.md §8.5). Kept arguments longer than
    /// [`EngineConfig::max_result_bytes`] refuse the call (`ARGUMENTS_TOO_LARGE`).
    pub keep_arguments: crate::arguments::KeepArguments,
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
            max_wait: Duration::from_secs(30),
            retention: Some(crate::retention::DEFAULT_RETENTION),
            prune_interval: crate::retention::DEFAULT_PRUNE_INTERVAL,
            prune_batch: crate::retention::DEFAULT_PRUNE_BATCH,
            key_argument: crate::key_argument::KeyArgumentConfig::default(),
            lease_loss_grace: Duration::from_secs(2),
            reconcile_interval: Duration::from_secs(2),
            reconcile_backoff_max: Duration::from_secs(300),
            reconcile_max_attempts: 10,
            reconcile_inline: Duration::from_secs(2),
            keep_arguments: crate::arguments::KeepArguments::default(),
        }
    }
}

/// Runs tool calls under the idempotency rules. Cheap to share behind an `Arc`.
pub struct Engine {
    store: Arc<dyn IdempotencyStore>,
    tools: SharedRegistry,
    config: EngineConfig,
    metrics: Metrics,
    executions: TaskTracker,
    /// Cancelled at the end of the drain period: every running execution is recorded `cancelled`.
    cancel_executions: CancellationToken,
    /// This process's running executions, each with its own token (a child of the above).
    running: Mutex<HashMap<ExecutionId, lease_loss::Running>>,
    /// Cancelled when the drain starts: stops the pruner.
    stop_background: CancellationToken,
    /// The store's lease ([`IdempotencyStore::lease_state`]); `None` without leases.
    lease: Option<tokio::sync::watch::Receiver<LeaseState>>,
}

impl Engine {
    /// An engine over `store` serving `tools` (in the order given), with its limits and the
    /// metrics it counts into. A front (`carmy-http`'s `app()`, an embedder's own) builds one
    /// and shares it behind an `Arc`; background work starts separately
    /// ([`Engine::start_pruner`] and the others).
    ///
    /// # Errors
    /// [`ToolRegistryError`] for a duplicate tool name or an invalid argument schema.
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
        config: EngineConfig,
        metrics: Metrics,
    ) -> Result<Self, ToolRegistryError> {
        let mut registry = ToolRegistry::default();
        for tool in tools {
            registry.insert(tool)?;
        }
        Ok(Self {
            lease: store.lease_state(),
            store,
            tools: SharedRegistry::new(registry),
            config,
            metrics,
            executions: TaskTracker::new(),
            cancel_executions: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            stop_background: CancellationToken::new(),
        })
    }

    /// The gateway's settings of the request id argument (docs/semantics.md §11).
    pub fn key_argument_config(&self) -> &crate::key_argument::KeyArgumentConfig {
        &self.config.key_argument
    }

    /// The request id argument `tool` takes under this engine's settings (docs/semantics.md
    /// §11); `None` for none.
    ///
    /// # Errors
    /// [`crate::key_argument::KeyCollision`] for a tool whose own property has the gateway's
    /// name.
    pub fn key_argument(
        &self,
        tool: &dyn Tool,
    ) -> Result<Option<crate::key_argument::KeyArgument>, crate::key_argument::KeyCollision> {
        crate::key_argument::resolve(tool, &self.config.key_argument)
    }

    /// When `result`'s record expires (docs/semantics.md §12.9): its `finished_at` plus the
    /// retention; `None` when records are kept forever. Every front states it as `expires_at`.
    pub fn expires_at(&self, result: &ExecutionResult) -> Option<chrono::DateTime<chrono::Utc>> {
        crate::retention::expires_at(result.finished_at, self.config.retention)
    }

    /// When history decided at `at` (a released execution) is pruned; `None`: kept forever.
    pub fn history_expires_at(
        &self,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        crate::retention::expires_at(at, self.config.retention)
    }

    /// Starts pruning what outlived the retention in the background
    /// ([`crate::retention::run_pruner`]) until the drain starts; does nothing when records are
    /// kept forever. Needs a Tokio runtime.
    pub fn start_pruner(&self) {
        let Some(retention) = self.config.retention else {
            return;
        };
        tokio::spawn(crate::retention::run_pruner(
            Arc::clone(&self.store),
            retention,
            self.config.prune_interval,
            self.config.prune_batch,
            self.metrics.clone(),
            self.stop_background.clone(),
        ));
    }

    /// The registered tools, by name: a snapshot (the set may change at run time).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.snapshot().iter().cloned().collect()
    }

    /// Replaces the tools registered under `group` (e.g. one upstream MCP server's) with
    /// `tools`, in one step: a call sees either the old set or the new one. Calls already
    /// running keep the tool they started with. Tools given to the builder
    /// (`carmy_http::AppBuilder`) belong to no group and stay.
    ///
    /// # Errors
    /// [`ToolRegistryError`] when a name clashes with another tool or a schema is invalid; then
    /// nothing changes.
    pub fn replace_tool_group(
        &self,
        group: &str,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<(), ToolRegistryError> {
        self.tools.replace_group(group, tools)
    }

    /// How long shutdown lets running executions finish.
    pub fn drain_period(&self) -> Duration {
        self.config.drain_period
    }

    /// The process metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The Prometheus text of `GET /metrics` (docs/semantics.md §13): the process's metrics
    /// and the store's readings taken now ([`IdempotencyStore::readings`]: interrupted
    /// executions per tool, decisions pending, failed lease renewals). A store that does not
    /// answer within [`READINGS_DEADLINE`] leaves those gauges out of this text.
    pub async fn metrics_text(&self) -> String {
        let tools = self.tools();
        let probed: Vec<String> = tools
            .iter()
            .filter(|tool| tool.probe().is_some())
            .map(|tool| tool.name().to_owned())
            .collect();
        self.metrics.reconcilable(&probed);
        match tokio::time::timeout(READINGS_DEADLINE, self.store.readings()).await {
            Ok(Ok(readings)) => {
                let names: Vec<String> = tools.iter().map(|tool| tool.name().to_owned()).collect();
                let has_probe = |name: &str| probed.iter().any(|tool| tool == name);
                self.metrics.observe_store(&readings, &names, &has_probe);
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "the store's readings for /metrics failed; its gauges are left out");
                self.metrics.store_unread();
            }
            Err(_) => {
                tracing::warn!(
                    "the store's readings for /metrics took too long; its gauges are left out"
                );
                self.metrics.store_unread();
            }
        }
        self.metrics.encode()
    }

    /// Finds an execution by id among `principal`'s records (docs/semantics.md §6, §7).
    ///
    /// # Errors
    /// [`Refusal::NotFound`] when there is none (or it is another principal's);
    /// [`Refusal::RecordDamaged`]; [`Refusal::StoreUnavailable`].
    pub async fn find(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<ExecutionLookup, Refusal> {
        self.store
            .find_execution(principal, execution_id)
            .await
            .map_err(|error| self.refusal(error))?
            .ok_or(Refusal::NotFound)
    }

    /// Reads an identity's record without reserving anything; `None` when vacant.
    ///
    /// # Errors
    /// [`Refusal::RecordDamaged`]; [`Refusal::StoreUnavailable`].
    pub async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<StoredRecord>, Refusal> {
        self.store
            .lookup(key)
            .await
            .map_err(|error| self.refusal(error))
    }

    /// A store failure as the engine's answer, counting damaged records
    /// (`carmy_records_damaged_total`).
    fn refusal(&self, error: StoreError) -> Refusal {
        if matches!(error, StoreError::RecordDamaged { .. }) {
            self.metrics.record_damaged();
        }
        error.into()
    }

    /// Whether the store is reachable and ready (for readiness probes).
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`] (the reason is logged).
    pub async fn check_ready(&self) -> Result<(), Refusal> {
        Ok(self.store.check_ready().await?)
    }

    /// Whether the store is ready, with a reason safe to show (`/readyz`, the startup log): the
    /// store's own [`StoreError::NotReady`] text (e.g. `schema carmy is not migrated …: run
    /// migrations`), or a fixed sentence when it failed (the cause is logged here).
    ///
    /// When ready, the store's warnings ([`IdempotencyStore::readiness_warnings`]; none when
    /// that check fails, which is logged).
    ///
    /// # Errors
    /// The reason, as a sentence.
    pub async fn readiness(&self) -> Result<Vec<String>, String> {
        match self.store.check_ready().await {
            Ok(()) => Ok(self
                .store
                .readiness_warnings()
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "cannot check the idempotency store's warnings");
                    Vec::new()
                })),
            Err(StoreError::NotReady(reason)) => Err(reason),
            Err(error) => {
                tracing::warn!(%error, "the idempotency store is not ready");
                Err("the idempotency store is unreachable or failing; the gateway's log has the cause".into())
            }
        }
    }

    /// Ends what the store holds for this process (its lease); call after [`Engine::drain`].
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`] when the store could not be told.
    pub async fn shutdown_store(&self) -> Result<(), Refusal> {
        Ok(self.store.shutdown().await?)
    }

    /// Waits for running executions up to the drain period, then cancels the rest (recorded
    /// `cancelled`) and waits for their records, at most `record_grace` more.
    pub async fn drain(&self, record_grace: Duration) {
        self.stop_background.cancel();
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
}
