//! Citus-readiness, checked on plain PostgreSQL (docs/semantics.md §15, docs/scale.md): the
//! catalog and the store's statements keep what Citus needs to distribute the schema by
//! principal, so that it cannot rot between the runs on a real Citus cluster.
//!
//! - every unique key (constraint or unique index) of a per-identity table includes principal;
//! - no trigger sits on a table to be distributed or copied to every node;
//! - no `UPDATE` or `DELETE`, in the store's statements or in the schema's functions, calls a
//!   stable or volatile function with arguments (Citus refuses such a function over a column:
//!   "STABLE functions used in UPDATE queries cannot be called with column references");
//! - no function that the store's statements call reads a table (Citus cannot run a query from
//!   inside a shard's query).

use carmy_postgres::sql::STATEMENTS;
use carmy_postgres::{DISTRIBUTED_TABLES, DISTRIBUTION_COLUMN, REFERENCE_TABLES};
use carmy_test_support::TestDb;
use sqlx::{PgPool, Row};
use std::collections::{BTreeMap, BTreeSet};

/// Per unique key of `table` (constraints and unique indexes): its name and its columns.
async fn unique_keys(pool: &PgPool, table: &str) -> Vec<(String, Vec<String>)> {
    sqlx::query(
        "SELECT c.relname::text AS name, \
                array_agg(a.attname::text ORDER BY k.ord) AS columns \
         FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         WHERE i.indrelid = $1::regclass AND i.indisunique \
         GROUP BY c.relname ORDER BY 1",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
    .iter()
    .map(|row| {
        let columns: Vec<Option<String>> = row.get("columns");
        (
            row.get("name"),
            // An expression in a key has no column name: it counts as not the principal.
            columns.into_iter().map(Option::unwrap_or_default).collect(),
        )
    })
    .collect()
}

#[tokio::test]
async fn every_unique_key_of_a_per_identity_table_includes_the_principal() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let mut seen = BTreeMap::new();
    for table in DISTRIBUTED_TABLES {
        let keys = unique_keys(&pool, table).await;
        assert!(!keys.is_empty(), "{table} has no unique key");
        for (name, columns) in &keys {
            assert!(
                columns.iter().any(|column| column == DISTRIBUTION_COLUMN),
                "unique key {name} of {table} ({columns:?}) lacks {DISTRIBUTION_COLUMN}: Citus \
                 cannot distribute {table} by it"
            );
        }
        seen.insert(*table, keys.len());
    }
    // The keys as this migration history leaves them: a new one is checked above too.
    assert_eq!(
        seen,
        BTreeMap::from([
            ("carmy.audit_log", 1),
            ("carmy.released_executions", 1),
            ("carmy.reservations", 2),
        ])
    );
    let principal_not_null: Vec<bool> = sqlx::query_scalar(
        "SELECT a.attnotnull FROM pg_attribute a \
         WHERE a.attrelid = ANY($1::text[]::regclass[]) AND a.attname = $2 ORDER BY a.attrelid",
    )
    .bind(DISTRIBUTED_TABLES)
    .bind(DISTRIBUTION_COLUMN)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(principal_not_null, vec![true; DISTRIBUTED_TABLES.len()]);
    pool.close().await;
}

#[tokio::test]
async fn no_trigger_sits_on_a_table_to_be_distributed() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let tables: Vec<&str> = DISTRIBUTED_TABLES
        .iter()
        .chain(REFERENCE_TABLES)
        .copied()
        .collect();
    let triggers: Vec<(String, String)> = sqlx::query_as(
        "SELECT t.tgrelid::regclass::text, t.tgname::text FROM pg_trigger t \
         WHERE NOT t.tgisinternal AND t.tgrelid = ANY($1::text[]::regclass[]) ORDER BY 1, 2",
    )
    .bind(&tables)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(triggers, Vec::<(String, String)>::new());
    pool.close().await;
}

