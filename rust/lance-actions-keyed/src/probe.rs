//! Which of a set of keys are present in a table version. The strict insert's preflight and its
//! re-probe after a key race both ask this, against a pinned version.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::fragment::FragReadConfig;
use lance_table::format::key_existence::KeyValue;

use crate::error::{LanceContext, Result};
use crate::key::{FastHash, KeySet, KeySpec, RowKeys, display_key, hash_key};
use lance_actions::keys::KeyHashSet;

/// Up to this many keys are looked up with an `IN` filter (which a scalar index on the key
/// answers); more are checked against every live row's key, read fragment by fragment.
const IN_LIST_LIMIT: usize = 1024;

/// Rows per batch when the key columns are read fragment by fragment.
const KEY_READ_BATCH_ROWS: u32 = 8_192;

/// Fragments whose key columns are read at once.
const FRAGMENTS_READ_AT_ONCE: usize = 8;

/// The keys of `wanted` present in `dataset`, in the order of `wanted`.
pub async fn present_keys(dataset: &Arc<Dataset>, key: &KeySpec, wanted: &[KeyValue]) -> Result<Vec<KeyValue>> {
    if wanted.is_empty() || dataset.count_fragments() == 0 {
        return Ok(Vec::new());
    }
    let mut found = Found::new(key, Probe::Keys(wanted.iter().collect()));
    match in_list_filter(key, wanted) {
        Some(filter) => keys_matching(dataset, &filter, &mut found).await?,
        None => keys_read_whole(dataset, &mut found).await?,
    };
    Ok(wanted.iter().filter(|k| found.found.contains(*k)).cloned().collect())
}

/// The keys of `keys` present in `dataset`, in row order. Few keys are looked up as
/// [`present_keys`] does; more are probed through their exact hash set, and the hits are named from
/// the rows: no set of a bulk insert's keys is built (`RowKeys`).
pub async fn present_row_keys(dataset: &Arc<Dataset>, keys: &RowKeys) -> Result<Vec<KeyValue>> {
    if let Some(kept) = keys.kept() {
        return present_keys(dataset, keys.spec(), kept).await;
    }
    if keys.is_empty() || dataset.count_fragments() == 0 {
        return Ok(Vec::new());
    }
    let mut found = Found::new(keys.spec(), Probe::Hashes(keys.exact()));
    keys_read_whole(dataset, &mut found).await?;
    // A hit is a table key whose hash is one of ours: kept only if it equals one of our keys.
    keys.among(&found.found)
}

/// How a key read from the table is matched against the wanted keys.
enum Probe<'a> {
    /// A set of the wanted keys: a hit is a wanted key.
    Keys(KeySet<'a>),
    /// The wanted keys' exact hashes: a hit is a candidate (a 64-bit hash may collide), which
    /// [`present_row_keys`] keeps only if it equals a wanted key.
    Hashes(&'a KeyHashSet),
}

impl Probe<'_> {
    fn may_hold(&self, key: &KeyValue) -> bool {
        match self {
            Probe::Keys(keys) => keys.contains(key),
            Probe::Hashes(hashes) => hashes.contains(hash_key(key)),
        }
    }
}

/// The wanted keys met so far in the rows read.
struct Found<'a> {
    key: &'a KeySpec,
    probe: Probe<'a>,
    found: HashSet<KeyValue, FastHash>,
    /// Rows read so far (numbers the rows in errors).
    rows: usize,
}

impl<'a> Found<'a> {
    fn new(key: &'a KeySpec, probe: Probe<'a>) -> Self {
        Found { key, probe, found: HashSet::with_hasher(FastHash::default()), rows: 0 }
    }

