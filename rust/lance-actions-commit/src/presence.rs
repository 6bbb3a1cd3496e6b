//! Key presence on a table version: which rows of a keyed table hold given keys.
//!
//! Shared by every writer that must prove keys absent before inserting them without going through
//! the keyed writer's own preflight (branch replay). The key columns come from the table class
//! declared in the manifest config (`lance-actions.table-class` / `lance-actions.key`), and a key's
//! identity is Lance's own: `KeyValue::to_bytes` hashed with xxHash64, the hash our exact key sets
//! and Lance's key filter use.

use std::collections::HashSet;

use arrow_array::{Array, RecordBatch, UInt64Array};
use futures::TryStreamExt;
use lance::Dataset;
use lance_actions::keys::hash_key_bytes;
use lance_actions::table_class::TableClass;
use lance_core::ROW_ADDR;
use lance_table::format::key_existence::{KeyValue, extract_key_value_from_batch};

use crate::error::{LanceContext, Result};

/// One live row of a table version that holds a key of interest.
#[derive(Debug, Clone)]
pub struct KeyRow {
    /// xxHash64 of the key's canonical bytes.
    pub hash: u64,
    /// The key as a user reads it.
    pub key: String,
    pub fragment: u64,
    pub offset: u32,
    /// The row's user columns (one row), for comparing rows by value.
    pub values: RecordBatch,
}

impl KeyRow {
    /// Do two rows hold the same value in every user column (by Arrow logical equality)?
    pub fn same_values(&self, other: &KeyRow) -> bool {
        let (a, b) = (&self.values, &other.values);
        if a.num_columns() != b.num_columns() {
            return false;
        }
        a.schema().fields().iter().enumerate().all(|(i, field)| match b.column_by_name(field.name()) {
            Some(theirs) => a.column(i).to_data() == theirs.to_data(),
            None => false,
        })
    }
}

/// The key columns of a keyed table, from its declared class; `None` for a table that is not keyed.
pub fn key_columns(dataset: &Dataset) -> Option<Vec<String>> {
    match TableClass::of(&dataset.manifest().config) {
        TableClass::Keyed { key } if !key.is_empty() => Some(key),
        _ => None,
    }
}

/// Every live row of `fragments` (all fragments when `None`), with its key and values.
pub async fn key_rows(dataset: &Dataset, key: &[String], fragments: Option<&[u64]>) -> Result<Vec<KeyRow>> {
    scan_key_rows(dataset, key, fragments, None).await
}

/// The live rows of `dataset` whose key hash is in `hashes`.
pub async fn rows_with_keys(dataset: &Dataset, key: &[String], hashes: &HashSet<u64>) -> Result<Vec<KeyRow>> {
    if hashes.is_empty() {
        return Ok(Vec::new());
    }
    scan_key_rows(dataset, key, None, Some(hashes)).await
}

/// One scan of the table (or of some fragments) with row addresses; every row whose key hash is
/// wanted (or every row) is returned. A full scan: a replay's probe runs once per replayed insert.
async fn scan_key_rows(
    dataset: &Dataset,
    key: &[String],
    fragments: Option<&[u64]>,
    wanted: Option<&HashSet<u64>>,
) -> Result<Vec<KeyRow>> {
    if dataset.manifest().fragments.is_empty() {
        return Ok(Vec::new());
    }
    let mut scanner = dataset.scan();
    scanner.with_row_address();
    if let Some(ids) = fragments {
        let chosen: Vec<_> = dataset.manifest().fragments.iter().filter(|f| ids.contains(&f.id)).cloned().collect();
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        scanner.with_fragments(chosen);
    }
    let mut stream = scanner.try_into_stream().await.lance("scanning key columns")?;
    let mut out = Vec::new();
    while let Some(batch) = stream.try_next().await.lance("scanning key columns")? {
        collect_rows(&batch, key, wanted, &mut out)?;
    }
    Ok(out)
}

fn collect_rows(
    batch: &RecordBatch,
    key: &[String],
    wanted: Option<&HashSet<u64>>,
    out: &mut Vec<KeyRow>,
) -> Result<()> {
    let addresses = batch.column_by_name(ROW_ADDR).and_then(|c| c.as_any().downcast_ref::<UInt64Array>()).cloned();
    let Some(addresses) = addresses else {
        return Err(crate::Error::Lance {
            what: "scanning key columns".into(),
            source: lance::Error::invalid_input("the scan returned no row addresses"),
        });
    };
    let user = user_columns(batch);
    for row in 0..batch.num_rows() {
        let Some(value) = extract_key_value_from_batch(batch, row, key) else { continue };
        let hash = hash_key_bytes(&value.to_bytes());
        if wanted.is_some_and(|w| !w.contains(&hash)) {
            continue;
        }
        let address = addresses.value(row);
        out.push(KeyRow {
            hash,
            key: display_key(&value),
            fragment: address >> 32,
            offset: address as u32,
            values: user.slice(row, 1),
        });
    }
    Ok(())
}

/// The batch without Lance's virtual columns.
fn user_columns(batch: &RecordBatch) -> RecordBatch {
    let keep: Vec<usize> = batch
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !lance_core::is_system_column(f.name()))
        .map(|(i, _)| i)
        .collect();
    batch.project(&keep).unwrap_or_else(|_| batch.clone())
}

/// A key as a user reads it: strings as they are, numbers in decimal, bytes in hex, composite keys
/// as a parenthesised tuple.
pub fn display_key(key: &KeyValue) -> String {
    match key {
        KeyValue::String(s) => s.clone(),
        KeyValue::Int64(v) => v.to_string(),
        KeyValue::UInt64(v) => v.to_string(),
        KeyValue::Binary(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        KeyValue::List(parts) | KeyValue::Struct(parts) | KeyValue::Composite(parts) => {
            format!("({})", parts.iter().map(display_key).collect::<Vec<_>>().join(", "))
        }
    }
}
