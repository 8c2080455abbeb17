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

/// `sql` without the in-flight rule's text: what remains must not read the lease itself.
fn without_the_rule(sql: &str) -> String {
    sql.replace(owner_live!("r"), "")
}

#[test]
fn every_record_read_uses_the_in_flight_rule() {
    for sql in [
        RESERVE_SQL,
        RESERVE_BATCH_SQL,
        HOT_BATCH_SQL,
        LOOKUP_SQL,
        FIND_EXECUTION_SQL,
        LIST_EXECUTIONS_SQL,
        LIST_EXECUTIONS_NEWEST_SQL,
    ] {
        assert!(sql.contains(in_flight_state!("r")), "{sql}");
        assert!(!without_the_rule(sql).contains("lease_expires_at"), "{sql}");
    }
}

#[test]
fn operator_reads_use_the_in_flight_rule_and_show_the_lease_only_as_a_fact() {
    for sql in [
        OPERATOR_LIST_SQL,
        OPERATOR_LIST_IN_FLIGHT_SQL,
        OPERATOR_LIST_FINISHED_SQL,
        OPERATOR_SHOW_SQL,
    ] {
        assert!(sql.contains(in_flight_state!("r")), "{sql}");
        // The lease is read for the operator to see, never compared outside the rule.
        let rest = without_the_rule(sql);
        assert!(!rest.contains("lease_expires_at >"), "{sql}");
        assert!(!rest.contains("lease_expires_at <"), "{sql}");
    }
}

#[test]
fn the_statement_list_names_each_statement_once() {
    let mut names: Vec<&str> = STATEMENTS.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), STATEMENTS.len());
    assert!(STATEMENTS.iter().any(|(_, sql)| *sql == TAKE_OVER_SQL));
    assert!(STATEMENTS
        .iter()
        .any(|(_, sql)| *sql == crate::reconcile::CLAIM_SQL));
}
