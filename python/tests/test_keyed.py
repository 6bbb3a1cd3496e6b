"""la.KeyedTable and la.migrate on real tables, audited by pylance scans."""

import multiprocessing
import random

import lance
import pyarrow as pa
import pytest

import lance_actions as la
from conftest import read, rows


@pytest.fixture
def keyed(tmp_path):
    uri = str(tmp_path / "k.lance")
    return la.KeyedTable.create(uri, rows(range(10)), key="id")


def test_create_open_and_pylance_reads_it(keyed):
    assert keyed.key == ["id"] and keyed.version == 1
    again = la.KeyedTable.open(keyed.uri)
    assert again.version == 1
    assert read(keyed.uri) == {i: 0 for i in range(10)}


def test_strict_insert_lands_new_keys(keyed):
    out = keyed.insert(rows(range(10, 15), 5))
    assert (out.inserted, out.updated) == (5, 0) and out.version == 2
    assert len(read(keyed.uri)) == 15 and read(keyed.uri)[12] == 5


def test_strict_insert_of_a_present_key_is_key_conflict_and_writes_nothing(keyed):
    with pytest.raises(la.KeyConflict) as err:
        keyed.insert(rows([3, 20], 9))
    assert err.value.keys == ["3"] and err.value.count == 1 and err.value.cause == "already_present"
    assert isinstance(err.value, la.ConflictError)
    assert lance.dataset(keyed.uri).version == 1 and 20 not in read(keyed.uri)


def test_insert_conflict_with_a_concurrent_insert_is_inserted_concurrently(keyed):
    other = la.KeyedTable.open(keyed.uri)  # both handles read version 1
    other.insert(rows([42], 1))
    with pytest.raises(la.KeyConflict) as err:
        keyed.insert(rows([42], 2))
    assert err.value.cause in {"inserted_concurrently", "already_present"}
    assert read(keyed.uri)[42] == 1


def staged(uri, data):
    """Fragments written by pylance's own writer and not committed (what a distributed worker hands over)."""
    return lance.fragment.write_fragments(data, uri, schema=lance.dataset(uri).schema)


def test_insert_fragments_reads_the_keys_from_the_staged_files(keyed):
    fragments = staged(keyed.uri, rows(range(10, 14), 4))
    out = keyed.insert_fragments(fragments)
    assert (out.inserted, out.version) == (4, 2)
    assert read(keyed.uri) == {i: 0 for i in range(10)} | {i: 4 for i in range(10, 14)}
    # The same fragments again would duplicate every row: refused, nothing written.
    with pytest.raises(ValueError, match="already in the table"):
        keyed.insert_fragments(fragments)
    # Fragments holding a present key are a key conflict, as a strict insert of the rows is.
    with pytest.raises(la.KeyConflict) as err:
        keyed.insert_fragments(staged(keyed.uri, rows([12, 50], 5)))
    assert err.value.keys == ["12"] and err.value.cause == "already_present"
    with pytest.raises(ValueError, match="not a Lance fragment"):
        keyed.insert_fragments(["{}"])
    assert lance.dataset(keyed.uri).version == 2 and 50 not in read(keyed.uri)


def test_upsert_update_delete(keyed):
    out = keyed.upsert(rows([1, 100], 7))
    assert (out.inserted, out.updated) == (1, 1)
    keyed.update(rows([2], 8))
    with pytest.raises(la.KeysNotFound) as missing:
        keyed.update(rows([555], 1))
    assert missing.value.keys == ["555"]
    out = keyed.delete([1, 2, 3])
    assert out.deleted == 3
    data = read(keyed.uri)
    assert sorted(data) == [0, 4, 5, 6, 7, 8, 9, 100] and data[100] == 7


def test_keyed_errors_are_typed(keyed, tmp_path):
    with pytest.raises(FileExistsError):
        la.KeyedTable.create(keyed.uri, rows([1]), key="id")
    with pytest.raises(ValueError, match="nope"):
        la.KeyedTable.create(str(tmp_path / "x.lance"), rows([1]), key="nope")
    assert not (tmp_path / "x.lance").exists()
    with pytest.raises(FileNotFoundError):
        la.KeyedTable.open(str(tmp_path / "missing.lance"))
    with pytest.raises(ValueError):
        keyed.insert(pa.table({"other": [1]}))
    with pytest.raises(la.KeyConflict) as dup:
        keyed.insert(rows([50, 50]))
    assert dup.value.cause == "duplicate_in_batch"
    with pytest.raises(ValueError, match="branch"):
        la.KeyedTable.open(keyed.uri, branch="no-such-branch")
    assert lance.dataset(keyed.uri).version == 1


