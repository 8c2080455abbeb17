//! The gateway on PostgreSQL: the store it serves with (migrated, behind the replay cache), the
//! checks of the path to the database before anything runs through it (a transaction-mode
//! pooler, docs/semantics.md §14.3; asynchronous standbys, §14), and what `migrate` does beyond
//! the migrations (the roles' grants, §14.2; distribution on Citus, docs/scale.md).

use crate::config::{Config, MigrateArgs};
#[cfg(feature = "example-tools")]
use crate::orders::PostgresOrderBook;
use crate::GatewayError;
use carmy::cache::ReplayCache;
use carmy::store::IdempotencyStore;
use carmy_postgres::{PostgresStore, PostgresStoreOptions};
use std::sync::Arc;
use std::time::Duration;

/// The store of a gateway with `DATABASE_URL`: migrates (under the migration lock), creates
/// `carmy.example_orders` if it is missing and `examples` says the example tools are served
/// (`PostgresOrderBook::prepare`: demo data never lands in a database that does not serve
/// them), and returns `PostgresStore` (behind the replay cache unless
/// `CARMY_REPLAY_CACHE_ENTRIES=0`) and its database handle (for the example orders).
pub(crate) async fn postgres_stores(
    config: &Config,
    url: &str,
    examples: bool,
) -> Result<(Arc<dyn IdempotencyStore>, carmy_postgres::Db), GatewayError> {
    let mut options = PostgresStoreOptions::new(url.to_owned());
    options.lease_ttl = Duration::from_millis(config.lease_ttl_ms);
    options.batch_max_rows = config.db_batch_max_rows;
    options.statement_timeout = Duration::from_millis(config.db_statement_timeout_ms);
    options.session_url.clone_from(&config.database_session_url);
    options.require_sync_replica = config.require_sync_replica;
    // The pool's sessions carry the settings of docs/semantics.md §14.1.
    let connect = options
        .session_connect_options()
        .map_err(|error| GatewayError::Database(error.to_string()))?;
    options.transaction_pooler = check_database_path(&connect, &options).await?;
    // Migrations and the orders' table setup hold the migration lock: session-bound.
    let session_url = options
        .session_url
        .clone()
        .unwrap_or_else(|| url.to_owned());
    carmy_postgres::migrate(&session_url).await?;
    #[cfg(feature = "example-tools")]
    if examples {
        let setup = carmy_postgres::pool_options(1, Duration::from_secs(10))
            .connect(&session_url)
            .await
            .map_err(|error| GatewayError::Database(error.to_string()))?;
        let prepared = PostgresOrderBook::prepare(&setup).await;
        setup.close().await;
        prepared.map_err(GatewayError::Database)?;
    }
    #[cfg(not(feature = "example-tools"))]
    let _ = examples;
    let pool = carmy_postgres::pool_options(
        config.db_pool_size,
        Duration::from_millis(config.db_acquire_timeout_ms),
    )
    .connect_with(connect)
    .await
    .map_err(|error| GatewayError::Database(error.to_string()))?;
    let store = Arc::new(
        PostgresStore::from_pool(pool, options)
            .await
            .map_err(|error| GatewayError::Database(error.to_string()))?,
    );
    if let Err(refused) = check_replication(store.db(), config.require_sync_replica).await {
        let _ = store.shutdown().await;
        return Err(refused);
    }
    tracing::info!(instance_id = store.instance_id(), "using PostgreSQL");
    let db = store.db().clone();
    let shared: Arc<dyn IdempotencyStore> = if config.replay_cache_entries > 0 {
        Arc::new(ReplayCache::new(
            store,
            config.replay_cache_entries,
            Duration::from_millis(config.replay_cache_ttl_ms),
        ))
    } else {
        store
    };
    Ok((shared, db))
}

/// What runs through a transaction-mode pooler without a session URL, for the refusal and the
/// start log (docs/semantics.md §14.3).
const SESSION_BOUND: &str = "the instance lease (a session's row lock and renewals), the LISTEN connection (cancels, outcomes for waiters, replay-cache invalidation) and migrations (a session advisory lock)";

