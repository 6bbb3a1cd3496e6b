//! `CommitHandler` for a wrapper around another handler: every method but the two manifest puts is
//! the inner handler's, unchanged. A wrapper that gates or watches the puts (`ExpectVersion`, the
//! commit bench's `CountingPuts`) must not change how versions are resolved, listed or forgotten,
//! and Lance's trait gives most methods defaults that would silently differ from the inner
//! handler's. The caller writes `commit` and `commit_after`.

/// `commit_handler_around!(Wrapper, inner_field, { async fn commit(..) .. async fn commit_after(..) .. })`
/// implements `CommitHandler` for `Wrapper`, delegating everything else to `self.inner_field`. The
/// whole impl is generated here, with its `async_trait` attribute, so that the attribute sees every
/// method.
macro_rules! commit_handler_around {
    ($wrapper:ty, $inner:ident, { $($puts:tt)* }) => {
        #[async_trait::async_trait]
        impl lance_table::io::commit::CommitHandler for $wrapper {
            $($puts)*

            fn is_version_not_found_definitive(&self) -> bool {
                self.$inner.is_version_not_found_definitive()
            }

            fn propagate_commit_error_after_success(&self) -> bool {
                self.$inner.propagate_commit_error_after_success()
            }

            async fn resolve_latest_location(
                &self,
                base_path: &object_store::path::Path,
                object_store: &lance_io::object_store::ObjectStore,
            ) -> lance_core::Result<lance_table::io::commit::ManifestLocation> {
                self.$inner.resolve_latest_location(base_path, object_store).await
            }

            async fn resolve_version_location(
                &self,
                base_path: &object_store::path::Path,
                version: u64,
                object_store: &dyn object_store::ObjectStore,
            ) -> lance_core::Result<lance_table::io::commit::ManifestLocation> {
                self.$inner.resolve_version_location(base_path, version, object_store).await
            }

            async fn version_exists(
                &self,
                base_path: &object_store::path::Path,
                version: u64,
                object_store: &dyn object_store::ObjectStore,
                naming_scheme: lance_table::io::commit::ManifestNamingScheme,
            ) -> lance_core::Result<bool> {
                self.$inner.version_exists(base_path, version, object_store, naming_scheme).await
            }

            fn list_detached_manifest_locations<'a>(
                &self,
                base_path: &object_store::path::Path,
                object_store: &'a lance_io::object_store::ObjectStore,
            ) -> futures::stream::BoxStream<'a, lance_core::Result<lance_table::io::commit::ManifestLocation>> {
                self.$inner.list_detached_manifest_locations(base_path, object_store)
            }

            fn list_manifest_locations<'a>(
                &self,
                base_path: &object_store::path::Path,
                object_store: &'a lance_io::object_store::ObjectStore,
                sorted_descending: bool,
            ) -> futures::stream::BoxStream<'a, lance_core::Result<lance_table::io::commit::ManifestLocation>> {
                self.$inner.list_manifest_locations(base_path, object_store, sorted_descending)
            }

            fn list_manifest_locations_since<'a>(
                &self,
                base_path: &object_store::path::Path,
                object_store: &'a lance_io::object_store::ObjectStore,
                since_version: u64,
            ) -> futures::stream::BoxStream<'a, lance_core::Result<lance_table::io::commit::ManifestLocation>> {
                self.$inner.list_manifest_locations_since(base_path, object_store, since_version)
            }

            fn supports_predecessor_condition(&self) -> bool {
                self.$inner.supports_predecessor_condition()
            }

            async fn resolve_latest_identity(
                &self,
                base_path: &object_store::path::Path,
                object_store: &lance_io::object_store::ObjectStore,
            ) -> lance_core::Result<Option<lance_table::io::commit::PredecessorIdentity>> {
                self.$inner.resolve_latest_identity(base_path, object_store).await
            }

            async fn resolve_identity(
                &self,
                base_path: &object_store::path::Path,
                object_store: &lance_io::object_store::ObjectStore,
                version: u64,
            ) -> lance_core::Result<Option<lance_table::io::commit::PredecessorIdentity>> {
                self.$inner.resolve_identity(base_path, object_store, version).await
            }

            async fn forget_version(
                &self,
                base_path: &object_store::path::Path,
                version: u64,
                identity: &str,
            ) -> lance_core::Result<()> {
                self.$inner.forget_version(base_path, version, identity).await
            }

            async fn delete(&self, base_path: &object_store::path::Path) -> lance_core::Result<()> {
                self.$inner.delete(base_path).await
            }
        }
    };
}

pub(crate) use commit_handler_around;
