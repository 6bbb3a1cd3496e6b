//! Deletion vectors: the one place this crate reads them, and the one identity they are known by.
//!
//! A deletion file is named by its fragment, the version that wrote it, its id within that version
//! and the base path that holds it (`DeletionFile::base_id`: a branch or a shallow clone reads its
//! parent's files through a base). Two fragments with equal [`DeletionKey`]s read the same rows, so
//! rows are cached by key: across the peers of one attempt, across the attempts of one commit, and
//! for the rebase's union IO after the verdict.
//!
//! The rebase asks for the rows a fragment's deletion file deletes ([`RebaseFacts`]). Which files
//! matter is known from the actions alone (every deletion-vector change but those a later one of
//! the same fragment supersedes, and the base fragment it started from), so they are read up
//! front, concurrently, and served from memory.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::fragment::FileFragment;
use lance_actions::actions::update_deletion_vector::UpdateDeletionVector;
use lance_actions::{Action, ActionTxn, AnyAction, ManifestPath, Peer, RebaseFacts, TableState};
use lance_table::format::Fragment;
use roaring::RoaringBitmap;

use crate::error::{LanceContext, Result};

/// Identity of a deletion vector: the fragment, and the file holding it (`None`: no file, no rows
/// deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeletionKey {
    pub fragment: u64,
    pub file: Option<DeletionFileId>,
}

/// Which deletion file: written at `read_version` with `id`, under base `base_id` (`None`: the
/// table's own directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeletionFileId {
    pub read_version: u64,
    pub id: u64,
    pub base_id: Option<u32>,
}

impl DeletionKey {
    pub fn of(fragment: &Fragment) -> Self {
        let file = fragment.deletion_file.as_ref().map(|d| DeletionFileId {
            read_version: d.read_version,
            id: d.id,
            base_id: d.base_id,
        });
        Self { fragment: fragment.id, file }
    }
}

/// The row offsets deleted in `fragment`, read through `dataset` (which resolves its base paths).
/// A fragment without a deletion file deletes nothing and costs no IO.
pub async fn read_deleted_rows(dataset: &Arc<Dataset>, fragment: &Fragment) -> Result<RoaringBitmap> {
    if fragment.deletion_file.is_none() {
        return Ok(RoaringBitmap::new());
    }
    let vector = FileFragment::new(dataset.clone(), fragment.clone())
        .get_deletion_vector()
        .await
        .lance(format!("reading the deletion vector of fragment {}", fragment.id))?;
    Ok(vector.map(|v| RoaringBitmap::from(v.as_ref())).unwrap_or_default())
}

/// Deleted rows of every deletion vector the resolution may compare, by identity. Files are
/// immutable once written, so the cache never goes stale; [`DeletionFacts::load_more`] reads only
/// the keys it does not hold yet.
#[derive(Debug, Default, Clone)]
pub struct DeletionFacts {
    rows: HashMap<DeletionKey, RoaringBitmap>,
}

impl RebaseFacts for DeletionFacts {
    fn deleted_rows(&self, fragment: &Fragment) -> Option<RoaringBitmap> {
        if fragment.deletion_file.is_none() {
            return Some(RoaringBitmap::new());
        }
        self.rows.get(&DeletionKey::of(fragment)).cloned()
    }
}

pub(crate) fn vector_changes(txn: &ActionTxn) -> impl Iterator<Item = &UpdateDeletionVector> {
    txn.actions.iter().filter_map(|a| match a {
        AnyAction::UpdateDeletionVector(u) => Some(u),
        _ => None,
    })
}

/// The peers' vector changes of fragments in `ours` whose rows a rebase may compare: a vector
/// superseded by the next one of its fragment is judged through that one and never read
/// ([`UpdateDeletionVector::superseded`]). Fragments are filtered first: only ours cost the scan
/// of later peers.
fn compared_peer_changes<'a>(
    peers: &'a [Peer],
    ours: &'a BTreeSet<u64>,
) -> impl Iterator<Item = &'a UpdateDeletionVector> + 'a {
    peers.iter().flat_map(move |peer| {
        vector_changes(&peer.txn).filter(move |u| {
            ours.contains(&u.fragment.id)
                && !UpdateDeletionVector::superseded(peers, peer.version, peer.txn.context.shell, u)
        })
    })
}

