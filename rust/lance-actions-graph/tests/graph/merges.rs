//! Merge outcomes, lineage, multi-table publish, cell-wise merge and strategies.

use lance_actions_graph::{ConflictKind, MergeOptions, Outcome, Strategy};
use serde_json::json;

use crate::common::{edge_ids, files, graph, knows, names, person, row};

#[tokio::test]
async fn already_up_to_date_and_fast_forward_write_no_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p1", "a")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::AlreadyUpToDate);
    g.insert("feature", "Person", vec![person(&g, "p2", "b")]).await.expect("feature");
    g.insert("feature", "Knows", vec![knows(&g, "e1", "p1", "p2")]).await.expect("edge");
    let data_files = |d: &std::path::Path| files(d).into_iter().filter(|f| f.contains("/data/")).count();
    let before = data_files(dir.path());
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("ff");
    assert_eq!(r.outcome, Outcome::FastForward);
    assert_eq!(data_files(dir.path()), before, "a fast-forward wrote data");
    assert_eq!(names(&g, "main").await, names(&g, "feature").await);
    assert_eq!(edge_ids(&g, "main").await, ["e1"]);
    let view = g.view().await.expect("view");
    assert_eq!(view.heads["main"], view.heads["feature"], "the target points at the source's commit");
    // The target writes after a fast-forward on a fork of the source's tables, not on them.
    g.insert("main", "Person", vec![person(&g, "p3", "c")]).await.expect("write after ff");
    assert!(!names(&g, "feature").await.contains_key("p3"));
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::AlreadyUpToDate);
}

#[tokio::test]
async fn a_merge_publishes_nodes_and_edges_in_one_graph_version_with_two_parents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p1", "a"), person(&g, "p2", "b")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    g.write(
        "feature",
        vec![
            lance_actions_graph::WriteOp::Insert { type_name: "Person".into(), rows: vec![person(&g, "p3", "c")] },
            lance_actions_graph::WriteOp::Insert { type_name: "Knows".into(), rows: vec![knows(&g, "e1", "p1", "p3")] },
        ],
    )
    .await
    .expect("batch");
    g.upsert("main", "Person", vec![person(&g, "p2", "B")]).await.expect("target");
    let head_before = g.view().await.expect("view").heads["main"].clone();
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::Merged, "{:?}", r.conflicts);
    let log = g.log("main").await.expect("log");
    assert_eq!(log[0].parents.len(), 2);
    assert_eq!(log[0].parents[0], head_before);
    assert_eq!(
        names(&g, "main").await,
        [("p1", "a"), ("p2", "B"), ("p3", "c")].map(|(a, b)| (a.to_string(), b.to_string())).into()
    );
    assert_eq!(edge_ids(&g, "main").await, ["e1"]);
    // The edge table was untouched on main since the base: taken by reference.
    assert_eq!(r.adopted, ["Knows"]);
    assert_eq!(log[0].tables["Knows"], g.log("feature").await.expect("log")[0].tables["Knows"]);
}

#[tokio::test]
async fn merging_back_and_forth_and_nested_branches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p1", "a")]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    for round in 0..3 {
        g.insert("feature", "Person", vec![person(&g, &format!("f{round}"), "f")]).await.expect("f");
        g.insert("main", "Person", vec![person(&g, &format!("m{round}"), "m")]).await.expect("m");
        let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("f->m");
        assert_eq!(r.outcome, Outcome::Merged);
        let r = g.merge("main", "feature", &MergeOptions::default()).await.expect("m->f");
        assert_eq!(r.outcome, Outcome::FastForward, "round {round}: feature has nothing main lacks");
        assert_eq!(names(&g, "main").await, names(&g, "feature").await);
        assert_eq!(names(&g, "main").await.len(), 1 + 2 * (round + 1));
    }
    // A branch of a branch, merged up two levels, and an update that flows back.
    g.branch("nested", "feature").await.expect("nested");
    g.upsert("nested", "Person", vec![person(&g, "p1", "deep")]).await.expect("nested write");
    g.insert("feature", "Person", vec![person(&g, "fx", "f")]).await.expect("feature write");
    assert_eq!(g.merge("nested", "feature", &MergeOptions::default()).await.expect("n->f").outcome, Outcome::Merged);
    g.insert("main", "Person", vec![person(&g, "mx", "m")]).await.expect("main write");
    assert_eq!(g.merge("feature", "main", &MergeOptions::default()).await.expect("f->m").outcome, Outcome::Merged);
    let main = names(&g, "main").await;
    assert_eq!(main["p1"], "deep");
    assert!(main.contains_key("fx") && main.contains_key("mx"));
    assert_eq!(g.merge("main", "nested", &MergeOptions::default()).await.expect("m->n").outcome, Outcome::FastForward);
    assert_eq!(names(&g, "nested").await, main);
}

