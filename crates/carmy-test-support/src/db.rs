//! Test databases: every test gets a database of its own on the server of `DATABASE_URL`, named
//! `carmy_test_<32 hex digits>`, dropped (with its leftover connections) when the fixture drops.

use crate::poll::eventually_eq;
use carmy_postgres::{migrate, PostgresStore, PostgresStoreOptions};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use std::time::Duration;

/// The server used when `DATABASE_URL` is unset.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The server the tests use: `DATABASE_URL`, else [`DEFAULT_DATABASE_URL`].
pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// `url` with its database (the path) replaced by `database`; user, host, port and query
/// string are kept.
///
/// # Errors
/// When `url` is not a URL.
pub fn with_database(url: &str, database: &str) -> Result<String, url::ParseError> {
    let mut parsed = url::Url::parse(url)?;
    parsed.set_path(&format!("/{database}"));
    Ok(parsed.into())
}

/// A database of its own for one test, dropped on `Drop`.
pub struct TestDb {
    /// The database name, `carmy_test_<32 hex digits>`.
    pub name: String,
    /// The URL of the database.
    pub url: String,
    /// The URL it was created through (and is dropped through).
    admin_url: String,
}

impl TestDb {
    /// A fresh, empty database on the server of `DATABASE_URL`.
    ///
    /// # Panics
    /// When the server cannot be reached or the user may not create databases.
    pub async fn create() -> Self {
        Self::create_on(&server_url()).await
    }

    /// A fresh, empty database on the server that `admin_url` reaches.
    ///
    /// # Panics
    /// When the server cannot be reached or the user may not create databases.
    pub async fn create_on(admin_url: &str) -> Self {
        let name = format!("carmy_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .expect("DATABASE_URL must reach a PostgreSQL server");
        // A database name cannot be a bind parameter; this one is made of a fresh UUID only.
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("the test user may create databases");
        admin.close().await.unwrap();
        let url = with_database(admin_url, &name).expect("a database URL");
        Self {
            name,
            url,
            admin_url: admin_url.to_owned(),
        }
    }

    /// A fresh database with every migration applied.
    pub async fn migrated() -> Self {
        let db = Self::create().await;
        migrate(&db.url).await.unwrap();
        db
    }

    /// A connection to the database.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.unwrap()
    }

    /// A small pool (2 connections) for inspecting and changing rows directly.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .unwrap()
    }

    /// Store options for this database: 4 connections, a 10 s acquire timeout.
    pub fn options(&self) -> PostgresStoreOptions {
        let mut options = PostgresStoreOptions::new(&self.url);
        options.max_connections = 4;
        options.acquire_timeout = Duration::from_secs(10);
        options
    }

    /// A store on this database with [`TestDb::options`].
    pub async fn store(&self) -> PostgresStore {
        PostgresStore::connect(self.options()).await.unwrap()
    }

    /// Waits (10 s at most) until exactly `expected` sessions of this database wait on a lock
    /// (`pg_stat_activity.wait_event_type = 'Lock'`).
    ///
    /// # Panics
    /// After 10 s, with `what` and the last count seen.
    pub async fn until_lock_waiters(&self, expected: i64, what: &str) {
        let observer = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url)
            .await
            .unwrap();
        eventually_eq(Duration::from_secs(10), what, expected, || {
            let observer = observer.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&observer)
                .await
                .unwrap()
            }
        })
        .await;
        observer.close().await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (name, admin_url) = (self.name.clone(), self.admin_url.clone());
        // Drop may run inside the test's runtime, which cannot be blocked on: use a thread with
        // a runtime of its own. `WITH (FORCE)` ends the connections still open.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut admin = PgConnection::connect(&admin_url).await?;
                sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await?;
                admin.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_urls_are_rewritten_per_test() {
        let rewrite = |url: &str| with_database(url, "x").unwrap();
        assert_eq!(
            rewrite("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            rewrite("postgres://u:p@h/db?sslmode=disable"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(rewrite("postgres://h"), "postgres://h/x");
    }
}
