//! The benchmark's own database: created on the given server, filled with existing
//! reservations in SQL, dropped at the end.

use serde::Serialize;
use sqlx::{Connection, PgConnection};
use std::time::Instant;

/// How long [`BenchDb::commits`] waits for idle backends to report their counts: PostgreSQL 15's
/// `PGSTAT_IDLE_INTERVAL` (10 s) and a margin.
pub const STATS_SETTLE: std::time::Duration = std::time::Duration::from_millis(10_500);

/// A database `carmy_bench_<random>` on the server of the URL given on the command line (and,
/// on Citus, on its workers).
pub struct BenchDb {
    /// The server URL the benchmark was given (its database is used to create and drop ours).
    admin_url: String,
    /// On Citus, the workers' admin URLs: they hold a database of the same name.
    worker_admin_urls: Vec<String>,
    /// The URL of our database.
    pub url: String,
    /// Its name.
    pub name: String,
}

/// `url` pointing at `127.0.0.1:<port>` instead of its host, with TLS off (`sslmode=disable`):
/// the URL through the counting proxy of [`crate::wire`].
pub fn through_proxy(url: &str, port: u16) -> Result<String, String> {
    let mut parsed =
        url::Url::parse(url).map_err(|error| format!("invalid database URL: {error}"))?;
    parsed
        .set_host(Some("127.0.0.1"))
        .map_err(|error| format!("cannot set the host: {error}"))?;
    parsed
        .set_port(Some(port))
        .map_err(|()| "cannot set the port".to_owned())?;
    let query: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(key, _)| key != "sslmode")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(query)
        .append_pair("sslmode", "disable");
    Ok(parsed.into())
}

