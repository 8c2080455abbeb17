//! Group commit for the hot path (docs/semantics.md §8): a queue that turns the `reserve` (or
//! `complete`) calls waiting at the same moment into one statement and one commit.
//!
//! A [`Batcher`] owns one worker task. Whenever fewer than [`Limits::in_flight`] batches are in
//! flight, the worker takes whatever queued meanwhile, up to [`Limits::max_rows`] requests (and
//! about [`MAX_BATCH_BYTES`] of payload), and hands it to its [`Execute`] implementation, which
//! answers every request of the batch. Nothing waits for a batch to fill: a call that finds
//! nothing queued and a batch slot free runs at once, alone, in its caller's own task
//! ([`Batcher::alone`]: the store then runs exactly what it runs with batching off; through
//! [`Batcher::submit`], a batch of one), with no hand-over to the worker and back, so a lone
//! caller costs what it would unbatched. Each caller waits on its own answer; a batch that fails
//! answers each of its own callers with the failure, and nothing else. A request that finds no
//! batch to go in within [`Limits::queue_timeout`] (every batch stuck, e.g. behind a lock) is
//! answered [`Execute::timed_out`], as a call that waits for a pooled connection would be.
//!
//! A request whose caller gave up (its future was dropped) before its batch was sent is left
//! out, as an unbatched call dropped before its statement would be: nothing is written for it.
//! The executor, one queue for `reserve` and `complete`, is in `combined` (the statements in
//! `grouped`).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// A batch stops taking requests once their payload ([`Execute::weight`]) reaches this many
/// bytes (1 MiB), so that a few large outcomes do not make one huge statement. A single request
/// larger than this is still sent, alone.
pub(crate) const MAX_BATCH_BYTES: usize = 1 << 20;

/// Runs one batch of requests.
pub(crate) trait Execute: Send + Sync + 'static {
    /// One caller's request, owned (it travels to the worker task).
    type Request: Send + 'static;
    /// One caller's answer.
    type Answer: Send + 'static;

    /// Answers `batch` (non-empty, at most `max_rows` long), one answer per request, in order.
    fn execute(&self, batch: Vec<Self::Request>) -> impl Future<Output = Vec<Self::Answer>> + Send;

    /// The payload size of `request` in bytes, counted against [`MAX_BATCH_BYTES`].
    fn weight(request: &Self::Request) -> usize;

    /// The answer of `request`, which waited `waited` in the queue without a batch to go in:
    /// nothing was sent for it.
    fn timed_out(request: &Self::Request, waited: Duration) -> Self::Answer;
}

/// A request waiting in the queue, with where its answer goes.
struct Queued<R, A> {
    request: R,
    reply: oneshot::Sender<A>,
    /// When it was queued: it waits for a batch at most the store's acquire timeout.
    queued_at: Instant,
}

/// Why [`Batcher::submit`] has no answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The worker is gone (its runtime shut down, or it panicked) and never took the request:
    /// nothing was sent for it.
    NotSent,
    /// The worker took the request and ended without answering: it may have been applied.
    Lost,
}

/// How a [`Batcher`] runs: the cap of a batch, how many batches may be in flight at once, and
/// the longest a request waits in the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The most requests in one batch (at least 1).
    pub(crate) max_rows: usize,
    /// The most batches in flight at once (at least 1).
    pub(crate) in_flight: usize,
    /// A request that waited this long without a batch to go in is answered
    /// [`Execute::timed_out`] (nothing was sent for it), as a call waiting for a pooled
    /// connection would be.
    pub(crate) queue_timeout: Duration,
}

/// The queue of one kind of request and its worker (see the module docs).
pub(crate) struct Batcher<E: Execute> {
    queue: mpsc::UnboundedSender<Queued<E::Request, E::Answer>>,
    /// The batch slots ([`Limits::in_flight`]), shared by the worker and lone callers.
    slots: Arc<Semaphore>,
    /// Requests sent to the worker and not yet taken into a batch (or answered timed out).
    queued: Arc<AtomicUsize>,
    executor: Arc<E>,
}

