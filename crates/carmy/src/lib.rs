//! # Carmy core
//!
//! Carmy executes AI agents' tool calls and makes their retries safe. A call that carries a
//! `request_id` has an identity (principal, session, request_id) and a fingerprint (SHA-256 over
//! the tool name and the RFC 8785 canonical arguments and metadata). Before the tool runs, the
//! identity is reserved in an [`IdempotencyStore`](store::IdempotencyStore); the outcome is
//! recorded durably before it is returned; every later attempt is answered from the record:
//! a replay, an `IDEMPOTENCY_CONFLICT`, or an explicit `EXECUTION_UNCERTAIN`.
//!
//! The rules are written down in the repository's `docs/semantics.md`; item docs cite its
//! sections as "docs/semantics.md §N".
//!
//! The core is transport-neutral: the fronts are crates of their own above it, `carmy-http`
//! (the HTTP API, its OpenAPI document, the operator console and the `carmy_http::app()`
//! builder) and `carmy-mcp` (the MCP front). Both hand the engine a
//! [`ValidatedCall`](call::ValidatedCall) and map its [`Answer`](engine::Answer) or
//! [`Refusal`](engine::Refusal) to their own shapes.
//!
//! Modules:
//! - [`arguments`]: the arguments kept with each execution and their redaction;
//! - [`call`]: a call as every front hands it to the engine ([`call::ValidatedCall::parse`]);
//! - [`engine`]: reserve → run detached → record, answering in the domain's terms
//!   ([`engine::Answer`], [`engine::Refusal`]); no transport type appears there;
//! - [`store`] (the store trait, its types and lifecycle), [`memory`] (the bounded in-memory
//!   store), [`cache`] (finished records served from memory), [`outcome`] (recorded outcomes);
//! - [`fingerprint`] and [`strict_json`] (docs/semantics.md §2), [`identity`] (identifier rules),
//!   [`tool`], [`key_argument`] (the request id a model holds, docs/semantics.md §11) and
//!   [`random_id`] (what counts as a model's random id);
//! - [`held`]: executions held by a client (docs/semantics.md §16);
//! - [`http`]: the request limits both fronts served over HTTP share;
//! - [`retention`] (when finished records expire, and the pruner);
//! - [`reconcile`] (probes that ask a tool's upstream whether an interrupted execution's effect
//!   happened, docs/semantics.md §12.10);
//! - [`auth`] (API keys, operator keys, the authenticated [`auth::Caller`]: the one check of
//!   credentials of every front), [`metrics`], [`trace`] (W3C `traceparent`), [`fault`]
//!   (fault-injection points).
//!
//! Feature `openapi` derives the OpenAPI schemas (utoipa) of the types the HTTP API's document
//! shows; `carmy-http` turns it on. Feature `conformance` is the store conformance suite.

pub mod arguments;
pub mod auth;
pub mod cache;
pub mod call;
mod canonical;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod decision;
pub mod engine;
pub mod fault;
pub mod fingerprint;
pub mod held;
pub mod http;
pub mod identity;
pub mod key_argument;
pub mod memory;
pub mod metrics;
pub mod outcome;
pub mod random_id;
pub mod reconcile;
mod registry;
pub mod retention;
pub mod storable;
pub mod store;
pub mod strict_json;
pub mod tool;
pub mod trace;
pub mod wait;

pub use outcome::{
    Effect, ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
pub use tool::{OnInterrupted, Tool, ToolAnnotations, ToolError, ToolErrorKind};