/// Fragment ids named by any of the peers' masks: the fragments where our own vector's rows are
/// compared, so the only ones whose declared rows are checked (`commit::verify_declared_rows`) and
/// whose files are read for that ([`DeletionFacts::load_more`]). One definition serves both, so a
/// checked vector always has its files.
pub fn fragments_touched_by(peers: &[Peer]) -> BTreeSet<u64> {
    peers.iter().flat_map(|p| touched_fragments(&p.txn)).collect()
}

/// Fragment ids named by any of the transaction's masks.
fn touched_fragments(txn: &ActionTxn) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
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
    /// Read the deletion vectors that row-level rebase may compare: every vector change of ours on
    /// a fragment a peer touches, and every one of a peer that is not superseded on a fragment our
    /// transaction touches, plus the base version of each such fragment.
    pub async fn load(dataset: &Arc<Dataset>, base: &TableState, ours: &ActionTxn, peers: &[Peer]) -> Result<Self> {
        let mut facts = Self::default();
        facts.load_more(dataset, base, ours, peers, false).await?;
        Ok(facts)
    }

    /// [`DeletionFacts::load`] into this cache: only vectors not read before cost IO. With
    /// `declared_trusted` (rows Lance reported staging the delete, `commit::StagedDelete`), our own
    /// vectors that declare their rows are not read: the rebase uses the rows as declared, and no
    /// check compares them with the files.
    pub async fn load_more(
        &mut self,
        dataset: &Arc<Dataset>,
        base: &TableState,
        ours: &ActionTxn,
        peers: &[Peer],
        declared_trusted: bool,
    ) -> Result<()> {
        // Only vector changes are ever read: with none on either side (appends, a writer that only
        // adds fragments), there is nothing to look for. The sets below cost 4 to 6 us a commit at
        // two appending writers, inside the window before the manifest put (`design/benchmarks.md`).
        if vector_changes(ours).next().is_none() && peers.iter().all(|peer| vector_changes(&peer.txn).next().is_none())
        {
            return Ok(());
        }
        let ours_ids = touched_fragments(ours);
        // Our own vector's rows are compared only where a peer touched its fragment.
        let peer_ids = fragments_touched_by(peers);
        let our_changes = vector_changes(ours)
            .filter(|u| peer_ids.contains(&u.fragment.id))
            .filter(|u| !(declared_trusted && u.affected_rows.is_some()));
        let mut wanted: Vec<Fragment> = Vec::new();
        for change in our_changes.chain(compared_peer_changes(peers, &ours_ids)) {
            let fragment = &change.fragment;
            if ours_ids.contains(&fragment.id) {
                wanted.push(fragment.clone());
                if let Some(b) = base.fragment(fragment.id) {
                    wanted.push(b.clone());
                }
            }
        }
        wanted.retain(|f| f.deletion_file.is_some() && !self.rows.contains_key(&DeletionKey::of(f)));
        wanted.sort_by_key(DeletionKey::of);
        wanted.dedup_by_key(|f| DeletionKey::of(f));
        if wanted.is_empty() {
            return Ok(());
        }
        let read: Vec<(DeletionKey, RoaringBitmap)> = futures::stream::iter(wanted)
            .map(|fragment| read_keyed(dataset.clone(), fragment))
            .buffer_unordered(8)
            .try_collect()
            .await?;
        self.rows.extend(read);
        Ok(())
    }

    /// The rows `fragment`'s deletion file deletes: from the cache, else read (and kept).
    pub async fn rows_of(&mut self, dataset: &Arc<Dataset>, fragment: &Fragment) -> Result<RoaringBitmap> {
        if let Some(rows) = self.deleted_rows(fragment) {
            return Ok(rows);
        }
        let (key, rows) = read_keyed(dataset.clone(), fragment.clone()).await?;
        self.rows.insert(key, rows.clone());
        Ok(rows)
    }

    /// How many deletion vectors are held (for tests of the cache).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

async fn read_keyed(dataset: Arc<Dataset>, fragment: Fragment) -> Result<(DeletionKey, RoaringBitmap)> {
    let rows = read_deleted_rows(&dataset, &fragment).await?;
    Ok((DeletionKey::of(&fragment), rows))
}
