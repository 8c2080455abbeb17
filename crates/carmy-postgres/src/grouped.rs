//! What one group-commit batch (`batch`, `combined`, docs/semantics.md §8) runs: the requests
//! and answers of `reserve` and `complete`, and the statements of each kind.
//!
//! A single request of a kind runs the store's single-row statement ([`RESERVE_SQL`],
//! [`COMPLETE_SQL`]), so an idle store costs exactly what it did without batching; more run
//! one multi-row statement ([`RESERVE_BATCH_SQL`], [`COMPLETE_BATCH_SQL`], or both kinds in
//! [`HOT_BATCH_SQL`]) with the same per-row rules, in one autocommit. Only the first request of
//! each identity (for `complete`: of each identity and execution) goes into the statement
//! ([`Firsts`]); the others of the batch take that one's answer (`reserve`: the winner's row)
//! or are rechecked by their caller (`complete`).
//!
//! Every answer is about one caller's row: the caller turns it into its `Reservation` or `Ok`
//! exactly as the unbatched path does (fingerprint compared per row, a row that is not visible
//! yet read again, a `complete` that matched nothing rechecked). A statement the server refused
//! (it was rolled back, nothing was applied) is answered [`ReserveAnswer::Alone`] /
//! [`CompleteAnswer::Alone`]: each caller then runs its own single-row statement, so one bad row
//! cannot fail the others. A statement lost in transit is `Indeterminate` for each of its callers,
//! which they handle per row as without batching (the engine releases a reservation that may
//! have been made; a recording is retried, and its recheck finds it applied).

use crate::cancel::announce_changed;
use crate::diagnosis::Diagnosis;
use crate::failure::lost_in_transit;
use crate::hot::{run_error, HotManager};
use crate::sql::{COMPLETE_BATCH_SQL, COMPLETE_SQL, RESERVE_BATCH_SQL, RESERVE_SQL};
use crate::waiters::announce_recorded;
use carmy::store::{InFlightState, RecordState, StoreError, StoredRecord};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::Postgres;
use sqlx::Row;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// One caller's `reserve`, owned. The fields are the binds of [`RESERVE_SQL`].
#[derive(Clone, Debug)]
pub(crate) struct ReserveRequest {
    pub(crate) principal: String,
    pub(crate) session_id: String,
    pub(crate) request_id: String,
    pub(crate) tool: String,
    pub(crate) digest: String,
    pub(crate) version: String,
    pub(crate) execution_id: String,
    /// The part digests, encoded (`FingerprintParts::encode`), or `None`.
    pub(crate) parts: Option<String>,
    /// The retention in milliseconds (`None`: forever), for the single-row statement.
    pub(crate) retention: Option<i64>,
    /// The kept arguments (docs/semantics.md §8.5), or `None`.
    pub(crate) arguments: Option<String>,
}

impl ReserveRequest {
    pub(crate) fn identity(&self) -> (&str, &str, &str) {
        (&self.principal, &self.session_id, &self.request_id)
    }

    /// The record this request's row holds right after its insert: running, held by this
    /// process (whose lease the store checked before queueing).
    fn inserted_record(&self) -> StoredRecord {
        StoredRecord {
            execution_id: carmy::outcome::ExecutionId::from_stored(self.execution_id.clone()),
            fingerprint: carmy::fingerprint::Fingerprint {
                version: self.version.clone(),
                digest: self.digest.clone(),
            },
            tool: self.tool.clone(),
            state: RecordState::InFlight(InFlightState::Running),
            parts: self
                .parts
                .as_deref()
                .and_then(carmy::fingerprint::FingerprintParts::decode),
        }
    }
}

/// What the batch says about one caller's `reserve`.
#[allow(clippy::large_enum_variant)] // one per call, moved once; boxing buys nothing
#[derive(Debug)]
pub(crate) enum ReserveAnswer {
    /// This request's row was inserted: it holds the identity (`Reserved`, or `Replaced`
    /// naming the identity's last released execution).
    Inserted(Result<carmy::store::Reservation, StoreError>),
    /// The identity is held by this record (an existing row, or an earlier request of the same
    /// batch that won it): compare the fingerprint against it. `Err` when the row is damaged.
    Held(Result<StoredRecord, StoreError>),
    /// The insert conflicted with a row committed after the statement's snapshot: read it again.
    NotVisible,
    /// Run the single-row statement instead (the batch statement was refused and rolled back).
    Alone,
    /// The batch failed: [`StoreError::Unavailable`] or, lost in transit,
    /// [`StoreError::Indeterminate`].
    Failed(StoreError),
}

