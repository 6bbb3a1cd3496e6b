"""The exceptions of lance_actions.

Every exception carries a one-line message in your terms (branch, key, version) and the
structured attributes below. Bad input (a missing dataset, an unknown branch, a wrong key, a
transaction that cannot be converted) raises the built-in ``ValueError``,
``FileNotFoundError`` or ``FileExistsError`` instead; in every case nothing was written.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class LanceActionsError(Exception):
    """Base class of every lance_actions exception."""


class ConflictError(LanceActionsError):
    """A write did not land because of what other writers committed.

    Attributes
    ----------
    reason : str
        The driver's reason, in words.
    rule : str or None
        The model's rule that decided (``RowsOverlap``, ``FragmentGone``, ``KeysIntersect``...).
    peer_version : int or None
        The committed version the write conflicted with.
    path : str or None
        The manifest path both touched (``fragments/3/deletion``...).
    report : dict or None
        The commit report up to the refusal (attempts, peers checked).
    attempts : int or None
        For a write that gave up (``rule == "Contention"``), when known: how many attempts it
        made.
    last : dict or None
        For a write that gave up, when known: why its last attempt had to run again, as
        ``{"kind", "text", "key_race", "reason"}``. ``kind`` is ``"writer_landed"`` (a writer
        that landed first was judged; ``reason`` holds that judgement as ``{"rule",
        "peer_version", ...}``), ``"version_taken"`` (the commit lost its write to another
        writer) or, for branch operations, ``"replayed_concurrently"``, ``"bases_added"``,
        ``"branch_moved"``, ``"catalog_changed"`` or ``"delete_raced"``; for a graph write or
        merge, ``"branch_moved"`` (another writer published to the graph branch first) or
        ``"table_moved"`` (another writer committed to one of its tables; ``text`` names the
        type, as ``node:Person``, and ``reason`` holds the table's judgement when one was made).
        ``key_race`` is true when a concurrent writer's keys met this write's.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str] = None,
        rule: Optional[str] = None,
        peer_version: Optional[int] = None,
        path: Optional[str] = None,
        report: Optional[Dict[str, Any]] = None,
        attempts: Optional[int] = None,
        last: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message
        self.rule = rule
        self.peer_version = peer_version
        self.path = path
        self.report = report
        self.attempts = attempts
        self.last = last


class Retry(ConflictError):
    """A committed peer changed what the transaction was built on: re-read the table and
    re-stage the write (with pylance), then commit again. Also raised when other writers kept
    landing first until the attempts ran out."""


class Fail(ConflictError):
    """The transaction is incompatible with what was committed; re-staging it will not help."""


class KeyConflict(ConflictError):
    """A strict insert met keys that exist: nothing was written.

    Attributes
    ----------
    keys : list of str
        The first conflicting keys (at most 5), as text.
    count : int
        How many keys conflicted.
    cause : str
        ``"already_present"`` (present at the version read), ``"inserted_concurrently"``
        (a concurrent commit inserted them first) or ``"duplicate_in_batch"`` (given twice).
    """

    def __init__(self, message: str, *, keys: List[str], count: int, cause: str) -> None:
        super().__init__(message, rule="KeysIntersect")
        self.keys = keys
        self.count = count
        self.cause = cause


class KeysNotFound(LanceActionsError, KeyError):
    """An update named keys that are not in the table: nothing was written.

    Attributes: ``keys`` (the first few, as text) and ``count``.
    """

    def __init__(self, message: str, *, keys: List[str], count: int) -> None:
        super().__init__(message)
        self.keys = keys
        self.count = count

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class MergeConflict(ConflictError):
    """A replayed commit does not commute with what the target branch did since the fork.

    Attributes
    ----------
    conflicts : list of dict
        One per conflicting commit: ``source_branch``, ``source_version``, ``rule``,
        ``peer_version``, ``path``, ``text``, ``retryable``, ``keys``.
    landed : list of dict
        Commits that landed before the conflict (``source_version``, ``target_version``);
        empty unless a writer on the target created the conflict part way through.
    """

    def __init__(self, message: str, *, conflicts: List[Dict[str, Any]], landed: List[Dict[str, Any]]) -> None:
        first = conflicts[0] if conflicts else {}
        super().__init__(
            message,
            reason=first.get("text"),
            rule=first.get("rule"),
            peer_version=first.get("peer_version"),
            path=first.get("path"),
        )
        self.conflicts = conflicts
        self.landed = landed


class CommitStatusUnknown(LanceActionsError):
    """The manifest write was attempted and its effect is unknown (a storage error).

    Commit the same staged transaction again: if it had landed, it is recognised by its
    ``uuid`` and not written twice.
    """

    def __init__(self, message: str, *, uuid: str) -> None:
        super().__init__(message)
        self.uuid = uuid
