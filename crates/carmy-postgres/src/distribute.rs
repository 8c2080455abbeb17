//! Distributing Carmy's schema across database nodes (issue #28, docs/scale.md): on Citus,
//! [`distribute`] makes `carmy.instances` and `carmy.outcome_waiters` reference tables (a copy on
//! every node) and distributes `carmy.reservations` by `principal`, with
//! `carmy.released_executions` and `carmy.audit_log` colocated with it (by `principal` too), so
//! that every statement about one principal's calls runs on one node.
//!
//! It runs on a database [migrated](crate::migrate) to [`latest_migration_version`], under the
//! migration's advisory lock ([`MIGRATION_LOCK_KEY`]), and is idempotent: a table Citus already
//! manages is left alone and reported as such.

use crate::migrate::{latest_migration_version, MIGRATION_LOCK_KEY, MIGRATION_TABLE};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Executor, Row};
use std::fmt;

/// The engine that spreads the schema over several nodes (`carmy-gateway migrate --distribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Citus (the `citus` extension, on the coordinator's database).
    Citus,
}

/// Where one table's rows live once distributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A reference table: a full copy on every node (`create_reference_table`).
    Reference,
    /// Hash-distributed by `principal`, colocated with `carmy.reservations`
    /// (`create_distributed_table(…, 'principal', colocate_with => 'carmy.reservations')`).
    ByPrincipal,
}

impl fmt::Display for Placement {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Placement::Reference => "reference table",
            Placement::ByPrincipal => "distributed by principal",
        })
    }
}

/// The tables [`distribute`] places, in the order it places them: `carmy.reservations` comes
/// before the tables colocated with it.
pub const CITUS_PLACEMENTS: &[(&str, Placement)] = &[
    ("carmy.instances", Placement::Reference),
    ("carmy.outcome_waiters", Placement::Reference),
    ("carmy.reservations", Placement::ByPrincipal),
    ("carmy.released_executions", Placement::ByPrincipal),
    ("carmy.audit_log", Placement::ByPrincipal),
];

/// What [`distribute`] did to one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlacement {
    /// The schema-qualified table name, e.g. `carmy.reservations`.
    pub table: &'static str,
    /// Where its rows now live.
    pub placement: Placement,
    /// True when Citus already managed the table as wanted, and it was left alone.
    pub already: bool,
}

/// What [`distribute`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributeReport {
    /// The `citus` extension's version in the database, e.g. `13.2-1`.
    pub citus_version: String,
    /// One entry per table of [`CITUS_PLACEMENTS`], in that order.
    pub tables: Vec<TablePlacement>,
}

