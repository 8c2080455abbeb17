//! Migrating a database with real `carmy-gateway` processes (docs/semantics.md §14): four
//! replicas starting at once on an empty database each find it migrated once; the `migrate`
//! command applies every migration; `migrate --distribute citus` without Citus is refused before
//! anything changes.

use carmy_test_support::{client, Replica, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_replicas_start_at_once_on_an_empty_database() {
    let db = TestDb::create().await;
    let url = db.url.clone();
    let starts: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                Replica::start(&format!("four-{i}"), &[("DATABASE_URL", &url)])
            })
        })
        .collect();
    let replicas: Vec<Replica> = starts
        .into_iter()
        .map(|start| start.join().unwrap())
        .collect();
    let http = client();
    for replica in &replicas {
        let response = http.get(replica.url("/readyz")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
    }
    // Versions need not be contiguous (V2 is retired): each applied once, up to the latest.
    let (applied, distinct, newest): (i64, i64, Option<i32>) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT version), max(version) FROM carmy.refinery_schema_history",
    )
    .fetch_one(&mut db.connect().await)
    .await
    .unwrap();
    assert_eq!((applied, distinct), (14, 14));
    assert_eq!(newest, Some(carmy_postgres::latest_migration_version()));
    // The example tools' table, created once by whichever replica came first.
    let orders_table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('carmy.example_orders')::text")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert_eq!(orders_table.as_deref(), Some("carmy.example_orders"));
    drop(replicas);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_command_and_readiness() {
    let db = TestDb::create().await;
    let status = std::process::Command::new(carmy_test_support::replica::gateway_binary())
        .arg("migrate")
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .status()
        .unwrap();
    assert!(status.success());
    let applied: i32 = sqlx::query_scalar("SELECT max(version) FROM carmy.refinery_schema_history")
        .fetch_one(&mut db.connect().await)
        .await
        .unwrap();
    assert_eq!(applied, carmy_postgres::latest_migration_version());
}

/// `migrate --distribute citus` on a database without the citus extension (plain PostgreSQL):
/// exit code 1, one line saying what to do, and the database untouched — the check comes
/// before the migrations (docs/scale.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_distribute_without_citus_is_refused_before_anything_changes() {
    let db = TestDb::create_plain().await;
    let output = std::process::Command::new(carmy_test_support::replica::gateway_binary())
        .args(["migrate", "--distribute", "citus"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    // A build with the `fault-injection` feature (the one scripts/test runs) warns about itself
    // first; that warning is the only other line allowed.
    let stderr = String::from_utf8(output.stderr).unwrap();
    let refusal: String = stderr
        .split_inclusive('\n')
        .filter(|line| !line.contains("WARN carmy_gateway: built with fault injection"))
        .collect();
    assert_eq!(
        refusal,
        format!(
            "carmy-gateway: cannot distribute on Citus: the citus extension is not installed in \
             database \"{}\"; install Citus on every node and run CREATE EXTENSION citus in this \
             database on each of them, then add the workers (see docs/scale.md)\n",
            db.name
        )
    );
    assert!(output.stdout.is_empty());
    // Nothing was migrated: no schema carmy, no table of its own.
    let (schema, relations): (Option<String>, i64) = sqlx::query_as(
        "SELECT to_regnamespace('carmy')::text, \
                (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))",
    )
    .fetch_one(&mut db.connect().await)
    .await
    .unwrap();
    assert_eq!((schema, relations), (None, 0));
}
