//! A delete staged here, through Lance's own `DeleteBuilder`, so that the rows it deleted are known
//! first-hand.
//!
//! A caller may hand the commit the rows a staged write deleted ([`ActionCommit::with_affected_rows`]);
//! those are a caller's word, checked against the staged deletion files wherever a writer of the
//! same fragment makes them matter (a file read each, `design/commit.md`, "Rows a caller declares").
//! Rows Lance reported while this crate staged the delete need no such check: `DeleteBuilder` scans
//! the live rows the predicate matches and writes each fragment's vector as the read version's with
//! exactly those rows added, so the rows are the new vector less the old one by construction. The
//! fields are private: only [`stage_delete`] makes one, so rows from anywhere else cannot pass as
//! Lance's.
//!
//! [`ActionCommit::with_affected_rows`]: crate::ActionCommit::with_affected_rows

use std::sync::Arc;

use lance::Dataset;
use lance::dataset::DeleteBuilder;
use lance::dataset::transaction::Transaction;
use lance_select::RowAddrTreeMap;

use crate::commit::{CommitError, CommitResult};

/// `DELETE WHERE predicate`, staged on one version and not yet committed: commit it with
/// [`ActionCommit::execute_delete`](crate::ActionCommit::execute_delete).
#[derive(Debug, Clone)]
pub struct StagedDelete {
    /// The uri of the table (or branch) it was staged on.
    pub(crate) uri: String,
    pub(crate) transaction: Transaction,
    /// `None` when Lance reported none (a predicate that is always true removes whole fragments).
    pub(crate) rows: Option<RowAddrTreeMap>,
    num_deleted_rows: u64,
}

impl StagedDelete {
    /// Rows the delete removes.
    pub fn num_deleted_rows(&self) -> u64 {
        self.num_deleted_rows
    }

    /// The staged transaction (its read version is the version the delete was staged on).
    pub fn transaction(&self) -> &Transaction {
        &self.transaction
    }

    /// The row addresses the delete removes, as Lance reported them.
    pub fn affected_rows(&self) -> Option<&RowAddrTreeMap> {
        self.rows.as_ref()
    }
}

/// Stage `DELETE WHERE predicate` on `dataset`'s version with Lance's `DeleteBuilder`; nothing is
/// committed. A predicate Lance cannot parse or plan is [`CommitError::Layer`] with Lance's reason.
pub async fn stage_delete(dataset: &Arc<Dataset>, predicate: &str) -> CommitResult<StagedDelete> {
    let staged = DeleteBuilder::new(dataset.clone(), predicate).execute_uncommitted().await.map_err(|source| {
        CommitError::Layer { source: crate::Error::Lance { what: "staging a delete".into(), source } }
    })?;
    Ok(StagedDelete {
        uri: dataset.uri().to_string(),
        transaction: staged.transaction,
        rows: staged.affected_rows,
        num_deleted_rows: staged.num_deleted_rows,
    })
}