#[tokio::test]
async fn cell_wise_merge_takes_different_properties_from_each_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let p = |name: &str, age: i64| row(&g, "Person", json!({"id": "p", "name": name, "age": age}));
    g.insert("main", "Person", vec![p("b", 1)]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    g.upsert("feature", "Person", vec![p("s", 1)]).await.expect("source changes name");
    g.upsert("main", "Person", vec![p("b", 2)]).await.expect("target changes age");
    let rowwise = g.merge("feature", "main", &MergeOptions { dry_run: true, ..Default::default() }).await.expect("row");
    assert_eq!(rowwise.conflicts.len(), 1);
    assert_eq!(rowwise.conflicts[0].kind, ConflictKind::DivergentUpdate);
    let cells = MergeOptions { cells: true, ..Default::default() };
    let r = g.merge("feature", "main", &cells).await.expect("cells");
    assert_eq!(r.outcome, Outcome::Merged, "{:?}", r.conflicts);
    let rows = g.scan("main", "Person").await.expect("scan");
    assert_eq!(rows, vec![p("s", 2)]);
    // Both change the same property differently: a conflict naming it.
    g.upsert("feature", "Person", vec![p("s", 7)]).await.expect("s");
    g.upsert("main", "Person", vec![p("s", 8)]).await.expect("t");
    let r = g.merge("feature", "main", &cells).await.expect("cells");
    assert_eq!(r.outcome, Outcome::Conflicted);
    assert!(
        r.conflicts[0].message.contains("age") && !r.conflicts[0].message.contains("name"),
        "{}",
        r.conflicts[0].message
    );
}

#[tokio::test]
async fn strategies_resolve_row_conflicts_but_never_violations() {
    for (strategy, expected) in [(Strategy::Ours, "t"), (Strategy::Theirs, "s")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = graph(&dir).await;
        g.insert("main", "Person", vec![person(&g, "p", "b"), person(&g, "q", "b")]).await.expect("seed");
        g.branch("feature", "main").await.expect("branch");
        g.upsert("feature", "Person", vec![person(&g, "p", "s")]).await.expect("s");
        g.upsert("main", "Person", vec![person(&g, "p", "t")]).await.expect("t");
        let opts = MergeOptions { strategy, ..Default::default() };
        let r = g.merge("feature", "main", &opts).await.expect("merge");
        assert_eq!(r.outcome, Outcome::Merged);
        assert_eq!(names(&g, "main").await["p"], expected, "{strategy:?}");
        // A violation is not a row conflict: it fails whatever the strategy.
        g.insert("feature", "Knows", vec![knows(&g, "e1", "p", "q")]).await.expect("edge");
        g.delete("main", "Person", vec!["q".into()]).await.expect("delete");
        let r = g.merge("feature", "main", &opts).await.expect("merge");
        assert_eq!(r.outcome, Outcome::Conflicted);
        assert_eq!(r.conflicts[0].kind, ConflictKind::OrphanEdge);
    }
}

/// The id index build is a graph version of its own; writes and merges afterwards behave the same.
#[tokio::test]
async fn an_indexed_graph_writes_and_merges_the_same() {
    use lance::index::DatasetIndexExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let rows: Vec<_> = (1..=5).map(|i| person(&g, &format!("p{i}"), "b")).collect();
    g.insert("main", "Person", rows).await.expect("seed");
    g.index_keys("main").await.expect("index");
    let head = g.log("main").await.expect("log")[0].clone();
    let r = &head.tables["Person"];
    let ds = lance::Dataset::open(dir.path().join("g/node_Person.lance").to_str().expect("utf8")).await.expect("open");
    let ds = ds.checkout_version((r.branch.as_str(), r.version)).await.expect("checkout");
    assert_eq!(ds.load_indices().await.expect("indices").len(), 1, "the recorded version carries the id index");
    g.branch("feature", "main").await.expect("branch");
    g.upsert("feature", "Person", vec![person(&g, "p1", "S")]).await.expect("s");
    g.delete("feature", "Person", vec!["p2".into()]).await.expect("s delete");
    g.upsert("main", "Person", vec![person(&g, "p3", "T")]).await.expect("t");
    assert!(matches!(
        g.insert("main", "Person", vec![person(&g, "p4", "x")]).await,
        Err(lance_actions_graph::Error::AlreadyPresent { .. })
    ));
    let m = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(m.outcome, Outcome::Merged);
    let expected: std::collections::BTreeMap<String, String> =
        [("p1", "S"), ("p3", "T"), ("p4", "b"), ("p5", "b")].map(|(a, b)| (a.to_string(), b.to_string())).into();
    assert_eq!(names(&g, "main").await, expected);
}

