//! ReserveFragmentIds: advance the fragment-id counter so a writer knows ids before it commits.
//! Lowers to `ReserveFragments`. Commutes with everything but a baseline replacement.

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct ReserveFragmentIds {
    pub count: u32,
}

impl Action for ReserveFragmentIds {
    fn kind(&self) -> ActionKind {
        ActionKind::ReserveFragmentIds
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::FragmentIdCounter)
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| p.baseline_verdict(ActionKind::ReserveFragmentIds).unwrap_or(Verdict::Ok))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        state.reserve_fragment_ids(u64::from(self.count));
    }
}

impl ReserveFragmentIds {
    pub(crate) fn encode(&self) -> proto::ReserveFragmentIds {
        proto::ReserveFragmentIds { count: self.count }
    }

    pub(crate) fn decode(p: proto::ReserveFragmentIds) -> Result<Self> {
        Ok(Self { count: p.count })
    }
}

impl ActionLife for ReserveFragmentIds {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.reserve, self.count, shell, "ReserveFragmentIds")
    }

    /// Reserved ids belong to the source's id space; a replayed fragment gets its id on the target
    /// when it lands.
    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::SourceBookkeeping { action: ActionKind::ReserveFragmentIds })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::ReserveFragmentIds })
    }

    fn describe(&self) -> String {
        format!("{} id(s)", self.count)
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let reserve = || txn(OperationKind::ReserveFragments, vec![ReserveFragmentIds { count: 2 }.into()]);
        vec![case("reservation_after_committed_reservation_commutes", reserve(), reserve(), "ok")]
    }

    #[test]
    fn rebind_refuses_source_bookkeeping_and_description_counts_ids() {
        assert_eq!(
            rebound(ReserveFragmentIds { count: 2 }),
            Err(RebindRefusal::SourceBookkeeping { action: ActionKind::ReserveFragmentIds })
        );
        assert_eq!(ReserveFragmentIds { count: 2 }.describe(), "2 id(s)");
    }
}
