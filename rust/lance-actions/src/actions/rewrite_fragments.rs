//! RewriteFragments: compaction. Old fragments are replaced by new ones holding the same rows, and
//! the indices covering them are remapped to the new row addresses. Lowers to `Rewrite`.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use std::collections::BTreeSet;

use lance_table::format::IndexMetadata;
use lance_table::transaction::{RewriteGroup, RewrittenIndex};

use super::{fragment_fields, reuse_history};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::path::{FragmentScope, IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};
use lance_table::system_index::frag_reuse::metadata::is_tagged;

#[derive(Debug, Clone, PartialEq)]
pub struct RewriteFragments {
    pub groups: Vec<RewriteGroup>,
    pub rewritten_indices: Vec<RewrittenIndex>,
    /// Lance keeps this in memory only (never in the transaction file); carried so lowering is lossless.
    pub frag_reuse_index: Option<IndexMetadata>,
}

impl RewriteFragments {
    pub fn old_ids(&self) -> BTreeSet<u64> {
        self.groups.iter().flat_map(|g| g.old_fragments.iter().map(|f| f.id)).collect()
    }

    /// A rewrite that defers index remapping (it carries a fragment-reuse entry) over fragments with
    /// stable row ids. Lance infers the table's stable-row-id flag from the old fragments' row-id
    /// metadata the same way (`design/action-model.md`, RewriteFragments).
    fn defers_stable_row_id_remap(&self) -> bool {
        self.frag_reuse_index.is_some()
            && self.groups.iter().flat_map(|g| g.old_fragments.iter()).any(|f| f.row_id_meta.is_some())
    }

    /// The fragments the transitions our tagged fragment-reuse entry adds read from or produce;
    /// empty for a rewrite without a tagged entry (a plain or a v0 deferred compaction).
    fn transition_fragments(&self, base: &TableState) -> BTreeSet<u64> {
        let Some(ours) = self.frag_reuse_index.as_ref().filter(|e| is_tagged(e)).and_then(reuse_history::ledger) else {
            return BTreeSet::new();
        };
        reuse_history::added_fragments(&ours, reuse_history::entry(&base.indices))
    }

    /// Does every group lie wholly inside or wholly outside `bitmap`? A deferred remap keeps an
    /// index's coverage as provenance, which must name whole groups: a group half inside would
    /// leave the index covering a destination only partly.
    fn groups_align_with(&self, bitmap: &roaring::RoaringBitmap) -> bool {
        self.groups.iter().all(|g| {
            let inside = g.old_fragments.iter().filter(|f| bitmap.contains(f.id as u32)).count();
            inside == 0 || inside == g.old_fragments.len()
        })
    }

    /// A committed index build while our rewrite defers the remap (it carries a fragment-reuse
    /// entry): the index keeps covering the moved rows under their old fragments, so it is no
    /// conflict unless a group straddles its coverage or its coverage is unknown.
    fn rebase_deferred_vs_index(&self, peer: &PeerAction<'_>, index: &IndexMetadata) -> Verdict {
        const K: ActionKind = ActionKind::RewriteFragments;
        match &index.fragment_bitmap {
            Some(bitmap) if self.groups_align_with(bitmap) => Verdict::Ok,
            Some(_) => peer.retry(
                K,
                Rule::IndexClash,
                format!("a group of our rewrite lies partly inside the coverage of committed index {}", index.name),
            ),
            None => peer.retry(K, Rule::IndexClash, format!("committed index {} has no known coverage", index.name)),
        }
    }

