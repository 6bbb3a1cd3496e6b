//! UpdateMemWalState: a standalone MemWAL state update (Lance's `UpdateMemWalState` operation). The
//! shard generations it advances live in the transaction context (they ride on `Update` too); this
//! action stands for the claim the update makes about the table: its rows and schema are exactly
//! those the write-ahead log was compacted against. So it reads and writes all table data, and
//! commutes only with compaction, id reservation, index, config and base changes, and with a merge
//! (an `Update`), the MemWAL's own way of writing rows, whose generations the context checks.

use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::{OperationKind, TxnContext};
use crate::error::Result;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpdateMemWalState;

impl UpdateMemWalState {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::UpdateMemWalState;
        if peer.context.shell == OperationKind::Update {
            return Verdict::Ok;
        }
        match peer.action {
            AnyAction::RewriteFragments(_)
            | AnyAction::ReserveFragmentIds(_)
            | AnyAction::UpdateConfig(_)
            | AnyAction::AddBases(_)
            | AnyAction::AddIndex(_)
            | AnyAction::RemoveIndex(_)
            | AnyAction::InvalidateIndexCoverage(_)
            | AnyAction::UpdateMemWalState(_) => Verdict::Ok,
            _ => peer.fail(K, Rule::MemWalGeneration, "the table data the MemWAL was compacted against changed"),
        }
    }

    pub(crate) fn encode(&self) -> proto::UpdateMemWalState {
        proto::UpdateMemWalState {}
    }

    pub(crate) fn decode(_p: proto::UpdateMemWalState) -> Result<Self> {
        Ok(Self)
    }
}

impl Action for UpdateMemWalState {
    fn kind(&self) -> ActionKind {
        ActionKind::UpdateMemWalState
    }

    fn reads(&self) -> Mask {
        Mask::new().with(ManifestPath::TableData)
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::TableData)
    }

    fn validate(&self, _state: &TableState) -> std::result::Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    fn apply(&self, _state: &mut TableState, _txn: &mut TxnContext) {}
}
