//! Decisions on the in-memory store (docs/semantics.md §12.1): resolve, release, listing and the
//! audit trail, each under the store's one lock, so a decision compares and sets in one step
//! exactly as `carmy.resolve_execution` does in PostgreSQL.
//!
//! Every execution of this store runs in this process, so its in-flight records are always
//! `running`: deciding on one needs `force`. History and audit rows live as long as the
//! process and are not counted against the capacity.

use super::{Held, Inner};
use crate::decision::{
    AuditAction, AuditEntry, Decision, DecisionRefusal, ExecutionQuery, ListOrder, ReleaseRequest,
    Released, Resolution, ResolveRequest,
};
use crate::outcome::{ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult};
use crate::store::{
    Decided, ExecutionLookup, IdempotencyKey, InFlightState, RecordState, StoredRecord,
};
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{json, Value};

/// The current time at the millisecond precision records are kept with.
pub(super) fn now_millis() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// An in-flight record a decision may act on.
struct Decidable {
    key: IdempotencyKey,
    record: StoredRecord,
    state: InFlightState,
    /// The decision's who, when (now) and why.
    resolution: Resolution,
}

impl Inner {
    /// The execution, held or released, if `principal` (when given) owns it.
    pub(super) fn find(
        &self,
        principal: Option<&str>,
        execution_id: &ExecutionId,
    ) -> Option<ExecutionLookup> {
        let owned = |key: &IdempotencyKey| principal.is_none_or(|p| key.principal == p);
        if let Some(key) = self.by_execution.get(execution_id).filter(|k| owned(k)) {
            return self.by_key.get(key).map(|held| ExecutionLookup {
                key: IdempotencyKey::clone(key),
                record: held.record(),
                released: None,
                reserved_at: None,
                arguments: held.arguments.clone(),
            });
        }
        self.released
            .get(execution_id)
            .filter(|lookup| owned(&lookup.key))
            .cloned()
    }

    /// The held, in-flight record `decision` may act on, with its identity and state, and
    /// the decision's resolution (who, now, why).
    fn decidable(&self, decision: &Decision) -> Result<Decidable, DecisionRefusal> {
        let found = self
            .find(decision.principal.as_deref(), &decision.execution_id)
            .ok_or(DecisionRefusal::NotFound)?;
        if found.released.is_some() {
            return Err(DecisionRefusal::AlreadyDecided);
        }
        let RecordState::InFlight(state) = found.record.state else {
            return Err(DecisionRefusal::AlreadyDecided);
        };
        if state == InFlightState::Running && !decision.force {
            return Err(DecisionRefusal::StillRunning);
        }
        Ok(Decidable {
            key: found.key,
            record: found.record,
            state,
            resolution: Resolution {
                by: decision.actor.clone(),
                at: now_millis(),
                note: decision.note.clone(),
            },
        })
    }

    pub(super) fn resolve(&mut self, request: &ResolveRequest) -> Decided<ExecutionResult> {
        let Decidable {
            key,
            record,
            state,
            resolution,
        } = self.decidable(&request.decision)?;
        let at = resolution.at;
        let result = ExecutionResult {
            execution_id: record.execution_id.clone(),
            status: request.status,
            data: request.data.clone(),
            error: request.error.clone(),
            tool: record.tool.clone(),
            request_id: Some(key.request_id.clone()),
            session_id: key.session_id.clone(),
            started_at: self.by_key.get(&key).map_or(at, |held| held.reserved_at),
            finished_at: at,
            resolution: Some(Box::new(resolution.clone())),
        };
        if let Some(held) = self.by_key.get_mut(&key) {
            held.outcome = Some(RecordedResult::new(result.clone()));
            held.recorded_at = Some(at);
        }
        let after = json!({
            "state": request.status.as_str(),
            "outcome": serde_json::to_value(&result).unwrap_or(Value::Null),
        });
        self.audit_decision(
            record.execution_id,
            &resolution,
            AuditAction::Resolve,
            state,
            after,
        );
        Ok(result)
    }

