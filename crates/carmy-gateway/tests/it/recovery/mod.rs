//! Recovery (docs/semantics.md §12): decisions over HTTP, SQL and the operator CLI,
//! reconciliation, takeover, late arrivals and damaged records.

mod alert_gauges;
mod decision_limits;
pub(crate) mod executions_cli;
mod executions_cli_failures;
mod frozen_orders;
mod held;
mod kept_arguments;
mod reconcile;
mod reconcile_claims;
mod reconcile_config;
mod reconcile_contradiction;
mod reconcile_deadline;
mod reconcile_tool_probe;
mod reconciling;
mod record_damaged;
mod recovery_http;
pub(crate) mod recovery_replicas;
mod takeover;
