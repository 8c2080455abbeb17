//! The in-memory store: one reserve + complete pair on a fresh identity, on one thread (a
//! current-thread Tokio runtime). Inputs are made and stores dropped off the clock, in batches
//! of at most `carmy_bench::memory::BATCH` pairs, each on a new store (see
//! `carmy_bench::memory`).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

fn reserve_complete(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let fingerprint = carmy_bench::memory::fingerprint();
    let mut group = c.benchmark_group("in_memory_store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("reserve_complete_pair", |b| {
        let mut next = 0u64;
        b.iter_custom(|iterations| {
            let mut timed = Duration::ZERO;
            let mut left = iterations;
            while left > 0 {
                let batch = left.min(carmy_bench::memory::BATCH as u64);
                let inputs = carmy_bench::memory::make_inputs(next, batch as usize);
                next += batch;
                timed += carmy_bench::memory::time_batch(&runtime, &fingerprint, &inputs)
                    .expect("fresh identities are reserved and completed");
                left -= batch;
            }
            timed
        });
    });
    group.finish();
}

criterion_group!(benches, reserve_complete);
criterion_main!(benches);
