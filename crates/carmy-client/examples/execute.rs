//! Runs one tool call through a Carmy gateway and prints its outcome.
//!
//! ```text
//! CARMY_URL=http://127.0.0.1:8080 CARMY_API_KEY=secret \
//!     cargo run -p carmy-client --example execute -- create_order '{"sku":"A-1"}' [request_id]
//! ```
//!
//! Run it twice with the same request_id: the second run prints `replayed: true` and the same
//! execution id, and the gateway does not run the tool again.

use carmy_client::{Call, Client, Error};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(tool), Some(arguments)) = (args.next(), args.next()) else {
        eprintln!("usage: execute <tool> <arguments JSON> [request_id]");
        return ExitCode::from(2);
    };
    let arguments = match serde_json::from_str(&arguments) {
        Ok(arguments) => arguments,
        Err(error) => {
            eprintln!("arguments are not JSON: {error}");
            return ExitCode::from(2);
        }
    };
    let mut call = Call::new(tool, arguments);
    if let Some(request_id) = args.next() {
        call = call.with_request_id(request_id);
    }
    let url = std::env::var("CARMY_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let mut builder = Client::builder(url);
    if let Ok(key) = std::env::var("CARMY_API_KEY") {
        builder = builder.api_key(key);
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    match client.execute(&call).await {
        Ok(execution) => {
            println!(
                "{} {:?} replayed: {} data: {} error: {:?}",
                execution.execution_id,
                execution.status,
                execution.replayed,
                execution.data,
                execution.error
            );
            ExitCode::SUCCESS
        }
        Err(error @ (Error::Unavailable { .. } | Error::StillRunning { .. })) => {
            eprintln!("{error}\nretry later with request_id {}", call.request_id());
            ExitCode::from(75) // EX_TEMPFAIL
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
