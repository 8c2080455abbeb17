//! A fixed amount of the micro-benchmarks' work, for a profiler whose figures are instruction
//! counts rather than time (`valgrind --tool=callgrind`):
//!
//! ```sh
//! cargo build --release -p carmy-bench --example profile
//! valgrind --tool=callgrind target/release/examples/profile pairs 200000
//! valgrind --tool=callgrind target/release/examples/profile fingerprint 2000
//! ```
//!
//! `pairs N`: N reserve + complete pairs of the in-memory store, in the batches of
//! `carmy_bench::memory` (inputs made and stores dropped off the clock). `fingerprint N`: N
//! fingerprints of the 10 KB arguments object of the criterion benchmark. Each prints its rate by
//! the wall clock and by the CPU time of this thread (`/proc/thread-self/schedstat`), which on a
//! shared machine is the steadier of the two; under a profiler neither means much, the
//! profile's per-call instruction counts are the figure.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// mimalloc instead of the system allocator: the per-call work is mostly small allocations
/// (keys, records, JSON), which it serves faster (bench/results/2026-12-02-readme-notes.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u64 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    match args.get(1).map(String::as_str) {
        Some("pairs") => pairs(count),
        Some("fingerprint") => fingerprints(count),
        _ => {
            eprintln!("usage: profile pairs|fingerprint [COUNT]");
            std::process::exit(2);
        }
    }
}

fn pairs(count: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let fingerprint = carmy_bench::memory::fingerprint();
    let mut timed = Duration::ZERO;
    let mut cpu = Duration::ZERO;
    let mut done = 0u64;
    while done < count {
        let batch = (count - done).min(carmy_bench::memory::BATCH as u64);
        let inputs = carmy_bench::memory::make_inputs(done, batch as usize);
        let store = carmy::memory::InMemoryIdempotencyStore::new(inputs.len());
        let cpu_before = thread_cpu();
        let started = Instant::now();
        runtime
            .block_on(carmy_bench::memory::run_pairs(
                &store,
                &fingerprint,
                &inputs,
            ))
            .expect("fresh identities are reserved and completed");
        timed += started.elapsed();
        cpu += thread_cpu() - cpu_before;
        drop(store);
        done += batch;
    }
    println!(
        "{done} pairs: {:.0} pairs/s by the wall clock ({:.3} s), {:.0} pairs/s by CPU time ({:.3} s)",
        done as f64 / timed.as_secs_f64(),
        timed.as_secs_f64(),
        done as f64 / cpu.as_secs_f64(),
        cpu.as_secs_f64()
    );
}

/// The CPU time this thread has run: the first field of `/proc/thread-self/schedstat`, in ns.
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("/proc/thread-self/schedstat is readable (Linux)");
    let nanos = text
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .expect("schedstat starts with the run time in ns");
    Duration::from_nanos(nanos)
}

fn fingerprints(count: u64) {
    let text = carmy_bench::arguments::of_size(10 * 1024);
    let arguments = carmy::strict_json::parse(&text).expect("the arguments parse");
    let cpu_before = thread_cpu();
    let started = Instant::now();
    for _ in 0..count {
        let fingerprint =
            carmy::fingerprint::fingerprint(black_box("create_order"), &arguments, None)
                .expect("the arguments have a fingerprint");
        black_box(fingerprint);
    }
    let elapsed = started.elapsed();
    let cpu = thread_cpu() - cpu_before;
    println!(
        "{count} fingerprints of {} bytes: {:.1} µs each by the wall clock, {:.1} µs by CPU time",
        text.len(),
        elapsed.as_secs_f64() * 1e6 / count as f64,
        cpu.as_secs_f64() * 1e6 / count as f64
    );
}
