//! Cancel requests between replicas over PostgreSQL `LISTEN`/`NOTIFY` on [`CANCEL_CHANNEL`]:
//! one dedicated listening connection per store forwards each request to a broadcast channel,
//! and likewise recorded outcomes and decisions (for waiters) and changed finished records
//! ([`CHANGED_CHANNEL`], for replay caches). Also the freeing of reservations whose tool never
//! ran ([`release_unused`]).

use crate::failure::Failure;
use crate::pinned::Db;
use crate::sql::{NOTIFY_SQL, RELEASE_RESERVATION_SQL};
use carmy::store::{IdempotencyKey, RecordChange};
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

/// The channel on which a trigger announces that a finished record was updated or deleted
/// (migration `V11`, not by the pruner); the payload is the identity before the change as a
/// JSON array `["<principal>", "<session_id>", "<request_id>"]`, or empty when any record may
/// have changed.
pub const CHANGED_CHANNEL: &str = "carmy_changed";

/// Where the listener forwards what it hears; no receiver is fine (nothing here waits for it).
#[derive(Clone)]
pub(crate) struct Heard {
    /// Cancel requests ([`CANCEL_CHANNEL`]).
    pub cancels: broadcast::Sender<ExecutionId>,
    /// Recorded outcomes and decisions ([`RECORDED_CHANNEL`], [`DECIDED_CHANNEL`]).
    pub recorded: broadcast::Sender<ExecutionId>,
    /// Changed finished records ([`CHANGED_CHANNEL`]); [`RecordChange::Unknown`] each time a
    /// listening session starts, since announcements may have been missed before it.
    pub changes: broadcast::Sender<RecordChange>,
}

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
/// their payloads to `heard.recorded` (for calls that wait for an outcome), and on
/// [`CHANGED_CHANNEL`], forwarding to `heard.changes` (for replay caches). Each session that
/// starts listening (the first, and every one after a failure) sends
/// [`RecordChange::Unknown`] first: changes announced while disconnected are lost, so caches
/// drop every copy.
pub(crate) async fn listen_for_cancels(
    connect: PgConnectOptions,
    heard: Heard,
    mut stopped: watch::Receiver<bool>,
) {
    let listen = async {
        loop {
            let Err(error) = forward_cancels(&connect, &heard).await;
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
    heard: &Heard,
) -> Result<std::convert::Infallible, sqlx::Error> {
    let connection = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(connect.clone());
    let mut listener = PgListener::connect_with(&connection).await?;
    listener
        .listen_all([
            CANCEL_CHANNEL,
            RECORDED_CHANNEL,
            DECIDED_CHANNEL,
            CHANGED_CHANNEL,
        ])
        .await?;
    // Listening from here on; whatever changed before is unknown.
    let _ = heard.changes.send(RecordChange::Unknown);
    loop {
        // PgListener reconnects by itself after a broken connection (recv then returns the
        // next notification of a new session): treat that as a new session too.
        let Some(notification) = listener.try_recv().await? else {
            tracing::warn!("listener reconnected; dropping every cached record");
            let _ = heard.changes.send(RecordChange::Unknown);
            continue;
        };
        let channel = notification.channel();
        // No receiver is fine: then nothing here runs, waits for or caches that execution.
        if channel == CHANGED_CHANNEL {
            let _ = heard.changes.send(changed(notification.payload()));
            continue;
        }
        let execution_id = ExecutionId::from_stored(notification.payload());
        let _ = if channel == CANCEL_CHANNEL {
            heard.cancels.send(execution_id)
        } else {
            heard.recorded.send(execution_id)
        };
    }
}

/// The change a [`CHANGED_CHANNEL`] payload announces: the identity it names, or
/// [`RecordChange::Unknown`] for an empty payload (or one this build cannot read).
fn changed(payload: &str) -> RecordChange {
    match serde_json::from_str::<[String; 3]>(payload) {
        Ok([principal, session_id, request_id]) => {
            RecordChange::Changed(IdempotencyKey::new(principal, session_id, request_id))
        }
        Err(_) => RecordChange::Unknown,
    }
}

/// `NOTIFY carmy_cancel, '<execution_id>'`: every replica hears it; the one running the
/// execution cancels it.
pub(crate) async fn request_cancel(pool: &Db, execution_id: &ExecutionId) -> Result<(), Failure> {
    sqlx::query(NOTIFY_SQL)
        .bind(CANCEL_CHANNEL)
        .bind(execution_id.as_str())
        .execute(pool.executor())
        .await?;
    Ok(())
}

/// One autocommitted statement ([`RELEASE_RESERVATION_SQL`]) on the row, only while it is
/// `running`, held by `execution_id` and owned by `instance_id` (`IdempotencyStore::release`:
/// a reservation whose tool never ran): a first attempt's row is deleted, a taken-over
/// attempt's handed back so that it reads interrupted again (docs/semantics.md §12.7). A release
/// that arrives after another replica took the execution over changes nothing.
pub(crate) async fn release_unused(
    pool: &Db,
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
        .fetch_one(pool.executor())
        .await?;
    if row.try_get::<i64, _>("deleted")? > 0 {
        tracing::info!(%execution_id, "freed a reservation whose tool never ran");
    }
    if row.try_get::<i64, _>("handed_back")? > 0 {
        tracing::info!(%execution_id, "handed a taken-over execution back: its tool did nothing this time, an earlier attempt's effect is unknown; the next attempt takes it over again");
    }
    Ok(())
}

/// The [`CHANGED_CHANNEL`] payload naming one identity: a JSON array of its three strings
/// (`["<principal>", "<session_id>", "<request_id>"]`), or the empty payload (every copy) when
/// that would not fit in a notification (8000 bytes or more), as `carmy.announce_change`
/// (migration `V14`) writes it.
pub(crate) fn changed_payload(principal: &str, session_id: &str, request_id: &str) -> String {
    let payload = serde_json::json!([principal, session_id, request_id]).to_string();
    if payload.len() >= 8000 {
        String::new()
    } else {
        payload
    }
}

/// Announces on [`CHANGED_CHANNEL`] that the finished record of `(principal, session_id,
/// request_id)` changed (an expired record replaced by a new reservation, docs/semantics.md
/// §8.4), after the change committed, from this connection (on Citus, the coordinator's). A
/// failure is only logged: a replica then drops its copy when its replay cache's time to live
/// ends, and the copy it keeps meanwhile is of a record past its retention.
pub(crate) async fn announce_changed<'e, E>(
    executor: E,
    (principal, session_id, request_id): (&str, &str, &str),
) where
    E: sqlx::PgExecutor<'e>,
{
    let sent = sqlx::query(NOTIFY_SQL)
        .bind(CHANGED_CHANNEL)
        .bind(changed_payload(principal, session_id, request_id))
        .execute(executor)
        .await;
    if let Err(error) = sent {
        tracing::warn!(%error, "could not announce a changed record to the replay caches");
    }
}
