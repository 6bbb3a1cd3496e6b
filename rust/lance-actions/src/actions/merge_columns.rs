//! MergeColumns: the complete new fragment list of a `Merge` (every existing fragment with the new
//! columns' files attached, then any brand-new fragments). It restates every fragment, so any
//! concurrent change to the fragment list or to a fragment conflicts with it.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::Fragment;

use super::{fragment_fields, key_field_with_new_files, supplier_writes};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::path::{FragmentScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct MergeColumns {
    pub fragments: Vec<Fragment>,
}

impl MergeColumns {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::MergeColumns;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match (peer.action, peer.their_path) {
            (AnyAction::ReserveFragmentIds(_), _) => Verdict::Ok,
            // A committed MemWAL install was validated against the schema and fragments we
            // restate (Lance retries the merge too); a drop of it is no conflict.
            (AnyAction::AddIndex(ai), _) if ai.is_mem_wal_install() => {
                peer.retry(K, Rule::SchemaChanged, "a MemWAL install committed against the fragments we restate")
            }
            (_, ManifestPath::IndexName(_)) => Verdict::Ok,
            (_, ManifestPath::FragmentIdCounter | ManifestPath::RowIdCounter) => Verdict::Ok,
            _ => peer.retry(K, Rule::FragmentGone, "the fragment list we restate changed"),
        }
    }
}

impl Action for MergeColumns {
    fn kind(&self) -> ActionKind {
        ActionKind::MergeColumns
    }

    fn reads(&self) -> Mask {
        let mut mask = Mask::new()
            .with(ManifestPath::FragmentSet)
            .with(ManifestPath::IndexName(super::add_index::MEM_WAL_INDEX_NAME.into()));
        for f in &self.fragments {
            mask.push(ManifestPath::fragment(f.id, FragmentScope::Whole));
        }
        mask
    }

    fn writes(&self) -> Mask {
        let mut mask = Mask::new()
            .with(ManifestPath::FragmentSet)
            .with(ManifestPath::FragmentIdCounter)
            .with(ManifestPath::RowIdCounter);
        // A brand-new fragment also arrives with id 0, indistinguishable here from fragment 0:
        // claiming fragment 0 too is a safe over-approximation.
        for f in &self.fragments {
            mask.push(ManifestPath::fragment(f.id, FragmentScope::Whole));
        }
        mask.extend(supplier_writes(&fragment_fields(&self.fragments)));
        mask
    }

    /// On a keyed table a merge adds columns and nothing else: a fragment it adds would insert
    /// undeclared keys, and other files for a key column would rewrite keys in place
    /// (`design/fencing.md`, "1. Table classes live in the manifest, and the action model
    /// enforces them").
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        let key = crate::table_class::fenced_key_fields(&state.config, &state.schema);
        if key.is_empty() {
            return Ok(());
        }
        let refuse = |detail: String| Err(invalid(ActionKind::MergeColumns, detail));
        let mut seen = std::collections::BTreeSet::new();
        for fragment in &self.fragments {
            // Ids repeat only for brand-new fragments (they arrive with id 0), as in `apply`.
            match state.fragment(fragment.id).filter(|_| seen.insert(fragment.id)) {
                None => {
                    return refuse(format!(
                        "the table is keyed: a merge that adds a fragment inserts rows whose keys it does not \
                         declare (given id {}); insert rows with a keyed insert",
                        fragment.id
                    ));
                }
                Some(before) => {
                    if let Some(field) = key_field_with_new_files(&key, before, fragment) {
                        return refuse(format!(
                            "the table is keyed: the merge restates fragment {} with other files for key field \
                             {field}, rewriting its keys in place",
                            fragment.id
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    fn apply(&self, state: &mut TableState, txn: &mut TxnContext) {
        let existing = std::mem::take(&mut state.fragments);
        for fragment in &self.fragments {
            let is_new = !existing.contains_key(&fragment.id) || state.fragments.contains_key(&fragment.id);
            let id = if is_new { state.allocate_fragment_id() } else { fragment.id };
            let mut bound = fragment.clone();
            bound.id = id;
            state.fragments.insert(id, bound);
            if is_new {
                txn.assigned_fragment_ids.push(id);
            }
        }
    }
}

impl MergeColumns {
    pub(crate) fn encode(&self) -> proto::MergeColumns {
        proto::MergeColumns { fragments: self.fragments.iter().map(codec::fragment_bytes).collect() }
    }

    pub(crate) fn decode(p: proto::MergeColumns) -> Result<Self> {
        Ok(Self { fragments: codec::fragments_from(&p.fragments)? })
    }
}

impl ActionLife for MergeColumns {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.merge, self.fragments.clone(), shell, "MergeColumns")
    }

    /// A merge restates every fragment: on the target it must restate exactly the target's.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let fragments: Vec<Fragment> =
            self.fragments.iter().map(|f| rebind::restated_fragment(cx, f)).collect::<Result<_, _>>()?;
        let mut restated: Vec<u64> = fragments.iter().map(|f| f.id).collect();
        restated.sort_unstable();
        if restated != cx.head_fragment_ids() {
            return Err(RebindRefusal::FragmentsDiffer);
        }
        Ok(MergeColumns { fragments }.into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::MergeColumns })
    }

    fn describe(&self) -> String {
        format!("{} fragment(s) restated", self.fragments.len())
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let merge =
            || txn(OperationKind::Merge, vec![MergeColumns { fragments: (0..4).map(fragment).collect() }.into()]);
        let append = txn(
            OperationKind::Append,
            vec![crate::actions::add_fragments::AddFragments { fragments: vec![fragment(4)], keys: None }.into()],
        );
        let reserve = txn(
            OperationKind::ReserveFragments,
            vec![crate::actions::reserve_fragment_ids::ReserveFragmentIds { count: 2 }.into()],
        );
        vec![
            case("merge_columns_after_committed_append_retries", merge(), append, "retry"),
            case("merge_columns_after_committed_merge_columns_retries", merge(), merge(), "retry"),
            case("merge_columns_after_committed_reservation_commutes", merge(), reserve, "ok"),
        ]
    }

    #[test]
    fn rebind_restates_exactly_the_targets_fragments() {
        let all: Vec<Fragment> = (0..4).map(fragment).collect();
        let Ok(AnyAction::MergeColumns(m)) = rebound(MergeColumns { fragments: all.clone() }) else {
            panic!("the same fragments: replayable")
        };
        assert!(m.fragments.iter().all(|f| f.files.iter().all(|d| d.base_id == Some(GRAFTED_BASE))));
        assert!(m.fragments[1].deletion_file.is_some(), "the target's deletion file is kept");
        assert_eq!(rebound(MergeColumns { fragments: all[..3].to_vec() }), Err(RebindRefusal::FragmentsDiffer));
        assert_eq!(MergeColumns { fragments: all }.describe(), "4 fragment(s) restated");
    }
}
