//! ChangeSchema: the schema's post-image from a `Project` (rename, drop, nullability) or a `Merge`
//! (new columns). Written per field: every field it keeps may have changed, and the criterion
//! "every field outside the kept set" names what it drops, so a rebase can ask whether a given field
//! really changed by comparing the post-image with the base.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_core::datatypes::Schema;

use super::keeps_primary_key;
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts};
use crate::context::{OperationKind, TxnContext};
use crate::path::{ConfigMap, FieldScope, KeyKind, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct ChangeSchema {
    pub schema: Schema,
    /// False when the change may tighten nullability, a claim proved by scanning at the read version
    /// that any concurrent value write can falsify.
    pub preserves_nullability: bool,
}

impl ChangeSchema {
    fn field_ids(&self) -> Vec<i32> {
        self.schema.fields_pre_order().map(|f| f.id).collect()
    }

    /// Is this the schema step of a key migration: a primary key where our base had none?
    fn installs_key(&self, base: &TableState) -> bool {
        use crate::table_class::primary_key_of;
        primary_key_of(&base.schema).0.is_empty() && !primary_key_of(&self.schema).0.is_empty()
    }

    /// Is exactly this schema already the head's? A key migration runs on every branch, so a
    /// migrated branch replayed onto its migrated main carries the same key install; it is already
    /// in place, the rows before it were verified by the migration that installed it, and the rows
    /// after it were written under it (`design/fencing.md`, "1. Table classes live in the
    /// manifest, and the action model enforces them").
    fn already_installed(&self, head: Option<&TableState>) -> bool {
        head.is_some_and(|h| h.schema == self.schema && h.schema.metadata == self.schema.metadata)
    }

    fn rebase_one(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::ChangeSchema;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        let ours_is_merge = cx.ours.shell == OperationKind::Merge;
        match (peer.action, peer.their_path) {
            // Lance keeps a merge that lands after a projection as incompatible, and every other
            // pair of concurrent schema changes as retryable.
            (AnyAction::ChangeSchema(_), _) if ours_is_merge && peer.context.shell == OperationKind::Project => {
                peer.fail(K, Rule::SchemaChanged, "a projection committed after our merge was planned")
            }
            (AnyAction::ChangeSchema(_), _) => peer.retry(K, Rule::SchemaChanged, "the schema changed concurrently"),
            // A merge restates all schema metadata, so it would silently discard a committed update.
            (AnyAction::UpdateConfig(_), _) if ours_is_merge => {
                peer.retry(K, Rule::SchemaChanged, "a committed metadata update would be lost by our merge")
            }
            (_, ManifestPath::FieldValues { field }) if !self.preserves_nullability => peer.retry(
                K,
                Rule::SchemaChanged,
                format!("committed values of field {field} may falsify our nullability claim"),
            ),
            (AnyAction::MergeColumns(_), _) => peer.retry(K, Rule::SchemaChanged, "a merge changed the fragments"),
            _ => Verdict::Ok,
        }
    }
}

impl Action for ChangeSchema {
    fn kind(&self) -> ActionKind {
        ActionKind::ChangeSchema
    }

    fn reads(&self) -> Mask {
        let mut mask = Mask::new();
        for id in self.field_ids() {
            mask.push(ManifestPath::field(id, FieldScope::Definition));
            if !self.preserves_nullability {
                mask.push(ManifestPath::FieldValues { field: id });
            }
        }
        mask
    }

    fn writes(&self) -> Mask {
        let ids = self.field_ids();
        let mut mask = Mask::new();
        for &id in &ids {
            mask.push(ManifestPath::field(id, FieldScope::Definition));
            mask.push(ManifestPath::ConfigMapWhole(ConfigMap::FieldMetadata(id)));
        }
        mask.push(ManifestPath::FieldsOutside { kept: ids });
        mask.push(ManifestPath::ConfigMapWhole(ConfigMap::SchemaMetadata));
        mask.push(ManifestPath::UnenforcedKey(KeyKind::Primary));
        mask.push(ManifestPath::UnenforcedKey(KeyKind::Clustering));
        mask
    }

    /// A schema change of a keyed table keeps exactly its primary key (`design/fencing.md` §1).
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        keeps_primary_key(ActionKind::ChangeSchema, state, &self.schema, true)
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        let replaced = peers.iter().any(|p| p.replaced_baseline() || p.is_opaque());
        if !replaced && self.installs_key(cx.base) && self.already_installed(cx.head) {
            return Verdict::Ok;
        }
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        state.schema = self.schema.clone();
    }
}

impl ChangeSchema {
    pub(crate) fn encode(&self) -> proto::ChangeSchema {
        proto::ChangeSchema {
            schema: Some(codec::schema_to_proto(&self.schema)),
            preserves_nullability: self.preserves_nullability,
        }
    }

    pub(crate) fn decode(p: proto::ChangeSchema) -> Result<Self> {
        Ok(Self { schema: codec::schema_from_proto(p.schema)?, preserves_nullability: p.preserves_nullability })
    }
}

impl ActionLife for ChangeSchema {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.schema, self.clone(), shell, "ChangeSchema")
    }

    /// A schema names field ids, which both branches share from the fork on.
    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Ok(self.clone().into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::ChangeSchema })
    }

    fn describe(&self) -> String {
        format!(
            "{} field(s), preserves nullability: {}",
            self.schema.fields_pre_order().count(),
            self.preserves_nullability
        )
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    pub(crate) fn cases() -> Vec<Case> {
        let project = |preserves| {
            txn(
                OperationKind::Project,
                vec![ChangeSchema { schema: table().schema, preserves_nullability: preserves }.into()],
            )
        };
        vec![
            case("append_after_committed_nullability_tightening_retries", append(), project(false), "retry"),
            case("append_after_committed_schema_change_preserving_nullability_commutes", append(), project(true), "ok"),
        ]
    }

    #[test]
    fn rebind_keeps_a_schema_change_and_squash_refuses_it() {
        let cs = ChangeSchema { schema: table().schema, preserves_nullability: true };
        assert_eq!(rebound(cs.clone()), Ok(cs.clone().into()), "field ids are shared by both branches");
        assert_eq!(cs.describe(), "3 field(s), preserves nullability: true");
        assert_eq!(
            squashed(vec![(5, vec![], vec![cs.into()])]).map(|s| s.new_ids),
            Err(SquashRefusal::NotComposable { action: ActionKind::ChangeSchema })
        );
    }
}
