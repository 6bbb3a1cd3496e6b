//! The replay primitive on real branches: grafting, re-bound fragments, re-derived deletion files,
//! provenance, idempotence, zero data copy, typed refusals.

use lance::index::DatasetIndexExt;
use lance_actions::RebindRefusal;
use lance_actions_replay::provenance::{SOURCE_BRANCH, SOURCE_TXN, SOURCE_VERSION};
use lance_actions_replay::{Error, Outcome, Refusal, ReplayOptions};
use lance_index::IndexType;
use lance_index::scalar::ScalarIndexParams;

use crate::support::*;

fn opts() -> ReplayOptions {
    ReplayOptions::default()
}

/// The seed's scenario: main m1 m2, feature f1 f2, main m3; rebase feature onto m3; merge it into main.
#[tokio::test]
async fn seed_scenario_rebase_then_fast_forward_main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await; // m1
    append(&b, "main", &range(10, 20)).await; // m2
    b.create("feature", "main", None).await.expect("branch feature");
    append(&b, "feature", &range(100, 110)).await; // f1
    delete(&b, "feature", "id = 3").await; // f2: a deletion in a fragment both sides share
    append(&b, "main", &range(20, 30)).await; // m3

    let rebased = b.rebase("feature", "main", &opts()).await.expect("rebase");
    let Outcome::Rebased { landed, old_physical, new_physical } = &rebased else { panic!("{rebased:?}") };
    assert_eq!(landed.len(), 2);
    assert_ne!(old_physical, new_physical);
    let mut expected: Vec<i64> = range(0, 30).into_iter().chain(range(100, 110)).filter(|i| *i != 3).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "feature").await, expected, "feature = m3 + f1' + f2'");
    assert_eq!(ids(&b, "main").await, range(0, 30), "main untouched by the rebase");

    let merged = b.merge("feature", "main", &opts()).await.expect("merge");
    assert!(matches!(merged, Outcome::FastForward { ref landed, .. } if landed.len() == 2), "{merged:?}");
    assert_eq!(ids(&b, "main").await, expected, "plain Lance reads the merged main");
    assert!(matches!(b.merge("feature", "main", &opts()).await, Ok(Outcome::AlreadyUpToDate { .. })));
}

#[tokio::test]
async fn a_replay_references_files_in_place_and_writes_no_data_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 20)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 150)).await;
    delete(&b, "feature", "id = 5 OR id = 120").await;
    append(&b, "main", &range(20, 25)).await;
    let before = inventory(dir.path());
    let out = b.merge("feature", "main", &opts()).await.expect("merge");
    assert!(matches!(out, Outcome::Merged { ref landed, .. } if landed.len() == 2), "{out:?}");
    let written = written_by_kind(&before, &inventory(dir.path()));
    assert!(!written.contains_key("data"), "no data file is written: {written:?}");
    assert!(!written.contains_key("_indices"), "no index file is written: {written:?}");
    assert!(written.get("_deletions").copied().unwrap_or(0) > 0, "deletion files are re-derived: {written:?}");
    let mut expected: Vec<i64> =
        range(0, 25).into_iter().chain(range(100, 150)).filter(|i| *i != 5 && *i != 120).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected);
    // The grafted base names the feature branch's root, and the new fragments use it.
    let main = open(&b, "main").await;
    let feature = b.resolve("feature").await.expect("feature").expect("a branch");
    let graft =
        main.manifest().base_paths.values().find(|p| p.path.ends_with(&format!("tree/{feature}"))).expect("graft");
    assert!(main.manifest().fragments.iter().flat_map(|f| &f.files).any(|f| f.base_id == Some(graft.id)));
}

#[tokio::test]
async fn a_replayed_commit_records_provenance_and_a_second_replay_is_a_no_op() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let v = append(&b, "feature", &range(50, 55)).await;
    let out = b.cherry_pick("feature", &[v], "main", &opts()).await.expect("cherry-pick");
    let Outcome::CherryPicked { landed, .. } = out else { panic!("{out:?}") };
    let main = open(&b, "main").await;
    let txn = main.read_transaction_by_version(landed[0].target_version).await.expect("read").expect("txn");
    let props = txn.transaction_properties.as_deref().expect("properties");
    let physical = b.resolve("feature").await.expect("feature").expect("branch");
    assert_eq!(props.get(SOURCE_BRANCH), Some(&physical));
    assert_eq!(props.get(SOURCE_VERSION), Some(&v.to_string()));
    let source_txn = open(&b, "feature").await.read_transaction_by_version(v).await.expect("read").expect("txn");
    assert_eq!(props.get(SOURCE_TXN), Some(&source_txn.uuid));
    let again = b.cherry_pick("feature", &[v], "main", &opts()).await.expect("again");
    assert_eq!(again, Outcome::AlreadyUpToDate { skipped: vec![v] });
    assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(50, 55)).collect::<Vec<_>>());
}