impl<E: Execute> std::fmt::Debug for Batcher<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl<E: Execute> Batcher<E> {
    /// Starts the worker (call inside a Tokio runtime); it ends when the batcher is dropped and
    /// its batches are answered.
    pub(crate) fn start(executor: E, limits: Limits) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        let executor = Arc::new(executor);
        let slots = Arc::new(Semaphore::new(limits.in_flight.max(1)));
        let queued = Arc::new(AtomicUsize::new(0));
        let worker = Worker {
            executor: Arc::clone(&executor),
            slots: Arc::clone(&slots),
            queued: Arc::clone(&queued),
            limits,
        };
        tokio::spawn(worker.work(requests));
        Self {
            queue,
            slots,
            queued,
            executor,
        }
    }

    /// A batch slot for a call to run alone, when nothing is queued and a slot is free: the
    /// caller runs its own single-row statement while it holds the slot (the store's path with
    /// batching off, no request built, no hand-over); `None` otherwise (the call goes through
    /// [`Batcher::submit`]). Dropping the slot frees it for the next batch.
    pub(crate) fn alone(&self) -> Option<OwnedSemaphorePermit> {
        if self.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Runs `request` at once as a batch of one when nothing is queued and a slot is free
    /// ([`Batcher::alone`]), else queues it; waits for its answer.
    ///
    /// # Errors
    /// [`Unanswered`] when the worker is gone.
    pub(crate) async fn submit(&self, request: E::Request) -> Result<E::Answer, Unanswered> {
        if let Some(slot) = self.alone() {
            let answer = self.executor.execute(vec![request]).await.pop();
            drop(slot);
            return answer.ok_or(Unanswered::Lost);
        }
        let (reply, answer) = oneshot::channel();
        let queued = Queued {
            request,
            reply,
            queued_at: Instant::now(),
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(queued).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Unanswered::NotSent);
        }
        answer.await.map_err(|_| Unanswered::Lost)
    }
}

/// Takes the next batch from the front of `pending`: up to `max_rows` requests and about
/// [`MAX_BATCH_BYTES`], leaving out callers that gave up.
fn next_batch<E: Execute>(
    pending: &mut VecDeque<Queued<E::Request, E::Answer>>,
    max_rows: usize,
) -> Vec<Queued<E::Request, E::Answer>> {
    let mut batch = Vec::new();
    let mut weight = 0;
    while batch.len() < max_rows && weight < MAX_BATCH_BYTES {
        let Some(next) = pending.pop_front() else {
            break;
        };
        // A caller that gave up before its statement was sent: nothing is written for it.
        if next.reply.is_closed() {
            continue;
        }
        weight += E::weight(&next.request);
        batch.push(next);
    }
    batch
}

/// Runs `batch` and answers each of its callers.
async fn run_batch<E: Execute>(executor: Arc<E>, batch: Vec<Queued<E::Request, E::Answer>>) {
    let (batch, replies): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|queued| (queued.request, queued.reply))
        .unzip();
    let answers = executor.execute(batch).await;
    debug_assert_eq!(answers.len(), replies.len());
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A caller that left meanwhile no longer needs its answer.
        let _ = reply.send(answer);
    }
}

/// The worker task's share of a [`Batcher`].
struct Worker<E: Execute> {
    executor: Arc<E>,
    slots: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
    limits: Limits,
}

