"""Distributed writes with Ray Data, committed through the action driver.

`lance-ray <https://pypi.org/project/lance-ray/>`_ has Ray workers write Lance fragments and the
driver commit them with ``lance.LanceDataset.commit``. Here the workers are lance-ray's own (its
``LanceDatasink`` writes the fragments); only the commit changes: it goes through
:func:`lance_actions.commit`, so several Ray jobs appending to one table at once are judged
against each other and rebased (an append never re-executes because another landed), and a table
declared keyed refuses an append that does not declare its keys instead of taking duplicates.

On a keyed table (``lance_actions.KeyedTable``) a plain append is refused; :func:`insert` is the
fenced way in: the workers write fragments as above, and the driver commits them all as one strict
insert whose keys are read back from the written files (a key that exists, or that a concurrent
job inserted, raises ``KeyConflict`` and the job commits nothing). :func:`upsert` upserts each
block from its worker through the keyed table's own upsert (one fenced commit per block).

Needs ``ray[data]`` and ``lance-ray`` (``pip install "ray[data]" lance-ray``)::

    import ray, lance_actions.ray as lar
    lar.write_lance(ray.data.range(1000), "s3://bucket/t", mode="append", storage_options={...})
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional

import lance
from lance import LanceOperation

from . import CommitReport, KeyedTable, WriteOutcome, commit

try:  # lance-ray is optional: only this module needs it.
    from lance_ray.datasink import LanceDatasink as _LanceDatasink
    from ray.data import Datasink as _Datasink
except ImportError as e:  # pragma: no cover - exercised only without lance-ray
    raise ImportError('lance_actions.ray needs lance-ray and ray[data]: pip install "ray[data]" lance-ray') from e


class ActionsDatasink(_LanceDatasink):
    """lance-ray's datasink with its commit replaced by ``lance_actions.commit``.

    Creating a table (``mode="create"``, or ``"overwrite"`` of a table that does not exist yet)
    has no committed peer to judge: it stays lance-ray's own commit. Every other commit is judged
    by the driver; its report is kept in ``report``.
    """

    def __init__(self, *args: Any, max_attempts: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_attempts = max_attempts
        self.report: Optional[CommitReport] = None

    def on_write_start(self, schema: Any = None) -> None:
        super().on_write_start(schema)
        if self.mode == "overwrite" and self._exists():
            self.read_version = self._open().version

    def on_write_complete(self, write_result: Any) -> None:
        fragments, schema = _fragments_of(write_result)
        if schema is None:
            return  # nothing was written: nothing to commit, as in lance-ray
        if self.mode == "create" or (self.mode == "overwrite" and self.read_version is None):
            return super().on_write_complete(write_result)
        if self.mode == "append":
            op = LanceOperation.Append(fragments)
        else:
            op = LanceOperation.Overwrite(schema, fragments)
        txn = lance.Transaction(read_version=self.read_version, operation=op)
        self.report = commit(self.uri, txn, max_attempts=self.max_attempts, storage_options=self.storage_options or None)

    def _open(self) -> Any:
        return lance.dataset(self.uri, storage_options=self.storage_options or None)

    def _exists(self) -> bool:
        try:
            self._open()
            return True
        except (FileNotFoundError, ValueError, OSError):
            return False


def _fragments_of(write_result: Any) -> tuple[List[Any], Any]:
    """The fragments and schema lance-ray's workers returned (pickled pairs per block)."""
    results = getattr(write_result, "write_returns", write_result) or []
    fragments, schema = [], None
    for block in results:
        for fragment, block_schema in block:
            fragments.append(pickle.loads(fragment))
            schema = pickle.loads(block_schema)
    return fragments, schema


