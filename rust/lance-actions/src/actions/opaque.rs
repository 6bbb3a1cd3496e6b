//! Opaque: an operation this build does not understand (Lance's `Unknown`, written by a newer Lance).
//! It reads and writes the whole table, so it overlaps everything, and its rebase always fails:
//! nothing we cannot read is ever skipped.

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct Opaque {
    /// What was not understood, for messages.
    pub description: String,
}

impl Action for Opaque {
    fn kind(&self) -> ActionKind {
        ActionKind::Opaque
    }

    fn reads(&self) -> Mask {
        Mask::new().with(ManifestPath::Table)
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::Table)
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| p.fail(ActionKind::Opaque, Rule::Opaque, self.description.clone()))
    }

    fn apply(&self, _state: &mut TableState, _txn: &mut TxnContext) {}
}

impl Opaque {
    pub(crate) fn encode(&self) -> proto::Opaque {
        proto::Opaque { description: self.description.clone() }
    }

    pub(crate) fn decode(p: proto::Opaque) -> Result<Self> {
        Ok(Self { description: p.description })
    }
}

impl ActionLife for Opaque {
    fn lower_into(&self, _slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        Err(not_lowerable(shell, format!("an opaque action ({}) can never be committed", self.description)))
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::NotUnderstood { description: self.description.clone() })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::Opaque })
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let opaque = Opaque { description: "from the future".into() };
        vec![case(
            "append_after_committed_opaque_operation_fails",
            append(),
            txn(OperationKind::Unknown, vec![opaque.into()]),
            "fail",
        )]
    }

    #[test]
    fn rebind_refuses_and_lowering_never_commits_an_opaque_operation() {
        let opaque = Opaque { description: "from the future".into() };
        assert_eq!(
            rebound(opaque.clone()),
            Err(RebindRefusal::NotUnderstood { description: "from the future".into() })
        );
        assert!(crate::lower(&txn(OperationKind::Unknown, vec![opaque.into()])).is_err(), "never committed");
    }
}
