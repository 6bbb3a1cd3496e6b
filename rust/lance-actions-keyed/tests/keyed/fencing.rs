//! Key fencing against real writers in both commit orders (`design/fencing.md` §4): ours against
//! ours, against Lance's own key-filtered merge-insert, against plain Lance appends and unfiltered
//! updates. Races are staged by hand on one base so the commit order is the test's to choose.

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{
    CommitBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance_actions::actions::add_fragments::AddFragments;
use lance_actions::{ActionTxn, OperationKind, Rule};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_actions_keyed::{ConflictCause, Error, KeyedTable};

use crate::support::*;

async fn stage_append(ds: &Arc<Dataset>, ids: &[i64]) -> Transaction {
    InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![rows(ids, 0)])
        .await
        .expect("stage append")
}

/// Lance's own keyed merge-insert (v2 path, so it carries Lance's filter).
async fn stage_lance_upsert(ds: &Arc<Dataset>, on: &str, ids: &[i64]) -> Transaction {
    let mut b = MergeInsertBuilder::try_new(ds.clone(), vec![on.into()]).expect("builder");
    b.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
    b.try_build().expect("job").execute_uncommitted_batches(vec![rows(ids, 1)]).await.expect("stage").transaction
}

/// What our strict insert commits: new fragments declaring their keys (exact set + Lance filter).
async fn stage_keyed_insert(table: &KeyedTable, ds: &Arc<Dataset>, ids: &[i64]) -> ActionTxn {
    let Operation::Append { fragments } = stage_append(ds, ids).await.operation else { panic!("append shape") };
    let keys = table.key().keys_of_all(&[rows(ids, 0)]).expect("keys");
    let add = AddFragments { fragments, keys: Some(table.key().inserted_keys(&keys).expect("key sets")) };
    ActionTxn::new(OperationKind::Update, vec![add.into()])
}

async fn ours(ds: &Arc<Dataset>, txn: ActionTxn) -> Result<u64, CommitError> {
    ds.action_commit().execute_actions(ds.manifest().version, txn).await.map(|(_, r)| r.version)
}

async fn lance_plain(ds: &Arc<Dataset>, txn: Transaction) -> Result<Dataset, lance::Error> {
    CommitBuilder::new(ds.clone()).with_max_retries(0).execute(txn).await
}

fn retry_rule(result: Result<u64, CommitError>) -> Rule {
    match result {
        Err(CommitError::Retry { reason, .. }) => reason.rule,
        other => panic!("expected a Retry verdict, got {:?}", other.map_err(|e| e.to_string())),
    }
}

#[tokio::test]
async fn two_keyed_inserts_of_one_key_conflict_in_both_orders_and_disjoint_ones_commute() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let table = keyed_table(&uri, &[1]).await;
    for (first, second) in [(&[10i64, 11][..], &[11i64, 12][..]), (&[21, 22][..], &[20, 21][..])] {
        let base = latest(&uri).await;
        let a = stage_keyed_insert(&table, &base, first).await;
        let b = stage_keyed_insert(&table, &base, second).await;
        ours(&base, a).await.expect("first lands");
        assert_eq!(retry_rule(ours(&base, b).await), Rule::KeysIntersect);
    }
    let base = latest(&uri).await;
    let a = stage_keyed_insert(&table, &base, &[30]).await;
    let b = stage_keyed_insert(&table, &base, &[31]).await;
    ours(&base, a).await.expect("first lands");
    ours(&base, b).await.expect("a disjoint keyed insert rebases");
    assert!(duplicated(&scan(&latest(&uri).await).await).is_empty());
}

