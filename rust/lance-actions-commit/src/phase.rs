//! Scratch: time per phase (not committed).
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
pub static P: [AtomicU64; 24] = [const { AtomicU64::new(0) }; 24];
pub fn t(i: usize, at: &mut Instant) {
    let now = Instant::now();
    P[i].fetch_add(now.duration_since(*at).as_nanos() as u64, Ordering::Relaxed);
    *at = now;
}
pub fn take() -> Vec<u64> {
    P.iter().map(|p| p.swap(0, Ordering::Relaxed)).collect()
}
