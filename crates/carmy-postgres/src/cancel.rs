//! Cancel requests between replicas over PostgreSQL `LISTEN`/`NOTIFY` on [`CANCEL_CHANNEL`]:
//! one dedicated listening connection per store forwards each request to a broadcast channel.
//! Also the freeing of reservations whose tool never ran ([`release_unused`]).

use crate::failure::Failure;
use crate::sql::{NOTIFY_CANCEL_SQL, RELEASE_RESERVATION_SQL};
use carmy::runtime::IdempotencyKey;
use sqlx::postgres::PgPool;
use sqlx::Row;

use carmy::outcome::ExecutionId;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// The `LISTEN`/`NOTIFY` channel on which cancel requests travel between replicas; the payload
/// is the execution id.
pub const CANCEL_CHANNEL: &str = "carmy_cancel";

/// The channel on which a trigger announces a recorded outcome that a call waits for
/// (migration `V7`); the payload is the execution id.
pub const RECORDED_CHANNEL: &str = "carmy_recorded";

/// The channel on which `carmy.resolve_execution` and `carmy.release_execution` announce a
/// decision (migration `V6`); the payload is the execution id.
pub const DECIDED_CHANNEL: &str = "carmy_decided";

/// How many cancel requests a slow subscriber may fall behind before it misses some.
pub(crate) const CANCEL_BACKLOG: usize = 256;

/// How long the listener waits before it reconnects after a failure.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Listens on [`CANCEL_CHANNEL`] over a dedicated connection (not one of the pool's), forwarding
/// each payload to `cancels`, until `stopped` turns true. Reconnects after a failure; requests
/// sent while disconnected are lost (cancellation is best effort; the requester watches the
/// record).
///
/// The same connection listens on [`RECORDED_CHANNEL`] and [`DECIDED_CHANNEL`], forwarding
/// their payloads to `recorded` (for calls that wait for an outcome).
pub(crate) async fn listen_for_cancels(
    connect: PgConnectOptions,
    cancels: broadcast::Sender<ExecutionId>,
    recorded: broadcast::Sender<ExecutionId>,
    mut stopped: watch::Receiver<bool>,
) {
    let listen = async {
        loop {
            let Err(error) = forward_cancels(&connect, &cancels, &recorded).await;
            tracing::warn!(%error, "cancel listener failed; reconnecting");
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    };
    tokio::select! {
        () = listen => {}
        _ = stopped.wait_for(|stop| *stop) => {}
    }
}

/// One listening session: returns only with the error that ended it.
async fn forward_cancels(
    connect: &PgConnectOptions,
    cancels: &broadcast::Sender<ExecutionId>,
    recorded: &broadcast::Sender<ExecutionId>,
) -> Result<std::convert::Infallible, sqlx::Error> {
    let connection = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(connect.clone());
    let mut listener = PgListener::connect_with(&connection).await?;
    listener
        .listen_all([CANCEL_CHANNEL, RECORDED_CHANNEL, DECIDED_CHANNEL])
        .await?;
    loop {
        let notification = listener.recv().await?;
        let execution_id = ExecutionId::from_stored(notification.payload());
        // No receiver is fine: then nothing here runs or waits for that execution.
        let _ = if notification.channel() == CANCEL_CHANNEL {
            cancels.send(execution_id)
        } else {
            recorded.send(execution_id)
        };
    }
}

/// `NOTIFY carmy_cancel, '<execution_id>'`: every replica hears it; the one running the
/// execution cancels it.
pub(crate) async fn request_cancel(
    pool: &PgPool,
    execution_id: &ExecutionId,
) -> Result<(), Failure> {
    sqlx::query(NOTIFY_CANCEL_SQL)
        .bind(CANCEL_CHANNEL)
        .bind(execution_id.as_str())
        .execute(pool)
        .await?;
    Ok(())
}

/// One autocommitted statement ([`RELEASE_RESERVATION_SQL`]) on the row, only while it is
/// `running`, held by `execution_id` and owned by `instance_id` (`IdempotencyStore::release`:
/// a reservation whose tool never ran): a first attempt's row is deleted, a taken-over
/// attempt's handed back so that it reads interrupted again (docs/semantics.md §12). A release
/// that arrives after another replica took the execution over changes nothing.
pub(crate) async fn release_unused(
    pool: &PgPool,
    instance_id: &str,
    key: &IdempotencyKey,
    execution_id: &ExecutionId,
) -> Result<(), Failure> {
    let row = sqlx::query(RELEASE_RESERVATION_SQL)
        .bind(&key.principal)
        .bind(&key.session_id)
        .bind(&key.request_id)
        .bind(execution_id.as_str())
        .bind(instance_id)
        .fetch_one(pool)
        .await?;
    if row.try_get::<i64, _>("deleted")? > 0 {
        tracing::info!(%execution_id, "freed a reservation whose tool never ran");
    }
    if row.try_get::<i64, _>("handed_back")? > 0 {
        tracing::info!(%execution_id, "handed a taken-over execution back: its tool did nothing this time, an earlier attempt's effect is unknown; the next attempt takes it over again");
    }
    Ok(())
}
