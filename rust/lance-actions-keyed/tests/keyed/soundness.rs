//! Keyed soundness: key columns are never rewritten in place and a restore keeps the class
//! (`design/fencing.md`, "1. Table classes live in the manifest, and the action model enforces
//! them"), the migration's class step reads the rows it verified ("6. Migration
//! (`lance_actions_keyed::migrate`, `lance-actions keyed migrate <uri> --key id`)"), and bad input
//! never half-writes ("2. Write routing, one action sequence per chunk"). Each test runs on a real
//! dataset and checks the rows, not only the verdict.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions::actions::change_schema::ChangeSchema;
use lance_actions::actions::update_config::UpdateConfig;
use lance_actions::path::ConfigMap;
use lance_actions::table_class::{KEY_NAMES_KEY, KEYED, TABLE_CLASS_KEY};
use lance_actions::{ActionTxn, OperationKind, Rule};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_actions_keyed::{ChunkLimits, Error, KeyedTable, WriteOptions, migrate};
use lance_table::format::overlay::{DataOverlayFile, OverlayCoverage};
use lance_table::format::{DataFile, Fragment};
use lance_table::transaction::{DataOverlayGroup, DataReplacementGroup, UpdateMap, UpdateMapEntry, UpdateMode};
use roaring::RoaringBitmap;

use crate::support::*;

/// Ids 1..=100 with 81 written as 80: what an in-place key rewrite would put in the table.
fn ids_with_81_as_80() -> Vec<i64> {
    (1..=100).map(|i| if i == 81 { 80 } else { i }).collect()
}

/// A keyed table with ids 1..=100 in one fragment, and a data file (not committed) holding the
/// same rows with 81 replaced by 80, covering every field as the table's own file does.
async fn keyed_with_rewritten_file(uri: &str) -> (Arc<Dataset>, Fragment, DataFile) {
    let table = keyed_table(uri, &(1..=100).collect::<Vec<_>>()).await;
    let ds = table.dataset().clone();
    let staged = InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![
            RecordBatch::try_new(table.arrow_schema().clone(), rows(&ids_with_81_as_80(), 0).columns().to_vec())
                .expect("batch"),
        ])
        .await
        .expect("write the rewritten file");
    let Operation::Append { fragments } = staged.operation else { panic!("an append") };
    let fragment = ds.manifest().fragments[0].clone();
    assert_eq!(fragment.files.len(), 1);
    (ds, fragment, fragments[0].files[0].clone())
}

/// Commit `op` through the driver; it must be refused as invalid, and the table keep ids 1..=100.
async fn assert_refused_and_unchanged(ds: &Arc<Dataset>, uri: &str, op: Operation, what: &str) {
    let txn = TransactionBuilder::new(ds.manifest().version, op).build();
    match ds.action_commit().execute(txn).await {
        Err(CommitError::Fail { reason, .. }) => {
            assert_eq!(reason.rule, Rule::Invalid, "{what}: {reason}");
            assert!(reason.detail.contains("key"), "{what}: {}", reason.detail);
        }
        other => panic!("{what} must be refused, got {:?}", other.map(|(_, r)| r.version)),
    }
    let after = latest(uri).await;
    assert_eq!(after.manifest().version, ds.manifest().version, "{what}: nothing committed");
    let scan = scan(&after).await;
    assert!(duplicated(&scan).is_empty(), "{what}: a duplicate key {:?}", duplicated(&scan));
    assert_eq!(scan.keys().copied().collect::<Vec<_>>(), (1..=100).collect::<Vec<_>>(), "{what}");
}

#[tokio::test]
async fn a_data_replacement_of_the_key_column_is_refused_and_80_never_appears_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let (ds, fragment, file) = keyed_with_rewritten_file(&uri).await;
    let op = Operation::DataReplacement { replacements: vec![DataReplacementGroup(fragment.id, file)] };
    assert_refused_and_unchanged(&ds, &uri, op, "DataReplacement of id").await;
}