#[tokio::test]
async fn exact_key_sets_do_not_conflict_falsely_where_lance_bloom_filters_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let table = keyed_table(&uri, &[0]).await;
    let left: Vec<i64> = (1_000..2_000).collect();
    let right: Vec<i64> = (2_000..3_000).collect();
    let base = latest(&uri).await;
    let a = stage_keyed_insert(&table, &base, &left).await;
    let b = stage_keyed_insert(&table, &base, &right).await;
    ours(&base, a).await.expect("first lands");
    ours(&base, b).await.expect("1,000 disjoint keys per side: no conflict");
    // Lance's own resolver, given the same shape through its merge-insert, conflicts (bloom).
    let base = latest(&uri).await;
    let a = stage_lance_upsert(&base, "id", &(3_000..4_000).collect::<Vec<_>>()).await;
    let b = stage_lance_upsert(&base, "id", &(4_000..5_000).collect::<Vec<_>>()).await;
    lance_plain(&base, a).await.expect("first lands");
    assert!(lance_plain(&base, b).await.is_err(), "Lance 14's whole-bitmap test conflicts at 1,000 keys");
}

#[tokio::test]
async fn our_keyed_insert_and_lance_keyed_merge_insert_conflict_in_both_orders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let table = keyed_table(&uri, &[1]).await;
    // Lance first, ours second: our driver compares the filters.
    let base = latest(&uri).await;
    let theirs = stage_lance_upsert(&base, "id", &[40]).await;
    let mine = stage_keyed_insert(&table, &base, &[40]).await;
    lance_plain(&base, theirs).await.expect("Lance's merge lands");
    assert_eq!(retry_rule(ours(&base, mine).await), Rule::KeysIntersect);
    // Ours first, Lance second: Lance's resolver sees the filter we set on the lowered Update.
    let base = latest(&uri).await;
    let mine = stage_keyed_insert(&table, &base, &[50]).await;
    let theirs = stage_lance_upsert(&base, "id", &[50]).await;
    ours(&base, mine).await.expect("ours lands");
    assert!(lance_plain(&base, theirs).await.is_err(), "Lance's filtered merge must retry after ours");
    assert!(duplicated(&scan(&latest(&uri).await).await).is_empty());
}

/// Up to 1,024 keys our write attaches Lance's exact-set filter (a few bytes a key), not its 32 KiB
/// bloom filter. Against a Lance-native bloom-path merge of disjoint keys committed first, our
/// driver tests our keys one by one in its filter and lands (two bloom filters of 300 keys would be
/// judged intersecting); committed the other way round, Lance's resolver compares an exact set with
/// a bloom filter as intersecting, so Lance's merge retries: the trade `design/fencing.md` §3 states.
#[tokio::test]
async fn small_key_sets_carry_lances_exact_filter_and_are_judged_key_by_key_against_its_bloom_filter() {
    use lance_table::format::key_existence::FilterType;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let table = keyed_table(&uri, &[1]).await;
    // Lance first, ours second.
    let base = latest(&uri).await;
    let theirs = stage_lance_upsert(&base, "id", &(300..600).collect::<Vec<_>>()).await;
    let mine = stage_keyed_insert(&table, &base, &(600..900).collect::<Vec<_>>()).await;
    lance_plain(&base, theirs).await.expect("Lance's merge lands");
    let version = ours(&base, mine).await.expect("disjoint keys: ours lands behind Lance's bloom filter");
    let landed = Arc::new(latest(&uri).await.checkout_version(version).await.expect("checkout"));
    let committed = landed.read_transaction().await.expect("read").expect("a transaction");
    let Operation::Update { inserted_rows_filter: Some(filter), .. } = &committed.operation else {
        panic!("a keyed insert commits an Update with Lance's filter, not {}", committed.operation)
    };
    match &filter.filter {
        FilterType::ExactSet(hashes) => assert_eq!(hashes.len(), 300),
        FilterType::Bloom { .. } => panic!("300 keys carry an exact set"),
    }
    let rows = scan(&landed).await;
    assert!(duplicated(&rows).is_empty());
    assert_eq!(rows.len(), 1 + 300 + 300, "the first row, Lance's 300 and ours");
    // Ours first, Lance second, disjoint keys: Lance's resolver cannot compare the two kinds.
    let base = latest(&uri).await;
    let mine = stage_keyed_insert(&table, &base, &[1_000, 1_001]).await;
    let theirs = stage_lance_upsert(&base, "id", &[1_002]).await;
    ours(&base, mine).await.expect("ours lands");
    assert!(
        lance_plain(&base, theirs).await.is_err(),
        "Lance compares an exact set with a bloom filter as intersecting"
    );
    assert_eq!(scan(&latest(&uri).await).await.len(), 603, "Lance's refused merge wrote nothing");
}

