//! UpdateMemWalState: a standalone MemWAL state update (Lance's `UpdateMemWalState` operation). The
//! shard generations it advances live in the transaction context (they ride on `Update` too); this
//! action stands for the claim the update makes about the table: its rows and schema are exactly
//! those the write-ahead log was compacted against. So it reads and writes all table data, and
//! commutes only with compaction, id reservation, index, config and base changes, and with a merge
//! (an `Update`), the MemWAL's own way of writing rows, whose generations the context checks.

use super::life_prelude::*;
use lance_table::system_index::mem_wal::load_mem_wal_index_details;

use super::add_index::{AddIndex, MEM_WAL_INDEX_NAME};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::{OperationKind, TxnContext};
use crate::error::Result;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpdateMemWalState;

impl UpdateMemWalState {
    /// A committed MemWAL install records the generations its shards were compacted to (in its
    /// index details, not in a transaction context): the context's generation rule applies to
    /// them (`design/action-model.md`, UpdateMemWalState; Lance judges it so too). Details that do not
    /// decode cannot be compared: Fail, as Lance's commit does.
    fn rebase_vs_install(cx: &RebaseCx<'_>, peer: &PeerAction<'_>, install: &AddIndex) -> Verdict {
        const K: ActionKind = ActionKind::UpdateMemWalState;
        let details = match load_mem_wal_index_details(install.index.clone()) {
            Ok(details) => details,
            Err(e) => {
                return peer.fail(
                    K,
                    Rule::MemWalGeneration,
                    format!("the MemWAL install's details do not decode: {e}"),
                );
            }
        };
        for ours in &cx.ours.compacted_sstables {
            let Some(theirs) = details.compacted_sstables.iter().find(|t| t.shard_id == ours.shard_id) else {
                continue;
            };
            let detail = format!(
                "shard {}: ours generation {}, the install records {}",
                ours.shard_id, ours.generation, theirs.generation
            );
            return if theirs.generation >= ours.generation {
                peer.fail(K, Rule::MemWalGeneration, detail)
            } else {
                peer.retry(K, Rule::MemWalGeneration, detail)
            };
        }
        Verdict::Ok
    }

    fn rebase_one(cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::UpdateMemWalState;
        if peer.context.shell == OperationKind::Update {
            return Verdict::Ok;
        }
        match peer.action {
            AnyAction::AddIndex(install) if install.is_mem_wal_install() => Self::rebase_vs_install(cx, peer, install),
            AnyAction::RewriteFragments(_)
            | AnyAction::ReserveFragmentIds(_)
            | AnyAction::UpdateConfig(_)
            | AnyAction::AddBases(_)
            | AnyAction::AddIndex(_)
            | AnyAction::RemoveIndex(_)
            | AnyAction::InvalidateIndexCoverage(_)
            | AnyAction::UpdateMemWalState(_) => Verdict::Ok,
            _ => peer.fail(K, Rule::MemWalGeneration, "the table data the MemWAL was compacted against changed"),
        }
    }

    pub(crate) fn encode(&self) -> proto::UpdateMemWalState {
        proto::UpdateMemWalState {}
    }

    pub(crate) fn decode(_p: proto::UpdateMemWalState) -> Result<Self> {
        Ok(Self)
    }
}

impl Action for UpdateMemWalState {
    fn kind(&self) -> ActionKind {
        ActionKind::UpdateMemWalState
    }

    /// The table data, and the MemWAL index's name: a committed install carries generations.
    fn reads(&self) -> Mask {
        Mask::new().with(ManifestPath::TableData).with(ManifestPath::IndexName(MEM_WAL_INDEX_NAME.into()))
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::TableData)
    }

    fn validate(&self, _state: &TableState) -> std::result::Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| Self::rebase_one(cx, p))
    }

    fn apply(&self, _state: &mut TableState, _txn: &mut TxnContext) {}
}

impl ActionLife for UpdateMemWalState {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.memwal, (), shell, "UpdateMemWalState")
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::NotTranslatable {
            action: ActionKind::UpdateMemWalState,
            why: "its MemWAL generations describe what was compacted into the source branch's table",
        })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::UpdateMemWalState })
    }

    fn describe(&self) -> String {
        "shard generations in the context".into()
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let memwal = txn(OperationKind::UpdateMemWalState, vec![UpdateMemWalState.into()]);
        vec![case("append_after_committed_memwal_state_update_fails", append(), memwal, "fail")]
    }

    #[test]
    fn rebind_refuses_a_memwal_state_update() {
        assert!(matches!(
            rebound(UpdateMemWalState),
            Err(RebindRefusal::NotTranslatable { action: ActionKind::UpdateMemWalState, .. })
        ));
    }
}