/// Why [`distribute`] refused or failed. The texts say what to do.
#[derive(Debug, thiserror::Error)]
pub enum DistributeError {
    /// The URL could not be parsed or the server could not be reached (the cause follows).
    #[error("cannot connect to PostgreSQL to distribute the schema: {0}")]
    Connect(#[source] sqlx::Error),
    /// The `citus` extension is not installed in the database. Nothing was changed.
    #[error("cannot distribute on Citus: the citus extension is not installed in database {database:?}; install Citus on every node and run CREATE EXTENSION citus in this database on each of them, then add the workers (see docs/scale.md)")]
    NoCitus {
        /// The connected database.
        database: String,
    },
    /// The schema is not at the version this build distributes. Nothing was changed.
    #[error("cannot distribute: schema carmy is at version {found} and this build distributes version {need}; run carmy-gateway migrate first")]
    NotMigrated {
        /// The newest applied version, or `none`.
        found: String,
        /// [`latest_migration_version`].
        need: i32,
    },
    /// Citus already manages a table in another way than Carmy's layout (e.g. distributed by
    /// another column). Nothing was changed for that table and the ones after it.
    #[error("cannot distribute {table}: Citus already manages it as {found}, Carmy's layout has it as {want}; undistribute it first (SELECT undistribute_table('{table}'))")]
    Mismatch {
        /// The table.
        table: &'static str,
        /// How Citus manages it (`citus_tables.citus_table_type`, with the distribution column).
        found: String,
        /// What Carmy's layout wants.
        want: Placement,
    },
    /// A statement failed: checking the database, taking the lock, or Citus refusing to place a
    /// table (the database's message follows). Tables placed before it stay placed; running
    /// again continues from there.
    #[error("cannot distribute the schema ({what}): {source}")]
    Statement {
        /// What was being done, e.g. `create_distributed_table('carmy.reservations')`.
        what: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

/// Checks, without changing anything, that the database of `database_url` can be distributed
/// with `engine`: for Citus, that the `citus` extension is installed. `carmy-gateway migrate
/// --distribute` checks this before it migrates, so that a refused distribution leaves the
/// database untouched.
///
/// # Errors
/// [`DistributeError::Connect`], [`DistributeError::NoCitus`], or
/// [`DistributeError::Statement`].
pub async fn check_distribution(
    database_url: &str,
    engine: Distribution,
) -> Result<String, DistributeError> {
    let mut connection = connect(database_url).await?;
    let version = engine_version(&mut connection, engine).await;
    close(connection).await;
    version
}

/// Distributes Carmy's tables of the database at `database_url` (the Citus coordinator's) with
/// `engine`, as [`CITUS_PLACEMENTS`] says.
///
/// On one connection: takes `pg_advisory_lock(`[`MIGRATION_LOCK_KEY`]`)` (waiting while a
/// migration runs), checks that the `citus` extension is installed and that the schema is at
/// [`latest_migration_version`], then places each table that Citus does not manage yet
/// (`create_reference_table` / `create_distributed_table`, each its own transaction, which copies
/// the table's rows to the nodes), releases the lock and closes the connection. A table already
/// placed as wanted is left alone (`already`), so running it again is a no-op.
///
/// `carmy.outcome_waiters` is `UNLOGGED`; Citus makes its copies on the nodes unlogged too, so
/// after a node's crash its copy may be empty while others are not, which means no more than on
/// one server: nobody waits (waiters also read the record every second).
///
/// # Errors
/// [`DistributeError`]; after a refusal ([`DistributeError::NoCitus`],
/// [`DistributeError::NotMigrated`]) nothing was changed.
pub async fn distribute(
    database_url: &str,
    engine: Distribution,
) -> Result<DistributeReport, DistributeError> {
    let mut connection = connect(database_url).await?;
    let locked = connection
        .execute(sqlx::query("SELECT pg_advisory_lock($1)").bind(MIGRATION_LOCK_KEY))
        .await
        .map_err(statement("taking the migration lock"));
    let result = match locked {
        Ok(_) => {
            let result = distribute_locked(&mut connection, engine).await;
            // Closing the connection below also releases the lock if this fails.
            if let Err(error) = connection
                .execute(sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK_KEY))
                .await
            {
                tracing::debug!(%error, "could not release the migration lock");
            }
            result
        }
        Err(error) => Err(error),
    };
    close(connection).await;
    result
}

/// The checks and placements of [`distribute`], under the lock.
async fn distribute_locked(
    connection: &mut PgConnection,
    engine: Distribution,
) -> Result<DistributeReport, DistributeError> {
    let citus_version = engine_version(connection, engine).await?;
    let need = latest_migration_version();
    let found = newest_applied(connection).await?;
    if found != Some(need) {
        return Err(DistributeError::NotMigrated {
            found: found.map_or_else(|| "none".to_owned(), |found| found.to_string()),
            need,
        });
    }
    let mut tables = Vec::with_capacity(CITUS_PLACEMENTS.len());
    for &(table, placement) in CITUS_PLACEMENTS {
        let already = match citus_placement(connection, table).await? {
            None => false,
            Some(found) if found.is(placement) => true,
            Some(found) => {
                return Err(DistributeError::Mismatch {
                    table,
                    found: found.to_string(),
                    want: placement,
                })
            }
        };
        if !already {
            place(connection, table, placement).await?;
            tracing::debug!(table, %placement, "placed table");
        }
        tables.push(TablePlacement {
            table,
            placement,
            already,
        });
    }
    Ok(DistributeReport {
        citus_version,
        tables,
    })
}

/// Connects as sqlx reads the URL, notices silenced.
async fn connect(database_url: &str) -> Result<PgConnection, DistributeError> {
    let options: PgConnectOptions = database_url.parse().map_err(DistributeError::Connect)?;
    let mut connection = PgConnection::connect_with(&options)
        .await
        .map_err(DistributeError::Connect)?;
    connection
        .execute(sqlx::raw_sql("SET client_min_messages = warning"))
        .await
        .map_err(statement("SET client_min_messages"))?;
    Ok(connection)
}

/// Closes `connection`, logging (at debug) a close that was not clean.
async fn close(connection: PgConnection) {
    if let Err(error) = connection.close().await {
        tracing::debug!(%error, "distribution connection did not close cleanly");
    }
}

/// The installed version of `engine`'s extension, or [`DistributeError::NoCitus`].
async fn engine_version(
    connection: &mut PgConnection,
    engine: Distribution,
) -> Result<String, DistributeError> {
    let Distribution::Citus = engine;
    let row = connection
        .fetch_one(sqlx::raw_sql(
            "SELECT current_database()::text, \
                    (SELECT extversion::text FROM pg_extension WHERE extname = 'citus')",
        ))
        .await
        .map_err(statement("looking for the citus extension"))?;
    let database: String = row.try_get(0).map_err(statement("current_database()"))?;
    let version: Option<String> = row.try_get(1).map_err(statement("pg_extension"))?;
    version.ok_or(DistributeError::NoCitus { database })
}

/// The newest version in [`MIGRATION_TABLE`], none when the table does not exist or is empty.
async fn newest_applied(connection: &mut PgConnection) -> Result<Option<i32>, DistributeError> {
    let exists: bool = connection
        .fetch_one(sqlx::query("SELECT to_regclass($1) IS NOT NULL").bind(MIGRATION_TABLE))
        .await
        .and_then(|row| row.try_get(0))
        .map_err(statement("looking for the migration history"))?;
    if !exists {
        return Ok(None);
    }
    connection
        .fetch_one(sqlx::raw_sql(
            "SELECT max(version) FROM carmy.refinery_schema_history",
        ))
        .await
        .and_then(|row| row.try_get(0))
        .map_err(statement("reading the migration history"))
}

/// How Citus manages a table now (a row of `citus_tables`).
#[derive(Debug)]
struct Managed {
    /// `citus_table_type`: `distributed`, `reference` or `local`.
    kind: String,
    /// `distribution_column`, `<none>` when not distributed.
    column: String,
    /// Whether it is colocated with `carmy.reservations`.
    with_reservations: bool,
}

impl Managed {
    /// Whether this is `placement` (distributed by principal: colocated with reservations).
    fn is(&self, placement: Placement) -> bool {
        match placement {
            Placement::Reference => self.kind == "reference",
            Placement::ByPrincipal => {
                self.kind == "distributed" && self.column == "principal" && self.with_reservations
            }
        }
    }
}

impl fmt::Display for Managed {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "a {} table", self.kind)?;
        if self.kind == "distributed" {
            write!(formatter, " by {}", self.column)?;
            if !self.with_reservations {
                formatter.write_str(" not colocated with carmy.reservations")?;
            }
        }
        Ok(())
    }
}

