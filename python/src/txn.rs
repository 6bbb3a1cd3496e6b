//! A pylance `Transaction` as a Lance one.
//!
//! pylance 14.0.2's Python `Transaction` is a dataclass over `LanceOperation.*` dataclasses; the
//! Python side (`lance_actions/_convert.py`) turns it into JSON: fragments in pylance's own
//! `FragmentMetadata.to_json` shape (which is Lance's serde shape of `Fragment`), schemas as an
//! Arrow schema plus the Lance field ids in pre-order. Here that JSON becomes
//! `lance::dataset::transaction::Transaction`. Every field is read; a kind or a field that cannot
//! be represented exactly is refused with a `ValueError` naming it, never dropped.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::Schema as ArrowSchema;
use lance::dataset::transaction::{DataReplacementGroup, Operation, RewriteGroup, Transaction};
use lance::dataset::transaction::{UpdateMap, UpdateMapEntry, UpdateMode, UpdatedFragmentOffsets};
use lance_core::datatypes::{Field, Schema};
use lance_table::format::{DataFile, Fragment, IndexFile, IndexMetadata};
use roaring::RoaringBitmap;
use serde_json::Value;

/// Why a transaction cannot be converted (shown to the user as a `ValueError`).
pub type Refusal = String;

/// A schema the caller passed next to the JSON: the Arrow schema and the Lance field ids of its
/// fields in pre-order (`None`: a plain `pyarrow.Schema`, ids assigned as Lance does for a new table).
pub struct StagedSchema {
    pub arrow: ArrowSchema,
    pub field_ids: Option<Vec<i32>>,
}

pub fn transaction(json: &str, schema: Option<StagedSchema>) -> Result<Transaction, Refusal> {
    let value: Value = serde_json::from_str(json).map_err(|e| format!("malformed transaction: {e}"))?;
    let read_version = u64_field(&value, "read_version")?;
    let uuid = str_field(&value, "uuid")?.to_string();
    let op = value.get("operation").ok_or("malformed transaction: no operation")?;
    let operation = operation(op, schema)?;
    let properties: HashMap<String, String> = match value.get("transaction_properties") {
        None | Some(Value::Null) => HashMap::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| "transaction_properties must map strings to strings".to_string())?,
    };
    Ok(Transaction {
        read_version,
        uuid,
        operation,
        tag: None,
        transaction_properties: (!properties.is_empty()).then(|| Arc::new(properties)),
    })
}

fn operation(op: &Value, schema: Option<StagedSchema>) -> Result<Operation, Refusal> {
    let kind = str_field(op, "kind")?;
    let needs_schema = |schema: Option<StagedSchema>| {
        schema.ok_or_else(|| format!("a {kind} transaction needs its schema")).and_then(lance_schema)
    };
    Ok(match kind {
        "Append" => Operation::Append { fragments: fragments(op, "fragments")? },
        "Delete" => Operation::Delete {
            updated_fragments: fragments(op, "updated_fragments")?,
            deleted_fragment_ids: u64_list(op, "deleted_fragment_ids")?,
            predicate: str_field(op, "predicate")?.to_string(),
        },
        "Update" => update(op)?,
        "Overwrite" => {
            if !matches!(op.get("initial_bases"), None | Some(Value::Null)) {
                return Err("Overwrite with initial_bases cannot be converted yet".into());
            }
            Operation::Overwrite {
                fragments: fragments(op, "fragments")?,
                schema: needs_schema(schema)?,
                config_upsert_values: None,
                initial_bases: None,
            }
        }
        "Merge" => Operation::Merge {
            fragments: fragments(op, "fragments")?,
            schema: needs_schema(schema)?,
            preserves_nullability: bool_field(op, "preserves_nullability")?,
        },
        "Project" => Operation::Project {
            schema: needs_schema(schema)?,
            preserves_nullability: bool_field(op, "preserves_nullability")?,
        },
        "Restore" => Operation::Restore { version: u64_field(op, "version")? },
        "Rewrite" => rewrite(op)?,
        "DataReplacement" => data_replacement(op)?,
        "UpdateConfig" => update_config(op)?,
        "CreateIndex" => Operation::CreateIndex {
            new_indices: indices(op, "new_indices")?,
            removed_indices: indices(op, "removed_indices")?,
        },
        other => return Err(format!("a {other} transaction cannot be converted to a Lance transaction yet")),
    })
}

