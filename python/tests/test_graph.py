"""la.Graph: writes, scans as pyarrow tables, and the three-way merge."""

import pyarrow as pa
import pytest

import lance_actions as la

SCHEMA = {
    "nodes": {"Person": {"properties": {"name": "string", "age": {"type": "int64", "range": [0, 150]}}}},
    "edges": {"Knows": {"src": "Person", "dst": "Person", "properties": {"since": "int64"}}},
}


def people(pairs):
    return pa.table({"id": [p[0] for p in pairs], "name": [p[1] for p in pairs]})


def names(g, branch="main"):
    t = g.scan("Person", branch=branch)
    return dict(zip(t.column("id").to_pylist(), t.column("name").to_pylist()))


@pytest.fixture
def graph(tmp_path):
    g = la.Graph.init(str(tmp_path / "g"), SCHEMA)
    g.insert("Person", people([("a", "Ann"), ("b", "Bob")]))
    return g


def test_init_open_insert_scan(graph):
    assert sorted(graph.types) == ["Knows", "Person"]
    again = la.Graph.open(graph.root)
    assert names(again) == {"a": "Ann", "b": "Bob"}
    graph.insert("Knows", pa.table({"id": ["k1"], "src": ["a"], "dst": ["b"], "since": [2020]}))
    assert graph.scan("Knows").column("since").to_pylist() == [2020]


def test_merge_of_disjoint_branches_then_conflict(graph):
    graph.branch("feature")
    graph.upsert("Person", people([("c", "Cy")]), branch="feature")
    graph.upsert("Person", people([("a", "Anna")]))
    r = graph.merge("feature", into="main")
    assert r.outcome == "merged" and r.conflicts == []
    assert names(graph) == {"a": "Anna", "b": "Bob", "c": "Cy"}
    graph.branch("f2")
    graph.upsert("Person", people([("b", "Bobby")]), branch="f2")
    graph.upsert("Person", people([("b", "Robert")]))
    dry = graph.merge("f2", into="main", dry_run=True)
    assert dry.outcome == "conflicted" and dry.conflicts[0]["id"] == "b"
    with pytest.raises(la.MergeConflict) as err:
        graph.merge("f2", into="main")
    assert err.value.conflicts[0]["id"] == "b"
    assert names(graph)["b"] == "Robert"
    r = graph.merge("f2", into="main", strategy="theirs")
    assert names(graph)["b"] == "Bobby"


def test_graph_errors(graph, tmp_path):
    with pytest.raises(FileExistsError):
        la.Graph.init(graph.root, SCHEMA)
    with pytest.raises(FileNotFoundError):
        la.Graph.open(str(tmp_path / "none"))
    with pytest.raises(ValueError, match="already present"):
        graph.insert("Person", people([("a", "Again")]))
    with pytest.raises(ValueError, match="unknown type"):
        graph.scan("Nope")
    with pytest.raises(ValueError, match="no graph branch"):
        graph.scan("Person", branch="nope")
    with pytest.raises(la.MergeConflict):  # a range constraint
        graph.insert("Person", pa.table({"id": ["z"], "name": ["Z"], "age": [400]}))
    assert names(graph) == {"a": "Ann", "b": "Bob"}
