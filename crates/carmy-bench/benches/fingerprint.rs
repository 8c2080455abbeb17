//! The fingerprint of a call (docs/semantics.md §2): SHA-256 over the RFC 8785 canonical form of
//! the strictly parsed arguments, for a small and a 10 KB arguments object; and the strict parse
//! itself.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn fingerprints(c: &mut Criterion) {
    let inputs = [
        ("small", carmy_bench::arguments::SMALL.to_owned()),
        ("10KB", carmy_bench::arguments::of_size(10 * 1024)),
    ];
    let mut group = c.benchmark_group("fingerprint");
    for (name, text) in &inputs {
        let arguments = carmy::strict_json::parse(text).expect("the arguments parse");
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &arguments, |b, args| {
            b.iter(|| carmy::fingerprint::fingerprint(black_box("create_order"), args, None));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("strict_json_parse");
    for (name, text) in &inputs {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), text, |b, text| {
            b.iter(|| carmy::strict_json::parse(black_box(text)));
        });
    }
    group.finish();
}

criterion_group!(benches, fingerprints);
criterion_main!(benches);