fn update(op: &Value) -> Result<Operation, Refusal> {
    let update_mode = match str_field(op, "update_mode")? {
        "" => None,
        "rewrite_rows" => Some(UpdateMode::RewriteRows),
        "rewrite_columns" => Some(UpdateMode::RewriteColumns),
        other => return Err(format!("Update has an unknown update_mode '{other}'")),
    };
    let offsets = match op.get("updated_fragment_offsets") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => {
            let mut out = HashMap::new();
            for (id, hex) in map {
                let id: u64 =
                    id.parse().map_err(|_| format!("updated_fragment_offsets: '{id}' is not a fragment id"))?;
                let bytes = hex_bytes(hex.as_str().unwrap_or(""))?;
                let bitmap = RoaringBitmap::deserialize_from(bytes.as_slice())
                    .map_err(|e| format!("updated_fragment_offsets of fragment {id} is not a roaring bitmap: {e}"))?;
                out.insert(id, bitmap);
            }
            Some(UpdatedFragmentOffsets(out))
        }
        Some(_) => return Err("updated_fragment_offsets must map fragment ids to bytes".into()),
    };
    Ok(Operation::Update {
        removed_fragment_ids: u64_list(op, "removed_fragment_ids")?,
        updated_fragments: fragments(op, "updated_fragments")?,
        new_fragments: fragments(op, "new_fragments")?,
        fields_modified: u32_list(op, "fields_modified")?,
        compacted_sstables: Vec::new(),
        fields_for_preserving_frag_bitmap: u32_list(op, "fields_for_preserving_frag_bitmap")?,
        update_mode,
        // pylance's Python Update carries no key-existence filter: there is none to convert.
        inserted_rows_filter: None,
        updated_fragment_offsets: offsets,
    })
}

fn rewrite(op: &Value) -> Result<Operation, Refusal> {
    if op.get("rewritten_indices").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        return Err("a Rewrite with rewritten_indices cannot be converted yet".into());
    }
    let groups = array(op, "groups")?
        .iter()
        .map(|g| {
            Ok(RewriteGroup {
                old_fragments: fragments(g, "old_fragments")?,
                new_fragments: fragments(g, "new_fragments")?,
            })
        })
        .collect::<Result<Vec<_>, Refusal>>()?;
    Ok(Operation::Rewrite { groups, rewritten_indices: Vec::new(), frag_reuse_index: None })
}

fn data_replacement(op: &Value) -> Result<Operation, Refusal> {
    let replacements = array(op, "replacements")?
        .iter()
        .map(|r| {
            let file: DataFile = serde_json::from_value(r.get("new_file").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("DataReplacement: malformed new_file: {e}"))?;
            Ok(DataReplacementGroup(u64_field(r, "fragment_id")?, file))
        })
        .collect::<Result<Vec<_>, Refusal>>()?;
    Ok(Operation::DataReplacement { replacements })
}

fn update_config(op: &Value) -> Result<Operation, Refusal> {
    let mut field_metadata_updates = HashMap::new();
    if let Some(Value::Object(map)) = op.get("field_metadata_updates") {
        for (id, m) in map {
            let id: i32 = id.parse().map_err(|_| format!("field_metadata_updates: '{id}' is not a field id"))?;
            if let Some(m) = update_map(Some(m))? {
                field_metadata_updates.insert(id, m);
            }
        }
    }
    Ok(Operation::UpdateConfig {
        config_updates: update_map(op.get("config_updates"))?,
        table_metadata_updates: update_map(op.get("table_metadata_updates"))?,
        schema_metadata_updates: update_map(op.get("schema_metadata_updates"))?,
        field_metadata_updates,
    })
}

fn indices(op: &Value, key: &str) -> Result<Vec<IndexMetadata>, Refusal> {
    array(op, key)?.iter().map(index).collect()
}

/// pylance's `Index` dataclass (see `_convert._index`) as Lance's index metadata, every field.
fn index(v: &Value) -> Result<IndexMetadata, Refusal> {
    let uuid_text = str_field(v, "uuid")?;
    let uuid = uuid::Uuid::parse_str(uuid_text).map_err(|_| format!("index uuid '{uuid_text}' is not a uuid"))?;
    let name = str_field(v, "name")?.to_string();
    let fragment_bitmap = match v.get("fragment_ids") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            u64_list(v, "fragment_ids")?
                .into_iter()
                .map(|id| narrow(id, "fragment id"))
                .collect::<Result<RoaringBitmap, _>>()?,
        ),
    };
    let created_at = match v.get("created_at_micros").and_then(Value::as_i64) {
        None => None,
        Some(us) => Some(
            chrono::DateTime::<chrono::Utc>::from_timestamp_micros(us)
                .ok_or_else(|| format!("index '{name}' has an impossible created_at"))?,
        ),
    };
    let files = match v.get("files") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            array(v, "files")?
                .iter()
                .map(|f| {
                    Ok(IndexFile { path: str_field(f, "path")?.to_string(), size_bytes: u64_field(f, "size_bytes")? })
                })
                .collect::<Result<Vec<_>, Refusal>>()?,
        ),
    };
    let index_details = match v.get("index_details") {
        None | Some(Value::Null) => None,
        Some(d) => Some(Arc::new(prost_types::Any {
            type_url: str_field(d, "type_url")?.to_string(),
            value: hex_bytes(str_field(d, "value_hex")?)?,
        })),
    };
    let base_id = match v.get("base_id").and_then(Value::as_u64) {
        None => None,
        Some(id) => Some(narrow(id, "base id")?),
    };
    Ok(IndexMetadata {
        uuid,
        fields: i32_list(v, "fields")?,
        covering_fields: i32_list(v, "covering_fields")?,
        name,
        dataset_version: u64_field(v, "dataset_version")?,
        fragment_bitmap,
        index_details,
        index_version: i32::try_from(u64_field(v, "index_version")?)
            .map_err(|_| "index_version is too large".to_string())?,
        created_at,
        base_id,
        files,
    })
}

