"""la.commit / la.judge on transactions staged by pylance 14.0.2, read back by pylance."""

import os
import shutil

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation
from lance.fragment import write_fragments

import lance_actions as la
from conftest import read, rows


def merge_insert(ds, ids, value):
    txn, _ = (
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute_uncommitted(rows(ids, value))
    )
    return txn


def staged_delete(ds, predicate):
    """A delete staged by hand: pylance's LanceFragment.delete + LanceOperation.Delete."""
    frag = ds.get_fragment(0).delete(predicate)
    return lance.Transaction(read_version=ds.version, operation=LanceOperation.Delete([frag], [], predicate))


def test_merge_insert_commits_and_pylance_reads_it(table):
    ds = lance.dataset(table)
    txn = merge_insert(ds, range(990, 1010), 7)
    report = la.commit(table, txn)
    assert report.version == 2 and report.read_version == 1
    assert len(report.attempts) == 1 and report.attempts[0]["verdict"] == "ok"
    # One attempt, nothing slept: its time in Lance's commit path lies within the commit's.
    assert report.waited_seconds == 0.0
    assert 0.0 < report.attempts[0]["in_lance_seconds"] < report.elapsed_seconds
    assert report.own_seconds > 0.0
    data = read(table)
    assert len(data) == 1010
    assert all(data[i] == 7 for i in range(990, 1010)) and data[0] == 0


def test_commit_accepts_the_dataset_it_was_staged_on(table):
    ds = lance.dataset(table)
    report = la.commit(ds, merge_insert(ds, [5], 1))
    assert report.version == 2 and read(table)[5] == 1


def test_disjoint_merge_inserts_staged_on_one_version_both_commit(table):
    ds = lance.dataset(table)
    a = merge_insert(ds, range(0, 100), 1)  # 100 keys, all present: updates
    b = merge_insert(ds, range(950, 1050), 2)  # 100 keys: 50 updates, 50 inserts
    first = la.commit(table, a)
    second = la.commit(table, b)
    assert (first.version, second.version) == (2, 3)
    # The second was judged against the first (landed after it was staged) and rebased.
    assert [p["version"] for p in second.attempts[0]["peers"]] == [2]
    data = read(table)
    assert len(data) == 1050
    assert [data[i] for i in (0, 99, 100, 949, 950, 999, 1000, 1049)] == [1, 1, 0, 0, 2, 2, 2, 2]


def test_overlapping_merge_inserts_give_retry_and_the_second_writes_nothing(table):
    ds = lance.dataset(table)
    a = merge_insert(ds, range(0, 100), 1)
    b = merge_insert(ds, range(50, 150), 2)
    la.commit(table, a)
    with pytest.raises(la.Retry) as err:
        la.commit(table, b)
    assert err.value.peer_version == 2
    assert err.value.rule == "RowsOverlap", err.value.reason
    assert isinstance(err.value, la.ConflictError)
    assert lance.dataset(table).version == 2
    data = read(table)
    assert all(data[i] == 1 for i in range(100)) and all(data[i] == 0 for i in range(100, 150))


def test_row_disjoint_deletes_of_one_fragment_both_land_where_lance_retries(table, tmp_path):
    ds = lance.dataset(table)
    a, b = staged_delete(ds, "id < 10"), staged_delete(ds, "id >= 990")
    la.commit(table, a)
    report = la.commit(table, b)
    assert report.version == 3
    assert sorted(read(table)) == list(range(10, 990))

    # The same two staged deletes through Lance's own commit: the second cannot land.
    plain = str(tmp_path / "plain.lance")
    lance.write_dataset(rows(range(1000)), plain)
    pds = lance.dataset(plain)
    pa_, pb = staged_delete(pds, "id < 10"), staged_delete(pds, "id >= 990")
    lance.LanceDataset.commit(plain, pa_.operation, read_version=1)
    with pytest.raises(Exception) as lance_err:
        lance.LanceDataset.commit(plain, pb.operation, read_version=1)
    assert "Retryable commit conflict" in str(lance_err.value), lance_err.value
    assert sorted(read(plain)) == list(range(10, 1000))