impl<E: Execute> Worker<E> {
    /// The worker: whenever a batch slot is free, the next batch is whatever queued meanwhile;
    /// a request that waited `queue_timeout` is answered [`Execute::timed_out`].
    async fn work(self, mut requests: mpsc::UnboundedReceiver<Queued<E::Request, E::Answer>>) {
        let limits = self.limits;
        let mut pending: VecDeque<Queued<E::Request, E::Answer>> = VecDeque::new();
        let mut open = true;
        loop {
            while let Ok(next) = requests.try_recv() {
                pending.push_back(next);
            }
            let Some(oldest) = pending.front().map(|queued| queued.queued_at) else {
                if !open {
                    return;
                }
                match requests.recv().await {
                    Some(next) => pending.push_back(next),
                    None => open = false,
                }
                continue;
            };
            let before = pending.len();
            tokio::select! {
                biased;
                slot = Arc::clone(&self.slots).acquire_owned() => {
                    let Ok(slot) = slot else { return };
                    let batch = next_batch::<E>(&mut pending, limits.max_rows.max(1));
                    if !batch.is_empty() {
                        let executor = Arc::clone(&self.executor);
                        tokio::spawn(async move {
                            run_batch(executor, batch).await;
                            drop(slot);
                        });
                    }
                }
                () = tokio::time::sleep_until((oldest + limits.queue_timeout).into()) => {
                    let waited_out = pending
                        .iter()
                        .take_while(|queued| queued.queued_at.elapsed() >= limits.queue_timeout)
                        .count();
                    for queued in pending.drain(..waited_out) {
                        let answer = E::timed_out(&queued.request, limits.queue_timeout);
                        let _ = queued.reply.send(answer);
                    }
                }
                next = requests.recv(), if open => match next {
                    Some(next) => pending.push_back(next),
                    None => open = false,
                },
            }
            let left = before.saturating_sub(pending.len());
            self.queued.fetch_sub(left, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every batch it takes, then waits at the gate; answers each request with its
    /// double.
    struct Doubler {
        batches: Arc<Mutex<Vec<Vec<u64>>>>,
        gate: Arc<tokio::sync::Semaphore>,
        /// The task each batch ran in.
        tasks: Arc<Mutex<Vec<Option<tokio::task::Id>>>>,
    }

    impl Execute for Doubler {
        type Request = u64;
        type Answer = u64;

        async fn execute(&self, batch: Vec<u64>) -> Vec<u64> {
            self.batches.lock().unwrap().push(batch.clone());
            self.tasks.lock().unwrap().push(tokio::task::try_id());
            let _permit = self.gate.acquire().await.unwrap();
            batch.into_iter().map(|n| n * 2).collect()
        }

        fn weight(request: &u64) -> usize {
            usize::try_from(*request).unwrap()
        }

        fn timed_out(_request: &u64, _waited: Duration) -> u64 {
            u64::MAX
        }
    }

    /// One batch in flight at a time, at most `max_rows` long, 10 s in the queue.
    fn limits(max_rows: usize) -> Limits {
        Limits {
            max_rows,
            in_flight: 1,
            queue_timeout: Duration::from_secs(10),
        }
    }

    /// The batches a [`Doubler`] took.
    type Taken = Arc<Mutex<Vec<Vec<u64>>>>;

    /// A [`Doubler`], what it took, and its gate (open or closed).
    fn doubler(open: bool) -> (Doubler, Taken, Arc<tokio::sync::Semaphore>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(usize::from(open) * 1000));
        let batches = Arc::new(Mutex::new(Vec::new()));
        let executor = Doubler {
            batches: Arc::clone(&batches),
            gate: Arc::clone(&gate),
            tasks: Arc::default(),
        };
        (executor, batches, gate)
    }

    #[tokio::test]
    async fn an_idle_batcher_runs_each_request_alone() {
        let (executor, batches, _gate) = doubler(true);
        let batcher = Batcher::start(executor, limits(8));
        assert_eq!(batcher.submit(3).await, Ok(6));
        assert_eq!(batcher.submit(4).await, Ok(8));
        assert_eq!(*batches.lock().unwrap(), vec![vec![3], vec![4]]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_request_runs_in_its_callers_task() {
        let (executor, batches, _gate) = doubler(true);
        let tasks = Arc::clone(&executor.tasks);
        let batcher = Arc::new(Batcher::start(executor, limits(8)));
        let caller = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { (batcher.submit(5).await, tokio::task::id()) })
        };
        let (answer, caller_id) = caller.await.unwrap();
        assert_eq!(answer, Ok(10));
        assert_eq!(*batches.lock().unwrap(), vec![vec![5]]);
        assert_eq!(*tasks.lock().unwrap(), vec![Some(caller_id)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_runs_alone_only_when_nothing_is_queued_and_a_slot_is_free() {
        let (executor, batches, gate) = doubler(false);
        let batcher = Arc::new(Batcher::start(executor, limits(8)));
        let slot = batcher.alone().expect("an idle batcher has a free slot");
        // The only slot is taken: a request queues, and no other call may run alone.
        let queued = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(1).await })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while batcher.queued.load(Ordering::Acquire) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(batcher.alone().is_none(), "a request is queued");
        drop(slot);
        // The worker takes the queued request into a batch, which holds the slot at the gate.
        taken(&batches, 1).await;
        assert!(batcher.alone().is_none(), "the only slot is in flight");
        gate.add_permits(1000);
        assert_eq!(queued.await.unwrap(), Ok(2));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while batcher.alone().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the slot was never freed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(*batches.lock().unwrap(), vec![vec![1]]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_queued_while_a_batch_is_in_flight_form_the_next_batch_up_to_the_cap() {
        let (executor, batches, gate) = doubler(false);
        let batcher = Arc::new(Batcher::start(executor, limits(4)));
        let first = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(1).await })
        };
        taken(&batches, 1).await;
        let rest: Vec<_> = (10..16)
            .map(|n| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move { batcher.submit(n).await })
            })
            .collect();
        // Let every request reach the queue before the gate opens.
        tokio::time::sleep(Duration::from_millis(100)).await;
        gate.add_permits(1000);
        assert_eq!(first.await.unwrap(), Ok(2));
        let mut answers = Vec::new();
        for task in rest {
            answers.push(task.await.unwrap().unwrap());
        }
        assert_eq!(answers, vec![20, 22, 24, 26, 28, 30]);
        let seen = batches.lock().unwrap().clone();
        let lengths: Vec<usize> = seen.iter().map(Vec::len).collect();
        assert_eq!(lengths, vec![1, 4, 2], "{seen:?}");
    }

