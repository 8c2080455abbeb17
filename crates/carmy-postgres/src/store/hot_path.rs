//! The hot path of [`PostgresStore`] (docs/semantics.md §8): `reserve` and `complete`, each
//! joining a group-commit batch when one is forming (`batch`, `combined`) or running its own
//! statement on a hot-path connection, with the retries a vanished or replaced row calls for.

use super::{PostgresStore, RESERVE_ATTEMPTS};
use crate::batch::{Batcher, Unanswered};
use crate::cancel::announce_changed;
use crate::combined::HotBatch;
use crate::decode::decode_record;
use crate::failure::Failure;
use crate::grouped::{CompleteAnswer, CompleteRequest, ReserveAnswer, ReserveRequest};
use crate::hot::run_error;
use crate::recheck::after_update;
use crate::sql::{COMPLETE_SQL, RESERVE_SQL};
use crate::waiters::announce_recorded;
use carmy::fingerprint::{Fingerprint, FingerprintParts};
use carmy::outcome::RecordedResult;
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, Reservation, StoreError, StoredRecord,
};
use sqlx::Row;

impl PostgresStore {
    pub(super) async fn reserve_impl(
        &self,
        Claim { key, fingerprint }: Claim<'_>,
        intent: &ExecutionIntent,
    ) -> Result<Reservation, Failure> {
        // Never reserve without a lease row: others would read the reservation as interrupted.
        self.lease.ensure_held().await?;
        if let Some(reserves) = &self.batches {
            // Nothing queued and a slot free: this call's own statement, exactly as with
            // batching off, holding the slot so that no batch overtakes it.
            if let Some(_slot) = reserves.alone() {
                return self
                    .reserve_alone(key, fingerprint, intent, &self.instance_id)
                    .await;
            }
            let batched = self
                .reserve_batched(reserves, key, fingerprint, intent)
                .await?;
            if let Some(reservation) = batched {
                return Ok(reservation);
            }
        }
        self.reserve_alone(key, fingerprint, intent, &self.instance_id)
            .await
    }

    /// A reservation through the group commit ([`crate::batch`]): its answer, or `None` when
    /// this call's own statement must decide: the batch was refused or did not run, the row it
    /// met vanished, or that row looks past its retention (the statement replaces it, deciding
    /// with the database's clock).
    async fn reserve_batched(
        &self,
        reserves: &Batcher<HotBatch>,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        intent: &ExecutionIntent,
    ) -> Result<Option<Reservation>, Failure> {
        let request = ReserveRequest {
            principal: key.principal.clone(),
            session_id: key.session_id.clone(),
            request_id: key.request_id.clone(),
            tool: intent.tool.clone(),
            digest: fingerprint.digest.clone(),
            version: fingerprint.version.clone(),
            execution_id: intent.execution_id.as_str().to_owned(),
            parts: intent.parts.as_ref().map(FingerprintParts::encode),
            retention: intent.retention.map(crate::prune::millis),
            arguments: intent.arguments.clone(),
        };
        let record = match reserves.reserve(request).await {
            Ok(ReserveAnswer::Inserted(reserved)) => return Ok(Some(reserved?)),
            Ok(ReserveAnswer::Held(record)) => Some(record?),
            Ok(ReserveAnswer::NotVisible) => self.lookup_impl(key).await?,
            Ok(ReserveAnswer::Failed(error)) => return Err(error.into()),
            Err(Unanswered::Lost) => return Err(lost_batch().into()),
            // The batch statement was refused, or no batch ran: this call's own statement.
            Ok(ReserveAnswer::Alone) | Err(Unanswered::NotSent) => None,
        };
        // A finished row past its retention is replaced by this call's own statement
        // (docs/semantics.md §12.9), which decides expiry with the database's clock.
        let expired = |record: &StoredRecord| match &record.state {
            carmy::store::RecordState::Finished(result) => carmy::retention::is_expired(
                result.finished_at,
                intent.retention,
                chrono::Utc::now(),
            ),
            carmy::store::RecordState::InFlight(_) => false,
        };
        Ok(record
            .filter(|record| !expired(record))
            .map(|record| Existing::for_record(record, fingerprint).into()))
    }

