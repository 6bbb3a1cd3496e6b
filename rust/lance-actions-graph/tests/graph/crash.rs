//! A crash between the table commits and the graph publish leaves the graph at its old version,
//! and the next write and merge proceed.

use lance_actions_graph::{Graph, MergeOptions, Outcome};

use crate::common::{edge_ids, graph, knows, names, person};

/// Child process: run the merge with the crash point armed (the parent sets both variables).
#[tokio::test]
async fn crash_child() {
    let Ok(root) = std::env::var("LG_CRASH_ROOT") else { return };
    let g = Graph::open(&root).await.expect("open");
    let _ = g.merge("feature", "main", &MergeOptions::default()).await;
    panic!("the crash point did not fire");
}

#[tokio::test]
async fn a_crash_before_the_publish_leaves_the_old_graph_version_and_the_next_merge_proceeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p1", "a"), person(&g, "p2", "b")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    g.write(
        "feature",
        vec![
            lance_actions_graph::WriteOp::Upsert { type_name: "Person".into(), rows: vec![person(&g, "p1", "A")] },
            lance_actions_graph::WriteOp::Insert { type_name: "Knows".into(), rows: vec![knows(&g, "e1", "p1", "p2")] },
        ],
    )
    .await
    .expect("feature");
    // Both tables change on main too, so the merge commits to both before publishing.
    g.write(
        "main",
        vec![
            lance_actions_graph::WriteOp::Upsert { type_name: "Person".into(), rows: vec![person(&g, "p2", "B")] },
            lance_actions_graph::WriteOp::Insert { type_name: "Knows".into(), rows: vec![knows(&g, "e0", "p2", "p1")] },
        ],
    )
    .await
    .expect("main");
    let head = g.view().await.expect("view").heads["main"].clone();
    let before = (names(&g, "main").await, edge_ids(&g, "main").await);
    let status = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "crash::crash_child", "--nocapture", "--test-threads", "1"])
        .env("LG_CRASH_ROOT", g.root())
        .env("LANCE_ACTIONS_CRASH_AT", "graph-before-publish")
        .status()
        .expect("spawn child");
    assert!(!status.success(), "the child should have aborted");
    assert_eq!(g.view().await.expect("view").heads["main"], head, "the graph moved");
    assert_eq!((names(&g, "main").await, edge_ids(&g, "main").await), before, "a reader sees a partial merge");
    g.insert("main", "Person", vec![person(&g, "p3", "c")]).await.expect("the next write proceeds");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("the next merge proceeds");
    assert_eq!(r.outcome, Outcome::Merged, "{:?}", r.conflicts);
    let main = names(&g, "main").await;
    assert_eq!((main["p1"].as_str(), main["p2"].as_str(), main["p3"].as_str()), ("A", "B", "c"));
    assert_eq!(edge_ids(&g, "main").await, ["e0", "e1"]);
}