/// Convergent deletes are no-ops (OmniGraph's merge truth table; `design/replay.md`, "2. The
/// primitive (`replay.rs`, `remap.rs`, `graft.rs`)"): the same row deleted on both sides merges
/// cleanly, the row is gone once, nothing else changes.
#[tokio::test]
async fn the_same_row_deleted_on_both_sides_merges_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 20)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 105)).await;
    let fv = delete(&b, "feature", "id = 7 OR id = 8").await;
    delete(&b, "main", "id = 7").await;
    let dry = b.merge("feature", "main", &ReplayOptions { dry_run: true, ..opts() }).await.expect("dry run");
    assert!(matches!(dry, Outcome::Merged { ref landed, .. } if landed.len() == 2), "{dry:?}");
    let out = b.merge("feature", "main", &opts()).await.expect("merge");
    let Outcome::Merged { landed, .. } = &out else { panic!("convergent deletes merge: {out:?}") };
    assert!(landed.iter().any(|l| l.source_version == fv), "{out:?}");
    let expected: Vec<i64> = range(0, 20).into_iter().chain(range(100, 105)).filter(|i| *i != 7 && *i != 8).collect();
    assert_eq!(ids(&b, "main").await, expected, "7 deleted once, 8 deleted by the branch");
    assert_eq!(ids(&b, "main").await, ids(&b, "feature").await);
}

/// A row deleted on one side and updated (moved out and rewritten) on the other is a real
/// divergence: a conflict returned as data with nothing written. Every conflicting commit of the
/// merge is reported, each with its source version and the target version it meets.
#[tokio::test]
async fn delete_versus_update_conflicts_and_every_conflict_is_reported() {
    use lance::dataset::UpdateBuilder;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 20)).await;
    b.create("feature", "main", None).await.expect("branch");
    let f1 = delete(&b, "feature", "id = 4").await;
    let f2 = delete(&b, "feature", "id = 6").await;
    let mut main_versions = Vec::new();
    for id in [4, 6] {
        let ds = open(&b, "main").await;
        let updated = UpdateBuilder::new(std::sync::Arc::new(ds))
            .update_where(&format!("id = {id}"))
            .expect("where")
            .set("name", "'updated'")
            .expect("set")
            .build()
            .expect("job")
            .execute()
            .await
            .expect("update");
        main_versions.push(updated.new_dataset.manifest().version);
    }
    let before = open(&b, "main").await.manifest().version;
    for dry_run in [true, false] {
        let out = b.merge("feature", "main", &ReplayOptions { dry_run, ..opts() }).await.expect("merge");
        let Outcome::Conflicted { conflicts, landed } = out else { panic!("expected a conflict, got {out:?}") };
        assert!(landed.is_empty());
        let pairs: Vec<(u64, Option<u64>)> =
            conflicts.iter().map(|c| (c.source_version, c.reason.peer_version)).collect();
        assert_eq!(pairs, vec![(f1, Some(main_versions[0])), (f2, Some(main_versions[1]))], "{conflicts:?}");
        assert!(conflicts.iter().all(|c| c.reason.rule == lance_actions::Rule::RowsOverlap), "{conflicts:?}");
        assert_eq!(open(&b, "main").await.manifest().version, before, "nothing written (dry run {dry_run})");
    }
    let main = ids(&b, "main").await;
    assert_eq!(main, range(0, 20), "main keeps its updated rows, each once");
}

#[tokio::test]
async fn disjoint_deletes_in_one_shared_fragment_merge_row_by_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await; // one fragment
    b.create("feature", "main", None).await.expect("branch");
    delete(&b, "feature", "id = 1").await;
    delete(&b, "main", "id = 2").await;
    let out = b.merge("feature", "main", &opts()).await.expect("merge");
    assert!(matches!(out, Outcome::Merged { .. }), "{out:?}");
    let expected: Vec<i64> = range(0, 10).into_iter().filter(|i| *i != 1 && *i != 2).collect();
    assert_eq!(ids(&b, "main").await, expected, "the re-derived vector is the union of both sides");
}

