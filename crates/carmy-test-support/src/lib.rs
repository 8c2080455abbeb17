//! # carmy-test-support
//!
//! The one test harness of the workspace (a dev-dependency, never published):
//!
//! | module | what |
//! | --- | --- |
//! | [`db`] | the server of `DATABASE_URL`, [`with_database`], [`TestDb`] (a database of its own per test, dropped on `Drop`) |
//! | [`poll`] | [`eventually`] / [`eventually_eq`]: polls with a deadline that fail with what they last saw |
//! | [`in_process`] | the real gateway router, built by `carmy_gateway::build` from gateway flags |
//! | [`replica`] | real `carmy-gateway` processes (start, SIGKILL, SIGTERM, restart) |
//! | [`proxy`] | [`CutProxy`]: a TCP proxy to PostgreSQL that a test cuts and restores (a partition) |
//! | [`http`] | HTTP helpers against a [`Replica`] |
//! | [`cluster`] | throwaway PostgreSQL clusters from the installed binaries, optionally with TLS |
//! | [`tls`] | a CA and a server certificate made at test time |

pub mod cluster;
pub mod db;
pub mod http;
pub mod in_process;
pub mod poll;
pub mod proxy;
pub mod replica;
pub mod tls;

pub use cluster::Cluster;
pub use db::{server_url, with_database, TestDb};
pub use http::{
    call, client, metric, post, post_text, request, spawn_post, spawn_post_unanswered, tool_runs,
};
pub use in_process::InProcess;
pub use poll::{eventually, eventually_eq};
pub use proxy::CutProxy;
pub use replica::Replica;
