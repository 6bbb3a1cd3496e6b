"""A commit whose process dies part way, re-run with the same staged transaction; and commits from
several Python threads at once (the GIL is released while a commit waits)."""

import multiprocessing
import os
import threading

import lance
import pytest
from lance import LanceOperation
from lance.fragment import write_fragments

import lance_actions as la
from conftest import read, rows


def commit_and_crash(uri, txn, point):
    """Child process: commit with a crash point armed (the process aborts there, as kill -9)."""
    os.environ["LANCE_ACTIONS_CRASH_AT"] = point
    import lance_actions as la_child

    la_child.commit(uri, txn)


@pytest.mark.parametrize("point, landed", [("before-lance-commit", False), ("after-manifest", True)])
def test_rerunning_the_staged_transaction_after_a_crash_lands_it_exactly_once(table, point, landed):
    txn = lance.Transaction(read_version=1, operation=LanceOperation.Append(write_fragments(rows(range(1000, 1010), 4), table)))
    child = multiprocessing.get_context("spawn").Process(target=commit_and_crash, args=(table, txn, point))
    child.start()
    child.join(timeout=300)
    assert child.exitcode not in (0, None), "the crash point was not reached"
    assert lance.dataset(table).version == (2 if landed else 1)
    report = la.commit(table, txn)  # the same staged transaction (same uuid) again
    assert report.version == 2 and lance.dataset(table).version == 2
    data = read(table)  # read() fails on a duplicated id: the rows landed once
    assert len(data) == 1010 and data[1005] == 4


def test_commits_from_several_threads_all_land(table):
    ds = lance.dataset(table)
    staged = [
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute_uncommitted(
            rows(range(w * 100, w * 100 + 100), w + 1)
        )[0]
        for w in range(4)
    ]
    reports, errors = [], []

    def run(txn):
        try:
            reports.append(la.commit(table, txn))
        except Exception as e:  # collected: the assertion below shows it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in staged]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert sorted(r.version for r in reports) == [2, 3, 4, 5]
    data = read(table)
    assert len(data) == 1000 and all(data[w * 100 + 7] == w + 1 for w in range(4)) and data[450] == 0
