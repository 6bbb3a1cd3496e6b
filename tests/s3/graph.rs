//! The graph merge on S3: a graph whose tables and manifest live in the bucket, branched, written on
//! both sides and merged three ways, cell by cell, with a conflicting cell reported and nothing
//! written for it.

use std::collections::BTreeMap;

use lance_actions_graph::{Graph, MergeOptions, Outcome, row_from_json, row_id};
use serde_json::json;

use crate::Ctx;

const SCHEMA: &str = r#"{
  "nodes": {"Person": {"properties": {"name": "string", "age": "int64"}}},
  "edges": {"Knows": {"src": "Person", "dst": "Person", "properties": {}}}
}"#;

fn person(g: &Graph, id: &str, name: &str, age: i64) -> lance_actions_graph::Row {
    let t = g.schema().get("Person").expect("Person");
    row_from_json(t, &json!({"id": id, "name": name, "age": age}), 1).expect("a person row")
}

async fn people(g: &Graph, branch: &str) -> BTreeMap<String, (String, i64)> {
    let t = g.schema().get("Person").expect("Person");
    let (name, age) = (t.column_index("name").expect("name"), t.column_index("age").expect("age"));
    g.scan(branch, "Person")
        .await
        .expect("scan on S3")
        .iter()
        .map(|r| {
            (
                row_id(r).to_string(),
                (
                    r[name].as_str().unwrap_or("").to_string(),
                    match r[age] {
                        lance_actions_graph::Value::Int(a) => a,
                        _ => -1,
                    },
                ),
            )
        })
        .collect()
}

pub async fn a_graph_on_s3_merges_three_ways(cx: &Ctx<'_>) {
    let g = Graph::init(&cx.uri("graph"), SCHEMA).await.expect("a graph on S3");
    g.insert("main", "Person", vec![person(&g, "p1", "ann", 30), person(&g, "p2", "bob", 40)]).await.expect("seed");
    g.branch("feature", "main").await.expect("branch");
    // Different cells of p1 on each side merge; p3 and p4 are added on one side each.
    g.upsert("feature", "Person", vec![person(&g, "p1", "anne", 30), person(&g, "p3", "cid", 50)])
        .await
        .expect("feature");
    g.upsert("main", "Person", vec![person(&g, "p1", "ann", 31), person(&g, "p4", "dee", 60)]).await.expect("main");
    let cells = MergeOptions { cells: true, ..Default::default() };
    let r = g.merge("feature", "main", &cells).await.expect("merge on S3");
    assert_eq!(r.outcome, Outcome::Merged, "{r:?}");
    let expected: BTreeMap<String, (String, i64)> =
        [("p1", ("anne", 31)), ("p2", ("bob", 40)), ("p3", ("cid", 50)), ("p4", ("dee", 60))]
            .into_iter()
            .map(|(k, (n, a))| (k.to_string(), (n.to_string(), a)))
            .collect();
    assert_eq!(people(&g, "main").await, expected);
    // The same cell changed differently on both sides: a conflict, and main keeps its value.
    g.upsert("feature", "Person", vec![person(&g, "p2", "bobby", 40)]).await.expect("feature");
    g.upsert("main", "Person", vec![person(&g, "p2", "robert", 40)]).await.expect("main");
    let r = g.merge("feature", "main", &cells).await.expect("merge on S3");
    assert!(!r.conflicts.is_empty(), "a cell changed on both sides must conflict: {r:?}");
    assert_eq!(people(&g, "main").await["p2"], ("robert".to_string(), 40));
}