    /// Waits (at most 10 s) until the worker has taken `count` batches.
    async fn taken(batches: &Mutex<Vec<Vec<u64>>>, count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while batches.lock().unwrap().len() < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the worker took no batch"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_batch_stops_at_the_byte_budget() {
        let (executor, batches, gate) = doubler(false);
        let batcher = Arc::new(Batcher::start(executor, limits(100)));
        let big = MAX_BATCH_BYTES as u64 / 2;
        let tasks: Vec<_> = [1, big, big, 1]
            .into_iter()
            .map(|n| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move { batcher.submit(n).await })
            })
            .collect();
        taken(&batches, 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.add_permits(1000);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let lengths: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
        // The worker took the first request alone (the others were not queued yet) or with
        // the others; either way no batch goes past the budget by more than its last request.
        for batch in batches.lock().unwrap().iter() {
            let total: u64 = batch.iter().sum();
            let without_last: u64 = total - batch.last().unwrap();
            assert!(without_last < MAX_BATCH_BYTES as u64, "{lengths:?}");
        }
    }

    #[tokio::test]
    async fn a_request_that_finds_no_batch_in_time_is_answered_timed_out() {
        let (executor, batches, gate) = doubler(false);
        let limits = Limits {
            queue_timeout: Duration::from_millis(200),
            ..limits(8)
        };
        let batcher = Arc::new(Batcher::start(executor, limits));
        let first = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(1).await })
        };
        taken(&batches, 1).await;
        // The only batch slot is held at the gate: the next request waits out its timeout.
        let waited = tokio::time::timeout(Duration::from_secs(10), batcher.submit(2)).await;
        assert_eq!(waited.expect("answered within 10 s"), Ok(u64::MAX));
        gate.add_permits(1000);
        assert_eq!(first.await.unwrap(), Ok(2));
        assert_eq!(*batches.lock().unwrap(), vec![vec![1]]);
    }

    #[tokio::test]
    async fn a_caller_that_left_before_its_batch_was_sent_is_left_out() {
        let (executor, batches, gate) = doubler(false);
        let batcher = Arc::new(Batcher::start(executor, limits(8)));
        let first = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(1).await })
        };
        taken(&batches, 1).await;
        let gone = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(2).await })
        };
        let kept = {
            let batcher = Arc::clone(&batcher);
            tokio::spawn(async move { batcher.submit(3).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        gone.abort();
        let _ = gone.await;
        gate.add_permits(1000);
        assert_eq!(first.await.unwrap(), Ok(2));
        assert_eq!(kept.await.unwrap(), Ok(6));
        assert_eq!(*batches.lock().unwrap(), vec![vec![1], vec![3]]);
    }
}
