//! [`Operator`]: an operator's access to the executions on PostgreSQL (docs/semantics.md §12.1),
//! for tools such as `carmy-gateway executions` that read and decide without serving calls.
//!
//! It holds no lease and registers no instance: it never reserves, so it needs none, and a
//! one-off command leaves no row in `carmy.instances`. Decisions run the same code as
//! [`PostgresStore`](crate::PostgresStore)'s (`decide`), which calls the SQL functions
//! `carmy.resolve_execution` and `carmy.release_execution` (migration `V6`): one
//! implementation, one compare-and-set, the same audit row and the same `NOTIFY carmy_decided`
//! that drops the record from every replica's replay cache. Reads see every principal's
//! executions, with what an operator needs to check that an owner is gone (its instance,
//! hostname, pid and lease).

use crate::decide;
use crate::decode::{decode_arguments, decode_key, decode_record};
use crate::diagnosis::{explain_connect, Diagnosis};
use crate::failure::{settle, Failure};
use crate::options::{pool_options, ConnectError, OptionsError};
use crate::pinned::{Db, Pinning};
use crate::ready::check_schema;
use crate::sql::{
    OPERATOR_LIST_FINISHED_SQL, OPERATOR_LIST_IN_FLIGHT_SQL, OPERATOR_LIST_RELEASED_SQL,
    OPERATOR_LIST_SQL, OPERATOR_SHOW_RELEASED_SQL, OPERATOR_SHOW_SQL,
};
use carmy::decision::{AuditEntry, ReleaseRequest, Released, ResolveRequest};
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::store::{Decided, ExecutionLookup, InFlightState, StoreError};
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::Row;
use std::time::Duration;

/// Connections an [`Operator`] opens at most: one command runs one statement at a time.
const OPERATOR_CONNECTIONS: u32 = 1;

/// Which executions [`Operator::list`] returns, by state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateFilter {
    /// Every held execution (finished or not), as `GET /v1/executions` without `state`.
    Any,
    /// Executions without an outcome in this in-flight state (`carmy.in_flight_state`).
    InFlight(InFlightState),
    /// Finished executions with this status.
    Finished(ExecutionStatus),
    /// Released executions (`carmy.released_executions`).
    Released,
}

/// What [`Operator::list`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorQuery {
    /// Only this principal's executions; `None` for every principal.
    pub principal: Option<String>,
    /// Only this session's.
    pub session_id: Option<String>,
    /// Only those with this request_id.
    pub request_id: Option<String>,
    /// By state.
    pub state: StateFilter,
    /// At most this many, oldest reservation first.
    pub limit: usize,
    /// Only those whose kept arguments contain this JSON value
    /// ([`carmy::arguments::search_value`], docs/semantics.md §8.5).
    pub arguments: Option<serde_json::Value>,
}

/// The process that owns (or owned) an execution, from its lease row in `carmy.instances`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerProcess {
    /// Its host, as it registered (`carmy.instances.hostname`).
    pub hostname: Option<String>,
    /// Its process id there.
    pub pid: Option<i32>,
    /// Until when its lease holds (database clock); in the past for a stopped or cut-off owner.
    pub lease_expires_at: DateTime<Utc>,
}

/// One execution as an operator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionDetail {
    /// Its identity, record and (for a released one) who released it, as the API reads it.
    pub lookup: ExecutionLookup,
    /// `carmy.reservations.owner_instance`: the process that ran (or may still run) the tool.
    pub owner_instance: Option<String>,
    /// That process's lease row; `None` when it has none (pruned, or never registered).
    pub owner: Option<OwnerProcess>,
    /// When the identity was reserved (database clock).
    pub created_at: DateTime<Utc>,
    /// When the tool started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the outcome was recorded; `None` without one.
    pub finished_at: Option<DateTime<Utc>>,
}

/// An operator's connection to the executions: reads across principals and decisions, without
/// a lease (see the module docs).
#[derive(Debug)]
pub struct Operator {
    pool: Db,
    diagnosis: Diagnosis,
}

