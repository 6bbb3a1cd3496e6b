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

use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter, PredecessorIdentity,
    commit_handler_from_url,
};
use object_store::path::Path;

use super::{BenchError, BenchResult};

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

    fn count(&self, result: &Result<ManifestLocation, CommitError>) {
        if matches!(result, Err(CommitError::CommitConflict)) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// Every method but the two puts is the inner handler's, unchanged: the counter must not change how
// either way commits.
crate::handler_around::commit_handler_around!(CountingPuts, inner, {
    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> Result<ManifestLocation, CommitError> {
        let result = self
            .inner
            .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
            .await;
        self.count(&result);
        result
    }

    async fn commit_after(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
        predecessor: &PredecessorIdentity,
    ) -> Result<ManifestLocation, CommitError> {
        let result = self
            .inner
            .commit_after(
                manifest,
                indices,
                base_path,
                object_store,
                manifest_writer,
                naming_scheme,
                transaction,
                predecessor,
            )
            .await;
        self.count(&result);
        result
    }
});
