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
