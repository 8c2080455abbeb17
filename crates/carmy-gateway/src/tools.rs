//! The example tools of docs/semantics.md §9: `create_order`, `get_order`, `find_orders`, `echo`,
//! `sleep` and `fail`.

use crate::orders::{OrderBook, OrderError};
use carmy::tool::{FnTool, ToolAnnotations, ToolError};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Longest `sleep` accepted, in milliseconds (one hour).
pub const MAX_SLEEP_MS: u64 = 3_600_000;

/// The example tools' names, in the order [`example_tools`] returns them.
pub const EXAMPLE_TOOL_NAMES: [&str; 6] = [
    "create_order",
    "get_order",
    "find_orders",
    "echo",
    "sleep",
    "fail",
];

/// All example tools, with orders kept in `orders`.
pub fn example_tools(orders: Arc<dyn OrderBook>) -> Vec<FnTool> {
    vec![
        create_order(Arc::clone(&orders)),
        get_order(Arc::clone(&orders)),
        find_orders(orders),
        echo(),
        sleep(),
        fail(),
    ]
}

/// An integer argument, accepting `2`, `2.0` and `2e0` alike (the schema already checked that
/// it is integral).
fn integer(arguments: &Value, name: &str) -> Option<i64> {
    let number = arguments.get(name)?;
    number.as_i64().or_else(|| {
        let float = number.as_f64()?;
        // In range and integral: the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        ((float.fract() == 0.0) && float.abs() < 9.0e15).then_some(float as i64)
    })
}

/// How long a caller is asked to wait after the order book could not be reached.
const ORDER_BOOK_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The order book could not be reached: nothing happened, retry the same call.
fn order_book_unavailable() -> ToolError {
    ToolError::not_executed("ORDER_BOOK_UNAVAILABLE", "the order book is unavailable")
        .with_retry_after(ORDER_BOOK_RETRY_AFTER)
}

/// A failed write, by what it says about the order (docs/semantics.md §4.1): never sent is "not
/// executed" (released, 503, retry), refused is a plain failure, and a connection lost after
/// sending is "effect unknown", because the commit may have happened without its reply.
fn write_error(error: OrderError) -> ToolError {
    tracing::warn!(%error, "order book failed while creating an order");
    match error {
        OrderError::NotSent(_) => order_book_unavailable(),
        OrderError::Refused(_) => {
            ToolError::new("ORDER_REFUSED", "the order book refused the order")
        }
        OrderError::Unknown(_) => ToolError::effect_unknown(
            "ORDER_OUTCOME_UNKNOWN",
            "the connection to the order book was lost after the order was sent; the order may \
             exist: look for it with find_orders (by sku) before creating another",
        ),
    }
}

/// A failed read: a read changes nothing, so every failure is "not executed" (retry the same
/// call) except a refusal of the query itself.
fn read_error(error: OrderError) -> ToolError {
    tracing::warn!(%error, "order book failed while reading");
    match error {
        OrderError::Refused(_) => {
            ToolError::new("ORDER_REFUSED", "the order book refused the query")
        }
        OrderError::NotSent(_) | OrderError::Unknown(_) => order_book_unavailable(),
    }
}

/// The hints of a tool that only reads: MCP clients may call it freely, and Carmy's texts name
/// it where a model should check whether an effect happened (docs/semantics.md §11).
fn read_only() -> ToolAnnotations {
    ToolAnnotations {
        read_only_hint: Some(true),
        open_world_hint: Some(false),
        ..ToolAnnotations::default()
    }
}

fn create_order(orders: Arc<dyn OrderBook>) -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {
            "sku": {"type": "string", "minLength": 1, "maxLength": 255},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
            "ship": {"type": "object", "additionalProperties": {"type": "string"}},
            "note": {"type": "string"}
        },
        "required": ["sku"],
        "additionalProperties": false
    });
    FnTool::new("create_order", schema, move |context, arguments| {
        let orders = Arc::clone(&orders);
        async move {
            let sku = arguments["sku"].as_str().unwrap_or_default().to_owned();
            let quantity = integer(&arguments, "quantity").unwrap_or(1);
            let order_id = orders
                .create(&context.principal, &sku, quantity)
                .await
                .map_err(write_error)?;
            Ok(json!({"order_id": order_id}))
        }
    })
    .with_description("Creates an order; returns {\"order_id\": int}. Not idempotent by itself.")
    .with_annotations(ToolAnnotations {
        read_only_hint: Some(false),
        destructive_hint: Some(false),
        idempotent_hint: Some(false),
        open_world_hint: Some(false),
        ..ToolAnnotations::default()
    })
}

fn get_order(orders: Arc<dyn OrderBook>) -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {"order_id": {"type": "integer", "minimum": 1}},
        "required": ["order_id"],
        "additionalProperties": false
    });
    FnTool::new("get_order", schema, move |context, arguments| {
        let orders = Arc::clone(&orders);
        async move {
            let order_id = integer(&arguments, "order_id").unwrap_or_default();
            match orders
                .get(&context.principal, order_id)
                .await
                .map_err(read_error)?
            {
                Some(order) => Ok(order.to_json()),
                None => Err(ToolError::new("NOT_FOUND", format!("no order {order_id}"))),
            }
        }
    })
    .with_description("Reads one of the caller's orders.")
    .with_annotations(read_only())
}

fn find_orders(orders: Arc<dyn OrderBook>) -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "additionalProperties": false
    });
    FnTool::new("find_orders", schema, move |context, arguments| {
        let orders = Arc::clone(&orders);
        async move {
            let sku = arguments.get("sku").and_then(Value::as_str);
            let found = orders
                .find(&context.principal, sku)
                .await
                .map_err(read_error)?;
            Ok(json!({"orders": found.iter().map(|order| order.to_json()).collect::<Vec<_>>()}))
        }
    })
    .with_description("Lists the caller's orders, optionally for one sku: for reconciliation.")
    .with_annotations(read_only())
}

fn echo() -> FnTool {
    FnTool::new(
        "echo",
        json!({"type": "object"}),
        |_context, arguments| async move { Ok(arguments) },
    )
    .with_description("Returns its arguments.")
}

fn sleep() -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
        "required": ["ms"],
        "additionalProperties": false
    });
    FnTool::new("sleep", schema, |_context, arguments| async move {
        let ms = integer(&arguments, "ms").unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(ms.unsigned_abs())).await;
        Ok(json!({"slept_ms": ms}))
    })
    .with_description("Sleeps for `ms` milliseconds, then returns {\"slept_ms\": ms}.")
}

fn fail() -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
        "additionalProperties": false
    });
    FnTool::new("fail", schema, |_context, arguments| async move {
        let message = arguments["message"].as_str().unwrap_or_default().to_owned();
        Err(ToolError::new("TOOL_ERROR", message))
    })
    .with_description("Fails with the given message (recorded as status \"failed\").")
}
