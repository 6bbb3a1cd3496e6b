//! O(delta) change detection: the ids one side may have changed since the base, from the two
//! versions' fragment lists rather than from a scan of the table.
//!
//! Every data file name is a fresh UUID and every deletion file carries a random id, so a fragment
//! whose data files and deletion file are the same in both versions holds the same live rows, on
//! any Lance branch (a branch's inherited fragments differ only in `base_id`, which is ignored).
//! What differs is what the history since the base added, deleted or removed:
//!
//! - a fragment only in the side (added by an insert, upsert or compaction): its live ids;
//! - a fragment in both whose deletion file changed: the ids live in the base and deleted on the
//!   side (read from the id column of that fragment only);
//! - a fragment only in the base (removed): its live ids in the base.
//!
//! The result over-approximates (a compaction rewrites rows without changing them); the row
//! comparator then finds those unchanged. The cost is in the fragments the history touched, never a
//! scan of the whole table, and never a sort.

use std::collections::{BTreeSet, HashMap};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use futures::TryStreamExt;
use lance::Dataset;
use lance_table::format::Fragment;

use crate::error::{Context, Error, Result};

/// What makes a fragment's live rows what they are.
fn signature(f: &Fragment) -> (Vec<String>, Option<(u64, u64)>) {
    let files = f.files.iter().map(|d| d.path.clone()).collect();
    let deletion = f.deletion_file.as_ref().map(|d| (d.id, d.read_version));
    (files, deletion)
}

/// The ids `side` may have changed relative to `base` (two versions of one table's lineage).
pub async fn touched_ids(base: &Dataset, side: &Dataset) -> Result<BTreeSet<String>> {
    let base_frags: HashMap<Vec<String>, &Fragment> =
        base.manifest().fragments.iter().map(|f| (signature(f).0, f)).collect();
    let side_files: BTreeSet<Vec<String>> = side.manifest().fragments.iter().map(|f| signature(f).0).collect();
    let mut out = BTreeSet::new();
    let mut added = Vec::new();
    for f in side.manifest().fragments.iter() {
        let (files, deletion) = signature(f);
        match base_frags.get(&files) {
            None => added.push(f.clone()),
            Some(b) if signature(b).1 != deletion => {
                let live_before = ids_with_address(base, vec![(*b).clone()]).await?;
                let live_after: BTreeSet<u64> =
                    ids_with_address(side, vec![f.clone()]).await?.into_iter().map(|(a, _)| a).collect();
                out.extend(live_before.into_iter().filter(|(a, _)| !live_after.contains(a)).map(|(_, id)| id));
            }
            Some(_) => {}
        }
    }
    if !added.is_empty() {
        out.extend(ids_with_address(side, added).await?.into_iter().map(|(_, id)| id));
    }
    let removed: Vec<Fragment> =
        base.manifest().fragments.iter().filter(|f| !side_files.contains(&signature(f).0)).cloned().collect();
    if !removed.is_empty() {
        out.extend(ids_with_address(base, removed).await?.into_iter().map(|(_, id)| id));
    }
    Ok(out)
}

/// (row address, id) of the live rows of `fragments` (the id column only).
async fn ids_with_address(ds: &Dataset, fragments: Vec<Fragment>) -> Result<Vec<(u64, String)>> {
    let mut scanner = ds.scan();
    scanner.with_fragments(fragments).project(&["id"]).lance("projecting ids")?;
    scanner.with_row_address().batch_size(crate::table::CHUNK_ROWS);
    let batches: Vec<RecordBatch> = scanner
        .try_into_stream()
        .await
        .lance("reading changed ids")?
        .try_collect()
        .await
        .lance("reading changed ids")?;
    let mut out = Vec::new();
    for b in batches {
        let (Some(ids), Some(addrs)) = (b.column_by_name("id"), b.column_by_name("_rowaddr")) else {
            return Err(Error::Corrupt { detail: "a table scan returned no id or row address".into() });
        };
        let (Some(ids), Some(addrs)) = (ids.as_string_opt::<i32>(), addrs.as_primitive_opt::<UInt64Type>()) else {
            return Err(Error::Corrupt { detail: "a table's id column is not a string".into() });
        };
        out.extend((0..b.num_rows()).map(|i| (addrs.value(i), ids.value(i).to_string())));
    }
    Ok(out)
}
