//! O(delta) change detection: the ids one side may have changed since the base, from the two
//! versions' fragment lists rather than from a scan of the table.
//!
//! Every data file name is a fresh UUID and every deletion file carries a random id, so a fragment
//! whose data files, overlay files and deletion file are the same in both versions holds the same
//! live rows, on
//! any Lance branch (a branch's inherited fragments differ only in `base_id`, which is ignored).
//! What differs is what the history since the base added, deleted or removed:
//!
//! - a fragment only in the side (added by an insert, upsert or compaction): its live ids;
//! - a fragment in both whose deletion file changed: the rows the side's deletion vector adds
//!   (the difference of the two deletion vectors), taken from the base by row address;
//! - a fragment only in the base (removed): its live rows in the base.
//!
//! A fragment whose overlays changed (Lance 14's in-place cell updates) counts as removed and
//! added: its files and deletion file alone do not show the cells an overlay changed.
//!
//! The result over-approximates (a compaction rewrites rows without changing them); the row
//! comparator then finds those unchanged. The cost is in the fragments the history touched, never a
//! scan of the whole table, and never a sort. Each side's rows come with the delta: the base row of
//! every id the side removed and the side row of every id it added, so no id is looked up by a
//! filter over the whole table.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};
use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance_core::ROW_ADDR;
use lance_table::format::Fragment;

use crate::error::{Context, Error, Result};
use crate::schema::TypeDef;
use crate::table::CHUNK_ROWS;
use crate::value::{Row, row_id, rows_from_batch};

/// Deletion vectors read at once while diffing two versions (each read is one small object).
const CONCURRENT_READS: usize = 16;

/// What one side changed since the base, with the rows.
#[derive(Debug, Default)]
pub struct SideDelta {
    /// Base rows the side no longer has at the same place (deleted, rewritten or compacted), by id.
    pub removed: HashMap<String, Row>,
    /// Rows of fragments new on the side, by id.
    pub added: HashMap<String, Row>,
    /// Where each removed row was in the base, and each added row is on the side (row addresses:
    /// fragment id in the high 32 bits, offset in the low). A lander uses them to delete exactly
    /// these rows instead of searching the table for their ids.
    pub removed_at: HashMap<String, u64>,
    pub added_at: HashMap<String, u64>,
}

impl SideDelta {
    /// Every id the side may have changed.
    pub fn ids(&self) -> BTreeSet<String> {
        self.removed.keys().chain(self.added.keys()).cloned().collect()
    }

    /// The side's row for `id`, given the base's.
    pub fn row_after<'a>(&'a self, id: &str, base: Option<&'a Row>) -> Option<&'a Row> {
        match self.added.get(id) {
            Some(row) => Some(row),
            None if self.removed.contains_key(id) => None,
            None => base,
        }
    }

    /// The base's row for an id this side touched (a keyed table holds one live row per id, so a
    /// side that added a row for an id the base held also removed the base's).
    pub fn base_row(&self, id: &str) -> Option<&Row> {
        self.removed.get(id)
    }
}

/// What makes a fragment's live rows what they are: its data files and overlay files (the cell
/// values), and its deletion file (which rows are live). An overlay changes cell values in place
/// without touching either of the others, so it is part of the identity: a fragment whose overlays
/// differ is matched to nothing and counts as removed from the base and added on the side, whose
/// scan reads it with its overlays applied; the row comparator then drops the rows unchanged.
fn signature(f: &Fragment) -> (Vec<String>, Option<(u64, u64)>) {
    let files = f.files.iter().chain(f.overlays.iter().map(|o| &o.data_file)).map(|d| d.path.clone()).collect();
    let deletion = f.deletion_file.as_ref().map(|d| (d.id, d.read_version));
    (files, deletion)
}

/// Deleted rows are read back by row address, which is what a row id is only without stable row ids.
fn refuse_stable_row_ids(t: &TypeDef, base: &Dataset, side: &Dataset) -> Result<()> {
    if base.manifest().uses_stable_row_ids() || side.manifest().uses_stable_row_ids() {
        return Err(Error::Unsupported {
            detail: format!("the {} table uses stable row ids, which graph tables are never created with", t.key()),
        });
    }
    Ok(())
}

