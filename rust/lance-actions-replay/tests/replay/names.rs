//! Logical names over physical branches: adoption, compare-and-swap, deletion safety, reuse, and
//! cleanup that must not take files a graft still reads.

use std::time::Duration;

use lance::Dataset;
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
