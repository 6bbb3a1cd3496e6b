//! Shared helpers for the benchmarks: timing with a median over adaptive batches.

use std::time::{Duration, Instant};

/// Median nanoseconds per call of `f`, over batches sized to take about `target` each.
pub fn median_ns(mut f: impl FnMut(), target: Duration) -> f64 {
    let mut per_batch = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..per_batch {
            f();
        }
        if t.elapsed() >= target / 10 || per_batch >= 1 << 24 {
            break;
        }
        per_batch *= 2;
    }
    let mut samples: Vec<f64> = (0..11)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / per_batch as f64
        })
        .collect();
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}
