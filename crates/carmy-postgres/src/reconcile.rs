//! Reconciliation on PostgreSQL (docs/semantics.md §12.10; migration
//! `V13`): claiming interrupted executions due for a probe one replica at a time (a
//! compare-and-set on `reconcile_due_at` and the attempts, no leader), keeping each probe's
//! evidence, and telling
//! how long ago the interrupted attempt started (an "absent" proves nothing before its
//! deadline). The decisions themselves go through `carmy.resolve_execution` /
//! `carmy.release_execution` ([`crate::decide`]), like a person's.

use crate::decode::decode_key;
use crate::failure::Failure;
use crate::pinned::Db;
use carmy::outcome::ExecutionId;
use carmy::reconcile::{Evidence, ProbeRecord, ReconcileClaim, ReconcileTarget};
use sqlx::Row;
use std::time::Duration;

/// Claims due executions. Binds: `$1` tool names (`text[]`), `$2` the attempts bound, `$3` the
/// most rows, `$4` the hold in milliseconds, `$5` one execution id to claim whether due or not
/// (on demand; `NULL` for the due ones), `$6` only this principal's (`NULL`: any). A row is due
/// when it is running, its owner's lease lapsed, its `reconcile_due_at` passed (or was never
/// set) and it has attempts left. The claim is a compare-and-set by key: it moves
/// `reconcile_due_at` past the hold and counts the attempt only while both, and the owner, are
/// as the candidate read showed them, so of replicas scanning at the same time one claims each
/// row (the others wait for its lock, then match nothing), and a row taken over meanwhile is not
/// claimed. The update's condition has no `CASE` over `now()`: Citus refuses a non-immutable
/// function inside `CASE` or `COALESCE` in a write to several shards. No `FOR UPDATE` across rows: on Citus the candidates
/// are a read of every shard and each claim an update of one row (docs/semantics.md §15).
pub const CLAIM_SQL: &str = concat!(
    "WITH due AS ( \
         SELECT r.principal, r.execution_id, r.reconcile_attempts, r.reconcile_due_at, \
                r.owner_instance \
         FROM carmy.reservations r \
         WHERE r.state = 'running' \
           AND r.tool = ANY($1::text[]) \
           AND CASE WHEN $5::text IS NULL \
                    THEN (r.reconcile_due_at IS NULL OR r.reconcile_due_at <= now()) \
                         AND r.reconcile_attempts < $2 \
                    ELSE r.execution_id = $5 END \
           AND ($6::text IS NULL OR r.principal = $6) \
           AND ",
    owner_lapsed!("r"),
    " ORDER BY r.reconcile_due_at NULLS FIRST, r.created_at \
         LIMIT $3 \
     ) \
     UPDATE carmy.reservations r \
     SET reconcile_due_at = now() + $4::bigint * interval '1 millisecond', \
         reconcile_attempts = r.reconcile_attempts + 1 \
     FROM due \
     WHERE r.principal = due.principal AND r.execution_id = due.execution_id \
       AND r.state = 'running' \
       AND r.reconcile_attempts = due.reconcile_attempts \
       AND r.reconcile_due_at IS NOT DISTINCT FROM due.reconcile_due_at \
       AND r.owner_instance IS NOT DISTINCT FROM due.owner_instance \
     RETURNING r.execution_id, r.principal, r.session_id, r.request_id, r.tool, \
               r.reconcile_attempts"
);

/// Keeps a probe's evidence on a record still without an outcome, to be probed again after a
/// pause. Binds: `$1` execution id, `$2` the evidence (`jsonb` text), `$3` the pause in
/// milliseconds, `$4` attempts to give back (1 for a claimed probe asked too early to
/// conclude, else 0). Two statements, this and [`RECORD_LAST_PROBE_SQL`], rather than a `CASE`
/// over `now()`: the update names no principal, so on Citus it writes to every shard, where a
/// non-immutable function inside `CASE` is refused.
pub const RECORD_PROBE_SQL: &str = "UPDATE carmy.reservations \
     SET reconcile_evidence = $2::text::jsonb, \
         reconcile_due_at = now() + $3::bigint * interval '1 millisecond', \
         reconcile_attempts = greatest(reconcile_attempts - $4::integer, 0) \
     WHERE execution_id = $1 AND state = 'running'";

/// [`RECORD_PROBE_SQL`] for the last probe: never probed again (`reconcile_due_at` infinity).
/// Binds: `$1` execution id, `$2` the evidence, `$3` attempts to give back.
pub const RECORD_LAST_PROBE_SQL: &str = "UPDATE carmy.reservations \
     SET reconcile_evidence = $2::text::jsonb, \
         reconcile_due_at = 'infinity'::timestamptz, \
         reconcile_attempts = greatest(reconcile_attempts - $3::integer, 0) \
     WHERE execution_id = $1 AND state = 'running'";