def write_lance(
    ds: Any,
    uri: str,
    *,
    mode: str = "append",
    storage_options: Optional[Dict[str, str]] = None,
    max_attempts: Optional[int] = None,
    concurrency: Optional[int] = None,
    ray_remote_args: Optional[Dict[str, Any]] = None,
    **writer_options: Any,
) -> Optional[CommitReport]:
    """Write Ray dataset ``ds`` to the Lance table at ``uri`` with lance-ray's fragment writers
    and commit through the action driver. ``mode`` is ``"create"``, ``"append"`` or
    ``"overwrite"``; ``writer_options`` go to lance-ray's ``LanceDatasink`` (``max_rows_per_file``,
    ``schema``, ...). Returns the commit's report (``None`` for a create, which lance-ray commits).
    Raises ``lance_actions.Retry`` / ``Fail`` as :func:`lance_actions.commit` does: nothing is
    committed then (the written fragments are left for Lance's cleanup)."""
    sink = ActionsDatasink(uri, mode=mode, storage_options=storage_options, max_attempts=max_attempts, **writer_options)
    ds.write_datasink(sink, ray_remote_args=ray_remote_args or {}, concurrency=concurrency)
    return sink.report


class KeyedInsertDatasink(ActionsDatasink):
    """lance-ray's fragment writers, then one strict keyed insert of every fragment they wrote."""

    def __init__(self, uri: str, **kwargs: Any) -> None:
        super().__init__(uri, mode="append", **kwargs)
        self.outcome: Optional[WriteOutcome] = None

    def on_write_complete(self, write_result: Any) -> None:
        fragments, schema = _fragments_of(write_result)
        if schema is None:
            return  # no rows: nothing to insert
        table = KeyedTable.open(self.uri, storage_options=self.storage_options or None)
        self.outcome = table.insert_fragments(fragments)


def insert(
    ds: Any,
    uri: str,
    *,
    storage_options: Optional[Dict[str, str]] = None,
    concurrency: Optional[int] = None,
    ray_remote_args: Optional[Dict[str, Any]] = None,
    **writer_options: Any,
) -> Optional[WriteOutcome]:
    """Strict insert of Ray dataset ``ds`` into the keyed table at ``uri``: lance-ray's workers
    write the fragments, the driver commits them in one commit fenced by key
    (:meth:`lance_actions.KeyedTable.insert_fragments`). Raises ``KeyConflict`` naming the keys
    if any exists or was inserted concurrently; nothing is committed then. Returns the outcome
    (``None`` when ``ds`` has no rows)."""
    sink = KeyedInsertDatasink(uri, storage_options=storage_options, **writer_options)
    ds.write_datasink(sink, ray_remote_args=ray_remote_args or {}, concurrency=concurrency)
    return sink.outcome


class KeyedUpsertDatasink(_Datasink):
    """Each worker upserts its blocks through the keyed table's upsert: fenced by key, re-run
    from the new base on a conflict, one commit per block."""

    def __init__(self, uri: str, storage_options: Optional[Dict[str, str]] = None) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.outcomes: List[WriteOutcome] = []

    def write(self, blocks: Any, ctx: Any) -> List[WriteOutcome]:
        import pyarrow as pa

        tables = [pa.Table.from_pandas(b) if not isinstance(b, pa.Table) else b for b in blocks]
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return []
        table = KeyedTable.open(self.uri, storage_options=self.storage_options)
        return [table.upsert(pa.concat_tables(tables))]

    def on_write_complete(self, write_result: Any) -> None:
        results = getattr(write_result, "write_returns", write_result) or []
        self.outcomes = [outcome for block in results for outcome in block]


def upsert(
    ds: Any,
    uri: str,
    *,
    storage_options: Optional[Dict[str, str]] = None,
    concurrency: Optional[int] = None,
    ray_remote_args: Optional[Dict[str, Any]] = None,
) -> List[WriteOutcome]:
    """Upsert Ray dataset ``ds`` into the keyed table at ``uri``, each Ray write task upserting
    its blocks through :meth:`lance_actions.KeyedTable.upsert`. Not atomic across blocks (as a
    chunked upsert is not): a failing task leaves the blocks that committed before it. Returns
    one outcome per committed block."""
    sink = KeyedUpsertDatasink(uri, storage_options)
    ds.write_datasink(sink, ray_remote_args=ray_remote_args or {}, concurrency=concurrency)
    return sink.outcomes
