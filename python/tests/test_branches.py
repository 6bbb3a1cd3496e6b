"""la.Branches on branches pylance creates and writes, results read back by pylance."""

import lance
import pytest

import lance_actions as la
from conftest import read, rows


def branch_of(uri, name):
    return lance.dataset(uri).checkout_version((name, None))


@pytest.fixture
def pylance_branch(table):
    """main at v1; a branch 'feature' created and appended to by pylance (ids 1000..1009)."""
    lance.dataset(table).create_branch("feature", 1)
    lance.write_dataset(rows(range(1000, 1010), 5), branch_of(table, "feature"), mode="append")
    return table


def test_merge_of_a_branch_pylance_created_lands_on_main(pylance_branch):
    uri = pylance_branch
    b = la.Branches(uri)
    assert "feature" in b.list()
    dry = b.merge("feature", into="main", dry_run=True)
    assert dry.outcome == "fast-forward" and dry.conflicts == [] and len(dry.landed) == 1
    assert lance.dataset(uri).version == 1  # a dry run writes nothing
    r = b.merge("feature", into="main")
    # (main may first record the adopted branch name in its catalog: a version of its own)
    assert r.outcome == "fast-forward" and r.landed[0]["target_version"] == lance.dataset(uri).version
    data = read(uri)
    assert len(data) == 1010 and data[1005] == 5


def test_merge_after_main_moved_is_merged(pylance_branch):
    uri = pylance_branch
    lance.write_dataset(rows(range(2000, 2003), 1), uri, mode="append")
    r = la.Branches(uri).merge("feature", into="main")
    assert r.outcome == "merged"
    data = read(uri)
    assert len(data) == 1013 and data[2001] == 1 and data[1009] == 5


def test_conflicting_merge_dry_run_lists_conflicts_and_real_run_raises(table):
    uri = table
    b = la.Branches(uri)
    b.create("feature", from_="main")
    # Both sides rewrite the same rows after the fork (to different values): a conflict.
    lance.dataset(uri).update({"v": "1"}, where="id < 10")
    branch_of(uri, b.list()["feature"]).update({"v": "2"}, where="id < 20")
    dry = b.merge("feature", into="main", dry_run=True)
    assert dry.outcome == "conflicted" and dry.conflicts
    c = dry.conflicts[0]
    assert c["source_branch"] and c["rule"] and c["text"]
    with pytest.raises(la.MergeConflict) as err:
        b.merge("feature", into="main")
    assert err.value.conflicts and err.value.conflicts[0]["rule"] == c["rule"]
    data = read(uri)  # main as it was
    assert len(data) == 1000 and all(data[i] == 1 for i in range(10)) and data[15] == 0


def test_create_list_delete_and_errors(table):
    b = la.Branches(table)
    physical = b.create("exp", from_="main")
    assert b.list()["exp"] == physical
    with pytest.raises(ValueError, match="already exists"):
        b.create("exp")
    with pytest.raises(ValueError, match="no branch named 'nope'"):
        b.merge("nope", into="main")
    b.delete("exp")
    assert "exp" not in b.list()
    with pytest.raises(FileNotFoundError):
        la.Branches(table + ".missing")
    assert lance.dataset(table).version == 1 and len(read(table)) == 1000


def test_cherry_pick_fast_forward_rebase_squash(table):
    uri = table
    b = la.Branches(uri)
    b.create("f", from_="main")
    f = lambda: branch_of(uri, b.list()["f"])  # noqa: E731
    lance.write_dataset(rows([1001], 1), f(), mode="append")
    v_first = f().version
    lance.write_dataset(rows([1002], 2), f(), mode="append")
    lance.write_dataset(rows([1003], 3), f(), mode="append")
    r = b.cherry_pick("f", versions=[v_first], onto="main")
    assert r.outcome == "cherry-picked" and 1001 in read(uri) and 1002 not in read(uri)
    lance.write_dataset(rows([3000], 9), uri, mode="append")  # main's own commit since the fork
    with pytest.raises(ValueError, match="fast-forward"):
        b.fast_forward("f", into="main")
    r = b.rebase("f", onto="main")
    assert r.outcome == "rebased" and r.new_physical and r.new_physical != r.old_physical
    on_f = branch_of(uri, b.list()["f"]).to_table().column("id").to_pylist()
    assert {1001, 1002, 1003, 3000} <= set(on_f) and len(on_f) == len(set(on_f))
    head = branch_of(uri, b.list()["f"]).version
    r = b.squash("f", head - 1, head)
    assert r.outcome == "squashed"
    squashed = branch_of(uri, b.list()["f"])
    assert {1002, 1003} <= set(squashed.to_table().column("id").to_pylist())