/// The rows of fragments new on `side` (not in `base`), with their addresses.
async fn added_rows(t: &TypeDef, base: &Dataset, side: &Dataset, delta: &mut SideDelta) -> Result<()> {
    let base_files: BTreeSet<Vec<String>> = base.manifest().fragments.iter().map(|f| signature(f).0).collect();
    let added: Vec<Fragment> =
        side.manifest().fragments.iter().filter(|f| !base_files.contains(&signature(f).0)).cloned().collect();
    for (row, at) in scan_fragments(t, side, added).await? {
        let id = row_id(&row).to_string();
        delta.added_at.insert(id.clone(), at);
        delta.added.insert(id, row);
    }
    Ok(())
}

/// What `side` changed relative to `base`, as far as the ids `other` touched are concerned: the
/// rows `side` added (all of them: an added row may hold any id), and which of `other`'s removed
/// base rows `side` removed too. The latter needs no read of rows at all: a base row at address
/// `a` is gone on `side` when `side` no longer holds `a`'s fragment with the same files, or its
/// deletion vector there holds `a`'s offset; only those fragments' deletion vectors are read.
/// (The merge asks this of the target: the ids the target alone touched do not matter to it.)
pub async fn side_delta_over(t: &TypeDef, base: &Dataset, side: &Dataset, other: &SideDelta) -> Result<SideDelta> {
    refuse_stable_row_ids(t, base, side)?;
    let mut delta = SideDelta::default();
    added_rows(t, base, side, &mut delta).await?;
    let base_by_id: HashMap<u64, &Fragment> = base.manifest().fragments.iter().map(|f| (f.id, f)).collect();
    let side_by_files: HashMap<Vec<String>, &Fragment> =
        side.manifest().fragments.iter().map(|f| (signature(f).0, f)).collect();
    // Per base fragment the other side took rows from: how `side` holds it now.
    let mut redeleted: BTreeMap<u64, (&Fragment, &Fragment)> = BTreeMap::new();
    let mut gone: BTreeSet<u64> = BTreeSet::new();
    for a in other.removed_at.values() {
        let id = a >> 32;
        let b = base_by_id.get(&id).ok_or_else(|| Error::Corrupt {
            detail: format!("a base row of {} is at fragment {id}, which the base does not hold", t.key()),
        })?;
        let (files, deletion) = signature(b);
        match side_by_files.get(&files) {
            None => {
                gone.insert(id);
            }
            Some(f) if signature(f).1 != deletion => {
                redeleted.insert(id, (*b, *f));
            }
            Some(_) => {}
        }
    }
    let reads: Vec<_> = redeleted.values().map(|(b, f)| newly_deleted(base, b, side, f)).collect();
    let deleted: HashSet<u64> =
        futures::stream::iter(reads).buffered(CONCURRENT_READS).try_concat().await?.into_iter().collect();
    for (id, a) in &other.removed_at {
        if gone.contains(&(a >> 32)) || deleted.contains(a) {
            delta.removed_at.insert(id.clone(), *a);
            delta.removed.insert(id.clone(), other.removed[id].clone());
        }
    }
    Ok(delta)
}

/// What `side` changed relative to `base` (two versions of one table's lineage).
pub async fn side_delta(t: &TypeDef, base: &Dataset, side: &Dataset) -> Result<SideDelta> {
    refuse_stable_row_ids(t, base, side)?;
    let base_frags: HashMap<Vec<String>, &Fragment> =
        base.manifest().fragments.iter().map(|f| (signature(f).0, f)).collect();
    let side_files: BTreeSet<Vec<String>> = side.manifest().fragments.iter().map(|f| signature(f).0).collect();
    let mut delta = SideDelta::default();
    let mut redeleted = Vec::new();
    for f in side.manifest().fragments.iter() {
        let (files, deletion) = signature(f);
        match base_frags.get(&files) {
            Some(b) if signature(b).1 != deletion => redeleted.push((*b, f)),
            _ => {}
        }
    }
    // One deletion-vector pair per touched fragment: read them concurrently, not one by one.
    // (The futures are built first: a closure inside the stream would make the merge's future
    // too lifetime-generic to be spawned.)
    let reads: Vec<_> = redeleted.into_iter().map(|(b, f)| newly_deleted(base, b, side, f)).collect();
    let deleted_addresses: Vec<u64> = futures::stream::iter(reads).buffered(CONCURRENT_READS).try_concat().await?;
    added_rows(t, base, side, &mut delta).await?;
    let removed: Vec<Fragment> =
        base.manifest().fragments.iter().filter(|f| !side_files.contains(&signature(f).0)).cloned().collect();
    for (row, at) in scan_fragments(t, base, removed).await? {
        let id = row_id(&row).to_string();
        delta.removed_at.insert(id.clone(), at);
        delta.removed.insert(id, row);
    }
    for chunk in deleted_addresses.chunks(CHUNK_ROWS) {
        for (row, at) in take_addresses(t, base, chunk).await? {
            let id = row_id(&row).to_string();
            delta.removed_at.insert(id.clone(), at);
            delta.removed.insert(id, row);
        }
    }
    Ok(delta)
}

