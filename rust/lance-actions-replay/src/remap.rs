//! Re-binding a source commit's actions to the target: a loop over each action's own
//! [`ActionLife::rebind`], with the target's coordinates supplied here.
//!
//! - Fragments that existed at the merge base have the same id on both sides; fragments the source
//!   created later map to the ids their replays were given on the target ([`FragmentMap`]).
//! - Files are reached in place through grafted bases ([`Graft`]).
//! - What each action does with them, and why one cannot be replayed (a typed [`RebindRefusal`],
//!   before anything is written), is the action module's (`design/replay.md`, section 2).

use std::collections::HashMap;

use lance_actions::{ActionLife, ActionTxn, AnyAction, RebindRefusal, Rebinder, TableState};
use lance_table::format::{DataFile, Fragment, IndexMetadata};
use lance_table::transaction::UpdatedFragmentOffsets;

use crate::graft::Graft;

/// Source fragment id -> target fragment id.
#[derive(Debug, Clone, Default)]
pub struct FragmentMap {
    /// Ids up to this one existed at the merge base: the same on both sides. `None`: the merge
    /// base never had a fragment, so every fragment is one a source commit created.
    pub fork_max: Option<u64>,
    pub created: HashMap<u64, u64>,
}

/// The replay of a source commit created another number of fragments than the source commit did,
/// so its new fragments cannot be paired up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountMismatch {
    pub replayed: usize,
    pub source: usize,
}

impl FragmentMap {
    pub fn new(fork_max: Option<u64>) -> Self {
        Self { fork_max, created: HashMap::new() }
    }

    pub fn target(&self, source: u64) -> Result<u64, RebindRefusal> {
        if self.fork_max.is_some_and(|max| source <= max) {
            return Ok(source);
        }
        self.created.get(&source).copied().ok_or(RebindRefusal::UnreplayedFragment { fragment: source })
    }

    /// Record that the source's new fragments (ascending ids) became these target ids (ascending).
    pub fn record(&mut self, source_new: &[u64], target_new: &[u64]) -> Result<(), CountMismatch> {
        if source_new.len() != target_new.len() {
            return Err(CountMismatch { replayed: target_new.len(), source: source_new.len() });
        }
        debug_assert!(source_new.windows(2).all(|w| w[0] < w[1]), "source ids ascend");
        debug_assert!(target_new.windows(2).all(|w| w[0] < w[1]), "target ids ascend");
        debug_assert!(
            self.fork_max.is_none_or(|max| source_new.iter().all(|id| *id > max)),
            "a fragment a source commit created lies above the fork's ids"
        );
        for (source, target) in source_new.iter().copied().zip(target_new.iter().copied()) {
            let previous = self.created.insert(source, target);
            // Positive and negative space: a source fragment pairs with one target fragment, ever.
            debug_assert!(
                previous.is_none_or(|p| p == target),
                "source fragment {source} was mapped to {previous:?}, now to {target}"
            );
        }
        Ok(())
    }
}

/// What remapping needs from the target.
pub struct RemapCx<'a> {
    pub graft: &'a mut Graft,
    pub fragments: &'a FragmentMap,
    /// The target's state the replay will be committed on.
    pub head: &'a TableState,
}

impl Rebinder for RemapCx<'_> {
    fn fragment_id(&mut self, source: u64) -> Result<u64, RebindRefusal> {
        self.fragments.target(source)
    }

    fn head_fragment(&mut self, source: &Fragment) -> Result<Fragment, RebindRefusal> {
        let id = self.fragments.target(source.id)?;
        Ok(lance_actions::rebind::head_fragment_or_source(self.head, source, id))
    }

    fn head_fragment_ids(&self) -> Vec<u64> {
        // A BTreeMap's keys ascend.
        self.head.fragments.keys().copied().collect()
    }

    fn data_file(&mut self, file: &DataFile) -> Result<DataFile, RebindRefusal> {
        self.graft.data_file(file)
    }

    fn index(&mut self, index: &IndexMetadata) -> Result<IndexMetadata, RebindRefusal> {
        self.graft.index(index)
    }
}

/// The source commit's actions, bound to the target; or why the commit cannot be replayed.
pub fn remap(source: &ActionTxn, cx: &mut RemapCx<'_>) -> Result<ActionTxn, RebindRefusal> {
    let mut context = source.context.clone();
    context.assigned_fragment_ids.clear();
    if let Some(UpdatedFragmentOffsets(offsets)) = &source.context.updated_fragment_offsets {
        let mut mapped = HashMap::new();
        for (id, rows) in offsets {
            mapped.insert(cx.fragment_id(*id)?, rows.clone());
        }
        context.updated_fragment_offsets = Some(UpdatedFragmentOffsets(mapped));
    }
    let actions = source.actions.iter().map(|action| action.rebind(cx)).collect::<Result<Vec<_>, _>>()?;
    debug_assert_eq!(actions.len(), source.actions.len(), "every action is re-bound, none dropped");
    Ok(ActionTxn { context, actions })
}

/// Commits that change nothing a target could take: the grafts of earlier replays (bases the
/// target gains by its own graft when needed) and fragment-id reservations (ids of the source's id
/// space; a replayed fragment gets its id on the target when it lands).
pub fn is_graft_only(txn: &ActionTxn) -> bool {
    !txn.actions.is_empty()
        && txn.actions.iter().all(|a| matches!(a, AnyAction::AddBases(_) | AnyAction::ReserveFragmentIds(_)))
}
