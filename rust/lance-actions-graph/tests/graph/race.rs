//! Concurrency: merges racing merges and writers on one target; the data equals the model.

use std::collections::BTreeMap;

use lance_actions_graph::{Graph, MergeOptions, Outcome};

use crate::common::{graph, names, person};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_merges_into_one_target_race_and_both_land() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p", "b")]).await.expect("seed");
    for b in ["f1", "f2"] {
        g.branch(b, "main").await.expect("branch");
        g.insert(b, "Person", vec![person(&g, b, b)]).await.expect("write");
    }
    g.insert("main", "Person", vec![person(&g, "m", "m")]).await.expect("diverge main");
    let merges = ["f1", "f2"].map(|b| {
        let g = g.clone();
        tokio::spawn(async move { g.merge(b, "main", &MergeOptions::default()).await })
    });
    for m in merges {
        let r = m.await.expect("join").expect("merge");
        assert_eq!(r.outcome, Outcome::Merged);
    }
    let expected: BTreeMap<String, String> =
        [("f1", "f1"), ("f2", "f2"), ("m", "m"), ("p", "b")].map(|(a, b)| (a.into(), b.into())).into();
    assert_eq!(names(&g, "main").await, expected);
    let log = g.log("main").await.expect("log");
    assert_eq!(log.iter().filter(|c| c.parents.len() == 2).count(), 2, "two merge commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_racing_writers_on_the_target_loses_no_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p", "b")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    let feature_rows: Vec<_> = (0..20).map(|i| person(&g, &format!("f{i:02}"), "f")).collect();
    g.insert("feature", "Person", feature_rows).await.expect("feature");
    g.upsert("feature", "Person", vec![person(&g, "p", "s")]).await.expect("feature update");
    g.insert("main", "Person", vec![person(&g, "m", "m")]).await.expect("diverge");
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let g: Graph = g.clone();
            tokio::spawn(async move {
                for i in 0..4 {
                    g.insert("main", "Person", vec![person(&g, &format!("w{w}-{i}"), "w")]).await.expect("writer");
                }
            })
        })
        .collect();
    let merge = {
        let g = g.clone();
        tokio::spawn(async move { g.merge("feature", "main", &MergeOptions::default()).await })
    };
    for w in writers {
        w.await.expect("join");
    }
    let r = merge.await.expect("join").expect("merge");
    assert_eq!(r.outcome, Outcome::Merged);
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    expected.insert("p".into(), "s".into());
    expected.insert("m".into(), "m".into());
    for i in 0..20 {
        expected.insert(format!("f{i:02}"), "f".into());
    }
    for w in 0..3 {
        for i in 0..4 {
            expected.insert(format!("w{w}-{i}"), "w".into());
        }
    }
    assert_eq!(names(&g, "main").await, expected);
}

/// Before each of our next `times` publishes, another writer publishes a version of `branch` first
/// (a Person `i<n>` inserted), so each of ours loses the race. The hook runs once per registration
/// and registers itself again only after the other writer's publish, which therefore passes.
fn publish_first_each_time(g: &Graph, branch: &'static str, times: usize) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    arm(g.clone(), branch, times, done);
}

fn arm(g: Graph, branch: &'static str, times: usize, done: std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let root = g.root().to_string();
    lance_actions_commit::hooks::register("graph:before-publish", &root, move || async move {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        g.insert(branch, "Person", vec![person(&g, &format!("i{n:02}"), "i")]).await.expect("the other writer");
        if n + 1 < times {
            arm(g, branch, times, done);
        }
    });
}

/// A write that loses every publish to another writer gives up after the retry policy's attempts,
/// says so in the branch's terms, and publishes nothing: the branch holds every other writer's
/// version and none of ours. Once the others stop, the same write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_loses_every_publish_gives_up_and_publishes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p", "b")]).await.expect("seed");
    let attempts = lance_actions_commit::retry::RetryPolicy::default().max_attempts();
    publish_first_each_time(&g, "main", attempts);
    let err = g.insert("main", "Person", vec![person(&g, "x", "ours")]).await.expect_err("gives up");
    let message = err.to_string();
    match err {
        lance_actions_graph::Error::Contention { branch, what, attempts: made, last } => {
            assert_eq!((branch.as_str(), what, made), ("main", lance_actions_graph::GraphOp::Write, attempts));
            assert_eq!(last, lance_actions_graph::Moved::Branch);
        }
        other => panic!("contention expected, got {other:?}"),
    }
    assert!(message.contains("graph branch 'main'") && message.contains("nothing of it was published"), "{message}");
    let mut expected: BTreeMap<String, String> = [("p".to_string(), "b".to_string())].into();
    expected.extend((0..attempts).map(|n| (format!("i{n:02}"), "i".to_string())));
    assert_eq!(names(&g, "main").await, expected, "every other writer's row, none of ours");
    assert_eq!(g.log("main").await.expect("log").len(), 2 + attempts, "init, seed and the others' versions");

    let landed = g.insert("main", "Person", vec![person(&g, "x", "ours")]).await.expect("lands once alone");
    assert_eq!(landed.attempts, 1);
    expected.insert("x".into(), "ours".into());
    assert_eq!(names(&g, "main").await, expected);
}

/// A merge that loses every publish gives up the same way: the target holds the other writers'
/// versions and nothing of the source; merged again, alone, it brings the source's rows in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_that_loses_every_publish_gives_up_and_publishes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p", "b")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    g.insert("feature", "Person", vec![person(&g, "f", "f")]).await.expect("feature");
    g.upsert("feature", "Person", vec![person(&g, "p", "s")]).await.expect("feature update");
    g.insert("main", "Person", vec![person(&g, "m", "m")]).await.expect("diverge");
    let attempts = lance_actions_commit::retry::RetryPolicy::default().max_attempts();
    publish_first_each_time(&g, "main", attempts);
    match g.merge("feature", "main", &MergeOptions::default()).await {
        Err(lance_actions_graph::Error::Contention { branch, what, attempts: made, last }) => {
            assert_eq!((branch.as_str(), what, made), ("main", lance_actions_graph::GraphOp::Merge, attempts));
            assert_eq!(last, lance_actions_graph::Moved::Branch);
        }
        other => panic!("contention expected, got {other:?}"),
    }
    let mut expected: BTreeMap<String, String> = [("p", "b"), ("m", "m")].map(|(a, b)| (a.into(), b.into())).into();
    expected.extend((0..attempts).map(|n| (format!("i{n:02}"), "i".to_string())));
    assert_eq!(names(&g, "main").await, expected, "nothing of the feature");
    let log = g.log("main").await.expect("log");
    assert_eq!(log.len(), 3 + attempts, "init, seed, main's own write and the others' versions");
    assert!(log.iter().all(|c| c.parents.len() < 2), "no merge commit");
    let feature: BTreeMap<String, String> = [("p", "s"), ("f", "f")].map(|(a, b)| (a.into(), b.into())).into();
    assert_eq!(names(&g, "feature").await, feature, "the source as it was");

    let merged = g.merge("feature", "main", &MergeOptions::default()).await.expect("merges alone");
    assert_eq!((merged.outcome, merged.attempts), (Outcome::Merged, 1));
    expected.insert("p".into(), "s".into());
    expected.insert("f".into(), "f".into());
    assert_eq!(names(&g, "main").await, expected);
}
