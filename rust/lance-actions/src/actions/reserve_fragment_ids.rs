//! ReserveFragmentIds: advance the fragment-id counter so a writer knows ids before it commits.
//! Lowers to `ReserveFragments`. Commutes with everything but a baseline replacement.

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