#[tokio::test]
async fn a_column_rewriting_update_or_merge_of_the_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let (ds, fragment, file) = keyed_with_rewritten_file(&uri).await;
    let mut rewritten = fragment.clone();
    rewritten.files = vec![file.clone()];
    let id_field = ds.schema().field("id").expect("id").id as u32;
    let update = Operation::Update {
        removed_fragment_ids: vec![],
        updated_fragments: vec![rewritten.clone()],
        new_fragments: vec![],
        fields_modified: vec![id_field],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(UpdateMode::RewriteColumns),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    assert_refused_and_unchanged(&ds, &uri, update, "RewriteColumns update of id").await;
    let merge =
        Operation::Merge { fragments: vec![rewritten], schema: ds.schema().clone(), preserves_nullability: true };
    assert_refused_and_unchanged(&ds, &uri, merge, "Merge restating id's file").await;
    // A merge that adds a fragment would insert rows whose keys nobody declared.
    let mut added = fragment.clone();
    added.id = 0;
    added.files = vec![file.clone()];
    let merge =
        Operation::Merge { fragments: vec![fragment, added], schema: ds.schema().clone(), preserves_nullability: true };
    assert_refused_and_unchanged(&ds, &uri, merge, "Merge adding a fragment").await;
}

#[tokio::test]
async fn an_overlay_on_the_key_column_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let (ds, fragment, mut file) = keyed_with_rewritten_file(&uri).await;
    file.fields = Arc::from(vec![ds.schema().field("id").expect("id").id]);
    file.column_indices = Arc::from(vec![0]);
    let overlay = DataOverlayFile {
        data_file: file,
        coverage: OverlayCoverage::dense(RoaringBitmap::from_iter([80u32])),
        committed_version: 0,
    };
    let op =
        Operation::DataOverlay { groups: vec![DataOverlayGroup { fragment_id: fragment.id, overlays: vec![overlay] }] };
    assert_refused_and_unchanged(&ds, &uri, op, "overlay of id").await;
}

/// Rows as a plain Lance writer writes them: nullable columns, no key metadata.
fn plain_rows(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
            Arc::new(Int64Array::from(vec![0; ids.len()])),
        ],
    )
    .expect("batch")
}

async fn plain_table(uri: &str, ids: &[i64]) -> Dataset {
    InsertBuilder::new(uri)
        .with_params(&WriteParams { mode: WriteMode::Create, ..Default::default() })
        .execute(vec![plain_rows(ids)])
        .await
        .expect("create plain table")
}

/// A plain Lance append (no key declared), in the table's current schema.
async fn plain_append(uri: &str, ids: &[i64]) -> u64 {
    let ds = latest(uri).await;
    let schema = Arc::new(Schema::from(ds.schema()));
    let batch = RecordBatch::try_new(schema, plain_rows(ids).columns().to_vec()).expect("batch");
    InsertBuilder::new(ds)
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute(vec![batch])
        .await
        .expect("plain append")
        .manifest()
        .version
}

async fn restore(uri: &str, version: u64) -> Result<u64, CommitError> {
    let ds = latest(uri).await;
    let txn = TransactionBuilder::new(ds.manifest().version, Operation::Restore { version }).build();
    ds.action_commit().execute(txn).await.map(|(_, report)| report.version)
}

#[tokio::test]
async fn a_restore_to_a_version_with_another_class_key_or_stamp_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    plain_table(&uri, &(1..=10).collect::<Vec<_>>()).await; // v1: no class, no key
    migrate(&uri, &["id"]).await.expect("migrate"); // v2 key, v3 class, v4 stamp
    let mut table = KeyedTable::open(&uri).await.expect("keyed");
    table.insert(vec![rows(&[11], 0)]).await.expect("insert 11"); // v5
    for (version, what) in [(1, "no class"), (2, "key but no class"), (3, "class but no stamp")] {
        match restore(&uri, version).await {
            Err(CommitError::Fail { reason, .. }) => {
                assert_eq!(reason.rule, Rule::Invalid, "v{version} ({what}): {reason}");
                assert!(reason.detail.contains("only roll forward"), "{}", reason.detail);
            }
            other => panic!("restoring v{version} ({what}) must be refused, got {other:?}"),
        }
    }
    assert_eq!(latest(&uri).await.manifest().version, 5, "nothing committed");
    // A restore to a version of the same class lands and brings its rows back.
    let landed = restore(&uri, 4).await.expect("restore v4 (same class, key and stamp)");
    assert_eq!(landed, 6);
    KeyedTable::open(&uri).await.expect("still keyed");
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.keys().copied().collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
}

