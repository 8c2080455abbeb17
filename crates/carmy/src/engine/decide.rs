//! Decisions on uncertain executions (docs/semantics.md §12.1): resolve, release and listing,
//! checked here and taken by the store in one compare-and-set step.

use super::{Engine, Refusal};
use crate::auth::Caller;
use crate::decision::{
    check_note, check_outcome, AuditEntry, Decision, DecisionRefusal, ExecutionQuery, OperatorView,
    Released, ResolveRequest,
};
use crate::outcome::{ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus};
use crate::storable::check_outcome_values;
use crate::store::{ExecutionLookup, InFlightState};
use serde_json::Value;
use tracing::Instrument;

/// What [`Engine::operator_detail`] reads about one execution.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorDetail {
    /// The record (held or released) and its owner.
    pub view: OperatorView,
    /// Its audit rows, oldest first (decisions, takeovers, late arrivals).
    pub audit: Vec<AuditEntry>,
    /// The last reconciliation probe's evidence; `None` when never probed or decided since.
    pub evidence: Option<Value>,
}

/// The most records one listing returns.
pub const MAX_LISTED: usize = 1000;

/// An outcome that reconciliation found, as a caller states it.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolve {
    /// The outcome's status.
    pub status: ExecutionStatus,
    /// Its `data` (`null` unless `completed`).
    pub data: Value,
    /// Its `error` (required unless `completed`).
    pub error: Option<ExecutionError>,
    /// Why (required).
    pub note: String,
    /// Also decide while the owner still holds its lease.
    pub force: bool,
}

/// A release, as a caller states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// Why (required).
    pub note: String,
    /// Also decide while the owner still holds its lease.
    pub force: bool,
}

/// Turns a store's refusal of a decision into the engine's.
fn refused(refusal: DecisionRefusal, execution_id: &ExecutionId) -> Refusal {
    match refusal {
        DecisionRefusal::NotFound => Refusal::NotFound,
        DecisionRefusal::AlreadyDecided => Refusal::Finished {
            execution_id: execution_id.clone(),
        },
        DecisionRefusal::StillRunning => Refusal::StillRunning {
            execution_id: execution_id.clone(),
        },
    }
}

impl Engine {
    /// Records `resolve` as the outcome of `execution_id` (docs/semantics.md §12.1) on behalf of
    /// `caller`: its own execution, or any principal's for an operator.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a missing note or an outcome that does not fit its status;
    /// [`Refusal::NotFound`]; [`Refusal::Finished`] when the execution already has an outcome
    /// or was released (nothing changed); [`Refusal::StillRunning`] when its owner still holds
    /// its lease and `force` is not set; [`Refusal::StoreUnavailable`].
    pub async fn resolve(
        &self,
        caller: &Caller,
        execution_id: &ExecutionId,
        resolve: Resolve,
    ) -> Result<ExecutionResult, Refusal> {
        check_note(&resolve.note).map_err(Refusal::Invalid)?;
        check_outcome(resolve.status, &resolve.data, resolve.error.as_ref())
            .map_err(Refusal::Invalid)?;
        check_outcome_values(
            &resolve.data,
            resolve.error.as_ref(),
            self.config.max_result_bytes,
        )
        .map_err(Refusal::Invalid)?;
        let request = ResolveRequest {
            decision: decision(caller, execution_id, resolve.note, resolve.force),
            status: resolve.status,
            data: resolve.data,
            error: resolve.error,
        };
        self.record_resolution(request).await
    }

    /// Takes a checked resolution (note and outcome checked): the one path of every resolve,
    /// a person's and the reconciler's (docs/semantics.md §12.1).
    pub(super) async fn record_resolution(
        &self,
        request: ResolveRequest,
    ) -> Result<ExecutionResult, Refusal> {
        let execution_id = &request.decision.execution_id;
        let span = decision_span("resolve", &request.decision);
        let result = self
            .store
            .resolve_execution(&request)
            .instrument(span.clone())
            .await?
            .map_err(|refusal| refused(refusal, execution_id))?;
        span.record("outcome", result.status.as_str());
        self.metrics.resolved(crate::metrics::Resolution::Resolve);
        tracing::info!(%execution_id, actor = %request.decision.actor, status = result.status.as_str(), "execution resolved");
        Ok(result)
    }

    /// Frees the identity of `execution_id` (docs/semantics.md §12.1) on behalf of `caller`;
    /// the execution stays in history.
    ///
    /// # Errors
    /// As [`Engine::resolve`].
    pub async fn release(
        &self,
        caller: &Caller,
        execution_id: &ExecutionId,
        release: Release,
    ) -> Result<Released, Refusal> {
        check_note(&release.note).map_err(Refusal::Invalid)?;
        let request = decision(caller, execution_id, release.note, release.force);
        self.record_release(request).await
    }

