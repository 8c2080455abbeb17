//! Taking over an interrupted execution of a tool whose policy is `on_interrupted = "rerun"`
//! (docs/semantics.md §12.7): the next attempt after the owner's lease lapsed runs the tool
//! again under the same execution id (so an upstream sees the same idempotency key), as the
//! execution's next attempt; at most one attempt takes over.

use super::run::Run;
use super::{Answer, Engine, Refusal};
use crate::call::ValidatedCall;
use crate::outcome::ExecutionId;
use crate::store::{Claim, Existing, IdempotencyKey};
use crate::tool::Tool;
use std::sync::Arc;

impl Engine {
    /// Takes `execution_id` (interrupted, holding `key`) over and runs `tool` again, or, when
    /// another attempt won or the record changed meanwhile, answers from the record as it is
    /// now.
    ///
    /// # Errors
    /// As [`Engine::execute`]: the refusals of a record read again, and store failures.
    pub(super) async fn take_over(
        self: &Arc<Self>,
        tool: Arc<dyn Tool>,
        call: ValidatedCall,
        key: IdempotencyKey,
        execution_id: ExecutionId,
    ) -> Result<Answer, Refusal> {
        let taken = self
            .store
            .take_over(
                Claim {
                    key: &key,
                    fingerprint: call.fingerprint(),
                },
                &execution_id,
            )
            .await
            .map_err(|error| self.refusal(error))?;
        let Some(attempt) = taken else {
            // Another attempt took it over, or it finished, was decided, or its owner is back:
            // the record as it is now answers.
            return match self.lookup(&key).await? {
                Some(record) => {
                    self.answer_existing(
                        call.clone(),
                        &key,
                        Existing::for_record(record, call.fingerprint()),
                    )
                    .await
                }
                // Released in between: the identity is vacant, so this is a new call.
                None => Box::pin(self.execute_attached(call)).await,
            };
        };
        tracing::info!(
            execution_id = execution_id.as_str(),
            attempt,
            tool = tool.name(),
            "took over an interrupted execution (on_interrupted = rerun)"
        );
        self.metrics.taken_over(tool.name());
        self.start_execution(Run {
            tool,
            call,
            execution_id,
            key: Some(key),
            attempt,
            replaces: None,
        })
        .await
    }
}
