//! Port of upstream's `tagged_rewrite_conflicts/tagged_mutations.rs`: mutations on a table that
//! carries a tagged fragment-reuse history. Only the tests where one writer's transaction commits
//! over another's are ported (the others commit one mutation alone, with no peer to judge:
//! `tests/upstream/README.md` names them). Upstream's fixture: two fragments of four rows, `i`, `v`
//! and `w` all equal (0..8), `i_idx` on `i`, tagged by a stable partition of 0 and 1 into 10
//! (evens) and 11 (odds).
//!
//! Ours is either a segment staged with `CreateIndexBuilder::execute_uncommitted` at an older
//! version (upstream commits it with `commit_existing_index_segments` or `apply_commit`, which
//! stage the same `CreateIndex`), or an in-place column rewrite staged by Lance's merge insert from
//! a stale handle; it goes through our commit loop, whose outcome must equal our driver's verdict,
//! and Lance's resolver must give the upstream answer on the same inputs.

use super::*;

/// The version of upstream's fixture before tagging: the data (1) plus `i_idx` (2).
const BEFORE_TAGGING: u64 = 2;

/// Upstream's `indexed_two_column_fixture`, not yet tagged.
async fn indexed_table() -> (tempfile::TempDir, String, Dataset) {
    let (dir, uri, ds) = fixture_of(Shape::Ivw, 2, 4).await;
    let ds = index_i(&ds, "i_idx").await;
    assert_eq!(ds.manifest().version, BEFORE_TAGGING);
    (dir, uri, ds)
}

/// Upstream's `tagged_two_column_fixture`.
async fn tagged_table() -> (tempfile::TempDir, String, Dataset) {
    let (dir, uri, ds) = indexed_table().await;
    let tagged = make_tagged(&ds).await;
    (dir, uri, tagged)
}

/// A BTree segment `name` on `column` built at `ds`'s version over `fragments` (all when `None`),
/// not committed; the `CreateIndex` that would commit it from that version.
async fn stage_index(
    ds: &Dataset,
    column: &str,
    name: &str,
    fragments: Option<Vec<u32>>,
) -> (Transaction, IndexMetadata) {
    let mut stale = ds.clone();
    let params = ScalarIndexParams::default();
    let mut builder =
        lance::index::CreateIndexBuilder::new(&mut stale, &[column], IndexType::Scalar, &params).name(name.to_string());
    if let Some(fragments) = fragments {
        builder = builder.fragments(fragments);
    }
    let segment = builder.execute_uncommitted().await.expect("stage the segment");
    let op = Operation::CreateIndex { new_indices: vec![segment.clone()], removed_indices: vec![] };
    (TransactionBuilder::new(ds.manifest().version, op).build(), segment)
}

/// Upstream's `tagged_two_column_fixture` with a `v_idx` staged at the version before tagging (not
/// committed), and the indices as stored before anything else lands.
async fn tagged_table_with_a_stale_v_index()
-> (tempfile::TempDir, String, Dataset, Vec<IndexMetadata>, Transaction, IndexMetadata) {
    let (dir, uri, ds) = tagged_table().await;
    let before = stored_indices(&ds).await;
    let pre = ds.checkout_version(BEFORE_TAGGING).await.expect("the version before tagging");
    let (ours, segment) = stage_index(&pre, "v", "v_idx", None).await;
    (dir, uri, ds, before, ours, segment)
}

/// Upstream's `create_v_index`: `v_idx` on `v`, committed by Lance.
async fn create_v_index(ds: &Dataset) -> Dataset {
    let mut ds = ds.clone();
    ds.create_index(&["v"], IndexType::Scalar, Some("v_idx".into()), &ScalarIndexParams::default(), false)
        .await
        .expect("create v_idx");
    ds
}

