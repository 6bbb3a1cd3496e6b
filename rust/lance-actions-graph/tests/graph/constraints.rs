//! Constraint enforcement on writes and on merged results; several conflicts reported together.

use lance_actions_graph::{Conflict, ConflictKind, Error, Graph, MergeOptions, Outcome};
use serde_json::json;

use crate::common::{edge_ids, files, graph, knows, names, person, row};

fn kinds(conflicts: &[Conflict]) -> Vec<(ConflictKind, String, String)> {
    conflicts.iter().map(|c| (c.kind, c.type_key.clone(), c.id.clone())).collect()
}

async fn refused(
    g: &Graph,
    result: lance_actions_graph::Result<lance_actions_graph::WriteReport>,
) -> Vec<(ConflictKind, String, String)> {
    let _ = g;
    match result {
        Err(Error::Violations { conflicts }) => kinds(&conflicts),
        other => panic!("expected violations, got {other:?}"),
    }
}

#[tokio::test]
async fn writes_enforce_every_constraint_kind_and_write_nothing_when_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let p = |id: &str, email: &str| row(&g, "Person", json!({"id": id, "email": email}));
    g.insert("main", "Person", vec![p("p1", "a@x"), p("p2", "b@x"), p("p3", "c@x")]).await.expect("seed");
    g.insert("main", "Knows", vec![knows(&g, "e1", "p1", "p2"), knows(&g, "e2", "p1", "p3")]).await.expect("edges");
    let before = (names(&g, "main").await, edge_ids(&g, "main").await);
    let node = |k| (k, "node:Person".to_string());
    let edge = |k| (k, "edge:Knows".to_string());

    let old = row(&g, "Person", json!({"id": "p9", "age": 200}));
    let got = refused(&g, g.insert("main", "Person", vec![old]).await).await;
    assert_eq!(
        got,
        [{
            let (k, t) = node(ConflictKind::ValueConstraintViolation);
            (k, t, "p9".into())
        }]
    );

    let bad_kind = row(&g, "Person", json!({"id": "p9", "kind": "c"}));
    let got = refused(&g, g.insert("main", "Person", vec![bad_kind]).await).await;
    assert_eq!(got[0].0, ConflictKind::ValueConstraintViolation);

    let got = refused(&g, g.insert("main", "Person", vec![p("p9", "a@x")]).await).await;
    assert_eq!(
        got,
        [{
            let (k, t) = node(ConflictKind::UniqueViolation);
            (k, t, "p9".into())
        }],
        "committed holder"
    );
    let got = refused(&g, g.insert("main", "Person", vec![p("p8", "z@x"), p("p9", "z@x")]).await).await;
    assert_eq!(got.len(), 2, "both ids of a duplicated value in one write: {got:?}");

    let got = refused(&g, g.insert("main", "Knows", vec![knows(&g, "e3", "p1", "p2")]).await).await;
    assert_eq!(
        got,
        [{
            let (k, t) = edge(ConflictKind::CardinalityViolation);
            (k, t, "p1".into())
        }]
    );

    let got = refused(&g, g.insert("main", "Knows", vec![knows(&g, "e4", "p2", "ghost")]).await).await;
    assert_eq!(
        got,
        [{
            let (k, t) = edge(ConflictKind::OrphanEdge);
            (k, t, "e4".into())
        }]
    );

    let got = refused(&g, g.delete("main", "Person", vec!["p3".into()]).await).await;
    assert_eq!(
        got,
        [{
            let (k, t) = edge(ConflictKind::OrphanEdge);
            (k, t, "e2".into())
        }],
        "deleting an edge's dst"
    );

    assert!(matches!(g.insert("main", "Person", vec![p("p1", "q@x")]).await, Err(Error::AlreadyPresent { .. })));
    assert_eq!((names(&g, "main").await, edge_ids(&g, "main").await), before, "a refused write changed the graph");

    // Deleting the node and its edge in one write is fine.
    g.write(
        "main",
        vec![
            lance_actions_graph::WriteOp::Delete { type_name: "Knows".into(), ids: vec!["e2".into()] },
            lance_actions_graph::WriteOp::Delete { type_name: "Person".into(), ids: vec!["p3".into()] },
        ],
    )
    .await
    .expect("delete node with its edge");
    assert_eq!(edge_ids(&g, "main").await, ["e1"]);
}

