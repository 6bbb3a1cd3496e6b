//! How a merge lands: one commit per changed table, at the rows the change detection located, and
//! a target whose history removed whole fragments is still read right.

use std::collections::BTreeMap;

use lance::dataset::transaction::Operation;
use lance_actions_graph::{ConflictKind, Graph, MergeOptions, Outcome};

use crate::common::{files, graph, names, person};

fn people(g: &Graph, ids: std::ops::RangeInclusive<u32>, name: &str) -> Vec<lance_actions_graph::Row> {
    ids.map(|i| person(g, &format!("p{i:02}"), name)).collect()
}

fn expected(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// p01..p05 in one fragment and p06..p10 in another, on main; a branch `feature` of it.
async fn two_fragments(dir: &tempfile::TempDir) -> Graph {
    let g = graph(dir).await;
    g.insert("main", "Person", people(&g, 1..=5, "a")).await.expect("first fragment");
    g.insert("main", "Person", people(&g, 6..=10, "a")).await.expect("second fragment");
    g.branch("feature", "main").await.expect("branch");
    g
}

async fn person_ref(g: &Graph, branch: &str) -> lance_actions_graph::manifest::TableRef {
    let view = g.view().await.expect("view");
    view.head(branch).expect("head").tables["Person"].clone()
}

#[tokio::test]
async fn a_merge_lands_each_changed_table_as_one_commit_at_the_located_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = two_fragments(&dir).await;
    g.upsert("feature", "Person", vec![person(&g, "p02", "X")]).await.expect("source update");
    g.delete("feature", "Person", vec!["p07".into()]).await.expect("source delete");
    g.upsert("main", "Person", vec![person(&g, "p09", "Y")]).await.expect("target update");
    let before = person_ref(&g, "main").await;
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::Merged, "{:?}", r.conflicts);
    assert_eq!(r.written["Person"], 2);
    let mut want: Vec<(String, &str)> = (1..=10).map(|i| (format!("p{i:02}"), "a")).collect();
    want.retain(|(id, _)| id != "p07");
    let mut want: BTreeMap<String, String> = want.into_iter().map(|(a, b)| (a, b.to_string())).collect();
    want.insert("p02".into(), "X".into());
    want.insert("p09".into(), "Y".into());
    assert_eq!(names(&g, "main").await, want);
    // One table commit on top of the target's recorded version: the rows' deletion vectors in
    // the two located fragments and one new fragment with the rewritten row; nothing removed.
    let after = person_ref(&g, "main").await;
    assert_eq!(after.version, before.version + 1, "one commit per table");
    let table = lance_actions_graph::table::open_at(g.root(), g.schema().get("Person").expect("type"), &after)
        .await
        .expect("open");
    let txn = table.read_transaction().await.expect("read").expect("a transaction");
    match txn.operation {
        Operation::Update { removed_fragment_ids, updated_fragments, new_fragments, .. } => {
            assert!(removed_fragment_ids.is_empty(), "{removed_fragment_ids:?}");
            assert_eq!(updated_fragments.len(), 2, "p02's and p07's fragments");
            assert_eq!(new_fragments.iter().map(|f| f.physical_rows.unwrap_or(0)).sum::<usize>(), 1);
        }
        other => panic!("a row-rewrite Update, got {other:?}"),
    }
}

#[tokio::test]
async fn a_target_that_emptied_a_fragment_converges_with_a_source_delete_in_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = two_fragments(&dir).await;
    // The target deletes every row of the first fragment (Lance drops the fragment).
    g.delete("main", "Person", (1..=5).map(|i| format!("p{i:02}")).collect()).await.expect("target delete");
    g.delete("feature", "Person", vec!["p02".into()]).await.expect("source delete");
    g.upsert("feature", "Person", vec![person(&g, "p06", "Z")]).await.expect("source update");
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::Merged, "{:?}", r.conflicts);
    assert_eq!(
        names(&g, "main").await,
        expected(&[("p06", "Z"), ("p07", "a"), ("p08", "a"), ("p09", "a"), ("p10", "a")])
    );
}

#[tokio::test]
async fn a_source_update_in_a_fragment_the_target_emptied_is_delete_vs_update_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = two_fragments(&dir).await;
    g.delete("main", "Person", (1..=5).map(|i| format!("p{i:02}")).collect()).await.expect("target delete");
    g.upsert("feature", "Person", vec![person(&g, "p03", "Q")]).await.expect("source update");
    let before = files(dir.path());
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.outcome, Outcome::Conflicted);
    let kinds: Vec<(ConflictKind, &str)> = r.conflicts.iter().map(|c| (c.kind, c.id.as_str())).collect();
    assert_eq!(kinds, [(ConflictKind::DeleteVsUpdate, "p03")]);
    assert_eq!(files(dir.path()), before, "a conflicted merge wrote a file");
    assert_eq!(names(&g, "main").await.len(), 5);
}

/// A graph operation that gave up names what moved under its last attempt, in the user's terms:
/// the branch (another writer published first) or a type's table (with the table's own words).
#[test]
fn contention_names_the_operation_and_what_moved_last() {
    use lance_actions_graph::{Error, GraphOp, Moved};
    let table = Moved::Table {
        type_key: "node:Person".into(),
        why: "keys already inserted concurrently".into(),
        key_race: true,
        judged: None,
    };
    let e = Error::Contention { branch: "main".into(), what: GraphOp::Merge, attempts: 20, last: table.clone() };
    let text = e.to_string();
    for part in [
        "this merge on graph branch 'main' gave up after 20 attempt(s)",
        "node:Person",
        "keys already inserted",
        "retry later",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    assert_eq!((table.kind(), table.is_key_race(), table.reason()), ("table_moved", true, None));
    let branch =
        Error::Contention { branch: "dev".into(), what: GraphOp::IndexBuild, attempts: 3, last: Moved::Branch };
    let text = branch.to_string();
    assert!(text.contains("index build") && text.contains("published to the branch first"), "{text}");
    assert!(!text.contains("table"), "a branch that moved names no table: {text}");
    assert_eq!((Moved::Branch.kind(), Moved::Branch.is_key_race()), ("branch_moved", false));
}
