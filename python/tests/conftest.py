"""Shared fixtures: real Lance datasets written by pylance 14.0.2 in pytest's tmp dirs."""

import lance
import pyarrow as pa
import pytest


def rows(ids, value=0):
    """A table of ``id`` (int64) and ``v`` (int64, ``value`` on every row)."""
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([value] * len(ids), pa.int64())})


def read(uri, **kw):
    """``{id: v}`` as pylance reads it (latest version of main unless ``version`` is given)."""
    t = lance.dataset(str(uri), **kw).to_table()
    ids, vs = t.column("id").to_pylist(), t.column("v").to_pylist()
    assert len(ids) == len(set(ids)), f"duplicate ids: {len(ids)} rows, {len(set(ids))} distinct"
    return dict(zip(ids, vs))


@pytest.fixture
def table(tmp_path):
    """A 1,000-row, one-fragment dataset at version 1 (ids 0..999, v = 0); its uri."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(range(1000)), uri)
    return uri
