//! Executions held by a client (docs/semantics.md §16): reserving an identity for work the
//! caller runs itself, renewing the holder's lease, and recording the outcome it brings with
//! its fencing token, through the same store paths, late arrivals and recording retries as a
//! gateway-run execution.

use super::run::Delivery;
use super::{answer, Answer, Engine, Refusal};
use crate::call::ValidatedCall;
use crate::held::{Hold, HoldToken, Reserved};
use crate::outcome::{
    ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
use crate::registry::RegisteredTool;
use crate::store::{Claim, RecordState, Reservation, StoreError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// What a holder reports as its function's outcome (docs/semantics.md §16): the shape of a
/// decision's outcome (§12.1), checked the same way.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldOutcome {
    /// How the function ended.
    pub status: ExecutionStatus,
    /// Its value for `completed`; `null` otherwise.
    pub data: Value,
    /// Its error for every other status.
    pub error: Option<ExecutionError>,
}

/// The answer to a client-held reservation: reserved for this caller, or the identity's
/// recorded outcome (the function must not run).
#[derive(Clone, Debug, PartialEq)]
// One answer per call, moved once.
#[allow(clippy::large_enum_variant)]
pub enum HeldAnswer {
    /// The caller holds the execution: run the function, renew, record.
    Reserved(Reserved),
    /// The identity's recorded outcome (`replayed: true`).
    Replay(Answer),
}

impl Engine {
    /// Reserves `call`'s identity for work its caller runs itself, holding it under a new
    /// fencing token with `lease` (docs/semantics.md §16). An identity already held is answered
    /// as a gateway-run call's would be (§3): a replay, or the refusals below.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] without a request id, for a tool the gateway runs itself, for
    /// arguments failing the schema (when the identity has no record), or on a store that keeps
    /// no client holds; [`Refusal::UnknownTool`]; [`Refusal::Conflict`];
    /// [`Refusal::Uncertain`]; [`Refusal::StoreUnavailable`].
    pub async fn hold(
        self: &Arc<Self>,
        call: ValidatedCall,
        lease: Duration,
    ) -> Result<HeldAnswer, Refusal> {
        let Some(key) = call.key() else {
            return Err(Refusal::Invalid(
                "request_id is required: a client-held execution is reserved by its identity"
                    .into(),
            ));
        };
        if !self.store.keeps_client_holds() {
            return Err(Refusal::Invalid(
                "this gateway's store keeps no executions held by a client: run the gateway with PostgreSQL (CARMY_DATABASE_URL)".into(),
            ));
        }
        let registered = match self.holdable_tool(&call) {
            Ok(registered) => registered,
            Err(rejection) => {
                return self.replay_answer(self.recorded_or(&key, &call, rejection).await)
            }
        };
        let intent = self.intent(&registered, &call)?;
        let hold = Hold {
            token: HoldToken::generate(),
            lease,
        };
        let granted_from = chrono::Utc::now();
        let reserved = self
            .store
            .reserve_held(
                Claim {
                    key: &key,
                    fingerprint: call.fingerprint(),
                },
                &intent,
                &hold,
            )
            .await;
        let rerun_of = match reserved {
            Ok(Reservation::Reserved) => None,
            // A reservation that replaced a released execution is a reservation all the same,
            // and says whose place it took (§12.1, "A rerun says so").
            Ok(Reservation::Replaced(replaced)) => Some(replaced),
            Ok(Reservation::Existing(existing)) => {
                return self.replay_answer(answer::from_existing(existing, &call))
            }
            Err(error) => {
                if matches!(error, StoreError::Indeterminate(_)) {
                    self.release_in_background(key, intent.execution_id);
                }
                return Err(self.refusal(error));
            }
        };
        Ok(HeldAnswer::Reserved(Reserved {
            execution_id: intent.execution_id,
            token: hold.token,
            lease,
            lease_expires_at: granted_from
                + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::zero()),
            rerun_of,
        }))
    }

    /// Renews the lease of `token` on `execution_id`, one of `principal`'s executions
    /// (docs/semantics.md §16); answers the new deadline.
    ///
    /// # Errors
    /// [`Refusal::NotFound`] (not the principal's, or never held with this token);
    /// [`Refusal::Finished`] when the holder lost it (it has an outcome, was decided or
    /// released); [`Refusal::StoreUnavailable`].
    pub async fn renew_hold(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
        token: HoldToken,
        lease: Duration,
    ) -> Result<chrono::DateTime<chrono::Utc>, Refusal> {
        self.find(principal, execution_id).await?;
        let owner = self.held_owner(execution_id).await?;
        if owner.owner.as_deref() != Some(token.as_str()) {
            return Err(Refusal::NotFound);
        }
        let granted_from = chrono::Utc::now();
        let hold = Hold { token, lease };
        let renewed = self
            .store
            .renew_held(execution_id, &hold)
            .await
            .map_err(|error| self.refusal(error))?;
        if !renewed {
            return Err(Refusal::Finished {
                execution_id: execution_id.clone(),
            });
        }
        Ok(granted_from + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::zero()))
    }

    /// Records `outcome` for `execution_id`, one of `principal`'s executions held with `token`
    /// (docs/semantics.md §16): durably, before answering, retried in the background if the
    /// store fails (§4). A holder whose execution was decided meanwhile (its lease lapsed and
    /// someone resolved or released it) is refused and its outcome kept as a late arrival
    /// (§12.1). A repeated record of the same outcome answers the record.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for an outcome that does not fit its status (nothing recorded);
    /// [`Refusal::NotFound`] (not the principal's, or never held with this token);
    /// [`Refusal::Superseded`]; [`Refusal::RecordingPending`]; [`Refusal::StoreUnavailable`].
    pub async fn record_held(
        self: &Arc<Self>,
        principal: &str,
        execution_id: &ExecutionId,
        token: &HoldToken,
        outcome: HeldOutcome,
    ) -> Result<Answer, Refusal> {
        // Recorded as text like a tool's result (§4), so U+0000 is kept: only the shape.
        crate::decision::check_outcome_shape(outcome.status, &outcome.data, outcome.error.as_ref())
            .map_err(Refusal::Invalid)?;
        if let Some(error) = &outcome.error {
            crate::storable::check_outcome_values(
                &Value::Null,
                Some(error),
                self.config.max_result_bytes,
            )
            .map_err(Refusal::Invalid)?;
        }
        let found = self.find(principal, execution_id).await?;
        let owner = self.held_owner(execution_id).await?;
        if owner.owner.as_deref() != Some(token.as_str()) {
            return Err(Refusal::NotFound);
        }
        let (status, data, error) = match outcome.status {
            ExecutionStatus::Completed => self.check_recordable(outcome.data),
            status => (status, Value::Null, outcome.error),
        };
        let result = ExecutionResult {
            execution_id: execution_id.clone(),
            status,
            data,
            error,
            tool: found.record.tool.clone(),
            request_id: Some(found.key.request_id.clone()),
            session_id: found.key.session_id.clone(),
            started_at: owner.started_at,
            finished_at: now_millis(),
            resolution: None,
        };
        if let RecordState::Finished(recorded) = &found.record.state {
            // Recorded already: the same outcome again (a lost acknowledgement) answers the
            // record; anything else arrived after a decision.
            if found.released.is_none() && recorded.resolution.is_none() && same(recorded, &result)
            {
                return Ok(self.with_expiry(Answer {
                    result: RecordedResult::new(recorded.clone()),
                    replayed: false,
                    expires_at: None,
                    rerun_of: None,
                }));
            }
        }
        let recorded = RecordedResult::new(result).with_attempt(owner.attempt);
        let (sender, receiver) = oneshot::channel::<Delivery>();
        let engine = Arc::clone(self);
        let key = found.key;
        let fingerprint = found.record.fingerprint;
        self.executions.spawn(async move {
            engine.record(&key, &fingerprint, recorded, sender).await;
        });
        match receiver.await {
            Ok(Ok(result)) => Ok(self.with_expiry(Answer {
                result,
                replayed: false,
                expires_at: None,
                rerun_of: None,
            })),
            Ok(Err(refusal)) => Err(refusal),
            Err(_) => Err(Refusal::RecordingPending {
                execution_id: execution_id.clone(),
            }),
        }
    }

    /// The tool `call` names, if it is client-held and its arguments pass its schema.
    fn holdable_tool(&self, call: &ValidatedCall) -> Result<Arc<RegisteredTool>, Refusal> {
        let registered = self
            .tools
            .snapshot()
            .get(call.tool())
            .cloned()
            .ok_or_else(|| Refusal::UnknownTool {
                tool: call.tool().to_owned(),
                closest: None,
            })?;
        if !registered.tool.held_by_client() {
            return Err(Refusal::Invalid(format!(
                "tool {:?} is run by the gateway, not by its client: call it with POST /v1/executions",
                call.tool()
            )));
        }
        registered.validate(call.arguments()).map_err(|problems| {
            Refusal::Invalid(format!(
                "arguments do not match the tool's schema: {problems}"
            ))
        })?;
        Ok(registered)
    }

    async fn held_owner(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<crate::held::HeldOwner, Refusal> {
        self.store
            .held_owner(execution_id)
            .await
            .map_err(|error| self.refusal(error))?
            .ok_or(Refusal::NotFound)
    }

    /// A replay with its expiry; refusals unchanged.
    fn replay_answer(&self, answer: Result<Answer, Refusal>) -> Result<HeldAnswer, Refusal> {
        answer.map(|answer| HeldAnswer::Replay(self.with_expiry(answer)))
    }

    fn with_expiry(&self, mut answer: Answer) -> Answer {
        answer.expires_at = self.expires_at(answer.result.result());
        answer
    }
}

/// Whether a recorded outcome is the one `result` would record (a repeated record after a lost
/// acknowledgement), ignoring when each was taken.
fn same(recorded: &ExecutionResult, result: &ExecutionResult) -> bool {
    recorded.status == result.status
        && recorded.data == result.data
        && recorded.error == result.error
}

/// The current time at the millisecond precision outcomes are recorded with.
fn now_millis() -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound;
    chrono::Utc::now().trunc_subsecs(3)
}
