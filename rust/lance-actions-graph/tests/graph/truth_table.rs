//! The row truth table, cell by cell, on real graphs: B absent/present x S unchanged/changed/
//! deleted x T unchanged/changed/deleted, with S == T and S != T. Each side also writes a filler
//! row, so every cell goes through the three-way path (not a fast-forward).

use lance_actions_graph::{ConflictKind, MergeOptions, Outcome};

use crate::common::{graph, names, person};

#[derive(Clone, Copy, Debug)]
pub enum Side {
    Unchanged,
    Set(&'static str),
    Deleted,
}

#[derive(Debug, PartialEq)]
pub enum Expect {
    Row(Option<&'static str>),
    Conflict(ConflictKind),
}

async fn apply(g: &lance_actions_graph::Graph, branch: &str, side: Side, filler: &str) {
    match side {
        Side::Unchanged => {}
        Side::Set(v) => {
            g.upsert(branch, "Person", vec![person(g, "p", v)]).await.expect("upsert");
        }
        Side::Deleted => {
            g.delete(branch, "Person", vec!["p".into()]).await.expect("delete");
        }
    }
    g.insert(branch, "Person", vec![person(g, filler, "f")]).await.expect("filler");
}

pub async fn cell(b: Option<&'static str>, s: Side, t: Side, expect: Expect) {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    if let Some(v) = b {
        g.insert("main", "Person", vec![person(&g, "p", v)]).await.expect("base");
    }
    g.branch("feature", "main").await.expect("branch");
    apply(&g, "feature", s, "fill-s").await;
    apply(&g, "main", t, "fill-t").await;
    let before = names(&g, "main").await;
    let report = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    let after = names(&g, "main").await;
    match expect {
        Expect::Row(v) => {
            assert_eq!(report.outcome, Outcome::Merged, "{:?}", report.conflicts);
            assert!(report.conflicts.is_empty());
            assert_eq!(after.get("p").map(String::as_str), v, "final row of p");
            assert!(after.contains_key("fill-s") && after.contains_key("fill-t"));
            assert_eq!(after.len(), 2 + usize::from(v.is_some()));
        }
        Expect::Conflict(kind) => {
            assert_eq!(report.outcome, Outcome::Conflicted);
            assert_eq!(report.conflicts.len(), 1, "{:?}", report.conflicts);
            let c = &report.conflicts[0];
            assert_eq!((c.kind, c.type_key.as_str(), c.id.as_str()), (kind, "node:Person", "p"));
            assert_eq!(after, before, "a conflicted merge changed the target");
        }
    }
}

macro_rules! cells {
    ($($name:ident: $b:expr, $s:expr, $t:expr => $e:expr;)*) => {
        $(#[tokio::test]
        async fn $name() {
            cell($b, $s, $t, $e).await;
        })*
    };
}

use Expect::{Conflict, Row};
use Side::{Deleted, Set, Unchanged};

cells! {
    absent_s_unchanged_t_unchanged: None, Unchanged, Unchanged => Row(None);
    absent_s_inserted_t_unchanged: None, Set("s"), Unchanged => Row(Some("s"));
    absent_s_unchanged_t_inserted: None, Unchanged, Set("t") => Row(Some("t"));
    absent_both_inserted_same: None, Set("x"), Set("x") => Row(Some("x"));
    absent_both_inserted_different: None, Set("s"), Set("t") => Conflict(ConflictKind::DivergentInsert);
    present_s_unchanged_t_unchanged: Some("b"), Unchanged, Unchanged => Row(Some("b"));
    present_s_unchanged_t_changed: Some("b"), Unchanged, Set("t") => Row(Some("t"));
    present_s_unchanged_t_deleted: Some("b"), Unchanged, Deleted => Row(None);
    present_s_changed_t_unchanged: Some("b"), Set("s"), Unchanged => Row(Some("s"));
    present_both_changed_same: Some("b"), Set("x"), Set("x") => Row(Some("x"));
    present_both_changed_different: Some("b"), Set("s"), Set("t") => Conflict(ConflictKind::DivergentUpdate);
    present_s_changed_t_deleted: Some("b"), Set("s"), Deleted => Conflict(ConflictKind::DeleteVsUpdate);
    present_s_deleted_t_unchanged: Some("b"), Deleted, Unchanged => Row(None);
    present_s_deleted_t_changed: Some("b"), Deleted, Set("t") => Conflict(ConflictKind::DeleteVsUpdate);
    present_both_deleted: Some("b"), Deleted, Deleted => Row(None);
}

/// Null differs from "" in the comparator: a side that sets "" where the base had null changed it.
#[tokio::test]
async fn null_and_empty_string_are_different_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let null_name = crate::common::row(&g, "Person", serde_json::json!({"id": "p"}));
    g.insert("main", "Person", vec![null_name]).await.expect("base");
    g.branch("feature", "main").await.expect("branch");
    g.upsert("feature", "Person", vec![person(&g, "p", "")]).await.expect("empty");
    g.insert("main", "Person", vec![person(&g, "q", "t")]).await.expect("filler");
    let report = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(report.outcome, Outcome::Merged);
    let rows = g.scan("main", "Person").await.expect("scan");
    let name = g.schema().get("Person").expect("Person").column_index("name").expect("name");
    assert_eq!(rows[0][name], lance_actions_graph::Value::Str(String::new()), "the source's \"\" replaced null");
}