impl Operator {
    /// Connects to `database_url` (one connection, waiting at most `connect_timeout` for it).
    /// Nothing is written: no migration, no instance row.
    ///
    /// # Errors
    /// [`ConnectError::Options`] for a URL sqlx cannot read; [`ConnectError::Unavailable`] with
    /// the cause (e.g. `Connection refused`, an unknown database, a TLS failure) when no session
    /// opens.
    pub async fn connect(
        database_url: &str,
        connect_timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let connect: PgConnectOptions = database_url.parse().map_err(|error: sqlx::Error| {
            ConnectError::Options(OptionsError::DatabaseUrl(error.to_string()))
        })?;
        let pool = match pool_options(OPERATOR_CONNECTIONS, connect_timeout)
            .connect_with(connect.clone())
            .await
        {
            Ok(pool) => pool,
            Err(error) => {
                let cause = explain_connect(error, &connect, connect_timeout).await;
                return Err(ConnectError::Unavailable(format!(
                    "cannot connect to PostgreSQL: {cause}"
                )));
            }
        };
        let diagnosis = Diagnosis::new(pool.clone());
        // The operator CLI connects as told; a transaction pooler is the caller's to avoid.
        let pool = Db::new(pool, Pinning::direct());
        Ok(Self { pool, diagnosis })
    }

    /// Whether the schema is migrated far enough for this build (as `/readyz` checks it).
    ///
    /// # Errors
    /// [`StoreError::NotReady`]: `schema carmy is not migrated (found version N, need M): run
    /// migrations (carmy-gateway migrate, …)`; [`StoreError::Unavailable`] with the cause.
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        check_schema(&self.pool, &self.diagnosis).await
    }

    /// Executions matching `query`, oldest reservation first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] (with the cause) when the database fails;
    /// [`StoreError::RecordDamaged`] for a finished row that cannot be read back.
    pub async fn list(&self, query: &OperatorQuery) -> Result<Vec<ExecutionDetail>, StoreError> {
        settle(&self.diagnosis, self.list_rows(query).await).await
    }

    async fn list_rows(&self, query: &OperatorQuery) -> Result<Vec<ExecutionDetail>, Failure> {
        let (sql, state) = match query.state {
            StateFilter::Any => (OPERATOR_LIST_SQL, None),
            StateFilter::InFlight(state) => (OPERATOR_LIST_IN_FLIGHT_SQL, Some(state.as_str())),
            StateFilter::Finished(status) => (OPERATOR_LIST_FINISHED_SQL, Some(status.as_str())),
            StateFilter::Released => (OPERATOR_LIST_RELEASED_SQL, None),
        };
        let mut statement = sqlx::query(sql)
            .bind(query.principal.as_deref())
            .bind(query.session_id.as_deref())
            .bind(query.request_id.as_deref())
            .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
            .bind(query.arguments.as_ref().map(serde_json::Value::to_string));
        if let Some(state) = state {
            statement = statement.bind(state);
        }
        let rows = statement.fetch_all(self.pool.executor()).await?;
        let released = query.state == StateFilter::Released;
        rows.iter().map(|row| detail(row, released)).collect()
    }

    /// One execution of any principal: a held one, else a released one; `None` when there is
    /// no such execution.
    ///
    /// # Errors
    /// As [`Operator::list`].
    pub async fn show(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionDetail>, StoreError> {
        settle(&self.diagnosis, self.show_row(execution_id).await).await
    }

    async fn show_row(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionDetail>, Failure> {
        show_detail(&self.pool, execution_id).await
    }

    /// The audit rows of `execution_id` (`carmy.audit_log`), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn audit_trail(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        settle(
            &self.diagnosis,
            decide::audit_trail(&self.pool, execution_id).await,
        )
        .await
    }

    /// Records `request`'s outcome through `carmy.resolve_execution`, as the API does
    /// (docs/semantics.md §12.1). Check it first with `carmy::decision::check_note` and
    /// `check_outcome`, as the engine does.
    ///
    /// # Errors
    /// [`StoreError::Indeterminate`] when the connection was lost while the statement was on
    /// its way or its answer was (it may have been applied: read the execution again);
    /// [`StoreError::Unavailable`] otherwise. A refusal is `Ok(Err(_))`.
    pub async fn resolve(
        &self,
        request: &ResolveRequest,
    ) -> Result<Decided<ExecutionResult>, StoreError> {
        settle(&self.diagnosis, decide::resolve(&self.pool, request).await).await
    }

    /// Frees `request`'s execution through `carmy.release_execution`, as the API does.
    ///
    /// # Errors
    /// As [`Operator::resolve`].
    pub async fn release(&self, request: &ReleaseRequest) -> Result<Decided<Released>, StoreError> {
        settle(&self.diagnosis, decide::release(&self.pool, request).await).await
    }

    /// The last reconciliation probe's evidence kept on `execution_id` (docs/semantics.md §12.10,
    /// reconciliation); `None` when never probed or no longer held without an outcome.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn probe_evidence(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        settle(
            &self.diagnosis,
            crate::reconcile::evidence(&self.pool, execution_id).await,
        )
        .await
    }

    /// Makes an interrupted execution due for its tool's probe now, attempts counted afresh;
    /// a running replica with the tool's probe claims it within its reconcile interval.
    /// `false` when it is not interrupted without an outcome.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn reconcile_soon(&self, execution_id: &ExecutionId) -> Result<bool, StoreError> {
        settle(
            &self.diagnosis,
            crate::reconcile::reconcile_soon(&self.pool, execution_id).await,
        )
        .await
    }

    /// Closes the connection.
    pub async fn close(self) {
        self.pool.pool().close().await;
    }
}

