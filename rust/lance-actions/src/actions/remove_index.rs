//! RemoveIndex: an index (segment) leaves the table, dropped or replaced. Lowers to
//! `CreateIndex.removed_indices`. Two drops of the same index commute; a drop racing a creation of
//! the same name does not (the creation's own rebase reports it).

use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::IndexMetadata;

use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::context::TxnContext;
use crate::path::{IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct RemoveIndex {
    pub index: IndexMetadata,
}

impl RemoveIndex {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::RemoveIndex;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match peer.action {
            AnyAction::RemoveIndex(_) => Verdict::Ok,
            AnyAction::AddIndex(_) => {
                peer.retry(K, Rule::IndexClash, "the committed transaction created an index of the name we drop")
            }
            _ => peer.retry(K, Rule::IndexClash, "the committed transaction changed the index we drop"),
        }
    }
}

impl Action for RemoveIndex {
    fn kind(&self) -> ActionKind {
        ActionKind::RemoveIndex
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask::new()
            .with(ManifestPath::Index {
                uuid: self.index.uuid,
                fields: self.index.fields.clone(),
                scope: IndexScope::Whole,
            })
            .with(ManifestPath::IndexName(self.index.name.clone()))
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        state.indices.retain(|i| i.uuid != self.index.uuid);
    }
}

impl RemoveIndex {
    pub(crate) fn encode(&self) -> proto::RemoveIndex {
        proto::RemoveIndex { index: codec::index_bytes(&self.index) }
    }

    pub(crate) fn decode(p: proto::RemoveIndex) -> Result<Self> {
        Ok(Self { index: codec::index_from(&p.index)? })
    }
}
