//! # carmy-http
//!
//! Carmy's HTTP front (docs/semantics.md §7): the HTTP API, its OpenAPI document (§13) and the
//! operator console at `/console`, over the engine of every front (crate `carmy`). The MCP
//! front beside it is the crate `carmy-mcp`; both hand the engine a `ValidatedCall` and map its
//! answer to their own shapes. [`app()`] builds the engine with its store and tools and serves
//! this front (and routes merged in, such as `/mcp`):
//!
//! ```no_run
//! use carmy::tool::FnTool;
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), carmy_http::AppError> {
//! carmy_http::app()
//!     .tool(FnTool::new("echo", json!({"type": "object"}), |_context, arguments| async move {
//!         Ok(arguments)
//!     }))
//!     .run()
//!     .await
//! # }
//! ```
//!
//! Modules, one job each:
//! - `routes`: the router and the handlers of calls, executions, tools and probes;
//! - `recovery` (listing, resolving and releasing executions, docs/semantics.md §12) and
//!   `reconcile_route` (`POST /v1/executions/{id}/reconcile`, §12.10);
//! - `held_routes`: executions held by a client (`/v1/held`, docs/semantics.md §16);
//! - `bodies`: the JSON bodies of the answers;
//! - [`error`]: the one mapping of the engine's answers and refusals to status codes and
//!   problem documents (§5);
//! - `extractors`: the caller of a request, by the one check of credentials of every front
//!   (`carmy::auth::Credentials`);
//! - `openapi`: the document served at `/openapi.json`;
//! - `console`: the operator console (maud pages, server-side sessions, CSRF with stateless
//!   login forms);
//! - [`mod@app`]: the builder, serving and graceful shutdown.

pub mod app;
mod bodies;
mod console;
pub mod error;
mod extractors;
mod held_routes;
mod openapi;
mod reconcile_route;
mod recovery;
mod routes;

pub use app::{app, App, AppBuilder, AppError};
