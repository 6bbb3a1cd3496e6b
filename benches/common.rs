//! Shared helpers for the benchmarks. The timing helper and the commit and check workloads live in
//! `lance_actions_commit::bench` (the `bench` feature), which the CLI's `bench` command shares.

pub use lance_actions_commit::bench::median_ns;
