//! Judge a staged (uncommitted) transaction against everything committed after its read version,
//! with our driver and, side by side, with Lance's resolver.

use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::index::DatasetIndexExt;
use lance_actions::table_class::ClassStamp;
use lance_actions::{ActionTxn, AnyAction, Inputs, Resolution, TableState, resolve};
use lance_select::RowAddrTreeMap;
use roaring::RoaringBitmap;

use crate::deletions::DeletionFacts;
use crate::error::{Error, LanceContext, Result};
use crate::history::{actions_of, committed_since, peers_of};
use crate::oracle::{LanceVerdict, lance_verdict};

/// Both verdicts for one staged transaction.
#[derive(Debug)]
pub struct Judgement {
    pub read_version: u64,
    pub latest_version: u64,
    pub resolution: Resolution,
    pub lance: LanceVerdict,
}

/// The table state of a dataset version, indices included.
///
/// A manifest without an index section has no index: Lance 14.0.2 reads the list from that section
/// and gives an empty one without it (`lance-table` `io/manifest.rs:131`, `read_manifest_indexes`),
/// with nothing to infer or remap in an empty list (`lance` `index.rs:3825`, `load_all_indices`);
/// Lance's compaction takes the same shortcut (`dataset/index.rs:39`, `load_indices_for_remapping`).
/// The state of such a version is then made without Lance's index-list lookup, 5 to 7 us of its
/// session cache (`design/benchmarks.md`, sixteenth session). Debug builds ask Lance all the same.
pub async fn table_state(dataset: &Dataset) -> Result<TableState> {
    if dataset.manifest().index_section.is_none() {
        if cfg!(debug_assertions) {
            let listed = dataset.load_indices().await.lance("loading index metadata")?;
            debug_assert!(listed.is_empty(), "a manifest without an index section lists indices: {listed:?}");
        }
        return Ok(TableState::from_manifest(dataset.manifest(), &[]));
    }
    let indices = dataset.load_indices().await.lance("loading index metadata")?;
    Ok(TableState::from_manifest(dataset.manifest(), &indices))
}

/// Put the caller's affected rows on our deletion-vector actions, so row-level rebase needs no IO.
pub fn attach_affected_rows(txn: &mut ActionTxn, affected: Option<&RowAddrTreeMap>) {
    let Some(affected) = affected else { return };
    for action in txn.actions.iter_mut() {
        if let AnyAction::UpdateDeletionVector(u) = action
            && let Some(rows) = affected.get_fragment_bitmap(u.fragment.id as u32)
        {
            u.affected_rows = Some(rows.clone());
        }
    }
}

/// Read the class each restore of `txn` would bring back (the restored version's frozen config and
/// primary key), so the model can refuse a restore that changes a table's class
/// (`design/fencing.md`, "A `Restore` keeps the class"). A version that cannot be read stays
/// unknown, which the model refuses on a classed table.
pub async fn attach_restore_targets(txn: &mut ActionTxn, dataset: &Dataset) {
    for action in txn.actions.iter_mut() {
        if let AnyAction::Restore(r) = action
            && r.target.is_none()
            && let Ok(old) = dataset.checkout_version(r.version).await
        {
            r.target = Some(ClassStamp::of(&old.manifest().config, &old.manifest().schema));
        }
    }
}

/// Rows a staged transaction deleted, derived from its deletion files: the new vector minus the one
/// at the read version. This is what a `.txn` file on disk cannot carry.
pub async fn derive_affected_rows(at_read: &Arc<Dataset>, txn: &Transaction) -> Result<Option<RowAddrTreeMap>> {
    let ours = actions_of(txn).map_err(|source| Error::Model { source })?;
    let mut map = RowAddrTreeMap::default();
    let mut any = false;
    for action in &ours.actions {
        let AnyAction::UpdateDeletionVector(u) = action else { continue };
        let after = deleted_rows(at_read, &u.fragment).await?;
        let before = match at_read.manifest().fragments.iter().find(|f| f.id == u.fragment.id) {
            Some(f) => deleted_rows(at_read, f).await?,
            None => RoaringBitmap::new(),
        };
        map.insert_bitmap(u.fragment.id as u32, after - before);
        any = true;
    }
    Ok(any.then_some(map))
}

/// The row offsets deleted in `fragment` (see [`crate::deletions::read_deleted_rows`]).
pub use crate::deletions::read_deleted_rows as deleted_rows;

/// Judge `staged` (read at `staged.read_version`) against `latest`'s history.
pub async fn judge(
    latest: &Arc<Dataset>,
    staged: &Transaction,
    affected_rows: Option<&RowAddrTreeMap>,
) -> Result<Judgement> {
    let read_version = staged.read_version;
    let at_read =
        Arc::new(latest.checkout_version(read_version).await.lance(format!("opening version {read_version}"))?);
    let committed = committed_since(latest, read_version).await?;
    judge_against(&at_read, latest, &committed, staged, affected_rows).await
}

/// Judge `staged` against an explicit list of committed transactions. `latest` is the dataset the
/// commit would land on; for a peer that was never written (a what-if) it is `at_read` itself.
pub async fn judge_against(
    at_read: &Arc<Dataset>,
    latest: &Arc<Dataset>,
    committed: &[(u64, Transaction)],
    staged: &Transaction,
    affected_rows: Option<&RowAddrTreeMap>,
) -> Result<Judgement> {
    let peers = peers_of(committed, &at_read.manifest().schema)?;
    let mut ours = actions_of(staged).map_err(|source| Error::Model { source })?;
    attach_affected_rows(&mut ours, affected_rows);
    attach_restore_targets(&mut ours, latest).await;
    let base = table_state(at_read).await?;
    let head = table_state(latest).await?;
    let facts = DeletionFacts::load(latest, &base, &ours, &peers).await?;
    let resolution = resolve(&ours, &Inputs { base: &base, head: Some(&head), peers: &peers, facts: &facts });
    let lance = lance_verdict(at_read, latest, staged, affected_rows, committed).await;
    Ok(Judgement {
        read_version: staged.read_version,
        latest_version: committed.last().map(|(v, _)| *v).unwrap_or(latest.manifest().version),
        resolution,
        lance,
    })
}
