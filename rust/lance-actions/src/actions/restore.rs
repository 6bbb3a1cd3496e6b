//! Restore: make an old version the head again. A baseline reset, not a delta: the driver does not
//! rebase it forward; it only refuses when a concurrent schema-metadata update would be silently
//! discarded, or when a peer is not understood.
//!
//! A restore is also a config and schema change: on a table with a declared class it must land on a
//! version with the same class, key and fencing stamp (`design/fencing.md` §1, as `UpdateConfig` already
//! enforces). The restored version's class is a fact the commit layer reads (`target`).

use super::life_prelude::*;
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::actions::update_config::UpdateConfig;
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{ConfigMap, ManifestPath, Mask};
use crate::state::TableState;
use crate::table_class::ClassStamp;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    pub version: u64,
    /// The class the restored version declares, read from its manifest by the commit layer; `None`
    /// when unknown. Not part of the wire format: it is re-read wherever the restore is judged.
    pub target: Option<ClassStamp>,
}

impl Restore {
    pub fn new(version: u64) -> Self {
        Self { version, target: None }
    }
}

fn targets_schema_metadata(u: &UpdateConfig) -> bool {
    matches!(u.map, ConfigMap::SchemaMetadata | ConfigMap::FieldMetadata(_))
}

impl Restore {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::Restore;
        match peer.action {
            AnyAction::Opaque(_) => peer.fail(K, Rule::Opaque, "the committed operation is not understood"),
            AnyAction::UpdateMemWalState(_) => peer.fail(
                K,
                Rule::MemWalGeneration,
                "a MemWAL state update recorded progress against the table we replace",
            ),
            AnyAction::UpdateConfig(u) if targets_schema_metadata(u) => {
                peer.fail(K, Rule::LanceCompatible, "a committed schema-metadata update would be discarded")
            }
            _ => Verdict::Ok,
        }
    }
}

impl Action for Restore {
    fn kind(&self) -> ActionKind {
        ActionKind::Restore
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::Table)
    }

    /// The class, key and stamp only roll forward: a restore may not change them.
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        let current = ClassStamp::of(&state.config, &state.schema);
        let refuse = |detail: String| Err(crate::action::invalid(ActionKind::Restore, detail));
        match &self.target {
            None if current.declares_class() => refuse(format!(
                "the table is {current}; the class of version {} is unknown, so the restore cannot be checked",
                self.version
            )),
            None => Ok(()),
            Some(target) if target == &current || !(target.declares_class() || current.declares_class()) => Ok(()),
            Some(target) => refuse(format!(
                "restoring version {} would change the table from {current} to {target}; \
                 a table's class, key and fencing stamp only roll forward",
                self.version
            )),
        }
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    /// The restored manifest is read by the commit layer; the pure state cannot reconstruct it.
    fn apply(&self, _state: &mut TableState, _txn: &mut TxnContext) {}
}

impl Restore {
    pub(crate) fn encode(&self) -> proto::Restore {
        proto::Restore { version: self.version }
    }

    pub(crate) fn decode(p: proto::Restore) -> Result<Self> {
        Ok(Self::new(p.version))
    }
}

impl ActionLife for Restore {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.restore, self.version, shell, "Restore")
    }

    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::ReplacesTable { action: ActionKind::Restore })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::Restore })
    }

    fn describe(&self) -> String {
        format!("version {}", self.version)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use lance_core::datatypes::Schema;

    use super::*;
    use crate::table_class::{FENCING_FORMAT, FENCING_FORMAT_KEY, KEY_NAMES_KEY, KEYED, TABLE_CLASS_KEY};

    fn schema(keyed: bool) -> Schema {
        let mut id = Field::new("id", DataType::Int64, !keyed);
        if keyed {
            id = id.with_metadata(HashMap::from([(
                "lance-schema:unenforced-primary-key".to_string(),
                "true".to_string(),
            )]));
        }
        Schema::try_from(&ArrowSchema::new(vec![id, Field::new("v", DataType::Int64, true)])).expect("schema")
    }

    fn keyed_state() -> TableState {
        let mut state = TableState::empty(schema(true));
        for (k, v) in [(TABLE_CLASS_KEY, KEYED), (KEY_NAMES_KEY, "id"), (FENCING_FORMAT_KEY, FENCING_FORMAT)] {
            state.config.insert(k.to_string(), v.to_string());
        }
        state
    }

    fn restore_to(config: &HashMap<String, String>, keyed: bool) -> Restore {
        Restore { version: 1, target: Some(ClassStamp::of(config, &schema(keyed))) }
    }

    #[test]
    fn a_restore_keeps_the_class_key_and_stamp() {
        let keyed = keyed_state();
        assert!(restore_to(&keyed.config, true).validate(&keyed).is_ok(), "same class: lands");
        let err = restore_to(&HashMap::new(), false).validate(&keyed).expect_err("to a plain version");
        assert!(err.detail.contains("only roll forward"), "{}", err.detail);
        let mut no_stamp = keyed.config.clone();
        no_stamp.remove(FENCING_FORMAT_KEY);
        assert!(restore_to(&no_stamp, true).validate(&keyed).is_err(), "to a version without the stamp");
        let err = Restore::new(1).validate(&keyed).expect_err("an unknown target on a keyed table");
        assert!(err.detail.contains("cannot be checked"), "{}", err.detail);
        // A plain table restores as before, known target or not.
        let plain = TableState::empty(schema(false));
        assert!(Restore::new(1).validate(&plain).is_ok());
        assert!(restore_to(&HashMap::new(), true).validate(&plain).is_ok(), "a key without a class is not a class");
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let restore = txn(OperationKind::Restore, vec![Restore::new(1).into()]);
        vec![case("append_after_committed_restore_fails", append(), restore, "fail")]
    }

    #[test]
    fn rebind_refuses_a_restore_and_description_names_the_version() {
        assert_eq!(rebound(Restore::new(1)), Err(RebindRefusal::ReplacesTable { action: ActionKind::Restore }));
        assert_eq!(Restore::new(1).describe(), "version 1");
    }
}
