//! Port of upstream's `tagged_rewrite_conflicts/index_over_committed_sp.rs`: a user index built at
//! a version before a stable-partition rewrite and committed after it. The committed rewrite is
//! read back from its transaction file, which never carries the fragment-reuse entry, so what
//! proves the remap was deferred is the latest manifest's tagged entry: its recorded lineage. The
//! index then lands with its provenance (the retired sources) and translates; a segment of an
//! NGram index, or one over fragments off the lineage, keeps the eager rule.
//!
//! Ours is the staged index (`CreateIndexBuilder::execute_uncommitted`, upstream's `stage`),
//! committed from its read version through our commit loop (upstream:
//! `commit_existing_index_segments`, which stages the same `CreateIndex`).

use super::*;

/// Upstream's fixture: two fragments of four rows, `i` 0..8, a constant `text`, a payload `w`.
async fn table() -> (tempfile::TempDir, String, Dataset) {
    fixture_of(Shape::ITextW, 2, 4).await
}

/// A segment named `idx` on `column` over `fragments`, built at `ds`'s version and not committed;
/// the transaction that would commit it from that version.
async fn stage(ds: &Dataset, column: &str, index_type: IndexType, fragments: Vec<u32>) -> (Transaction, IndexMetadata) {
    let mut stale = ds.clone();
    let params = ScalarIndexParams::for_builtin(index_type.try_into().expect("a scalar index type"));
    let segment = lance::index::CreateIndexBuilder::new(&mut stale, &[column], index_type, &params)
        .name("idx".to_string())
        .fragments(fragments)
        .execute_uncommitted()
        .await
        .expect("stage the segment");
    let op = Operation::CreateIndex { new_indices: vec![segment.clone()], removed_indices: vec![] };
    (TransactionBuilder::new(ds.manifest().version, op).build(), segment)
}

fn bitmap_of(indices: &[IndexMetadata]) -> Option<RoaringBitmap> {
    indices.iter().find(|i| i.name == "idx").and_then(|i| i.fragment_bitmap.clone())
}

#[tokio::test]
async fn index_built_before_a_stable_partition_lands_translating() {
    let (_dir, uri, ds) = table().await;
    let (ours, segment) = stage(&ds, "i", IndexType::BTree, vec![0, 1]).await;
    make_tagged(&ds).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "index_built_before_a_stable_partition_lands_translating",
        "index over both sources",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    let stored = stored_indices(&latest).await;
    assert_eq!(stored.iter().find(|i| i.name == "idx").map(|i| i.uuid), Some(segment.uuid));
    assert_eq!(bitmap_of(&stored), Some(RoaringBitmap::from_iter([0u32, 1])), "provenance: the retired sources");
    let derived = latest.load_indices().await.expect("indices");
    assert_eq!(bitmap_of(&derived), Some(RoaringBitmap::from_iter([10u32, 11])), "it translates to both destinations");
    assert_eq!(indexed_agrees(&latest, "i = 3").await, vec![3]);
    assert_eq!(indexed_agrees(&latest, "i = 6").await, vec![6]);
}

/// The segment covers fragment 0 but not 1, and the rewrite consumed both: it lands with that
/// provenance and claims nothing for the partition (the reader scans it).
#[tokio::test]
async fn index_covering_part_of_a_partition_lands_claiming_nothing() {
    let (_dir, uri, ds) = table().await;
    let (ours, _) = stage(&ds, "i", IndexType::BTree, vec![0]).await;
    make_tagged(&ds).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "index_covering_part_of_a_partition_lands_claiming_nothing",
        "index over one source",
        &j,
        Upstream::Compatible,
    );
    landed.expect("lands");
    let latest = open(&uri).await;
    assert_eq!(bitmap_of(&stored_indices(&latest).await), Some(RoaringBitmap::from_iter([0u32])));
    let derived = latest.load_indices().await.expect("indices");
    assert!(bitmap_of(&derived).is_none_or(|b| b.is_empty()), "nothing claimed for the partition");
    indexed_agrees(&latest, "i = 3").await;
}

/// An NGram segment over retired sources must be rebuilt: the conflict asks for it up front.
#[tokio::test]
async fn ngram_index_built_before_a_stable_partition_retries() {
    let (_dir, uri, ds) = table().await;
    let (ours, _) = stage(&ds, "text", IndexType::NGram, vec![0, 1]).await;
    let tagged = make_tagged(&ds).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record("ngram_index_built_before_a_stable_partition_retries", "ngram over both sources", &j, Upstream::Retryable);
    assert_eq!(landed.err(), Some("retry"));
    assert_eq!(open(&uri).await.manifest().version, tagged.manifest().version, "nothing written");
}