/// `sql` without its `--` comments.
fn without_comments(sql: &str) -> String {
    sql.lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `UPDATE` and `DELETE` clauses of `sql`: from the keyword to the end of the enclosing
/// parenthesis (a CTE), the statement's `;`, or the end of the text. Comments are dropped
/// first; quoted text is skipped.
fn modifying_clauses(sql: &str) -> Vec<String> {
    let sql = &without_comments(sql);
    let upper = sql.to_uppercase();
    let bytes = sql.as_bytes();
    let mut clauses = Vec::new();
    for keyword in ["UPDATE ", "DELETE FROM "] {
        let mut from = 0;
        while let Some(found) = upper[from..].find(keyword) {
            let start = from + found;
            from = start + keyword.len();
            // ON CONFLICT DO UPDATE belongs to an INSERT, FOR UPDATE to a SELECT, and a
            // keyword inside a word is none.
            let before = upper[..start].trim_end();
            let inside_word = upper[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if before.ends_with(" DO") || before.ends_with(" FOR") || inside_word {
                continue;
            }
            let (mut depth, mut quoted, mut end) = (0i32, false, bytes.len());
            for (at, byte) in bytes.iter().enumerate().skip(start) {
                match byte {
                    b'\'' => quoted = !quoted,
                    b'(' if !quoted => depth += 1,
                    b')' if !quoted => {
                        depth -= 1;
                        if depth < 0 {
                            end = at;
                            break;
                        }
                    }
                    b';' if !quoted && depth == 0 => {
                        end = at;
                        break;
                    }
                    _ => {}
                }
            }
            clauses.push(sql[start..end].to_owned());
        }
    }
    clauses
}

/// The calls `name(` with arguments in `clause`, as lowercase names without their schema.
fn calls_with_arguments(clause: &str) -> BTreeSet<String> {
    let mut calls = BTreeSet::new();
    let chars: Vec<char> = clause.chars().collect();
    let mut quoted = false;
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c == '\'' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphabetic() || c == '_') {
            let start = at;
            while at < chars.len()
                && (chars[at].is_ascii_alphanumeric() || chars[at] == '_' || chars[at] == '.')
            {
                at += 1;
            }
            let name: String = chars[start..at].iter().collect();
            let mut next = at;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            let opens = next < chars.len() && chars[next] == '(';
            let empty = opens && chars[next + 1..].iter().find(|c| **c != ' ') == Some(&')');
            if opens && !empty {
                let bare = name.rsplit('.').next().unwrap_or(&name).to_lowercase();
                calls.insert(bare);
            }
            continue;
        }
        at += 1;
    }
    calls
}

#[test]
fn the_clause_reader_finds_calls_in_updates_only() {
    let sql = "WITH a AS (INSERT INTO t (x) VALUES (to_char(now(), 'x')) ON CONFLICT DO UPDATE \
               SET x = 1 RETURNING 1), b AS (UPDATE t SET y = json_build_object('k', t.y) \
               WHERE t.z = now()) DELETE FROM u WHERE carmy.f(u.a, 'it''s (') AND g ();\n\
               -- an UPDATE in a comment: to_char(x)\n\
               SELECT to_char(x) FROM t FOR UPDATE;";
    let clauses = modifying_clauses(sql);
    assert_eq!(clauses.len(), 2, "{clauses:#?}");
    let calls: BTreeSet<String> = clauses
        .iter()
        .flat_map(|c| calls_with_arguments(c))
        .collect();
    assert_eq!(
        calls,
        BTreeSet::from(["f".to_owned(), "json_build_object".to_owned()])
    );
}

#[tokio::test]
async fn no_update_or_delete_calls_a_stable_function_with_arguments() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    // Functions of these names that are not immutable, in pg_catalog and in the schema.
    let mutable: BTreeSet<String> = sqlx::query_scalar(
        "SELECT DISTINCT p.proname::text FROM pg_proc p \
         WHERE p.pronamespace IN ('pg_catalog'::regnamespace, 'carmy'::regnamespace) \
           AND p.provolatile <> 'i'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let bodies: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.proname::text, p.prosrc FROM pg_proc p \
         WHERE p.pronamespace = 'carmy'::regnamespace ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut sources: Vec<(String, String)> = STATEMENTS
        .iter()
        .map(|(name, sql)| ((*name).to_owned(), (*sql).to_owned()))
        .collect();
    sources.extend(
        bodies
            .into_iter()
            .map(|(name, body)| (format!("carmy.{name}()"), body)),
    );
    let mut offences = Vec::new();
    let mut clauses_seen = 0;
    for (name, sql) in &sources {
        for clause in modifying_clauses(sql) {
            clauses_seen += 1;
            for call in calls_with_arguments(&clause) {
                if mutable.contains(&call) {
                    offences.push(format!("{name}: {call}(…) in {clause}"));
                }
            }
        }
    }
    assert!(offences.is_empty(), "{offences:#?}");
    // The reader did find the modifying clauses (a broken reader would find none).
    assert!(
        clauses_seen >= 15,
        "only {clauses_seen} UPDATE/DELETE clauses found"
    );
    pool.close().await;
}

#[tokio::test]
async fn the_store_statements_call_no_function_that_reads_a_table() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    // The schema's SQL-language functions whose body reads a table of the schema.
    let readers: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p \
         WHERE p.pronamespace = 'carmy'::regnamespace \
           AND p.prolang = (SELECT l.oid FROM pg_language l WHERE l.lanname = 'sql') \
           AND p.prosrc ~* 'from\\s+carmy\\.' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (name, sql) in STATEMENTS {
        for reader in &readers {
            assert!(
                !sql.contains(&format!("carmy.{reader}(")),
                "{name} calls carmy.{reader}, which reads a table from inside the row's query"
            );
        }
    }
    pool.close().await;
}
