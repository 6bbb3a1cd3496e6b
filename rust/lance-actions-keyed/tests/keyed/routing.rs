//! Write routing on a keyed table: what each write does and refuses.

use std::sync::Arc;

use lance::dataset::transaction::Operation;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions::table_class::{FENCING_FORMAT_KEY, KEY_NAMES_KEY, TABLE_CLASS_KEY};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_actions_keyed::{ChunkLimits, ConflictCause, Error, KeyedTable, KeylessTable, WriteOptions};

use crate::support::*;

#[tokio::test]
async fn a_keyed_table_carries_its_key_in_the_schema_and_its_class_in_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let table = keyed_table(&uri, &[1, 2, 3]).await;
    let ds = table.dataset();
    let pk: Vec<&str> = ds.schema().unenforced_primary_key().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(pk, ["id"]);
    assert!(!ds.schema().field("id").expect("id").nullable);
    let config = &ds.manifest().config;
    assert_eq!(config.get(TABLE_CLASS_KEY).map(String::as_str), Some("keyed"));
    assert_eq!(config.get(KEY_NAMES_KEY).map(String::as_str), Some("id"));
    assert_eq!(config.get(FENCING_FORMAT_KEY).map(String::as_str), Some("1"));
    assert_eq!(ds.manifest().version, 1, "key and class are in the first version");
}

#[tokio::test]
async fn strict_insert_lands_one_filtered_update_with_our_exact_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1, 2, 3]).await;
    let out = table.insert(vec![rows(&[10, 11, 12], 1)]).await.expect("insert");
    assert_eq!((out.inserted, out.attempts, out.version), (3, 1, 2));
    let ds = latest(&uri).await;
    let txn = ds.read_transaction().await.expect("read txn").expect("a transaction");
    let Operation::Update { inserted_rows_filter: Some(filter), new_fragments, .. } = &txn.operation else {
        panic!("expected an Update carrying Lance's key filter, got {}", txn.operation);
    };
    assert_eq!(filter.field_ids, vec![ds.schema().field("id").expect("id").id]);
    assert_eq!(new_fragments.iter().map(|f| f.physical_rows.unwrap_or(0)).sum::<usize>(), 3);
    let props = txn.transaction_properties.as_deref().expect("properties");
    assert!(props.contains_key(lance_actions::codec::PROPERTY_KEY), "our encoded action list is attached");
    let scan = scan(&ds).await;
    assert_eq!(scan.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 10, 11, 12]);
}

#[tokio::test]
async fn strict_insert_of_a_present_or_repeated_key_is_a_key_conflict_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1, 2, 3]).await;
    match table.insert(vec![rows(&[4, 2, 5, 3], 9)]).await {
        Err(Error::KeyConflict { keys, cause: ConflictCause::AlreadyPresent }) => {
            assert_eq!(keys.first, ["2", "3"]);
            assert_eq!(keys.count, 2);
        }
        other => panic!("expected a key conflict, got {other:?}"),
    }
    match table.insert(vec![rows(&[7, 8], 9), rows(&[8], 9)]).await {
        Err(Error::KeyConflict { keys, cause: ConflictCause::DuplicateInBatch }) => assert_eq!(keys.first, ["8"]),
        other => panic!("expected a duplicate-in-batch conflict, got {other:?}"),
    }
    let ds = latest(&uri).await;
    assert_eq!(ds.manifest().version, 1, "nothing was committed");
    let scan = scan(&ds).await;
    assert_eq!(scan.get(&2), Some(&(1, 0)), "a strict insert never updates");
}

/// Past 1,024 keys the presence check reads every fragment's keys instead of asking an `IN` list:
/// it must see keys in every fragment, and not see deleted ones.
#[tokio::test]
async fn a_strict_insert_past_the_in_list_sees_every_fragment_and_no_deleted_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &(0..100).collect::<Vec<_>>()).await;
    table.insert(vec![rows(&(100..200).collect::<Vec<_>>(), 0)]).await.expect("a second fragment");
    table.delete(vec![keys(&(10..20).chain(150..160).collect::<Vec<_>>())]).await.expect("delete");
    let before = latest(&uri).await.manifest().version;

    // Present keys in both fragments, among 1,100 new ones: refused, naming exactly those.
    let mut ids: Vec<i64> = (10_000..11_100).collect();
    ids.insert(7, 175);
    ids.insert(3, 50);
    match table.insert(vec![rows(&ids, 9)]).await {
        Err(Error::KeyConflict { keys, cause: ConflictCause::AlreadyPresent }) => {
            assert_eq!(keys.first, ["50", "175"]);
            assert_eq!(keys.count, 2);
        }
        other => panic!("expected a key conflict, got {other:?}"),
    }
    assert_eq!(latest(&uri).await.manifest().version, before, "a refused insert writes nothing");

    // Deleted keys of both fragments, among 1,500 new ones: absent, so inserted.
    let ids: Vec<i64> = (10..20).chain(150..160).chain(20_000..21_500).collect();
    table.insert(vec![rows(&ids, 5)]).await.expect("deleted keys are absent");
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.len(), 200 + 1_500);
    assert!(duplicated(&scan).is_empty());
    assert_eq!(scan.get(&15), Some(&(1, 5)), "a deleted key inserted again");
    assert_eq!(scan.get(&155), Some(&(1, 5)));
    assert_eq!(scan.get(&50), Some(&(1, 0)), "a present key untouched");
}

