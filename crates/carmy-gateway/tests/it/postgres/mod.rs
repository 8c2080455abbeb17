//! Real `carmy-gateway` processes on a real PostgreSQL: replicas, outages, partitions, a
//! failover, PgBouncer in transaction mode, readiness under replication, the lease, the runtime
//! role, round trips, shutdown and cancellation, and migrating.

mod default_lease;
mod failover;
mod lease_starvation;
mod migrations;
mod partition;
mod pgbouncer;
mod postgres_outages;
mod postgres_replicas;
mod readiness_replication;
mod replay_cache_replicas;
pub(crate) mod round_trips;
mod runtime_role;
mod shutdown_and_cancel;
