//! Holes found in review of the commit loop (the soundness item of `design/commit.md`, "Tested
//! (`tests/commit/`)"), each shown on a real dataset: the data must be right after the commit, not
//! only the verdict.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arrow_array::{Array, Int64Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use futures::TryStreamExt;
use futures::stream::BoxStream;
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::transaction::{DataReplacementGroup, Operation, TransactionBuilder};
use lance_actions::{ActionTxn, OperationKind, codec, lift};
use lance_actions_commit::scenario::{Staged, create_sample, stage_append, stage_delete};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_io::object_store::ObjectStore;
use lance_select::RowAddrTreeMap;
use lance_table::format::{IndexMetadata, Manifest, Transaction as FormatTransaction};
use lance_table::io::commit::{
    CommitError as HandlerError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
    commit_handler_from_url,
};
use object_store::ObjectStore as OSObjectStore;
use object_store::path::Path;
use roaring::RoaringBitmap;

use crate::support::{latest, scan_ids};

fn temp_uri(dir: &tempfile::TempDir) -> String {
    dir.path().join("t").to_str().expect("utf-8").to_string()
}

/// `id -> v` over the whole table.
async fn scan_v(ds: &Dataset) -> BTreeMap<i64, Option<i64>> {
    let mut scanner = ds.scan();
    scanner.project(&["id", "v"]).expect("project");
    let batches: Vec<RecordBatch> = scanner.try_into_stream().await.expect("scan").try_collect().await.expect("rows");
    let mut out = BTreeMap::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        let vs = b.column(1).as_any().downcast_ref::<Int64Array>().expect("v");
        for i in 0..b.num_rows() {
            let v = (!vs.is_null(i)).then(|| vs.value(i));
            assert!(out.insert(ids.value(i), v).is_none(), "id {} appears twice", ids.value(i));
        }
    }
    out
}

/// Commit, with plain Lance, an overlay of column `v` on fragment 0 giving rows at offsets 0 and 1
/// (ids 0 and 1) the values 777 and 778.
async fn commit_overlay_on_fragment0(ds: &Arc<Dataset>) -> Arc<Dataset> {
    let schema = ds.schema().project(&["v"]).expect("project v");
    let fragment = ds.get_fragment(0).expect("fragment 0");
    let mut writer = fragment.write_overlay(&schema).await.map_err(lance::Error::from).expect("overlay writer");
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![
            Field::new("_rowaddr", DataType::UInt64, false),
            Field::new("v", DataType::Int64, true),
        ])),
        vec![Arc::new(UInt64Array::from(vec![0u64, 1])), Arc::new(Int64Array::from(vec![777i64, 778]))],
    )
    .expect("overlay batch");
    writer.write_batch(&batch).await.map_err(lance::Error::from).expect("write overlay");
    let group = writer.finish().await.map_err(lance::Error::from).expect("finish overlay").expect("a group");
    let txn = TransactionBuilder::new(ds.manifest().version, Operation::DataOverlay { groups: vec![group] }).build();
    Arc::new(CommitBuilder::new(ds.clone()).execute(txn).await.expect("overlay commits"))
}

/// A data replacement of fragment 0 staged at the read version, then a committed overlay on
/// a column it replaces: the driver commits with the head as its read version, so Lance would
/// tombstone the overlay's newer values. The driver retries instead; either way the cells read the
/// overlay's values.
#[tokio::test]
async fn a_data_replacement_after_a_committed_overlay_keeps_the_overlay_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    // A real replacement file: a copy of fragment 0's data file (same fields, same values).
    let mut file = ds.manifest().fragments[0].files[0].clone();
    let data = dir.path().join("t").join("data");
    std::fs::copy(data.join(&file.path), data.join("replacement-0.lance")).expect("copy data file");
    file.path = "replacement-0.lance".into();
    let op = Operation::DataReplacement { replacements: vec![DataReplacementGroup(0, file)] };
    let staged = TransactionBuilder::new(ds.manifest().version, op).build();

    let after_overlay = commit_overlay_on_fragment0(&ds).await;
    assert_eq!(scan_v(&after_overlay).await[&0], Some(777), "the overlay is visible before our commit");

    match ds.action_commit().execute(staged).await {
        Err(CommitError::Retry { reason, .. }) => {
            assert_eq!(reason.peer_version, Some(after_overlay.manifest().version));
            assert_eq!(latest(&uri).await.manifest().version, after_overlay.manifest().version, "nothing landed");
        }
        Ok(_) => {}
        Err(other) => panic!("unexpected error: {other}"),
    }
    let now = scan_v(&*latest(&uri).await).await;
    assert_eq!((now[&0], now[&1], now[&2]), (Some(777), Some(778), Some(20)), "the overlay's values survive");
}

