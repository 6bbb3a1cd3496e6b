//! Faults of a remote store. The server goes away in the middle of a run of commits and comes back:
//! writers see typed errors, never a panic, nothing is lost and nothing lands twice, and the next
//! commit lands. And a manifest write whose response is lost after the object landed (an injected
//! object store that performs the write, then reports a failure): the commit is recognised as ours
//! or reported `CommitStatusUnknown`, and re-running it never lands it a second time.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::transaction::Transaction;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_io::object_store::{ObjectStoreParams, WrappingObjectStore};
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};

use crate::Ctx;
use crate::support::{rows, scan};

const COMMITS: i64 = 8;
/// The commit that meets the stopped server.
const OUTAGE_AT: i64 = 3;

async fn create(uri: &str) -> Arc<Dataset> {
    let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
    Arc::new(InsertBuilder::new(uri).with_params(&params).execute(vec![rows(&[(0, 0)])]).await.expect("create"))
}

/// Stage an append of `ids` on the head, waiting out an outage (staging writes data objects).
async fn stage_when_reachable(uri: &str, ids: &[i64]) -> (Arc<Dataset>, Transaction) {
    let batch: Vec<(i64, i64)> = ids.iter().map(|i| (*i, *i)).collect();
    for _ in 0..120 {
        let Ok(ds) = Dataset::open(uri).await else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let ds = Arc::new(ds);
        let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
        if let Ok(txn) =
            InsertBuilder::new(ds.clone()).with_params(&params).execute_uncommitted(vec![rows(&batch)]).await
        {
            return (ds, txn);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the server never came back");
}

pub async fn a_stopped_server_gives_typed_errors_and_the_next_commit_lands(cx: &Ctx<'_>) {
    let uri = cx.uri("outage");
    create(&uri).await;
    // The writer stages commit OUTAGE_AT, then waits for the server to be stopped before it commits.
    let staged = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::new(tokio::sync::Notify::new());
    let writer = {
        let (uri, staged, stopped) = (uri.clone(), staged.clone(), stopped.clone());
        tokio::spawn(async move {
            let mut errors = Vec::new();
            for n in 1..=COMMITS {
                let (ds, txn) = stage_when_reachable(&uri, &[n * 10, n * 10 + 1]).await;
                if n == OUTAGE_AT {
                    staged.notify_one();
                    stopped.notified().await;
                }
                // The same staged transaction (same uuid) until it is known to have landed.
                let mut landed = false;
                for _ in 0..120 {
                    match ds.action_commit().execute(txn.clone()).await {
                        Ok(_) => {
                            landed = true;
                            break;
                        }
                        Err(e) => {
                            errors.push(kind(&e));
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                    }
                }
                assert!(landed, "commit {n} never landed after the server came back");
            }
            errors
        })
    };
    staged.notified().await;
    cx.s3.stop();
    stopped.notify_one();
    // A reader meets the outage as a typed error too.
    assert!(Dataset::open(&uri).await.is_err(), "opening the table while the server is down succeeded");
    tokio::time::sleep(Duration::from_secs(3)).await;
    cx.s3.restart();
    let errors = writer.await.expect("the writer did not panic");
    assert!(!errors.is_empty(), "the outage never reached a commit: the test proved nothing");
    let ds = Dataset::open(&uri).await.expect("open after the outage");
    let (found, total) = scan(&ds).await;
    let mut expected: BTreeMap<i64, i64> = BTreeMap::from([(0, 0)]);
    for n in 1..=COMMITS {
        expected.extend([(n * 10, n * 10), (n * 10 + 1, n * 10 + 1)]);
    }
    assert_eq!(total, found.len(), "a commit landed twice");
    assert_eq!(found, expected, "rows lost across the outage");
    assert_eq!(ds.manifest().version, 1 + COMMITS as u64, "one version per commit, none twice");
    println!(
        "    outage: {} typed errors met by the writer ({:?}), then every commit landed once",
        errors.len(),
        dedup(&errors)
    );
}

/// The error's kind, as a caller would match it.
fn kind(e: &CommitError) -> &'static str {
    match e {
        CommitError::CommitStatusUnknown { .. } => "CommitStatusUnknown",
        CommitError::Layer { .. } => "Layer (storage)",
        CommitError::CommitHandler { .. } => "CommitHandler",
        CommitError::Retry { .. } => "Retry",
        CommitError::RetriesExhausted { .. } => "RetriesExhausted",
        other => panic!("an outage gave an unexpected error: {other}"),
    }
}

fn dedup(kinds: &[&'static str]) -> Vec<&'static str> {
    let mut v = kinds.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

pub async fn a_lost_manifest_response_lands_once(cx: &Ctx<'_>) {
    lost_response_lands_once(cx, "lost-response", Loss::ErrorAfterWrite).await;
}

/// The other way a lost response plays out: the client's own retry sends the manifest again, and
/// the conditional create refuses it (412), because the first attempt's object is there.
pub async fn a_retried_manifest_write_meeting_its_own_object_lands_once(cx: &Ctx<'_>) {
    lost_response_lands_once(cx, "retried-manifest", Loss::RetriedIntoItself).await;
}

async fn lost_response_lands_once(cx: &Ctx<'_>, name: &str, loss: Loss) {
    let uri = cx.uri(name);
    create(&uri).await;
    let wrapper = Arc::new(LoseManifestResponse { loss, flags: Arc::default() });
    let params = ObjectStoreParams { object_store_wrapper: Some(wrapper.clone()), ..Default::default() };
    let ds = Arc::new(
        DatasetBuilder::from_uri(&uri)
            .with_read_params(lance::dataset::ReadParams { store_options: Some(params), ..Default::default() })
            .load()
            .await
            .expect("open through the injected store"),
    );
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(vec![rows(&[(7, 7)])])
        .await
        .expect("stage");
    wrapper.flags.armed.store(true, Ordering::SeqCst);
    let first = ds.action_commit().execute(txn.clone()).await;
    assert!(wrapper.flags.lost.load(Ordering::SeqCst), "no manifest write was intercepted");
    let how = match &first {
        Ok((landed, _)) => format!("recognised as ours at v{}", landed.manifest().version),
        Err(CommitError::CommitStatusUnknown { .. }) => {
            // Run again with the same transaction: the loop finds its uuid in the history.
            let (landed, _) = ds.action_commit().execute(txn.clone()).await.expect("the re-run reports the landing");
            format!("CommitStatusUnknown, then the re-run found it at v{}", landed.manifest().version)
        }
        Err(other) => panic!("a lost response gave {other}"),
    };
    // And a third run of the same transaction still does not land it again.
    let (again, _) = ds.action_commit().execute(txn).await.expect("a re-run of a landed commit");
    let head = Dataset::open(&uri).await.expect("open");
    assert_eq!(again.manifest().version, head.manifest().version, "a re-run wrote a new version");
    assert_eq!(head.manifest().version, 2, "the commit landed more than once (or not at all)");
    let (found, total) = scan(&head).await;
    assert_eq!((total, found), (2, BTreeMap::from([(0, 0), (7, 7)])), "the row must be there exactly once");
    println!("    {name} ({loss:?}): {how}");
}

/// How the response of a landed manifest write is lost.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// The caller hears a connection error.
    ErrorAfterWrite,
    /// The same put is sent again, as object_store's retry does after a lost response, and the
    /// caller hears what the store answers that second put (the conditional create's refusal).
    RetriedIntoItself,
}

/// Performs a manifest write (`_versions/*.manifest`) and then, once armed, fails as if its
/// response had been lost on the way back: the object is in the store, the caller hears an error.
#[derive(Debug)]
struct LoseManifestResponse {
    loss: Loss,
    flags: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    armed: AtomicBool,
    lost: AtomicBool,
}

impl WrappingObjectStore for LoseManifestResponse {
    fn wrap(&self, _prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Lossy { inner: original, loss: self.loss, flags: self.flags.clone() })
    }

    // Listings are only observed, never changed: keep Lance's paginated listing as it is.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        Some(original)
    }
}

#[derive(Debug)]
struct Lossy {
    inner: Arc<dyn ObjectStore>,
    loss: Loss,
    flags: Arc<Flags>,
}

impl fmt::Display for Lossy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lossy({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Lossy {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let manifest = location.as_ref().contains("_versions/") && location.as_ref().ends_with(".manifest");
        let result = self.inner.put_opts(location, payload.clone(), opts.clone()).await;
        if !(manifest && result.is_ok() && self.flags.armed.swap(false, Ordering::SeqCst)) {
            return result;
        }
        self.flags.lost.store(true, Ordering::SeqCst);
        match self.loss {
            Loss::ErrorAfterWrite => Err(object_store::Error::Generic {
                store: "S3",
                source: "connection reset by peer before the response arrived".into(),
            }),
            Loss::RetriedIntoItself => match self.inner.put_opts(location, payload, opts).await {
                Ok(_) => panic!("the store accepted a second conditional create of {location}"),
                Err(refused) => Err(refused),
            },
        }
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
