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
