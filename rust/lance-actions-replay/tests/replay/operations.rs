//! Cherry-pick, merge, fast-forward, rebase and squash outcomes.

use lance_actions::{RebindRefusal, SquashRefusal};
use lance_actions_replay::{Error, Outcome, Refusal, ReplayOptions};

use crate::support::*;

fn dry() -> ReplayOptions {
    ReplayOptions { dry_run: true, ..Default::default() }
}

#[tokio::test]
async fn dry_runs_report_the_outcome_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let f1 = append(&b, "feature", &range(100, 103)).await;
    append(&b, "feature", &range(103, 106)).await;
    append(&b, "main", &range(10, 12)).await;
    let before = inventory(dir.path());
    let merge = b.merge("feature", "main", &dry()).await.expect("merge");
    assert!(matches!(merge, Outcome::Merged { ref landed, .. } if landed.len() == 2), "{merge:?}");
    let pick = b.cherry_pick("feature", &[f1], "main", &dry()).await.expect("pick");
    assert!(matches!(pick, Outcome::CherryPicked { ref landed, .. } if landed.len() == 1), "{pick:?}");
    let rebase = b.rebase("feature", "main", &dry()).await.expect("rebase");
    assert!(matches!(rebase, Outcome::Rebased { ref landed, .. } if landed.len() == 2), "{rebase:?}");
    assert_eq!(inventory(dir.path()), before, "a dry run writes no file at all");
}

#[tokio::test]
async fn fast_forward_only_when_the_target_has_no_commits_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 103)).await;
    let v = append(&b, "main", &range(10, 11)).await;
    match b.fast_forward("feature", "main", &Default::default()).await {
        Err(Error::NotFastForward { commits, .. }) => assert_eq!(commits, 1),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(open(&b, "main").await.manifest().version, v);
    b.create("other", "main", None).await.expect("other");
    append(&b, "other", &range(300, 301)).await;
    let out = b.fast_forward("other", "main", &Default::default()).await.expect("ff");
    assert!(matches!(out, Outcome::FastForward { .. }), "{out:?}");
}

