//! PostgreSQL store for Carmy (docs/semantics.md §8).
//!
//! - [`PostgresStore`] implements [`carmy::store::IdempotencyStore`] on the table
//!   `carmy.reservations`: one row per call identity (principal, session_id, request_id), reserved
//!   with `INSERT … ON CONFLICT DO NOTHING` before the tool runs and completed with one
//!   autocommitted `UPDATE` by the execution that reserved it. Many gateway replicas share one
//!   database; each registers a lease in `carmy.instances` so that a reservation whose owner died
//!   reads as interrupted (docs/semantics.md §4).
//! - [`migrate`] applies the SQL migrations of the repository's `migrations/` folder (embedded at
//!   build time) with refinery over one sqlx connection, under a PostgreSQL advisory lock, so
//!   replicas starting together never race. [`latest_migration_version`] tells readiness checks
//!   which version this build needs.
//!
//! Both connect as sqlx reads the URL, TLS included: `sslmode` (`disable`, `prefer` by default,
//! `require`, `verify-ca`, `verify-full`, with `sslrootcert`) is honoured with rustls, trusting
//! the webpki (Mozilla) roots plus `sslrootcert`; `require` never downgrades to plain text.
//!
//! The schema is meant to be read by a DBA without this code: text states with CHECK
//! constraints, a comment on every table, column, view and function, the function
//! `carmy.in_flight_state(owner_instance)` (the one definition of `running` vs `interrupted`,
//! used by the store's statements in [`sql`]) and the view `carmy.uncertain_executions` listing
//! executions whose outcome is not known.
//!
//! Decisions (docs/semantics.md §12.1) are the SQL functions `carmy.resolve_execution` and
//! `carmy.release_execution`, called by the store (`decide`) and by DBAs alike, with the audit
//! trail in `carmy.audit_log` and released executions in `carmy.released_executions`.
//!
//! [`Operator`] reads executions across principals and decides on them with the same `decide`
//! code, without a lease (the CLI `carmy-gateway executions`).
//!
//! Modules: `store` ([`PostgresStore`]), `operator` ([`Operator`]), [`sql`] (every statement),
//! `decide`, `wait`, `options`
//! ([`PostgresStoreOptions`], [`OptionsError`]), `lease`, `cancel`, `diagnosis`, `failure`,
//! `decode`, `hot`, `batch`, `combined` and `grouped` (group commit of `reserve` and
//! `complete`, both in one commit), `ready`, `recheck`, `migrate`, `session` (defensive
//! session settings, docs/semantics.md §14.1), `grants` (least-privilege roles, §14.2),
//! `pooler` and `pinned` (§14.3: detecting a transaction-mode pooler, and running statements
//! through one), `replication` (synchronous standbys, §14), `reconcile` (claims and
//! evidence of reconciliation probes, §12.10), `prune` (retention, docs/semantics.md §12.9:
//! `carmy.prune_expired` of
//! migration `V9`, one replica at a time), `distribute` ([`distribute`]: the schema spread over
//! Citus nodes by principal, docs/scale.md).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use carmy_postgres::{migrate, PostgresStore, PostgresStoreOptions};
//! use std::sync::Arc;
//!
//! let url = "postgres://postgres@127.0.0.1:5432/postgres";
//! migrate(url).await?;
//! let store = Arc::new(PostgresStore::connect(PostgresStoreOptions::new(url)).await?);
//! let shared: Arc<dyn carmy::store::IdempotencyStore> = store.clone();
//! # drop(shared);
//! store.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#[macro_use]
mod rules;
mod batch;
mod cancel;
mod combined;
mod decide;
mod decode;
mod diagnosis;
mod distribute;
mod failure;
mod grants;
mod grouped;
mod hot;
mod lease;
mod migrate;
mod operator;
mod options;
mod pinned;
mod pooler;
mod prune;
mod readings;
mod ready;
mod recheck;
mod reconcile;
mod replication;
mod session;
mod sharding;
pub mod sql;
mod store;
mod waiters;

pub use cancel::{CANCEL_CHANNEL, CHANGED_CHANNEL, DECIDED_CHANNEL, RECORDED_CHANNEL};
pub use distribute::{
    check_distribution, distribute, DistributeError, DistributeReport, Distribution, Placement,
    TablePlacement, CITUS_PLACEMENTS,
};
pub use grants::{grant_reader, grant_runtime, GrantError, READER_GRANTS_SQL, RUNTIME_GRANTS_SQL};
pub use migrate::{
    latest_migration_version, migrate, MigrateError, MIGRATION_LOCK_KEY, MIGRATION_TABLE,
    RETIRED_MIGRATIONS,
};
pub use operator::{ExecutionDetail, Operator, OperatorQuery, OwnerProcess, StateFilter};
pub use options::{
    pool_options, ConnectError, OptionsError, PostgresStoreOptions, DEFAULT_ACQUIRE_TIMEOUT,
    DEFAULT_BATCH_MAX_ROWS, DEFAULT_LEASE_TTL, DEFAULT_MAX_CONNECTIONS, DEFAULT_STATEMENT_TIMEOUT,
    MAX_BATCH_MAX_ROWS, MAX_LEASE_TTL, MIN_LEASE_TTL, MIN_RENEWABLE_LEASE_TTL, PING_IF_IDLE_FOR,
};
pub use pinned::{Db, Pinned, Pinning, Source, Through};
pub use pooler::{check_path, startup_parameter_advice, PathError};
pub use replication::{check_replication, Replication, REPLICATION_SQL};
pub use sharding::{distribution, DISTRIBUTED_TABLES, DISTRIBUTION_COLUMN, REFERENCE_TABLES};
pub use store::PostgresStore;
