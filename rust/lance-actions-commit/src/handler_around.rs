//! `CommitHandler` for a wrapper around another handler. A wrapper gates or watches the manifest
//! puts (`ExpectVersion`, the commit bench's `CountingPuts`); everything else is the inner
//! handler's, unchanged: a wrapper must not change how versions are resolved, listed or forgotten,
//! and Lance's trait gives most methods defaults that would silently differ from the inner
//! handler's. Both puts (`commit`, `commit_after`) run the same two hooks around the inner put.

/// `commit_handler_around!(Wrapper, inner_field)` implements `CommitHandler` for `Wrapper`,
/// delegating to `self.inner_field`. `Wrapper` provides two inherent methods, run around each put:
/// - `async fn before_put(&self, built: Built<'_>) -> Result<G, CommitError>`: `Err` refuses the
///   put (nothing is written and the error is Lance's answer); `Ok` carries what `after_put` needs;
/// - `fn after_put(&self, result: &Result<ManifestLocation, CommitError>, version: u64, gate: G)`.
///
/// The whole impl is generated here, with its `async_trait` attribute, so that the attribute sees
/// every method.
macro_rules! commit_handler_around {
    ($wrapper:ty, $inner:ident) => {
        #[async_trait::async_trait]
        impl lance_table::io::commit::CommitHandler for $wrapper {
            async fn commit(
                &self,
                manifest: &mut lance_table::format::Manifest,
                indices: Option<Vec<lance_table::format::IndexMetadata>>,
                base_path: &object_store::path::Path,
                object_store: &lance_io::object_store::ObjectStore,
                manifest_writer: lance_table::io::commit::ManifestWriter,
                naming_scheme: lance_table::io::commit::ManifestNamingScheme,
                transaction: Option<lance_table::format::Transaction>,
            ) -> Result<lance_table::io::commit::ManifestLocation, lance_table::io::commit::CommitError> {
                let built = crate::expect_version::Built {
                    manifest: &*manifest,
                    indices: indices.as_deref(),
                    transaction: transaction.as_ref(),
                };
                let gate = self.before_put(built).await?;
                let version = manifest.version;
                let result = self
                    .$inner
                    .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
                    .await;
                self.after_put(&result, version, gate);
                result
            }

            async fn commit_after(
                &self,
                manifest: &mut lance_table::format::Manifest,
                indices: Option<Vec<lance_table::format::IndexMetadata>>,
                base_path: &object_store::path::Path,
                object_store: &lance_io::object_store::ObjectStore,
                manifest_writer: lance_table::io::commit::ManifestWriter,
                naming_scheme: lance_table::io::commit::ManifestNamingScheme,
                transaction: Option<lance_table::format::Transaction>,
                predecessor: &lance_table::io::commit::PredecessorIdentity,
            ) -> Result<lance_table::io::commit::ManifestLocation, lance_table::io::commit::CommitError> {
                let built = crate::expect_version::Built {
                    manifest: &*manifest,
                    indices: indices.as_deref(),
                    transaction: transaction.as_ref(),
                };
                let gate = self.before_put(built).await?;
                let version = manifest.version;
                let result = self
                    .$inner
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
                self.after_put(&result, version, gate);
                result
            }

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
