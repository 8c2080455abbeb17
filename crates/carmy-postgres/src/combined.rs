//! The one group-commit queue of the hot path (docs/semantics.md §8.3): the `reserve` and
//! `complete` calls waiting at the same moment go into one batch, [`HotBatch`], and so into one
//! statement and one commit, so a commit (a WAL flush) makes reservations and outcomes durable
//! together. A batch of one kind runs that kind's statement (a batch of one: the single-row
//! statement, a plain commit as without batching); a batch of both kinds runs
//! [`HOT_BATCH_SQL`]. Every caller is answered after that commit, about its own row, as
//! `grouped` describes.

use crate::batch::{Batcher, Execute, Unanswered};
use crate::grouped::{
    bind_completes, bind_reserve_arguments, bind_reserves, queue_timeout, slot_of, CompleteAnswer,
    CompleteRequest, Firsts, Hot, ReserveAnswer, ReserveRequest,
};
use crate::sql::HOT_BATCH_SQL;
use sqlx::postgres::PgRow;
use sqlx::Row;
use std::time::Duration;

/// One caller's request in the queue.
#[allow(clippy::large_enum_variant)] // one per call, moved once; boxing buys nothing
#[derive(Debug)]
pub(crate) enum HotRequest {
    /// A `reserve`.
    Reserve(ReserveRequest),
    /// A `complete`.
    Complete(CompleteRequest),
}

/// One caller's answer, of its request's kind.
#[allow(clippy::large_enum_variant)] // one per call, moved once; boxing buys nothing
#[derive(Debug)]
pub(crate) enum HotAnswer {
    /// The answer of a [`HotRequest::Reserve`].
    Reserve(ReserveAnswer),
    /// The answer of a [`HotRequest::Complete`].
    Complete(CompleteAnswer),
}

/// Runs batches of both kinds (see the module docs).
pub(crate) struct HotBatch(pub(crate) Hot);

/// What the statement said: per unique reservation its row, per unique outcome whether it
/// updated its row.
type Ran = (Vec<Option<PgRow>>, Vec<bool>);

impl HotBatch {
    /// Runs the unique reservations and outcomes: one kind's statement when the other kind is
    /// absent, else [`HOT_BATCH_SQL`].
    async fn run(
        &self,
        reserves: &[&ReserveRequest],
        completes: &[&CompleteRequest],
    ) -> Result<Ran, sqlx::Error> {
        if completes.is_empty() {
            return Ok((self.0.run_reserves(reserves).await?, Vec::new()));
        }
        if reserves.is_empty() {
            return Ok((Vec::new(), self.0.run_completes(completes).await?));
        }
        let query = bind_reserves(sqlx::query(HOT_BATCH_SQL), reserves, &self.0.instance_id);
        let query = bind_completes(query, completes);
        let query = bind_reserve_arguments(query, reserves);
        let mut rows: Vec<Option<PgRow>> = (0..reserves.len()).map(|_| None).collect();
        let mut updated = vec![false; completes.len()];
        let mut awaited = Vec::new();
        for row in self.0.fetch_all(query).await? {
            let slot = slot_of(&row)?;
            if row.try_get::<&str, _>("kind")? == "complete" {
                if let Some(place) = updated.get_mut(slot) {
                    *place = true;
                    if row.try_get::<Option<bool>, _>("awaited")? == Some(true) {
                        awaited.push(completes[slot].execution_id.clone());
                    }
                }
            } else if let Some(place) = rows.get_mut(slot) {
                *place = Some(row);
            }
        }
        self.0.announce(awaited).await;
        Ok((rows, updated))
    }
}

impl Execute for HotBatch {
    type Request = HotRequest;
    type Answer = HotAnswer;

