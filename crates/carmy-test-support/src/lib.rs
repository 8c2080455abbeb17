//! # carmy-test-support
//!
//! The one test harness of the workspace (a dev-dependency, never published):
//!
//! | module | what |
//! | --- | --- |
//! | [`db`] | the server of `DATABASE_URL`, [`with_database`], [`TestDb`] (a database of its own per test, dropped on `Drop`; on a Citus cluster with `CARMY_TEST_CITUS_WORKERS`, distributed) |
//! | [`poll`] | [`eventually`] / [`eventually_eq`]: polls with a deadline that fail with what they last saw |
//! | [`in_process`] | the real gateway router, built by `carmy_gateway::build` from gateway flags |
//! | [`replica`] | real `carmy-gateway` processes (start, SIGKILL, SIGTERM, restart) |
//! | [`proxy`] | [`CutProxy`]: a TCP proxy to PostgreSQL that a test cuts and restores (a partition) |
//! | [`http`] | HTTP helpers against a [`Replica`] |
//! | [`pgbouncer`] | [`Bouncer`]: a real PgBouncer in session or transaction mode |
//! | [`cluster`] | throwaway PostgreSQL clusters from the installed binaries, optionally with TLS |
//! | [`tls`] | a CA and a server certificate made at test time |
//!
//! Environment: `DATABASE_URL` (the server, default [`db::DEFAULT_DATABASE_URL`]);
//! `CARMY_TEST_CITUS_WORKERS` ([`db::CITUS_WORKERS_ENV`]): the `host:port` of Citus workers,
//! comma separated, with `DATABASE_URL` naming their coordinator — every [`TestDb`] then is a
//! Citus database with those workers and [`TestDb::migrated`] distributes the schema
//! (`carmy_postgres::distribute`), so the existing tests run on Citus unchanged;
//! [`TestDb::create_plain`] opts out. Unset, nothing changes.
//!
//! Everything but [`poll`] needs the default feature `full`; the core crate's tests use the polls
//! alone (`default-features = false`) and so build no gateway, sqlx or rmcp.

#[cfg(feature = "full")]
pub mod cluster;
#[cfg(feature = "full")]
pub mod db;
#[cfg(feature = "full")]
pub mod http;
#[cfg(feature = "full")]
pub mod in_process;
#[cfg(feature = "full")]
pub mod pgbouncer;
pub mod poll;
#[cfg(feature = "full")]
pub mod proxy;
#[cfg(feature = "full")]
pub mod replica;
#[cfg(feature = "full")]
pub mod tls;

#[cfg(feature = "full")]
pub use cluster::Cluster;
#[cfg(feature = "full")]
pub use db::{
    add_citus, citus_workers, drop_database, server_url, with_address, with_database, TestDb,
};
#[cfg(feature = "full")]
pub use http::{
    call, client, metric, post, post_text, request, spawn_post, spawn_post_unanswered, tool_runs,
};
#[cfg(feature = "full")]
pub use in_process::InProcess;
#[cfg(feature = "full")]
pub use pgbouncer::Bouncer;
pub use poll::{eventually, eventually_eq};
#[cfg(feature = "full")]
pub use proxy::CutProxy;
#[cfg(feature = "full")]
pub use replica::Replica;