/// How long ago the attempt that holds a record without an outcome started, in milliseconds
/// (database clock): the reservation's start, or the last takeover's (`carmy.audit_log`,
/// action `takeover`: a takeover keeps `started_at`, docs/semantics.md §12.7). No row when
/// the execution holds no record without an outcome. Binds: `$1` execution id.
pub const ATTEMPT_AGE_SQL: &str = "SELECT greatest(0, floor(extract(epoch FROM now() - \
         greatest(coalesce(r.started_at, r.created_at), \
                  (SELECT max(a.at) FROM carmy.audit_log a \
                   WHERE a.principal = r.principal AND a.execution_id = r.execution_id \
                     AND a.action = 'takeover'))) \
         * 1000))::bigint AS age_ms \
     FROM carmy.reservations r WHERE r.execution_id = $1 AND r.state = 'running'";

/// The evidence kept on an execution. Binds: `$1` execution id.
pub const EVIDENCE_SQL: &str = "SELECT reconcile_evidence::text AS evidence \
     FROM carmy.reservations WHERE execution_id = $1";

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// [`CLAIM_SQL`] for `claim`.
pub(crate) async fn claim(
    pool: &Db,
    claim: &ReconcileClaim,
) -> Result<Vec<ReconcileTarget>, Failure> {
    let rows = sqlx::query(CLAIM_SQL)
        .bind(&claim.tools)
        .bind(i32::try_from(claim.max_attempts).unwrap_or(i32::MAX))
        .bind(i64::try_from(claim.limit).unwrap_or(i64::MAX))
        .bind(millis(claim.hold))
        .bind(claim.execution_id.as_ref().map(ExecutionId::as_str))
        .bind(claim.principal.as_deref())
        .fetch_all(pool.executor())
        .await?;
    rows.iter()
        .map(|row| {
            let attempts: i32 = row.try_get("reconcile_attempts")?;
            Ok(ReconcileTarget {
                execution_id: ExecutionId::from_stored(row.try_get::<String, _>("execution_id")?),
                key: decode_key(row)?,
                tool: row.try_get("tool")?,
                attempts: u32::try_from(attempts).unwrap_or(0),
            })
        })
        .collect()
}

/// [`RECORD_PROBE_SQL`] (or [`RECORD_LAST_PROBE_SQL`]) for `record`.
pub(crate) async fn record(pool: &Db, record: &ProbeRecord) -> Result<(), Failure> {
    let refund = i32::from(record.refund_attempt);
    let query = match record.retry_in {
        Some(pause) => sqlx::query(RECORD_PROBE_SQL)
            .bind(record.execution_id.as_str())
            .bind(record.evidence.to_string())
            .bind(millis(pause))
            .bind(refund),
        None => sqlx::query(RECORD_LAST_PROBE_SQL)
            .bind(record.execution_id.as_str())
            .bind(record.evidence.to_string())
            .bind(refund),
    };
    query.execute(pool.executor()).await?;
    Ok(())
}

/// [`ATTEMPT_AGE_SQL`] for `execution_id`.
pub(crate) async fn attempt_age(
    pool: &Db,
    execution_id: &ExecutionId,
) -> Result<Option<Duration>, Failure> {
    let age: Option<i64> = sqlx::query_scalar(ATTEMPT_AGE_SQL)
        .bind(execution_id.as_str())
        .fetch_optional(pool.executor())
        .await?;
    Ok(age.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
}

/// [`EVIDENCE_SQL`] for `execution_id`.
pub(crate) async fn evidence(
    pool: &Db,
    execution_id: &ExecutionId,
) -> Result<Option<Evidence>, Failure> {
    let row = sqlx::query(EVIDENCE_SQL)
        .bind(execution_id.as_str())
        .fetch_optional(pool.executor())
        .await?;
    let Some(text) = row
        .map(|row| row.try_get::<Option<String>, _>("evidence"))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    Ok(serde_json::from_str(&text).ok())
}

/// Makes an interrupted execution due for a probe at once, its attempts counted afresh
/// (`carmy-gateway executions reconcile`). Binds: `$1` execution id. Matches nothing for an
/// execution with an outcome or a live owner. The owner's lapse is written as "not among the
/// live leases" (a subquery that does not depend on the row, no `CASE`), because the update
/// names no principal: on Citus it writes to every shard, where a non-immutable function inside
/// `CASE` is refused.
pub const RECONCILE_SOON_SQL: &str = "UPDATE carmy.reservations r \
     SET reconcile_due_at = now(), reconcile_attempts = 0 \
     WHERE r.execution_id = $1 AND r.state = 'running' \
       AND (r.owner_instance IS NULL \
            OR r.owner_instance NOT IN (SELECT lease.instance_id FROM carmy.instances lease \
                                        WHERE lease.lease_expires_at > now()))";

/// [`RECONCILE_SOON_SQL`] for `execution_id`: whether it matched.
pub(crate) async fn reconcile_soon(pool: &Db, execution_id: &ExecutionId) -> Result<bool, Failure> {
    let done = sqlx::query(RECONCILE_SOON_SQL)
        .bind(execution_id.as_str())
        .execute(pool.executor())
        .await?;
    Ok(done.rows_affected() == 1)
}
