//! Stable-partition rewrites for the tagged table's samples: the shape the ported
//! `tagged_rewrite_conflicts` tests use (`tests/upstream/README.md`, "Left open").
//!
//! A stable partition moves the rows of its source fragments into several destinations and
//! records, in a row map file under `_fri/<map id>/`, which destination each source row went to;
//! its reuse-entry transition names that file instead of listing row addresses. Built here from
//! Lance's public API only: the destinations are staged (not committed) by Lance's writer
//! (`reuse::stage_one_fragment`), the row map by `lance_index`'s `RowMapWriter`, the entry by
//! `frag_reuse_entry_appending` at the read version. Rows go to destination `id % 2`, in scan
//! order, so each destination keeps its rows' order (what makes the partition stable).

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use lance::Dataset;
use lance::dataset::transaction::Operation;
use lance_index::frag_reuse::row_map::{RowMapWriter, SourceRows};
use lance_index::frag_reuse::stable_partition::MAPPING_FILE;
use lance_index::scalar::IndexStore;
use lance_index::scalar::lance_format::LanceIndexStore;
use lance_table::format::Fragment;
use lance_table::format::pb::fragment_reuse_index_details::{StablePartition, Transition, transition};
use roaring::RoaringBitmap;

use super::reuse::{digest, fragment, rewrite, shape_error, stage_one_fragment};
use crate::error::{LanceContext, Result};

/// Destinations of every partition: rows with an even `id`, rows with an odd one.
const DESTINATIONS: u16 = 2;

/// A stable partition of fragments `sources` (in that order) into `dest`, `dest + 1`, with its
/// row map written into the table at `ds` and its tagged entry built at `ds`'s version.
pub(super) async fn stable_partition(ds: &Arc<Dataset>, sources: &[u64], dest: u64) -> Result<Operation> {
    let old = sources.iter().map(|id| fragment(ds, *id)).collect::<Result<Vec<_>>>()?;
    let rows = rows_of(ds, &old).await?;
    let labels = labels(&rows)?;
    let mut new = Vec::new();
    for label in 0..DESTINATIONS {
        new.push(staged_destination(ds, &rows, &labels, label, dest + u64::from(label)).await?);
    }
    let mapping = write_row_map(ds, &old, &labels).await?;
    let transition = Transition {
        sources: old.iter().map(digest).collect(),
        destinations: new.iter().map(digest).collect(),
        mapping: Some(transition::Mapping::StablePartition(mapping)),
    };
    let entry = lance::index::frag_reuse::frag_reuse_entry_appending(ds, vec![transition])
        .await
        .lance("building a stable-partition reuse entry")?;
    Ok(rewrite(old, new, Some(entry)))
}

/// The live rows of `fragments`, in scan order (the order the row map's labels follow).
async fn rows_of(ds: &Dataset, fragments: &[Fragment]) -> Result<RecordBatch> {
    let mut scan = ds.scan();
    scan.with_fragments(fragments.to_vec());
    scan.try_into_batch().await.lance("reading a stable partition's source rows")
}

/// Each row's destination: its `id`'s parity.
fn labels(rows: &RecordBatch) -> Result<Vec<u16>> {
    let ids = rows.column_by_name("id").and_then(|c| c.as_any().downcast_ref::<Int64Array>());
    let ids = ids.ok_or_else(|| shape_error("labelling a stable partition", "the rows have no Int64 id"))?;
    Ok(ids.values().iter().map(|id| id.rem_euclid(i64::from(DESTINATIONS)) as u16).collect())
}

/// The rows labelled `label`, in order, staged as one fragment numbered `id`.
async fn staged_destination(
    ds: &Arc<Dataset>,
    rows: &RecordBatch,
    labels: &[u16],
    label: u16,
    id: u64,
) -> Result<Fragment> {
    let what = "staging a stable partition's destination";
    // One-row slices keep the order without a filter kernel; the writer joins them into one file.
    let part: Vec<RecordBatch> =
        labels.iter().enumerate().filter(|(_, l)| **l == label).map(|(row, _)| rows.slice(row, 1)).collect();
    if part.is_empty() {
        return Err(shape_error(what, format!("no source row goes to destination {label}")));
    }
    stage_one_fragment(ds, part, id, what).await
}

/// The row map of `labels` over `sources`, written under `_fri/<map id>/` where Lance's reader
/// looks for it, and the mapping that names it.
async fn write_row_map(ds: &Dataset, sources: &[Fragment], labels: &[u16]) -> Result<StablePartition> {
    let what = "writing a stable partition's row map";
    let mut layout = Vec::new();
    for source in sources {
        layout.push(SourceRows {
            physical_rows: source.physical_rows.unwrap_or_default() as u64,
            deleted: deleted_rows(ds, source.id).await?,
        });
    }
    let map_id = uuid::Uuid::new_v4().to_string();
    let (store, base) = lance_io::object_store::ObjectStore::from_uri(ds.uri()).await.lance(what)?;
    let index_store = LanceIndexStore::with_format_version(
        store,
        base.join("_fri").join(map_id.as_str()),
        Arc::new(lance_core::cache::LanceCache::with_capacity(1024 * 1024)),
        lance_file::version::ConcreteFileVersion::V2_1,
    );
    let file = index_store.new_index_file(MAPPING_FILE, RowMapWriter::schema()).await.lance(what)?;
    let mut writer = RowMapWriter::try_new(file, layout, u32::from(DESTINATIONS)).lance(what)?;
    writer.append_labels(labels).await.lance(what)?;
    let (file, _) = writer.finish().await.lance(what)?;
    Ok(StablePartition { map_id, map_size_bytes: file.size_bytes, base_id: None })
}

/// Fragment `id`'s deleted offsets at `ds`'s version (the row map leaves them unlabelled).
async fn deleted_rows(ds: &Dataset, id: u64) -> Result<Option<RoaringBitmap>> {
    let what = "reading a stable partition source's deletions";
    let file_fragment =
        ds.get_fragment(id as usize).ok_or_else(|| shape_error(what, format!("the table has no fragment {id}")))?;
    let deleted = file_fragment.get_deletion_vector().await.lance(what)?;
    Ok(deleted.map(|v| v.iter().collect()))
}