/// The migration's schema step, as `migrate` commits it: `id` marked as the primary key.
async fn mark_key(uri: &str) -> Arc<Dataset> {
    let ds = latest(uri).await;
    let mut schema = ds.schema().clone();
    let id = schema.field("id").expect("id").id;
    let field = schema.mut_field_by_id(id).expect("id");
    field.nullable = false;
    field.metadata.insert("lance-schema:unenforced-primary-key".into(), "true".into());
    field.unenforced_primary_key_position = Some(0);
    let txn =
        ActionTxn::new(OperationKind::Project, vec![ChangeSchema { schema, preserves_nullability: false }.into()]);
    let (ds, _) = ds.action_commit().execute_actions(ds.manifest().version, txn).await.expect("mark the key");
    Arc::new(ds)
}

fn declare_keyed() -> ActionTxn {
    let entries = [(TABLE_CLASS_KEY, KEYED), (KEY_NAMES_KEY, "id")]
        .iter()
        .map(|(k, v)| UpdateMapEntry { key: k.to_string(), value: Some(v.to_string()) })
        .collect();
    let declare =
        UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: entries, replace: false } };
    ActionTxn::new(OperationKind::UpdateConfig, vec![declare.into()])
}

#[tokio::test]
async fn the_class_step_reads_the_rows_it_verified_so_a_concurrent_duplicate_makes_it_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    plain_table(&uri, &(0..10).collect::<Vec<_>>()).await;
    let verified = mark_key(&uri).await; // v2: verified unique at this version
    let version = plain_append(&uri, &[3]).await; // v3: a concurrent duplicate of 3
    match verified.action_commit().execute_actions(verified.manifest().version, declare_keyed()).await {
        Err(CommitError::Retry { reason, .. }) => assert_eq!(reason.rule, Rule::KeysUnverifiable, "{reason}"),
        other => panic!("declaring the class over a concurrent insert must retry, got {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(latest(&uri).await.manifest().version, version, "nothing committed");
    assert!(matches!(KeyedTable::open(&uri).await, Err(Error::NotKeyed { .. })));
    // The migration, run now, verifies again and names the duplicate instead of keying over it.
    match migrate(&uri, &["id"]).await {
        Err(Error::DuplicateKeysInBranch { branch, keys }) => {
            assert_eq!(branch, "main");
            assert_eq!(keys.first, ["3"]);
        }
        other => panic!("expected the duplicate to be refused, got {other:?}"),
    }
    assert_eq!(latest(&uri).await.count_rows(None).await.expect("count"), 11, "every row still there");
    // Without a concurrent write, the same declaration lands.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let uri2 = temp_uri(&dir2, "t");
    plain_table(&uri2, &(0..10).collect::<Vec<_>>()).await;
    let verified = mark_key(&uri2).await;
    verified.action_commit().execute_actions(verified.manifest().version, declare_keyed()).await.expect("lands");
}

#[tokio::test]
async fn a_create_with_a_repeated_key_column_is_refused_and_leaves_no_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (key, why) in [(vec!["id", "id"], "named twice"), (vec![], "at least one"), (vec!["v", "name,x"], "comma")] {
        let uri = temp_uri(&dir, "t");
        match KeyedTable::create(&uri, vec![rows(&[1, 2], 0)], &key).await {
            Err(Error::Input { detail }) => assert!(detail.contains(why), "{key:?}: {detail}"),
            other => panic!("{key:?} must be refused, got {other:?}"),
        }
        assert!(!std::path::Path::new(&uri).exists(), "{key:?}: a failed create leaves no table behind");
    }
    KeyedTable::create(&temp_uri(&dir, "t"), vec![rows(&[1, 2], 0)], &["id"]).await.expect("a sound create");
}

