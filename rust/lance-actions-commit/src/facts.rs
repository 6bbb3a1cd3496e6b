//! Row-level facts for rebase, read from storage before the pure driver runs.
//!
//! The driver asks for the rows deleted by a fragment's deletion file. Which files matter is known
//! from the actions alone (every deletion-vector change and the base fragment it started from), so
//! they are read up front, concurrently, and served from memory.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::fragment::FileFragment;
use lance_actions::{Action, ActionTxn, AnyAction, ManifestPath, Peer, RebaseFacts, TableState};
use lance_table::format::Fragment;
use roaring::RoaringBitmap;

use crate::error::{LanceContext, Result};

/// Identity of a deletion vector: the fragment and the file that holds it.
type DeletionKey = (u64, Option<(u64, u64)>);

fn key_of(fragment: &Fragment) -> DeletionKey {
    (fragment.id, fragment.deletion_file.as_ref().map(|d| (d.read_version, d.id)))
}

/// Deleted rows of every deletion vector the resolution may compare.
#[derive(Debug, Default, Clone)]
pub struct DeletionFacts {
    rows: HashMap<DeletionKey, RoaringBitmap>,
}

impl RebaseFacts for DeletionFacts {
    fn deleted_rows(&self, fragment: &Fragment) -> Option<RoaringBitmap> {
        if fragment.deletion_file.is_none() {
            return Some(RoaringBitmap::new());
        }
        self.rows.get(&key_of(fragment)).cloned()
    }
}

fn vector_changes(txn: &ActionTxn) -> impl Iterator<Item = &Fragment> {
    txn.actions.iter().filter_map(|a| match a {
        AnyAction::UpdateDeletionVector(u) => Some(&u.fragment),
        _ => None,
    })
}

/// Fragment ids named by any of the transaction's masks.
fn touched_fragments(txn: &ActionTxn) -> std::collections::BTreeSet<u64> {
    let mut ids = std::collections::BTreeSet::new();
    for action in &txn.actions {
        for path in action.reads().iter().chain(action.writes().iter()) {
            if let ManifestPath::Fragment { id, .. } = path {
                ids.insert(*id);
            }
        }
    }
    ids
}

impl DeletionFacts {
    /// Read the deletion vectors that row-level rebase may compare: every vector change (ours or a
    /// peer's) on a fragment our transaction touches, plus the base version of each such fragment.
    pub async fn load(dataset: &Arc<Dataset>, base: &TableState, ours: &ActionTxn, peers: &[Peer]) -> Result<Self> {
        let ours_ids = touched_fragments(ours);
        let mut wanted: Vec<Fragment> = Vec::new();
        for fragment in vector_changes(ours).chain(peers.iter().flat_map(|p| vector_changes(&p.txn))) {
            if ours_ids.contains(&fragment.id) {
                wanted.push(fragment.clone());
                if let Some(b) = base.fragment(fragment.id) {
                    wanted.push(b.clone());
                }
            }
        }
        wanted.retain(|f| f.deletion_file.is_some());
        wanted.sort_by_key(key_of);
        wanted.dedup_by_key(|f| key_of(f));
        let rows = futures::stream::iter(wanted)
            .map(|fragment| read_one(dataset.clone(), fragment))
            .buffer_unordered(8)
            .try_collect()
            .await?;
        Ok(Self { rows })
    }
}

async fn read_one(dataset: Arc<Dataset>, fragment: Fragment) -> Result<(DeletionKey, RoaringBitmap)> {
    let key = key_of(&fragment);
    let file = FileFragment::new(dataset, fragment);
    let vector =
        file.get_deletion_vector().await.lance(format!("reading the deletion vector of fragment {}", key.0))?;
    let rows = vector.map(|v| RoaringBitmap::from(v.as_ref())).unwrap_or_default();
    Ok((key, rows))
}
