//! Orders of the example tools, kept where the reservations are: in process memory, or in
//! `carmy.example_orders` shared by every replica (docs/semantics.md §9). That table is the example
//! tools' own, not the product's: [`PostgresOrderBook::prepare`] creates it
//! (`sql/example_orders.sql`) where it is missing.

use carmy_postgres::Db;
use serde_json::{json, Value};
use sqlx::{Executor, PgPool, Row};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

/// The boxed future of an [`OrderBook`] call.
pub type OrderFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, OrderError>> + Send + 'a>>;

/// Why an [`OrderBook`] call failed, by what it says about the write (docs/semantics.md §4.1):
/// the tools turn each into the matching [`ToolErrorKind`](carmy::ToolErrorKind).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// The statement provably never reached the database (no connection could be had): nothing
    /// changed.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The database refused the statement (a constraint or data error): nothing changed.
    #[error("refused: {0}")]
    Refused(String),
    /// The statement may have been applied: the connection broke or the server failed after the
    /// statement was sent, so a commit may have happened without its acknowledgement.
    #[error("unknown: {0}")]
    Unknown(String),
}

impl OrderError {
    /// Classifies an error of a statement that was sent on an acquired connection: a database
    /// error of class 22 (data exception) or 23 (integrity constraint violation) is a refusal,
    /// everything else (I/O, protocol, a server shutting down) leaves the effect unknown.
    fn after_sending(error: &sqlx::Error) -> Self {
        let refused = error
            .as_database_error()
            .and_then(|database| database.code())
            .is_some_and(|code| code.starts_with("22") || code.starts_with("23"));
        if refused {
            Self::Refused(error.to_string())
        } else {
            Self::Unknown(error.to_string())
        }
    }
}

/// One order, as the tools return it: `{"order_id", "sku", "quantity"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Assigned by the book, from 1 upwards.
    pub order_id: i64,
    /// The ordered item.
    pub sku: String,
    /// How many, at least 1.
    pub quantity: i64,
}

impl Order {
    /// The JSON form tools return.
    pub fn to_json(&self) -> Value {
        json!({"order_id": self.order_id, "sku": self.sku, "quantity": self.quantity})
    }
}

/// Where orders live. Every method is scoped to one principal: principals never see each
/// other's orders (docs/semantics.md §6).
pub trait OrderBook: Send + Sync + 'static {
    /// Creates an order of `owner` (the calling principal) and returns its id.
    fn create<'a>(&'a self, owner: &'a str, sku: &'a str, quantity: i64) -> OrderFuture<'a, i64>;
    /// One order of `principal`, if it exists.
    fn get<'a>(&'a self, principal: &'a str, order_id: i64) -> OrderFuture<'a, Option<Order>>;
    /// `principal`'s orders, optionally only those for `sku`, oldest first.
    fn find<'a>(&'a self, principal: &'a str, sku: Option<&'a str>) -> OrderFuture<'a, Vec<Order>>;
}

/// Orders in process memory (the in-memory deployment).
#[derive(Default)]
pub struct MemoryOrderBook {
    orders: Mutex<Vec<(String, Order)>>,
}

impl OrderBook for MemoryOrderBook {
    fn create<'a>(&'a self, owner: &'a str, sku: &'a str, quantity: i64) -> OrderFuture<'a, i64> {
        let mut orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        let order_id = i64::try_from(orders.len()).unwrap_or(i64::MAX - 1) + 1;
        orders.push((
            owner.to_owned(),
            Order {
                order_id,
                sku: sku.to_owned(),
                quantity,
            },
        ));
        Box::pin(async move { Ok(order_id) })
    }

    fn get<'a>(&'a self, principal: &'a str, order_id: i64) -> OrderFuture<'a, Option<Order>> {
        let orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        let found = orders
            .iter()
            .find(|(owner, order)| owner == principal && order.order_id == order_id)
            .map(|(_, order)| order.clone());
        Box::pin(async move { Ok(found) })
    }

    fn find<'a>(&'a self, principal: &'a str, sku: Option<&'a str>) -> OrderFuture<'a, Vec<Order>> {
        let orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        let found = orders
            .iter()
            .filter(|(owner, order)| owner == principal && sku.is_none_or(|sku| order.sku == sku))
            .map(|(_, order)| order.clone())
            .collect();
        Box::pin(async move { Ok(found) })
    }
}

/// The table of the example tools, its index and its comments
/// (`crates/carmy-gateway/sql/example_orders.sql`); every statement is `IF NOT EXISTS` or a
/// comment.
pub const EXAMPLE_ORDERS_SQL: &str = include_str!("../sql/example_orders.sql");

/// Orders in `carmy.example_orders`, shared by all replicas.
pub struct PostgresOrderBook {
    /// The store's pool, pinned behind a transaction-mode pooler (docs/semantics.md §14.3).
    pool: Db,
}