#[tokio::test]
async fn a_multi_chunk_update_with_one_missing_key_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let ids: Vec<i64> = (0..30).collect();
    keyed_table(&uri, &ids).await;
    let options = WriteOptions { chunk: ChunkLimits { max_rows: 10, ..Default::default() }, ..Default::default() };
    let mut table = KeyedTable::open(&uri).await.expect("open").with_options(options);
    let before = latest(&uri).await.manifest().version;
    // Three chunks of 10; the missing key 999 is in the last one.
    let update: Vec<i64> = (0..29).chain([999]).collect();
    match table.update(vec![rows(&update, 7)]).await {
        Err(e @ Error::KeysNotFound { .. }) => {
            let Error::KeysNotFound { keys } = &e else { unreachable!() };
            assert_eq!(keys.first, ["999"]);
            assert!(e.to_string().contains("nothing was written"), "{e}");
        }
        other => panic!("expected KeysNotFound, got {other:?}"),
    }
    let after = latest(&uri).await;
    assert_eq!(after.manifest().version, before, "no chunk committed");
    assert!(scan(&after).await.values().all(|(n, v)| *n == 1 && *v == 0), "every row unchanged");
    // All present: three commits, every row updated.
    let outcome = table.update(vec![rows(&(0..30).collect::<Vec<_>>(), 7)]).await.expect("update");
    assert_eq!((outcome.updated, outcome.commits.len()), (30, 3));
    assert!(scan(&latest(&uri).await).await.values().all(|(n, v)| *n == 1 && *v == 7));
}

/// Append id 3 (already present) through the driver, restaged on the latest version each time,
/// after `delay`, until the driver refuses it (the table became keyed). Returns how many landed.
async fn append_duplicates_through_the_driver(uri: String, delay: std::time::Duration) -> usize {
    tokio::time::sleep(delay).await;
    let mut landed = 0;
    for _ in 0..30 {
        let ds = latest(&uri).await;
        let schema = Arc::new(Schema::from(ds.schema()));
        let batch = RecordBatch::try_new(schema, plain_rows(&[3]).columns().to_vec()).expect("batch");
        let staged = InsertBuilder::new(ds.clone())
            .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
            .execute_uncommitted(vec![batch])
            .await
            .expect("stage an append");
        match ds.action_commit().execute(staged).await {
            Ok(_) => landed += 1,
            // Keyed now: an insert that declares no keys is refused from any base.
            Err(CommitError::Fail { .. }) => break,
            Err(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    landed
}

/// The migration against a real concurrent writer of a duplicate key, started at different
/// moments: whichever way the race goes, a keyed table never holds the duplicate, and a refused
/// migration leaves the table unkeyed with the duplicate named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_racing_a_writer_of_a_duplicate_never_keys_over_it() {
    let (mut keyed, mut refused) = (0, 0);
    let mut duplicates_landed = 0;
    for delay_ms in (0u64..60).step_by(3) {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir, "t");
        plain_table(&uri, &(0..200).collect::<Vec<_>>()).await;
        let writer =
            tokio::spawn(append_duplicates_through_the_driver(uri.clone(), std::time::Duration::from_millis(delay_ms)));
        let migrated = migrate(&uri, &["id"]).await;
        let landed = writer.await.expect("writer task");
        duplicates_landed += landed;
        let rows = scan(&latest(&uri).await).await;
        match migrated {
            Ok(_) => {
                keyed += 1;
                assert!(duplicated(&rows).is_empty(), "delay {delay_ms} ms: keyed over {:?}", duplicated(&rows));
                KeyedTable::open(&uri).await.expect("keyed");
            }
            Err(Error::DuplicateKeysInBranch { keys, .. }) => {
                refused += 1;
                assert!(landed > 0 && keys.first == ["3"], "delay {delay_ms} ms: {keys:?}, {landed} landed");
                assert_eq!(duplicated(&rows), [3]);
                assert!(matches!(KeyedTable::open(&uri).await, Err(Error::NotKeyed { .. })));
            }
            Err(other) => panic!("delay {delay_ms} ms: {other}"),
        }
    }
    eprintln!(
        "migration vs a duplicate writer, 20 rounds: {keyed} keyed without the duplicate, {refused} refused naming it \
         ({duplicates_landed} duplicate appends landed before the table was keyed)"
    );
}