#[tokio::test]
async fn a_plain_lance_append_or_unfiltered_update_committed_first_makes_our_insert_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    let base = latest(&uri).await;
    let mine = stage_keyed_insert(&table, &base, &[60]).await;
    lance_plain(&base, stage_append(&base, &[60]).await).await.expect("plain Lance append lands");
    assert_eq!(retry_rule(ours(&base, mine).await), Rule::KeysUnverifiable);
    // The strict insert re-run from the new base names the key.
    match table.insert(vec![rows(&[60], 0)]).await {
        Err(Error::KeyConflict { keys, cause: ConflictCause::AlreadyPresent }) => assert_eq!(keys.first, ["60"]),
        other => panic!("expected a key conflict, got {other:?}"),
    }
    // Disjoint keys still retry against an undeclared insert (it could have held any key) ...
    let base = latest(&uri).await;
    let mine = stage_keyed_insert(&table, &base, &[70]).await;
    let unfiltered = stage_lance_upsert(&base, "name", &[71]).await;
    lance_plain(&base, unfiltered).await.expect("unfiltered merge lands");
    assert_eq!(retry_rule(ours(&base, mine).await), Rule::KeysUnverifiable);
    // ... and the strict insert's own re-run then lands them.
    table.insert(vec![rows(&[70], 0)]).await.expect("re-run lands");
    assert!(duplicated(&scan(&latest(&uri).await).await).is_empty());
}

/// The boundary (design/fencing.md): a Lance-native writer that commits *after* us through
/// Lance's own loop is judged by Lance, whose append check ignores key filters. Our driver cannot
/// see a commit it does not make; only keeping such writers off fenced tables closes this.
#[tokio::test]
async fn boundary_a_plain_lance_append_committed_after_our_insert_is_not_fenced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    let stale = latest(&uri).await;
    let foreign = stage_append(&stale, &[80]).await;
    table.insert(vec![rows(&[80], 0)]).await.expect("our strict insert lands");
    lance_plain(&stale, foreign).await.expect("Lance lands the stale append without checking keys");
    assert_eq!(duplicated(&scan(&latest(&uri).await).await), [80]);
    // The same stale append offered to our driver never lands. Judged on the stale handle it stands
    // on (no listing of ours, `design/commit.md`) it is refused as an undeclared insert into a keyed
    // table; judged on the head it would retry against our keyed insert first. Either way nothing
    // of it lands; from a fresh base it is refused outright (no keyed Append).
    let stale_again = stage_append(&stale, &[81]).await;
    let got = stale.action_commit().execute(stale_again).await;
    assert!(matches!(got, Err(CommitError::Retry { .. } | CommitError::Fail { .. })), "{got:?}");
    assert!(!scan(&latest(&uri).await).await.contains_key(&81), "the stale append landed");
    let fresh = latest(&uri).await;
    let fresh_append = stage_append(&fresh, &[81]).await;
    assert!(matches!(fresh.action_commit().execute(fresh_append).await, Err(CommitError::Fail { .. })));
}

#[tokio::test]
async fn a_stale_handle_upserts_from_the_latest_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut a = keyed_table(&uri, &[1, 2]).await;
    let mut b = KeyedTable::open(&uri).await.expect("second handle");
    a.upsert(vec![rows(&[2, 3], 10)]).await.expect("a");
    // b was opened before a wrote: each attempt re-reads, so it stages on top of a.
    let out = b.upsert(vec![rows(&[3, 4], 20)]).await.expect("b");
    assert_eq!((out.inserted, out.updated), (1, 1), "3 was an insert for a, an update for b");
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.into_iter().collect::<Vec<_>>(), [(1, (1, 0)), (2, (1, 10)), (3, (1, 20)), (4, (1, 20))]);
}

