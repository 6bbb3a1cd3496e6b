//! CloneTable: the first commit of a shallow clone or branch, referencing another dataset's files.
//! Lowers to `Clone`. It starts a new history, so nothing can be concurrent with it on that history.

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::Mask;
use crate::state::TableState;
use crate::verdict::{Reason, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct CloneTable {
    pub is_shallow: bool,
    pub ref_name: Option<String>,
    pub ref_version: u64,
    pub ref_path: String,
    pub branch_name: Option<String>,
}

impl Action for CloneTable {
    fn kind(&self) -> ActionKind {
        ActionKind::CloneTable
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask::new()
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, _peers: &[PeerAction<'_>]) -> Verdict {
        Verdict::Ok
    }

    fn apply(&self, _state: &mut TableState, _txn: &mut TxnContext) {}
}

impl CloneTable {
    pub(crate) fn encode(&self) -> proto::CloneTable {
        proto::CloneTable {
            is_shallow: self.is_shallow,
            ref_name: self.ref_name.clone(),
            ref_version: self.ref_version,
            ref_path: self.ref_path.clone(),
            branch_name: self.branch_name.clone(),
        }
    }

    pub(crate) fn decode(p: proto::CloneTable) -> Result<Self> {
        Ok(Self {
            is_shallow: p.is_shallow,
            ref_name: p.ref_name,
            ref_version: p.ref_version,
            ref_path: p.ref_path,
            branch_name: p.branch_name,
        })
    }
}

impl ActionLife for CloneTable {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.clone, self.clone(), shell, "CloneTable")
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::ReplacesTable { action: ActionKind::CloneTable })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::CloneTable })
    }

    fn describe(&self) -> String {
        format!("from {} v{}", self.ref_path, self.ref_version)
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    fn clone() -> CloneTable {
        CloneTable { is_shallow: true, ref_name: None, ref_version: 3, ref_path: "/src".into(), branch_name: None }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let cloned = txn(OperationKind::Clone, vec![clone().into()]);
        // A clone starts a new table's history: it meets no writer of this one either way.
        vec![
            case("append_after_committed_clone_commutes", append(), cloned.clone(), "ok"),
            case("clone_after_committed_append_commutes", cloned, append(), "ok"),
        ]
    }

    #[test]
    fn rebind_refuses_a_clone_and_lowering_refuses_two() {
        let clone = clone();
        assert_eq!(rebound(clone.clone()), Err(RebindRefusal::ReplacesTable { action: ActionKind::CloneTable }));
        assert_eq!(clone.describe(), "from /src v3");
        let err = crate::lower(&txn(OperationKind::Clone, vec![clone.clone().into(), clone.into()])).expect_err("two");
        assert!(err.to_string().contains("more than one CloneTable"), "{err}");
    }
}