def test_staged_transaction_and_its_result_read_back_by_pylance_unchanged(table):
    ds = lance.dataset(table)
    txn = merge_insert(ds, range(0, 5), 3)
    before = repr(txn)
    report = la.commit(table, txn)
    assert repr(txn) == before  # the staged object is not touched
    committed = lance.dataset(table).read_transaction(report.version)
    assert committed.uuid == txn.uuid and committed.read_version == 1
    assert type(committed.operation).__name__ == "Update"
    assert [f.id for f in committed.operation.new_fragments] != []
    assert len(read(table)) == 1000 and read(table)[0] == 3
    # The version before is intact too.
    assert read(table, version=1)[0] == 0


def test_append_from_write_fragments(table):
    frags = write_fragments(rows(range(1000, 1100), 9), table)
    txn = lance.Transaction(read_version=1, operation=LanceOperation.Append(frags))
    assert la.commit(table, txn).version == 2
    data = read(table)
    assert len(data) == 1100 and data[1050] == 9


def test_overwrite(table):
    frags = write_fragments(rows(range(5), 4), table)
    txn = lance.Transaction(read_version=1, operation=LanceOperation.Overwrite(rows([]).schema, frags))
    assert la.commit(table, txn).version == 2
    assert read(table) == {i: 4 for i in range(5)}


def test_append_after_overwrite_is_fail(table):
    frags = write_fragments(rows(range(1000, 1010)), table)
    append = lance.Transaction(read_version=1, operation=LanceOperation.Append(frags))
    lance.write_dataset(rows(range(3)), table, mode="overwrite")
    with pytest.raises(la.Fail) as err:  # appending to a table that was replaced: incompatible
        la.commit(table, append)
    assert err.value.peer_version == 2 and err.value.rule
    assert sorted(read(table)) == [0, 1, 2]


def test_restore_and_update_config(table):
    lance.write_dataset(rows(range(1000, 1010)), table, mode="append")
    restore = lance.Transaction(read_version=2, operation=LanceOperation.Restore(1))
    assert la.commit(table, restore).version == 3
    assert len(read(table)) == 1000
    cfg = LanceOperation.UpdateConfig(config_updates=LanceOperation.UpdateMap({"owner": "tests"}))
    assert la.commit(table, lance.Transaction(read_version=3, operation=cfg)).version == 4
    assert lance.dataset(table).config()["owner"] == "tests"


def test_create_index_staged_by_pylance_on_a_twin_table(table, tmp_path):
    """pylance builds a BTree index on one table; its CreateIndex transaction (read back) is
    committed through la.commit on an identical twin, whose index pylance then lists and uses."""
    twin = str(tmp_path / "twin.lance")
    shutil.copytree(table, twin)
    ds = lance.dataset(table)
    ds.create_scalar_index("id", "BTREE")
    txn = lance.dataset(table).read_transaction(2)
    assert type(txn.operation).__name__ == "CreateIndex"
    index = txn.operation.new_indices[0]
    shutil.copytree(os.path.join(table, "_indices", index.uuid), os.path.join(twin, "_indices", index.uuid))
    assert la.commit(twin, txn).version == 2
    built = lance.dataset(twin)
    assert [(i.name, i.num_rows_indexed) for i in built.describe_indices()] == [(index.name, 1000)]
    assert built.to_table(filter="id = 5").column("v").to_pylist() == [0]
    assert "ScalarIndexQuery" in built.scanner(filter="id = 5").explain_plan()


def test_judge_gives_both_verdicts_and_writes_nothing(table):
    ds = lance.dataset(table)
    a, b = merge_insert(ds, range(0, 100), 1), merge_insert(ds, range(50, 150), 2)
    ok = la.judge(table, a)
    assert (ok.verdict, ok.reason, ok.lance_verdict) == ("ok", None, "ok")
    la.commit(table, a)
    j = la.judge(table, b)
    assert j.verdict == "retry" and j.peer_version == 2 and j.reason
    assert j.lance_verdict in {"retry", "fail"}
    assert [p["version"] for p in j.peers] == [2]
    assert lance.dataset(table).version == 2