/// The PostgreSQL server's host and port from a URL (for the proxy's upstream).
pub fn server_address(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|error| format!("invalid database URL: {error}"))?;
    let host = parsed.host_str().unwrap_or("127.0.0.1");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = parsed.port().unwrap_or(5432);
    Ok(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Server facts shown in the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerInfo {
    /// `server_version`.
    pub version: String,
    /// `fsync`.
    pub fsync: String,
    /// `synchronous_commit`.
    pub synchronous_commit: String,
    /// `shared_buffers`.
    pub shared_buffers: String,
    /// `max_connections`.
    pub max_connections: String,
}

impl BenchDb {
    /// Creates `carmy_bench_<random>` on the server of `admin_url`. With Citus `workers`
    /// (`(host, port)`; `admin_url` then reaches the coordinator), also on each worker, with the
    /// extension and the nodes registered ([`carmy_test_support::add_citus`]), then migrates and
    /// distributes it ([`carmy_postgres::distribute`]): the gateway finds it ready.
    pub async fn create(admin_url: &str, workers: &[(String, u16)]) -> Result<Self, String> {
        let name = format!("carmy_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url)
            .await
            .map_err(|error| format!("cannot connect to {}: {error}", redact(admin_url)))?;
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .map_err(|error| format!("cannot create database {name}: {error}"))?;
        let mut database = Self {
            admin_url: admin_url.to_owned(),
            worker_admin_urls: Vec::new(),
            url: carmy_test_support::with_database(admin_url, &name)
                .map_err(|error| format!("invalid database URL: {error}"))?,
            name,
        };
        if !workers.is_empty() {
            if let Err(error) = database.distribute(workers).await {
                let _ = database.drop_db().await;
                return Err(error);
            }
        }
        Ok(database)
    }

    /// On Citus: the database on the workers, migrated and distributed.
    async fn distribute(&mut self, workers: &[(String, u16)]) -> Result<(), String> {
        self.worker_admin_urls =
            carmy_test_support::add_citus(&self.admin_url, &self.name, workers).await?;
        carmy_postgres::migrate(&self.url)
            .await
            .map_err(|error| error.to_string())?;
        let report = carmy_postgres::distribute(&self.url, carmy_postgres::Distribution::Citus)
            .await
            .map_err(|error| error.to_string())?;
        eprintln!(
            "database {} distributed on Citus {} over {} workers",
            self.name,
            report.citus_version,
            workers.len()
        );
        Ok(())
    }

    /// Whether the database is on Citus (`--citus-workers`).
    pub fn is_citus(&self) -> bool {
        !self.worker_admin_urls.is_empty()
    }

    /// A new connection to our database.
    pub async fn connect(&self) -> Result<PgConnection, String> {
        PgConnection::connect(&self.url)
            .await
            .map_err(|error| format!("cannot connect to {}: {error}", self.name))
    }

    /// Drops the database (the coordinator's first, then the workers'), ending leftover
    /// sessions.
    pub async fn drop_db(&self) -> Result<(), String> {
        for admin_url in std::iter::once(&self.admin_url).chain(&self.worker_admin_urls) {
            carmy_test_support::drop_database(admin_url, &self.name)
                .await
                .map_err(|error| {
                    format!(
                        "cannot drop {} on {}: {error}",
                        self.name,
                        redact(admin_url)
                    )
                })?;
        }
        Ok(())
    }

    /// Server settings that matter for the figures.
    pub async fn server_info(&self) -> Result<ServerInfo, String> {
        let mut conn = self.connect().await?;
        let mut info = ServerInfo::default();
        for (field, name) in [
            (&mut info.version, "server_version"),
            (&mut info.fsync, "fsync"),
            (&mut info.synchronous_commit, "synchronous_commit"),
            (&mut info.shared_buffers, "shared_buffers"),
            (&mut info.max_connections, "max_connections"),
        ] {
            let query = format!("SHOW {name}");
            *field = sqlx::query_scalar::<_, String>(&query)
                .fetch_one(&mut conn)
                .await
                .map_err(|error| format!("{query}: {error}"))?;
        }
        Ok(info)
    }

    /// Rows in `carmy.reservations` now.
    pub async fn reservations(&self) -> Result<i64, String> {
        let mut conn = self.connect().await?;
        sqlx::query_scalar("SELECT count(*) FROM carmy.reservations")
            .fetch_one(&mut conn)
            .await
            .map_err(|error| format!("cannot count reservations: {error}"))
    }

    /// Commits of our database so far (`pg_stat_database.xact_commit`), once settled. A
    /// backend reports its counts when it goes idle, but at most once a second: counts made
    /// less than a second after its last report wait until it has been idle for 10 s
    /// (PostgreSQL 15's `PGSTAT_IDLE_INTERVAL`), so a reading right after a measurement misses
    /// its last second and the next measurement's gains them. This waits [`STATS_SETTLE`]
    /// first, then reads until two readings 1.2 s apart agree (at most 15 s more).
    pub async fn commits(&self) -> Result<i64, String> {
        tokio::time::sleep(STATS_SETTLE).await;
        let mut conn = self.connect().await?;
        let deadline = Instant::now() + std::time::Duration::from_secs(15);
        let mut last = None;
        loop {
            let now: i64 = sqlx::query_scalar(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            )
            .fetch_one(&mut conn)
            .await
            .map_err(|error| format!("cannot read pg_stat_database: {error}"))?;
            // Our own reading commits too (one per query).
            if last.is_some_and(|last: i64| now - last <= 1) || Instant::now() > deadline {
                return Ok(now);
            }
            last = Some(now);
            tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        }
    }

    /// WAL flushes of the whole server so far (`pg_stat_wal.wal_sync`).
    pub async fn wal_syncs(&self) -> Result<i64, String> {
        let mut conn = self.connect().await?;
        sqlx::query_scalar("SELECT wal_sync FROM pg_stat_wal")
            .fetch_one(&mut conn)
            .await
            .map_err(|error| format!("cannot read pg_stat_wal: {error}"))
    }

    /// Inserts completed reservations `first ..= last` of principal `anonymous` (random-looking
    /// request and execution ids, an echo-sized outcome), in chunks of 500,000 rows, each one
    /// `INSERT … SELECT generate_series` statement; then `VACUUM ANALYZE` and a `CHECKPOINT`
    /// (when the role may), so the measurement after it starts from a settled table.
    pub async fn preload(&self, first: u64, last: u64) -> Result<(), String> {
        const CHUNK: u64 = 500_000;
        const INSERT: &str = "INSERT INTO carmy.reservations \
                 (principal, session_id, request_id, tool, fingerprint, fingerprint_version, \
                  state, execution_id, outcome, error_code, owner_instance, created_at, \
                  started_at, finished_at) \
             SELECT 'anonymous', 'default', id.request_id, 'echo', \
                    md5('fp-a' || g) || md5('fp-b' || g), 'v1', 'completed', id.execution_id, \
                    '{\"execution_id\":\"' || id.execution_id || '\",\"status\":\"completed\",\
                    \"data\":{},\"error\":null,\"tool\":\"echo\",\"request_id\":\"' || \
                    id.request_id || '\",\"session_id\":\"default\",\"started_at\":\
                    \"2026-01-01T00:00:00.000Z\",\"finished_at\":\"2026-01-01T00:00:00.001Z\"}', \
                    NULL, 'inst_preload', now(), now(), now() \
             FROM generate_series($1::bigint, $2::bigint) AS g, \
                  LATERAL (SELECT md5('preload-' || g) AS request_id, \
                                  'exec_' || md5('preload-exec-' || g) AS execution_id) AS id";
        if last < first {
            return Ok(());
        }
        let mut conn = self.connect().await?;
        let started = Instant::now();
        let mut from = first;
        while from <= last {
            let to = last.min(from + CHUNK - 1);
            sqlx::query(INSERT)
                .bind(i64::try_from(from).unwrap_or(i64::MAX))
                .bind(i64::try_from(to).unwrap_or(i64::MAX))
                .execute(&mut conn)
                .await
                .map_err(|error| format!("cannot preload reservations: {error}"))?;
            if last - first >= CHUNK {
                eprintln!(
                    "  preloaded {} of {} rows ({:.0} s)",
                    to - first + 1,
                    last - first + 1,
                    started.elapsed().as_secs_f64()
                );
            }
            from = to + 1;
        }
        self.settle(&mut conn).await
    }

    /// Moves every finished reservation's `finished_at` back by `age` (an interval, e.g. `2
    /// days`), then settles the table.
    pub async fn age_finished(&self, age: &str) -> Result<(), String> {
        let mut conn = self.connect().await?;
        sqlx::query(
            "UPDATE carmy.reservations SET finished_at = finished_at - $1::interval \
             WHERE state <> 'running'",
        )
        .bind(age)
        .execute(&mut conn)
        .await
        .map_err(|error| format!("cannot age reservations: {error}"))?;
        self.settle(&mut conn).await
    }

    /// Finished reservations expired under a retention of `retention` (an interval).
    pub async fn expired(&self, retention: &str) -> Result<i64, String> {
        let mut conn = self.connect().await?;
        sqlx::query_scalar(
            "SELECT count(*) FROM carmy.reservations \
             WHERE carmy.record_expired(state, finished_at, created_at, $1::interval)",
        )
        .bind(retention)
        .fetch_one(&mut conn)
        .await
        .map_err(|error| format!("cannot count expired reservations: {error}"))
    }

    /// Deletes every reservation, then settles the table.
    pub async fn truncate(&self) -> Result<(), String> {
        let mut conn = self.connect().await?;
        sqlx::raw_sql("TRUNCATE carmy.reservations")
            .execute(&mut conn)
            .await
            .map_err(|error| format!("cannot truncate: {error}"))?;
        self.settle(&mut conn).await
    }

    async fn settle(&self, conn: &mut PgConnection) -> Result<(), String> {
        sqlx::raw_sql("VACUUM (ANALYZE) carmy.reservations")
            .execute(&mut *conn)
            .await
            .map_err(|error| format!("cannot vacuum: {error}"))?;
        if let Err(error) = sqlx::raw_sql("CHECKPOINT").execute(&mut *conn).await {
            eprintln!("  note: no CHECKPOINT before the measurement ({error})");
        }
        Ok(())
    }
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.into()
        }
        Err(_) => "<invalid URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls() {
        assert_eq!(
            super::through_proxy("postgres://u@h:5433/db?sslmode=require&a=b", 7000).unwrap(),
            "postgres://u@127.0.0.1:7000/db?a=b&sslmode=disable"
        );
        assert_eq!(
            super::server_address("postgres://u@h/db").unwrap(),
            "h:5432"
        );
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
    }
}