    /// Takes a checked release (note checked): the one path of every release, a person's and
    /// the reconciler's (docs/semantics.md §12.1).
    pub(super) async fn record_release(&self, request: Decision) -> Result<Released, Refusal> {
        let execution_id = &request.execution_id;
        let span = decision_span("release", &request);
        let released = self
            .store
            .release_execution(&request)
            .instrument(span.clone())
            .await?
            .map_err(|refusal| refused(refusal, execution_id))?;
        span.record("outcome", "released");
        self.metrics.resolved(crate::metrics::Resolution::Release);
        tracing::info!(%execution_id, actor = %request.actor, "execution released");
        Ok(released)
    }

    /// The caller's records (an operator's: every principal's) matching `state`, `session_id`
    /// and `request_id`, oldest first, at most `limit` (capped at [`MAX_LISTED`]).
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`].
    pub async fn list(
        &self,
        caller: &Caller,
        state: Option<InFlightState>,
        session_id: Option<String>,
        request_id: Option<String>,
        limit: usize,
    ) -> Result<Vec<ExecutionLookup>, Refusal> {
        let query = ExecutionQuery {
            in_flight: state,
            session_id,
            request_id,
            limit,
            ..ExecutionQuery::default()
        };
        self.list_matching(caller, query).await
    }

    /// The records matching `query`, at most `query.limit` (capped at [`MAX_LISTED`]), in its
    /// order. An operator's `query.principal` picks one principal (`None`: every principal's);
    /// anyone else lists only its own records, whatever `query.principal` says.
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`].
    pub async fn list_matching(
        &self,
        caller: &Caller,
        query: ExecutionQuery,
    ) -> Result<Vec<ExecutionLookup>, Refusal> {
        let query = ExecutionQuery {
            principal: caller.scope().or(query.principal),
            limit: query.limit.min(MAX_LISTED),
            ..query
        };
        Ok(self.store.list_executions(&query).await?)
    }

    /// The audit rows of one of `principal`'s executions, oldest first.
    ///
    /// # Errors
    /// [`Refusal::NotFound`] when it is not `principal`'s; [`Refusal::StoreUnavailable`].
    pub async fn audit_trail(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<Vec<AuditEntry>, Refusal> {
        self.find(principal, execution_id).await?;
        Ok(self.store.audit_trail(execution_id).await?)
    }

    /// One execution by id as `caller` may read it (docs/semantics.md §7, §12): its own for a
    /// principal, any principal's for an operator.
    ///
    /// # Errors
    /// [`Refusal::NotFound`] (none, or another principal's for a principal);
    /// [`Refusal::RecordDamaged`]; [`Refusal::StoreUnavailable`].
    pub async fn find_as(
        &self,
        caller: &Caller,
        execution_id: &ExecutionId,
    ) -> Result<crate::store::ExecutionLookup, Refusal> {
        match caller.scope() {
            Some(principal) => self.find(&principal, execution_id).await,
            None => self
                .store
                .operator_view(execution_id)
                .await?
                .map(|view| view.lookup)
                .ok_or(Refusal::NotFound),
        }
    }

    /// One execution of any principal by id with its owner and lease where the store keeps
    /// them, its audit rows (oldest first) and its last probe's evidence: what the operator
    /// console shows (docs/semantics.md §12). Only for operators: `caller` without operator
    /// rights gets [`Refusal::NotFound`].
    ///
    /// # Errors
    /// [`Refusal::NotFound`]; [`Refusal::StoreUnavailable`].
    pub async fn operator_detail(
        &self,
        caller: &Caller,
        execution_id: &ExecutionId,
    ) -> Result<OperatorDetail, Refusal> {
        if caller.operator.is_none() {
            return Err(Refusal::NotFound);
        }
        let view = self
            .store
            .operator_view(execution_id)
            .await?
            .ok_or(Refusal::NotFound)?;
        let audit = self.store.audit_trail(execution_id).await?;
        let evidence = self.store.probe_evidence(execution_id).await?;
        Ok(OperatorDetail {
            view,
            audit,
            evidence,
        })
    }
}

/// The `carmy.decision` span of one resolve or release (docs/operations.md "Traces"): `action`,
/// `execution_id`, `actor`, `principal` (the decider's scope; empty for an operator or the
/// reconciler) and, once taken, `outcome` (the resolved status or `released`).
fn decision_span(action: &'static str, decision: &Decision) -> tracing::Span {
    crate::trace::exported_span(|| {
        tracing::info_span!(
            "carmy.decision",
            action,
            execution_id = decision.execution_id.as_str(),
            actor = decision.actor.as_str(),
            principal = decision.principal.as_deref().unwrap_or_default(),
            force = decision.force,
            outcome = tracing::field::Empty,
        )
    })
}

/// `caller`'s decision on `execution_id`: an operator's acts on any principal's execution, an
/// owner's only on its own (docs/semantics.md §12.1).
fn decision(caller: &Caller, execution_id: &ExecutionId, note: String, force: bool) -> Decision {
    Decision {
        execution_id: execution_id.clone(),
        principal: caller.scope(),
        note,
        actor: caller.actor(),
        force,
    }
}