def test_migrate_a_pylance_table_then_fence_it(tmp_path):
    uri = str(tmp_path / "m.lance")
    lance.write_dataset(rows(range(5)), uri)
    with pytest.raises(ValueError):
        la.KeyedTable.open(uri)  # not keyed yet
    report = la.migrate(uri, key="id")
    assert report["key"] == ["id"] and report["stamped"] is True
    assert [b["branch"] for b in report["branches"]] == ["main"]
    t = la.KeyedTable.open(uri)
    with pytest.raises(la.KeyConflict):
        t.insert(rows([4]))
    assert sorted(read(uri)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="missing"):
        la.migrate(uri, key="missing")


def test_migrate_refuses_duplicate_keys_and_writes_nothing(tmp_path):
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(rows([1, 1, 2]), uri)
    with pytest.raises(ValueError, match="duplicated"):
        la.migrate(uri, key="id")
    assert lance.dataset(uri).version == 1


def test_any_arrow_stream_is_accepted(keyed):
    reader = pa.RecordBatchReader.from_batches(rows([]).schema, rows(range(200, 203), 4).to_batches())
    assert keyed.upsert(reader).inserted == 3
    assert keyed.insert([{"id": 300, "v": 6}]).inserted == 1  # a list of row dicts, through pyarrow
    data = read(keyed.uri)
    assert data[201] == 4 and data[300] == 6


def race_inserts(uri, writer, pool, seed, start, results):
    """One racing process: strict single-key inserts over the shared pool, in its own order.
    Reports ``(writer, keys won, keys lost, error or None)``; never dies silently."""
    try:
        import lance_actions as la_child
        from conftest import rows as child_rows

        order = list(pool)
        random.Random(seed).shuffle(order)
        table = la_child.KeyedTable.open(uri)
        start.wait(timeout=120)  # every writer is up before any inserts: a real race
        won, lost = [], 0
        for key in order:
            for _ in range(20):  # contention (every attempt lost to other writers) is retried
                try:
                    table.insert(child_rows([key], writer))
                    won.append(key)
                    break
                except la_child.KeyConflict:
                    lost += 1
                    break
                except la_child.Retry:
                    continue
        results.put((writer, won, lost, None))
    except BaseException as e:  # reported to the parent, which fails the test with it
        results.put((writer, [], 0, repr(e)))


def test_racing_processes_strict_inserts_one_winner_per_key(tmp_path):
    uri = str(tmp_path / "race.lance")
    la.KeyedTable.create(uri, rows([-1]), key="id")
    pool, writers = list(range(24)), 4
    ctx = multiprocessing.get_context("spawn")  # the parent holds a tokio runtime: never fork it
    results, start = ctx.Queue(), ctx.Barrier(writers)
    procs = [ctx.Process(target=race_inserts, args=(uri, w, pool, 1000 + w, start, results)) for w in range(writers)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners = {}
    for writer, won, lost, error in outcomes:
        assert error is None, f"writer {writer}: {error}"
        assert len(won) + lost == len(pool)
        for key in won:
            assert key not in winners, f"key {key} won twice"
            winners[key] = writer
    assert sorted(winners) == pool
    assert sum(lost for _, _, lost, _ in outcomes) == (writers - 1) * len(pool)
    data = read(uri)  # the audit: one row per key, written by its winner
    assert sorted(data) == [-1] + pool
    assert all(data[k] == w for k, w in winners.items())


def test_keyed_write_on_a_branch_then_merge_into_main(keyed):
    branches = la.Branches(keyed.uri)
    branches.create("dev", from_="main")
    dev = la.KeyedTable.open(keyed.uri, branch="dev")
    dev.insert(rows([77], 7))
    assert 77 not in read(keyed.uri)  # main untouched
    main = la.KeyedTable.open(keyed.uri)
    main.insert(rows([88], 8))
    r = branches.merge("dev", into="main")
    assert r.outcome == "merged"
    data = read(keyed.uri)
    assert data[77] == 7 and data[88] == 8 and len(data) == 12
    # The key stays fenced after the merge: 77 is present on main now.
    with pytest.raises(la.KeyConflict) as err:
        la.KeyedTable.open(keyed.uri).insert(rows([77]))
    assert err.value.cause == "already_present"


def test_a_branch_inserting_a_key_main_also_inserted_does_not_merge(keyed):
    branches = la.Branches(keyed.uri)
    branches.create("dev", from_="main")
    la.KeyedTable.open(keyed.uri, branch="dev").insert(rows([55], 1))
    la.KeyedTable.open(keyed.uri).insert(rows([55], 2))
    with pytest.raises(la.MergeConflict) as err:
        branches.merge("dev", into="main")
    assert any("55" in c["keys"] for c in err.value.conflicts), err.value.conflicts
    assert {c["rule"] for c in err.value.conflicts} <= {"KeysIntersect", "KeysPresent"}
    assert read(keyed.uri)[55] == 2
