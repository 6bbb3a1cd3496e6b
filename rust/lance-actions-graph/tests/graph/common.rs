use std::collections::BTreeMap;

use lance_actions_graph::{Graph, Row, row_from_json, row_id};
use serde_json::{Value as Json, json};

pub const SCHEMA: &str = r#"{
  "nodes": {"Person": {"properties": {"name": "string",
                                     "age": {"type": "int64", "range": [0, 150]},
                                     "email": {"type": "string", "unique": true},
                                     "kind": {"type": "string", "enum": ["a", "b"]},
                                     "embedding": "vector(4)"}}},
  "edges": {"Knows": {"src": "Person", "dst": "Person", "max_out": 2, "properties": {"since": "int64"}}}
}"#;

pub async fn graph(dir: &tempfile::TempDir) -> Graph {
    let root = dir.path().join("g");
    Graph::init(root.to_str().expect("utf8 path"), SCHEMA).await.expect("init")
}

pub fn row(g: &Graph, type_name: &str, value: Json) -> Row {
    let t = g.schema().get(type_name).expect("type");
    row_from_json(t, &value, 1).expect("row")
}

pub fn person(g: &Graph, id: &str, name: &str) -> Row {
    row(g, "Person", json!({"id": id, "name": name}))
}

pub fn knows(g: &Graph, id: &str, src: &str, dst: &str) -> Row {
    row(g, "Knows", json!({"id": id, "src": src, "dst": dst}))
}

/// id -> name of every Person on `branch`.
pub async fn names(g: &Graph, branch: &str) -> BTreeMap<String, String> {
    let name = g.schema().get("Person").expect("Person").column_index("name").expect("name");
    g.scan(branch, "Person")
        .await
        .expect("scan")
        .iter()
        .map(|r| (row_id(r).to_string(), r[name].as_str().unwrap_or("<null>").to_string()))
        .collect()
}

pub async fn edge_ids(g: &Graph, branch: &str) -> Vec<String> {
    g.scan(branch, "Knows").await.expect("scan").iter().map(|r| row_id(r).to_string()).collect()
}

/// Every file under `dir` (for "writes nothing" checks).
pub fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}
