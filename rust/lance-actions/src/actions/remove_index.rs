//! RemoveIndex: an index (segment) leaves the table, dropped or replaced. Lowers to
//! `CreateIndex.removed_indices`. Two drops of the same index commute; a drop racing an appended
//! segment of its name, or a replacement built from the segment it drops, does not.

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
    /// The rules follow Lance's `check_create_index_txn` (CreateIndex arm), judged on both whole
    /// transactions' index edits (`IndexEdits`).
    fn rebase_one(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::RemoveIndex;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match peer.action {
            // Two drops of one segment are idempotent, unless either side also published a
            // replacement under its name: built from a source the other dropped, it would undo the
            // drop. Drops of disjoint segments of one name commute.
            AnyAction::RemoveIndex(theirs) if theirs.index.uuid == self.index.uuid => {
                let name = &self.index.name;
                if cx.index_edits.creates_name(name) || peer.index_edits.creates_name(name) {
                    peer.retry(K, Rule::IndexClash, "a replacement was built from the segment both sides dropped")
                } else {
                    Verdict::Ok
                }
            }
            AnyAction::RemoveIndex(_) => Verdict::Ok,
            // A committed segment appended under the name we drop (its transaction removed nothing
            // of that name) extends what we drop; a committed replacement races our drop only when
            // it was built from the segment we drop.
            AnyAction::AddIndex(ai) if !peer.index_edits.removes_name(&ai.index.name) => {
                peer.retry(K, Rule::IndexClash, "the committed transaction appended a segment to the index we drop")
            }
            AnyAction::AddIndex(_) if peer.index_edits.removes_uuid(self.index.uuid) => {
                peer.retry(K, Rule::IndexClash, "the committed transaction replaced the segment we drop")
            }
            AnyAction::AddIndex(_) => Verdict::Ok,
            // A committed update narrowed the coverage of indices on a field it rewrote: the index
            // we drop leaves anyway (Lance commits the drop or replacement and prunes only the new
            // segments, which our `AddIndex` trims).
            AnyAction::InvalidateIndexCoverage(_) => Verdict::Ok,
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

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
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