/// Upstream's `rewrite_in_place`, staged: set `column` of the row `w = key` to `value` with a
/// column-rewriting merge insert keyed on the unindexed `w`, read at `ds`'s version. Returns the
/// staged transaction and the rows it reports as affected.
async fn stage_rewrite_in_place(
    ds: &Dataset,
    column: &str,
    key: i32,
    value: i32,
) -> (Transaction, Option<lance_select::RowAddrTreeMap>) {
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("w", DataType::Int32, false),
        Field::new(column, DataType::Int32, false),
    ]));
    let source = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int32Array::from(vec![key])), Arc::new(Int32Array::from(vec![value]))],
    )
    .expect("patch batch");
    let staged = in_place_patch(ds, "w").execute_uncommitted_batches(vec![source]).await.expect("stage the rewrite");
    (staged.transaction, staged.affected_rows)
}

/// Upstream's `rewrite_in_place`, committed by Lance at `ds`'s version (a peer).
async fn rewrite_in_place(ds: &Dataset, column: &str, key: i32, value: i32) -> Dataset {
    let (txn, _) = stage_rewrite_in_place(ds, column, key, value).await;
    CommitBuilder::new(Arc::new(ds.clone())).execute(txn).await.expect("Lance commits the rewrite")
}

/// Sorted `(i, v)` pairs, under `predicate` if any, with or without scalar indices.
async fn rows(ds: &Dataset, predicate: Option<&str>, use_index: bool) -> Vec<(i32, i32)> {
    let mut scan = ds.scan();
    if let Some(predicate) = predicate {
        scan.filter(predicate).expect("filter");
    }
    scan.use_scalar_index(use_index);
    let batch = scan.try_into_batch().await.expect("scan");
    let i = batch["i"].as_primitive::<Int32Type>().values().to_vec();
    let v = batch["v"].as_primitive::<Int32Type>().values().to_vec();
    let mut pairs: Vec<(i32, i32)> = i.into_iter().zip(v).collect();
    pairs.sort_unstable();
    pairs
}

/// Upstream's `assert_index_agrees_with_scan`: the indexed answer for `predicate`, and for the
/// whole table, equals the index-disabled scan; returns the indexed answer.
async fn index_agrees_with_scan(ds: &Dataset, predicate: &str) -> Vec<(i32, i32)> {
    let indexed = rows(ds, Some(predicate), true).await;
    assert_eq!(indexed, rows(ds, Some(predicate), false).await, "{predicate}: indexed and scanned answers agree");
    assert_eq!(rows(ds, None, true).await, rows(ds, None, false).await, "the whole table");
    indexed
}

/// Upstream's `assert_segment_and_history_untouched`: `i_idx` and the reuse entry are stored
/// exactly as in `before`, and `i_idx` still translates onto the live destinations.
async fn assert_segment_and_history_untouched(ds: &Dataset, before: &[IndexMetadata], live: &[u32]) {
    let stored = stored_indices(ds).await;
    for name in ["i_idx", FRAG_REUSE_INDEX_NAME] {
        let now = stored.iter().find(|i| i.name == name).map(|i| (i.uuid, i.fragment_bitmap.clone()));
        let then = before.iter().find(|i| i.name == name).map(|i| (i.uuid, i.fragment_bitmap.clone()));
        assert!(now.is_some(), "{name} is stored");
        assert_eq!(now, then, "{name} is untouched");
    }
    let derived = ds.load_indices().await.expect("indices");
    assert_eq!(
        bitmap_named(&derived, "i_idx"),
        Some(RoaringBitmap::from_iter(live.iter().copied())),
        "i_idx translates"
    );
}

