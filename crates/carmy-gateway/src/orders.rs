//! Orders of the example tools, kept where the reservations are: in process memory, or in
//! `carmy.example_orders` shared by every replica (contract §9).

use serde_json::{json, Value};
use sqlx::PgPool;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

/// The boxed future of an [`OrderBook`] call; the error text is for logs and tool errors.
pub type OrderFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

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
/// other's orders (contract §6).
pub trait OrderBook: Send + Sync + 'static {
    /// Creates an order and returns its id.
    fn create<'a>(
        &'a self,
        principal: &'a str,
        sku: &'a str,
        quantity: i64,
    ) -> OrderFuture<'a, i64>;
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
    fn create<'a>(
        &'a self,
        principal: &'a str,
        sku: &'a str,
        quantity: i64,
    ) -> OrderFuture<'a, i64> {
        let mut orders = self.orders.lock().unwrap_or_else(PoisonError::into_inner);
        let order_id = i64::try_from(orders.len()).unwrap_or(i64::MAX - 1) + 1;
        orders.push((
            principal.to_owned(),
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

/// Orders in `carmy.example_orders` (migration `V2`), shared by all replicas.
pub struct PostgresOrderBook {
    pool: PgPool,
}

impl PostgresOrderBook {
    /// Uses `pool` (the store's pool: one pool per process).
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
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

impl OrderBook for PostgresOrderBook {
    fn create<'a>(
        &'a self,
        principal: &'a str,
        sku: &'a str,
        quantity: i64,
    ) -> OrderFuture<'a, i64> {
        Box::pin(async move {
            sqlx::query_scalar(
                "INSERT INTO carmy.example_orders (principal, sku, quantity) VALUES ($1, $2, $3) RETURNING order_id",
            )
            .bind(principal)
            .bind(sku)
            .bind(quantity)
            .fetch_one(&self.pool)
            .await
            .map_err(|error| error.to_string())
        })
    }

    fn get<'a>(&'a self, principal: &'a str, order_id: i64) -> OrderFuture<'a, Option<Order>> {
        Box::pin(async move {
            sqlx::query_as::<_, OrderRow>(
                "SELECT order_id, sku, quantity FROM carmy.example_orders WHERE principal = $1 AND order_id = $2",
            )
            .bind(principal)
            .bind(order_id)
            .fetch_optional(&self.pool)
            .await
            .map(|row| row.map(order_from_row))
            .map_err(|error| error.to_string())
        })
    }

    fn find<'a>(&'a self, principal: &'a str, sku: Option<&'a str>) -> OrderFuture<'a, Vec<Order>> {
        Box::pin(async move {
            sqlx::query_as::<_, OrderRow>(
                "SELECT order_id, sku, quantity FROM carmy.example_orders WHERE principal = $1 AND ($2::text IS NULL OR sku = $2) ORDER BY order_id",
            )
            .bind(principal)
            .bind(sku)
            .fetch_all(&self.pool)
            .await
            .map(|rows| rows.into_iter().map(order_from_row).collect())
            .map_err(|error| error.to_string())
        })
    }
}
