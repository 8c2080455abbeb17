//! Why the pool timed out: sqlx retries refused connections until the acquire timeout and then
//! reports only `PoolTimedOut`, hiding the cause ("Connection refused", "too many clients", …).
//! One direct connection attempt ([`probe`]) tells.

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::Connection;
use std::time::{Duration, Instant};

/// How long a diagnosis of a pool timeout is reused before a new probe.
const DIAGNOSIS_REUSE: Duration = Duration::from_secs(1);

/// The longest a diagnosis probe waits for a direct connection (less when the acquire timeout is
/// shorter).
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Explains the pool timeouts of one pool, probing at most once per [`DIAGNOSIS_REUSE`].
#[derive(Debug)]
pub(crate) struct Diagnosis {
    pool: PgPool,
    /// The last probe's explanation and when it was made: reused for [`DIAGNOSIS_REUSE`], so
    /// that many failing calls cause one probe. Held during a probe (single flight).
    last: tokio::sync::Mutex<Option<(Instant, String)>>,
}

impl Diagnosis {
    /// A diagnosis of `pool`'s timeouts, with its connect options.
    pub(crate) fn new(pool: PgPool) -> Self {
        Self {
            pool,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The text of `error` for logs, with the cause of a pool timeout appended: the result of
    /// one direct connection attempt ([`probe`]) made with the pool's connect options, e.g.
    /// `pool timed out while waiting for an open connection: cannot connect to PostgreSQL: error
    /// communicating with database: Connection refused (os error 111)`.
    pub(crate) async fn explain(&self, error: sqlx::Error) -> String {
        if !matches!(error, sqlx::Error::PoolTimedOut) {
            return error.to_string();
        }
        let mut last = self.last.lock().await;
        if let Some((at, cause)) = last.as_ref() {
            if at.elapsed() < DIAGNOSIS_REUSE {
                return format!("{error}: {cause}");
            }
        }
        let options = self.pool.options();
        let cause = match probe(
            &self.pool.connect_options(),
            probe_timeout(options.get_acquire_timeout()),
        )
        .await
        {
            Some(cause) => format!("cannot connect to PostgreSQL: {cause}"),
            None => format!(
                "a direct connection succeeded, so all {} pooled connections were busy",
                options.get_max_connections()
            ),
        };
        let text = format!("{error}: {cause}");
        *last = Some((Instant::now(), cause));
        text
    }
}

/// Why a pool that `connect_with` failed to open (with `error`) has no connection: for a pool
/// timeout, the result of one [`probe`] within `acquire_timeout` (at most
/// [`MAX_PROBE_TIMEOUT`]); otherwise the error's text.
pub(crate) async fn explain_connect(
    error: sqlx::Error,
    connect: &PgConnectOptions,
    acquire_timeout: Duration,
) -> String {
    let text = match error {
        error @ sqlx::Error::PoolTimedOut => probe(connect, probe_timeout(acquire_timeout))
            .await
            .unwrap_or_else(|| error.to_string()),
        error => error.to_string(),
    };
    crate::pooler::startup_parameter_advice(&text).unwrap_or(text)
}

/// How long a probe may wait: the acquire timeout, at most [`MAX_PROBE_TIMEOUT`].
fn probe_timeout(acquire_timeout: Duration) -> Duration {
    acquire_timeout.min(MAX_PROBE_TIMEOUT)
}

/// Opens (and closes) one connection with `options`, outside any pool: `None` when it works,
/// otherwise why not (the error's text, or that no answer came within `timeout`).
async fn probe(options: &PgConnectOptions, timeout: Duration) -> Option<String> {
    match tokio::time::timeout(timeout, PgConnection::connect_with(options)).await {
        Ok(Ok(connection)) => {
            if let Err(error) = connection.close().await {
                tracing::debug!(%error, "probe connection did not close cleanly");
            }
            None
        }
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!("no answer within {} ms", timeout.as_millis())),
    }
}