/// A `v_idx` built before the table was tagged (no `i_idx` here, as upstream) lands after the
/// tagging rewrite with its provenance and translates.
#[tokio::test]
async fn user_index_built_before_a_stable_partition_lands_translating() {
    let (_dir, uri, ds) = fixture_of(Shape::Ivw, 2, 4).await;
    let (ours, segment) = stage_index(&ds, "v", "v_idx", None).await;
    assert_eq!(segment.fragment_bitmap, Some(RoaringBitmap::from_iter([0u32, 1])));
    make_tagged(&ds).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "user_index_built_before_a_stable_partition_lands_translating",
        "v_idx over both sources",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    assert_eq!(
        bitmap_named(&stored_indices(&latest).await, "v_idx"),
        Some(RoaringBitmap::from_iter([0u32, 1])),
        "the provenance is kept"
    );
    let derived = latest.load_indices().await.expect("indices");
    assert_eq!(bitmap_named(&derived, "v_idx"), Some(RoaringBitmap::from_iter([10u32, 11])), "and translates");
    assert_eq!(index_agrees_with_scan(&latest, "v = 3").await, vec![(3, 3)]);
}

/// A child index (`s.x` of a packed struct) built before the tagging rewrite; meanwhile the whole
/// packed struct of the row `w = 3` (in 11) is rewritten in place. The index lands, withdrawn from
/// the transition (its rows are scanned), and every answer is right.
///
/// Model bug 15 (fixed, see `tests/upstream/README.md`): the rewrite's `fields_modified` names the
/// parent `s` (field 2), the index the child `x` (field 3). The commit layer now fills the update's
/// `InvalidateIndexCoverage` with the descendants of `s` in the read version's schema, so it
/// reaches the `AddIndex` rebase and withdraws the lineage, as Lance's resolver does.
#[tokio::test]
async fn child_index_built_before_a_packed_parent_rewrite_lands_withdrawn() {
    use arrow_array::{ArrayRef, StructArray};
    use arrow_schema::Fields;

    let children = Fields::from(vec![Field::new("x", DataType::Int32, false)]);
    let mut packed = Field::new("s", DataType::Struct(children.clone()), false);
    // lance-encoding's PACKED_STRUCT_META_KEY: the struct is stored packed, rewritten whole.
    packed.set_metadata([("lance-encoding:packed".to_string(), "true".to_string())].into());
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("i", DataType::Int32, false),
        Field::new("w", DataType::Int32, false),
        packed.clone(),
    ]));
    let values = Arc::new(Int32Array::from((0..8).collect::<Vec<_>>())) as ArrayRef;
    let structs = Arc::new(StructArray::new(children.clone(), vec![values.clone()], None)) as ArrayRef;
    let batch = RecordBatch::try_new(schema.clone(), vec![values.clone(), values, structs]).expect("batch");
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let params = WriteParams {
        max_rows_per_file: 4,
        data_storage_version: Some(lance_file::version::LanceFileVersion::V2_1),
        ..Default::default()
    };
    let ds = Dataset::write(RecordBatchIterator::new([Ok(batch)], schema), &uri, Some(params)).await.expect("table");
    let (ours, segment) = stage_index(&ds, "s.x", "x_idx", None).await;
    assert_eq!(segment.fragment_bitmap, Some(RoaringBitmap::from_iter([0u32, 1])));

    let tagged = make_tagged(&ds).await;
    let patch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![Field::new("w", DataType::Int32, false), packed])),
        vec![
            Arc::new(Int32Array::from(vec![3])) as ArrayRef,
            Arc::new(StructArray::new(children, vec![Arc::new(Int32Array::from(vec![333])) as ArrayRef], None)),
        ],
    )
    .expect("patch batch");
    let (patched, _) =
        in_place_patch(&tagged, "w").execute_batches(vec![patch]).await.expect("the packed rewrite lands");
    assert_eq!(live_ids(&patched), vec![10, 11], "rewritten in place");

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record("child_index_built_before_a_packed_parent_rewrite_lands_withdrawn", "child index", &j, Upstream::Compatible);
    landed.expect("lands");
    let latest = open(&uri).await;
    let stored = bitmap_named(&stored_indices(&latest).await, "x_idx").expect("x_idx is stored with a bitmap");
    assert!(stored.is_empty(), "the transition's sources are withdrawn: {stored:?}");
    assert_eq!(i_values(&latest, "s.x = 333", false).await, vec![3]);
    assert_eq!(i_values(&latest, "s.x = 333", true).await, vec![3]);
    assert_eq!(i_values(&latest, "s.x = 3", true).await, Vec::<i32>::new());
    assert_eq!(i_values(&latest, "s.x >= 0", true).await, (0..8).collect::<Vec<_>>());
}

