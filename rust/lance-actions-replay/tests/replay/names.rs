//! Logical names over physical branches: adoption, compare-and-swap, deletion safety, reuse, and
//! cleanup that must not take files a graft still reads.

use std::sync::Arc;
use std::time::Duration;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions::Rule;
use lance_actions_commit::branch_names::BranchError;
use lance_actions_commit::{CommitError, DatasetActionsExt, hooks};
use lance_actions_replay::{Error, Outcome, ReplayOptions};

use crate::support::*;

#[tokio::test]
async fn a_plain_lance_branch_is_first_class_and_adopted_on_first_touch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let mut root = Dataset::open(&uri).await.expect("open");
    root.create_branch("plain", 1, None).await.expect("plain Lance branch");
    append(&b, "plain", &range(50, 52)).await;
    assert_eq!(b.resolve("plain").await.expect("resolve"), Some("plain".to_string()));
    let out = b.rebase("plain", "main", &ReplayOptions::default()).await.expect("rebase a plain branch");
    let Outcome::Rebased { old_physical, new_physical, .. } = out else { panic!("{out:?}") };
    assert_eq!(old_physical, "plain");
    assert_eq!(b.resolve("plain").await.expect("resolve"), Some(new_physical.clone()));
    assert!(b.list().await.expect("list").contains(&("plain".to_string(), new_physical)));
    b.create("feature", "main", None).await.expect("feature");
    b.rebase("feature", "main", &ReplayOptions::default()).await.expect("rebase feature");
    let names: Vec<String> = b.list().await.expect("list").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["feature", "plain"], "earlier incarnations are not listed as names");
    assert_eq!(ids(&b, "plain").await, range(0, 10).into_iter().chain(range(50, 52)).collect::<Vec<_>>());
    // Lance's own branch calls still work on the dataset.
    let branches = root.list_branches().await.expect("Lance lists branches");
    assert!(branches.contains_key("plain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_rebases_of_one_branch_one_wins_one_gets_a_typed_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    append(&b, "main", &range(10, 12)).await;
    let (x, y) = (b.clone(), b.clone());
    let (r1, r2) = tokio::join!(
        tokio::spawn(async move { x.rebase("feature", "main", &ReplayOptions::default()).await }),
        tokio::spawn(async move { y.rebase("feature", "main", &ReplayOptions::default()).await }),
    );
    let results = [r1.expect("task"), r2.expect("task")];
    let won = results.iter().filter(|r| matches!(r, Ok(Outcome::Rebased { .. }))).count();
    let raced = results.iter().filter(|r| matches!(r, Err(Error::NameRace { .. }))).count();
    assert_eq!((won, raced), (1, 1), "{results:?}");
    let mut expected: Vec<i64> = range(0, 12).into_iter().chain(range(100, 103)).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "feature").await, expected);
    // The loser's fresh branch is gone: feature's old and new physical branches only.
    let physical: Vec<String> =
        Dataset::open(&uri).await.expect("open").list_branches().await.expect("list").into_keys().collect();
    assert_eq!(physical.len(), 2, "{physical:?}");
}

#[tokio::test]
async fn deleting_a_branch_another_reads_is_refused_and_a_name_can_be_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let first = b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    match b.delete("feature").await {
        Err(Error::InUse { dependants, .. }) => assert_eq!(dependants, ["main"]),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Lance's own delete is refused too: the graft pinned the source version with a tag.
    let mut root = Dataset::open(&uri).await.expect("open");
    assert!(root.delete_branch(&first).await.is_err(), "Lance must not delete a grafted source");
    assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(100, 103)).collect::<Vec<_>>());

    b.create("scratch", "main", None).await.expect("scratch");
    append(&b, "scratch", &[7_000]).await;
    b.delete("scratch").await.expect("nobody reads scratch");
    assert!(matches!(b.resolve("scratch").await, Err(Error::NoSuchBranch { .. })));
    let again = b.create("scratch", "main", None).await.expect("the name is free again");
    assert_eq!(ids(&b, "scratch").await, ids(&b, "main").await, "a new branch, not the old one");
    assert!(again.starts_with("scratch."));
}

