//! Crash points for fault tests. With `LANCE_ACTIONS_CRASH_AT=<point>` in the environment the process
//! aborts at that point, with no unwinding and no cleanup, as `kill -9` would. Read once; a no-op
//! otherwise.
//!
//! Points, in commit order: `before-lance-commit` (data files and merged deletion vectors written,
//! nothing committed), `after-transaction-file` (Lance wrote the `.txn`, the manifest is not yet
//! written), `after-manifest` (the manifest is written, Lance has not returned).

use std::sync::OnceLock;

pub fn point(name: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    if AT.get_or_init(|| std::env::var("LANCE_ACTIONS_CRASH_AT").ok()).as_deref() == Some(name) {
        std::process::abort();
    }
}