/// Ours is an in-place rewrite of `v` (row 3, in 11) read before another writer indexed `v` on
/// the live fragments: it lands, and the new index loses the rewritten fragment.
#[tokio::test]
async fn retry_withdraws_an_index_created_concurrently_on_the_rewritten_column() {
    let (_dir, uri, stale) = tagged_table().await;
    let read_version = stale.manifest().version;
    let (ours, affected) = stage_rewrite_in_place(&stale, "v", 3, 333).await;
    let other = create_v_index(&open(&uri).await).await;
    assert_eq!(other.manifest().version, read_version + 1);
    let before = stored_indices(&other).await;
    assert_eq!(bitmap_named(&before, "v_idx"), Some(RoaringBitmap::from_iter([10u32, 11])));

    let (j, landed) = judge_and_commit_with(&uri, ours, affected).await;
    record(
        "retry_withdraws_an_index_created_concurrently_on_the_rewritten_column",
        "v_idx created meanwhile",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    assert_eq!(latest.manifest().version, read_version + 2);
    assert_eq!(
        bitmap_named(&stored_indices(&latest).await, "v_idx"),
        Some(RoaringBitmap::from_iter([10u32])),
        "the concurrently created index lost the rewritten fragment"
    );
    assert_eq!(rows(&latest, Some("v = 333"), true).await, vec![(3, 333)]);
    assert_eq!(rows(&latest, Some("v = 3"), true).await, vec![]);
    assert_eq!(rows(&latest, None, true).await, rows(&latest, None, false).await);
    assert_segment_and_history_untouched(&latest, &before, &[10, 11]).await;
}

/// A `v_idx` segment staged before the tagging rewrite, committed after `v` of row 3 (in 11) was
/// rewritten in place: both sources feed 11, so the segment claims nothing and is scanned.
#[tokio::test]
async fn tagged_table_commit_of_a_stale_staged_index_drops_rewritten_destinations() {
    let (_dir, uri, ds, before, ours, segment) = tagged_table_with_a_stale_v_index().await;
    assert_eq!(segment.fragment_bitmap, Some(RoaringBitmap::from_iter([0u32, 1])));
    rewrite_in_place(&ds, "v", 3, 333).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "tagged_table_commit_of_a_stale_staged_index_drops_rewritten_destinations",
        "v rewritten in 11",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    let stored = bitmap_named(&stored_indices(&latest).await, "v_idx").expect("v_idx is stored with a bitmap");
    assert!(stored.is_empty(), "{stored:?}");
    let derived = latest.load_indices().await.expect("indices");
    assert!(bitmap_named(&derived, "v_idx").is_none_or(|b| b.is_empty()), "claims nothing");
    assert_eq!(rows(&latest, Some("v = 333"), true).await, vec![(3, 333)]);
    assert_eq!(rows(&latest, Some("v = 3"), true).await, vec![]);
    assert_eq!(rows(&latest, None, true).await, (0..8).map(|i| (i, if i == 3 { 333 } else { i })).collect::<Vec<_>>());
    assert_segment_and_history_untouched(&latest, &before, &[10, 11]).await;
}

/// The same race with a cast of `v` (`alter_columns`, a new field id): the segment cannot be
/// carried across it, the commit is refused (upstream: "Rebuild") and nothing is published.
#[tokio::test]
async fn tagged_table_refuses_committing_a_staged_index_after_a_cast_of_its_column() {
    use lance::dataset::ColumnAlteration;
    let (_dir, uri, ds, before, ours, _) = tagged_table_with_a_stale_v_index().await;
    let mut cast = ds.clone();
    cast.alter_columns(&[ColumnAlteration::new("v".into()).cast_to(DataType::Int64)]).await.expect("cast");
    let version = cast.manifest().version;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "tagged_table_refuses_committing_a_staged_index_after_a_cast_of_its_column",
        "cast of v",
        &j,
        Upstream::Conflict,
    );
    assert!(landed.is_err());
    let latest = open(&uri).await;
    assert_eq!(latest.manifest().version, version, "nothing was committed");
    assert!(stored_indices(&latest).await.iter().all(|i| i.name != "v_idx"));
    assert_eq!(indexed_agrees(&latest, "v = 3").await, vec![3]);
    assert_segment_and_history_untouched(&latest, &before, &[10, 11]).await;
}