def test_explain_log_matrix(table):
    ds = lance.dataset(table)
    la.commit(table, merge_insert(ds, [1], 1))
    versions = la.explain(table)
    assert [v["version"] for v in versions] == [1, 2]
    v2 = la.explain(table, version=2)[0]
    assert v2["source"] == "encoded" and v2["actions"]
    assert all(isinstance(a["reads"], list) and isinstance(a["writes"], list) for a in v2["actions"])
    entries = la.log(table)
    assert [e["version"] for e in entries] == [2, 1]
    assert entries[0]["writer"] == "lance-actions" and entries[1]["writer"] == "lance"
    assert entries[0]["attempts"], "our commit records its verdict history"
    m = la.matrix()
    assert len(m["operations"]) == 17 and m["operations"]["Overwrite"]["Append"] == "O"
    assert m["operations"]["Append"]["Overwrite"] == "F"
    assert m["actions"]


def test_bad_input_is_a_typed_error_and_writes_nothing(table, tmp_path):
    ds = lance.dataset(table)
    txn = merge_insert(ds, [1], 1)
    with pytest.raises(FileNotFoundError, match="no such dataset"):
        la.commit(str(tmp_path / "missing.lance"), txn)
    with pytest.raises(ValueError, match="pylance Transaction"):
        la.commit(table, {"read_version": 1})
    with pytest.raises(ValueError, match="version 9 does not exist"):
        la.explain(table, version=9)
    with pytest.raises(ValueError, match="read_version must be a version number"):
        la.commit(table, lance.Transaction(read_version="1", operation=txn.operation))
    ahead = lance.Transaction(read_version=7, operation=txn.operation)
    with pytest.raises(ValueError, match="staged on version 7"):
        la.commit(table, ahead)
    clone = LanceOperation.Clone(True, None, 1, table, None)
    with pytest.raises(ValueError, match="Clone transaction cannot be committed") as unsupported:
        la.commit(table, lance.Transaction(read_version=1, operation=clone))
    with pytest.raises(FileNotFoundError) as gone:
        la.log(str(tmp_path / "missing.lance"))
    for err in (unsupported, gone):
        message = str(err.value)
        assert "\n" not in message and ".rs:" not in message, message
    assert lance.dataset(table).version == 1 and read(table)[1] == 0
    assert not os.path.exists(str(tmp_path / "missing.lance"))


def test_delete_of_disjoint_rows_by_concurrent_writers_all_land_and_pylance_reads_the_rest(table):
    """la.delete: staged by Lance's DeleteBuilder, committed with the rows it reported. Four
    threads (the native call releases the GIL) each delete five rows of the one fragment, all at
    once: no Retry, every delete lands, and pylance reads exactly the other rows."""
    import threading

    outcomes, failures = [], []

    def writer(w):
        for k in range(5):
            row = 100 * w + k
            try:
                outcomes.append((row, la.delete(table, f"id = {row}")))
            except Exception as e:  # noqa: BLE001 - any failure fails the test below
                failures.append((row, repr(e)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(outcomes) == 20 and all(d.rows == 1 and d.report is not None for _, d in outcomes)
    versions = sorted(d.report.version for _, d in outcomes)
    assert versions == list(range(2, 22)), versions
    deleted = {row for row, _ in outcomes}
    assert sorted(read(table)) == [i for i in range(1000) if i not in deleted]


def test_delete_matching_nothing_commits_nothing_and_a_bad_predicate_writes_nothing(table):
    d = la.delete(table, "id > 5000")
    assert (d.rows, d.report) == (0, None)
    with pytest.raises(Exception) as err:
        la.delete(table, "no_such_column = 1")
    assert "no_such_column" in str(err.value), err.value
    assert lance.dataset(table).version == 1 and len(read(table)) == 1000
