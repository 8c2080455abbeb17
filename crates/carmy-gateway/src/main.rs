//! `carmy-gateway`: see the crate docs of `carmy_gateway` and docs/operations.md.

use std::process::ExitCode;

/// mimalloc instead of the system allocator: the per-call work is mostly small allocations
/// (keys, records, JSON), which it serves faster (bench/results/2026-12-02-readme-notes.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    carmy_gateway::main_with_args(std::env::args_os()).await
}