/// A row-moving update that removes the whole of fragment 0, after a committed overlay on
/// it: landing would drop the overlay's values (the moved rows were read before it). It retries.
#[tokio::test]
async fn a_whole_fragment_removal_by_an_update_after_an_overlay_retries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let delete = stage_delete(&ds, "move", "id < 8").await.expect("stage the move-out");
    let append = stage_append(&ds, "move", &(0..8).collect::<Vec<_>>()).await.expect("stage the move-in");
    let (Operation::Delete { updated_fragments, deleted_fragment_ids, .. }, Operation::Append { fragments }) =
        (delete.txn.operation, append.txn.operation)
    else {
        panic!("unexpected staged shapes");
    };
    assert_eq!(deleted_fragment_ids, vec![0], "the update removes fragment 0 whole");
    let op = lance_actions::samples::row_moving_update(deleted_fragment_ids, updated_fragments, fragments);
    let staged = TransactionBuilder::new(ds.manifest().version, op).build();

    let after_overlay = commit_overlay_on_fragment0(&ds).await;
    let err = ds.action_commit().execute(staged).await.expect_err("must not land over the overlay");
    match err {
        CommitError::Retry { reason, .. } => assert_eq!(reason.peer_version, Some(after_overlay.manifest().version)),
        other => panic!("expected Retry, got {other}"),
    }
    let now = latest(&uri).await;
    assert_eq!(now.manifest().version, after_overlay.manifest().version, "nothing landed");
    assert_eq!(scan_v(&now).await[&0], Some(777));
}

/// A writer in between: from `ds` (the version ours was staged on), Lance's own commit of a delete
/// of row 3 (fragment 0).
async fn a_peer_deletes_row_3(ds: &Arc<Dataset>) {
    let peer = stage_delete(ds, "peer", "id = 3").await.expect("stage peer");
    CommitBuilder::new(ds.clone()).execute(peer.txn).await.expect("peer commits");
}

/// We delete rows {1, 2} of fragment 0 but declare only {1}; a peer deleted row 3 of the
/// same fragment. The declared rows are checked against the staged deletion file, so the merged
/// vector holds 1, 2 and 3.
#[tokio::test]
async fn declared_rows_are_checked_against_the_staged_deletion_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let ours = stage_delete(&ds, "ours", "id IN (1, 2)").await.expect("stage ours");
    a_peer_deletes_row_3(&ds).await;
    let mut declared = RowAddrTreeMap::default();
    declared.insert_bitmap(0, RoaringBitmap::from_iter([1u32]));
    let (landed, _) =
        ds.action_commit().with_affected_rows(declared).execute(ours.txn).await.expect("row-disjoint: lands");
    let (ids, total) = scan_ids(&landed).await;
    assert!(!ids.contains(&1) && !ids.contains(&2) && !ids.contains(&3), "rows 1, 2, 3 are all gone");
    assert_eq!(total, 29);
}

/// Declared rows that match the staged deletion file are kept (the fast path is not lost).
#[tokio::test]
async fn honest_declared_rows_still_land_a_row_disjoint_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let ours = stage_delete(&ds, "ours", "id IN (1, 2)").await.expect("stage ours");
    a_peer_deletes_row_3(&ds).await;
    let rows = ours.affected_rows.clone().expect("Lance reports the rows");
    let (landed, _) = ds.action_commit().with_affected_rows(rows).execute(ours.txn).await.expect("lands");
    assert_eq!(scan_ids(&landed).await.1, 29);
}

