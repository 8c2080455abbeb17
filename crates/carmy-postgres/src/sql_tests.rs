//! Checks that the SQL text keeps the rules it shares with the migrations.

use super::*;

#[test]
fn the_prune_lock_key_is_the_one_of_the_migration() {
    let migration = include_str!("../../../migrations/V9__retention.sql");
    assert!(migration.contains(&format!("pg_try_advisory_xact_lock({PRUNE_LOCK_KEY})")));
    assert_eq!(&PRUNE_LOCK_KEY.to_be_bytes(), b"carmypru");
}

#[test]
fn ready_query_reads_the_migration_table() {
    assert!(READY_SQL.ends_with(&format!("FROM {}", crate::MIGRATION_TABLE)));
}

#[test]
fn every_record_read_uses_the_in_flight_function() {
    for sql in [
        RESERVE_SQL,
        RESERVE_BATCH_SQL,
        HOT_BATCH_SQL,
        LOOKUP_SQL,
        FIND_EXECUTION_SQL,
        LIST_EXECUTIONS_SQL,
        LIST_EXECUTIONS_NEWEST_SQL,
    ] {
        assert!(
            sql.contains("carmy.in_flight_state(r.owner_instance)"),
            "{sql}"
        );
        assert!(!sql.contains("lease_expires_at"), "{sql}");
    }
}

#[test]
fn operator_reads_use_the_in_flight_function_and_show_the_lease_only_as_a_fact() {
    for sql in [
        OPERATOR_LIST_SQL,
        OPERATOR_LIST_IN_FLIGHT_SQL,
        OPERATOR_LIST_FINISHED_SQL,
        OPERATOR_SHOW_SQL,
    ] {
        assert!(
            sql.contains("carmy.in_flight_state(r.owner_instance)"),
            "{sql}"
        );
        // The lease is read for the operator to see, never compared here.
        assert!(!sql.contains("lease_expires_at >"), "{sql}");
        assert!(!sql.contains("lease_expires_at <"), "{sql}");
    }
}