#[tokio::test]
async fn rows_that_do_not_fit_are_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    let nullable = arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Int64, true),
        arrow_schema::Field::new("name", arrow_schema::DataType::Utf8, true),
        arrow_schema::Field::new("v", arrow_schema::DataType::Int64, true),
    ]);
    let with_null = arrow_array::RecordBatch::try_new(
        Arc::new(nullable),
        vec![
            Arc::new(arrow_array::Int64Array::from(vec![Some(5), None])),
            Arc::new(arrow_array::StringArray::from(vec!["a", "b"])),
            Arc::new(arrow_array::Int64Array::from(vec![1, 2])),
        ],
    )
    .expect("batch");
    assert!(matches!(table.insert(vec![with_null]).await, Err(Error::Input { .. } | Error::NullKey { .. })));
    assert!(matches!(table.insert(vec![keys(&[5])]).await, Err(Error::Input { .. })));
    assert_eq!(latest(&uri).await.manifest().version, 1);
}

#[tokio::test]
async fn upsert_update_and_delete_by_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1, 2, 3]).await;
    let out = table.upsert(vec![rows(&[2, 3, 4], 7)]).await.expect("upsert");
    assert_eq!((out.inserted, out.updated), (1, 2));
    let out = table.update(vec![rows(&[1], 8)]).await.expect("update");
    assert_eq!((out.inserted, out.updated), (0, 1));
    let before = latest(&uri).await.manifest().version;
    match table.update(vec![rows(&[1, 99], 5)]).await {
        Err(Error::KeysNotFound { keys }) => assert_eq!(keys.first, ["99"]),
        other => panic!("expected keys-not-found, got {other:?}"),
    }
    assert_eq!(latest(&uri).await.manifest().version, before, "a refused update writes nothing");
    let out = table.delete(vec![keys(&[3, 50])]).await.expect("delete");
    assert_eq!(out.deleted, 1);
    let scan = scan(&latest(&uri).await).await;
    let expected = [(1, (1, 8)), (2, (1, 7)), (4, (1, 7))];
    assert_eq!(scan.into_iter().collect::<Vec<_>>(), expected);
}

#[tokio::test]
async fn large_writes_are_chunked_strict_insert_in_one_commit_upsert_per_chunk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let options = WriteOptions { chunk: ChunkLimits { max_rows: 100, max_bytes: 1 << 20 }, ..Default::default() };
    let mut table = keyed_table(&uri, &[0]).await.with_options(options);
    let ids: Vec<i64> = (1..=250).collect();
    let out = table.insert(vec![rows(&ids, 1)]).await.expect("insert");
    assert_eq!((out.version, out.commits.len()), (2, 1), "a strict insert is atomic: one commit");
    let upsert_ids: Vec<i64> = (200..=450).collect();
    let out = table.upsert(vec![rows(&upsert_ids, 2)]).await.expect("upsert");
    assert_eq!(out.commits.len(), 3, "251 rows in chunks of at most 100");
    assert_eq!((out.inserted, out.updated), (200, 51));
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.len(), 451);
    assert!(duplicated(&scan).is_empty());
}

#[tokio::test]
async fn overwrite_keeps_the_key_and_class() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1, 2]).await;
    table.overwrite(vec![rows(&[7, 8, 9], 3)]).await.expect("overwrite");
    let ds = latest(&uri).await;
    let pk: Vec<&str> = ds.schema().unenforced_primary_key().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(pk, ["id"]);
    assert_eq!(ds.manifest().config.get(TABLE_CLASS_KEY).map(String::as_str), Some("keyed"));
    assert_eq!(scan(&ds).await.keys().copied().collect::<Vec<_>>(), [7, 8, 9]);
    assert!(matches!(table.overwrite(vec![rows(&[1, 1], 0)]).await, Err(Error::KeyConflict { .. })));
    KeyedTable::open(&uri).await.expect("still opens keyed");
}

