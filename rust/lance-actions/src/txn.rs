//! A transaction as the action model sees it: transaction-level context plus an ordered action list.

use crate::action::{Action, ActionKind, AnyAction};
use crate::context::{OperationKind, TxnContext};
use crate::path::Mask;

#[derive(Debug, Clone, PartialEq)]
pub struct ActionTxn {
    pub context: TxnContext,
    pub actions: Vec<AnyAction>,
}

impl ActionTxn {
    pub fn new(shell: OperationKind, actions: Vec<AnyAction>) -> Self {
        Self { context: TxnContext::new(shell), actions }
    }

    pub fn shell(&self) -> OperationKind {
        self.context.shell
    }

    /// Does this transaction replace the baseline (overwrite, restore) rather than change it?
    pub fn resets_baseline(&self) -> bool {
        self.actions.iter().any(|a| matches!(a.kind(), ActionKind::ResetTable | ActionKind::Restore))
    }

    /// Fill each coverage invalidation's nested fields from `schema` (see
    /// [`crate::actions::invalidate_index_coverage::InvalidateIndexCoverage::fill_nested`]): what a
    /// committed peer needs before its masks are computed.
    pub fn fill_nested_fields(&mut self, schema: &lance_core::datatypes::Schema) {
        for action in self.actions.iter_mut() {
            if let AnyAction::InvalidateIndexCoverage(inv) = action {
                inv.fill_nested(schema);
            }
        }
    }

    pub fn is_opaque(&self) -> bool {
        self.actions.iter().any(|a| a.kind() == ActionKind::Opaque)
    }

    /// Everything the transaction writes, context included.
    pub fn writes(&self) -> Mask {
        let mut mask = self.context.writes();
        for a in &self.actions {
            mask.extend(a.writes());
        }
        mask
    }

    /// Everything the transaction reads.
    pub fn reads(&self) -> Mask {
        let mut mask = Mask::new();
        for a in &self.actions {
            mask.extend(a.reads());
        }
        mask
    }
}
