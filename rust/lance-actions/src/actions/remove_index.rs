//! RemoveIndex: an index (segment) leaves the table, dropped or replaced. Lowers to
//! `CreateIndex.removed_indices`. Two drops of the same index commute; a drop racing an appended
//! segment of its name, or a replacement built from the segment it drops, does not.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::IndexMetadata;

use super::reuse_history;
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
    /// The index rules of `design/action-model.md` (Lance's), judged on both whole transactions'
    /// index edits (`IndexEdits`).
    fn rebase_one(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::RemoveIndex;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        if self.is_reuse_entry() && matches!(peer.their_path, ManifestPath::FragmentSet) {
            return self.rebase_entry_vs_fragments(cx, peer);
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

impl RemoveIndex {
    fn is_reuse_entry(&self) -> bool {
        self.index.name == reuse_history::FRAG_REUSE_INDEX_NAME
    }

    /// A replacement of the fragment-reuse entry (a trim that keeps some records) was built from
    /// the entry it removes. A committed rewrite may have replaced that entry (appending its own
    /// records; its transaction file never carries the entry, so the head is what tells): ours
    /// would then replace the head's entry with one missing the rewrite's records. Retry, to
    /// rebuild the replacement from the head's entry (Lance re-derives such a trim at the head
    /// instead, which the model cannot: deviation D10). A drop of the entry that publishes none
    /// leaves a changed entry alone, and one that is still the entry we read is ours to replace.
    fn rebase_entry_vs_fragments(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        let head = cx.head.and_then(|h| reuse_history::entry(&h.indices));
        if !cx.index_edits.creates_name(&self.index.name) || head.is_some_and(|e| e.uuid == self.index.uuid) {
            return Verdict::Ok;
        }
        peer.retry(
            ActionKind::RemoveIndex,
            Rule::IndexClash,
            "a concurrent commit changed the fragment-reuse entry our replacement was built from",
        )
    }
}

impl Action for RemoveIndex {
    fn kind(&self) -> ActionKind {
        ActionKind::RemoveIndex
    }

    /// A replacement of the fragment-reuse entry reads the fragment set: a committed rewrite there
    /// may have replaced the entry (`rebase_entry_vs_fragments`).
    fn reads(&self) -> Mask {
        if self.is_reuse_entry() { Mask::new().with(ManifestPath::FragmentSet) } else { Mask::new() }
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

impl ActionLife for RemoveIndex {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.removed_indices.push(self.index.clone());
        Ok(())
    }

    /// An index is removed by its name and uuid, which both branches share from the fork on.
    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Ok(self.clone().into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::RemoveIndex })
    }

    fn describe(&self) -> String {
        format!("{} ({})", self.index.name, self.index.uuid)
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use lance_core::datatypes::Schema;
    use roaring::RoaringBitmap;
    use uuid::Uuid;

    use crate::actions::add_index::AddIndex;
    use crate::driver::{Inputs, Peer, resolve};
    use crate::{ActionTxn, AnyAction, NoFacts, OperationKind, TableState};

    /// A segment of index `name` on field 0 (the uuid names the segment).
    fn segment(uuid: u128, name: &str) -> lance_table::format::IndexMetadata {
        crate::samples::index_on(Uuid::from_u128(uuid), name, 0, 1, RoaringBitmap::from_iter([0u32]))
    }

    /// A CreateIndex transaction: the segments it adds and removes.
    fn create_index(added: &[(u128, &str)], removed: &[(u128, &str)]) -> ActionTxn {
        let removes = removed.iter().map(|(u, n)| AnyAction::RemoveIndex(super::RemoveIndex { index: segment(*u, n) }));
        let adds = added.iter().map(|(u, n)| AnyAction::AddIndex(AddIndex { index: segment(*u, n) }));
        ActionTxn::new(OperationKind::CreateIndex, removes.chain(adds).collect())
    }

    fn verdict(ours: &ActionTxn, committed: ActionTxn) -> &'static str {
        let schema =
            Schema::try_from(&ArrowSchema::new(vec![Field::new("id", DataType::Int64, false)])).expect("schema");
        let base = TableState::empty(schema);
        let peers = [Peer::new(2, committed)];
        resolve(ours, &Inputs { base: &base, head: None, peers: &peers, facts: &NoFacts }).verdict.label()
    }

    /// Segments A (1) and B (2) of index `idx`; A' (3) and A'' (4) fresh segments of it. Lance's
    /// rules (`design/action-model.md`, as Lance judges them), case by case (ours, committed, verdict).
    #[test]
    fn same_name_segments_follow_lances_create_index_rules() {
        let cases = [
            (
                "replace A after a drop of B",
                create_index(&[(3, "idx")], &[(1, "idx")]),
                create_index(&[], &[(2, "idx")]),
                "ok",
            ),
            (
                "replace A after a drop of A",
                create_index(&[(3, "idx")], &[(1, "idx")]),
                create_index(&[], &[(1, "idx")]),
                "retry",
            ),
            (
                "append A' after a drop of B",
                create_index(&[(3, "idx")], &[]),
                create_index(&[], &[(2, "idx")]),
                "retry",
            ),
            ("drop A after a drop of A", create_index(&[], &[(1, "idx")]), create_index(&[], &[(1, "idx")]), "ok"),
            (
                "drop A after a replacement of A",
                create_index(&[], &[(1, "idx")]),
                create_index(&[(4, "idx")], &[(1, "idx")]),
                "retry",
            ),
            (
                "drop B after a replacement of A",
                create_index(&[], &[(2, "idx")]),
                create_index(&[(4, "idx")], &[(1, "idx")]),
                "ok",
            ),
            (
                "drop A after an appended segment",
                create_index(&[], &[(1, "idx")]),
                create_index(&[(4, "idx")], &[]),
                "retry",
            ),
            (
                "rename A to other after a drop of A",
                create_index(&[(3, "other")], &[(1, "idx")]),
                create_index(&[], &[(1, "idx")]),
                "ok",
            ),
            (
                "new segments of one name on both sides",
                create_index(&[(3, "idx")], &[]),
                create_index(&[(4, "idx")], &[]),
                "retry",
            ),
        ];
        for (case, ours, committed, expected) in cases {
            assert_eq!(verdict(&ours, committed), expected, "{case}");
        }
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    use crate::samples::index_on;

    fn drop_index(name: &str, uuid: u128) -> RemoveIndex {
        RemoveIndex { index: index_on(uuid::Uuid::from_u128(uuid), name, 0, 1, [0u32].into_iter().collect()) }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let drop = |uuid| txn(OperationKind::CreateIndex, vec![drop_index("id_idx", uuid).into()]);
        vec![case("drop_after_committed_drop_of_same_index_commutes", drop(1), drop(1), "ok")]
    }

    #[test]
    fn rebind_keeps_a_dropped_index_and_squash_refuses_it() {
        assert_eq!(rebound(drop_index("id_idx", 1)), Ok(drop_index("id_idx", 1).into()));
        assert_eq!(
            squashed(vec![(5, vec![], vec![drop_index("id_idx", 1).into()])]).map(|s| s.new_ids),
            Err(SquashRefusal::NotComposable { action: ActionKind::RemoveIndex })
        );
    }
}
