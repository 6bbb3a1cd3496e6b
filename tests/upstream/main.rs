//! Lance 14.0.2's own conflict tests, ported: each upstream test's staged transactions and
//! committed peers are re-expressed on a real sample table and judged by **our** driver, with the
//! upstream expectation asserted (Lance's Ok -> Ok, RetryableCommitConflict -> Retry,
//! CommitConflict / IncompatibleTransaction -> Fail). Where we differ on purpose the case names the
//! deviation id of `design/deviations.md`; an unlisted difference fails, and so does a listed one
//! that no longer occurs. One module per upstream file, one function per upstream test, the same
//! names; `tests/upstream/README.md` lists every upstream test with its status.

mod conflict_resolver;
mod dataset_concurrency_store;
mod dataset_transactions;
mod support;