/// One caller's `complete`, owned. The fields are the binds of [`COMPLETE_SQL`].
#[derive(Clone, Debug)]
pub(crate) struct CompleteRequest {
    pub(crate) principal: String,
    pub(crate) session_id: String,
    pub(crate) request_id: String,
    pub(crate) execution_id: String,
    pub(crate) digest: String,
    pub(crate) version: String,
    pub(crate) state: String,
    pub(crate) outcome: String,
    pub(crate) error_code: Option<String>,
    /// The attempt that made the outcome (docs/semantics.md §12.7).
    pub(crate) attempt: i32,
}

impl CompleteRequest {
    pub(crate) fn target(&self) -> (&str, &str, &str, &str) {
        (
            &self.principal,
            &self.session_id,
            &self.request_id,
            &self.execution_id,
        )
    }
}

/// What the batch says about one caller's `complete`.
#[derive(Debug)]
pub(crate) enum CompleteAnswer {
    /// The outcome is recorded (durable: the statement committed).
    Updated,
    /// Nothing matched (or the request was a duplicate left out of the statement): recheck the
    /// row, as the unbatched path does after an update that matched nothing.
    Unmatched,
    /// Run the single-row statement instead (the batch statement was refused and rolled back).
    Alone,
    /// As [`ReserveAnswer::Failed`].
    Failed(StoreError),
}

/// What a batch executor needs: the hot connections, this instance's id, and how to explain a
/// failure.
#[derive(Clone)]
pub(crate) struct Hot {
    pub(crate) pool: bb8::Pool<HotManager>,
    pub(crate) instance_id: String,
    pub(crate) diagnosis: Arc<Diagnosis>,
}

impl Hot {
    /// Runs `query` on a hot connection, marking the connection broken when it was lost in
    /// transit.
    pub(crate) async fn fetch_all(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let mut hot = self.pool.get().await.map_err(run_error)?;
        let rows = query.fetch_all(hot.through()).await;
        hot.used(&rows);
        rows
    }

    /// The failure of a whole batch as each caller's answer: `None` when the server refused the
    /// statement (rolled back: the callers run alone), else the error for every caller.
    pub(crate) async fn failure(
        &self,
        error: sqlx::Error,
        callers: usize,
    ) -> Option<Vec<StoreError>> {
        if callers > 1 && error.as_database_error().is_some() {
            tracing::warn!(%error, callers, "batch statement refused; running each call alone");
            return None;
        }
        let indeterminate = lost_in_transit(&error);
        let text = self.diagnosis.explain(error).await;
        Some(
            (0..callers)
                .map(|_| {
                    if indeterminate {
                        StoreError::Indeterminate(text.clone())
                    } else {
                        StoreError::Unavailable(text.clone())
                    }
                })
                .collect(),
        )
    }
}

/// The failure of a call that found no batch to go in within `waited` (the acquire timeout):
/// nothing was sent for it.
pub(crate) fn queue_timeout(waited: Duration) -> StoreError {
    StoreError::Unavailable(format!(
        "no batch took this call within {} ms (the acquire timeout): the earlier batches are \
         still in flight (a lock, a slow or unreachable server?)",
        waited.as_millis()
    ))
}

/// The requests of one kind in a batch, deduplicated: only the first request of each key goes
/// into the statement.
pub(crate) struct Firsts {
    /// The position of each distinct key's first request.
    firsts: Vec<usize>,
    /// For every position, the index (into `firsts`) of its key's first request.
    owners: Vec<usize>,
}

impl Firsts {
    /// The first position of each distinct key of `keys`, and every position's owner.
    pub(crate) fn of<K: std::hash::Hash + Eq>(keys: impl Iterator<Item = K>) -> Self {
        let mut firsts = Vec::new();
        let mut seen: HashMap<K, usize> = HashMap::new();
        let owners = keys
            .enumerate()
            .map(|(position, key)| {
                *seen.entry(key).or_insert_with(|| {
                    firsts.push(position);
                    firsts.len() - 1
                })
            })
            .collect();
        Self { firsts, owners }
    }

    /// The requests that go into the statement, in order.
    pub(crate) fn unique<'a, R>(&self, batch: &'a [R]) -> Vec<&'a R> {
        self.firsts.iter().map(|&at| &batch[at]).collect()
    }

    /// Per position: its owner's index and whether it is that owner (the first of its key).
    fn positions(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.owners
            .iter()
            .enumerate()
            .map(|(position, &owner)| (owner, self.firsts[owner] == position))
    }

    /// The answers of the reservations `batch` (these firsts' batch), given the statement's row
    /// of each unique identity (`None`: not visible).
    pub(crate) fn reserve_answers(
        &self,
        batch: &[ReserveRequest],
        rows: &[Option<PgRow>],
    ) -> Vec<ReserveAnswer> {
        self.positions()
            .map(|(owner, is_winner)| {
                reserve_answer(rows[owner].as_ref(), &batch[self.firsts[owner]], is_winner)
            })
            .collect()
    }

    /// The answers of the outcomes of this batch, given whether each unique one updated its row.
    pub(crate) fn complete_answers(&self, updated: &[bool]) -> Vec<CompleteAnswer> {
        self.positions()
            .map(|(owner, is_first)| {
                if is_first && updated[owner] {
                    CompleteAnswer::Updated
                } else {
                    CompleteAnswer::Unmatched
                }
            })
            .collect()
    }
}