/// One execution of any principal by id on `pool`: a held one, else a released one (the
/// operator's `show`, and [`PostgresStore`](crate::PostgresStore)'s `operator_view` for the
/// console).
pub(crate) async fn show_detail(
    pool: &Db,
    execution_id: &ExecutionId,
) -> Result<Option<ExecutionDetail>, Failure> {
    for (sql, released) in [
        (OPERATOR_SHOW_SQL, false),
        (OPERATOR_SHOW_RELEASED_SQL, true),
    ] {
        let row = sqlx::query(sql)
            .bind(execution_id.as_str())
            .fetch_optional(pool.executor())
            .await?;
        if let Some(row) = row {
            return detail(&row, released).map(Some);
        }
    }
    Ok(None)
}

impl ExecutionDetail {
    /// The console's view of this detail ([`carmy::decision::OperatorView`]).
    pub fn into_view(self) -> carmy::decision::OperatorView {
        let owner = carmy::decision::OwnerLease {
            instance: self.owner_instance,
            hostname: self.owner.as_ref().and_then(|owner| owner.hostname.clone()),
            pid: self.owner.as_ref().and_then(|owner| owner.pid),
            lease_expires_at: self.owner.as_ref().map(|owner| owner.lease_expires_at),
            reserved_at: Some(self.created_at),
        };
        carmy::decision::OperatorView {
            lookup: self.lookup,
            owner: Some(owner),
        }
    }
}

/// Decodes a row of the operator statements of [`crate::sql`]; `released` for those of
/// `carmy.released_executions`.
fn detail(row: &PgRow, released: bool) -> Result<ExecutionDetail, Failure> {
    let lookup = if released {
        decide::decode_released(row)?
    } else {
        ExecutionLookup {
            key: decode_key(row)?,
            record: decode_record(row)?,
            released: None,
            reserved_at: None,
            arguments: decode_arguments(row)?,
        }
    };
    let lease: Option<DateTime<Utc>> = row.try_get("owner_lease_expires_at")?;
    let owner = match lease {
        Some(lease_expires_at) => Some(OwnerProcess {
            hostname: row.try_get("owner_hostname")?,
            pid: row.try_get("owner_pid")?,
            lease_expires_at,
        }),
        None => None,
    };
    Ok(ExecutionDetail {
        lookup,
        owner_instance: row.try_get("owner_instance")?,
        owner,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}
