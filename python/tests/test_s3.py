"""The package on object storage: a real S3-compatible server (moto) and storage options passed
the way pylance takes them (no environment variables), with pylance reading the same bucket."""

import os
import threading

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation
from lance.fragment import write_fragments

import lance_actions as la
from conftest import rows
from s3server import S3


@pytest.fixture(scope="session")
def s3():
    server = S3()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3):
    return s3.bucket()


def read(uri, options):
    t = lance.dataset(uri, storage_options=options).to_table()
    ids, vs = t.column("id").to_pylist(), t.column("v").to_pylist()
    assert len(ids) == len(set(ids)), "duplicate ids on S3"
    return dict(zip(ids, vs))


def test_row_disjoint_deletes_staged_by_pylance_both_land_on_s3(s3, bucket):
    uri = f"{bucket}/t"
    lance.write_dataset(rows(range(100)), uri, storage_options=s3.options)
    ds = lance.dataset(uri, storage_options=s3.options)
    # Two deletes of disjoint rows of the same fragment, staged on the same version.
    a = ds.get_fragment(0).delete("id < 10")
    b = ds.get_fragment(0).delete("id >= 90")
    first = la.commit(uri, lance.Transaction(ds.version, LanceOperation.Delete([a], [], "id < 10")), storage_options=s3.options)
    second = la.commit(uri, lance.Transaction(ds.version, LanceOperation.Delete([b], [], "id >= 90")), storage_options=s3.options)
    assert (first.version, second.version) == (2, 3)
    assert len(second.attempts) == 1, "the second delete was rebased, not re-executed"
    assert sorted(read(uri, s3.options)) == list(range(10, 90))


def test_a_commit_through_a_dataset_opened_with_storage_options_needs_nothing_else(s3, bucket):
    uri = f"{bucket}/t"
    lance.write_dataset(rows(range(10)), uri, storage_options=s3.options)
    ds = lance.dataset(uri, storage_options=s3.options)
    frags = write_fragments(rows(range(10, 20), 1), uri, storage_options=s3.options)
    report = la.commit(ds, lance.Transaction(ds.version, LanceOperation.Append(frags)))
    assert report.version == 2
    assert len(read(uri, s3.options)) == 20


def test_keyed_inserts_racing_on_s3_have_one_winner_per_key(s3, bucket):
    uri = f"{bucket}/keyed"
    la.KeyedTable.create(uri, rows([0]), key="id", storage_options=s3.options)
    won, refused = [], []

    def writer(w):
        for start in range(1, 13, 3):
            t = la.KeyedTable.open(uri, storage_options=s3.options)
            try:
                t.insert(rows(range(start, start + 3), w))
                won.append((w, start))
            except la.KeyConflict:
                refused.append((w, start))

    threads = [threading.Thread(target=writer, args=(w,)) for w in (1, 2, 3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    data = read(uri, s3.options)
    # Every batch of 3 keys was won by exactly one writer, whose value every row of it carries.
    starts = sorted(s for _, s in won)
    assert starts == list(range(1, 13, 3)), (won, refused)
    for w, start in won:
        assert [data[k] for k in range(start, start + 3)] == [w] * 3
    assert len(refused) == 2 * len(starts)
    assert len(data) == 13


def test_branches_and_a_graph_on_s3(s3, bucket):
    uri = f"{bucket}/b"
    lance.write_dataset(rows(range(10)), uri, storage_options=s3.options)
    b = la.Branches(uri, storage_options=s3.options)
    physical = b.create("feature")  # the Lance branch behind the logical name
    feature = lance.dataset(uri, storage_options=s3.options).checkout_version((physical, None))
    lance.write_dataset(rows(range(100, 105), 3), feature, mode="append")
    lance.write_dataset(rows(range(200, 202), 4), uri, mode="append", storage_options=s3.options)
    r = b.merge("feature", into="main")
    assert r.outcome == "merged"
    data = read(uri, s3.options)
    assert len(data) == 17 and data[102] == 3 and data[201] == 4

    schema = {"nodes": {"Person": {"properties": {"name": "string"}}}, "edges": {}}
    g = la.Graph.init(f"{bucket}/g", schema, storage_options=s3.options)
    # An object store's root is no local directory: nothing named after the bucket appears here.
    assert not os.path.exists(bucket.replace("s3://", "s3:/")), "init made a local directory"
    with pytest.raises(FileExistsError):
        la.Graph.init(f"{bucket}/g", schema, storage_options=s3.options)
    g.insert("Person", [{"id": "p1", "name": "a"}])
    g.branch("feature")
    g.insert("Person", [{"id": "p2", "name": "b"}], branch="feature")
    g.insert("Person", [{"id": "p3", "name": "c"}])
    m = g.merge("feature", into="main")
    assert m.outcome == "merged"
    assert g.scan("Person").column("id").to_pylist() == ["p1", "p2", "p3"]
    # A fresh handle, opened with the same options, reads the merged graph back from the bucket.
    assert la.Graph.open(f"{bucket}/g", storage_options=s3.options).scan("Person").num_rows == 3