/// The 1-based slot of a batch statement's row as an index.
pub(crate) fn slot_of(row: &PgRow) -> Result<usize, sqlx::Error> {
    let slot: i64 = row.try_get("slot")?;
    usize::try_from(slot - 1).map_err(|error| sqlx::Error::Decode(Box::new(error)))
}

/// Binds `$1`..`$9` of [`RESERVE_BATCH_SQL`] (the first nine of [`HOT_BATCH_SQL`]) for
/// `unique`, owned by `instance_id`.
pub(crate) fn bind_reserves<'q>(
    query: Query<'q, Postgres, PgArguments>,
    unique: &[&'q ReserveRequest],
    instance_id: &'q str,
) -> Query<'q, Postgres, PgArguments> {
    let column = |field: fn(&'q ReserveRequest) -> &'q str| -> Vec<&'q str> {
        unique.iter().map(|request| field(request)).collect()
    };
    query
        .bind(column(|r| &r.principal))
        .bind(column(|r| &r.session_id))
        .bind(column(|r| &r.request_id))
        .bind(column(|r| &r.tool))
        .bind(column(|r| &r.digest))
        .bind(column(|r| &r.version))
        .bind(column(|r| &r.execution_id))
        .bind(instance_id)
        .bind(
            unique
                .iter()
                .map(|request| request.parts.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
}

/// Binds the kept arguments of `unique` (`$10` of [`RESERVE_BATCH_SQL`], `$20` of
/// [`HOT_BATCH_SQL`]): the bind after the statement's others.
pub(crate) fn bind_reserve_arguments<'q>(
    query: Query<'q, Postgres, PgArguments>,
    unique: &[&'q ReserveRequest],
) -> Query<'q, Postgres, PgArguments> {
    query.bind(
        unique
            .iter()
            .map(|request| request.arguments.as_deref())
            .collect::<Vec<Option<&str>>>(),
    )
}

/// Binds the ten arrays of [`COMPLETE_BATCH_SQL`] (`$10`..`$19` of [`HOT_BATCH_SQL`]) for
/// `unique`.
pub(crate) fn bind_completes<'q>(
    query: Query<'q, Postgres, PgArguments>,
    unique: &[&'q CompleteRequest],
) -> Query<'q, Postgres, PgArguments> {
    let column = |field: fn(&'q CompleteRequest) -> &'q str| -> Vec<&'q str> {
        unique.iter().map(|request| field(request)).collect()
    };
    query
        .bind(column(|r| &r.principal))
        .bind(column(|r| &r.session_id))
        .bind(column(|r| &r.request_id))
        .bind(column(|r| &r.execution_id))
        .bind(column(|r| &r.digest))
        .bind(column(|r| &r.version))
        .bind(column(|r| &r.state))
        .bind(column(|r| &r.outcome))
        .bind(
            unique
                .iter()
                .map(|request| request.error_code.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            unique
                .iter()
                .map(|request| request.attempt)
                .collect::<Vec<i32>>(),
        )
}

impl Hot {
    /// Runs the reservations `unique` (distinct identities): a single one with [`RESERVE_SQL`],
    /// more with [`RESERVE_BATCH_SQL`]. Per request, its row (`None`: not visible).
    pub(crate) async fn run_reserves(
        &self,
        unique: &[&ReserveRequest],
    ) -> Result<Vec<Option<PgRow>>, sqlx::Error> {
        if let [request] = unique {
            let query = sqlx::query(RESERVE_SQL)
                .bind(&request.principal)
                .bind(&request.session_id)
                .bind(&request.request_id)
                .bind(&request.tool)
                .bind(&request.digest)
                .bind(&request.version)
                .bind(&request.execution_id)
                .bind(&self.instance_id)
                .bind(request.parts.as_deref())
                .bind(request.retention)
                .bind(request.arguments.as_deref());
            let row = self.fetch_all(query).await?.pop();
            if let Some(row) = &row {
                if row.try_get::<Option<bool>, _>("renewed")? == Some(true) {
                    self.announce_renewed(request).await;
                }
            }
            return Ok(vec![row]);
        }
        let query = bind_reserves(sqlx::query(RESERVE_BATCH_SQL), unique, &self.instance_id);
        let query = bind_reserve_arguments(query, unique);
        let mut rows: Vec<Option<PgRow>> = (0..unique.len()).map(|_| None).collect();
        for row in self.fetch_all(query).await? {
            let slot = slot_of(&row)?;
            if let Some(place) = rows.get_mut(slot) {
                *place = Some(row);
            }
        }
        Ok(rows)
    }

