//! Lance's own conflict resolver as an oracle: what would Lance 14.0.2 decide for this pair?
//!
//! `TransactionRebase` is public in 14.0.2. Its verdict is encoded as an error: `Ok(())` commits,
//! `RetryableCommitConflict` means retry, `IncompatibleTransaction` means fail. We run it exactly as
//! Lance's commit loop does: `try_new` at the read version, `check_txn` for every committed peer in
//! order, then `finish` against the latest dataset (where row-level overlaps surface).

use std::fmt;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::io::commit::conflict_resolver::TransactionRebase;
use lance_select::RowAddrTreeMap;

/// Lance's answer for a transaction against the commits after its read version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LanceVerdict {
    Ok,
    Retry(String),
    Fail(String),
    /// Lance refused to consider the transaction at all (for example an `Unknown` operation); it
    /// would never commit it.
    Rejected(String),
}

impl LanceVerdict {
    /// "ok" / "retry" / "fail" (a rejection is a failure to commit).
    pub fn label(&self) -> &'static str {
        match self {
            LanceVerdict::Ok => "ok",
            LanceVerdict::Retry(_) => "retry",
            LanceVerdict::Fail(_) | LanceVerdict::Rejected(_) => "fail",
        }
    }

    fn from_error(e: lance::Error) -> Self {
        match e {
            lance::Error::RetryableCommitConflict { .. } => LanceVerdict::Retry(e.to_string()),
            lance::Error::IncompatibleTransaction { .. } => LanceVerdict::Fail(e.to_string()),
            other => LanceVerdict::Rejected(other.to_string()),
        }
    }
}

impl fmt::Display for LanceVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LanceVerdict::Ok => write!(f, "ok"),
            LanceVerdict::Retry(m) => write!(f, "retry: {m}"),
            LanceVerdict::Fail(m) => write!(f, "fail: {m}"),
            LanceVerdict::Rejected(m) => write!(f, "rejected: {m}"),
        }
    }
}

/// Run Lance's resolver for `txn` (read at `at_read`) against `committed`, ending at `latest`.
pub async fn lance_verdict(
    at_read: &Dataset,
    latest: &Dataset,
    txn: &Transaction,
    affected_rows: Option<&RowAddrTreeMap>,
    committed: &[(u64, Transaction)],
) -> LanceVerdict {
    let mut rebase = match TransactionRebase::try_new(at_read, txn.clone(), affected_rows).await {
        Ok(r) => r,
        Err(e) => return LanceVerdict::from_error(e),
    };
    if let Err(e) = rebase.load_current_lineage(latest).await {
        return LanceVerdict::from_error(e);
    }
    for (version, other) in committed {
        if let Err(e) = rebase.check_txn(other, *version) {
            return LanceVerdict::from_error(e);
        }
    }
    match rebase.finish(latest).await {
        Ok(_) => LanceVerdict::Ok,
        Err(e) => LanceVerdict::from_error(e),
    }
}