#[tokio::test]
async fn bad_branch_arguments_are_typed_errors() {
    use lance_actions_graph::Error;
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let opts = MergeOptions::default();
    assert!(matches!(g.merge("nope", "main", &opts).await, Err(Error::NoSuchBranch { .. })));
    assert!(matches!(g.merge("main", "main", &opts).await, Err(Error::SameBranch { .. })));
    assert!(matches!(g.branch("a/b", "main").await, Err(Error::InvalidName { .. })));
    assert!(matches!(g.branch("x", "nope").await, Err(Error::NoSuchBranch { .. })));
    g.branch("x", "main").await.expect("branch");
    assert!(matches!(g.branch("x", "main").await, Err(Error::BranchExists { .. })));
    assert!(matches!(g.insert("nope", "Person", vec![person(&g, "p", "a")]).await, Err(Error::NoSuchBranch { .. })));
    assert_eq!(g.branches().await.expect("list").iter().map(|(b, _)| b.as_str()).collect::<Vec<_>>(), ["main", "x"]);
}

/// An overlay (Lance 14's in-place cell update) changes a fragment's values without changing its
/// data files or deletion file: the merge's change detection must still see the rows it changed
/// (else a source edit is dropped, or a target edit overwritten instead of a DivergentUpdate).
/// Graph writes never make overlays, so the overlay is committed with plain Lance on the table and
/// the delta of the two real versions is checked directly.
#[tokio::test]
async fn an_overlay_edit_is_a_change_the_delta_sees() {
    use std::sync::Arc;

    use arrow_array::{RecordBatch, StringArray, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use lance::Dataset;
    use lance::dataset::CommitBuilder;
    use lance::dataset::transaction::{Operation, TransactionBuilder};
    use lance_actions_graph::delta::side_delta;
    use lance_actions_graph::table::table_uri;

    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    g.insert("main", "Person", vec![person(&g, "p1", "a"), person(&g, "p2", "b")]).await.expect("seed");
    let t = g.schema().get("Person").expect("Person");
    let base = Arc::new(Dataset::open(&table_uri(g.root(), t)).await.expect("open Person"));
    let fragment = base.manifest().fragments.iter().find(|f| f.physical_rows == Some(2)).expect("the seeded fragment");
    let fragment = base.get_fragment(fragment.id as usize).expect("fragment");
    let mut writer =
        fragment.write_overlay(&base.schema().project(&["name"]).expect("name")).await.expect("overlay writer");
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("_rowaddr", DataType::UInt64, false),
            Field::new("name", DataType::Utf8, true),
        ])),
        vec![Arc::new(UInt64Array::from(vec![0u64])), Arc::new(StringArray::from(vec!["overlaid"]))],
    )
    .expect("overlay batch");
    writer.write_batch(&batch).await.expect("write overlay");
    let group = writer.finish().await.expect("finish overlay").expect("a group");
    let txn = TransactionBuilder::new(base.manifest().version, Operation::DataOverlay { groups: vec![group] }).build();
    let side = CommitBuilder::new(base.clone()).execute(txn).await.expect("overlay commits");
    let delta = side_delta(t, &base, &side).await.expect("delta");
    let name = t.column_index("name").expect("name");
    let changed: Vec<(String, String)> = delta
        .added
        .iter()
        .filter_map(|(id, r)| r[name].as_str().map(|n| (id.clone(), n.to_string())))
        .filter(|(id, n)| delta.base_row(id).is_none_or(|b| b[name].as_str() != Some(n.as_str())))
        .collect();
    assert_eq!(changed.len(), 1, "exactly the overlaid row reads as changed: {changed:?}");
    let (id, value) = &changed[0];
    assert_eq!(value, "overlaid", "the side's row is read with the overlay applied");
    assert!(delta.base_row(id).is_some(), "the base row of the overlaid id comes with the delta");
}
