//! AddOverlay: overlay files supplying new values for some cells of a fragment without rewriting its
//! data files. Lowers to a `DataOverlay` group.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::overlay::OverlayCoverage;
use lance_table::transaction::DataOverlayGroup;
use roaring::RoaringBitmap;

use super::update_deletion_vector::UpdateDeletionVector;

use super::{file_fields, refuses_key_rewrite, supplier_reads, supplier_writes};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::path::{FragmentScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct AddOverlay {
    pub group: DataOverlayGroup,
}

/// Row offsets any overlay of the group supplies values for.
pub fn overlay_rows(group: &DataOverlayGroup) -> RoaringBitmap {
    let mut rows = RoaringBitmap::new();
    for overlay in &group.overlays {
        match &overlay.coverage {
            OverlayCoverage::Shared(b) => rows |= b.as_ref(),
            OverlayCoverage::PerField(bs) => bs.iter().for_each(|b| rows |= b.as_ref()),
        }
    }
    rows
}

impl AddOverlay {
    fn fields(&self) -> std::collections::BTreeSet<i32> {
        file_fields(self.group.overlays.iter().map(|o| &o.data_file))
    }

    fn rebase_one(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::AddOverlay;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match (peer.action, peer.their_path) {
            // Overlays stack: the later committed version wins per cell.
            (AnyAction::AddOverlay(_), _) => Verdict::Ok,
            (AnyAction::ChangeSchema(cs), _) if !cs.preserves_nullability => {
                peer.retry(K, Rule::SchemaChanged, "the committed schema change may tighten nullability")
            }
            (AnyAction::ChangeSchema(_), _) => Verdict::Ok,
            // A plain delete leaves overlay cells valid; an update that moves rows out strands them.
            (AnyAction::UpdateDeletionVector(_), _) if !peer.context.moves_rows() => Verdict::Ok,
            (AnyAction::UpdateDeletionVector(theirs), _) => {
                let base = cx.base.fragment(theirs.fragment.id);
                match UpdateDeletionVector::rows_deleted(
                    theirs.affected_rows.as_ref(),
                    &theirs.fragment,
                    base,
                    cx.facts,
                ) {
                    None => peer.retry(K, Rule::RowsUnknown, "rows the committed update moved are unknown"),
                    Some(moved) => {
                        let shared = moved & overlay_rows(&self.group);
                        if shared.is_empty() {
                            Verdict::Ok
                        } else {
                            peer.retry(
                                K,
                                Rule::RowsOverlap,
                                format!("the committed update moved {} row(s) our overlay covers", shared.len()),
                            )
                        }
                    }
                }
            }
            (_, ManifestPath::Fragment { .. }) => {
                peer.retry(K, Rule::FragmentGone, "the committed transaction removed or rewrote the fragment")
            }
            _ => Verdict::Ok,
        }
    }
}

impl Action for AddOverlay {
    fn kind(&self) -> ActionKind {
        ActionKind::AddOverlay
    }

    fn reads(&self) -> Mask {
        let id = self.group.fragment_id;
        let mut mask = supplier_reads(&self.fields());
        mask.push(ManifestPath::fragment(id, FragmentScope::Existence));
        mask.push(ManifestPath::fragment(id, FragmentScope::DeletionVector));
        mask
    }

    fn writes(&self) -> Mask {
        let mut mask = Mask::new().with(ManifestPath::fragment(self.group.fragment_id, FragmentScope::Overlays));
        mask.extend(supplier_writes(&self.fields()));
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        match state.fragment(self.group.fragment_id) {
            None => Err(invalid(ActionKind::AddOverlay, format!("fragment {} does not exist", self.group.fragment_id))),
            Some(_) => refuses_key_rewrite(ActionKind::AddOverlay, state, &self.fields()),
        }
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        if let Some(f) = state.fragments.get_mut(&self.group.fragment_id) {
            f.overlays.extend(self.group.overlays.iter().cloned());
        }
    }
}

impl AddOverlay {
    pub(crate) fn encode(&self) -> proto::AddOverlay {
        proto::AddOverlay {
            group: codec::lance_bytes(&lance_table::format::pb::transaction::DataOverlayGroup::from(&self.group)),
        }
    }

    pub(crate) fn decode(p: proto::AddOverlay) -> Result<Self> {
        let pb: lance_table::format::pb::transaction::DataOverlayGroup =
            codec::lance_message(&p.group, "overlay group")?;
        Ok(Self { group: codec::lance_convert(pb, "overlay group")? })
    }
}

impl ActionLife for AddOverlay {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.overlays.push(self.group.clone());
        Ok(())
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::NotTranslatable {
            action: ActionKind::AddOverlay,
            why: "an overlay's coverage names row offsets and the version it was committed at on the source",
        })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::AddOverlay })
    }

    fn describe(&self) -> String {
        format!("fragment {}, {} overlay file(s)", self.group.fragment_id, self.group.overlays.len())
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    fn overlay(fragment_id: u64) -> crate::txn::ActionTxn {
        txn(
            OperationKind::DataOverlay,
            vec![AddOverlay { group: DataOverlayGroup { fragment_id, overlays: vec![] } }.into()],
        )
    }

    pub(crate) fn cases() -> Vec<Case> {
        let remove =
            txn(OperationKind::Delete, vec![crate::actions::remove_fragments::RemoveFragments { ids: vec![1] }.into()]);
        vec![
            case("overlay_after_committed_overlay_of_same_fragment_commutes", overlay(1), overlay(1), "ok"),
            case("overlay_after_committed_removal_of_its_fragment_retries", overlay(1), remove, "retry"),
        ]
    }

    #[test]
    fn rebind_refuses_an_overlay_and_lowering_needs_its_shell() {
        let overlay = AddOverlay { group: DataOverlayGroup { fragment_id: 1, overlays: vec![] } };
        assert!(matches!(
            rebound(overlay.clone()),
            Err(RebindRefusal::NotTranslatable { action: ActionKind::AddOverlay, .. })
        ));
        assert_eq!(overlay.describe(), "fragment 1, 0 overlay file(s)");
        let err = crate::lower(&txn(OperationKind::Append, vec![overlay.into()])).expect_err("wrong shell");
        assert!(err.to_string().contains("AddOverlay"), "{err}");
    }
}