    /// Runs the outcomes `unique` (distinct identity and execution): a single one with
    /// [`COMPLETE_SQL`], more with [`COMPLETE_BATCH_SQL`]. Per request, whether it updated its
    /// row.
    pub(crate) async fn run_completes(
        &self,
        unique: &[&CompleteRequest],
    ) -> Result<Vec<bool>, sqlx::Error> {
        if let [request] = unique {
            let query = sqlx::query(COMPLETE_SQL)
                .bind(&request.principal)
                .bind(&request.session_id)
                .bind(&request.request_id)
                .bind(&request.execution_id)
                .bind(&request.digest)
                .bind(&request.version)
                .bind(&request.state)
                .bind(&request.outcome)
                .bind(request.error_code.as_deref())
                .bind(request.attempt);
            let mut hot = self.pool.get().await.map_err(run_error)?;
            let done = query.fetch_optional(hot.through()).await;
            hot.used(&done);
            let Some(row) = done? else {
                return Ok(vec![false]);
            };
            if row.try_get::<bool, _>("awaited")? {
                announce_recorded(hot.through(), vec![request.execution_id.clone()]).await;
            }
            return Ok(vec![true]);
        }
        let query = bind_completes(sqlx::query(COMPLETE_BATCH_SQL), unique);
        let mut updated = vec![false; unique.len()];
        let mut awaited = Vec::new();
        for row in self.fetch_all(query).await? {
            let slot = slot_of(&row)?;
            if let Some(place) = updated.get_mut(slot) {
                *place = true;
                if row.try_get::<bool, _>("awaited")? {
                    awaited.push(unique[slot].execution_id.clone());
                }
            }
        }
        self.announce(awaited).await;
        Ok(updated)
    }

    /// Announces that `request`'s identity no longer holds its expired record (replaced by
    /// [`RESERVE_SQL`]): replicas drop their cached copies ([`announce_changed`]).
    async fn announce_renewed(&self, request: &ReserveRequest) {
        match self.pool.get().await {
            Ok(mut hot) => {
                let key = (
                    request.principal.as_str(),
                    request.session_id.as_str(),
                    request.request_id.as_str(),
                );
                announce_changed(hot.through(), key).await;
            }
            Err(error) => {
                tracing::warn!(%error, "could not announce a replaced expired record");
            }
        }
    }

    /// Announces the outcomes of `execution_ids`, just committed, to their waiters
    /// ([`announce_recorded`]) from a connection of this pool.
    pub(crate) async fn announce(&self, execution_ids: Vec<String>) {
        if execution_ids.is_empty() {
            return;
        }
        match self.pool.get().await {
            Ok(mut hot) => announce_recorded(hot.through(), execution_ids).await,
            Err(error) => {
                tracing::warn!(%error, "could not announce recorded outcomes to their waiters");
            }
        }
    }
}

/// The answer of a request whose identity's statement row is `row`; `winner` is the request
/// that went into the statement, `request` is this one (the same, or a later duplicate).
fn reserve_answer(row: Option<&PgRow>, winner: &ReserveRequest, is_winner: bool) -> ReserveAnswer {
    let Some(row) = row else {
        return ReserveAnswer::NotVisible;
    };
    match row.try_get::<bool, _>("inserted") {
        Ok(true) if is_winner => ReserveAnswer::Inserted(crate::decode::decode_reserved(row)),
        Ok(true) => ReserveAnswer::Held(Ok(winner.inserted_record())),
        Ok(false) => ReserveAnswer::Held(crate::decode::decode_record(row)),
        Err(error) => ReserveAnswer::Failed(StoreError::Unavailable(error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::Firsts;

    #[test]
    fn the_first_request_of_each_key_goes_into_the_statement() {
        let keys = ["a", "b", "a", "c", "b", "a"];
        let plan = Firsts::of(keys.into_iter());
        assert_eq!(plan.firsts, vec![0, 1, 3]);
        assert_eq!(plan.owners, vec![0, 1, 0, 2, 1, 0]);
        assert_eq!(plan.unique(&keys), vec![&"a", &"b", &"c"]);
        let firsts: Vec<bool> = plan.positions().map(|(_, first)| first).collect();
        assert_eq!(firsts, vec![true, true, false, true, false, false]);
    }
}