    async fn execute(&self, batch: Vec<HotRequest>) -> Vec<HotAnswer> {
        let callers = batch.len();
        let mut reserves = Vec::new();
        let mut completes = Vec::new();
        // Per position, whether it is a reservation: the answers go back in the batch's order.
        let mut is_reserve = Vec::with_capacity(callers);
        for request in batch {
            is_reserve.push(matches!(request, HotRequest::Reserve(_)));
            match request {
                HotRequest::Reserve(request) => reserves.push(request),
                HotRequest::Complete(request) => completes.push(request),
            }
        }
        let (reserved, completed) = self.answer(&reserves, &completes).await;
        let (mut reserved, mut completed) = (reserved.into_iter(), completed.into_iter());
        is_reserve
            .into_iter()
            .filter_map(|reserve| {
                if reserve {
                    reserved.next().map(HotAnswer::Reserve)
                } else {
                    completed.next().map(HotAnswer::Complete)
                }
            })
            .collect()
    }

    fn weight(request: &HotRequest) -> usize {
        match request {
            HotRequest::Reserve(request) => {
                request.principal.len()
                    + request.session_id.len()
                    + request.request_id.len()
                    + request.arguments.as_ref().map_or(0, String::len)
            }
            HotRequest::Complete(request) => request.outcome.len(),
        }
    }

    fn timed_out(request: &HotRequest, waited: Duration) -> HotAnswer {
        match request {
            HotRequest::Reserve(_) => {
                HotAnswer::Reserve(ReserveAnswer::Failed(queue_timeout(waited)))
            }
            HotRequest::Complete(_) => {
                HotAnswer::Complete(CompleteAnswer::Failed(queue_timeout(waited)))
            }
        }
    }
}

impl HotBatch {
    /// The answers of `reserves` and of `completes`, each in order: after the statement, or
    /// the failure of the whole batch for each.
    async fn answer(
        &self,
        reserves: &[ReserveRequest],
        completes: &[CompleteRequest],
    ) -> (Vec<ReserveAnswer>, Vec<CompleteAnswer>) {
        let reserve_plan = Firsts::of(reserves.iter().map(ReserveRequest::identity));
        let complete_plan = Firsts::of(completes.iter().map(CompleteRequest::target));
        let ran = self
            .run(
                &reserve_plan.unique(reserves),
                &complete_plan.unique(completes),
            )
            .await;
        match ran {
            Ok((rows, updated)) => (
                reserve_plan.reserve_answers(reserves, &rows),
                complete_plan.complete_answers(&updated),
            ),
            Err(error) => match self
                .0
                .failure(error, reserves.len() + completes.len())
                .await
            {
                // Refused and rolled back: each caller runs its own single-row statement.
                None => (
                    reserves.iter().map(|_| ReserveAnswer::Alone).collect(),
                    completes.iter().map(|_| CompleteAnswer::Alone).collect(),
                ),
                Some(mut errors) => {
                    let for_completes = errors.split_off(reserves.len());
                    (
                        errors.into_iter().map(ReserveAnswer::Failed).collect(),
                        for_completes
                            .into_iter()
                            .map(CompleteAnswer::Failed)
                            .collect(),
                    )
                }
            },
        }
    }
}

impl Batcher<HotBatch> {
    /// Queues a `reserve` and waits for its answer.
    ///
    /// # Errors
    /// [`Unanswered`] when the worker is gone.
    pub(crate) async fn reserve(
        &self,
        request: ReserveRequest,
    ) -> Result<ReserveAnswer, Unanswered> {
        match self.submit(HotRequest::Reserve(request)).await? {
            HotAnswer::Reserve(answer) => Ok(answer),
            // Never: a batch answers each request with its own kind.
            HotAnswer::Complete(_) => Err(Unanswered::Lost),
        }
    }

    /// Queues a `complete` and waits for its answer.
    ///
    /// # Errors
    /// [`Unanswered`] when the worker is gone.
    pub(crate) async fn complete(
        &self,
        request: CompleteRequest,
    ) -> Result<CompleteAnswer, Unanswered> {
        match self.submit(HotRequest::Complete(request)).await? {
            HotAnswer::Complete(answer) => Ok(answer),
            // Never: a batch answers each request with its own kind.
            HotAnswer::Reserve(_) => Err(Unanswered::Lost),
        }
    }
}