    fn read(&mut self, batch: &arrow_array::RecordBatch) -> Result<()> {
        let (probe, found) = (&self.probe, &mut self.found);
        self.key.visit_keys(batch, self.rows, |k| {
            if probe.may_hold(&k) {
                found.insert(k);
            }
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }
}

/// The keys of `wanted` that a filtered scan finds: a short `IN` list, which a scalar index on the
/// key answers without reading the key column.
async fn keys_matching(dataset: &Arc<Dataset>, filter: &str, found: &mut Found<'_>) -> Result<()> {
    let mut scanner = dataset.scan();
    scanner.project(&found.key.names).lance("projecting the key columns")?;
    scanner.filter(filter).lance("filtering by key")?;
    let mut stream = scanner.try_into_stream().await.lance("scanning keys")?;
    while let Some(batch) = stream.try_next().await.lance("scanning keys")? {
        found.read(&batch)?;
    }
    Ok(())
}

/// The keys of `wanted` found by reading every live row's key columns, fragment by fragment,
/// through Lance's fragment reader: it applies each fragment's deletion vector and data overlays
/// as a scan does, but plans no query. A long key list has nothing for an index to answer, and
/// skipping the query planner spares the time and memory (code paged in, plan state) of a first
/// scan in a process, which a bulk insert would otherwise pay before writing anything
/// (`design/benchmarks.md`, keyed bench (c)).
async fn keys_read_whole(dataset: &Arc<Dataset>, found: &mut Found<'_>) -> Result<()> {
    let projection = dataset.schema().project(&found.key.names).lance("projecting the key columns")?;
    let projection = &projection;
    // In fragment order (rows are numbered in errors), several fragments at a time: on an object
    // store each read is a round trip.
    let mut reads = futures::stream::iter(dataset.get_fragments())
        .map(|fragment| key_batches(fragment, projection))
        .buffered(FRAGMENTS_READ_AT_ONCE);
    while let Some(batches) = reads.try_next().await? {
        for batch in &batches {
            found.read(batch)?;
        }
    }
    Ok(())
}

/// One fragment's key columns, live rows only (its deletion vector and overlays applied).
async fn key_batches(
    fragment: lance::dataset::fragment::FileFragment,
    projection: &lance_core::datatypes::Schema,
) -> Result<Vec<arrow_array::RecordBatch>> {
    let reader = fragment
        .open(projection, FragReadConfig::default())
        .await
        .lance(format!("opening fragment {} to read its keys", fragment.id()))?;
    let mut reads = reader.read_all(KEY_READ_BATCH_ROWS).await.lance("reading keys")?;
    let mut batches = Vec::new();
    while let Some(batch) = reads.next().await {
        batches.push(batch.await.lance("reading keys")?);
    }
    Ok(batches)
}

/// `name IN (...)` for a single-column key and a short list, else `None` (read every key).
fn in_list_filter(key: &KeySpec, wanted: &[KeyValue]) -> Option<String> {
    if key.names.len() != 1 || wanted.len() > IN_LIST_LIMIT {
        return None;
    }
    key_predicate(key, wanted)
}

/// A key as a SQL literal, or `None` when it has no literal form we trust (then we scan).
pub(crate) fn sql_literal(key: &KeyValue) -> Option<String> {
    match key {
        KeyValue::String(s) => Some(format!("'{}'", s.replace('\'', "''"))),
        KeyValue::Int64(v) => Some(v.to_string()),
        KeyValue::UInt64(v) => Some(v.to_string()),
        KeyValue::Binary(b) => Some(format!("X'{}'", display_key(&KeyValue::Binary(b.clone())))),
        _ => None,
    }
}

pub(crate) fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A predicate matching exactly `keys` (single-column keys only; composite keys use OR of ANDs).
pub(crate) fn key_predicate(key: &KeySpec, keys: &[KeyValue]) -> Option<String> {
    if let [name] = key.names.as_slice() {
        let literals: Option<Vec<String>> = keys.iter().map(sql_literal).collect();
        return Some(format!("{} IN ({})", quote_identifier(name), literals?.join(", ")));
    }
    let rows: Option<Vec<String>> = keys
        .iter()
        .map(|k| match k {
            KeyValue::Composite(parts) if parts.len() == key.names.len() => {
                let terms: Option<Vec<String>> = key
                    .names
                    .iter()
                    .zip(parts)
                    .map(|(n, v)| sql_literal(v).map(|l| format!("{} = {l}", quote_identifier(n))))
                    .collect();
                terms.map(|t| format!("({})", t.join(" AND ")))
            }
            _ => None,
        })
        .collect();
    Some(rows?.join(" OR "))
}
