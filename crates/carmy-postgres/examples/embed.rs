//! Embedding Carmy in your own Rust service, with PostgreSQL (docs/embedding.md, "Embed Carmy in
//! your own Rust service"):
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/carmy \
//!   cargo run -p carmy-postgres --example embed
//! ```
//!
//! It sets up logging, applies the migrations, connects the store, puts the replay cache in
//! front of it, registers its own tool, serves on `LISTEN` (default `127.0.0.1:8080`) and shuts
//! down gracefully on ctrl-c or SIGTERM (running calls finish or are recorded `cancelled`, then
//! the store's lease ends). `crates/carmy-postgres/tests/embed_example.rs` serves [`app_on`].

use carmy::cache::{ReplayCache, DEFAULT_CACHE_ENTRIES, DEFAULT_CACHE_TTL};
use carmy::store::IdempotencyStore;
use carmy::tool::FnTool;
use carmy::ToolError;
use carmy_http::App;
use carmy_postgres::PostgresStore;
use serde_json::json;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // Carmy logs through `tracing`: without a subscriber nothing is printed, not even the address.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let listen: SocketAddr = std::env::var("LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8080".into())
        .parse()?;
    // Applies migrations/ under an advisory lock: safe when replicas start together. Without
    // it the store starts but is not ready (`/readyz` and the log say "run migrations").
    carmy_postgres::migrate(&url).await?;
    let app = app_on(&url, listen).await?;
    let listener = carmy_http::app::bind(app.listen_address()).await?;
    app.serve(listener, carmy_http::app::shutdown_signal())
        .await?;
    Ok(())
}

/// The application on the (already migrated) database at `url`: `PostgresStore` with its
/// defaults behind the replay cache, the tool [`send_invoice`], listening on `listen`.
///
/// # Errors
/// When the database cannot be reached or the tool is refused.
pub async fn app_on(url: &str, listen: SocketAddr) -> Result<App, Box<dyn Error>> {
    // `connect` takes a URL or a full `PostgresStoreOptions` (pool size, lease, timeouts).
    let store: Arc<dyn IdempotencyStore> = Arc::new(PostgresStore::connect(url).await?);
    // Finished records are served from memory for a minute: replays and conflicts then need no
    // database round trip (the benchmark figures in bench/results/ are measured with it).
    let store = Arc::new(ReplayCache::new(
        store,
        DEFAULT_CACHE_ENTRIES,
        DEFAULT_CACHE_TTL,
    ));
    let app = carmy_http::app()
        .idempotency_store(store)
        .tool(send_invoice())
        .listen(listen)
        .build()?;
    Ok(app)
}

/// Your own tool: "sends" an invoice. Its errors say what happened to the effect
/// (docs/semantics.md §4.1): a refused amount is a plain failure, an upstream that could not
/// be reached is "not executed" (released; the caller retries the same call).
pub fn send_invoice() -> FnTool {
    let schema = json!({
        "type": "object",
        "properties": {
            "customer": {"type": "string", "minLength": 1},
            "cents": {"type": "integer"}
        },
        "required": ["customer", "cents"],
        "additionalProperties": false
    });
    FnTool::new("send_invoice", schema, |context, arguments| async move {
        let cents = arguments["cents"].as_i64().unwrap_or_default();
        if cents <= 0 {
            return Err(ToolError::new(
                "BAD_AMOUNT",
                "an invoice needs a positive amount",
            ));
        }
        if arguments["customer"] == "offline" {
            return Err(ToolError::not_executed(
                "BILLING_UNREACHABLE",
                "the billing service refused the connection",
            )
            .with_retry_after(std::time::Duration::from_secs(2)));
        }
        Ok(json!({"invoice": format!("inv-{}", context.execution_id), "cents": cents}))
    })
    .with_description("Sends an invoice; returns {\"invoice\", \"cents\"}.")
}
