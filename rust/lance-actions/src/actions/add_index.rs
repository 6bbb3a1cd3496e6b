//! AddIndex: a new index (or a new segment/version of one). Lowers to `CreateIndex.new_indices`.
//!
//! Its rebase is where the criterion pattern pays off: a committed update of field 7 wrote "every
//! index covering field 7", which overlaps this concrete index on field 7, and the rebase trims the
//! updated fragments from the index's coverage instead of failing.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::IndexMetadata;
use lance_table::system_index::frag_reuse::metadata::is_tagged;

/// Lance's MemWAL system index; its details carry the shard generations.
pub const MEM_WAL_INDEX_NAME: &str = "__lance_mem_wal";

use super::remove_index::RemoveIndex;
use super::reuse_history;
use super::rewrite_fragments::RewriteFragments;
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::context::{OperationKind, TxnContext};
use crate::path::{FieldScope, IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct AddIndex {
    pub index: IndexMetadata,
}

impl AddIndex {
    /// An install (new segment) of Lance's MemWAL system index.
    pub fn is_mem_wal_install(&self) -> bool {
        self.index.name == MEM_WAL_INDEX_NAME
    }

    fn covers(&self, fragment_id: u64) -> bool {
        match &self.index.fragment_bitmap {
            None => true,
            Some(b) => b.contains(fragment_id as u32),
        }
    }

    fn trim(&mut self, fragments: impl IntoIterator<Item = u64>) {
        if let Some(bitmap) = self.index.fragment_bitmap.as_mut() {
            for id in fragments {
                bitmap.remove(id as u32);
            }
        }
    }

    /// A committed drop of a segment under our name (the index rules of `design/action-model.md`,
    /// as Lance judges them). An appended segment (our transaction removes nothing of its name) extends the logical
    /// index the drop removed: Retry. A replacement is built from exactly the segments it removes,
    /// so it races the drop only when the drop took one of those sources (a stale source identity);
    /// a drop of a disjoint segment of the same name commutes with it.
    fn rebase_vs_drop(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>, dropped: &RemoveIndex) -> Verdict {
        const K: ActionKind = ActionKind::AddIndex;
        if !cx.index_edits.removes_name(&self.index.name) {
            peer.retry(K, Rule::IndexClash, "the committed transaction dropped a segment of the index we append to")
        } else if cx.index_edits.removes_uuid(dropped.index.uuid) {
            peer.retry(
                K,
                Rule::IndexClash,
                "the committed transaction dropped a segment our replacement was built from",
            )
        } else {
            Verdict::Ok
        }
    }

    fn is_ngram(&self) -> bool {
        self.index.index_details.as_ref().is_some_and(|d| d.type_url.ends_with("NGramIndexDetails"))
    }

    /// A committed compaction of fragments we index. On a tagged table whose history records a
    /// group's movement (every source on the recorded lineage) the rewrite deferred its remap: our
    /// index lands with the retired sources as its provenance and the reader translates it, partly
    /// covered groups included (the reader scans those rows). An NGram index cannot serve retired
    /// coverage and is rebuilt; off the lineage (untagged table, bare rewrite) the eager rule
    /// holds: the rows we indexed moved, so Retry.
    ///
    /// On an untagged table the remap was deferred when the rewrite carries a v0 entry (only in the
    /// process that committed it: a transaction file never holds it) or when the head's v0 entry
    /// records every one of its groups; then the index lands too, covering the compacted rows
    /// under their old fragments, which the v0 entry translates.
    fn rebase_vs_rewrite(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>, rw: &RewriteFragments) -> Verdict {
        const K: ActionKind = ActionKind::AddIndex;
        let history = cx.head.and_then(|h| reuse_history::tagged_entry(&h.indices));
        let v0_deferred = history.is_none() && self.v0_deferred(cx, rw);
        for group in &rw.groups {
            let Some(covered) = group.old_fragments.iter().map(|f| f.id).find(|id| self.covers(*id)) else {
                continue;
            };
            let recorded = v0_deferred
                || self.index.fragment_bitmap.is_some()
                    && history.is_some_and(|e| reuse_history::records(e, group.old_fragments.iter().map(|f| f.id)));
            if !recorded || self.is_ngram() {
                return peer.retry(K, Rule::FragmentGone, format!("fragment {covered} we index was rewritten"));
            }
        }
        Verdict::Ok
    }

    /// Did the committed rewrite `rw` defer its remap on an untagged table (Lance's
    /// `UntaggedReuse::records`)? It carries a v0 entry, or the head's v0 entry records each of
    /// its groups by its exact source fragments.
    fn v0_deferred(&self, cx: &RebaseCx<'_>, rw: &RewriteFragments) -> bool {
        if rw.frag_reuse_index.as_ref().is_some_and(|e| !is_tagged(e)) {
            return true;
        }
        let Some(entry) = cx.head.and_then(|h| reuse_history::entry(&h.indices)) else { return false };
        !rw.groups.is_empty()
            && rw.groups.iter().all(|g| reuse_history::v0_records_group(entry, g.old_fragments.iter().map(|f| f.id)))
    }

    /// Stop claiming `fragments`. On a tagged table a fragment the history produced is covered
    /// through the fragments its rows came from, which our bitmap may name instead (an index built
    /// before the rewrite): those are withdrawn too, so the reader scans the rewritten rows rather
    /// than answer with stale values. A history that cannot be read makes us withdraw every
    /// fragment on its lineage.
    fn withdraw(&mut self, cx: &RebaseCx<'_>, fragments: &[u64]) {
        self.trim(fragments.iter().copied());
        let Some(entry) = cx.head.and_then(|h| reuse_history::tagged_entry(&h.indices)) else { return };
        match reuse_history::ledger(entry) {
            Some(ledger) => {
                let ancestors: Vec<u64> =
                    fragments.iter().flat_map(|f| reuse_history::ancestors(&ledger, *f)).collect();
                self.trim(ancestors);
            }
            None => self.trim(entry.fragment_bitmap.iter().flat_map(|b| b.iter()).map(u64::from).collect::<Vec<_>>()),
        }
    }

    /// A committed merge whose schema removed or retyped a field we index (a cast rewrites a column
    /// under a new field id). On a tagged table the index would describe a column its
    /// destinations no longer hold, so it is rebuilt against the new field: Retry. Lance asks this
    /// only of a tagged table, and so do we.
    fn rebase_vs_merged_schema(
        &self,
        cx: &RebaseCx<'_>,
        peer: &PeerAction<'_>,
        schema: &lance_core::datatypes::Schema,
    ) -> Verdict {
        if cx.head.and_then(|h| reuse_history::tagged_entry(&h.indices)).is_none() {
            return Verdict::Ok;
        }
        let gone = cx.base.schema.fields_pre_order().find(|field| {
            self.index.fields.contains(&field.id)
                && schema.field_by_id(field.id).is_none_or(|now| now.data_type() != field.data_type())
        });
        match gone {
            Some(field) => peer.retry(
                ActionKind::AddIndex,
                Rule::SchemaChanged,
                format!("a merge removed or retyped indexed field {} ({})", field.id, field.name),
            ),
            None => Verdict::Ok,
        }
    }

    fn rebase_one(&mut self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::AddIndex;
        if matches!(peer.action, AnyAction::UpdateMemWalState(_)) && self.is_mem_wal_install() {
            return Verdict::Ok;
        }
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match peer.action {
            AnyAction::InvalidateIndexCoverage(inv) => {
                self.withdraw(cx, &inv.fragments);
                Verdict::Ok
            }
            AnyAction::RemoveFragments(rm) => {
                self.trim(rm.ids.iter().copied());
                Verdict::Ok
            }
            AnyAction::RewriteFragments(rw) => self.rebase_vs_rewrite(cx, peer, rw),
            // An update that rewrote an indexed column in place: Lance prunes the fragment from the
            // new index, which lands over the rest; the
            // update's own `InvalidateIndexCoverage` names the same fragment and fields. A data
            // replacement carries no such pruning upstream: the index must be rebuilt.
            AnyAction::ReplaceFragmentColumns(rc) if self.covers(rc.fragment_id()) && !rc.is_data_replacement() => {
                self.trim([rc.fragment_id()]);
                Verdict::Ok
            }
            AnyAction::ReplaceFragmentColumns(rc) if self.covers(rc.fragment_id()) => peer.retry(
                K,
                Rule::DataFilesChanged,
                format!("indexed data of fragment {} was replaced", rc.fragment_id()),
            ),
            // A MemWAL install validated its log against the table's schema and fragments, which
            // a merge restates with new columns (Lance retries the install too).
            AnyAction::MergeColumns(_) if self.is_mem_wal_install() => peer.retry(
                K,
                Rule::SchemaChanged,
                "a merge restated the fragments and schema the MemWAL install was validated against",
            ),
            AnyAction::ChangeSchema(cs) if peer.context.shell == OperationKind::Merge => {
                self.rebase_vs_merged_schema(cx, peer, &cs.schema)
            }
            AnyAction::RemoveIndex(dropped) => self.rebase_vs_drop(cx, peer, dropped),
            AnyAction::AddIndex(_) => {
                peer.retry(K, Rule::IndexClash, "the committed transaction wrote the same index or index name")
            }
            _ => Verdict::Ok,
        }
    }
}

impl Action for AddIndex {
    fn kind(&self) -> ActionKind {
        ActionKind::AddIndex
    }

    fn reads(&self) -> Mask {
        let mut mask = Mask::new();
        // A MemWAL install indexes no field but depends on the table's fragment list (see the
        // MergeColumns arm of the rebase).
        if self.is_mem_wal_install() {
            mask.push(ManifestPath::FragmentSet);
        }
        for &field in &self.index.fields {
            mask.push(ManifestPath::field(field, FieldScope::Definition));
            mask.push(ManifestPath::FragmentsCoveringField { field });
        }
        mask
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

    /// Checked at the version we land on: a table with stable row ids and a reuse entry takes only
    /// indices that store row addresses (deviation D9).
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        match reuse_history::stable_row_id_refusal(state, &self.index) {
            Some(why) => Err(crate::action::invalid(ActionKind::AddIndex, why)),
            None => Ok(()),
        }
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        state.indices.push(self.index.clone());
    }
}

impl AddIndex {
    pub(crate) fn encode(&self) -> proto::AddIndex {
        proto::AddIndex { index: codec::index_bytes(&self.index) }
    }

    pub(crate) fn decode(p: proto::AddIndex) -> Result<Self> {
        Ok(Self { index: codec::index_from(&p.index)? })
    }
}

impl ActionLife for AddIndex {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.new_indices.push(self.index.clone());
        Ok(())
    }

    /// The index's files are read in place; they address rows as (fragment id, offset), so the
    /// index is readable on the target only where every fragment it covers kept its id.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let index = cx.index(&self.index)?;
        if let Some(bitmap) = &self.index.fragment_bitmap {
            for id in bitmap {
                let fragment = u64::from(id);
                let target = cx.fragment_id(fragment)?;
                if target != fragment {
                    return Err(RebindRefusal::IndexOnMovedFragment {
                        index: self.index.name.clone(),
                        fragment,
                        target,
                    });
                }
            }
        }
        Ok(AddIndex { index }.into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::AddIndex })
    }

    fn describe(&self) -> String {
        format!("{} ({}) on fields {:?}", self.index.name, self.index.uuid, self.index.fields)
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;
    use crate::txn::ActionTxn;

    use crate::samples::index_on;

    fn index(name: &str, field: i32, uuid: u128, fragments: &[u32]) -> AddIndex {
        AddIndex { index: index_on(uuid::Uuid::from_u128(uuid), name, field, 1, fragments.iter().copied().collect()) }
    }

    fn create(a: AddIndex) -> ActionTxn {
        txn(OperationKind::CreateIndex, vec![a.into()])
    }

    pub(crate) fn cases() -> Vec<Case> {
        vec![
            case(
                "index_after_committed_index_of_other_name_commutes",
                create(index("v_idx", 1, 2, &[0])),
                create(index("s_idx", 2, 3, &[0])),
                "ok",
            ),
            case(
                "index_after_committed_index_of_same_name_retries",
                create(index("v_idx", 1, 2, &[0])),
                create(index("v_idx", 1, 3, &[0])),
                "retry",
            ),
        ]
    }

    #[test]
    fn rebind_reads_the_index_in_place_only_where_its_fragments_kept_their_ids() {
        let Ok(AnyAction::AddIndex(a)) = rebound(index("v_idx", 1, 2, &[0, 1])) else { panic!("same ids: replayable") };
        assert_eq!(a.index.base_id, Some(GRAFTED_BASE));
        assert_eq!(
            rebound(index("v_idx", 1, 2, &[10])),
            Err(RebindRefusal::IndexOnMovedFragment { index: "v_idx".into(), fragment: 10, target: 20 })
        );
        assert_eq!(
            squashed(vec![(5, vec![], vec![index("v", 1, 2, &[0]).into()])]).map(|s| s.new_ids),
            Err(SquashRefusal::NotComposable { action: ActionKind::AddIndex })
        );
        assert!(index("v_idx", 1, 2, &[0]).describe().starts_with("v_idx ("));
    }
}