#[tokio::test]
async fn an_overwrite_cannot_be_replayed_and_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let ds = open(&b, "feature").await;
    let v = lance::dataset::InsertBuilder::new(std::sync::Arc::new(ds))
        .with_params(&lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Overwrite, ..Default::default() })
        .execute(vec![rows(&[1])])
        .await
        .expect("overwrite")
        .manifest()
        .version;
    let before = open(&b, "main").await.manifest().version;
    match b.cherry_pick("feature", &[v], "main", &opts()).await {
        Err(Error::NotReplayable { version, why, .. }) => {
            assert_eq!(version, v);
            assert_eq!(
                why,
                Refusal::Rebind {
                    source: RebindRefusal::ReplacesTable { action: lance_actions::ActionKind::ResetTable }
                }
            );
            assert!(why.to_string().contains("ResetTable"), "{why}");
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    assert_eq!(open(&b, "main").await.manifest().version, before);
}

#[tokio::test]
async fn an_index_built_on_the_branch_answers_on_main_after_the_merge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 30)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 120)).await;
    let mut feature = open(&b, "feature").await;
    feature
        .create_index(&["id"], IndexType::BTree, Some("id_idx".into()), &ScalarIndexParams::default(), false)
        .await
        .expect("index on the branch");
    let out = b.merge("feature", "main", &opts()).await.expect("merge");
    assert!(matches!(out, Outcome::FastForward { ref landed, .. } if landed.len() == 2), "{out:?}");
    let main = open(&b, "main").await;
    let indices = main.load_indices().await.expect("indices");
    let idx = indices.iter().find(|i| i.name == "id_idx").expect("the index was replayed");
    assert!(idx.base_id.is_some(), "its files are read in place from the branch");
    for (filter, n) in [("id = 105", 1), ("id >= 25 AND id < 102", 7), ("id = 99", 0)] {
        assert_eq!(main.count_rows(Some(filter.into())).await.expect("query"), n, "{filter}");
    }
    let mut scan = main.scan();
    scan.filter("id = 110").expect("filter");
    let plan = scan.explain_plan(false).await.expect("plan");
    assert!(plan.contains("ScalarIndexQuery") || plan.contains("MaterializeIndex"), "the index is used: {plan}");
}

#[tokio::test]
async fn nested_branches_merge_back_two_levels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("feature");
    append(&b, "feature", &range(100, 105)).await;
    b.create("feature/child", "feature", None).await.expect("child");
    append(&b, "feature/child", &range(200, 205)).await;
    delete(&b, "feature/child", "id = 101 OR id = 4").await;
    append(&b, "main", &range(10, 12)).await;
    let up = b.merge("feature/child", "feature", &opts()).await.expect("child into feature");
    assert!(matches!(up, Outcome::FastForward { .. }), "{up:?}");
    let out = b.merge("feature", "main", &opts()).await.expect("feature into main");
    assert!(matches!(out, Outcome::Merged { ref landed, .. } if landed.len() == 3), "{out:?}");
    let mut expected: Vec<i64> = range(0, 12)
        .into_iter()
        .chain(range(100, 105))
        .chain(range(200, 205))
        .filter(|i| *i != 101 && *i != 4)
        .collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected);
    // The child's files are reached from main through a graft of the child's root.
    let main = open(&b, "main").await;
    assert!(main.manifest().base_paths.values().any(|p| p.path.contains("child")), "{:?}", main.manifest().base_paths);
}

/// A commit reaching main along two paths (directly and through another branch) lands once.
#[tokio::test]
async fn a_commit_merged_along_two_paths_lands_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("g", "main", None).await.expect("g");
    append(&b, "g", &range(500, 505)).await;
    b.create("feature", "main", None).await.expect("feature");
    append(&b, "feature", &range(600, 602)).await;
    b.merge("g", "feature", &opts()).await.expect("g into feature");
    b.merge("feature", "main", &opts()).await.expect("feature into main");
    let again = b.merge("g", "main", &opts()).await.expect("g into main");
    assert!(matches!(again, Outcome::AlreadyUpToDate { .. }), "{again:?}");
    let mut expected: Vec<i64> = range(0, 10).into_iter().chain(range(500, 505)).chain(range(600, 602)).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected, "no row twice");
}

/// An index addresses rows by fragment id: when the target numbered the branch's fragments
/// differently, replaying it would point at the wrong rows, so it is refused before any write.
#[tokio::test]
async fn an_index_over_renumbered_fragments_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 105)).await;
    append(&b, "main", &range(10, 15)).await; // takes the id feature's fragment has on the branch
    let mut feature = open(&b, "feature").await;
    feature
        .create_index(&["id"], IndexType::BTree, Some("id_idx".into()), &ScalarIndexParams::default(), false)
        .await
        .expect("index");
    let before = inventory(dir.path());
    match b.merge("feature", "main", &opts()).await {
        Err(Error::NotReplayable { why, .. }) => {
            assert!(matches!(&why, Refusal::Rebind { source: RebindRefusal::IndexOnMovedFragment { .. } }), "{why}");
            assert!(why.to_string().contains("rebuild the index"), "{why}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(inventory(dir.path()), before, "nothing written");
}
