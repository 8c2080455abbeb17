//! Distributing the schema (`carmy_postgres::distribute`, docs/scale.md): refused without the
//! `citus` extension, and, on a Citus run (`CARMY_TEST_CITUS_WORKERS`, see carmy-test-support),
//! refused before the migrations, then the layout of `CITUS_PLACEMENTS`, then a no-op.

use carmy_postgres::{
    check_distribution, distribute, latest_migration_version, migrate, DistributeError,
    Distribution, Placement, CITUS_PLACEMENTS,
};
use carmy_test_support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_citus_distributing_is_refused_and_changes_nothing() {
    let db = TestDb::create_plain().await;
    migrate(&db.url).await.unwrap();
    let error = distribute(&db.url, Distribution::Citus).await.unwrap_err();
    assert!(
        matches!(&error, DistributeError::NoCitus { database } if *database == db.name),
        "{error:?}"
    );
    assert!(
        error.to_string().ends_with(
            "install Citus on every node and run CREATE EXTENSION citus in this database on \
             each of them, then add the workers (see docs/scale.md)"
        ),
        "{error}"
    );
    let checked = check_distribution(&db.url, Distribution::Citus).await;
    assert!(
        matches!(checked, Err(DistributeError::NoCitus { .. })),
        "{checked:?}"
    );
    // The migration lock was released: migrating again does not wait.
    tokio::time::timeout(std::time::Duration::from_secs(10), migrate(&db.url))
        .await
        .expect("the migration lock is free")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_citus_the_schema_is_distributed_once() {
    let db = TestDb::create().await;
    if !db.is_citus() {
        eprintln!("skipped: CARMY_TEST_CITUS_WORKERS is unset (not a Citus run)");
        return;
    }
    let version = check_distribution(&db.url, Distribution::Citus)
        .await
        .unwrap();
    assert!(!version.is_empty());

    // Before the migrations: refused, nothing placed.
    let error = distribute(&db.url, Distribution::Citus).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "cannot distribute: schema carmy is at version none and this build distributes \
             version {}; run carmy-gateway migrate first",
            latest_migration_version()
        )
    );

    migrate(&db.url).await.unwrap();
    let first = distribute(&db.url, Distribution::Citus).await.unwrap();
    assert_eq!(first.citus_version, version);
    let placed: Vec<_> = first
        .tables
        .iter()
        .map(|table| (table.table, table.placement, table.already))
        .collect();
    let wanted: Vec<_> = CITUS_PLACEMENTS
        .iter()
        .map(|&(table, placement)| (table, placement, false))
        .collect();
    assert_eq!(placed, wanted);

    let mut connection = db.connect().await;
    let layout: Vec<(String, String, String, bool)> = sqlx::query_as(
        "SELECT t.table_name::text, t.citus_table_type::text, t.distribution_column::text, \
                t.colocation_id = (SELECT colocation_id FROM citus_tables \
                                   WHERE table_name = 'carmy.reservations'::regclass) \
         FROM citus_tables t ORDER BY 1",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let expected = |table: &str| match CITUS_PLACEMENTS
        .iter()
        .find(|(name, _)| *name == table)
        .map(|(_, placement)| placement)
    {
        Some(Placement::Reference) => ("reference", "<none>", false),
        Some(Placement::ByPrincipal) => ("distributed", "principal", true),
        None => panic!("{table} is managed by Citus but not in CITUS_PLACEMENTS"),
    };
    assert_eq!(layout.len(), CITUS_PLACEMENTS.len(), "{layout:?}");
    for (table, kind, column, colocated) in &layout {
        let (want_kind, want_column, want_colocated) = expected(table);
        assert_eq!(
            (kind.as_str(), column.as_str()),
            (want_kind, want_column),
            "{table}"
        );
        if want_colocated {
            assert!(colocated, "{table} is colocated with carmy.reservations");
        }
    }

    // Again: every table left alone.
    let again = distribute(&db.url, Distribution::Citus).await.unwrap();
    assert!(again.tables.iter().all(|table| table.already), "{again:?}");
}
