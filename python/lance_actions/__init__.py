"""lance_actions: commit pylance-staged work through an action-based driver, fence keys, replay
branches.

Stage a write with pylance 14.0.2 (``execute_uncommitted``, ``LanceOperation.*``), then::

    import lance, lance_actions as la
    ds = lance.dataset(uri)
    txn, _ = ds.merge_insert("id").when_matched_update_all() \\
        .when_not_matched_insert_all().execute_uncommitted(table)
    report = la.commit(uri, txn)          # raises la.Retry / la.Fail on a conflict

Everything lance_actions writes is a plain Lance version: pylance reads it as usual.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from . import _native
from ._convert import SUPPORTED_KINDS, transaction_json
from .errors import (
    CommitStatusUnknown,
    ConflictError,
    Fail,
    KeyConflict,
    KeysNotFound,
    LanceActionsError,
    MergeConflict,
    Retry,
)

__all__ = [
    "configure_storage",
    "commit",
    "delete",
    "judge",
    "explain",
    "log",
    "matrix",
    "migrate",
    "KeyedTable",
    "Branches",
    "Graph",
    "GraphMergeResult",
    "CommitReport",
    "Deleted",
    "Judgement",
    "WriteOutcome",
    "ReplayResult",
    "SUPPORTED_KINDS",
    "LanceActionsError",
    "ConflictError",
    "Retry",
    "Fail",
    "KeyConflict",
    "KeysNotFound",
    "MergeConflict",
    "CommitStatusUnknown",
]

Uri = Union[str, "os.PathLike[str]", Any]


def _uri(target: Uri) -> str:
    """The dataset location of a uri, a path or a ``lance.LanceDataset``; a local path that does
    not exist raises ``FileNotFoundError`` before anything is opened."""
    uri = getattr(target, "uri", target)
    uri = os.fspath(uri) if isinstance(uri, (str, os.PathLike)) else uri
    if not isinstance(uri, str):
        raise ValueError(f"expected a dataset uri, path or lance.LanceDataset, got {type(target).__name__}")
    if "://" not in uri and not os.path.exists(uri):
        raise FileNotFoundError(f"{uri}: no such dataset")
    return uri


def configure_storage(prefix: str, storage_options: Dict[str, str]) -> None:
    """Use ``storage_options`` (the keys pylance's ``storage_options`` takes, e.g.
    ``aws_endpoint``, ``aws_access_key_id``, ``allow_http``) for every table whose uri starts with
    ``prefix`` (a bucket ``"s3://b/"``, a table root, or ``""`` for all). Every open and create of
    this package (tables, branches, graph tables) applies the longest matching prefix; options not
    given come from the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), as in pylance."""
    _native.configure_storage(prefix, {str(k): str(v) for k, v in storage_options.items()})


def _located(target: Uri, storage_options: Optional[Dict[str, str]] = None, *, must_exist: bool = True) -> str:
    """The uri of ``target`` with its storage options registered: those given, else those of the
    ``lance.LanceDataset`` passed as ``target``."""
    uri = _uri(target) if must_exist else os.fspath(getattr(target, "uri", target))
    options = storage_options if storage_options is not None else getattr(target, "_storage_options", None)
    if options:
        configure_storage(uri, options)
    return uri


def _arrow(data: Any) -> Any:
    """Anything with the Arrow PyCapsule stream interface as is; a pandas frame or a list of row
    dicts through pyarrow."""
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, list):
        return pa.Table.from_pylist(data)
    raise ValueError(
        f"expected Arrow data (a pyarrow.Table, RecordBatchReader, or anything with __arrow_c_stream__), got {type(data).__name__}"
    )


@dataclass(frozen=True)
class CommitReport:
    """What ``commit`` did.

    Attributes
    ----------
    version : int
        The version that landed.
    read_version : int
        The version the transaction was staged on.
    attempts : list of dict
        Per attempt: ``head`` (the version checked up to), ``peers`` (each committed version
        judged, with its ``verdict``), ``verdict``, ``reason``, ``write`` (what happened at
        the manifest write) and ``in_lance_seconds`` (the time inside Lance's commit).
    elapsed_seconds, waited_seconds, in_lance_seconds, own_seconds : float
        The commit's time and its split: slept between attempts, inside Lance's commit path
        (less our judgements at the write), and our own (preparing, judging, encoding).
    """

    version: int
    read_version: int
    attempts: List[Dict[str, Any]]
    elapsed_seconds: float = 0.0
    waited_seconds: float = 0.0
    in_lance_seconds: float = 0.0
    own_seconds: float = 0.0

    @staticmethod
    def _of(report: Dict[str, Any]) -> "CommitReport":
        times = ("elapsed_seconds", "waited_seconds", "in_lance_seconds", "own_seconds")
        return CommitReport(
            report["version"], report["read_version"], report["attempts"], *(report[k] for k in times)
        )


def commit(
    target: Uri, txn: Any, *, max_attempts: Optional[int] = None, storage_options: Optional[Dict[str, str]] = None
) -> CommitReport:
    """Commit a pylance-staged ``Transaction`` through the action driver.

    Every version committed since ``txn.read_version`` is judged; compatible work is rebased
    (row-disjoint deletes of one fragment both land) and lands at the version right after the
    head checked. ``target`` is a uri, a path or the ``lance.LanceDataset`` it was staged on.

    Raises ``Retry`` (re-stage and commit again), ``Fail`` (incompatible),
    ``CommitStatusUnknown``, or ``ValueError`` for a transaction kind that cannot be converted
    (see ``SUPPORTED_KINDS``); nothing is written in those cases.
    """
    uri = _located(target, storage_options)
    doc, schema, ids = transaction_json(txn)
    report = json.loads(_native.commit(uri, doc, schema, ids, max_attempts))
    return CommitReport._of(report)


@dataclass(frozen=True)
class Deleted:
    """What ``delete`` did.

    Attributes
    ----------
    rows : int
        Rows deleted.
    report : CommitReport or None
        The commit, or ``None`` when no row matched (nothing was committed).
    """

    rows: int
    report: Optional[CommitReport]


def delete(
    target: Uri,
    predicate: str,
    *,
    max_attempts: Optional[int] = None,
    storage_options: Optional[Dict[str, str]] = None,
) -> Deleted:
    """Delete the rows matching ``predicate`` (SQL, as ``LanceDataset.delete``) through the driver.

    The delete is staged with Lance's own ``DeleteBuilder`` on the latest version and committed
    through the action driver, which takes the rows as Lance reported them: writers deleting
    disjoint rows at once, even of one fragment, all land, where pylance's ``delete`` would
    re-execute. Raises ``Retry`` (another writer deleted or changed one of these rows: run it
    again), ``Fail``, or ``CommitStatusUnknown``; a predicate Lance cannot read raises and
    nothing is written.
    """
    uri = _located(target, storage_options)
    d = json.loads(_native.delete(uri, predicate, max_attempts))
    r = d["report"]
    report = None if r is None else CommitReport._of(r)
    return Deleted(d["deleted"], report)


@dataclass(frozen=True)
class Judgement:
    """Both verdicts for a staged transaction (``judge``).

    Attributes
    ----------
    verdict : str
        Ours: ``"ok"``, ``"retry"`` or ``"fail"``.
    reason : str or None
        Why, in words (``None`` for ``"ok"``).
    rule, peer_version, path : optional
        The deciding rule, the committed version and the manifest path it concerns.
    lance_verdict : str
        What Lance 14.0.2's own resolver decides for the same transaction.
    lance_reason : str
        Lance's message.
    peers : list of dict
        Every version committed after the read version, with our verdict against it.
    read_version, latest_version : int
    """

    verdict: str
    reason: Optional[str]
    rule: Optional[str]
    peer_version: Optional[int]
    path: Optional[str]
    lance_verdict: str
    lance_reason: str
    peers: List[Dict[str, Any]]
    read_version: int
    latest_version: int


def judge(target: Uri, txn: Any, *, storage_options: Optional[Dict[str, str]] = None) -> Judgement:
    """Judge a pylance-staged ``Transaction`` against everything committed after its read
    version, with our driver and with Lance's resolver. Writes nothing."""
    uri = _located(target, storage_options)
    doc, schema, ids = transaction_json(txn)
    j = json.loads(_native.judge(uri, doc, schema, ids))
    reason = j["reason"] or {}
    return Judgement(
        verdict=j["verdict"],
        reason=reason.get("text"),
        rule=reason.get("rule"),
        peer_version=reason.get("peer_version"),
        path=reason.get("path"),
        lance_verdict=j["lance_verdict"],
        lance_reason=j["lance_reason"],
        peers=j["peers"],
        read_version=j["read_version"],
        latest_version=j["latest_version"],
    )


def explain(
    target: Uri, version: Optional[int] = None, *, storage_options: Optional[Dict[str, str]] = None
) -> List[Dict[str, Any]]:
    """Each version (or just ``version``) as its actions: a list of dicts with ``version``,
    ``operation``, ``read_version``, ``source`` (``"encoded"`` by lance_actions or ``"lifted"``
    from a plain Lance operation) and ``actions`` (``kind``, ``summary``, ``reads``,
    ``writes``: the manifest paths of its masks). A version whose transaction was cleaned up
    has an ``error`` instead."""
    return json.loads(_native.explain(_located(target, storage_options), version))


def log(target: Uri, *, storage_options: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """The history, newest first: per version ``operation``, ``read_version``, ``uuid``,
    ``writer`` (``"lance-actions"`` or ``"lance"``), ``actions`` (summaries), ``attempts``
    (the verdict history our commit recorded) and the other recorded ``properties``
    (replay provenance, key fencing)."""
    return json.loads(_native.log(_located(target, storage_options)))


def matrix() -> Dict[str, Dict[str, Dict[str, str]]]:
    """The generated conflict matrices: ``{"operations": {row: {col: cell}}, "actions": ...}``,
    each cell the letter of ``design/conflict-matrix.md`` (the row's transaction committed after
    the column's)."""
    return json.loads(_native.matrix())


@dataclass(frozen=True)
class WriteOutcome:
    """What a keyed write did: the ``version`` it landed (the version read when nothing needed
    committing), row counts, logical ``attempts`` and one commit report per landed commit."""

    version: int
    inserted: int
    updated: int
    deleted: int
    attempts: int
    commits: List[Dict[str, Any]]


def _outcome(text: str) -> WriteOutcome:
    d = json.loads(text)
    return WriteOutcome(d["version"], d["inserted"], d["updated"], d["deleted"], d["attempts"], d["commits"])


def _key_list(key: Union[str, Sequence[str]]) -> List[str]:
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"key must be a column name or a list of column names, got {key!r}")
    return keys


class KeyedTable:
    """A Lance table with a primary key whose writes are fenced by key (design/fencing.md).

    ``insert`` is strict: a key that exists, or that a concurrent writer inserted first, raises
    ``KeyConflict`` and nothing is written; it never turns into an update. ``upsert``,
    ``update`` and ``delete`` work by key. Every write is a plain Lance version (pylance reads it).
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def create(
        cls,
        uri: Union[str, "os.PathLike[str]"],
        data: Any,
        key: Union[str, Sequence[str]] = "id",
        *,
        storage_options: Optional[Dict[str, str]] = None,
    ) -> "KeyedTable":
        """Create a keyed table at ``uri`` from ``data`` (any Arrow stream) keyed on ``key``.
        Keys must be non-null and unique. Raises ``FileExistsError`` if a table is there."""
        location = _located(uri, storage_options, must_exist=False)
        return cls(_native.NativeKeyedTable.create(location, _arrow(data), _key_list(key)))

    @classmethod
    def open(
        cls, uri: Uri, branch: Optional[str] = None, *, storage_options: Optional[Dict[str, str]] = None
    ) -> "KeyedTable":
        """Open main (or ``branch``, by its logical name) of a keyed table for writes."""
        return cls(_native.NativeKeyedTable.open(_located(uri, storage_options), branch))

    @property
    def key(self) -> List[str]:
        """The key column names, in key order."""
        return self._native.key()

    @property
    def version(self) -> int:
        """The version this handle last saw (it moves with each write)."""
        return self._native.version()

    @property
    def uri(self) -> str:
        """Where the table (or its branch) lives."""
        return self._native.uri()

    def insert(self, rows: Any) -> WriteOutcome:
        """Strict insert. Raises ``KeyConflict`` (``.keys``, ``.cause``) if any key exists."""
        return _outcome(self._native.insert(_arrow(rows)))

    def insert_fragments(self, fragments: Iterable[Any]) -> WriteOutcome:
        """Strict insert, in one commit, of rows other processes already wrote as fragments
        (``lance.fragment.write_fragments``, lance-ray's workers): ``FragmentMetadata`` objects
        (or their ``to_json()`` strings). The keys are read back from the staged files, not taken
        on trust. Raises ``KeyConflict`` as :meth:`insert` does, and ``ValueError`` for fragments
        that are already in the table, given twice, carry deletions or were written for another
        schema; nothing is committed then."""
        texts = [f if isinstance(f, str) else f.to_json() for f in fragments]
        texts = [t if isinstance(t, str) else json.dumps(t) for t in texts]
        return _outcome(self._native.insert_fragments(texts))

    def upsert(self, rows: Any) -> WriteOutcome:
        """Insert new keys, replace the rows of existing ones."""
        return _outcome(self._native.upsert(_arrow(rows)))

    def update(self, rows: Any) -> WriteOutcome:
        """Replace the rows of existing keys. Raises ``KeysNotFound`` if any key is absent."""
        return _outcome(self._native.update(_arrow(rows)))

    def delete(self, ids: Any) -> WriteOutcome:
        """Delete by key: a list of key values (single-column key) or Arrow data holding the key
        columns. Absent keys are ignored."""
        if isinstance(ids, (list, tuple)):
            if len(self.key) != 1:
                raise ValueError(f"the key has columns {self.key}: pass a table with those columns")
            ids = pa.table({self.key[0]: list(ids)})
        return _outcome(self._native.delete(_arrow(ids)))

    def __repr__(self) -> str:
        return f"KeyedTable({self.uri!r}, key={self.key}, version={self.version})"


def migrate(
    uri: Uri, key: Union[str, Sequence[str]] = "id", *, storage_options: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """Install ``key`` as the primary key of an existing table on main and every branch, then
    stamp it. Refused (nothing stamped) if a branch holds duplicate or null keys. Returns
    ``{"key", "branches": [{"branch", "rows", "step", "version"}], "stamped"}``."""
    return json.loads(_native.migrate(_located(uri, storage_options), _key_list(key)))


@dataclass(frozen=True)
class ReplayResult:
    """What a branch operation did (or, with ``dry_run``, would do).

    Attributes
    ----------
    outcome : str
        ``"fast-forward"``, ``"merged"``, ``"cherry-picked"``, ``"rebased"``, ``"squashed"``,
        ``"already-up-to-date"`` or (dry runs only) ``"conflicted"``.
    landed : list of dict
        ``{"source_version", "target_version"}`` per replayed commit.
    conflicts : list of dict
        In a dry run that would conflict: one dict per conflicting commit (see ``MergeConflict``).
    skipped : list of int
        Source versions the target already had.
    old_physical, new_physical : str or None
        For rebase and squash: the physical branches before and after.
    """

    outcome: str
    landed: List[Dict[str, int]] = field(default_factory=list)
    conflicts: List[Dict[str, Any]] = field(default_factory=list)
    skipped: List[int] = field(default_factory=list)
    old_physical: Optional[str] = None
    new_physical: Optional[str] = None


def _replay(text: str) -> ReplayResult:
    d = json.loads(text)
    return ReplayResult(d["outcome"], d["landed"], d["conflicts"], d["skipped"], d["old_physical"], d["new_physical"])


class Branches:
    """The branches of a dataset by logical name, and replay between them.

    A real (not ``dry_run``) replay that conflicts raises ``MergeConflict`` having written
    nothing of the conflicting commits; unknown branch names and versions raise ``ValueError``.
    """

    def __init__(self, uri: Uri, *, storage_options: Optional[Dict[str, str]] = None) -> None:
        self.uri = _located(uri, storage_options)

    def create(self, name: str, from_: str = "main", version: Optional[int] = None) -> str:
        """Create ``name`` from ``from_`` (at ``version``, or its latest); returns the physical
        Lance branch behind it."""
        return _native.branch_create(self.uri, name, from_, version)

    def list(self) -> Dict[str, str]:
        """``{logical name: physical Lance branch}``; branches pylance created appear under
        their own names."""
        return dict(_native.branch_list(self.uri))

    def delete(self, name: str) -> None:
        """Delete a branch; refused while another branch still reads its files."""
        _native.branch_delete(self.uri, name)

    def merge(self, name: str, into: str = "main", dry_run: bool = False) -> ReplayResult:
        """Replay every commit of ``name`` since it forked onto ``into``."""
        return _replay(_native.merge(self.uri, name, into, dry_run, False))

    def fast_forward(self, name: str, into: str = "main", dry_run: bool = False) -> ReplayResult:
        """Like ``merge``, refused (``ValueError``) when ``into`` has commits of its own."""
        return _replay(_native.merge(self.uri, name, into, dry_run, True))

    def cherry_pick(self, name: str, versions: Iterable[int], onto: str = "main", dry_run: bool = False) -> ReplayResult:
        """Replay the given versions of ``name`` onto ``onto``, in version order."""
        return _replay(_native.cherry_pick(self.uri, name, [int(v) for v in versions], onto, dry_run))

    def rebase(self, name: str, onto: str = "main", dry_run: bool = False) -> ReplayResult:
        """Rebuild ``name`` on ``onto``'s tip (a fresh physical branch, then the name moves)."""
        return _replay(_native.rebase(self.uri, name, onto, dry_run))

    def squash(self, name: str, from_version: int, to_version: int, dry_run: bool = False) -> ReplayResult:
        """Make ``name``'s commits ``from_version..=to_version`` one commit."""
        return _replay(_native.squash(self.uri, name, int(from_version), int(to_version), dry_run))


@dataclass(frozen=True)
class GraphMergeResult:
    """What ``Graph.merge`` did (or, with ``dry_run``, would do).

    Attributes
    ----------
    outcome : str
        ``"fast_forward"``, ``"merged"``, ``"already_up_to_date"`` or (dry runs only)
        ``"conflicted"``.
    conflicts : list of dict
        ``{"type", "id", "kind", "message"}`` per conflict.
    base : str
        The merge base's graph commit id.
    commit : str or None
        The target's new head (``None`` on a dry run or when nothing changed).
    written : dict
        Rows written per type.
    """

    outcome: str
    conflicts: List[Dict[str, Any]]
    base: str
    commit: Optional[str]
    written: Dict[str, int]


class Graph:
    """A keyed graph: one keyed table per node and edge type (key ``id``) and a graph manifest
    published by compare-and-swap, with a three-way keyed merge between graph branches.

    The schema is the JSON of ``design/graph-merge.md``: ``{"nodes": {"Person": {"properties":
    {"name": "string"}}}, "edges": {"Knows": {"src": "Person", "dst": "Person"}}}``.
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def init(
        cls,
        root: Union[str, "os.PathLike[str]"],
        schema: Union[str, Dict[str, Any]],
        *,
        storage_options: Optional[Dict[str, str]] = None,
    ) -> "Graph":
        """Create a graph at ``root`` (``FileExistsError`` if one is there)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return cls(_native.NativeGraph.init(_located(root, storage_options, must_exist=False), text))

    @classmethod
    def open(
        cls, root: Union[str, "os.PathLike[str]"], *, storage_options: Optional[Dict[str, str]] = None
    ) -> "Graph":
        """Open the graph at ``root`` (``FileNotFoundError`` if there is none)."""
        return cls(_native.NativeGraph.open(_located(root, storage_options, must_exist=False)))

    @property
    def root(self) -> str:
        """The graph's root directory."""
        return self._native.root()

    @property
    def types(self) -> List[str]:
        """The node and edge type names."""
        return self._native.types()

    def branch(self, name: str, from_: str = "main") -> None:
        """Create graph branch ``name`` at ``from_``'s head."""
        self._native.branch(name, from_)

    def branches(self) -> Dict[str, str]:
        """``{graph branch: head commit id}``."""
        return dict(self._native.branches())

    def insert(self, type_name: str, rows: Any, branch: str = "main") -> Dict[str, Any]:
        """Strict insert of rows of one type: every id must be new (``ValueError`` otherwise);
        constraint violations raise ``MergeConflict`` with the conflicts; nothing is written."""
        return json.loads(self._native.insert(branch, type_name, _arrow(rows)))

    def upsert(self, type_name: str, rows: Any, branch: str = "main") -> Dict[str, Any]:
        """Insert or replace rows of one type by id."""
        return json.loads(self._native.upsert(branch, type_name, _arrow(rows)))

    def delete(self, type_name: str, ids: Iterable[str], branch: str = "main") -> Dict[str, Any]:
        """Delete rows of one type by id."""
        return json.loads(self._native.delete(branch, type_name, [str(i) for i in ids]))

    def scan(self, type_name: str, branch: str = "main") -> pa.Table:
        """Every row of a type on a branch, ordered by id."""
        return self._native.scan(branch, type_name)

    def merge(
        self, source: str, into: str = "main", dry_run: bool = False, cells: bool = False, strategy: str = "fail"
    ) -> GraphMergeResult:
        """Three-way keyed merge of graph branch ``source`` into ``into``. ``cells`` merges an id
        changed on both sides property by property; ``strategy`` ``"ours"``/``"theirs"``
        resolves row conflicts. A real run that conflicts raises ``MergeConflict``."""
        d = json.loads(self._native.merge(source, into, dry_run, cells, strategy))
        return GraphMergeResult(d["outcome"], d["conflicts"], d["base"], d["commit"], d["written"])
