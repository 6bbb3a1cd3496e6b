"""Every converted operation kind, end to end: pylance performs an operation on a table, its
committed transaction is read back (a pylance ``Transaction``), and la.commit lands it on an
identical twin made just before. pylance must then read the twin exactly as the original."""

import os
import shutil

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation

import lance_actions as la
from conftest import rows


def appended(uri):
    lance.write_dataset(rows(range(1000, 1100), 3), uri, mode="append")


def three_small_fragments(uri):
    for start in (1000, 1010, 1020):
        lance.write_dataset(rows(range(start, start + 10), 1), uri, mode="append")


OPERATIONS = {
    # name: (prepare the table, the pylance operation, the kind its transaction has)
    "append": (None, appended, "Append"),
    "delete": (None, lambda uri: lance.dataset(uri).delete("id < 100"), "Delete"),
    "update": (None, lambda uri: lance.dataset(uri).update({"v": "5"}, where="id < 50"), "Update"),
    "merge_insert": (
        None,
        lambda uri: lance.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows(range(990, 1010), 8)),
        "Update",
    ),
    "overwrite": (None, lambda uri: lance.write_dataset(rows(range(7), 7), uri, mode="overwrite"), "Overwrite"),
    "add_columns": (None, lambda uri: lance.dataset(uri).add_columns({"w": "id * 2"}), "Merge"),
    "drop_columns": (None, lambda uri: lance.dataset(uri).drop_columns(["v"]), "Project"),
    "compact": (three_small_fragments, lambda uri: lance.dataset(uri).optimize.compact_files(), "Rewrite"),
    "create_index": (None, lambda uri: lance.dataset(uri).create_scalar_index("id", "BTREE"), "CreateIndex"),
    "update_config": (None, lambda uri: lance.dataset(uri).update_config({"team": "py"}), "UpdateConfig"),
    "restore": (appended, lambda uri: lance.dataset(uri, version=1).restore(), "Restore"),
}


def copy_files(src, dst):
    """The files an operation wrote (data, deletions, indices) into the twin; manifests stay."""
    for sub in ("data", "_deletions", "_indices"):
        if os.path.isdir(os.path.join(src, sub)):
            shutil.copytree(os.path.join(src, sub), os.path.join(dst, sub), dirs_exist_ok=True)


def sorted_table(ds):
    t = ds.to_table()
    return t.sort_by("id") if "id" in t.column_names else t


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_pylance_transaction_committed_on_a_twin_reads_the_same(name, table, tmp_path):
    prepare, operate, kind = OPERATIONS[name]
    if prepare:
        prepare(table)
    twin = str(tmp_path / "twin.lance")
    shutil.copytree(table, twin)
    operate(table)
    original = lance.dataset(table)
    txn = original.read_transaction(original.version)
    assert type(txn.operation).__name__ == kind
    copy_files(table, twin)
    report = la.commit(twin, txn)
    landed = lance.dataset(twin)
    # (compaction first reserves fragment ids in a version of its own, not replayed here)
    assert report.read_version == txn.read_version and report.version == landed.version
    assert landed.schema == original.schema
    assert sorted_table(landed).equals(sorted_table(original))
    assert landed.config().get("team") == original.config().get("team")
    assert type(landed.read_transaction(report.version).operation).__name__ == kind


def test_data_replacement_of_a_column_written_with_pylance(table):
    from lance.file import LanceFileWriter
    from lance.fragment import DataFile

    with LanceFileWriter(os.path.join(table, "data", "replacement-v.lance")) as writer:
        writer.write_batch(pa.table({"v": pa.array([9] * 1000, pa.int64())}))
    ds = lance.dataset(table)
    new_file = DataFile.create(ds, "replacement-v.lance")
    op = LanceOperation.DataReplacement([LanceOperation.DataReplacementGroup(0, new_file)])
    assert la.judge(table, lance.Transaction(read_version=1, operation=op)).verdict == "ok"
    assert la.commit(table, lance.Transaction(read_version=1, operation=op)).version == 2
    t = lance.dataset(table).to_table()
    assert t.num_rows == 1000 and set(t.column("v").to_pylist()) == {9}
    assert t.column("id").to_pylist() == list(range(1000))


def test_kinds_not_converted_are_refused_by_name(table):
    assert set(la.SUPPORTED_KINDS) >= {"Append", "Delete", "Update", "Overwrite", "CreateIndex"}
    overlay = LanceOperation.DataOverlay([])
    with pytest.raises(ValueError, match="DataOverlay transaction cannot be committed"):
        la.judge(table, lance.Transaction(read_version=1, operation=overlay))
    three_small_fragments(table)
    lance.dataset(table).optimize.compact_files()  # reserves fragment ids at v5, rewrites at v6
    reserve = lance.dataset(table).read_transaction(5)
    with pytest.raises(ValueError, match="no Python form in pylance"):
        la.commit(table, reserve)
    assert lance.dataset(table).version == 6
