//! Crash points for fault tests. With `LANCE_ACTIONS_CRASH_AT=<point>` in the environment the process
//! aborts at that point, with no unwinding and no cleanup, as `kill -9` would. Read once; a no-op
//! otherwise.
//!
//! Points, in commit order: `before-lance-commit` (data files and merged deletion vectors written,
//! nothing committed), `after-transaction-file` (Lance wrote the `.txn`, the manifest is not yet
//! written), `after-manifest` (the manifest is written, Lance has not returned).
//!
//! Test machinery: only a build with the `test-hooks` feature (the test suites' dev-dependency)
//! reads the variable; every other build compiles each point to nothing.

/// Abort the process here if `LANCE_ACTIONS_CRASH_AT` names this point.
#[cfg(feature = "test-hooks")]
pub fn point(name: &str) {
    use std::sync::OnceLock;
    static AT: OnceLock<Option<String>> = OnceLock::new();
    if AT.get_or_init(|| std::env::var("LANCE_ACTIONS_CRASH_AT").ok()).as_deref() == Some(name) {
        std::process::abort();
    }
}

/// Without the `test-hooks` feature a crash point is nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn point(_name: &str) {}
