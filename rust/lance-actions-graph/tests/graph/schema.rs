//! The schema file and bad input: clear one-line errors, nothing written.

use lance_actions_graph::{Error, Graph, GraphSchema, PropType, row_from_json};
use serde_json::json;

use crate::common::{SCHEMA, files, graph, person};

#[test]
fn the_issue_schema_parses_with_its_constraints() {
    let s = GraphSchema::parse(SCHEMA).expect("parse");
    let p = s.get("Person").expect("Person");
    let names: Vec<&str> = p.columns.iter().map(|c| c.name.as_str()).collect();
    // Properties in name order (the JSON object's keys are unordered).
    assert_eq!(names, ["id", "age", "email", "embedding", "kind", "name"]);
    assert_eq!(p.columns[1].range, Some((0.0, 150.0)));
    assert!(p.columns[2].unique);
    assert_eq!(p.columns[3].ty, PropType::Vector(4));
    assert_eq!(p.columns[4].allowed, Some(vec!["a".to_string(), "b".to_string()]));
    let k = s.get("Knows").expect("Knows");
    assert_eq!(k.endpoints, Some(("Person".into(), "Person".into())));
    assert_eq!(k.max_out, Some(2));
    assert_eq!(k.key(), "edge:Knows");
}

#[test]
fn schema_mistakes_are_typed_errors_naming_the_place() {
    let cases = [
        (r#"{"nodes": {"P": {"properties": {"x": "decimal"}}}}"#, "unknown type 'decimal'"),
        (r#"{"nodes": {"P": {}}, "edges": {"E": {"src": "P", "dst": "Q"}}}"#, "dst 'Q' is not a node type"),
        (r#"{"nodes": {"P": {"properties": {"x": {"type": "bool", "range": [0, 1]}}}}}"#, "range applies"),
        (r#"{"nodes": {"P": {"properties": {"id": "string"}}}}"#, "reserved"),
        (r#"{"nodes": {"P": {"properties": {"x": "vector(0)"}}}}"#, "unknown type"),
        (r#"{"nodes": {"P-1": {}}}"#, "type name 'P-1'"),
        (r#"not json"#, "not valid JSON"),
    ];
    for (text, expected) in cases {
        match GraphSchema::parse(text) {
            Err(e @ Error::Schema { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(expected), "{text}: {msg}");
                assert_eq!(msg.lines().count(), 1);
            }
            other => panic!("{text}: expected a schema error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_rows_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let p = g.schema().get("Person").expect("Person");
    let no_id = row_from_json(p, &json!({"name": "x"}), 3).expect_err("missing id");
    assert!(no_id.to_string().contains("line 3") && no_id.to_string().contains("'id'"), "{no_id}");
    let wrong = row_from_json(p, &json!({"id": "p", "age": "old"}), 1).expect_err("wrong type");
    assert!(wrong.to_string().contains("'age'"), "{wrong}");
    let unknown_prop = row_from_json(p, &json!({"id": "p", "height": 3}), 1).expect_err("unknown prop");
    assert!(unknown_prop.to_string().contains("height"), "{unknown_prop}");
    let before = files(dir.path());
    let r = person(&g, "p1", "a");
    assert!(matches!(g.insert("main", "Robot", vec![r]).await, Err(Error::UnknownType { .. })));
    assert_eq!(files(dir.path()), before, "a refused write wrote a file");
}

#[tokio::test]
async fn init_refuses_an_existing_graph_and_open_reads_the_schema_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    assert!(matches!(Graph::init(g.root(), SCHEMA).await, Err(Error::GraphExists { .. })));
    let again = Graph::open(g.root()).await.expect("open");
    assert_eq!(again.schema().types, g.schema().types);
    let missing = Graph::open(dir.path().join("nope").to_str().expect("utf8")).await;
    assert!(matches!(missing, Err(Error::NotAGraph { .. })));
}
