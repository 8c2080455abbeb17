//! Least-privilege roles (docs/semantics.md §14.2): [`grant_runtime`] gives a role exactly what a
//! gateway replica does, [`grant_reader`] gives a role read access to the schema `carmy`. The SQL
//! is [`RUNTIME_GRANTS_SQL`] and [`READER_GRANTS_SQL`] (the files under `src/grants/`), run by the
//! schema's owner after the migrations, with `{role}` replaced by the quoted role name.

use sqlx::{Connection, Executor, PgConnection};

/// The grants of the runtime role, `{role}` standing for the quoted role name.
pub const RUNTIME_GRANTS_SQL: &str = include_str!("grants/runtime.sql");

/// The grants of the read-only DBA role, `{role}` standing for the quoted role name.
pub const READER_GRANTS_SQL: &str = include_str!("grants/reader.sql");

/// Why a role could not be granted its rights. The text names the role and what to do.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The database could not be reached (the cause follows).
    #[error("cannot connect to PostgreSQL to grant roles: {0}")]
    Connect(#[source] sqlx::Error),
    /// The role does not exist: Carmy does not create roles (their passwords are the
    /// operator's).
    #[error("role {0:?} does not exist: create it first (CREATE ROLE \"{0}\" LOGIN PASSWORD '…'), then grant again")]
    NoSuchRole(String),
    /// A grant statement failed, typically because the connecting role does not own the schema
    /// `carmy` (run it as the role that ran the migrations).
    #[error("cannot grant role {role:?} its rights: {source} (run this as the owner of the schema carmy, after the migrations)")]
    Statement {
        /// The role being granted.
        role: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

/// Gives `role` the runtime grants ([`RUNTIME_GRANTS_SQL`]) on the database of `database_url`,
/// in one transaction. Run as the schema's owner, after [`crate::migrate`]; repeatable.
///
/// # Errors
/// [`GrantError`], naming the role.
pub async fn grant_runtime(database_url: &str, role: &str) -> Result<(), GrantError> {
    grant(database_url, role, RUNTIME_GRANTS_SQL).await?;
    // The example tools' orders, made by the gateway, when they exist.
    let mut connection = PgConnection::connect(database_url)
        .await
        .map_err(GrantError::Connect)?;
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('carmy.example_orders') IS NOT NULL")
        .fetch_one(&mut connection)
        .await
        .map_err(|source| GrantError::Statement {
            role: role.to_owned(),
            source,
        })?;
    if exists {
        connection
            .execute(sqlx::raw_sql(&with_role(EXAMPLE_ORDERS_GRANT_SQL, role)))
            .await
            .map_err(|source| GrantError::Statement {
                role: role.to_owned(),
                source,
            })?;
    }
    let _ = connection.close().await;
    Ok(())
}

/// The runtime role's grant on the example tools' orders (made by the gateway), run by
/// [`grant_runtime`] when that table exists.
pub const EXAMPLE_ORDERS_GRANT_SQL: &str = "GRANT INSERT, UPDATE ON carmy.example_orders TO {role}";

/// Gives `role` the read-only grants ([`READER_GRANTS_SQL`]); as [`grant_runtime`].
///
/// # Errors
/// [`GrantError`], naming the role.
pub async fn grant_reader(database_url: &str, role: &str) -> Result<(), GrantError> {
    grant(database_url, role, READER_GRANTS_SQL).await
}

/// Runs `template` for `role` in one transaction, after checking the role exists.
async fn grant(database_url: &str, role: &str, template: &str) -> Result<(), GrantError> {
    let mut connection = PgConnection::connect(database_url)
        .await
        .map_err(GrantError::Connect)?;
    let failed = |source| GrantError::Statement {
        role: role.to_owned(),
        source,
    };
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
            .bind(role)
            .fetch_one(&mut connection)
            .await
            .map_err(failed)?;
    if !exists {
        return Err(GrantError::NoSuchRole(role.to_owned()));
    }
    let sql = with_role(template, role);
    let mut transaction = connection.begin().await.map_err(failed)?;
    transaction
        .execute(sqlx::raw_sql(&sql))
        .await
        .map_err(failed)?;
    transaction.commit().await.map_err(failed)?;
    let _ = connection.close().await;
    tracing::info!(role, "granted the role its rights on schema carmy");
    Ok(())
}

/// `template` with every `{role}` replaced by `role` as a quoted SQL identifier.
fn with_role(template: &str, role: &str) -> String {
    template.replace("{role}", &format!("\"{}\"", role.replace('"', "\"\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_is_quoted_as_an_identifier() {
        assert_eq!(
            with_role("GRANT x TO {role};", "carmy_runtime"),
            "GRANT x TO \"carmy_runtime\";"
        );
        assert_eq!(
            with_role("GRANT x TO {role};", "a\"; DROP TABLE t; --"),
            "GRANT x TO \"a\"\"; DROP TABLE t; --\";"
        );
        assert!(!RUNTIME_GRANTS_SQL.contains("DELETE ON carmy.audit_log"));
        assert!(RUNTIME_GRANTS_SQL.contains("GRANT INSERT ON carmy.audit_log TO {role};"));
    }
}
