//! RemoveFragments: fragments leave the table (a delete that emptied them, rows an update moved out).
//! Lowers to `Delete.deleted_fragment_ids` or `Update.removed_fragment_ids`.

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{FragmentScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct RemoveFragments {
    pub ids: Vec<u64>,
}

impl RemoveFragments {
    fn rebase_one(cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::RemoveFragments;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match peer.their_path {
            ManifestPath::FragmentSet | ManifestPath::FragmentIdCounter | ManifestPath::RowIdCounter => Verdict::Ok,
            // An update that removes a fragment has moved its rows, as read before the overlay, into
            // new fragments: the overlay's values would be dropped. Lance retries this too (it has no
            // affected rows to prove the moved rows miss the overlay).
            ManifestPath::Fragment { scope: FragmentScope::Overlays, .. } if cx.ours.moves_rows() => {
                peer.retry(K, Rule::RowsOverlap, "the rows we move out carry the committed overlay's values")
            }
            // An overlay on a fragment a delete removes disappears with its rows, which is what
            // removal means.
            ManifestPath::Fragment { scope: FragmentScope::Overlays, .. } => Verdict::Ok,
            ManifestPath::Fragment { scope: FragmentScope::Existence, .. } => {
                peer.retry(K, Rule::FragmentGone, "the committed transaction also removed or rewrote it")
            }
            // Any other committed change (rows deleted, columns replaced) would be silently lost.
            _ => peer.retry(K, Rule::RowsOverlap, "the committed transaction changed a fragment we remove"),
        }
    }
}

impl Action for RemoveFragments {
    fn kind(&self) -> ActionKind {
        ActionKind::RemoveFragments
    }

    fn reads(&self) -> Mask {
        Mask(self.ids.iter().map(|&id| ManifestPath::fragment(id, FragmentScope::Whole)).collect())
    }

    fn writes(&self) -> Mask {
        let mut mask = Mask::new().with(ManifestPath::FragmentSet);
        for &id in &self.ids {
            mask.push(ManifestPath::fragment(id, FragmentScope::Existence));
        }
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        match self.ids.iter().find(|id| state.fragment(**id).is_none()) {
            Some(id) => Err(invalid(ActionKind::RemoveFragments, format!("fragment {id} does not exist"))),
            None => Ok(()),
        }
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| Self::rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        for id in &self.ids {
            state.fragments.remove(id);
        }
    }
}

impl RemoveFragments {
    pub(crate) fn encode(&self) -> proto::RemoveFragments {
        proto::RemoveFragments { ids: self.ids.clone() }
    }

    pub(crate) fn decode(p: proto::RemoveFragments) -> Result<Self> {
        Ok(Self { ids: p.ids })
    }
}

impl ActionLife for RemoveFragments {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.removed_ids.extend(self.ids.iter().copied());
        Ok(())
    }

    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Ok(RemoveFragments { ids: rebind::fragment_ids(cx, &self.ids)? }.into())
    }

    /// A fragment the range added and later removed never appears; one that existed before the
    /// range is removed, and its deletions in the range no longer matter.
    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal> {
        for id in &self.ids {
            if squash.added.remove(id).is_none() {
                squash.removed.insert(*id);
                squash.deleted.remove(id);
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("fragments {:?}", self.ids)
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;
    use crate::txn::ActionTxn;

    fn remove(ids: &[u64]) -> ActionTxn {
        txn(OperationKind::Delete, vec![RemoveFragments { ids: ids.to_vec() }.into()])
    }

    pub(crate) fn cases() -> Vec<Case> {
        vec![
            case("remove_after_committed_remove_of_other_fragment_commutes", remove(&[0]), remove(&[1]), "ok"),
            case("remove_after_committed_remove_of_same_fragment_retries", remove(&[0]), remove(&[0]), "retry"),
        ]
    }

    #[test]
    fn rebind_maps_created_fragments_and_refuses_unreplayed_ones() {
        assert_eq!(rebound(RemoveFragments { ids: vec![2, 10] }), Ok(RemoveFragments { ids: vec![2, 20] }.into()));
        assert_eq!(rebound(RemoveFragments { ids: vec![11] }), Err(RebindRefusal::UnreplayedFragment { fragment: 11 }));
    }

    #[test]
    fn squash_of_a_fragment_added_then_removed_leaves_nothing() {
        let add = crate::actions::add_fragments::AddFragments { fragments: vec![fragment(0)], keys: None };
        let s = squashed(vec![
            (5, vec![4], vec![add.into()]),
            (6, vec![], vec![RemoveFragments { ids: vec![4, 2] }.into()]),
        ])
        .expect("composes");
        assert_eq!(s.new_ids, Vec::<u64>::new());
        assert_eq!(s.txn.actions, vec![AnyAction::from(RemoveFragments { ids: vec![2] })], "only the older fragment");
        assert_eq!(RemoveFragments { ids: vec![1, 2] }.describe(), "fragments [1, 2]");
    }
}
