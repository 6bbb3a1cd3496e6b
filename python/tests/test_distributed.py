"""Distributed writes: the no-Ray example (worker processes + a coordinator committing through
lance_actions.commit), and Ray jobs through lance-ray's fragment writers (lance_actions.ray), on
a local disk and on the local S3 server. Every row lands exactly once."""

import os
import sys
import threading

import lance
import pyarrow as pa
import pytest

import lance_actions as la

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import distributed_write  # noqa: E402

from test_s3 import bucket, s3  # noqa: E402,F401  (the session's S3 server fixtures)


def ids_of(uri, options=None):
    t = lance.dataset(uri, storage_options=options).to_table(columns=["id"])
    ids = t.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row landed twice"
    return sorted(ids)


def test_worker_processes_stage_and_a_coordinator_commits_each(tmp_path):
    uri = str(tmp_path / "t.lance")
    assert distributed_write.main([uri, "--workers", "3", "--rows", "50"]) == 150
    assert ids_of(uri) == list(range(150))
    # Three commits after the create, each judged against the ones before it.
    history = la.log(uri)
    assert [h["writer"] for h in history[:3]] == ["lance-actions"] * 3


def test_worker_processes_on_s3(s3, bucket):  # noqa: F811
    uri = f"{bucket}/t"
    args = [uri, "--workers", "2", "--rows", "40"] + sum((["--storage-option", f"{k}={v}"] for k, v in s3.options.items()), [])
    assert distributed_write.main(args) == 80
    assert ids_of(uri, s3.options) == list(range(80))


ray = pytest.importorskip("ray", reason="ray[data] is installed by scripts/setup.sh")
lar = pytest.importorskip("lance_actions.ray", reason="lance-ray is installed by scripts/setup.sh")


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def two_concurrent_jobs(uri, options=None):
    """Two Ray Data jobs appending disjoint ids to one table at once; their reports."""
    reports, errors = {}, []

    def job(name, start):
        try:
            data = ray.data.from_arrow(pa.table({"id": pa.array(range(start, start + 500), pa.int64())}))
            reports[name] = lar.write_lance(data, uri, mode="append", storage_options=options)
        except Exception as e:  # surfaced below with the job's name
            errors.append((name, e))

    threads = [threading.Thread(target=job, args=(n, s)) for n, s in (("a", 1000), ("b", 2000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return reports


def check_jobs(uri, reports, options=None):
    assert ids_of(uri, options) == list(range(0, 10)) + list(range(1000, 1500)) + list(range(2000, 2500))
    versions = sorted(r.version for r in reports.values())
    assert len(set(versions)) == 2, reports
    # Neither job was re-executed: every attempt's verdict was ok (an attempt that lost the race
    # for the next version is judged again against the winner, and rebased over it).
    verdicts = [a["verdict"] for r in reports.values() for a in r.attempts]
    assert set(verdicts) == {"ok"}, verdicts
    # The later commit was judged against the earlier one: in its last attempt, or at that attempt's
    # manifest write when Lance's own listing found the earlier one first (design/commit.md).
    later = max(reports.values(), key=lambda r: r.version)
    last = later.attempts[-1]
    judged = last["peers"] + (last["at_write"]["peers"] if last["at_write"] else [])
    assert [p["version"] for p in judged] == [min(versions)], last


def test_two_concurrent_ray_jobs_append_to_one_table(ray_local, tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    check_jobs(uri, two_concurrent_jobs(uri))


def test_two_concurrent_ray_jobs_on_s3(ray_local, s3, bucket):  # noqa: F811
    uri = f"{bucket}/t"
    lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri, storage_options=s3.options)
    check_jobs(uri, two_concurrent_jobs(uri, s3.options), s3.options)


def test_a_ray_append_to_a_keyed_table_is_refused_not_duplicated(ray_local, tmp_path):
    uri = str(tmp_path / "k.lance")
    la.KeyedTable.create(uri, pa.table({"id": pa.array(range(10), pa.int64())}), key="id")
    data = ray.data.from_arrow(pa.table({"id": pa.array(range(5, 15), pa.int64())}))
    with pytest.raises(la.Fail):
        lar.write_lance(data, uri, mode="append")
    assert ids_of(uri) == list(range(10))


def keyed_rows(ids, v):
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": pa.array([v] * len(ids), pa.int64())})


def keyed_scan(uri, options=None):
    t = lance.dataset(uri, storage_options=options).to_table(columns=["id", "v"])
    pairs = list(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))
    assert len(pairs) == len({i for i, _ in pairs}), "a key landed twice"
    return dict(pairs)


def test_two_ray_keyed_inserts_racing_on_shared_keys_have_one_winner(ray_local, tmp_path):
    uri = str(tmp_path / "k.lance")
    la.KeyedTable.create(uri, keyed_rows(range(10), 0), key="id")
    outcomes, errors = {}, {}

    def job(name, ids, v):
        try:
            data = ray.data.from_arrow(keyed_rows(ids, v)).repartition(3)
            outcomes[name] = lar.insert(data, uri)
        except Exception as e:  # the loser's KeyConflict, checked below
            errors[name] = e

    jobs = [threading.Thread(target=job, args=a) for a in (("a", range(100, 400), 1), ("b", range(300, 600), 2))]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join()
    assert len(outcomes) == 1 and len(errors) == 1, (outcomes, errors)
    (winner, outcome), (loser, error) = next(iter(outcomes.items())), next(iter(errors.items()))
    assert isinstance(error, la.KeyConflict), repr(error)
    assert error.keys and all(300 <= int(k) < 400 for k in error.keys), error.keys
    assert outcome.inserted == 300
    won = range(100, 400) if winner == "a" else range(300, 600)
    expected = {i: 0 for i in range(10)} | {i: (1 if winner == "a" else 2) for i in won}
    assert keyed_scan(uri) == expected
    # A second insert of keys now present is refused, and nothing changes.
    with pytest.raises(la.KeyConflict):
        lar.insert(ray.data.from_arrow(keyed_rows([5, 700], 9)), uri)
    assert keyed_scan(uri) == expected


def test_a_ray_keyed_insert_on_s3(ray_local, s3, bucket):  # noqa: F811
    uri = f"{bucket}/k"
    la.KeyedTable.create(uri, keyed_rows(range(10), 0), key="id", storage_options=s3.options)
    outcome = lar.insert(ray.data.from_arrow(keyed_rows(range(10, 60), 1)).repartition(2), uri, storage_options=s3.options)
    assert outcome.inserted == 50
    assert keyed_scan(uri, s3.options) == {i: 0 for i in range(10)} | {i: 1 for i in range(10, 60)}


def test_a_ray_upsert_updates_present_keys_and_inserts_new_ones(ray_local, tmp_path):
    uri = str(tmp_path / "k.lance")
    la.KeyedTable.create(uri, keyed_rows(range(10), 0), key="id")
    outcomes = lar.upsert(ray.data.from_arrow(keyed_rows(range(5, 25), 3)).repartition(2), uri)
    assert sum(o.updated for o in outcomes) == 5 and sum(o.inserted for o in outcomes) == 15, outcomes
    assert keyed_scan(uri) == {i: 0 for i in range(5)} | {i: 3 for i in range(5, 25)}