/// A delete staged by `stage_delete` carries the rows Lance reported, which the commit uses without
/// reading the deletion files back. Behind a writer of the same fragment, judged both at the write
/// (from the stale handle: Lance's listing finds the writer) and by the loop before it (from a handle
/// that already knows the writer), it lands with its rows and the writer's, and no other row goes.
#[tokio::test]
async fn a_delete_we_staged_behind_a_writer_of_its_fragment_lands_exactly_its_rows() {
    for handle_knows_the_writer in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir);
        let ds = create_sample(&uri).await.expect("sample");
        let ours = lance_actions_commit::stage_delete(&ds, "id IN (1, 2)").await.expect("stage ours");
        assert_eq!(ours.num_deleted_rows(), 2);
        a_peer_deletes_row_3(&ds).await;
        let through = if handle_knows_the_writer { latest(&uri).await } else { ds.clone() };
        let (landed, report) = through.action_commit().execute_delete(ours).await.expect("row-disjoint: lands");
        assert_eq!(report.attempts.len(), 1, "no second attempt: {report:?}");
        assert_eq!(report.peers_checked(), 1, "the writer was judged: {report:?}");
        let at_write = report.attempts[0].at_write.is_some();
        assert_eq!(at_write, !handle_knows_the_writer, "judged at the write exactly from the stale handle: {report:?}");
        let (ids, total) = scan_ids(&landed).await;
        assert!(![1, 2, 3].iter().any(|id| ids.contains(id)), "rows 1, 2, 3 are all gone: {ids:?}");
        assert!(ids.contains(&0) && ids.contains(&4), "no other row went: {ids:?}");
        assert_eq!(total, 29, "handle knows the writer: {handle_knows_the_writer}");
    }
}

/// On a table with stable row ids (Lance maps the rows it matched from ids to addresses), a delete
/// staged here that removes a whole fragment (ids 24 to 31) and rows of another (1 and 2), behind a
/// writer that deleted row 3 of that other fragment: Lance's reported rows for fragment 0 are the
/// vector's new rows exactly, the removed fragment's rows ride on the fragment's removal, and every
/// delete holds.
#[tokio::test]
async fn a_delete_we_staged_on_a_stable_row_id_table_removing_a_fragment_lands_exactly_its_rows() {
    use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let params = WriteParams {
        mode: WriteMode::Create,
        max_rows_per_file: 8,
        enable_stable_row_ids: true,
        ..Default::default()
    };
    let ids: Vec<i64> = (0..32).collect();
    let batch = lance_actions_commit::scenario::batch(&ids).expect("rows");
    let ds =
        Arc::new(InsertBuilder::new(uri.as_str()).with_params(&params).execute(vec![batch]).await.expect("create"));
    assert!(ds.manifest().uses_stable_row_ids(), "the table uses stable row ids");
    let ours = lance_actions_commit::stage_delete(&ds, "id IN (1, 2) OR id >= 24").await.expect("stage ours");
    assert_eq!(ours.num_deleted_rows(), 10);
    let Operation::Delete { deleted_fragment_ids, updated_fragments, .. } = &ours.transaction().operation else {
        panic!("a delete")
    };
    assert_eq!((deleted_fragment_ids.len(), updated_fragments.len()), (1, 1), "one fragment goes, one is updated");
    a_peer_deletes_row_3(&ds).await;
    let (landed, report) = ds.action_commit().execute_delete(ours).await.expect("row-disjoint: lands");
    assert_eq!(report.attempts.len(), 1, "{report:?}");
    let (ids, total) = scan_ids(&landed).await;
    let expected: Vec<i64> = (0..24).filter(|id| ![1, 2, 3].contains(id)).collect();
    assert_eq!(ids.iter().copied().collect::<Vec<_>>(), expected, "exactly rows 1, 2, 3 and 24 to 31 are gone");
    assert_eq!(total, 21);
}

/// A delete staged on a branch commits on that branch, and is refused on main (another table as
/// far as its rows go): typed, nothing written there.
#[tokio::test]
async fn a_delete_we_staged_on_a_branch_lands_there_and_is_refused_on_main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let mut main = Dataset::open(&uri).await.expect("open main");
    let at = main.manifest().version;
    let branch = Arc::new(main.create_branch("feature", at, None).await.expect("create the branch"));
    let staged = lance_actions_commit::stage_delete(&branch, "id = 5").await.expect("stage on the branch");
    let refused = ds.action_commit().execute_delete(staged.clone()).await;
    assert!(matches!(refused, Err(CommitError::StagedElsewhere { .. })), "{refused:?}");
    assert_eq!(latest(&uri).await.manifest().version, at, "nothing landed on main");
    let (landed, _) = branch.action_commit().execute_delete(staged).await.expect("lands on the branch");
    let (ids, total) = scan_ids(&landed).await;
    assert!(!ids.contains(&5) && total == 31, "the branch lost row 5 only: {ids:?}");
    assert_eq!(scan_ids(&*latest(&uri).await).await.1, 32, "main keeps every row");
}