impl PostgresOrderBook {
    /// Uses `pool` (the store's pool: one pool per process; a `PgPool` is taken as direct,
    /// [`carmy_postgres::PostgresStore::db`] keeps the store's pinning, docs/semantics.md
    /// §14.3). Call [`PostgresOrderBook::prepare`] once first.
    pub fn new(pool: impl Into<Db>) -> Self {
        Self { pool: pool.into() }
    }

    /// Creates `carmy.example_orders` (with [`EXAMPLE_ORDERS_SQL`]) when it does not exist, in
    /// one transaction holding the migration lock
    /// (`pg_advisory_xact_lock(`[`carmy_postgres::MIGRATION_LOCK_KEY`]`)`), so replicas starting
    /// together and a concurrent migration never race. A database that has the table (created
    /// by an earlier build's migration `V2__example_orders`, or by an earlier start) is left
    /// untouched. Needs the schema `carmy` ([`carmy_postgres::migrate`] first).
    ///
    /// # Errors
    /// The database's error text when a statement fails.
    pub async fn prepare(pool: &PgPool) -> Result<(), String> {
        // `Executor` methods (boxed `Send` futures): the opaque futures of `Query::execute` trip
        // rustc's higher-ranked `Send` check, and callers may spawn this future.
        let prepared = async {
            let mut transaction = pool.begin().await?;
            transaction
                .execute(
                    sqlx::query("SELECT pg_advisory_xact_lock($1)")
                        .bind(carmy_postgres::MIGRATION_LOCK_KEY),
                )
                .await?;
            let missing: bool = transaction
                .fetch_one(sqlx::query(
                    "SELECT to_regclass('carmy.example_orders') IS NULL",
                ))
                .await?
                .try_get(0)?;
            if missing {
                transaction
                    .execute(sqlx::raw_sql(EXAMPLE_ORDERS_SQL))
                    .await?;
                tracing::info!("created carmy.example_orders for the example tools");
            }
            transaction.commit().await
        };
        prepared
            .await
            .map_err(|error: sqlx::Error| format!("cannot create carmy.example_orders: {error}"))
    }
}

type OrderRow = (i64, String, i64);

fn order_from_row((order_id, sku, quantity): OrderRow) -> Order {
    Order {
        order_id,
        sku,
        quantity,
    }
}

/// One principal's order by id.
const SELECT_ONE: &str =
    "SELECT order_id, sku, quantity FROM carmy.example_orders WHERE principal = $1 AND order_id = $2";
/// One principal's orders, of one sku or (`$2` null) all, by order id.
const SELECT_BY_SKU: &str = "SELECT order_id, sku, quantity FROM carmy.example_orders \
     WHERE principal = $1 AND ($2::text IS NULL OR sku = $2) ORDER BY order_id";

type OrderQuery<'q> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, OrderRow, sqlx::postgres::PgArguments>;

impl PostgresOrderBook {
    /// The orders `sql` selects (one of the `SELECT_*` statements), with its parameters bound
    /// by `bind`, in order id order.
    async fn select<'q>(
        &self,
        sql: &'static str,
        bind: impl FnOnce(OrderQuery<'q>) -> OrderQuery<'q>,
    ) -> Result<Vec<Order>, OrderError> {
        bind(sqlx::query_as::<_, OrderRow>(sql))
            .fetch_all(self.pool.executor())
            .await
            .map(|rows| rows.into_iter().map(order_from_row).collect())
            .map_err(|error| OrderError::after_sending(&error))
    }

    /// A connection of the pool; failing here means nothing was sent.
    async fn connection(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, OrderError> {
        self.pool
            .pool()
            .acquire()
            .await
            .map_err(|error| OrderError::NotSent(error.to_string()))
    }
}

impl OrderBook for PostgresOrderBook {
    /// One autocommit `INSERT`. A failure to get a connection is [`OrderError::NotSent`]; once
    /// the statement is sent, a lost connection is [`OrderError::Unknown`] (the commit may have
    /// happened and only its acknowledgement been lost).
    fn create<'a>(&'a self, owner: &'a str, sku: &'a str, quantity: i64) -> OrderFuture<'a, i64> {
        Box::pin(async move {
            let mut connection = self.connection().await?;
            sqlx::query_scalar(
                "INSERT INTO carmy.example_orders (principal, sku, quantity) VALUES ($1, $2, $3) RETURNING order_id",
            )
            .bind(owner)
            .bind(sku)
            .bind(quantity)
            .fetch_one(self.pool.through(&mut connection))
            .await
            .map_err(|error| OrderError::after_sending(&error))
        })
    }

    fn get<'a>(&'a self, principal: &'a str, order_id: i64) -> OrderFuture<'a, Option<Order>> {
        Box::pin(async move {
            let orders = self
                .select(SELECT_ONE, |query| query.bind(principal).bind(order_id))
                .await?;
            Ok(orders.into_iter().next())
        })
    }

    fn find<'a>(&'a self, principal: &'a str, sku: Option<&'a str>) -> OrderFuture<'a, Vec<Order>> {
        Box::pin(self.select(SELECT_BY_SKU, move |query| query.bind(principal).bind(sku)))
    }
}
