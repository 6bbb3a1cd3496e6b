"""A pylance 14.0.2 ``Transaction`` as the JSON the native module converts to a Lance one.

pylance's Python ``Transaction`` is a dataclass over ``LanceOperation.*`` dataclasses. Each kind
below is written out field by field (fragments in the shape of ``FragmentMetadata.to_json``,
which is Lance's own serde shape of a fragment); a kind or a field that cannot be represented
exactly raises ``ValueError`` naming it, so nothing is ever committed with a part left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa
from lance.fragment import FragmentMetadata

Schema = Tuple[pa.Schema, Optional[List[int]]]


def transaction_json(txn: Any) -> Tuple[str, Optional[pa.Schema], Optional[List[int]]]:
    """``(json, arrow_schema, field_ids)`` for a pylance ``Transaction``."""
    for attr in ("read_version", "operation", "uuid"):
        if not hasattr(txn, attr):
            raise ValueError(
                f"expected a pylance Transaction (as execute_uncommitted returns), got {type(txn).__name__} without .{attr}"
            )
    if not isinstance(txn.read_version, int) or txn.read_version < 0:
        raise ValueError(f"the transaction's read_version must be a version number, got {txn.read_version!r}")
    op = txn.operation
    kind = type(op).__name__
    convert = _CONVERTERS.get(kind)
    if kind == "BaseOperation":
        # pylance reads a kind it has no Python class for (ReserveFragments, UpdateMemWalState,
        # UpdateBases) back as the bare base class: nothing of it can be recovered.
        raise ValueError("this transaction's operation has no Python form in pylance (ReserveFragments, UpdateMemWalState or UpdateBases): it cannot be committed")
    if convert is None:
        raise ValueError(f"a {kind} transaction cannot be committed through lance_actions yet")
    body, schema = convert(op)
    body["kind"] = kind
    props = txn.transaction_properties or {}
    doc = {
        "read_version": int(txn.read_version),
        "uuid": str(txn.uuid),
        "operation": body,
        "transaction_properties": {str(k): str(v) for k, v in props.items()},
    }
    arrow, ids = schema if schema is not None else (None, None)
    return json.dumps(doc), arrow, ids


def _data_file(f: Any) -> Dict[str, Any]:
    d = asdict(f)
    d["path"] = d.pop("_path")
    return d


def _fragment(f: Any) -> Dict[str, Any]:
    if not isinstance(f, FragmentMetadata):
        raise ValueError(f"expected FragmentMetadata in the transaction, got {type(f).__name__}")
    if f.overlays:
        raise ValueError(f"fragment {f.id} carries data overlays, which cannot be converted yet")
    d: Dict[str, Any] = {
        "id": f.id,
        "files": [_data_file(x) for x in f.files],
        "physical_rows": f.physical_rows,
    }
    if f.deletion_file is not None:
        d["deletion_file"] = f.deletion_file.asdict()
    # Row-id and row-version metadata: pylance serialises them with Lance's own serde.
    for attr in ("row_id_meta", "created_at_version_meta", "last_updated_at_version_meta"):
        meta = getattr(f, attr)
        if meta is not None:
            d[attr] = json.loads(meta.json())
    return d


def _fragments(fs: Any) -> List[Dict[str, Any]]:
    return [_fragment(f) for f in fs]


def _schema(s: Any) -> Schema:
    """The Arrow schema, with the Lance field ids (pre-order) when it is a ``LanceSchema``."""
    if isinstance(s, pa.Schema):
        return s, None
    if hasattr(s, "to_pyarrow") and hasattr(s, "fields"):
        ids: List[int] = []

        def walk(field: Any) -> None:
            ids.append(field.id())
            for child in field.children():
                walk(child)

        for field in s.fields():
            walk(field)
        return s.to_pyarrow(), ids
    raise ValueError(f"expected a pyarrow.Schema or LanceSchema, got {type(s).__name__}")


def _append(op: Any) -> Tuple[Dict[str, Any], None]:
    return {"fragments": _fragments(op.fragments)}, None


def _delete(op: Any) -> Tuple[Dict[str, Any], None]:
    return {
        "updated_fragments": _fragments(op.updated_fragments),
        "deleted_fragment_ids": [int(i) for i in op.deleted_fragment_ids],
        "predicate": str(op.predicate),
    }, None


def _update(op: Any) -> Tuple[Dict[str, Any], None]:
    offsets = op.updated_fragment_offsets
    return {
        "removed_fragment_ids": [int(i) for i in op.removed_fragment_ids],
        "updated_fragments": _fragments(op.updated_fragments),
        "new_fragments": _fragments(op.new_fragments),
        "fields_modified": [int(i) for i in op.fields_modified],
        "fields_for_preserving_frag_bitmap": [int(i) for i in op.fields_for_preserving_frag_bitmap],
        "update_mode": op.update_mode or "",
        "updated_fragment_offsets": None
        if offsets is None
        else {str(k): bytes(v).hex() for k, v in offsets.items()},
    }, None


def _overwrite(op: Any) -> Tuple[Dict[str, Any], Schema]:
    if getattr(op, "initial_bases", None):
        raise ValueError("an Overwrite with initial_bases cannot be committed through lance_actions yet")
    return {"fragments": _fragments(op.fragments), "initial_bases": None}, _schema(op.new_schema)


def _merge(op: Any) -> Tuple[Dict[str, Any], Schema]:
    return {
        "fragments": _fragments(op.fragments),
        "preserves_nullability": bool(op.preserves_nullability),
    }, _schema(op.schema)


def _project(op: Any) -> Tuple[Dict[str, Any], Schema]:
    return {"preserves_nullability": bool(op.preserves_nullability)}, _schema(op.schema)


def _restore(op: Any) -> Tuple[Dict[str, Any], None]:
    return {"version": int(op.version)}, None


def _rewrite(op: Any) -> Tuple[Dict[str, Any], None]:
    if list(op.rewritten_indices or []):
        raise ValueError("a Rewrite with rewritten_indices cannot be committed through lance_actions yet")
    groups = [
        {"old_fragments": _fragments(g.old_fragments), "new_fragments": _fragments(g.new_fragments)}
        for g in op.groups
    ]
    return {"groups": groups, "rewritten_indices": []}, None


def _data_replacement(op: Any) -> Tuple[Dict[str, Any], None]:
    replacements = [
        {"fragment_id": int(r.fragment_id), "new_file": _data_file(r.new_file)} for r in op.replacements
    ]
    return {"replacements": replacements}, None


def _update_map(m: Any) -> Optional[Dict[str, Any]]:
    if m is None:
        return None
    return {"updates": dict(m.updates), "replace": bool(m.replace)}


def _update_config(op: Any) -> Tuple[Dict[str, Any], None]:
    fields = op.field_metadata_updates or {}
    return {
        "config_updates": _update_map(op.config_updates),
        "table_metadata_updates": _update_map(op.table_metadata_updates),
        "schema_metadata_updates": _update_map(op.schema_metadata_updates),
        "field_metadata_updates": {str(k): _update_map(v) for k, v in fields.items()},
    }, None


def _micros(moment: datetime) -> int:
    """Microseconds since the epoch, exactly (no float rounding)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def _index(idx: Any) -> Dict[str, Any]:
    """pylance's ``Index`` dataclass, every field (``fragment_ids`` as a list, ``created_at`` in
    microseconds since the epoch, ``index_details`` as its type url and hex bytes)."""
    created = idx.created_at
    details = idx.index_details
    return {
        "uuid": str(idx.uuid),
        "name": str(idx.name),
        "fields": [int(f) for f in idx.fields],
        "covering_fields": [int(f) for f in (idx.covering_fields or [])],
        "dataset_version": int(idx.dataset_version),
        "fragment_ids": None if idx.fragment_ids is None else sorted(int(i) for i in idx.fragment_ids),
        "index_version": int(idx.index_version),
        "created_at_micros": None if created is None else _micros(created),
        "base_id": idx.base_id,
        "files": None if idx.files is None else [{"path": f.path, "size_bytes": int(f.size_bytes)} for f in idx.files],
        "index_details": None if details is None else {"type_url": details[0], "value_hex": bytes(details[1]).hex()},
    }


def _create_index(op: Any) -> Tuple[Dict[str, Any], None]:
    return {
        "new_indices": [_index(i) for i in op.new_indices],
        "removed_indices": [_index(i) for i in op.removed_indices],
    }, None


_CONVERTERS: Dict[str, Callable[[Any], Tuple[Dict[str, Any], Optional[Schema]]]] = {
    "Append": _append,
    "Delete": _delete,
    "Update": _update,
    "Overwrite": _overwrite,
    "Merge": _merge,
    "Project": _project,
    "Restore": _restore,
    "Rewrite": _rewrite,
    "DataReplacement": _data_replacement,
    "UpdateConfig": _update_config,
    "CreateIndex": _create_index,
}

#: The pylance operation kinds ``commit`` and ``judge`` accept.
SUPPORTED_KINDS = tuple(_CONVERTERS)