/// A delete staged on one table cannot be committed to another: refused, typed, and neither
/// table changes.
#[tokio::test]
async fn a_delete_staged_on_one_table_is_refused_on_another_and_nothing_is_written() {
    let (dir_a, dir_b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (uri_a, uri_b) = (temp_uri(&dir_a), temp_uri(&dir_b));
    let a = create_sample(&uri_a).await.expect("sample a");
    let b = create_sample(&uri_b).await.expect("sample b");
    let staged = lance_actions_commit::stage_delete(&a, "id = 1").await.expect("stage on a");
    let err = b.action_commit().execute_delete(staged).await.expect_err("a's delete on b");
    match &err {
        CommitError::StagedElsewhere { staged_on, committing_to } => {
            assert!(staged_on.contains(dir_a.path().to_str().expect("utf-8")), "{err}");
            assert!(committing_to.contains(dir_b.path().to_str().expect("utf-8")), "{err}");
        }
        other => panic!("expected StagedElsewhere, got {other}"),
    }
    assert!(err.to_string().contains("stage it on the table it is committed to"), "{err}");
    for (uri, ds) in [(&uri_a, &a), (&uri_b, &b)] {
        let now = latest(uri).await;
        assert_eq!(now.manifest().version, ds.manifest().version, "nothing landed on {uri}");
        assert_eq!(scan_ids(&now).await.1, 32, "every row of {uri} is there");
    }
}

/// A commit handler that writes through the real one, then answers "conflict" and cannot read the
/// version back: the answer of a manifest write that landed is lost (as on an object store whose
/// conditional PUT response was dropped and retried).
#[derive(Debug)]
struct LostAnswer {
    inner: Arc<dyn CommitHandler>,
    commits: AtomicUsize,
    wrote: AtomicBool,
}

#[async_trait::async_trait]
impl CommitHandler for LostAnswer {
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
        if self.wrote.load(Ordering::SeqCst) {
            return Err(lance::Error::io("the store did not answer the read-back"));
        }
        self.inner.resolve_version_location(base_path, version, object_store).await
    }

    fn list_manifest_locations<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        sorted_descending: bool,
    ) -> BoxStream<'a, lance_core::Result<ManifestLocation>> {
        self.inner.list_manifest_locations(base_path, object_store, sorted_descending)
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<FormatTransaction>,
    ) -> Result<ManifestLocation, HandlerError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner
            .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
            .await?;
        self.wrote.store(true, Ordering::SeqCst);
        Err(HandlerError::CommitConflict)
    }
}

/// The manifest write lands but its answer is lost: the loop reports
/// `CommitStatusUnknown` instead of committing again, and re-running the same staged transaction
/// recognises the landed version by its uuid. Exactly one version carries the uuid. The handler
/// passed with `with_commit_handler` is the one our compare-and-swap wrapper writes through.
#[tokio::test]
async fn a_landed_commit_whose_answer_was_lost_never_lands_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let before = ds.manifest().version;
    let staged = stage_append(&ds, "lost", &[500]).await.expect("stage");
    let uuid = staged.txn.uuid.clone();
    let inner = commit_handler_from_url(&uri, &None).await.expect("handler");
    let handler = Arc::new(LostAnswer { inner, commits: AtomicUsize::new(0), wrote: AtomicBool::new(false) });
    let err = ds
        .action_commit()
        .with_commit_handler(handler.clone())
        .execute(staged.txn.clone())
        .await
        .expect_err("the status is unknown");
    assert!(matches!(&err, CommitError::CommitStatusUnknown { uuid: u, .. } if *u == uuid), "{err}");
    assert_eq!(handler.commits.load(Ordering::SeqCst), 1, "the caller's handler was wrapped and written once");

    let (landed, report) = ds.action_commit().execute(staged.txn).await.expect("recognised as landed");
    assert_eq!(report.version, before + 1);
    assert_eq!(landed.manifest().version, before + 1);
    let head = latest(&uri).await;
    assert_eq!(head.manifest().version, before + 1, "nothing was written again");
    let mut carrying = 0;
    for v in before + 1..=head.manifest().version {
        let txn = head.read_transaction_by_version(v).await.expect("read").expect("txn");
        carrying += usize::from(txn.uuid == uuid);
    }
    assert_eq!(carrying, 1, "exactly one version carries the transaction");
    let (ids, total) = scan_ids(&head).await;
    assert!(ids.contains(&500));
    assert_eq!(total, 33, "row 500 is there once");
}

