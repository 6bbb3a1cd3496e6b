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

use futures::stream::BoxStream;
use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter, PredecessorIdentity,
    commit_handler_from_url,
};
use object_store::ObjectStore as OSObjectStore;
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

/// Every method but the two puts is the inner handler's, unchanged: the counter must not change
/// how either way commits.
#[async_trait::async_trait]
impl CommitHandler for CountingPuts {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
    }

    async fn resolve_latest_location(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
    ) -> lance_core::Result<ManifestLocation> {
        self.inner.resolve_latest_location(base_path, object_store).await
    }

    async fn resolve_version_location(
        &self,
        base_path: &Path,
        version: u64,
        object_store: &dyn OSObjectStore,
    ) -> lance_core::Result<ManifestLocation> {
        self.inner.resolve_version_location(base_path, version, object_store).await
    }

    async fn version_exists(
        &self,
        base_path: &Path,
        version: u64,
        object_store: &dyn OSObjectStore,
        naming_scheme: ManifestNamingScheme,
    ) -> lance_core::Result<bool> {
        self.inner.version_exists(base_path, version, object_store, naming_scheme).await
    }

    fn list_detached_manifest_locations<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
    ) -> BoxStream<'a, lance_core::Result<ManifestLocation>> {
        self.inner.list_detached_manifest_locations(base_path, object_store)
    }

    fn list_manifest_locations<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        sorted_descending: bool,
    ) -> BoxStream<'a, lance_core::Result<ManifestLocation>> {
        self.inner.list_manifest_locations(base_path, object_store, sorted_descending)
    }

    fn list_manifest_locations_since<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        since_version: u64,
    ) -> BoxStream<'a, lance_core::Result<ManifestLocation>> {
        self.inner.list_manifest_locations_since(base_path, object_store, since_version)
    }

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

    fn supports_predecessor_condition(&self) -> bool {
        self.inner.supports_predecessor_condition()
    }

    async fn resolve_latest_identity(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
    ) -> lance_core::Result<Option<PredecessorIdentity>> {
        self.inner.resolve_latest_identity(base_path, object_store).await
    }

    async fn resolve_identity(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
        version: u64,
    ) -> lance_core::Result<Option<PredecessorIdentity>> {
        self.inner.resolve_identity(base_path, object_store, version).await
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

    async fn forget_version(&self, base_path: &Path, version: u64, identity: &str) -> lance_core::Result<()> {
        self.inner.forget_version(base_path, version, identity).await
    }

    async fn delete(&self, base_path: &Path) -> lance_core::Result<()> {
        self.inner.delete(base_path).await
    }
}
