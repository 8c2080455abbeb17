//! The connections of the store's hot path (`reserve`, `complete`): a bb8 pool of sqlx
//! connections that costs no round trip of its own on the happy path.
//!
//! sqlx's own pool pings every connection when it is returned (not configurable), which doubles
//! the round trips of a call. Here a connection is pinged only before use after it sat idle for
//! [`PING_IF_IDLE_FOR`](crate::PING_IF_IDLE_FOR) (the rule of both pools, `needs_ping`), and one
//! whose statement was lost in transit (`lost_in_transit`) is marked broken and discarded instead
//! of being returned.

use crate::failure::lost_in_transit;
use crate::options::needs_ping;
use crate::pinned::{Pinning, Through};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use std::time::{Duration, Instant};

/// A pooled connection with what the pool needs to know about it.
pub(crate) struct HotConnection {
    connection: PgConnection,
    /// How statements run on it (a transaction-mode pooler pins each one, `pinned`).
    pinning: Pinning,
    /// Set when a statement failed in transit: the connection is discarded on return.
    broken: bool,
    last_used: Instant,
}

impl HotConnection {
    /// The connection as an executor with its pinning.
    pub(crate) fn through(&mut self) -> Through<'_> {
        Through::new(&mut self.connection, self.pinning.clone())
    }

    /// Records how a statement on this connection went.
    pub(crate) fn used<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
        self.last_used = Instant::now();
        if let Err(error) = outcome {
            self.broken |= lost_in_transit(error);
        }
    }
}

/// Opens connections with the store's connect options.
pub(crate) struct HotManager {
    connect: PgConnectOptions,
    pinning: Pinning,
}

impl bb8::ManageConnection for HotManager {
    type Connection = HotConnection;
    type Error = sqlx::Error;

    async fn connect(&self) -> Result<HotConnection, sqlx::Error> {
        Ok(HotConnection {
            connection: PgConnection::connect_with(&self.connect).await?,
            pinning: self.pinning.clone(),
            broken: false,
            last_used: Instant::now(),
        })
    }

    async fn is_valid(&self, hot: &mut HotConnection) -> Result<(), sqlx::Error> {
        if needs_ping(hot.last_used.elapsed()) {
            hot.connection.ping().await?;
            hot.last_used = Instant::now();
        }
        Ok(())
    }

    fn has_broken(&self, hot: &mut HotConnection) -> bool {
        hot.broken
    }
}

/// A pool of at most `max_size` hot connections, waiting at most `timeout` for one, whose
/// statements run as `pinning` says; it opens connections only when they are first needed.
pub(crate) fn hot_pool(
    connect: PgConnectOptions,
    pinning: Pinning,
    max_size: u32,
    timeout: Duration,
) -> bb8::Pool<HotManager> {
    bb8::Pool::builder()
        .max_size(max_size.max(1))
        .connection_timeout(timeout.max(Duration::from_millis(1)))
        .test_on_check_out(true)
        .build_unchecked(HotManager { connect, pinning })
}

/// A bb8 failure as the sqlx error the rest of the store reports (a wait that timed out is
/// sqlx's `PoolTimedOut`).
pub(crate) fn run_error(error: bb8::RunError<sqlx::Error>) -> sqlx::Error {
    match error {
        bb8::RunError::User(error) => error,
        bb8::RunError::TimedOut => sqlx::Error::PoolTimedOut,
    }
}