#[tokio::test]
async fn cleanup_of_the_source_keeps_the_files_a_graft_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 110)).await;
    b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    // The source drops those rows and cleans up every old version.
    delete(&b, "feature", "id >= 100").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let feature = open(&b, "feature").await;
    feature.cleanup_old_versions(chrono::TimeDelta::milliseconds(1), Some(true), Some(false)).await.expect("cleanup");
    assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(100, 110)).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_deleted_name_does_not_come_back_as_an_earlier_incarnation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let mut root = Dataset::open(&uri).await.expect("open");
    root.create_branch("old", 1, None).await.expect("plain Lance branch");
    append(&b, "old", &[77]).await;
    b.rebase("old", "main", &ReplayOptions::default()).await.expect("rebase adopts and repoints");
    b.delete("old").await.expect("nothing reads the rebased branch");
    assert!(matches!(b.resolve("old").await, Err(Error::NoSuchBranch { .. })), "the plain branch 'old' stays retired");
    assert!(!b.list().await.expect("list").iter().any(|(n, _)| n == "old"));
    let fresh = b.create("old", "main", None).await.expect("the name can be reused");
    assert_ne!(fresh, "old");
    assert_eq!(ids(&b, "old").await, range(0, 10));
}

// ---- names in a catalog, retirements, delete vs merge, pin before commit ----
// (`design/replay.md`, "5. Branch names decoupled from directories (`names.rs`, Lance #7185)")

/// A plain Lance append on a physical branch (addressed by its physical name, as a writer that
/// resolved the name earlier would).
async fn append_physical(uri: &str, physical: &str, ids: &[i64]) -> u64 {
    let root = Dataset::open(uri).await.expect("open");
    let ds = root.checkout_branch(physical).await.expect("checkout");
    InsertBuilder::new(Arc::new(ds))
        .with_params(&WriteParams { mode: WriteMode::Append, max_rows_per_file: 10, ..Default::default() })
        .execute(vec![rows(ids)])
        .await
        .expect("append")
        .manifest()
        .version
}

/// Stage an append on the latest version of a physical branch, to commit later through the driver.
async fn stage_append_on(uri: &str, physical: &str, ids: &[i64]) -> (Arc<Dataset>, Transaction) {
    let root = Dataset::open(uri).await.expect("open");
    let ds = Arc::new(root.checkout_branch(physical).await.expect("checkout"));
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![rows(ids)])
        .await
        .expect("stage");
    (ds, txn)
}

async fn main_version(uri: &str) -> u64 {
    Dataset::open(uri).await.expect("open").manifest().version
}

#[tokio::test]
async fn branch_bookkeeping_commits_nothing_on_main_and_merging_main_back_replays_no_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let start = main_version(&uri).await;
    b.create("feature", "main", None).await.expect("feature");
    b.create("other", "main", None).await.expect("other");
    append(&b, "feature", &range(100, 102)).await;
    b.rebase("feature", "main", &ReplayOptions::default()).await.expect("rebase");
    b.delete("other").await.expect("delete");
    b.create("other", "main", None).await.expect("the name again");
    assert_eq!(main_version(&uri).await, start, "create, rebase and delete commit nothing on main");

    // A dataset written before the catalog: a name mapping committed in main's config.
    let mut root = Dataset::open(&uri).await.expect("open");
    root.update_config([("lance-actions.branch.legacy", "legacy.0000abcd")]).await.expect("legacy mapping");
    append(&b, "main", &range(10, 12)).await;
    let out = b.merge("main", "feature", &ReplayOptions::default()).await.expect("merge main into feature");
    let landed = match &out {
        Outcome::Merged { landed, .. } | Outcome::FastForward { landed, .. } => landed.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(landed.len(), 1, "only main's append is replayed, not its name bookkeeping: {out:?}");
    let feature = open(&b, "feature").await;
    let polluted: Vec<&String> =
        feature.manifest().config.keys().filter(|k| k.starts_with("lance-actions.branch.")).collect();
    assert!(polluted.is_empty(), "the branch holds no branch mapping: {polluted:?}");
    assert_eq!(ids(&b, "feature").await, range(0, 12).into_iter().chain(range(100, 102)).collect::<Vec<_>>());
    // Nothing pending either way: the bookkeeping never blocks an up-to-date answer.
    let again = b.merge("main", "feature", &ReplayOptions::default()).await.expect("merge again");
    assert!(matches!(again, Outcome::AlreadyUpToDate { .. }), "{again:?}");
}