#[tokio::test]
async fn a_plain_append_or_keyless_overwrite_through_the_driver_is_refused_on_a_keyed_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1, 2]).await;
    let ds = latest(&uri).await;
    let append = InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![rows(&[3], 0)])
        .await
        .expect("stage append");
    match ds.action_commit().execute(append).await {
        Err(CommitError::Fail { reason, .. }) => {
            assert_eq!(reason.rule, lance_actions::Rule::Invalid);
            assert!(reason.detail.contains("no keyed Append"), "{}", reason.detail);
        }
        other => panic!("expected the keyed append to be refused, got {:?}", other.map(|(_, r)| r.version)),
    }
    // An overwrite whose schema lost the key.
    let overwrite = InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Overwrite, ..Default::default() })
        .execute_uncommitted(vec![rows(&[3], 0)])
        .await
        .expect("stage overwrite");
    assert!(matches!(ds.action_commit().execute(overwrite).await, Err(CommitError::Fail { .. })));
    assert_eq!(latest(&uri).await.manifest().version, 1);
}

#[tokio::test]
async fn a_keyless_append_only_table_takes_plain_appends_and_refuses_keyed_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = KeylessTable::create(&uri, vec![rows(&[1], 0)]).await.expect("create keyless");
    table.append(vec![rows(&[1, 2], 0)]).await.expect("plain append");
    assert_eq!(scan(&latest(&uri).await).await.get(&1).map(|e| e.0), Some(2), "no key guarantee");
    assert!(matches!(KeyedTable::open(&uri).await, Err(Error::NotKeyed { .. })));
    let keyed = temp_uri(&dir, "k");
    keyed_table(&keyed, &[1]).await;
    assert!(matches!(KeylessTable::open(&keyed).await, Err(Error::NotKeyless { .. })));
}

#[tokio::test]
async fn open_refuses_a_table_whose_schema_lost_its_declared_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut ds = InsertBuilder::new(uri.as_str())
        .with_params(&WriteParams { mode: WriteMode::Create, ..Default::default() })
        .execute(vec![rows(&[1], 0)])
        .await
        .expect("plain table");
    // Plain Lance can write the class without the key; our open must notice.
    ds.update_config(vec![(TABLE_CLASS_KEY, "keyed"), (KEY_NAMES_KEY, "id"), (FENCING_FORMAT_KEY, "1")])
        .await
        .expect("config");
    match KeyedTable::open(&uri).await {
        Err(Error::KeyMismatch { detail, .. }) => assert!(detail.contains("primary key"), "{detail}"),
        other => panic!("expected a key mismatch, got {other:?}"),
    }
}

/// With a scalar index on the key, Lance's merge takes its indexed path, which attaches no key
/// filter: our upsert attaches one built from its keys, so Lance's resolver still sees them.
#[tokio::test]
async fn an_upsert_on_an_indexed_key_still_carries_a_key_filter_and_reads_correctly() {
    use lance::index::DatasetIndexExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &(0..50).collect::<Vec<_>>()).await;
    let mut ds = (*latest(&uri).await).clone();
    ds.create_index(
        &["id"],
        lance_index::IndexType::BTree,
        None,
        &lance_index::scalar::ScalarIndexParams::default(),
        false,
    )
    .await
    .expect("btree on id");
    let mut table = KeyedTable::open(&uri).await.expect("open");
    let out = table.upsert(vec![rows(&[3, 4, 60], 9)]).await.expect("upsert");
    assert_eq!((out.inserted, out.updated), (1, 2));
    let ds = latest(&uri).await;
    let txn = ds.read_transaction().await.expect("read").expect("txn");
    let Operation::Update { inserted_rows_filter: Some(filter), .. } = &txn.operation else {
        panic!("expected a filtered Update, got {}", txn.operation);
    };
    assert_eq!(filter.field_ids, vec![ds.schema().field("id").expect("id").id]);
    for (id, v) in [(3, 9), (4, 9), (5, 0), (60, 9)] {
        let n = ds.count_rows(Some(format!("id = {id} AND v = {v}"))).await.expect("query");
        assert_eq!(n, 1, "id {id} reads v = {v} through the index");
    }
    assert!(duplicated(&scan(&ds).await).is_empty());
}
