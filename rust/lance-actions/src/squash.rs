//! Squash: a range of commits of one branch composed into one transaction, pure.
//!
//! Appends, deletes and row updates compose: a fragment added in the range and removed later in it
//! never appears; deletions in one fragment are unioned; index-coverage invalidations are joined.
//! Each action module says whether and how it composes ([`crate::ActionLife::squash_into`]); what one
//! Lance operation cannot carry is refused with a typed [`SquashRefusal`]. The replay layer
//! (`compose.rs`) feeds the commits in order and replays the result (`design/replay.md`, squash).

use std::collections::{BTreeMap, BTreeSet};

use lance_table::format::Fragment;
use lance_table::transaction::UpdateMode;
use roaring::RoaringBitmap;
use snafu::Snafu;

use crate::action::{ActionKind, AnyAction};
use crate::actions::add_fragments::AddFragments;
use crate::actions::invalidate_index_coverage::InvalidateIndexCoverage;
use crate::actions::remove_fragments::RemoveFragments;
use crate::actions::update_deletion_vector::UpdateDeletionVector;
use crate::context::OperationKind;
use crate::keys::InsertedKeys;
use crate::life::ActionLife;
use crate::txn::ActionTxn;

/// Why a range of commits cannot be squashed into one.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum SquashRefusal {
    #[snafu(display("the range is empty"))]
    EmptyRange,

    /// A commit's actions add more fragments than the ids its version created.
    #[snafu(display("version {version} added more fragments than it created"))]
    MoreFragmentsThanIds { version: u64 },

    /// A deletion inside a fragment the range itself added: one Lance commit cannot add a fragment
    /// that already carries deletions.
    #[snafu(display(
        "version {version} deletes rows of fragment {fragment}, added within the range: one commit cannot add a \
         fragment with deletions"
    ))]
    DeletesAddedFragment { version: u64, fragment: u64 },

    /// Lance's key filter covers one insert; several keyed inserts would need one filter for all.
    #[snafu(display("squashing several keyed inserts would need one key filter for all of them"))]
    SeveralKeyedInserts,

    /// Index coverage changes ride only on an Update, and the range holds none.
    #[snafu(display("an index-coverage change needs an update in the range"))]
    CoverageWithoutUpdate,

    /// The action is not an append, a delete or a row update.
    #[snafu(display("squash composes appends, deletes and updates, not {action:?}"))]
    NotComposable { action: ActionKind },
}

/// The composition so far of the commits fed in.
#[derive(Debug, Default)]
pub struct Squash {
    /// Fragments added within the range, by the id their commit created them with.
    pub(crate) added: BTreeMap<u64, Fragment>,
    /// Fragments that existed before the range and were removed in it.
    pub(crate) removed: BTreeSet<u64>,
    /// Fragments that existed before the range, with every row the range deleted in them.
    pub(crate) deleted: BTreeMap<u64, (Fragment, RoaringBitmap)>,
    pub(crate) invalidated_fragments: BTreeSet<u64>,
    /// Modified fields in first-seen order (Lance's `fields_modified` keeps an order).
    pub(crate) invalidated_fields: Vec<u32>,
    /// The first declared key set of the range's inserts.
    pub(crate) keys: Option<InsertedKeys>,
    pub(crate) keyed: bool,
    /// How many commits of the range insert fragments.
    pub(crate) inserting_commits: usize,
    /// The commit being fed: its version and the ids it created that its adds have not yet taken.
    pub(crate) version: u64,
    pub(crate) unclaimed_ids: std::collections::VecDeque<u64>,
}

/// A range composed into one transaction, with the ids (on the source chain) of the fragments it adds.
#[derive(Debug, Clone, PartialEq)]
pub struct Squashed {
    pub txn: ActionTxn,
    pub new_ids: Vec<u64>,
}

impl Squash {
    /// Feed one commit of the range (in order): its version, the fragment ids it created (ascending)
    /// and its actions.
    pub fn commit(&mut self, version: u64, new_ids: &[u64], actions: &[AnyAction]) -> Result<(), SquashRefusal> {
        debug_assert!(new_ids.windows(2).all(|w| w[0] < w[1]), "a commit's new fragment ids ascend");
        self.version = version;
        self.unclaimed_ids = new_ids.iter().copied().collect();
        if actions.iter().any(|a| matches!(a, AnyAction::AddFragments(_))) {
            self.inserting_commits += 1;
        }
        for action in actions {
            action.squash_into(self)?;
        }
        Ok(())
    }

    /// The next id the commit being fed created, for the next fragment it adds.
    pub(crate) fn claim_new_id(&mut self) -> Result<u64, SquashRefusal> {
        self.unclaimed_ids.pop_front().ok_or(SquashRefusal::MoreFragmentsThanIds { version: self.version })
    }

    /// The one transaction the range composes to.
    pub fn finish(self) -> Result<Squashed, SquashRefusal> {
        if self.keyed && self.inserting_commits > 1 {
            return Err(SquashRefusal::SeveralKeyedInserts);
        }
        let mut actions: Vec<AnyAction> = Vec::new();
        for (_, (fragment, rows)) in self.deleted {
            actions.push(UpdateDeletionVector::new(fragment, Some(rows)).into());
        }
        if !self.removed.is_empty() {
            actions.push(RemoveFragments { ids: self.removed.into_iter().collect() }.into());
        }
        let changes_existing = !actions.is_empty();
        let new_ids: Vec<u64> = self.added.keys().copied().collect();
        let adds = !self.added.is_empty();
        let keyed_add = adds && self.keys.is_some();
        if adds {
            actions.push(AddFragments { fragments: self.added.into_values().collect(), keys: self.keys }.into());
        }
        // An Append carries no keys (Lance's Append has no key filter), so a keyed insert is an Update.
        let shell = match (adds, changes_existing) {
            (true, false) if !keyed_add => OperationKind::Append,
            (false, _) => OperationKind::Delete,
            _ => OperationKind::Update,
        };
        if !self.invalidated_fragments.is_empty() {
            if shell != OperationKind::Update {
                return Err(SquashRefusal::CoverageWithoutUpdate);
            }
            actions.push(
                InvalidateIndexCoverage::new(self.invalidated_fragments.into_iter().collect(), self.invalidated_fields)
                    .into(),
            );
        }
        let mut txn = ActionTxn::new(shell, actions);
        if shell == OperationKind::Update {
            txn.context.update_mode = Some(UpdateMode::RewriteRows);
        }
        Ok(Squashed { txn, new_ids })
    }
}