/// A strict insert that loses its first commit to an undeclared writer commits, on its second
/// attempt, the files its first attempt staged: the rows are written once, and by then no array of
/// them is held (their keys are kept as a copy, to name a conflict; a bulk insert's memory,
/// `design/benchmarks.md`).
#[tokio::test]
async fn a_strict_insert_that_loses_a_race_commits_what_it_staged_once_and_holds_none_of_the_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    // More keys than a strict insert keeps as values: the probe goes through their hashes.
    let ids: Vec<i64> = (100..2_100).collect();
    let batch = rows(&ids, 3);
    let (names, key_column) = (Arc::downgrade(batch.column(1)), Arc::downgrade(batch.column(0)));
    let held = Arc::new(std::sync::Mutex::new(None));
    {
        let (uri, held) = (uri.clone(), held.clone());
        lance_actions_commit::hooks::register("keyed:insert-staged", &uri.clone(), move || async move {
            *held.lock().expect("lock") = Some((names.upgrade().is_some(), key_column.upgrade().is_some()));
            let ds = latest(&uri).await;
            lance_plain(&ds, stage_append(&ds, &[5_000]).await).await.expect("an undeclared append lands");
        });
    }
    let files = data_files(&uri);
    let outcome = table.insert(vec![batch]).await.expect("lands on a second attempt");
    assert_eq!(outcome.attempts, 2, "the first attempt lost to the undeclared append");
    assert_eq!(*held.lock().expect("lock"), Some((false, false)), "after staging no array of the rows is held");
    assert_eq!(data_files(&uri), files + 2, "Lance's append and our one staging: no second staging");
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.len(), 1 + ids.len() + 1);
    assert!(duplicated(&scan).is_empty());
    assert!(ids.iter().all(|id| scan.get(id) == Some(&(1, 3))), "every inserted row once, as given");
}

/// A strict insert that loses a key to a concurrent keyed insert between its staging and its
/// commit is refused, and the files it staged are removed: the table's `data/` holds the other
/// writer's files and no file of the refused insert.
#[tokio::test]
async fn a_strict_insert_refused_by_a_concurrent_insert_of_its_key_leaves_no_file_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    let files = data_files(&uri);
    let other = uri.clone();
    lance_actions_commit::hooks::register("keyed:insert-staged", &uri, move || async move {
        let mut rival = KeyedTable::open(&other).await.expect("a second handle");
        rival.insert(vec![rows(&[3, 4], 7)]).await.expect("the rival insert of key 3 lands first");
    });
    match table.insert(vec![rows(&[2, 3], 0)]).await {
        Err(Error::KeyConflict { keys, cause: ConflictCause::InsertedConcurrently }) => assert_eq!(keys.first, ["3"]),
        other => panic!("expected a concurrent key conflict, got {other:?}"),
    }
    assert_eq!(data_files(&uri), files + 1, "the rival's one file, none of the refused insert's");
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.into_iter().collect::<Vec<_>>(), [(1, (1, 0)), (3, (1, 7)), (4, (1, 7))], "key 2 never landed");
}

/// A strict insert of `batch` into a keyed table holding key 1, with `change` (a schema change
/// made through Lance on the table at the uri it is given) landing between the staging and the
/// commit: refused as `SchemaChanged` naming `column`, only the change landed, no row of the insert.
async fn assert_insert_refused_after_schema_change<F, Fut>(batch: RecordBatch, column: &str, change: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = keyed_table(&uri, &[1]).await;
    let at = uri.clone();
    lance_actions_commit::hooks::register("keyed:insert-staged", &uri, move || change(at));
    let before = latest(&uri).await.manifest().version;
    let files = data_files(&uri);
    let got = table.insert(vec![batch]).await;
    match got {
        Err(Error::SchemaChanged { staged, version, detail }) => {
            assert_eq!((staged, version), (before, before + 1));
            assert!(detail.contains(column), "{detail}");
        }
        other => panic!("expected SchemaChanged, got {other:?}"),
    }
    let after = latest(&uri).await;
    assert_eq!(after.manifest().version, before + 1, "only the schema change landed");
    assert_eq!(scan(&after).await.into_keys().collect::<Vec<_>>(), [1]);
    assert_eq!(data_files(&uri), files, "the refused insert's staged files are removed");
}

