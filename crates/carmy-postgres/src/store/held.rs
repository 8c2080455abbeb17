//! Executions held by a client on [`PostgresStore`] (docs/semantics.md §16): each holder is a
//! row of its own in `carmy.instances` (its fencing token is the row's `instance_id`), so the
//! in-flight rule every statement already applies (running while the owner's lease is live,
//! interrupted after) holds for client-held executions unchanged, and so do decisions,
//! listings, the console and the pruner.

use super::PostgresStore;
use crate::failure::Failure;
use crate::sql::{END_LEASE_SQL, HELD_OWNER_SQL, HOLD_LEASE_SQL, RENEW_HOLD_SQL};
use carmy::held::{HeldOwner, Hold};
use carmy::outcome::ExecutionId;
use carmy::store::{Claim, ExecutionIntent, Reservation};
use sqlx::Row;

/// A lease's length in milliseconds, as the statements bind it.
fn millis(hold: &Hold) -> i64 {
    i64::try_from(hold.lease.as_millis()).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// The holder's lease row first (so the reservation never reads interrupted), then the
    /// reservation owned by it; a hold that reserved nothing ends at once.
    pub(super) async fn reserve_held_impl(
        &self,
        Claim { key, fingerprint }: Claim<'_>,
        intent: &ExecutionIntent,
        hold: &Hold,
    ) -> Result<Reservation, Failure> {
        sqlx::query(HOLD_LEASE_SQL)
            .bind(hold.token.as_str())
            .bind(millis(hold))
            .execute(self.pool.executor())
            .await?;
        let reserved = self
            .reserve_alone(key, fingerprint, intent, hold.token.as_str())
            .await;
        if !matches!(
            reserved,
            Ok(Reservation::Reserved | Reservation::Replaced(_))
        ) {
            // Best effort: a hold that owns nothing is harmless and pruned in time.
            if let Err(error) = sqlx::query(END_LEASE_SQL)
                .bind(hold.token.as_str())
                .execute(self.pool.executor())
                .await
            {
                tracing::debug!(%error, "ending an unused hold failed; it lapses by itself");
            }
        }
        reserved
    }

    /// One `UPDATE` of the hold's lease row, only while its execution runs under it.
    pub(super) async fn renew_held_impl(
        &self,
        execution_id: &ExecutionId,
        hold: &Hold,
    ) -> Result<bool, Failure> {
        let renewed = sqlx::query(RENEW_HOLD_SQL)
            .bind(execution_id.as_str())
            .bind(hold.token.as_str())
            .bind(millis(hold))
            .fetch_optional(self.pool.executor())
            .await?;
        Ok(renewed.is_some())
    }

    /// The owner of the execution's row, or of its released copy.
    pub(super) async fn held_owner_impl(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<HeldOwner>, Failure> {
        let row = sqlx::query(HELD_OWNER_SQL)
            .bind(execution_id.as_str())
            .fetch_optional(self.pool.executor())
            .await?;
        let Some(row) = row else { return Ok(None) };
        let attempt: i32 = row.try_get("attempt")?;
        Ok(Some(HeldOwner {
            owner: row.try_get("owner_instance")?,
            attempt: u32::try_from(attempt).unwrap_or(1),
            started_at: row.try_get("started")?,
        }))
    }
}