    /// A reservation by this call's own statement ([`RESERVE_SQL`]), again while a row it met
    /// vanished or was replaced concurrently (at most [`RESERVE_ATTEMPTS`] times). A new row is
    /// owned by `owner`: this process's instance, or a client's hold (docs/semantics.md §16).
    pub(super) async fn reserve_alone(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        intent: &ExecutionIntent,
        owner: &str,
    ) -> Result<Reservation, Failure> {
        let retention = intent.retention.map(crate::prune::millis);
        for _ in 0..RESERVE_ATTEMPTS {
            let query = sqlx::query(RESERVE_SQL)
                .bind(&key.principal)
                .bind(&key.session_id)
                .bind(&key.request_id)
                .bind(&intent.tool)
                .bind(&fingerprint.digest)
                .bind(&fingerprint.version)
                .bind(intent.execution_id.as_str())
                .bind(owner)
                .bind(intent.parts.as_ref().map(FingerprintParts::encode))
                .bind(retention)
                .bind(intent.arguments.as_deref());
            let row = {
                let mut hot = self.hot.get().await.map_err(run_error)?;
                let row = query.fetch_optional(hot.through()).await;
                hot.used(&row);
                row?
            };
            let existing = match row {
                Some(row) => {
                    if row.try_get::<bool, _>("inserted")? {
                        if row.try_get::<bool, _>("renewed")? {
                            let key = (
                                key.principal.as_str(),
                                key.session_id.as_str(),
                                key.request_id.as_str(),
                            );
                            announce_changed(self.pool.executor(), key).await;
                        }
                        return Ok(crate::decode::decode_reserved(&row)?);
                    }
                    if row.try_get::<Option<bool>, _>("expired")? == Some(true) {
                        // Expired, but a concurrent statement replaced or pruned it first: a
                        // new statement sees what holds the identity now.
                        tracing::debug!("an expired record was replaced concurrently; retrying");
                        continue;
                    }
                    Some(decode_record(&row)?)
                }
                None => {
                    // The conflicting row was committed after this statement's snapshot: a new
                    // statement sees it.
                    tracing::debug!("reservation lost a race; reading the winner's row");
                    self.lookup_impl(key).await?
                }
            };
            if let Some(record) = existing {
                return Ok(Existing::for_record(record, fingerprint).into());
            }
            // The row existed when the insert conflicted but is gone now (deleted by an
            // operator): try again from the insert.
            tracing::warn!("conflicting reservation vanished before it could be read; retrying");
        }
        Err(StoreError::Unavailable(
            "reservation conflicted with a row that kept vanishing".to_owned(),
        )
        .into())
    }

    pub(super) async fn complete_impl(
        &self,
        Claim { key, fingerprint }: Claim<'_>,
        recorded: &RecordedResult,
    ) -> Result<(), Failure> {
        if let Some(completes) = &self.batches {
            // Nothing queued and a slot free: this call's own statement, as with batching off.
            if let Some(_slot) = completes.alone() {
                return self.complete_alone(key, fingerprint, recorded).await;
            }
            let outcome = recorded.record_json();
            let result = recorded.result();
            let error_code = result.error.as_ref().map(|error| error.code.as_str());
            let request = CompleteRequest {
                principal: key.principal.clone(),
                session_id: key.session_id.clone(),
                request_id: key.request_id.clone(),
                execution_id: result.execution_id.as_str().to_owned(),
                digest: fingerprint.digest.clone(),
                version: fingerprint.version.clone(),
                state: result.status.as_str().to_owned(),
                outcome: outcome.to_owned(),
                error_code: error_code.map(str::to_owned),
                attempt: i32::try_from(recorded.attempt()).unwrap_or(i32::MAX),
            };
            let updated = match completes.complete(request).await {
                Ok(CompleteAnswer::Updated) => Some(1),
                Ok(CompleteAnswer::Unmatched) => Some(0),
                Ok(CompleteAnswer::Failed(error)) => return Err(error.into()),
                Err(Unanswered::Lost) => return Err(lost_batch().into()),
                Ok(CompleteAnswer::Alone) | Err(Unanswered::NotSent) => None,
            };
            if let Some(updated) = updated {
                return after_update(&self.pool, key, recorded, updated).await;
            }
        }
        self.complete_alone(key, fingerprint, recorded).await
    }

    /// An outcome recorded by this call's own statement ([`COMPLETE_SQL`]), then read back
    /// when it matched nothing (`after_update`).
    async fn complete_alone(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        recorded: &RecordedResult,
    ) -> Result<(), Failure> {
        let outcome = recorded.record_json();
        let result = recorded.result();
        let error_code = result.error.as_ref().map(|error| error.code.as_str());
        let query = sqlx::query(COMPLETE_SQL)
            .bind(&key.principal)
            .bind(&key.session_id)
            .bind(&key.request_id)
            .bind(result.execution_id.as_str())
            .bind(&fingerprint.digest)
            .bind(&fingerprint.version)
            .bind(result.status.as_str())
            .bind(outcome)
            .bind(error_code)
            .bind(i32::try_from(recorded.attempt()).unwrap_or(i32::MAX));
        let awaited = {
            let mut hot = self.hot.get().await.map_err(run_error)?;
            let done = query.fetch_optional(hot.through()).await;
            hot.used(&done);
            done?
                .map(|row| row.try_get::<bool, _>("awaited"))
                .transpose()?
        };
        if awaited == Some(true) {
            announce_recorded(
                self.pool.executor(),
                vec![result.execution_id.as_str().to_owned()],
            )
            .await;
        }
        after_update(&self.pool, key, recorded, u64::from(awaited.is_some())).await
    }
}

/// A batch whose worker ended without answering (its runtime shut down): its statement may have
/// been applied.
fn lost_batch() -> StoreError {
    StoreError::Indeterminate("the batch of this call ended without an answer".to_owned())
}