/// Staged files are committed on a later base only if it has exactly their columns: a column added
/// between the staging and the commit refuses the insert, with nothing of it written.
#[tokio::test]
async fn a_strict_insert_whose_table_gained_a_column_meanwhile_writes_nothing() {
    use arrow_schema::{DataType, Field, Schema};
    use lance::dataset::NewColumnTransform;
    assert_insert_refused_after_schema_change(rows(&[2, 3], 0), "extra", |uri| async move {
        let mut ds = Dataset::open(&uri).await.expect("open");
        let extra = Arc::new(Schema::new(vec![Field::new("extra", DataType::Utf8, true)]));
        ds.add_columns(NewColumnTransform::AllNulls(extra), None, None).await.expect("a column is added");
    })
    .await;
}

/// A column made non-nullable between the staging and the commit (Lance checks only the rows it
/// holds then) refuses staged rows holding a null there: committed as they are, they would put a
/// null into a non-nullable column.
#[tokio::test]
async fn a_strict_insert_whose_column_became_non_nullable_meanwhile_writes_nothing() {
    use arrow_array::{Int64Array, StringArray};
    use lance::dataset::ColumnAlteration;
    let with_null_name = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![2, 3])),
            Arc::new(StringArray::from(vec![Some("n2"), None])),
            Arc::new(Int64Array::from(vec![0, 0])),
        ],
    )
    .expect("batch");
    assert_insert_refused_after_schema_change(with_null_name, "name", |uri| async move {
        let mut ds = Dataset::open(&uri).await.expect("open");
        let tighten = ColumnAlteration::new("name".into()).set_nullable(false);
        ds.alter_columns(&[tighten]).await.expect("name is made non-nullable");
    })
    .await;
}

/// Lance's 2.1+ files hold no column for a list's or a struct's parent field: a table with nested
/// columns takes strict inserts, and one lost race later the staged files still fit.
#[tokio::test]
async fn a_strict_insert_with_nested_columns_lands_on_a_later_attempt_too() {
    use arrow_array::{Int64Array, StructArray};
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut table = KeyedTable::create(&uri, vec![nested_rows(&[1])], &["id"]).await.expect("create");
    table.insert(vec![nested_rows(&[2, 3])]).await.expect("a nested strict insert lands");
    {
        let (uri, foreign) = (uri.clone(), nested_rows(&[9]));
        lance_actions_commit::hooks::register("keyed:insert-staged", &uri.clone(), move || async move {
            let ds = latest(&uri).await;
            let append = InsertBuilder::new(ds.clone())
                .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
                .execute_uncommitted(vec![foreign])
                .await
                .expect("stage");
            lance_plain(&ds, append).await.expect("an undeclared append lands");
        });
    }
    let outcome = table.insert(vec![nested_rows(&[4, 5])]).await.expect("lands on a second attempt");
    assert_eq!(outcome.attempts, 2);
    let ds = latest(&uri).await;
    assert_eq!(ds.count_rows(None).await.expect("count"), 6);
    let mut scanner = ds.scan();
    scanner.filter("id = 5").expect("filter");
    let rows: Vec<RecordBatch> = scanner.try_into_stream().await.expect("scan").try_collect().await.expect("rows");
    assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
    let at = rows[0].column_by_name("at").expect("at").as_any().downcast_ref::<StructArray>().expect("struct");
    assert_eq!(at.column(1).as_any().downcast_ref::<Int64Array>().expect("y").value(0), 5);
}