#[tokio::test]
async fn names_resolve_logically_and_errors_name_the_branch_and_list_the_known_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let physical = b.create("feature", "main", None).await.expect("feature");
    assert_eq!(b.resolve("feature").await.expect("logical"), Some(physical.clone()));
    match b.resolve("featur").await {
        Err(e @ Error::NoSuchBranch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("'featur'") && text.contains("main, feature"), "{text}");
            assert!(!text.contains("_versions") && !text.contains("tree/"), "no Lance path: {text}");
        }
        other => panic!("expected NoSuchBranch, got {other:?}"),
    }
    match b.resolve(&physical).await {
        Err(Error::PhysicalName { name, logical }) => assert_eq!((name, logical), (physical.clone(), "feature".into())),
        other => panic!("a physical name is not a branch name: {other:?}"),
    }
    // Keyed tables and replay share the same resolution (the keyed crate's open_branch calls it).
    let root = Dataset::open(&uri).await.expect("open");
    let shared = lance_actions_commit::branch_names::resolve(&root, "feature").await.expect("shared resolution");
    assert_eq!(shared, Some(physical));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_to_the_old_branch_during_a_rebase_is_carried_over_and_later_writes_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let old = b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    append(&b, "main", &range(10, 12)).await;
    // A writer that read the old branch before the rebase, committing after it.
    let (late_ds, late_txn) = stage_append_on(&uri, &old, &[900]).await;
    // Between the replay and the swap, another writer lands on the old physical branch.
    let (hook_uri, hook_old) = (b.uri().to_string(), old.clone());
    hooks::register("rewrite:before-swap", b.uri(), move || async move {
        append_physical(&hook_uri, &hook_old, &range(200, 202)).await;
    });
    let out = b.rebase("feature", "main", &ReplayOptions::default()).await.expect("rebase");
    let Outcome::Rebased { old_physical, new_physical, .. } = out else { panic!("{out:?}") };
    assert_eq!(old_physical, old);
    let mut expected: Vec<i64> = range(0, 12).into_iter().chain(range(100, 103)).chain(range(200, 202)).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "feature").await, expected, "the write that landed during the rebase is carried over");

    // After the swap: the old physical branch takes no write through the driver, naming the new one.
    match late_ds.action_commit().execute(late_txn).await {
        Err(CommitError::Fail { reason, .. }) => {
            assert_eq!(reason.rule, Rule::BranchRetired);
            assert!(reason.detail.contains(&new_physical), "{reason}");
        }
        other => panic!("a write to the retired branch must be refused, got {:?}", other.map(|(_, r)| r.version)),
    }
    let (fresh_ds, fresh_txn) = stage_append_on(&uri, &old, &[901]).await;
    assert!(matches!(fresh_ds.action_commit().execute(fresh_txn).await, Err(CommitError::Fail { .. })));
    let root = Dataset::open(&uri).await.expect("open");
    match lance_actions_commit::branch_names::resolve_physical(&root, &old).await {
        Err(BranchError::Retired { branch, successor }) => assert_eq!((branch, successor), (old.clone(), new_physical)),
        other => panic!("expected Retired, got {other:?}"),
    }
    assert_eq!(ids(&b, "feature").await, expected, "nothing reached the branch through the old name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_branch_while_a_merge_from_it_lands_never_leaves_main_reading_deleted_files() {
    // The merge runs between the delete's reader check and its removal of the branch.
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 105)).await;
    let merged = Arc::new(std::sync::Mutex::new(None));
    let (hb, slot) = (b.clone(), merged.clone());
    hooks::register("delete:after-check", b.uri(), move || async move {
        let r = hb.merge("feature", "main", &ReplayOptions::default()).await;
        *slot.lock().expect("slot") = Some(r.map(|o| o.name()));
    });
    let deleted = b.delete("feature").await;
    let merged = merged.lock().expect("slot").take().expect("the hook ran");
    match (&deleted, &merged) {
        (Ok(()), Err(_)) => assert_eq!(ids(&b, "main").await, range(0, 10), "the merge failed cleanly"),
        (Err(Error::InUse { .. }), Ok(_)) => {
            assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(100, 105)).collect::<Vec<_>>())
        }
        other => panic!("either the delete refuses or the merge fails: {other:?}"),
    }
    // A full scan of main reads every file it references.
    assert!(ids(&b, "main").await.len() >= 10);

    // The other order: the delete runs while a merge has pinned the source and not yet committed.
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 105)).await;
    let deleted = Arc::new(std::sync::Mutex::new(None));
    let (hb, slot) = (b.clone(), deleted.clone());
    hooks::register("replay:before-commit", b.uri(), move || async move {
        let r = hb.delete("feature").await;
        *slot.lock().expect("slot") = Some(r);
    });
    let merged = b.merge("feature", "main", &ReplayOptions::default()).await;
    let deleted = deleted.lock().expect("slot").take().expect("the hook ran");
    assert!(matches!(deleted, Err(Error::InUse { .. })), "the merge's pin is seen: {deleted:?}");
    assert!(merged.is_ok(), "{merged:?}");
    assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(100, 105)).collect::<Vec<_>>());
    assert_eq!(ids(&b, "feature").await, range(0, 10).into_iter().chain(range(100, 105)).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cleanup_of_the_source_between_pin_and_commit_keeps_the_grafted_files_and_a_failed_replay_unpins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let picked = append(&b, "feature", &range(100, 110)).await;
    // The source then drops those rows: only version `picked` references their file.
    delete(&b, "feature", "id >= 100").await;
    let hb = b.clone();
    hooks::register("replay:before-commit", b.uri(), move || async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let feature = open(&hb, "feature").await;
        feature
            .cleanup_old_versions(chrono::TimeDelta::milliseconds(1), Some(true), Some(false))
            .await
            .expect("cleanup");
    });
    let out = b.cherry_pick("feature", &[picked], "main", &ReplayOptions::default()).await.expect("cherry-pick");
    assert!(matches!(out, Outcome::CherryPicked { .. }), "{out:?}");
    assert_eq!(
        ids(&b, "main").await,
        range(0, 20).into_iter().filter(|i| *i < 10).chain(range(100, 110)).collect::<Vec<_>>()
    );

    // A replay whose commit does not land leaves no pin behind.
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let picked = delete(&b, "feature", "id = 3").await;
    let hb = b.clone();
    hooks::register("replay:before-commit", b.uri(), move || async move {
        // main drops the whole fragment the replayed delete touches.
        delete(&hb, "main", "id < 10").await;
    });
    let out = b.cherry_pick("feature", &[picked], "main", &ReplayOptions::default()).await.expect("cherry-pick");
    assert!(matches!(out, Outcome::Conflicted { .. }), "{out:?}");
    let tags = Dataset::open(&uri).await.expect("open").tags().list().await.expect("tags");
    assert!(!tags.keys().any(|t| t.starts_with("graft-")), "the pin is released: {tags:?}");
    assert!(ids(&b, "main").await.is_empty());
}

