//! InvalidateIndexCoverage: the listed fragments' data in `fields` changed, so every index covering
//! one of those fields must stop claiming those fragments. A criterion action: it names no index,
//! and is evaluated against whatever indices exist when it applies, so it commutes with index
//! creation. Implied by `Update.fields_modified` (Lance prunes the bitmaps when it builds the manifest).

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct InvalidateIndexCoverage {
    pub fragments: Vec<u64>,
    /// Lance's `fields_modified`, kept in its order.
    pub fields: Vec<u32>,
}

impl Action for InvalidateIndexCoverage {
    fn kind(&self) -> ActionKind {
        ActionKind::InvalidateIndexCoverage
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask(
            self.fields
                .iter()
                .map(|&f| ManifestPath::IndicesCoveringField { field: f as i32, scope: IndexScope::Coverage })
                .collect(),
        )
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| p.baseline_verdict(ActionKind::InvalidateIndexCoverage).unwrap_or(Verdict::Ok))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        let fields: Vec<i32> = self.fields.iter().map(|f| *f as i32).collect();
        for index in state.indices.iter_mut().filter(|i| i.fields.iter().any(|f| fields.contains(f))) {
            if let Some(bitmap) = index.fragment_bitmap.as_mut() {
                for id in &self.fragments {
                    bitmap.remove(*id as u32);
                }
            }
        }
    }
}

impl InvalidateIndexCoverage {
    pub(crate) fn encode(&self) -> proto::InvalidateIndexCoverage {
        proto::InvalidateIndexCoverage { fragments: self.fragments.clone(), fields: self.fields.clone() }
    }

    pub(crate) fn decode(p: proto::InvalidateIndexCoverage) -> Result<Self> {
        Ok(Self { fragments: p.fragments, fields: p.fields })
    }
}

impl ActionLife for InvalidateIndexCoverage {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.invalidate, self.clone(), shell, "InvalidateIndexCoverage")
    }

    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let fragments = rebind::fragment_ids(cx, &self.fragments)?;
        Ok(InvalidateIndexCoverage { fragments, fields: self.fields.clone() }.into())
    }

    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal> {
        squash.invalidated_fragments.extend(self.fragments.iter().copied());
        for field in &self.fields {
            if !squash.invalidated_fields.contains(field) {
                squash.invalidated_fields.push(*field);
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("fields {:?} on fragments {:?}", self.fields, self.fragments)
    }
}

#[cfg(test)]
mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    #[test]
    fn rebind_maps_fragments_and_squash_joins_fields_in_first_seen_order() {
        let inv = |fragments: Vec<u64>, fields: Vec<u32>| InvalidateIndexCoverage { fragments, fields };
        assert_eq!(rebound(inv(vec![1, 10], vec![1])), Ok(inv(vec![1, 20], vec![1]).into()));
        assert_eq!(rebound(inv(vec![12], vec![1])), Err(RebindRefusal::UnreplayedFragment { fragment: 12 }));
        let only_coverage = squashed(vec![(5, vec![], vec![inv(vec![1], vec![2]).into()])]);
        assert_eq!(only_coverage.map(|s| s.new_ids), Err(SquashRefusal::CoverageWithoutUpdate), "needs an update");
        let delete = |id| {
            AnyAction::from(crate::actions::update_deletion_vector::UpdateDeletionVector::new(
                fragment(id),
                Some(rows(&[0])),
            ))
        };
        let add =
            AnyAction::from(crate::actions::add_fragments::AddFragments { fragments: vec![fragment(0)], keys: None });
        let s = squashed(vec![
            (5, vec![4], vec![delete(1), add, inv(vec![1], vec![2, 1]).into()]),
            (6, vec![], vec![delete(2), inv(vec![2], vec![1, 3]).into()]),
        ])
        .expect("composes");
        assert_eq!(s.txn.shell(), OperationKind::Update);
        assert_eq!(s.txn.actions.last(), Some(&inv(vec![1, 2], vec![2, 1, 3]).into()));
        assert_eq!(inv(vec![1], vec![2]).describe(), "fields [2] on fragments [1]");
    }
}