/// Row addresses (in the base) the side's deletion vector of one fragment adds.
async fn newly_deleted(base: &Dataset, b: &Fragment, side: &Dataset, f: &Fragment) -> Result<Vec<u64>> {
    let missing = || Error::Corrupt { detail: format!("fragment {} is listed but cannot be opened", b.id) };
    let before = base
        .get_fragment(b.id as usize)
        .ok_or_else(missing)?
        .get_deletion_vector()
        .await
        .lance("reading a deletion vector")?;
    let after = side
        .get_fragment(f.id as usize)
        .ok_or_else(missing)?
        .get_deletion_vector()
        .await
        .lance("reading a deletion vector")?;
    let Some(after) = after else { return Ok(Vec::new()) };
    Ok(after
        .to_sorted_iter()
        .filter(|offset| !before.as_ref().is_some_and(|dv| dv.contains(*offset)))
        .map(|offset| (b.id << 32) | offset as u64)
        .collect())
}

/// The live rows at `addresses` (all columns) with their addresses.
async fn take_addresses(t: &TypeDef, ds: &Dataset, addresses: &[u64]) -> Result<Vec<(Row, u64)>> {
    let what = || format!("reading deleted {} rows", t.key());
    let batch = Arc::new(ds.clone())
        .take_builder(addresses, ds.schema().clone())
        .lance(what())?
        .with_row_address(true)
        .execute()
        .await
        .lance(what())?;
    with_addresses(t, &batch)
}

/// Live rows of `fragments`, all columns, in bounded batches, with their row addresses.
async fn scan_fragments(t: &TypeDef, ds: &Dataset, fragments: Vec<Fragment>) -> Result<Vec<(Row, u64)>> {
    if fragments.is_empty() {
        return Ok(Vec::new());
    }
    let mut scanner = ds.scan();
    scanner
        .with_fragments(fragments)
        .with_row_address()
        .batch_size(CHUNK_ROWS)
        .batch_size_bytes(crate::table::CHUNK_BYTES as u64);
    let batches: Vec<RecordBatch> = scanner
        .try_into_stream()
        .await
        .lance(format!("reading changed {} rows", t.key()))?
        .try_collect()
        .await
        .lance(format!("reading changed {} rows", t.key()))?;
    let mut rows = Vec::new();
    for b in &batches {
        rows.extend(with_addresses(t, b)?);
    }
    Ok(rows)
}

/// Split a batch read with `_rowaddr` into rows and their addresses.
fn with_addresses(t: &TypeDef, batch: &RecordBatch) -> Result<Vec<(Row, u64)>> {
    let corrupt = || Error::Corrupt { detail: format!("a read of {} came back without row addresses", t.key()) };
    let at = batch.schema().index_of(ROW_ADDR).map_err(|_| corrupt())?;
    let addresses = batch.column(at).as_any().downcast_ref::<UInt64Array>().ok_or_else(corrupt)?.clone();
    let mut values = batch.clone();
    values.remove_column(at);
    let rows = rows_from_batch(t, &values)?;
    debug_assert_eq!(rows.len(), addresses.len(), "one address per row");
    Ok(rows.into_iter().zip(addresses.values().iter().copied()).collect())
}
