//! Manifest puts lost to another writer, counted the same way for ours and for Lance's own loop.
//!
//! Lance's `CommitBuilder` retries a lost manifest put inside itself and reports nothing of it, so
//! throughput alone cannot say whether a way is slower because it loses more puts or because each
//! lost put costs it more. [`CountingPuts`] wraps the commit handler a uri resolves to and counts
//! every put that comes back as a conflict. Lance's ways commit through it directly; ours is given
//! it as its inner handler (`ActionCommit::with_commit_handler`), under the wrapper our loop puts
//! around every handler, so both are counted at the same layer: the store's answer to a put.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lance_table::io::commit::{CommitError, CommitHandler, ManifestLocation, commit_handler_from_url};

use super::{BenchError, BenchResult};
use crate::expect_version::Built;

/// The handler `uri` resolves to, counting the manifest puts it loses.
#[derive(Debug)]
pub struct CountingPuts {
    inner: Arc<dyn CommitHandler>,
    lost: AtomicUsize,
}

impl CountingPuts {
    pub async fn for_uri(uri: &str) -> BenchResult<Arc<Self>> {
        let inner = commit_handler_from_url(uri, &None)
            .await
            .map_err(|e| BenchError::Setup { what: format!("resolving the commit handler of {uri}: {e}") })?;
        Ok(Arc::new(Self { inner, lost: AtomicUsize::new(0) }))
    }

    /// Puts lost so far.
    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::Relaxed)
    }

    /// Every put goes to the inner handler.
    async fn before_put(&self, _built: Built<'_>) -> Result<(), CommitError> {
        Ok(())
    }

    /// A put the store answered with a conflict was lost.
    fn after_put(&self, result: &Result<ManifestLocation, CommitError>, _version: u64, _gate: ()) {
        if matches!(result, Err(CommitError::CommitConflict)) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// Every method is the inner handler's, unchanged, with the count after each put: the counter must
// not change how either way commits.
crate::handler_around::commit_handler_around!(CountingPuts, inner);