    pub(super) fn release(&mut self, request: &ReleaseRequest) -> Decided<Released> {
        let Decidable {
            key,
            record,
            state,
            resolution,
        } = self.decidable(request)?;
        let arguments = self.by_key.remove(&key).and_then(|held| held.arguments);
        self.by_execution.remove(&record.execution_id);
        let released = Released {
            execution_id: record.execution_id.clone(),
            key: key.clone(),
            tool: record.tool.clone(),
            state_at_release: state,
            resolution: resolution.clone(),
        };
        let after = json!({"state": "released"});
        let execution_id = record.execution_id.clone();
        self.audit_decision(
            execution_id,
            &resolution,
            AuditAction::Release,
            state,
            after,
        );
        self.last_released
            .insert(key.clone(), record.execution_id.clone());
        self.released.insert(
            record.execution_id.clone(),
            ExecutionLookup {
                key,
                record,
                released: Some(resolution),
                reserved_at: None,
                arguments,
            },
        );
        Ok(released)
    }

    /// The audit row of a decision (`resolution`) on `execution_id`, which was `state` before.
    fn audit_decision(
        &mut self,
        execution_id: ExecutionId,
        resolution: &Resolution,
        action: AuditAction,
        state: InFlightState,
        after: Value,
    ) {
        self.audit.push(AuditEntry {
            actor: resolution.by.clone(),
            at: resolution.at,
            execution_id,
            action,
            before: before(state),
            after,
            note: Some(resolution.note.clone()),
        });
    }

    pub(super) fn list(&self, query: &ExecutionQuery) -> Vec<ExecutionLookup> {
        let matches = |key: &IdempotencyKey, held: &Held| {
            query.principal.as_ref().is_none_or(|p| &key.principal == p)
                && query
                    .session_id
                    .as_ref()
                    .is_none_or(|s| &key.session_id == s)
                && query
                    .request_id
                    .as_ref()
                    .is_none_or(|r| &key.request_id == r)
                && query.tool.as_ref().is_none_or(|t| &held.record.tool == t)
                && query
                    .in_flight
                    .is_none_or(|wanted| held.in_flight() == Some(wanted))
                && query.arguments.as_ref().is_none_or(|needle| {
                    held.arguments
                        .as_deref()
                        .is_some_and(|kept| crate::arguments::contains_text(kept, needle))
                })
                && (!query.failures_only
                    || held.outcome.as_ref().is_some_and(|outcome| {
                        outcome.result().status != ExecutionStatus::Completed
                    }))
        };
        let mut found: Vec<(DateTime<Utc>, ExecutionLookup)> = self
            .by_key
            .iter()
            .filter(|(key, held)| matches(key, held))
            .map(|(key, held)| {
                let lookup = ExecutionLookup {
                    key: IdempotencyKey::clone(key),
                    record: held.record(),
                    released: None,
                    reserved_at: Some(held.reserved_at),
                    arguments: held.arguments.clone(),
                };
                (held.reserved_at, lookup)
            })
            .collect();
        found.sort_by(|a, b| (a.0, &a.1.key).cmp(&(b.0, &b.1.key)));
        if query.order == ListOrder::NewestFirst {
            found.reverse();
        }
        found
            .into_iter()
            .take(query.limit)
            .map(|(_, lookup)| lookup)
            .collect()
    }

    /// Keeps a late outcome as an audit row; the execution holding `key` now.
    pub(super) fn late_arrival(
        &mut self,
        key: &IdempotencyKey,
        recorded: &crate::outcome::RecordedResult,
    ) -> Option<ExecutionId> {
        let current = self
            .by_key
            .get(key)
            .map(|held| held.record.execution_id.clone());
        let result = recorded.result();
        self.audit.push(AuditEntry {
            actor: "owner".into(),
            at: now_millis(),
            execution_id: result.execution_id.clone(),
            action: AuditAction::LateArrival,
            before: late_before(key, current.as_ref()),
            after: json!({
                "state": result.status.as_str(),
                "outcome": serde_json::to_value(result).unwrap_or(Value::Null),
            }),
            note: Some(crate::decision::LATE_ARRIVAL_NOTE.into()),
        });
        current
    }

    pub(super) fn audit_of(&self, execution_id: &ExecutionId) -> Vec<AuditEntry> {
        self.audit
            .iter()
            .filter(|entry| &entry.execution_id == execution_id)
            .cloned()
            .collect()
    }
}

/// A late arrival's `before`: the identity and the execution that holds it now.
fn late_before(key: &IdempotencyKey, current: Option<&ExecutionId>) -> Value {
    json!({
        "principal": key.principal,
        "session_id": key.session_id,
        "request_id": key.request_id,
        "current_execution_id": current,
    })
}

/// The audit row's `before` for an in-flight record.
fn before(state: InFlightState) -> Value {
    json!({"state": "running", "in_flight_state": state.as_str()})
}
