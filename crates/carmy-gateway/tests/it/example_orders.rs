//! The example tools' table `carmy.example_orders` is theirs, not the product's: migrations
//! alone never create it, the gateway's start creates it where it is missing
//! (`PostgresOrderBook::prepare`), and a database migrated by an earlier build (which had it in
//! migration `V2__example_orders`) keeps working, orders included.

use carmy::store::IdempotencyStore;
use carmy_gateway::orders::{Order, OrderBook, PostgresOrderBook};
use carmy_postgres::{migrate, PostgresStore, PostgresStoreOptions};
use carmy_test_support::TestDb;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The migrations of the last build that shipped `V2__example_orders`, in order, as that build
/// embedded them (`V1` and `V3` are unchanged since).
fn earlier_migrations() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "V1__reservations",
            include_str!("../../../../migrations/V1__reservations.sql"),
        ),
        (
            "V2__example_orders",
            include_str!("../fixtures/V2__example_orders.sql"),
        ),
        (
            "V3__document_history",
            include_str!("../../../../migrations/V3__document_history.sql"),
        ),
    ]
}

/// Brings an empty database to the state the earlier build left: refinery's history table,
/// `V1`–`V3` applied in order and recorded with refinery's checksums.
async fn migrate_as_the_earlier_build(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE SCHEMA carmy; \
         CREATE TABLE carmy.refinery_schema_history (version int4 PRIMARY KEY, \
         name varchar(255), applied_on varchar(255), checksum varchar(255))",
    )
    .execute(pool)
    .await
    .unwrap();
    for (name, sql) in earlier_migrations() {
        let migration = refinery::Migration::unapplied(name, sql).unwrap();
        sqlx::raw_sql(sql).execute(pool).await.unwrap();
        sqlx::query(
            "INSERT INTO carmy.refinery_schema_history (version, name, applied_on, checksum) \
             VALUES ($1, $2, '2025-06-01T12:00:00Z', $3)",
        )
        .bind(migration.version())
        .bind(migration.name())
        .bind(migration.checksum().to_string())
        .execute(pool)
        .await
        .unwrap();
    }
}

async fn pool(db: &TestDb) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap()
}

async fn versions(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar("SELECT version FROM carmy.refinery_schema_history ORDER BY version")
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn table_comment(pool: &PgPool) -> Option<String> {
    sqlx::query_scalar("SELECT obj_description(to_regclass('carmy.example_orders'), 'pg_class')")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn order(order_id: i64, sku: &str, quantity: i64) -> Order {
    Order {
        order_id,
        sku: sku.to_owned(),
        quantity,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_of_the_earlier_build_keeps_its_orders() {
    let db = TestDb::create().await;
    let pool = pool(&db).await;
    migrate_as_the_earlier_build(&pool).await;
    sqlx::query(
        "INSERT INTO carmy.example_orders (principal, sku, quantity) VALUES ('alice', 'A-1', 2)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let earlier_comment = table_comment(&pool).await;

    // This build: V4 to V15 are applied, the retired V2 stays in the history.
    migrate(&db.url).await.unwrap();
    assert_eq!(
        versions(&pool).await,
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    migrate(&db.url).await.unwrap();
    assert_eq!(
        versions(&pool).await,
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );

    // The example tools find the table as it was and go on numbering.
    PostgresOrderBook::prepare(&pool).await.unwrap();
    assert_eq!(table_comment(&pool).await, earlier_comment);
    let book = PostgresOrderBook::new(pool.clone());
    assert_eq!(book.create("alice", "A-1", 3).await.unwrap(), 2);
    assert_eq!(
        book.find("alice", Some("A-1")).await.unwrap(),
        vec![order(1, "A-1", 2), order(2, "A-1", 3)]
    );
    assert_eq!(book.get("bob", 1).await.unwrap(), None);

    // The store is ready on it, and the operator view joins the leases (migration V14).
    let store = PostgresStore::connect(PostgresStoreOptions::new(&db.url))
        .await
        .unwrap();
    store.check_ready().await.unwrap();
    let view_joins_leases: bool = sqlx::query_scalar(
        "SELECT pg_get_viewdef('carmy.uncertain_executions'::regclass) \
         LIKE '%LEFT JOIN carmy.instances i%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(view_joins_leases);
    store.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_database_gets_the_table_from_the_example_tools() {
    let db = TestDb::create().await;
    migrate(&db.url).await.unwrap();
    let pool = pool(&db).await;
    assert_eq!(
        versions(&pool).await,
        vec![1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    let missing: bool = sqlx::query_scalar("SELECT to_regclass('carmy.example_orders') IS NULL")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(missing, "migrations alone created carmy.example_orders");

    // Replicas starting together: one creates it, the others find it.
    let starts: Vec<_> = (0..3)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { PostgresOrderBook::prepare(&pool).await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    let undocumented: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_attribute a \
         WHERE a.attrelid = 'carmy.example_orders'::regclass AND a.attnum > 0 \
           AND NOT a.attisdropped AND col_description(a.attrelid, a.attnum) IS NULL",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(undocumented, Vec::<String>::new());
    assert!(table_comment(&pool)
        .await
        .unwrap()
        .contains("not by the product's migrations"));

    let book = PostgresOrderBook::new(pool.clone());
    assert_eq!(book.create("alice", "A-1", 2).await.unwrap(), 1);
    assert_eq!(
        book.get("alice", 1).await.unwrap(),
        Some(order(1, "A-1", 2))
    );
    // The migrations still see a history they know.
    migrate(&db.url).await.unwrap();
    assert_eq!(
        versions(&pool).await,
        vec![1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    pool.close().await;
}

/// A gateway whose tools file says `example_tools = false` serves only its own tools and leaves
/// no demo table behind in a fresh database; the default (no tools file) still creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_without_the_example_tools_creates_no_example_orders() {
    let db = TestDb::create().await;
    let file = crate::tools_file::write_tools_file(
        "example_tools = false\n\n[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n",
    );
    let file = file.to_str().unwrap();
    let gateway =
        carmy_test_support::InProcess::start(&["--database-url", &db.url, "--tools-file", file])
            .await;
    let names: Vec<String> = gateway
        .app()
        .engine()
        .tools()
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect();
    assert_eq!(names, vec!["pay".to_owned()]);
    let pool = pool(&db).await;
    let table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('carmy.example_orders')::text")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        table, None,
        "example_tools = false created carmy.example_orders"
    );
    gateway.app().engine().shutdown_store().await.unwrap();

    let with_examples = carmy_test_support::InProcess::start(&["--database-url", &db.url]).await;
    let table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('carmy.example_orders')::text")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(table.as_deref(), Some("carmy.example_orders"));
    with_examples.app().engine().shutdown_store().await.unwrap();
    pool.close().await;
}
