//! Test databases: every test gets a database of its own on the server of `DATABASE_URL`, named
//! `carmy_test_<32 hex digits>`, dropped (with its leftover connections) when the fixture drops.
//!
//! On Citus: with `CARMY_TEST_CITUS_WORKERS` set ([`CITUS_WORKERS_ENV`]: the workers'
//! `host:port`, comma separated, e.g. `127.0.0.1:9701,127.0.0.1:9702`) and `DATABASE_URL`
//! naming the coordinator, [`TestDb::create`] also creates the database on every worker, runs
//! `CREATE EXTENSION citus` in each new database and registers the coordinator and the workers
//! in the coordinator's; [`TestDb::migrated`] then also distributes the schema
//! ([`carmy_postgres::distribute`]); `Drop` drops the workers' databases too. So the existing
//! tests run against a distributed schema unchanged. [`TestDb::create_plain`] is a database
//! without Citus whatever the variable says. Unset, nothing of this happens.

use crate::poll::eventually_eq;
use carmy_postgres::{distribute, migrate, Distribution, PostgresStore, PostgresStoreOptions};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, Executor, PgConnection, PgPool};
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

/// The environment variable that runs the tests on a Citus cluster: the workers' `host:port`,
/// comma separated (`DATABASE_URL` names the coordinator). See the module's documentation.
pub const CITUS_WORKERS_ENV: &str = "CARMY_TEST_CITUS_WORKERS";

/// The Citus workers of [`CITUS_WORKERS_ENV`] as `(host, port)`; none when it is unset or
/// empty.
///
/// # Panics
/// When an entry is not `host:port` with a numeric port.
pub fn citus_workers() -> Vec<(String, u16)> {
    let Ok(workers) = std::env::var(CITUS_WORKERS_ENV) else {
        return Vec::new();
    };
    workers
        .split(',')
        .map(str::trim)
        .filter(|worker| !worker.is_empty())
        .map(|worker| {
            let (host, port) = worker
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .unwrap_or_else(|| {
                    panic!("{CITUS_WORKERS_ENV}: {worker:?} is not host:port (e.g. 127.0.0.1:9701)")
                });
            (host.trim_matches(['[', ']']).to_owned(), port)
        })
        .collect()
}

/// `url` with its host and port replaced; user, database and query string are kept.
///
/// # Errors
/// When `url` is not a URL or cannot have that host.
pub fn with_address(url: &str, host: &str, port: u16) -> Result<String, String> {
    let mut parsed = url::Url::parse(url).map_err(|error| error.to_string())?;
    parsed
        .set_host(Some(host))
        .map_err(|error| format!("host {host:?}: {error}"))?;
    parsed
        .set_port(Some(port))
        .map_err(|()| format!("{url} cannot have a port"))?;
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
    /// The admin URLs of the Citus workers holding a database of the same name (none without
    /// [`CITUS_WORKERS_ENV`]).
    worker_admin_urls: Vec<String>,
}

impl TestDb {
    /// A fresh, empty database on the server of `DATABASE_URL`; on Citus
    /// ([`CITUS_WORKERS_ENV`]) with the extension and the workers (see the module's
    /// documentation).
    ///
    /// # Panics
    /// When the server cannot be reached or the user may not create databases.
    pub async fn create() -> Self {
        Self::create_on(&server_url()).await
    }

    /// A fresh, empty database on the server that `admin_url` reaches; on Citus as
    /// [`TestDb::create`], `admin_url` then reaching the coordinator.
    ///
    /// # Panics
    /// When the server cannot be reached, the user may not create databases, or (on Citus) a
    /// worker cannot be reached or the extension not created.
    pub async fn create_on(admin_url: &str) -> Self {
        let mut db = Self::create_plain_on(admin_url).await;
        let workers = citus_workers();
        if !workers.is_empty() {
            db.add_citus(admin_url, &workers).await;
        }
        db
    }

    /// A fresh, empty database on the server of `DATABASE_URL`, without Citus even when
    /// [`CITUS_WORKERS_ENV`] is set (a plain database on the coordinator).
    ///
    /// # Panics
    /// As [`TestDb::create`].
    pub async fn create_plain() -> Self {
        Self::create_plain_on(&server_url()).await
    }

