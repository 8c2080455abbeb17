//! `carmy-gateway`: see the crate docs of `carmy_gateway` and the README.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    carmy_gateway::main_with_args(std::env::args_os()).await
}