/// A caller cannot set this project's own properties.
#[tokio::test]
async fn reserved_properties_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let head = ds.manifest().version;
    for key in [codec::PROPERTY_KEY, "lance-actions.history", "lance-actions.replay.source-txn", "lance-actions.x"] {
        let staged = stage_append(&ds, "spoof", &[600]).await.expect("stage");
        let props = HashMap::from([(key.to_string(), "spoofed".to_string())]);
        let err = ds.action_commit().with_properties(props).execute(staged.txn).await.expect_err("refused");
        assert!(matches!(&err, CommitError::ReservedProperty { key: k } if k == key), "{key}: {err}");
    }
    assert_eq!(latest(&uri).await.manifest().version, head, "nothing was written");
    let mine = HashMap::from([("app.note".to_string(), "fine".to_string())]);
    let staged = stage_append(&ds, "ok", &[601]).await.expect("stage");
    let (landed, _) = ds.action_commit().with_properties(mine).execute(staged.txn).await.expect("lands");
    let txn = landed.read_transaction().await.expect("read").expect("txn");
    assert_eq!(txn.transaction_properties.expect("props")["app.note"], "fine");
}

/// Replay provenance rides only on a transaction claiming those replay origins, and a
/// history transaction committed again (with its properties) does not carry its provenance over.
#[tokio::test]
async fn replay_provenance_cannot_be_spoofed_by_recommitting_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let staged = stage_append(&ds, "replayed", &[700]).await.expect("stage");
    let mut txn: ActionTxn = lift(&staged.txn.operation);
    txn.context.replay_origins = vec!["origin-1".into()];
    let provenance = HashMap::from([("lance-actions.replay.source-txn".to_string(), "origin-1".to_string())]);
    let wrong = HashMap::from([("lance-actions.replay.source-txn".to_string(), "origin-2".to_string())]);
    let err = ds.action_commit().with_properties(wrong).execute_actions(ds.manifest().version, txn.clone()).await;
    assert!(matches!(err, Err(CommitError::ReservedProperty { .. })), "an origin the context does not claim");
    let (replayed, _) = ds
        .action_commit()
        .with_properties(provenance)
        .execute_actions(ds.manifest().version, txn)
        .await
        .expect("a replay with its own origins lands");
    let history = replayed.read_transaction().await.expect("read").expect("txn");
    assert!(history.transaction_properties.as_ref().expect("props").contains_key("lance-actions.replay.source-txn"));

    // Re-commit the history transaction as a new write, properties and all.
    let spoof = TransactionBuilder::new(replayed.manifest().version, history.operation.clone())
        .transaction_properties(history.transaction_properties.clone())
        .build();
    let replayed = Arc::new(replayed);
    let (landed, _) = replayed.action_commit().execute(spoof).await.expect("lands as a plain append");
    let again = landed.read_transaction().await.expect("read").expect("txn");
    let props = again.transaction_properties.expect("props");
    assert!(!props.contains_key("lance-actions.replay.source-txn"), "provenance was not copied");
    let decoded = codec::decode_property(&props[codec::PROPERTY_KEY]).expect("decodes");
    assert!(decoded.context.replay_origins.is_empty(), "no replay origin was copied");
    assert_eq!(decoded.context.shell, OperationKind::Append);
}

/// A foreign writer copies our encoded action list onto another operation: the next commit
/// through the driver refuses to read it (`PeerActions`), and writes nothing.
#[tokio::test]
async fn an_action_list_copied_onto_another_operation_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let delete = stage_delete(&ds, "ours", "id = 1").await.expect("stage");
    let (after_delete, _) = ds.action_commit().execute(delete.txn).await.expect("lands");
    let copied = after_delete.read_transaction().await.expect("read").expect("txn").transaction_properties;
    let after_delete = Arc::new(after_delete);
    let append = stage_append(&after_delete, "foreign", &[800]).await.expect("stage");
    let foreign =
        TransactionBuilder::new(append.txn.read_version, append.txn.operation).transaction_properties(copied).build();
    let head =
        CommitBuilder::new(after_delete.clone()).execute(foreign).await.expect("foreign commits").manifest().version;

    let ours = stage_delete(&after_delete, "next", "id = 2").await.expect("stage");
    let err = after_delete.action_commit().execute(ours.txn).await.expect_err("refused");
    match err {
        CommitError::Layer {
            source:
                lance_actions_commit::Error::PeerActions { version, source: lance_actions::Error::ActionsMismatch { .. } },
        } => assert_eq!(version, head),
        other => panic!("expected PeerActions(ActionsMismatch), got {other}"),
    }
    assert_eq!(latest(&uri).await.manifest().version, head, "nothing was written");
}

