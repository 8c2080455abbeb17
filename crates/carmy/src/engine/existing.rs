//! A call answered from its identity's existing record, waiting for a running duplicate instead
//! of answering `EXECUTION_UNCERTAIN` `running` at once (docs/semantics.md §12.6,
//! `Prefer: wait=N`). The waiting loop itself is [`crate::wait`].

use super::{answer, Answer, Engine, Refusal};
use crate::call::ValidatedCall;
use crate::store::{Existing, IdempotencyKey, InFlightState, WaitRequest};
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// Answers a call from its identity's existing record. When the record is `running` and the
    /// call asked to wait, waits (at most [`EngineConfig::max_wait`](super::EngineConfig)) for
    /// the outcome recorded on any replica and answers with it; if the identity was released
    /// meanwhile, the call is tried once more as a new one (it may then run).
    ///
    /// # Errors
    /// The refusals of [`answer::from_existing`]; `EXECUTION_UNCERTAIN` when the wait ended
    /// without an outcome; [`Refusal::StoreUnavailable`].
    pub(super) async fn answer_existing(
        self: &Arc<Self>,
        call: ValidatedCall,
        key: &IdempotencyKey,
        existing: Existing,
    ) -> Result<Answer, Refusal> {
        let wait = call
            .wait()
            .map_or(Duration::ZERO, |wait| wait.min(self.config.max_wait));
        let Existing::Uncertain {
            execution_id,
            state: InFlightState::Running,
        } = &existing
        else {
            return answer::from_existing(existing, &call);
        };
        if wait.is_zero() {
            return answer::from_existing(existing, &call);
        }
        let record = self
            .store
            .wait_for_outcome(WaitRequest {
                key,
                execution_id,
                timeout: wait,
            })
            .await?;
        match record {
            Some(record) => {
                answer::from_existing(Existing::for_record(record, call.fingerprint()), &call)
            }
            None => {
                let again = call.with_wait(Duration::ZERO);
                Box::pin(self.execute_attached(again)).await
            }
        }
    }
}