/// The manifest file of `version` on main, whichever naming scheme wrote it.
fn main_manifest(uri: &str, version: u64) -> std::path::PathBuf {
    let dir = std::path::Path::new(uri).join("_versions");
    let names = [format!("{version}.manifest"), format!("{:020}.manifest", u64::MAX - version)];
    names.iter().map(|n| dir.join(n)).find(|p| p.exists()).expect("the manifest of that version")
}

/// The replayed commit lands, then reading what it landed fails (here: the version before it is
/// gone, so its new fragments cannot be worked out). The replay reports the error, but the target
/// now grafts the source version: the pin must stay. Before, every result but a landed step
/// released it, and a cleanup of the source could then delete files main reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_that_landed_and_then_failed_keeps_its_pin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let picked = delete(&b, "feature", "id = 3").await;
    let before = main_manifest(&uri, 1);
    hooks::register("replay:after-commit", b.uri(), move || async move {
        std::fs::remove_file(&before).expect("drop the manifest of main's version 1");
    });
    let out = b.cherry_pick("feature", &[picked], "main", &ReplayOptions::default()).await;
    assert!(out.is_err(), "reading what landed fails: {out:?}");
    assert!(!ids(&b, "main").await.contains(&3), "the replay landed");
    let tags = Dataset::open(&uri).await.expect("open").tags().list().await.expect("tags");
    assert!(tags.keys().any(|t| t.starts_with("graft-")), "the pin is kept: {tags:?}");
}

/// The old branch's retirement into the fresh one lands, but the rewrite is not told so (an answer
/// lost to the commit loop, a status it cannot know): simulated by landing that very retirement
/// just before the rewrite's own. The rewrite must finish the swap, not discard the fresh branch
/// the old one now names: before, it force-deleted it and the branch name led to a deleted branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebase_whose_retirement_landed_unannounced_keeps_the_fresh_branch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    append(&b, "main", &range(10, 12)).await;
    let old = b.resolve("feature").await.expect("resolve").expect("physical");
    let (hook_uri, hook_old) = (uri.clone(), old.clone());
    hooks::register("rewrite:before-swap", b.uri(), move || async move {
        let root = Dataset::open(&hook_uri).await.expect("open");
        let branches = root.list_branches().await.expect("branches");
        let fresh = branches.keys().find(|n| n.starts_with("feature") && **n != hook_old).expect("fresh").clone();
        let mut at = root.checkout_branch(&hook_old).await.expect("old");
        at.update_config([(lance_actions::retired::RETIRED_KEY, fresh.as_str())]).await.expect("retire");
    });
    let out = b.rebase("feature", "main", &ReplayOptions::default()).await;
    assert!(matches!(out, Ok(Outcome::Rebased { .. })), "{out:?}");
    let mut expected: Vec<i64> = range(0, 12).into_iter().chain(range(100, 103)).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "feature").await, expected, "the name reads the rebased branch");
}

