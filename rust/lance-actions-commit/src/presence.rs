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
use lance_core::{ROW_ADDR, ROW_ID};
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
    /// The row at Lance row address `address` (fragment id in the high 32 bits, offset in the low).
    fn at(hash: u64, key: String, address: u64, values: RecordBatch) -> Self {
        KeyRow { hash, key, fragment: address >> 32, offset: address as u32, values }
    }

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
    scan_key_rows(dataset, key, fragments).await
}

/// The live rows of `dataset` whose key hash is in `hashes`.
///
/// The scan reads the key columns only; the other columns are taken for the rows that matched
/// alone (usually none: a replay whose keys are all new). A full scan of every column would read
/// a table's vectors and payloads once per replayed insert.
pub async fn rows_with_keys(dataset: &Dataset, key: &[String], hashes: &HashSet<u64>) -> Result<Vec<KeyRow>> {
    if hashes.is_empty() || dataset.manifest().fragments.is_empty() {
        return Ok(Vec::new());
    }
    let matched = scan_matching_keys(dataset, key, hashes).await?;
    if matched.is_empty() {
        return Ok(Vec::new());
    }
    let row_ids: Vec<u64> = matched.iter().map(|m| m.row_id).collect();
    let taken = dataset.take_rows(&row_ids, dataset.schema().clone()).await.lance("reading the rows holding a key")?;
    rows_taken(matched, &taken, key)
}

/// A row the key-only scan matched: its key, where it is, and its row id for the take.
struct Matched {
    hash: u64,
    key: String,
    address: u64,
    row_id: u64,
}

/// Every live row whose key hash is in `hashes`, from a scan of the key columns.
async fn scan_matching_keys(dataset: &Dataset, key: &[String], hashes: &HashSet<u64>) -> Result<Vec<Matched>> {
    let mut scanner = dataset.scan();
    scanner.project(key).lance("projecting the key columns")?;
    scanner.with_row_address();
    scanner.with_row_id();
    let mut stream = scanner.try_into_stream().await.lance("scanning key columns")?;
    let mut out = Vec::new();
    while let Some(batch) = stream.try_next().await.lance("scanning key columns")? {
        let (addresses, row_ids) = (u64_column(&batch, ROW_ADDR)?, u64_column(&batch, ROW_ID)?);
        for row in 0..batch.num_rows() {
            let Some(value) = extract_key_value_from_batch(&batch, row, key) else { continue };
            let hash = hash_key_bytes(&value.to_bytes());
            if hashes.contains(&hash) {
                let (address, row_id) = (addresses.value(row), row_ids.value(row));
                out.push(Matched { hash, key: display_key(&value), address, row_id });
            }
        }
    }
    Ok(out)
}

/// The matched rows with their values from `taken` (Lance's take, one row per row id asked, in
/// order). Each taken row's key is checked against the one matched: a row out of place is an
/// error, never a row attributed to another key.
fn rows_taken(matched: Vec<Matched>, taken: &RecordBatch, key: &[String]) -> Result<Vec<KeyRow>> {
    let misread = |detail: String| crate::Error::Lance {
        what: "reading the rows holding a key".into(),
        source: lance::Error::invalid_input(detail),
    };
    if taken.num_rows() != matched.len() {
        return Err(misread(format!("asked for {} rows, read {}", matched.len(), taken.num_rows())));
    }
    let user = user_columns(taken);
    let mut out = Vec::with_capacity(matched.len());
    for (row, m) in matched.into_iter().enumerate() {
        let read = extract_key_value_from_batch(taken, row, key).map(|v| hash_key_bytes(&v.to_bytes()));
        if read != Some(m.hash) {
            return Err(misread(format!("the row read for key {} holds another key", m.key)));
        }
        out.push(KeyRow::at(m.hash, m.key, m.address, user.slice(row, 1)));
    }
    Ok(out)
}

/// A `u64` column Lance adds to a scan (row addresses, row ids).
fn u64_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a UInt64Array> {
    batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<UInt64Array>()).ok_or_else(|| {
        crate::Error::Lance {
            what: "scanning key columns".into(),
            source: lance::Error::invalid_input(format!("the scan returned no {name} column")),
        }
    })
}

/// One scan of every column of the table (or of some fragments) with row addresses: every live
/// row, with its values.
async fn scan_key_rows(dataset: &Dataset, key: &[String], fragments: Option<&[u64]>) -> Result<Vec<KeyRow>> {
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
        collect_rows(&batch, key, &mut out)?;
    }
    Ok(out)
}

fn collect_rows(batch: &RecordBatch, key: &[String], out: &mut Vec<KeyRow>) -> Result<()> {
    let addresses = u64_column(batch, ROW_ADDR)?;
    let user = user_columns(batch);
    for row in 0..batch.num_rows() {
        let Some(value) = extract_key_value_from_batch(batch, row, key) else { continue };
        let hash = hash_key_bytes(&value.to_bytes());
        out.push(KeyRow::at(hash, display_key(&value), addresses.value(row), user.slice(row, 1)));
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
