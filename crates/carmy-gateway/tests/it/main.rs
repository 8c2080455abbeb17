//! The gateway's integration tests, in one test binary (one link): in-process through the real
//! router (`carmy_gateway::build`), and against real `carmy-gateway` processes on PostgreSQL.
//! The harness is `carmy-test-support`. The soak (`tests/soak.rs`) is a binary of its own.

mod config;
#[cfg(feature = "fault-injection")]
mod crash_points;
mod example_orders;
mod hostile_input;
mod lease_starvation;
mod memory_cases;
mod postgres_outages;
mod postgres_replicas;
mod recovery_http;
mod recovery_replicas;
mod round_trips;
mod security;
mod shutdown_and_cancel;