/// How Citus manages `table`, none when it does not.
async fn citus_placement(
    connection: &mut PgConnection,
    table: &str,
) -> Result<Option<Managed>, DistributeError> {
    let row = connection
        .fetch_optional(
            sqlx::query(
                "SELECT t.citus_table_type::text, t.distribution_column::text, \
                        t.colocation_id = (SELECT r.colocation_id FROM citus_tables r \
                                           WHERE r.table_name = 'carmy.reservations'::regclass) \
                 FROM citus_tables t WHERE t.table_name = $1::regclass",
            )
            .bind(table),
        )
        .await
        .map_err(statement(format!("reading citus_tables for {table}")))?;
    row.map(|row| {
        Ok(Managed {
            kind: row.try_get(0)?,
            column: row.try_get(1)?,
            with_reservations: row.try_get::<Option<bool>, _>(2)?.unwrap_or(false),
        })
    })
    .transpose()
    .map_err(statement(format!("reading citus_tables for {table}")))
}

/// Places `table` as `placement`.
async fn place(
    connection: &mut PgConnection,
    table: &'static str,
    placement: Placement,
) -> Result<(), DistributeError> {
    let call = match placement {
        Placement::Reference => format!("create_reference_table('{table}')"),
        Placement::ByPrincipal if table == "carmy.reservations" => {
            format!("create_distributed_table('{table}', 'principal')")
        }
        Placement::ByPrincipal => format!(
            "create_distributed_table('{table}', 'principal', \
             colocate_with => 'carmy.reservations')"
        ),
    };
    connection
        .execute(sqlx::raw_sql(&format!("SELECT {call}")))
        .await
        .map(drop)
        .map_err(statement(call))
}

/// Wraps a database error as [`DistributeError::Statement`] naming `what`.
fn statement(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> DistributeError {
    let what = what.into();
    move |source| DistributeError::Statement { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_come_before_the_tables_colocated_with_it() {
        let position = |name| {
            CITUS_PLACEMENTS
                .iter()
                .position(|(table, _)| *table == name)
                .unwrap()
        };
        assert!(position("carmy.reservations") < position("carmy.released_executions"));
        assert!(position("carmy.reservations") < position("carmy.audit_log"));
    }

    #[test]
    fn the_placements_are_the_store_s_layout() {
        let of = |wanted: Placement| -> Vec<&str> {
            CITUS_PLACEMENTS
                .iter()
                .filter(|(_, placement)| *placement == wanted)
                .map(|(table, _)| *table)
                .collect()
        };
        assert_eq!(of(Placement::ByPrincipal), crate::DISTRIBUTED_TABLES);
        assert_eq!(of(Placement::Reference), crate::REFERENCE_TABLES);
        assert_eq!(crate::DISTRIBUTION_COLUMN, "principal");
    }

    #[test]
    fn a_table_managed_otherwise_is_described() {
        let managed = Managed {
            kind: "distributed".to_owned(),
            column: "execution_id".to_owned(),
            with_reservations: false,
        };
        assert!(!managed.is(Placement::ByPrincipal));
        assert_eq!(
            managed.to_string(),
            "a distributed table by execution_id not colocated with carmy.reservations"
        );
        let reference = Managed {
            kind: "reference".to_owned(),
            column: "<none>".to_owned(),
            with_reservations: false,
        };
        assert!(reference.is(Placement::Reference));
        assert!(!reference.is(Placement::ByPrincipal));
    }
}
