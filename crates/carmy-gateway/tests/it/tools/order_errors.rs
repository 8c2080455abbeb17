//! What the example order book's failures say about the order (docs/semantics.md §4.1), through
//! a real PostgreSQL: no connection is "not sent" (nothing changed; `create_order` answers 503
//! and records nothing), a connection killed after the INSERT was sent is "unknown" (the order
//! may exist; `create_order` records `failed` with `effect: "unknown"`).

use carmy::tool::{Tool, ToolContext};
use carmy::ExecutionId;
use carmy_gateway::orders::{OrderBook, OrderError, PostgresOrderBook};
use carmy_gateway::tools::example_tools;
use carmy_test_support::{eventually, TestDb};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn book(db: &TestDb) -> (PostgresOrderBook, sqlx::PgPool) {
    let pool = db.pool().await;
    PostgresOrderBook::prepare(&pool).await.unwrap();
    (PostgresOrderBook::new(pool.clone()), pool)
}

#[tokio::test]
async fn a_closed_pool_is_not_sent_and_create_order_says_not_executed() {
    let db = TestDb::migrated().await;
    let (book, pool) = book(&db).await;
    pool.close().await;
    let error = book.create("alice", "A-1", 1).await.unwrap_err();
    assert!(matches!(error, OrderError::NotSent(_)), "{error:?}");

    let tools = example_tools(Arc::new(book));
    let create = tools
        .iter()
        .find(|tool| tool.name() == "create_order")
        .unwrap();
    let error = create
        .call(context(), json!({"sku": "A-1"}))
        .await
        .unwrap_err();
    assert_eq!(error.code, "ORDER_BOOK_UNAVAILABLE");
    assert_eq!(
        error.kind,
        carmy::ToolErrorKind::NotExecuted {
            retry_after: Some(Duration::from_secs(1))
        }
    );
}

#[tokio::test]
async fn a_connection_killed_after_the_insert_was_sent_is_effect_unknown() {
    let db = TestDb::migrated().await;
    let (book, pool) = book(&db).await;
    // The INSERT waits in a trigger, so it is certainly on the server when it is killed.
    sqlx::raw_sql(
        "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$; \
         CREATE TRIGGER slow BEFORE INSERT ON carmy.example_orders \
         FOR EACH ROW EXECUTE FUNCTION slow_insert();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let tools = example_tools(Arc::new(book));
    let create = tools
        .into_iter()
        .find(|tool| tool.name() == "create_order")
        .unwrap();
    let call = tokio::spawn(async move { create.call(context(), json!({"sku": "A-1"})).await });
    let killed = eventually(Duration::from_secs(10), "the INSERT to be running", || {
        let pool = pool.clone();
        async move {
            let killed: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE query LIKE 'INSERT INTO carmy.example_orders%' AND state = 'active') t",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            if killed > 0 {
                Ok(killed)
            } else {
                Err(killed)
            }
        }
    })
    .await;
    assert_eq!(killed, 1);
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code, "ORDER_OUTCOME_UNKNOWN");
    assert_eq!(error.kind, carmy::ToolErrorKind::EffectUnknown);
    let recorded = carmy::ExecutionError::from(error);
    assert_eq!(recorded.effect, Some(carmy::Effect::Unknown));
}

fn context() -> ToolContext {
    ToolContext {
        principal: "alice".into(),
        session_id: "default".into(),
        request_id: Some("r-1".into()),
        execution_id: ExecutionId::generate(),
        traceparent: None,
        timeout: std::time::Duration::from_secs(30),
    }
}
