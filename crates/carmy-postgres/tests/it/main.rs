//! Tests of the migrations and of `PostgresStore` against a real PostgreSQL, in one binary, by
//! concern. Checks every store must pass live in the conformance suite (`tests/conformance.rs`,
//! `carmy::conformance`); these are PostgreSQL's own: rows, migrations, leases, TLS, Citus
//! distribution.
//!
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) names a server and a
//! role that may create databases. Every test creates its own database `carmy_test_<uuid>` and
//! drops it when done (best effort, also when the test panics).

#[path = "../common/mod.rs"]
mod common;

mod cache;
mod catalog;
mod distribute;
mod lease;
mod migrations;
mod outcomes;
mod ready;
mod reconcile;
mod reserve;
mod takeover;
mod tls;
