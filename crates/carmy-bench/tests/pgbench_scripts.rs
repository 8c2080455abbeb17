//! The pgbench ceiling runs exactly the store's statements: each statement of
//! `bench/pgbench/*.sql` is the matching statement of `carmy_postgres::sql` with its binds
//! (`$n`) replaced by the script's values, up to whitespace. So the in-flight rule, like every
//! other part of the SQL, is the store's own (the semi-join with `carmy.instances`), never a
//! copy.

use carmy_postgres::sql::{COMPLETE_SQL, LOOKUP_SQL, RESERVE_SQL};

/// The script `bench/pgbench/<name>` without its comments and pgbench meta-commands, split into
/// its SQL statements, each with its whitespace normalised.
fn statements(name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/pgbench")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let sql: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("--") && !line.starts_with('\\'))
        .collect();
    sql.join("\n")
        .split(';')
        .map(normalise)
        .filter(|statement| !statement.is_empty())
        .collect()
}

/// `sql` with every run of whitespace made one space, none just inside parentheses.
fn normalise(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
}

/// `sql` with `$1`, `$2`, … replaced by `values[0]`, `values[1]`, …, normalised.
fn bind(sql: &str, values: &[&str]) -> String {
    let mut bound = sql.to_owned();
    // From the last: `$1` would otherwise take the start of `$10`.
    for (at, value) in values.iter().enumerate().rev() {
        bound = bound.replace(&format!("${}", at + 1), value);
    }
    assert!(!bound.contains('$'), "a bind is left: {bound}");
    normalise(&bound)
}

const REQUEST_ID: &str = "'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text";
const EXECUTION_ID: &str =
    "'exec_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text";
const DIGEST: &str = "'9b2c6f0de3f1a4c85e7d20b6a1c94f3e8d5b7a60c2e1f9d43b8a7c6e5d4f3a2b1'";

/// Stands for the script's recorded outcome literal, which has no counterpart in the store.
const HOLE: &str = "\u{0}";

#[test]
fn new_identity_runs_the_stores_reserve_and_complete() {
    let script = statements("new_identity.sql");
    assert_eq!(script.len(), 2, "{script:#?}");
    let reserve = bind(
        RESERVE_SQL,
        &[
            "'pgbench'",
            "'default'",
            REQUEST_ID,
            "'echo'",
            DIGEST,
            "'v1'",
            EXECUTION_ID,
            "'inst_pgbench'",
            "'0123456789abcdef.0123456789abcdef.0123456789abcdef'",
            "604800000",
            r#"'{"message": "hello"}'"#,
        ],
    );
    assert_eq!(script[0], reserve);

    // The recorded outcome ($8) is a long literal of the script's own: compare around it.
    let complete = bind(
        COMPLETE_SQL,
        &[
            "'pgbench'",
            "'default'",
            REQUEST_ID,
            EXECUTION_ID,
            DIGEST,
            "'v1'",
            "'completed'",
            HOLE,
            "NULL",
            "1",
        ],
    );
    let (before, after) = complete.split_once(HOLE).unwrap();
    assert!(script[1].starts_with(before), "{}\n{before}", script[1]);
    assert!(script[1].ends_with(after), "{}\n{after}", script[1]);
    let outcome = &script[1][before.len()..script[1].len() - after.len()];
    assert!(
        outcome.starts_with("'{\"execution_id\":\"exec_pgb_' ||") && outcome.ends_with("}'"),
        "{outcome}"
    );
}

#[test]
fn read_one_runs_the_stores_lookup() {
    let script = statements("read_one.sql");
    assert_eq!(
        script,
        vec![bind(
            LOOKUP_SQL,
            &["'anonymous'", "'default'", "'replay-' || :i::text"]
        )]
    );
    assert!(script[0].contains("FROM carmy.instances lease"));
}