fn narrow(x: u64, what: &str) -> Result<u32, Refusal> {
    u32::try_from(x).map_err(|_| format!("{what} {x} is too large"))
}

fn i32_list(v: &Value, key: &str) -> Result<Vec<i32>, Refusal> {
    u64_list(v, key)?
        .into_iter()
        .map(|x| {
            i32::try_from(x).map_err(|_| format!("malformed transaction: {key} holds {x}, too large for a field id"))
        })
        .collect()
}

/// `{"updates": {key: value | null}, "replace": bool}` (pylance's `LanceOperation.UpdateMap`).
fn update_map(value: Option<&Value>) -> Result<Option<UpdateMap>, Refusal> {
    let Some(value) = value.filter(|v| !v.is_null()) else { return Ok(None) };
    let updates = value.get("updates").and_then(Value::as_object).ok_or("an UpdateMap needs its updates")?;
    let mut update_entries = Vec::new();
    for (key, v) in updates {
        let value = match v {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            _ => return Err(format!("UpdateMap value of '{key}' must be a string or None")),
        };
        update_entries.push(UpdateMapEntry { key: key.clone(), value });
    }
    let replace = value.get("replace").and_then(Value::as_bool).unwrap_or(false);
    Ok(Some(UpdateMap { update_entries, replace }))
}

/// The Lance schema: the Arrow schema's fields with the caller's Lance field ids, or ids assigned
/// the way Lance assigns them to a new table.
fn lance_schema(staged: StagedSchema) -> Result<Schema, Refusal> {
    let mut schema = Schema::try_from(&staged.arrow).map_err(|e| format!("the schema cannot be used: {e}"))?;
    if let Some(ids) = staged.field_ids {
        let mut ids = ids.into_iter();
        for field in schema.fields.iter_mut() {
            assign_ids(field, &mut ids)?;
        }
        if ids.next().is_some() {
            return Err("the schema has fewer fields than field ids were given".into());
        }
    }
    Ok(schema)
}

fn assign_ids(field: &mut Field, ids: &mut impl Iterator<Item = i32>) -> Result<(), Refusal> {
    field.id = ids.next().ok_or_else(|| format!("no field id given for field '{}'", field.name))?;
    for child in field.children.iter_mut() {
        assign_ids(child, ids)?;
    }
    Ok(())
}

fn fragments(v: &Value, key: &str) -> Result<Vec<Fragment>, Refusal> {
    array(v, key)?
        .iter()
        .map(|f| {
            Fragment::from_json(&f.to_string())
                .map_err(|e| format!("{key}: malformed fragment: {}", crate::errors::user_message(&e.to_string())))
        })
        .collect()
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>, Refusal> {
    match v.get(key) {
        Some(Value::Array(a)) => Ok(a),
        _ => Err(format!("malformed transaction: {key} must be a list")),
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str, Refusal> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| format!("malformed transaction: {key} must be a string"))
}

fn u64_field(v: &Value, key: &str) -> Result<u64, Refusal> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("malformed transaction: {key} must be a non-negative integer"))
}

fn bool_field(v: &Value, key: &str) -> Result<bool, Refusal> {
    v.get(key).and_then(Value::as_bool).ok_or_else(|| format!("malformed transaction: {key} must be a bool"))
}

fn u64_list(v: &Value, key: &str) -> Result<Vec<u64>, Refusal> {
    array(v, key)?
        .iter()
        .map(|x| x.as_u64().ok_or_else(|| format!("malformed transaction: {key} must hold non-negative integers")))
        .collect()
}

fn u32_list(v: &Value, key: &str) -> Result<Vec<u32>, Refusal> {
    u64_list(v, key)?
        .into_iter()
        .map(|x| {
            u32::try_from(x).map_err(|_| format!("malformed transaction: {key} holds {x}, too large for a field id"))
        })
        .collect()
}

fn hex_bytes(hex: &str) -> Result<Vec<u8>, Refusal> {
    // Checked first: slicing below is by byte, which only ASCII makes safe.
    if !hex.is_ascii() || !hex.len().is_multiple_of(2) {
        return Err("malformed transaction: bytes must be an even number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| "malformed transaction: bytes are not hex".to_string())
        })
        .collect()
}