    /// A fresh, empty database on the server that `admin_url` reaches, without Citus even when
    /// [`CITUS_WORKERS_ENV`] is set (e.g. on a throwaway cluster).
    ///
    /// # Panics
    /// As [`TestDb::create`].
    pub async fn create_plain_on(admin_url: &str) -> Self {
        let name = format!("carmy_test_{}", uuid::Uuid::new_v4().simple());
        create_database(admin_url, &name).await;
        let url = with_database(admin_url, &name).expect("a database URL");
        Self {
            name,
            url,
            admin_url: admin_url.to_owned(),
            worker_admin_urls: Vec::new(),
        }
    }

    /// Makes this database a Citus database ([`add_citus`]).
    async fn add_citus(&mut self, admin_url: &str, workers: &[(String, u16)]) {
        self.worker_admin_urls = add_citus(admin_url, &self.name, workers)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// A fresh database with every migration applied; on Citus ([`CITUS_WORKERS_ENV`]) also
    /// distributed ([`carmy_postgres::distribute`]). Tests that start gateway replicas take
    /// it too (their own migration is then a no-op), so that on Citus they find the schema
    /// distributed, as `carmy-gateway migrate --distribute citus` leaves it.
    pub async fn migrated() -> Self {
        let db = Self::create().await;
        migrate(&db.url).await.unwrap();
        if db.is_citus() {
            distribute(&db.url, Distribution::Citus).await.unwrap();
        }
        db
    }

    /// Whether this database is on Citus (made with [`CITUS_WORKERS_ENV`] set).
    pub fn is_citus(&self) -> bool {
        !self.worker_admin_urls.is_empty()
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
    /// (`pg_stat_activity.wait_event_type = 'Lock'`); on Citus, summed over the coordinator's
    /// and the workers' databases of this name.
    ///
    /// # Panics
    /// After 10 s, with `what` and the last count seen.
    pub async fn until_lock_waiters(&self, expected: i64, what: &str) {
        // On Citus a statement on a distributed table waits on the worker holding the shard:
        // the sessions of the same-named database on every node are counted.
        let mut urls = vec![self.url.clone()];
        for worker_admin in &self.worker_admin_urls {
            urls.push(with_database(worker_admin, &self.name).expect("a database URL"));
        }
        let mut observers = Vec::new();
        for url in &urls {
            observers.push(
                PgPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .unwrap(),
            );
        }
        eventually_eq(Duration::from_secs(10), what, expected, || {
            let observers = observers.clone();
            async move {
                let mut waiting = 0;
                for observer in &observers {
                    waiting += sqlx::query_scalar::<_, i64>(
                        "SELECT count(*) FROM pg_stat_activity \
                         WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    )
                    .fetch_one(observer)
                    .await
                    .unwrap();
                }
                waiting
            }
        })
        .await;
        for observer in observers {
            observer.close().await;
        }
    }
}

/// Creates the database `name` on the server of `admin_url`.
async fn create_database(admin_url: &str, name: &str) {
    let mut admin = PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|error| panic!("DATABASE_URL must reach a PostgreSQL server: {error}"));
    // A database name cannot be a bind parameter; this one is made of a fresh UUID only.
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("the test user may create databases");
    admin.close().await.unwrap();
}

/// Makes the database `name` (just created on the Citus coordinator that `admin_url` reaches)
/// a Citus database: creates a database of the same name on every worker (`(host, port)`,
/// reached as `admin_url` with that address), runs `CREATE EXTENSION citus` in each new
/// database, and registers the coordinator (`citus_set_coordinator_host`, with the address of
/// `admin_url`) and the workers (`citus_add_node`) in the coordinator's. Returns the workers'
/// admin URLs, to drop their databases with ([`drop_database`]). The benchmark uses it too.
///
/// # Errors
/// A text naming the step and the server's message (e.g. a worker not reachable, Citus not in
/// `shared_preload_libraries`).
pub async fn add_citus(
    admin_url: &str,
    name: &str,
    workers: &[(String, u16)],
) -> Result<Vec<String>, String> {
    let creating: Vec<_> = workers
        .iter()
        .map(|(host, port)| {
            let worker_admin = with_address(admin_url, host, *port);
            let name = name.to_owned();
            tokio::spawn(async move {
                let worker_admin = worker_admin?;
                let mut admin = PgConnection::connect(&worker_admin)
                    .await
                    .map_err(|error| {
                        format!("cannot reach the Citus worker {worker_admin}: {error}")
                    })?;
                // `Executor` methods in this spawned task: the opaque futures of
                // `RawSql::execute` trip rustc's higher-ranked `Send` check.
                admin
                    .execute(sqlx::raw_sql(&format!("CREATE DATABASE {name}")))
                    .await
                    .map_err(|error| {
                        format!("CREATE DATABASE {name} on {worker_admin}: {error}")
                    })?;
                let _ = admin.close().await;
                let url = with_database(&worker_admin, &name).map_err(|error| error.to_string())?;
                create_citus(&url)
                    .await?
                    .close()
                    .await
                    .map_err(|error| error.to_string())?;
                Ok::<_, String>(worker_admin)
            })
        })
        .collect();
    let mut worker_admin_urls = Vec::new();
    let mut failed = None;
    for created in creating {
        match created
            .await
            .map_err(|error| error.to_string())
            .and_then(|created| created)
        {
            Ok(worker_admin) => worker_admin_urls.push(worker_admin),
            Err(error) => failed = failed.or(Some(error)),
        }
    }
    if let Some(error) = failed {
        for worker_admin in &worker_admin_urls {
            let _ = drop_database(worker_admin, name).await;
        }
        return Err(error);
    }
    let url = with_database(admin_url, name).map_err(|error| error.to_string())?;
    let mut coordinator = create_citus(&url).await?;
    let options: sqlx::postgres::PgConnectOptions = admin_url
        .parse()
        .map_err(|error| format!("invalid URL: {error}"))?;
    sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
        .bind(options.get_host())
        .bind(i32::from(options.get_port()))
        .execute(&mut coordinator)
        .await
        .map_err(|error| format!("citus_set_coordinator_host: {error}"))?;
    for (host, port) in workers {
        sqlx::query("SELECT citus_add_node($1, $2)")
            .bind(host)
            .bind(i32::from(*port))
            .execute(&mut coordinator)
            .await
            .map_err(|error| format!("citus_add_node('{host}', {port}): {error}"))?;
    }
    let _ = coordinator.close().await;
    Ok(worker_admin_urls)
}

/// `CREATE EXTENSION citus` in the database of `url`; returns the connection.
async fn create_citus(url: &str) -> Result<PgConnection, String> {
    let mut connection = PgConnection::connect(url)
        .await
        .map_err(|error| format!("cannot reach the Citus node's database {url}: {error}"))?;
    connection
        .execute(sqlx::raw_sql(
            "SET client_min_messages = warning; CREATE EXTENSION citus",
        ))
        .await
        .map_err(|error| {
            format!(
                "CREATE EXTENSION citus in {url} (is citus in shared_preload_libraries?): {error}"
            )
        })?;
    Ok(connection)
}

/// Drops the database `name` of the server of `admin_url`, ending its connections. Prepared
/// transactions left in it (a Citus worker's, when a test killed a gateway in the middle of a
/// two-phase commit and the coordinator's database that would have recovered them is gone) are
/// rolled back first: they would keep it from being dropped.
///
/// # Errors
/// The server's, when it cannot be reached or refuses.
pub async fn drop_database(admin_url: &str, name: &str) -> Result<(), sqlx::Error> {
    let mut admin = PgConnection::connect(admin_url).await?;
    let prepared: Vec<String> =
        sqlx::query_scalar("SELECT gid FROM pg_prepared_xacts WHERE database = $1")
            .bind(name)
            .fetch_all(&mut admin)
            .await?;
    if !prepared.is_empty() {
        let url = with_database(admin_url, name)
            .map_err(|error| sqlx::Error::Configuration(error.into()))?;
        let mut database = PgConnection::connect(&url).await?;
        for gid in prepared {
            sqlx::raw_sql(&format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")))
                .execute(&mut database)
                .await?;
        }
        database.close().await?;
    }
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    admin.close().await
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // The coordinator first: its sessions hold connections to the workers.
        let mut admin_urls = vec![self.admin_url.clone()];
        admin_urls.extend(self.worker_admin_urls.iter().cloned());
        // Drop may run inside the test's runtime, which cannot be blocked on: use a thread with
        // a runtime of its own. `WITH (FORCE)` ends the connections still open.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                for admin_url in &admin_urls {
                    drop_database(admin_url, &name).await?;
                }
                Ok::<_, sqlx::Error>(())
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
    use super::{with_address, with_database};

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

    #[test]
    fn worker_urls_keep_all_but_the_address() {
        assert_eq!(
            with_address(
                "postgres://u@127.0.0.1:9700/postgres?sslmode=disable",
                "h",
                9701
            )
            .unwrap(),
            "postgres://u@h:9701/postgres?sslmode=disable"
        );
    }
}