async fn diverged(g: &Graph) {
    g.insert("main", "Person", vec![person(g, "p1", "a"), person(g, "p2", "b"), person(g, "p3", "c")])
        .await
        .expect("seed");
    g.insert("main", "Knows", vec![knows(g, "e1", "p1", "p2")]).await.expect("edge");
    g.branch("feature", "main").await.expect("branch");
}

#[tokio::test]
async fn orphan_edges_are_found_in_both_directions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    diverged(&g).await;
    // a: the source adds an edge to p3, the target deletes p3.
    g.insert("feature", "Knows", vec![knows(&g, "e2", "p2", "p3")]).await.expect("edge");
    g.delete("main", "Person", vec!["p3".into()]).await.expect("delete");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(kinds(&r.conflicts), [(ConflictKind::OrphanEdge, "edge:Knows".into(), "e2".into())]);
    assert!(r.conflicts[0].message.contains("e2"), "{}", r.conflicts[0].message);

    // b: the source deletes p2 (and its edge e1 is on the target): merging main into feature
    // after main added an edge to p2.
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    diverged(&g).await;
    g.write(
        "feature",
        vec![
            lance_actions_graph::WriteOp::Delete { type_name: "Knows".into(), ids: vec!["e1".into()] },
            lance_actions_graph::WriteOp::Delete { type_name: "Person".into(), ids: vec!["p2".into()] },
        ],
    )
    .await
    .expect("delete p2");
    g.insert("main", "Knows", vec![knows(&g, "e5", "p3", "p2")]).await.expect("edge to p2");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(kinds(&r.conflicts), [(ConflictKind::OrphanEdge, "edge:Knows".into(), "e5".into())]);
    assert_eq!(r.outcome, Outcome::Conflicted);
    assert_eq!(edge_ids(&g, "main").await, ["e1", "e5"], "nothing written");
}

#[tokio::test]
async fn unique_and_cardinality_are_checked_on_the_merged_graph() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    diverged(&g).await;
    let p = |id: &str, email: &str| row(&g, "Person", json!({"id": id, "email": email}));
    g.insert("feature", "Person", vec![p("s1", "same@x")]).await.expect("source");
    g.insert("main", "Person", vec![p("t1", "same@x")]).await.expect("target");
    g.insert("feature", "Knows", vec![knows(&g, "e2", "p1", "p3")]).await.expect("second edge");
    g.insert("main", "Knows", vec![knows(&g, "e3", "p1", "p3")]).await.expect("another second edge");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(
        kinds(&r.conflicts),
        [
            (ConflictKind::CardinalityViolation, "edge:Knows".into(), "p1".into()),
            (ConflictKind::UniqueViolation, "node:Person".into(), "s1".into()),
        ]
    );
}

#[tokio::test]
async fn row_conflicts_and_violations_are_reported_together_and_a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    diverged(&g).await;
    g.upsert("feature", "Person", vec![person(&g, "p1", "s")]).await.expect("s");
    g.upsert("main", "Person", vec![person(&g, "p1", "t")]).await.expect("t");
    g.insert("feature", "Knows", vec![knows(&g, "e2", "p2", "p3")]).await.expect("edge");
    g.delete("main", "Person", vec!["p3".into()]).await.expect("delete");
    let before = files(dir.path());
    let dry = g.merge("feature", "main", &MergeOptions { dry_run: true, ..Default::default() }).await.expect("dry");
    assert_eq!(files(dir.path()), before, "a dry run wrote a file");
    let real = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(dry.conflicts, real.conflicts);
    assert_eq!(
        kinds(&real.conflicts),
        [
            (ConflictKind::OrphanEdge, "edge:Knows".into(), "e2".into()),
            (ConflictKind::DivergentUpdate, "node:Person".into(), "p1".into()),
        ]
    );
    assert_eq!(files(dir.path()), before, "a conflicted merge wrote a file");
}