/// Commit three pure deletes of fragment 0 with plain Lance, each staged on the head the one before
/// it made (so each vector holds the ones before it), then remove every deletion file but `keep`:
/// the earlier writers' vectors, which no version from the third on reads. Returns the head.
async fn three_deletes_then_only_the_newest_vector(uri: &str, ours: &Staged) -> Arc<Dataset> {
    for predicate in ["id = 2", "id = 3", "id = 4"] {
        let head = latest(uri).await;
        let peer = stage_delete(&head, "peer", predicate).await.expect("stage a peer");
        CommitBuilder::new(head).execute(peer.txn).await.expect("a peer commits");
    }
    let head = latest(uri).await;
    let file_of = |fragments: &[lance_table::format::Fragment]| {
        let fragment = fragments.iter().find(|f| f.id == 0).expect("fragment 0");
        let file = fragment.deletion_file.as_ref().expect("a deletion file");
        lance_table::io::deletion::relative_deletion_file_path(0, file)
    };
    let Operation::Delete { updated_fragments, .. } = &ours.txn.operation else { panic!("a delete") };
    let keep = [file_of(&head.manifest().fragments), file_of(updated_fragments)];
    let dir = std::path::Path::new(uri).join("_deletions");
    let mut removed = 0;
    for entry in std::fs::read_dir(&dir).expect("the deletions directory") {
        let path = entry.expect("an entry").path();
        let relative = format!("_deletions/{}", path.file_name().and_then(|n| n.to_str()).expect("a name"));
        if !keep.contains(&relative) {
            std::fs::remove_file(&path).expect("remove an earlier vector");
            removed += 1;
        }
    }
    assert_eq!(removed, 2, "the first two writers' vectors are gone; the newest and ours stay");
    head
}

/// A delete behind three pure deletes of its fragment is judged through the newest writer's
/// deletion vector alone (`UpdateDeletionVector::superseded`): with the earlier writers' files
/// gone from disk, ours still lands in one attempt, and all four deletes hold.
#[tokio::test]
async fn a_delete_behind_deletes_of_its_fragment_reads_only_the_newest_vector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let ours = stage_delete(&ds, "ours", "id = 1").await.expect("stage ours");
    // Committed through a handle on the head, so that the first attempt judges all three writers.
    let head = three_deletes_then_only_the_newest_vector(&uri, &ours).await;
    let (landed, report) = head.action_commit().execute(ours.txn).await.expect("row-disjoint: lands");
    assert_eq!(report.attempts.len(), 1, "no second attempt: {:?}", report.attempts);
    assert_eq!(report.attempts[0].peers.len(), 3, "all three writers judged");
    let (ids, total) = scan_ids(&landed).await;
    assert!([1, 2, 3, 4].iter().all(|id| !ids.contains(id)), "rows 1 to 4 are all gone: {ids:?}");
    assert_eq!(total, 28);
}

/// The newest vector holds the earlier writers' rows: a delete of a row the first writer deleted is
/// refused with a Retry (its count would be wrong), though that writer's own file is gone, and
/// nothing is written.
#[tokio::test]
async fn a_delete_of_a_row_an_earlier_writer_deleted_is_found_in_the_newest_vector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let ds = create_sample(&uri).await.expect("sample");
    let ours = stage_delete(&ds, "ours", "id IN (1, 2)").await.expect("stage ours");
    let head = three_deletes_then_only_the_newest_vector(&uri, &ours).await;
    let refused = head.action_commit().execute(ours.txn).await;
    let Err(CommitError::Retry { reason, .. }) = refused else {
        panic!("row 2 was deleted by the first writer: a Retry, not {refused:?}");
    };
    assert_eq!(reason.peer_version, Some(head.manifest().version), "blamed on the newest vector's writer");
    let now = latest(&uri).await;
    assert_eq!(now.manifest().version, head.manifest().version, "nothing written");
    let (ids, total) = scan_ids(&now).await;
    assert!(ids.contains(&1), "our row 1 is still there");
    assert_eq!(total, 29);
}
