//! Strict insert of fragments staged by another writer (`KeyedTable::insert_fragments`): the keys
//! are read back from the staged files, never taken from the caller, and fragments that would
//! duplicate or corrupt rows are refused with nothing committed.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::Operation;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions_keyed::{ConflictCause, Error, KeyedTable};
use lance_table::format::Fragment;

use crate::support::*;

/// Rows written as fragments of `ds` by Lance's own writer, not committed: what `write_fragments`
/// or a lance-ray worker hands a coordinator.
async fn stage(ds: &Arc<Dataset>, batch: RecordBatch) -> Vec<Fragment> {
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![batch])
        .await
        .expect("stage fragments");
    let Operation::Append { fragments } = txn.operation else { panic!("an append") };
    fragments
}

async fn table_with(dir: &tempfile::TempDir, ids: &[i64]) -> (String, KeyedTable) {
    let uri = temp_uri(dir, "t");
    (uri.clone(), keyed_table(&uri, ids).await)
}

#[tokio::test]
async fn staged_fragments_land_once_with_their_own_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, mut table) = table_with(&dir, &[1, 2]).await;
    let mut staged = stage(table.dataset(), rows(&[3, 4], 7)).await;
    staged.extend(stage(table.dataset(), rows(&[5], 8)).await);
    let outcome = table.insert_fragments(staged.clone()).await.expect("insert staged");
    assert_eq!((outcome.inserted, outcome.version), (3, 2));
    let rows = scan(&latest(&uri).await).await;
    let expected: Vec<(i64, (usize, i64))> = vec![(1, (1, 0)), (2, (1, 0)), (3, (1, 7)), (4, (1, 7)), (5, (1, 8))];
    assert_eq!(rows.into_iter().collect::<Vec<_>>(), expected);
    // The commit declared the keys it read from the files: a strict insert of key 4 now conflicts.
    let err = table.insert(vec![crate::support::rows(&[4], 1)]).await.expect_err("key 4 is present");
    assert!(matches!(err, Error::KeyConflict { cause: ConflictCause::AlreadyPresent, .. }), "{err}");
    // The same fragments again would duplicate every row: refused by file, nothing written.
    let err = table.insert_fragments(staged).await.expect_err("already committed");
    assert!(err.to_string().contains("already in the table at v2"), "{err}");
    assert_eq!(latest(&uri).await.manifest().version, 2);
}

#[tokio::test]
async fn a_present_key_or_a_key_staged_twice_commits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, mut table) = table_with(&dir, &[1, 2]).await;
    let present = stage(table.dataset(), rows(&[2, 3], 9)).await;
    let files = data_files(&uri);
    let err = table.insert_fragments(present).await.expect_err("key 2 is present");
    assert!(
        matches!(&err, Error::KeyConflict { cause: ConflictCause::AlreadyPresent, keys } if keys.to_string().contains('2')),
        "{err}"
    );
    assert_eq!(data_files(&uri), files, "fragments a caller staged stay the caller's, refused or not");
    let mut twice = stage(table.dataset(), rows(&[5, 6], 1)).await;
    twice.extend(stage(table.dataset(), rows(&[6], 2)).await);
    let err = table.insert_fragments(twice).await.expect_err("key 6 staged twice");
    assert!(matches!(err, Error::KeyConflict { cause: ConflictCause::DuplicateInBatch, .. }), "{err}");
    let the_same_file = stage(table.dataset(), rows(&[7], 1)).await;
    let err =
        table.insert_fragments([the_same_file.clone(), the_same_file].concat()).await.expect_err("same file twice");
    assert!(err.to_string().contains("given twice"), "{err}");
    let ds = latest(&uri).await;
    assert_eq!(ds.manifest().version, 1);
    assert_eq!(scan(&ds).await.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
}

#[tokio::test]
async fn fragments_of_another_schema_or_with_deletions_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, mut table) = table_with(&dir, &[1]).await;
    // A file of only the key column: committing it would leave `name` and `v` without data.
    let other = Dataset::write(
        arrow_array::RecordBatchIterator::new(
            vec![Ok(RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
                vec![Arc::new(Int64Array::from(vec![9]))],
            )
            .expect("batch"))],
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
        ),
        &temp_uri(&dir, "other"),
        None,
    )
    .await
    .expect("other table");
    let foreign = other.manifest().fragments[0].clone();
    let err = table.insert_fragments(vec![Fragment { id: 0, ..foreign }]).await.expect_err("another schema");
    assert!(err.to_string().contains("another schema"), "{err}");
    let mut deleted = stage(table.dataset(), rows(&[2], 1)).await;
    deleted[0].deletion_file = Some(lance_table::format::DeletionFile {
        read_version: 1,
        id: 1,
        file_type: lance_table::format::DeletionFileType::Array,
        num_deleted_rows: Some(1),
        base_id: None,
    });
    let err = table.insert_fragments(deleted).await.expect_err("deletions");
    assert!(err.to_string().contains("deleted rows"), "{err}");
    let err = table.insert_fragments(vec![]).await.expect_err("nothing staged");
    assert!(matches!(err, Error::Input { .. }), "{err}");
    assert_eq!(latest(&uri).await.manifest().version, 1);
}

/// Two coordinators commit staged fragments holding one shared key at once: exactly one lands,
/// the other is refused naming that key, and the table holds each key once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coordinators_racing_one_key_have_one_winner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, table) = table_with(&dir, &[1]).await;
    let a = stage(table.dataset(), rows(&[10, 11, 12], 1)).await;
    let b = stage(table.dataset(), rows(&[12, 13], 2)).await;
    let run = |fragments: Vec<Fragment>| {
        let uri = uri.clone();
        tokio::spawn(async move { KeyedTable::open(&uri).await.expect("open").insert_fragments(fragments).await })
    };
    let (ra, rb) = (run(a), run(b));
    let (ra, rb) = (ra.await.expect("join"), rb.await.expect("join"));
    assert_eq!(ra.is_ok() as u8 + rb.is_ok() as u8, 1, "exactly one winner: {ra:?} / {rb:?}");
    let loser = ra.as_ref().err().or(rb.as_ref().err()).expect("a loser");
    assert!(matches!(loser, Error::KeyConflict { keys, .. } if keys.to_string().contains("12")), "{loser}");
    let rows = scan(&latest(&uri).await).await;
    assert!(duplicated(&rows).is_empty(), "{rows:?}");
    let winner_v = if ra.is_ok() { 1 } else { 2 };
    assert_eq!(rows.get(&12), Some(&(1, winner_v)));
    let expected_keys: Vec<i64> = if ra.is_ok() { vec![1, 10, 11, 12] } else { vec![1, 12, 13] };
    assert_eq!(rows.keys().copied().collect::<Vec<_>>(), expected_keys);
}

/// Lance's 2.1+ files hold no column for a list's or a struct's parent field: staged fragments of a
/// table with nested columns are taken (a check of every field id refused them all).
#[tokio::test]
async fn staged_fragments_of_a_table_with_nested_columns_land() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = KeyedTable::create(&uri, vec![nested_rows(&[1])], &["id"]).await.expect("create");
    let fragments = stage(&latest(&uri).await, nested_rows(&[2, 3])).await;
    let out = table.insert_fragments(fragments).await.expect("nested fragments land");
    assert_eq!(out.inserted, 2);
    assert_eq!(latest(&uri).await.count_rows(None).await.expect("count"), 3);
}