    /// A tagged rewrite may also move groups no transition records (bare groups). Nothing translates
    /// an index across those, so such a group is admitted only over fragments no index covers, as a
    /// plain rewrite would be; checked against the indices of the version we land on, so an index a
    /// concurrent writer built over a bare group refuses us. The whole rewrite is refused, never a
    /// part of it.
    /// A v0 entry (a compaction on an untagged table) replaces the whole history with the read
    /// version's plus one version of its own, so it cannot land on a history another commit
    /// changed meanwhile: the head's entry is not the one we read (by uuid, as Lance compares them;
    /// a committed rewrite's transaction file never carries its entry, so the head is what tells).
    /// Retry, to rebuild the entry at the head. A head that became tagged is no such case: the
    /// commit loop converts our version into transitions there.
    fn v0_history_replaced(&self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Option<Verdict> {
        self.frag_reuse_index.as_ref().filter(|e| !is_tagged(e))?;
        let head = reuse_history::entry(&cx.head?.indices);
        if head.is_some_and(is_tagged) {
            return None;
        }
        let read = reuse_history::entry(&cx.base.indices);
        if head.map(|e| e.uuid) == read.map(|e| e.uuid) {
            return None;
        }
        let describe = |e: Option<&IndexMetadata>| e.map_or("no entry".to_string(), |e| format!("entry {}", e.uuid));
        let detail = format!(
            "our v0 fragment-reuse entry was built from {} at version {}, but the head has {}: a concurrent commit \
             changed the fragment-reuse history",
            describe(read),
            cx.base.version,
            describe(head)
        );
        Some(peers.first()?.retry(ActionKind::RewriteFragments, Rule::IndexClash, detail))
    }

    /// A rewrite that brings a reuse entry to a table with stable row ids: every index the table
    /// holds must store row addresses (`reuse_history::stable_row_id_refusal`, deviation D9).
    fn stable_row_id_indices_store_addresses(&self, state: &TableState) -> Result<(), Reason> {
        let Some(entry) = self.frag_reuse_index.as_ref().filter(|_| self.defers_stable_row_id_remap()) else {
            return Ok(());
        };
        let mut with_entry = state.clone();
        with_entry.indices.push(entry.clone());
        match state.indices.iter().find_map(|i| reuse_history::stable_row_id_refusal(&with_entry, i)) {
            Some(why) => Err(invalid(ActionKind::RewriteFragments, why)),
            None => Ok(()),
        }
    }

    fn bare_groups_are_unindexed(&self, state: &TableState) -> Result<(), Reason> {
        let Some(ours) = self.frag_reuse_index.as_ref().filter(|e| is_tagged(e)).and_then(reuse_history::ledger) else {
            return Ok(());
        };
        let recorded: BTreeSet<u64> =
            ours.transitions().iter().flat_map(|t| t.sources().iter().map(|d| d.id)).collect();
        let bare = self.groups.iter().filter(|g| !g.old_fragments.iter().any(|f| recorded.contains(&f.id)));
        for fragment in bare.flat_map(|g| g.old_fragments.iter()) {
            let covering = state
                .indices
                .iter()
                .find(|i| i.fragment_bitmap.as_ref().is_some_and(|b| b.contains(fragment.id as u32)));
            if let Some(index) = covering {
                return Err(invalid(
                    ActionKind::RewriteFragments,
                    format!(
                        "fragment {} is moved by a group no reuse transition records, but index {} covers it; \
                         record a transition for it or rebuild the index",
                        fragment.id, index.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn rebase_one(&self, peer: &PeerAction<'_>, transition_fragments: &BTreeSet<u64>) -> Verdict {
        const K: ActionKind = ActionKind::RewriteFragments;
        // Compaction keeps every row and value, so the MemWAL's claim about the data still holds.
        if matches!(peer.action, AnyAction::UpdateMemWalState(_)) {
            return Verdict::Ok;
        }
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match (peer.action, peer.their_path) {
            // Double consumption: the committed rewrite consumed a fragment our transitions read from
            // or produce, so they would record movement out of (or into) a fragment that is gone.
            // No retry can help: the transitions must be rebuilt on the new table.
            (AnyAction::RewriteFragments(theirs), _)
                if theirs.old_ids().iter().any(|id| transition_fragments.contains(id)) =>
            {
                peer.fail(
                    K,
                    Rule::FragmentGone,
                    "the committed rewrite consumed fragments our reuse transitions read from or produce; rebuild them",
                )
            }
            // A replacement of the fragment-reuse entry (a trim) commits alone; one mixed with other
            // index changes is a shape no rule covers, so it is refused rather than guessed at.
            (AnyAction::AddIndex(_) | AnyAction::RemoveIndex(_), _)
                if peer.index_edits.creates_name(reuse_history::FRAG_REUSE_INDEX_NAME) =>
            {
                if peer.index_edits.created.len() == 1 && peer.index_edits.removed.len() == 1 {
                    Verdict::Ok
                } else {
                    peer.fail(
                        K,
                        Rule::IndexClash,
                        "the committed transaction replaced the fragment-reuse entry together with other indices",
                    )
                }
            }
            (AnyAction::AddIndex(ai), _) if self.defers_stable_row_id_remap() && answers_in_row_ids(&ai.index) => peer
                .retry(
                    K,
                    Rule::IndexClash,
                    format!(
                        "index {} answers in row ids, which our deferred remap of stable-row-id fragments would leave stale",
                        ai.index.name
                    ),
                ),
            (AnyAction::AddIndex(ai), _) if self.frag_reuse_index.is_some() => self.rebase_deferred_vs_index(peer, &ai.index),
            (AnyAction::AddIndex(ai), _) => {
                let covers_old = match &ai.index.fragment_bitmap {
                    None => true,
                    Some(bitmap) => self.old_ids().iter().any(|id| bitmap.contains(*id as u32)),
                };
                if covers_old {
                    peer.retry(
                        K,
                        Rule::IndexClash,
                        "a committed index covers fragments we rewrite; its row addresses would go stale",
                    )
                } else {
                    Verdict::Ok
                }
            }
            (AnyAction::InvalidateIndexCoverage(_), _) => Verdict::Ok,
            // A dropped index needs no remap, unless it is one we remap.
            (AnyAction::RemoveIndex(ri), _) if !self.rewritten_indices.iter().any(|r| r.old_id == ri.index.uuid) => {
                Verdict::Ok
            }
            (_, ManifestPath::Index { .. }) => {
                peer.retry(K, Rule::IndexClash, "the committed transaction changed an index we remap")
            }
            (_, ManifestPath::Fragment { .. }) => {
                peer.retry(K, Rule::FragmentGone, "the committed transaction changed a fragment we rewrite")
            }
            _ => Verdict::Ok,
        }
    }
}

/// A user index built while a deferred rewrite remaps stable row ids describes rows by ids the
/// reuse index does not translate, wherever its coverage lies.
use reuse_history::answers_in_row_ids;

impl Action for RewriteFragments {
    fn kind(&self) -> ActionKind {
        ActionKind::RewriteFragments
    }

    fn reads(&self) -> Mask {
        let mut mask =
            Mask(self.old_ids().into_iter().map(|id| ManifestPath::fragment(id, FragmentScope::Whole)).collect());
        let old = self.groups.iter().flat_map(|g| g.old_fragments.iter());
        for field in fragment_fields(old) {
            mask.push(ManifestPath::IndicesCoveringField { field, scope: IndexScope::Coverage });
        }
        // A MemWAL install indexes no field, so no field criterion meets it, and it has no coverage
        // bitmap, which Lance's rewrite rule reads as covering every fragment: it retries a rewrite
        // after one. The AddIndex arm of the rebase does the same.
        mask.push(ManifestPath::IndexName(super::add_index::MEM_WAL_INDEX_NAME.into()));
        // A committed replacement of the fragment-reuse entry names no field either; the rebase
        // judges its shape.
        mask.push(ManifestPath::IndexName(reuse_history::FRAG_REUSE_INDEX_NAME.into()));
        mask
    }

    fn writes(&self) -> Mask {
        let mut mask = Mask::new().with(ManifestPath::FragmentSet).with(ManifestPath::FragmentIdCounter);
        for id in self.old_ids() {
            mask.push(ManifestPath::fragment(id, FragmentScope::Existence));
        }
        for ri in &self.rewritten_indices {
            mask.push(ManifestPath::Index { uuid: ri.old_id, fields: Vec::new(), scope: IndexScope::Whole });
        }
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        if let Some(id) = self.old_ids().into_iter().find(|id| state.fragment(*id).is_none()) {
            return Err(invalid(ActionKind::RewriteFragments, format!("fragment {id} to rewrite does not exist")));
        }
        self.bare_groups_are_unindexed(state)?;
        self.stable_row_id_indices_store_addresses(state)
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        // A tagged entry is a diff against the history at our read version; one built at another
        // version would fold other writers' transitions into ours.
        if let Some(entry) = self.frag_reuse_index.as_ref().filter(|e| is_tagged(e))
            && entry.dataset_version != cx.base.version
        {
            return Verdict::Fail(invalid(
                ActionKind::RewriteFragments,
                format!(
                    "the rewrite's fragment-reuse entry was built from version {} but the rewrite reads version {}; \
                     build it from the read version",
                    entry.dataset_version, cx.base.version
                ),
            ));
        }
        if let Some(verdict) = self.v0_history_replaced(cx, peers) {
            return verdict;
        }
        let transition_fragments = self.transition_fragments(cx.base);
        fold_verdicts(peers, |p| self.rebase_one(p, &transition_fragments))
    }

    fn apply(&self, state: &mut TableState, txn: &mut TxnContext) {
        for id in self.old_ids() {
            state.fragments.remove(&id);
        }
        for fragment in self.groups.iter().flat_map(|g| g.new_fragments.iter()) {
            let id = if fragment.id == 0 { state.allocate_fragment_id() } else { fragment.id };
            let mut bound = fragment.clone();
            bound.id = id;
            state.fragments.insert(id, bound);
            txn.assigned_fragment_ids.push(id);
        }
    }
}

impl RewriteFragments {
    pub(crate) fn encode(&self) -> proto::RewriteFragments {
        use lance_table::format::pb::transaction::rewrite as pb;
        proto::RewriteFragments {
            groups: self.groups.iter().map(|g| codec::lance_bytes(&pb::RewriteGroup::from(g))).collect(),
            rewritten_indices: self
                .rewritten_indices
                .iter()
                .map(|r| codec::lance_bytes(&pb::RewrittenIndex::from(r)))
                .collect(),
            frag_reuse_index: self.frag_reuse_index.as_ref().map(codec::index_bytes),
        }
    }

    pub(crate) fn decode(p: proto::RewriteFragments) -> Result<Self> {
        use lance_table::format::pb::transaction::rewrite as pb;
        let groups = p
            .groups
            .iter()
            .map(|b| {
                codec::lance_convert(codec::lance_message::<pb::RewriteGroup>(b, "rewrite group")?, "rewrite group")
            })
            .collect::<Result<Vec<RewriteGroup>>>()?;
        let rewritten_indices = p
            .rewritten_indices
            .iter()
            .map(|b| {
                let pb = codec::lance_message::<pb::RewrittenIndex>(b, "rewritten index")?;
                RewrittenIndex::try_from(&pb).map_err(|e| codec::corrupt(format!("rewritten index: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let frag_reuse_index = p.frag_reuse_index.map(|b| codec::index_from(&b)).transpose()?;
        Ok(Self { groups, rewritten_indices, frag_reuse_index })
    }
}

impl ActionLife for RewriteFragments {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.rewrite, self.clone(), shell, "RewriteFragments")
    }

    /// The old fragments are the target's; the new ones reference the source's files and get ids
    /// on the target. A compaction that remapped indexes is refused: the remap names source ids.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        if !self.rewritten_indices.is_empty() || self.frag_reuse_index.is_some() {
            return Err(RebindRefusal::IndexRemapped);
        }
        let mut groups = self.groups.clone();
        for group in &mut groups {
            group.old_fragments = group.old_fragments.iter().map(|f| cx.head_fragment(f)).collect::<Result<_, _>>()?;
            if group.new_fragments.iter().any(|f| f.deletion_file.is_some()) {
                return Err(RebindRefusal::CompactedWithDeletions);
            }
            group.new_fragments =
                group.new_fragments.iter().map(|f| rebind::new_fragment(cx, f)).collect::<Result<_, _>>()?;
        }
        Ok(RewriteFragments { groups, rewritten_indices: Vec::new(), frag_reuse_index: None }.into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::RewriteFragments })
    }

    fn describe(&self) -> String {
        format!("old fragments {:?}, {} index remap(s)", self.old_ids(), self.rewritten_indices.len())
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    use lance_table::transaction::RewriteGroup;

    fn compaction(old: u64) -> RewriteFragments {
        let mut new = fragment(old);
        new.id = 0;
        RewriteFragments {
            groups: vec![RewriteGroup { old_fragments: vec![fragment(old)], new_fragments: vec![new] }],
            rewritten_indices: vec![],
            frag_reuse_index: None,
        }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let rewrite = |old| txn(OperationKind::Rewrite, vec![compaction(old).into()]);
        vec![
            case("compaction_after_committed_compaction_of_other_fragment_commutes", rewrite(0), rewrite(2), "ok"),
            case("compaction_after_committed_compaction_of_same_fragment_retries", rewrite(0), rewrite(0), "retry"),
        ]
    }

    #[test]
    fn rebind_reads_the_targets_fragment_and_refuses_deletions_or_remapped_indices() {
        let Ok(AnyAction::RewriteFragments(r)) = rebound(compaction(1)) else { panic!("replayable") };
        assert_eq!(
            r.groups[0].old_fragments[0],
            *Target::default().head.fragments.get(&1).expect("the sample head holds fragment 1"),
            "the target's own"
        );
        assert_eq!(r.groups[0].new_fragments[0].files[0].base_id, Some(GRAFTED_BASE));
        let mut with_deletions = compaction(1);
        with_deletions.groups[0].new_fragments[0].deletion_file =
            Target::default().head.fragments.get(&1).expect("the sample head holds fragment 1").deletion_file.clone();
        assert_eq!(rebound(with_deletions), Err(RebindRefusal::CompactedWithDeletions));
        let mut remapped = compaction(1);
        remapped.frag_reuse_index =
            Some(crate::samples::index_on(uuid::Uuid::nil(), "reuse", 0, 1, Default::default()));
        assert_eq!(rebound(remapped), Err(RebindRefusal::IndexRemapped));
        assert_eq!(compaction(1).describe(), "old fragments {1}, 0 index remap(s)");
    }
}