/// Every data file and deletion file main's latest version reads, with the base it lives under.
fn bases_read(ds: &Dataset) -> Vec<Option<u32>> {
    let f = ds.manifest().fragments.iter();
    f.flat_map(|f| f.files.iter().map(|d| d.base_id).chain(f.deletion_file.iter().map(|d| d.base_id))).collect()
}

/// Materializing a merged branch rewrites the fragments main reads from it as main's own files
/// (rows and their order kept, a row deleted after the merge stays deleted), releases main's graft
/// pins on it, and the branch can then be deleted, files and all, with main reading every row.
#[tokio::test]
async fn a_materialized_branch_is_deleted_and_main_reads_its_own_copies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    let physical = b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 115)).await;
    append(&b, "feature", &range(200, 203)).await;
    b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    delete(&b, "main", "id = 101").await;
    let expected: Vec<i64> =
        range(0, 10).into_iter().chain(range(100, 115)).chain(range(200, 203)).filter(|i| *i != 101).collect();
    assert_eq!(ids(&b, "main").await, expected);
    assert!(bases_read(&open(&b, "main").await).iter().any(Option::is_some), "main reads grafted files");

    let done = b.materialize("feature").await.expect("materialize");
    assert_eq!(done.len(), 1, "{done:?}");
    let m = &done[0];
    assert_eq!(m.reader, "main");
    assert_eq!(m.fragments, 3, "10 + 5 rows of the first commit, 3 of the second: {m:?}");
    assert_eq!(m.rows, 17, "the live rows: {m:?}");
    assert_eq!(m.pins_released, 2, "one pin per replayed commit: {m:?}");
    assert!(m.indexes_left.is_empty());
    let main = open(&b, "main").await;
    assert_eq!(main.manifest().version, m.version);
    assert!(bases_read(&main).iter().all(Option::is_none), "main reads only its own files: {:?}", bases_read(&main));
    assert_eq!(ids(&b, "main").await, expected, "the same rows, once each");
    assert!(b.dependants(&physical).await.expect("dependants").is_empty());

    b.delete("feature").await.expect("nothing reads feature any more");
    assert!(!dir.path().join("t/tree").join(&physical).exists(), "the branch's files are gone");
    assert_eq!(ids(&b, "main").await, expected, "main reads every row after the files are gone");
    assert!(b.materialize("feature").await.is_err(), "the name is gone");
}

/// A merge that finds a concurrent merge already landed a commit takes it as its own and says
/// so: `adopted`, at the version the other landed it, and nothing written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_that_meets_a_concurrent_replay_of_its_commit_reports_it_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    let other = Arc::new(std::sync::Mutex::new(None));
    let (hb, slot) = (b.clone(), other.clone());
    hooks::register("replay:before-commit", b.uri(), move || async move {
        let r = hb.merge("feature", "main", &ReplayOptions::default()).await;
        *slot.lock().expect("slot") = Some(r);
    });
    let ours = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let theirs = other.lock().expect("slot").take().expect("the hook ran").expect("the other merge");
    let landed = |o: &Outcome| match o {
        Outcome::FastForward { landed, .. } | Outcome::Merged { landed, .. } => landed.clone(),
        other => panic!("a merge that lands: {other:?}"),
    };
    let (ours, theirs) = (landed(&ours), landed(&theirs));
    assert_eq!(theirs.len(), 1);
    assert!(!theirs[0].adopted, "the other merge wrote it: {theirs:?}");
    assert_eq!(ours.len(), 1);
    assert!(ours[0].adopted, "ours found it landed: {ours:?}");
    assert_eq!(ours[0].target_version, theirs[0].target_version);
    assert_eq!(ids(&b, "main").await, range(0, 10).into_iter().chain(range(100, 103)).collect::<Vec<_>>());
}
