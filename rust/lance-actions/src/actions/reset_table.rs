//! ResetTable: replace the table wholesale (the baseline of an `Overwrite`): every fragment goes and
//! the schema becomes `schema`. The new fragments, config upserts and initial bases of the overwrite
//! follow as their own actions. Last writer wins against ordinary writes; two concurrent resets
//! retry (a config-key clash inside them fails, through their UpdateConfig actions).

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_core::datatypes::Schema;

use super::keeps_primary_key;
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::context::TxnContext;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct ResetTable {
    pub schema: Schema,
}

impl ResetTable {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::ResetTable;
        match peer.action {
            AnyAction::Opaque(_) => peer.fail(K, Rule::Opaque, "the committed operation is not understood"),
            AnyAction::ResetTable(_) => peer.retry(K, Rule::BaselineReplaced, "another overwrite committed first"),
            AnyAction::UpdateMemWalState(_) => peer.fail(
                K,
                Rule::MemWalGeneration,
                "a MemWAL state update recorded progress against the table we replace",
            ),
            _ => Verdict::Ok,
        }
    }
}

impl Action for ResetTable {
    fn kind(&self) -> ActionKind {
        ActionKind::ResetTable
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::Table)
    }

    /// An overwrite of a keyed table keeps exactly its primary key (`design/fencing.md` §1).
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        keeps_primary_key(ActionKind::ResetTable, state, &self.schema, false)
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        state.fragments.clear();
        state.indices.clear();
        state.schema = self.schema.clone();
        state.replaced_by_txn = true;
    }
}

impl ResetTable {
    pub(crate) fn encode(&self) -> proto::ResetTable {
        proto::ResetTable { schema: Some(codec::schema_to_proto(&self.schema)) }
    }

    pub(crate) fn decode(p: proto::ResetTable) -> Result<Self> {
        Ok(Self { schema: codec::schema_from_proto(p.schema)? })
    }
}

impl ActionLife for ResetTable {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.reset, self.clone(), shell, "ResetTable")
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::ReplacesTable { action: ActionKind::ResetTable })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::ResetTable })
    }

    fn describe(&self) -> String {
        format!("schema of {} field(s)", self.schema.fields_pre_order().count())
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    fn reset() -> ResetTable {
        ResetTable { schema: table().schema }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let overwrite = || txn(OperationKind::Overwrite, vec![reset().into()]);
        vec![case("overwrite_after_committed_overwrite_retries", overwrite(), overwrite(), "retry")]
    }

    #[test]
    fn rebind_refuses_a_table_reset_and_description_counts_fields() {
        assert_eq!(rebound(reset()), Err(RebindRefusal::ReplacesTable { action: ActionKind::ResetTable }));
        assert_eq!(reset().describe(), "schema of 3 field(s)");
    }
}
