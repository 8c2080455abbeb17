//! Shared helpers of the integration tests: one PostgreSQL database per test.

#![allow(dead_code)] // each test binary uses its own subset

use carmy_postgres::{migrate, PostgresStore, PostgresStoreOptions};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use std::time::Duration;

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// `url` with its database name replaced by `database`, query string kept.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |at| at + 3);
    let root = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{root}/{database}?{query}"),
        None => format!("{root}/{database}"),
    }
}

/// A database of its own for one test, dropped on drop.
pub struct TestDb {
    /// The database name, `carmy_test_<32 hex digits>`.
    pub name: String,
    /// The URL of the database.
    pub url: String,
}

impl TestDb {
    /// A fresh, empty database.
    pub async fn empty() -> Self {
        let name = format!("carmy_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server_url())
            .await
            .expect("DATABASE_URL must reach a PostgreSQL server");
        // A database name cannot be a bind parameter; this one is made of a fresh UUID only.
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        let url = with_database(&server_url(), &name);
        Self { name, url }
    }

    /// A fresh database with every migration applied.
    pub async fn migrated() -> Self {
        let db = Self::empty().await;
        migrate(&db.url).await.unwrap();
        db
    }

    /// A small pool for inspecting and changing rows directly.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .unwrap()
    }

    /// Options with short timeouts for this database.
    pub fn options(&self) -> PostgresStoreOptions {
        let mut options = PostgresStoreOptions::new(&self.url);
        options.max_connections = 4;
        options.acquire_timeout = Duration::from_secs(10);
        options
    }

    pub async fn store(&self) -> PostgresStore {
        PostgresStore::connect(self.options()).await.unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop may run inside the test's runtime: use a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut admin = PgConnection::connect(&server_url()).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
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
