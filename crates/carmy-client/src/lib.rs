//! # carmy-client
//!
//! A typed async client for Carmy's HTTP API that makes the
//! right retry the easy one.
//!
//! Carmy runs an AI agent's tool calls so that a retried call never runs its tool twice: every
//! call carries a `request_id`, and a second attempt with the same identity gets the recorded
//! outcome (`replayed: true`) instead of a second run. That only works if the client keeps the
//! request_id across its retries, waits out a duplicate that is still running, and never
//! blindly retries a conflict or an interrupted execution. This crate does exactly that:
//!
//! - [`Call::new`] gives every call a fresh request_id (UUID v4); [`Client::execute`] sends the
//!   same body, hence the same request_id, on each of its attempts;
//! - transport failures (connect, timeout, reset, a connection closed before the answer), 503
//!   and a running duplicate (409 `EXECUTION_UNCERTAIN`, state `running`) are retried with
//!   exponential backoff and full jitter, at least as long as `Retry-After` asks, within a
//!   [`RetryPolicy`]'s attempts and deadline; `Prefer: wait=N` lets a gateway that supports it
//!   hold the answer until a running duplicate is recorded;
//! - the answer is a typed [`Execution`] (completed, failed, timed out or cancelled; replayed
//!   or not) or a typed [`Error`]: [`Error::Conflict`] (with what differs) and
//!   [`Error::Interrupted`] come back at once and are never retried.
//!
//! ```no_run
//! use carmy_client::{Call, Client, Error, Status};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::builder("http://127.0.0.1:8080")
//!     .api_key("secret-key")
//!     .build()?;
//! let call = Call::new("create_order", json!({"sku": "A-1", "quantity": 2}));
//! match client.execute(&call).await {
//!     Ok(execution) if execution.status == Status::Completed => {
//!         println!("order {} (replayed: {})", execution.data["order_id"], execution.replayed);
//!     }
//!     Ok(execution) => println!("recorded as {:?}: {:?}", execution.status, execution.error),
//!     Err(Error::Interrupted { execution_id }) => {
//!         println!("{execution_id} was interrupted: check whether the order exists");
//!     }
//!     Err(Error::Unavailable { .. } | Error::StillRunning { .. }) => {
//!         // Unknown yet: execute the same `call` (same request_id) later.
//!     }
//!     Err(error) => return Err(error),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The retry rules are pure functions in [`retry`] ([`retry::classify`], [`retry::backoff`]),
//! documented and tested on their own. The wire types ([`Execution`], [`Problem`], [`Record`],
//! [`Tool`]) are defined here; this crate does not depend on the server.

mod call;
mod client;
mod error;
pub mod retry;
mod wire;

pub use call::Call;
pub use client::{Client, ClientBuilder};
pub use error::{Error, Failure, TransportError, TransportKind};
pub use retry::RetryPolicy;
pub use wire::{Execution, InFlight, InFlightState, Problem, Record, Status, Tool, ToolError};