#[tokio::test]
async fn cherry_picking_a_commit_that_needs_an_unpicked_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 110)).await;
    let v2 = delete(&b, "feature", "id = 105").await; // in the fragment the first commit created
    match b.cherry_pick("feature", &[v2], "main", &Default::default()).await {
        Err(Error::NotReplayable { version, why, .. }) => {
            assert_eq!(version, v2);
            assert!(matches!(&why, Refusal::Rebind { source: RebindRefusal::UnreplayedFragment { .. } }), "{why}");
            assert!(why.to_string().contains("not replayed"), "{why}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    match b.cherry_pick("feature", &[999], "main", &Default::default()).await {
        Err(Error::NotInHistory { version: 999, .. }) => {}
        other => panic!("expected not-in-history, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_lands_while_other_writers_commit_to_the_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    for k in 0..4 {
        append(&b, "feature", &range(100 + 10 * k, 110 + 10 * k)).await;
    }
    delete(&b, "feature", "id = 2").await;
    let writer = {
        let b = b.clone();
        tokio::spawn(async move {
            for k in 0..6i64 {
                // Plain Lance appends with Lance's own retries: foreign writers on the target.
                append(&b, "main", &[1_000 + k]).await;
            }
        })
    };
    let out = b.merge("feature", "main", &Default::default()).await.expect("merge");
    writer.await.expect("writer");
    assert!(matches!(out, Outcome::Merged { .. } | Outcome::FastForward { .. }), "{out:?}");
    let mut expected: Vec<i64> =
        range(0, 10).into_iter().chain(range(100, 140)).chain(range(1_000, 1_006)).filter(|i| *i != 2).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected);
}

#[tokio::test]
async fn squash_makes_a_range_one_commit_and_repoints_the_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let v1 = append(&b, "feature", &range(100, 110)).await;
    append(&b, "feature", &range(110, 120)).await;
    let v3 = delete(&b, "feature", "id = 3 OR id = 5").await;
    let v4 = append(&b, "feature", &range(120, 125)).await;
    let before = ids(&b, "feature").await;
    let out = b.squash("feature", v1, v3, &Default::default()).await.expect("squash");
    let Outcome::Squashed { landed, old_physical, new_physical } = out else { panic!("{out:?}") };
    assert_eq!(landed.iter().map(|l| l.source_version).collect::<Vec<_>>(), [v3, v4], "one commit for the range");
    assert_ne!(old_physical, new_physical);
    assert_eq!(ids(&b, "feature").await, before, "same rows, shorter history");
    let head = open(&b, "feature").await.manifest().version;
    assert_eq!(head, v1 - 1 + 2, "the fork point plus two commits");
    // The squashed branch merges like any other.
    assert!(matches!(b.merge("feature", "main", &Default::default()).await, Ok(Outcome::FastForward { .. })));
    assert_eq!(ids(&b, "main").await, before);
    // A deletion inside a fragment the range itself added cannot be one Lance commit: refused.
    let w1 = append(&b, "feature", &range(130, 140)).await;
    let w2 = delete(&b, "feature", "id = 131").await;
    match b.squash("feature", w1, w2, &Default::default()).await {
        Err(Error::NotReplayable { why, .. }) => {
            assert!(matches!(&why, Refusal::Squash { source: SquashRefusal::DeletesAddedFragment { .. } }), "{why}")
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_conflicted_rebase_leaves_the_branch_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    delete(&b, "feature", "id = 4").await;
    delete(&b, "main", "id = 4").await;
    let physical = b.resolve("feature").await.expect("resolve");
    let before = b.list().await.expect("list");
    let out = b.rebase("feature", "main", &Default::default()).await.expect("rebase");
    assert!(matches!(out, Outcome::Conflicted { .. }), "{out:?}");
    assert_eq!(b.resolve("feature").await.expect("resolve"), physical);
    assert_eq!(b.list().await.expect("list"), before, "the fresh branch was removed");
}

/// Two merges of one branch into main at once: each commit of the branch lands once; the replay
/// that loses a race adopts the winner's commit (the context claim makes them conflict).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_merges_of_one_branch_land_each_commit_once() {
    for round in 0..3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir);
        let b = create(&uri, &range(0, 10)).await;
        b.create("feature", "main", None).await.expect("branch");
        for k in 0..4 {
            append(&b, "feature", &range(100 + 10 * k, 110 + 10 * k)).await;
        }
        delete(&b, "feature", "id = 1").await;
        let (x, y) = (b.clone(), b.clone());
        let (r1, r2) = tokio::join!(
            tokio::spawn(async move { x.merge("feature", "main", &Default::default()).await }),
            tokio::spawn(async move { y.merge("feature", "main", &Default::default()).await }),
        );
        // Each source commit is written by one merge; the other adopted it or skipped it.
        let mut written = Vec::new();
        for r in [r1.expect("task"), r2.expect("task")] {
            let out = r.expect("both merges succeed");
            assert!(!matches!(out, Outcome::Conflicted { .. }), "round {round}: {out:?}");
            if let Outcome::FastForward { landed, .. } | Outcome::Merged { landed, .. } = &out {
                written.extend(landed.iter().filter(|l| !l.adopted).map(|l| l.source_version));
            }
        }
        written.sort_unstable();
        assert_eq!(written.len(), 5, "round {round}: 5 commits, each written once: {written:?}");
        written.dedup();
        assert_eq!(written.len(), 5, "round {round}: no commit written twice: {written:?}");
        let expected: Vec<i64> = range(0, 10).into_iter().chain(range(100, 140)).filter(|i| *i != 1).collect();
        assert_eq!(ids(&b, "main").await, expected, "round {round}: every row exactly once");
    }
}

/// A writer that lands on the target between two replayed commits is judged by the later ones: the
/// session keeps the peers it has judged across the whole merge and reads only those that landed
/// since, and a config key the writer set meanwhile is not overwritten by the branch's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_landing_between_replayed_commits_is_judged_by_the_later_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "main", &range(10, 12)).await;
    let first = append(&b, "feature", &range(100, 105)).await;
    let mut feature = open(&b, "feature").await;
    feature.update_config(vec![("owner", "feature")]).await.expect("config on the branch");
    // Once the first replay has landed, another writer sets the same key on main.
    let hb = b.clone();
    lance_actions_commit::hooks::register("replay:after-commit", b.uri(), move || async move {
        let mut main = open(&hb, "main").await;
        main.update_config(vec![("owner", "main")]).await.expect("config on main");
    });
    let out = b.merge("feature", "main", &Default::default()).await.expect("merge");
    let Outcome::Conflicted { conflicts, landed } = &out else { panic!("the config replay conflicts: {out:?}") };
    assert_eq!(landed.iter().map(|l| l.source_version).collect::<Vec<_>>(), vec![first], "the append landed first");
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    let main = open(&b, "main").await;
    assert_eq!(main.manifest().config.get("owner").map(String::as_str), Some("main"), "the writer's value stays");
    assert_eq!(ids(&b, "main").await, range(0, 12).into_iter().chain(range(100, 105)).collect::<Vec<_>>());
}