/// A segment over a fragment the rewrite never touched lands untouched.
#[tokio::test]
async fn index_off_the_rewritten_fragments_lands_directly() {
    let (_dir, uri, ds) = table().await;
    let ds = append_rows(&ds, 8..12).await;
    assert_eq!(ds.manifest().fragments.len(), 3);
    let (ours, _) = stage(&ds, "i", IndexType::BTree, vec![2]).await;
    let ds = reserve(&ds, 20).await;
    let (transition, destinations) = partition(&ds, &[0, 1], 10).await;
    lance_commit(&ds, tagged_rewrite(&ds, fragments_of(&ds, &[0, 1]), destinations, vec![transition]).await).await;

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record("index_off_the_rewritten_fragments_lands_directly", "index off the group", &j, Upstream::Compatible);
    landed.expect("lands");
    let latest = open(&uri).await;
    assert_eq!(bitmap_of(&stored_indices(&latest).await), Some(RoaringBitmap::from_iter([2u32])));
    assert_eq!(bitmap_of(&latest.load_indices().await.expect("indices")), Some(RoaringBitmap::from_iter([2u32])));
    assert_eq!(indexed_agrees(&latest, "i = 9").await, vec![9]);
}

/// Between the build and the commit a payload rewrite (a column-rewriting merge insert of `text`
/// for `i = 3`, on destination 11) landed. A stale index on the payload loses the transition's
/// coverage; an index on the preserved join key still translates. Upstream's tail
/// (`optimize_indices` rebuilds the coverage) is a maintenance step, no concurrent pair.
#[tokio::test]
async fn index_built_before_a_stable_partition_and_a_column_rewrite_preserves_valid_coverage() {
    let mut ledger =
        Ledger::new("index_built_before_a_stable_partition_and_a_column_rewrite_preserves_valid_coverage", &[], &[]);
    for (case, column, withdrawn) in [("payload", "text", true), ("join_key", "i", false)] {
        let (_dir, uri, ds) = table().await;
        let (ours, segment) = stage(&ds, column, IndexType::BTree, vec![0, 1]).await;
        let tagged = make_tagged(&ds).await;
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("i", DataType::Int32, false),
            Field::new("text", DataType::Utf8, false),
        ]));
        let patch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from(vec![3])), Arc::new(arrow_array::StringArray::from(vec!["patched"]))],
        )
        .expect("patch batch");
        let (patched, _) = in_place_patch(&tagged, "i").execute_batches(vec![patch]).await.expect("patch lands");
        assert_eq!(live_ids(&patched), vec![10, 11], "rewritten in place");

        let (j, landed) = judge_and_commit(&uri, ours).await;
        ledger.record(case, &j, Upstream::Compatible);
        landed.expect("lands");
        let latest = open(&uri).await;
        let stored = stored_indices(&latest).await;
        assert_eq!(stored.iter().find(|i| i.name == "idx").map(|i| i.uuid), Some(segment.uuid), "{case}");
        let expected = if withdrawn { RoaringBitmap::new() } else { RoaringBitmap::from_iter([0u32, 1]) };
        assert_eq!(bitmap_of(&stored), Some(expected), "{case}: stored coverage");
        if !withdrawn {
            assert_eq!(
                bitmap_of(&latest.load_indices().await.expect("indices")),
                Some(RoaringBitmap::from_iter([10u32, 11])),
                "{case}: it translates"
            );
            assert_eq!(indexed_agrees(&latest, "i = 3").await, vec![3]);
        }
        assert_eq!(indexed_agrees(&latest, "text = 'patched'").await, vec![3], "{case}");
        assert_eq!(sorted_values(&latest).await, (0..8).collect::<Vec<_>>());
    }
    ledger.finish();
}

/// The same race with a cast of the indexed column (`alter_columns`, which rewrites it under a new
/// field id): the field the index keys on is gone, so the commit retries against the new field.
#[tokio::test]
async fn index_built_before_a_stable_partition_and_a_cast_retries() {
    use lance::dataset::ColumnAlteration;
    let (_dir, uri, ds) = table().await;
    let (ours, _) = stage(&ds, "i", IndexType::BTree, vec![0, 1]).await;
    let mut tagged = make_tagged(&ds).await;
    tagged.alter_columns(&[ColumnAlteration::new("i".into()).cast_to(DataType::Int64)]).await.expect("cast");
    assert_eq!(live_ids(&tagged), vec![10, 11], "cast in place");

    let (j, landed) = judge_and_commit(&uri, ours).await;
    record(
        "index_built_before_a_stable_partition_and_a_cast_retries",
        "cast of the indexed column",
        &j,
        Upstream::Retryable,
    );
    assert_eq!(landed.err(), Some("retry"));
}