/// Checks the path to PostgreSQL before anything (the migration lock included) runs through it
/// (docs/semantics.md §14.1, §14.3) and returns whether `DATABASE_URL` goes through a
/// transaction-mode pooler. Such a pooler is refused without `CARMY_DATABASE_SESSION_URL` (the
/// text names what breaks and the variable); with it, the session URL must itself hold
/// sessions, and the start log says what runs where. Warns when the session settings did not
/// reach the server.
async fn check_database_path(
    connect: &sqlx::postgres::PgConnectOptions,
    options: &PostgresStoreOptions,
) -> Result<bool, GatewayError> {
    let (pooled, statement_timeout) = match carmy_postgres::check_path(connect).await {
        Ok(statement_timeout) => (false, Some(statement_timeout)),
        Err(carmy_postgres::PathError::TransactionPooler(pid)) => {
            if options.session_url.is_none() {
                return Err(GatewayError::Database(format!(
                    "DATABASE_URL goes through a transaction-mode pooler (two of Carmy's connections were served by PostgreSQL process {pid}, e.g. PgBouncer pool_mode = transaction): {SESSION_BOUND} need a session of their own and break there; set CARMY_DATABASE_SESSION_URL to a direct or session-mode URL of the same database (the hot path then stays on DATABASE_URL), or use pool_mode = session (docs/operations.md, Connection poolers)"
                )));
            }
            (true, None)
        }
        // A pooler that refuses a startup parameter: say which setting lets it through.
        // Unreachable, refused, …: the migration that follows reports it as before.
        Err(carmy_postgres::PathError::Probe(error)) => {
            if let Some(advice) = carmy_postgres::startup_parameter_advice(&error.to_string()) {
                return Err(GatewayError::Database(format!(
                    "cannot connect through DATABASE_URL: {advice}"
                )));
            }
            (false, None)
        }
    };
    if let Some(session_url) = &options.session_url {
        let session: sqlx::postgres::PgConnectOptions =
            session_url.parse().map_err(|error: sqlx::Error| {
                GatewayError::Database(format!("CARMY_DATABASE_SESSION_URL is invalid: {error}"))
            })?;
        if let Err(carmy_postgres::PathError::TransactionPooler(pid)) =
            carmy_postgres::check_path(&session).await
        {
            return Err(GatewayError::Database(format!(
                "CARMY_DATABASE_SESSION_URL goes through a transaction-mode pooler too (two connections were served by PostgreSQL process {pid}): {SESSION_BOUND} need a session of their own; point it at PostgreSQL directly or at a session-mode pooler (docs/operations.md, Connection poolers)"
            )));
        }
    }
    if pooled {
        tracing::info!(
            "DATABASE_URL goes through a transaction-mode pooler: reservations, outcomes, lookups and decisions run there, each statement in a transaction of its own (statement_timeout set with SET LOCAL); {SESSION_BOUND} use CARMY_DATABASE_SESSION_URL"
        );
    }
    if statement_timeout.as_deref() == Some("0") && !options.statement_timeout.is_zero() {
        tracing::warn!(
            "the database sessions have no statement_timeout although CARMY_DB_STATEMENT_TIMEOUT_MS asks for one: a pooler dropped the startup options (PgBouncer's ignore_startup_parameters); set it on the role (ALTER ROLE … SET statement_timeout, docs/operations.md)"
        );
    }
    Ok(pooled)
}

/// Warns (or, with `CARMY_REQUIRE_SYNC_REPLICA`, refuses to start) when the primary's commits
/// do not wait for a synchronous standby although it has standbys (docs/semantics.md §14).
async fn check_replication(
    pool: &carmy_postgres::Db,
    require_sync: bool,
) -> Result<(), GatewayError> {
    let found = carmy_postgres::check_replication(pool.executor())
        .await
        .map_err(|error| {
            GatewayError::Database(format!("cannot read the replication settings: {error}"))
        })?;
    match found.warning() {
        Some(warning) if require_sync => Err(GatewayError::Database(format!(
            "{warning} (refused: CARMY_REQUIRE_SYNC_REPLICA=true)"
        ))),
        Some(warning) => {
            tracing::warn!("{warning}");
            Ok(())
        }
        None => {
            tracing::info!(replication = ?found, "database replication checked");
            Ok(())
        }
    }
}

/// `migrate --grant-runtime/--grant-reader` (docs/semantics.md §14.2): with the cargo feature
/// `example-tools`, the example orders table is made first, so that the runtime role is granted
/// it too.
pub(crate) async fn grant_roles(url: &str, args: &MigrateArgs) -> Result<(), GatewayError> {
    if let Some(role) = &args.grant_runtime {
        #[cfg(feature = "example-tools")]
        {
            let pool = carmy_postgres::pool_options(1, Duration::from_secs(10))
                .connect(url)
                .await
                .map_err(|error| GatewayError::Database(error.to_string()))?;
            PostgresOrderBook::prepare(&pool)
                .await
                .map_err(GatewayError::Database)?;
            pool.close().await;
        }
        carmy_postgres::grant_runtime(url, role)
            .await
            .map_err(|error| GatewayError::Database(error.to_string()))?;
    }
    if let Some(role) = &args.grant_reader {
        carmy_postgres::grant_reader(url, role)
            .await
            .map_err(|error| GatewayError::Database(error.to_string()))?;
    }
    Ok(())
}

/// `migrate --distribute` (docs/scale.md): distributes the migrated schema and logs, per table,
/// where its rows now live.
pub(crate) async fn distribute(
    url: &str,
    engine: carmy_postgres::Distribution,
) -> Result<(), GatewayError> {
    let report = carmy_postgres::distribute(url, engine).await?;
    for table in &report.tables {
        tracing::info!(
            table = table.table,
            placement = %table.placement,
            already = table.already,
            "table placed"
        );
    }
    tracing::info!(citus = report.citus_version, "schema distributed");
    Ok(())
}