/// Two stable partitions around one in-place rewrite: `v` of row 3 rewritten in 11, then 10 and
/// 11 partitioned again into 20 and 21, before the segment staged at the untagged version is
/// committed. The withdrawal happens where the rewrite happened: the segment claims nothing.
#[tokio::test]
async fn tagged_table_commit_of_a_stale_staged_index_sees_a_rewrite_on_a_retired_destination() {
    let (_dir, uri, ds, before, ours, _) = tagged_table_with_a_stale_v_index().await;
    let ds = reserve(&rewrite_in_place(&ds, "v", 3, 333).await, 40).await;
    let (transition, destinations) = partition(&ds, &[10, 11], 20).await;
    let ds = lance_commit(&ds, tagged_rewrite(&ds, fragments_of(&ds, &[10, 11]), destinations, vec![transition]).await)
        .await;
    assert_eq!(live_ids(&ds), vec![20, 21]);
    assert_eq!(index_agrees_with_scan(&ds, "i = 3").await, vec![(3, 333)]);

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "tagged_table_commit_of_a_stale_staged_index_sees_a_rewrite_on_a_retired_destination",
        "rewrite on a retired destination",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    let stored = stored_indices(&latest).await;
    let v_idx = bitmap_named(&stored, "v_idx").expect("v_idx is stored with a bitmap");
    assert!(v_idx.is_empty(), "{v_idx:?}");
    assert_eq!(rows(&latest, Some("v = 333"), true).await, vec![(3, 333)]);
    assert_eq!(rows(&latest, Some("v = 3"), true).await, vec![]);
    let i_idx = stored.iter().find(|i| i.name == "i_idx").expect("i_idx");
    assert_eq!(Some(i_idx.uuid), before.iter().find(|i| i.name == "i_idx").map(|i| i.uuid));
    assert_eq!(i_idx.fragment_bitmap, Some(RoaringBitmap::from_iter([0u32, 1])));
}

/// A segment staged over an appended fragment that a bare rewrite (admitted: no committed index
/// covers it) then consumed: nothing translates it, so the commit is refused (upstream:
/// "Rebuild").
#[tokio::test]
async fn tagged_table_commit_of_a_staged_index_over_a_bare_rewritten_source_says_rebuild() {
    let (_dir, uri, ds) = tagged_table().await;
    let ds = append_rows(&ds, 8..12).await;
    let appended = *live_ids(&ds).last().expect("the appended fragment");
    let (ours, _) = stage_index(&ds, "v", "v_idx", Some(vec![appended as u32])).await;
    let copy = compacted_copy_of(&ds, fragments_of(&ds, &[appended])).await;
    let rewritten = lance_commit(&ds, bare_rewrite(fragments_of(&ds, &[appended]), copy)).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "tagged_table_commit_of_a_staged_index_over_a_bare_rewritten_source_says_rebuild",
        "bare rewrite of the segment's fragment",
        &j,
        Upstream::Conflict,
    );
    assert!(landed.is_err());
    let latest = open(&uri).await;
    assert_eq!(latest.manifest().version, rewritten.manifest().version, "nothing was committed");
    assert!(stored_indices(&latest).await.iter().all(|i| i.name != "v_idx"));
    assert_eq!(sorted_values(&latest).await, (0..12).collect::<Vec<_>>());
}
