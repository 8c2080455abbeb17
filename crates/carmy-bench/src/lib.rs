//! Workloads shared by the `carmy-bench` program and its criterion benchmarks.
//!
//! The program itself (`src/main.rs`) drives a real `carmy-gateway` process over HTTP and
//! compares it with pgbench on the same PostgreSQL server; see `bench/README.md` at the root of
//! the repository. This library holds what also runs in-process: the in-memory store workload
//! ([`memory`]), the argument objects of the fingerprint benchmarks ([`arguments`]) and latency
//! percentiles ([`percentile`]).

pub mod arguments;
pub mod memory;

/// The `q`-quantile (0.0 ..= 1.0) of `sorted` by the nearest-rank method; `None` when empty.
///
/// `sorted` must be in ascending order.
pub fn percentile(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), Some(50));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile(&values, 0.0), Some(1));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
