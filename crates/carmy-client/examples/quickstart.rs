//! The README's Rust client snippet, compiled with the crate's examples and run by the README
//! test (`crates/carmy-gateway/tests/it/front/readme.rs`) against the quickstart gateway: one call
//! and its retry with the same request_id; the retry is replayed, the tool runs once.
//!
//! ```text
//! cargo run -p carmy-gateway                        # the quickstart gateway, 127.0.0.1:8080
//! cargo run -p carmy-client --example quickstart    # CARMY_URL overrides the address
//! ```
//!
//! Everything below this comment is the README's snippet, character for character.

use carmy_client::{Call, Client};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), carmy_client::Error> {
    let url = std::env::var("CARMY_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let client = Client::new(url)?;
    let call = Call::new("create_order", json!({"sku": "KB-01"})).with_request_id("order-1");
    let first = client.execute(&call).await?;
    let retry = client.execute(&call).await?; // the same call again: replayed, not re-run
    println!("{} replayed={}", first.data, first.replayed);
    println!("{} replayed={}", retry.data, retry.replayed);
    Ok(())
}
