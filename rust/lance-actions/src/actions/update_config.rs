//! UpdateConfig: upserts and deletes in one manifest map (config, table metadata, schema metadata,
//! or one field's metadata). Per key: disjoint keys commute; a `replace` writes the whole map.
//! Lowers to the matching slot of `UpdateConfig`, or to `Overwrite.config_upsert_values`.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::transaction::UpdateMap;
use lance_table::transaction::UpdateMapEntry;

use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::{OperationKind, TxnContext};
use crate::path::{ConfigMap, ManifestPath, Mask};
use crate::state::TableState;
use crate::table_class::{FROZEN_KEYS, KEY_NAMES_KEY, TABLE_CLASS_KEY, TableClass, check_primary_key};
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct UpdateConfig {
    pub map: ConfigMap,
    pub update: UpdateMap,
}

impl UpdateConfig {
    fn is_schema_metadata(&self) -> bool {
        matches!(self.map, ConfigMap::SchemaMetadata | ConfigMap::FieldMetadata(_))
    }

    /// Do two updates of the same map clash? Deleting a key twice is idempotent and commutes.
    fn clashes_with(&self, other: &UpdateConfig) -> bool {
        if self.map != other.map {
            return false;
        }
        // Lance ignores `replace` on the config map itself and compares keys only.
        if (self.update.replace || other.update.replace) && self.map != ConfigMap::Config {
            return true;
        }
        self.update.update_entries.iter().any(|ours| {
            other.update.update_entries.iter().any(|theirs| {
                let same_declaration = self.map == ConfigMap::Config
                    && FROZEN_KEYS.contains(&ours.key.as_str())
                    && ours.value.is_some()
                    && ours.value == theirs.value;
                ours.key == theirs.key && (ours.value.is_some() || theirs.value.is_some()) && !same_declaration
            })
        })
    }

    /// Does this update declare the table's class or key? Such a declaration rests on a scan of the
    /// rows (no duplicate, no null key), so it reads every row (`design/fencing.md`, "1. Table
    /// classes live in the manifest, and the action model enforces them").
    fn declares_class(&self) -> bool {
        self.map == ConfigMap::Config
            && !self.update.replace
            && self
                .update
                .update_entries
                .iter()
                .any(|e| e.value.is_some() && (e.key == TABLE_CLASS_KEY || e.key == KEY_NAMES_KEY))
    }

    /// Are this update's class entries already in `config` (a restatement)?
    fn restates(&self, config: &std::collections::HashMap<String, String>) -> bool {
        self.update
            .update_entries
            .iter()
            .filter(|e| FROZEN_KEYS.contains(&e.key.as_str()))
            .all(|e| e.value.as_ref() == config.get(&e.key))
    }

    fn rebase_one(&self, peer: &PeerAction<'_>, rows_verified: bool) -> Verdict {
        const K: ActionKind = ActionKind::UpdateConfig;
        match peer.action {
            AnyAction::Opaque(_) => peer.fail(K, Rule::Opaque, "the committed operation is not understood"),
            _ if !rows_verified && changes_rows(peer.their_path) => peer.retry(
                K,
                Rule::KeysUnverifiable,
                "the committed action changed rows after the key was verified; verify the rows again",
            ),
            AnyAction::Restore(_) | AnyAction::ResetTable(_) if self.is_schema_metadata() => {
                peer.fail(K, Rule::BaselineReplaced, "the schema our metadata update targets was replaced")
            }
            AnyAction::Restore(_) | AnyAction::ResetTable(_) => Verdict::Ok,
            AnyAction::UpdateConfig(theirs) if self.clashes_with(theirs) => {
                peer.fail(K, Rule::ConfigClash, format!("both transactions write {:?}", self.map))
            }
            AnyAction::UpdateConfig(_) => Verdict::Ok,
            AnyAction::ChangeSchema(_) if peer.context.shell == OperationKind::Merge && self.is_schema_metadata() => {
                peer.retry(K, Rule::SchemaChanged, "a committed merge restated the schema metadata")
            }
            _ => Verdict::Ok,
        }
    }
}

impl Action for UpdateConfig {
    fn kind(&self) -> ActionKind {
        ActionKind::UpdateConfig
    }

    fn reads(&self) -> Mask {
        if self.declares_class() { Mask::new().with(ManifestPath::TableData) } else { Mask::new() }
    }

    fn writes(&self) -> Mask {
        if self.update.replace {
            return Mask::new().with(ManifestPath::ConfigMapWhole(self.map.clone()));
        }
        Mask(
            self.update
                .update_entries
                .iter()
                .map(|e| ManifestPath::ConfigEntry { map: self.map.clone(), key: e.key.clone() })
                .collect(),
        )
    }

    /// A table's class and key only roll forward (`design/fencing.md` §1): once keyed, the class, key and
    /// fencing stamp never change, and a table becomes keyed only when its schema carries the key.
    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        if self.map != ConfigMap::Config {
            return Ok(());
        }
        let refuse = |detail: String| Err(invalid(ActionKind::UpdateConfig, detail));
        let before = TableClass::of(&state.config);
        let mut after_config = state.config.clone();
        self.apply_to(&mut after_config);
        if before.is_keyed() {
            // Setting an absent entry rolls forward (the stamp comes last); a set one never changes.
            let changed = |k: &&&str| state.config.get(**k).is_some_and(|v| after_config.get(**k) != Some(v));
            if let Some(key) = FROZEN_KEYS.iter().find(changed) {
                return refuse(format!("'{key}' of a keyed table cannot change once set (roll-forward only)"));
            }
        }
        match TableClass::of(&after_config) {
            TableClass::Keyed { key } if key.is_empty() => refuse("a keyed table needs a non-empty key".into()),
            TableClass::Keyed { key } if before != (TableClass::Keyed { key: key.clone() }) => {
                match check_primary_key(&state.schema, &key) {
                    Ok(()) => Ok(()),
                    Err(why) => refuse(format!("cannot declare the table keyed: {why}")),
                }
            }
            _ => Ok(()),
        }
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        // A declaration the base or the head already holds rests on rows its declarer verified:
        // an overwrite restating the class, or a migrated branch replayed onto its migrated main.
        // Rows committed after the head's declaration were fenced by it (`design/fencing.md`,
        // "1. Table classes live in the manifest, and the action model enforces them").
        let rows_verified = !self.declares_class()
            || self.restates(&cx.base.config)
            || cx.head.is_some_and(|head| self.restates(&head.config));
        fold_verdicts(peers, |p| self.rebase_one(p, rows_verified))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        let target = match self.map {
            ConfigMap::Config => &mut state.config,
            ConfigMap::TableMetadata => &mut state.table_metadata,
            ConfigMap::SchemaMetadata => &mut state.schema.metadata,
            ConfigMap::FieldMetadata(id) => match state.schema.mut_field_by_id(id) {
                Some(field) => &mut field.metadata,
                None => return,
            },
        };
        self.apply_to(target);
    }
}

/// Does a committed write of `path` change which rows (or which key values) the table holds?
/// Schema definitions and config do not.
fn changes_rows(path: &ManifestPath) -> bool {
    matches!(
        path,
        ManifestPath::Table
            | ManifestPath::TableData
            | ManifestPath::FragmentSet
            | ManifestPath::Fragment { .. }
            | ManifestPath::FragmentsCoveringField { .. }
            | ManifestPath::FieldValues { .. }
    )
}

impl UpdateConfig {
    fn apply_to(&self, target: &mut std::collections::HashMap<String, String>) {
        if self.update.replace {
            target.clear();
        }
        for entry in &self.update.update_entries {
            match &entry.value {
                Some(v) => target.insert(entry.key.clone(), v.clone()),
                None => target.remove(&entry.key),
            };
        }
    }
}

impl UpdateConfig {
    pub(crate) fn encode(&self) -> proto::UpdateConfig {
        use proto::ConfigMapKind as M;
        let (map, field_id) = match self.map {
            ConfigMap::Config => (M::Config, 0),
            ConfigMap::TableMetadata => (M::TableMetadata, 0),
            ConfigMap::SchemaMetadata => (M::SchemaMetadata, 0),
            ConfigMap::FieldMetadata(id) => (M::FieldMetadata, id),
        };
        proto::UpdateConfig {
            map: map as i32,
            field_id,
            entries: self
                .update
                .update_entries
                .iter()
                .map(|e| proto::MapEntry { key: e.key.clone(), value: e.value.clone() })
                .collect(),
            replace: self.update.replace,
        }
    }

    pub(crate) fn decode(p: proto::UpdateConfig) -> Result<Self> {
        use proto::ConfigMapKind as M;
        let map = match M::try_from(p.map) {
            Ok(M::Config) => ConfigMap::Config,
            Ok(M::TableMetadata) => ConfigMap::TableMetadata,
            Ok(M::SchemaMetadata) => ConfigMap::SchemaMetadata,
            Ok(M::FieldMetadata) => ConfigMap::FieldMetadata(p.field_id),
            Ok(M::Unspecified) | Err(_) => return Err(codec::corrupt(format!("unknown config map {}", p.map))),
        };
        let update_entries = p.entries.into_iter().map(|e| UpdateMapEntry { key: e.key, value: e.value }).collect();
        Ok(Self { map, update: UpdateMap { update_entries, replace: p.replace } })
    }
}

impl ActionLife for UpdateConfig {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.config.push(self.clone());
        Ok(())
    }

    /// Config and metadata keys (and field ids, for field metadata) are shared by both branches.
    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Ok(self.clone().into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::UpdateConfig })
    }

    fn describe(&self) -> String {
        let keys: Vec<&str> = self.update.update_entries.iter().map(|e| e.key.as_str()).collect();
        format!("{:?} keys {keys:?}{}", self.map, if self.update.replace { " (replace)" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::OperationKind;
    use crate::driver::{Inputs, Peer, resolve};
    use crate::txn::ActionTxn;
    use crate::{NoFacts, TableState};

    fn txn(map: ConfigMap, key: &str, value: Option<&str>) -> ActionTxn {
        let update = UpdateMap {
            update_entries: vec![UpdateMapEntry { key: key.into(), value: value.map(Into::into) }],
            replace: false,
        };
        ActionTxn::new(OperationKind::UpdateConfig, vec![UpdateConfig { map, update }.into()])
    }

    fn verdict(ours: &ActionTxn, theirs: &ActionTxn) -> &'static str {
        let base = TableState::empty(lance_core::datatypes::Schema { fields: vec![], metadata: Default::default() });
        let peers = [Peer::new(2, theirs.clone())];
        resolve(ours, &Inputs { base: &base, head: None, peers: &peers, facts: &NoFacts }).verdict.label()
    }

    #[test]
    fn declaring_the_class_reads_the_rows_so_a_committed_insert_makes_it_retry() {
        use crate::actions::add_fragments::AddFragments;
        use crate::table_class::{FENCING_FORMAT_KEY, KEY_NAMES_KEY, KEYED, TABLE_CLASS_KEY};
        let entries = [(TABLE_CLASS_KEY, KEYED), (KEY_NAMES_KEY, "id")]
            .iter()
            .map(|(k, v)| UpdateMapEntry { key: k.to_string(), value: Some(v.to_string()) })
            .collect();
        let declare = ActionTxn::new(
            OperationKind::UpdateConfig,
            vec![
                UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: entries, replace: false } }
                    .into(),
            ],
        );
        let fragment = lance_table::format::Fragment::new(0);
        let insert =
            ActionTxn::new(OperationKind::Append, vec![AddFragments { fragments: vec![fragment], keys: None }.into()]);
        assert_eq!(verdict(&declare, &insert), "retry", "the rows the declaration verified changed");
        // The same declaration committed twice commutes; the stamp alone reads no rows.
        assert_eq!(verdict(&declare, &declare.clone()), "ok");
        assert_eq!(verdict(&txn(ConfigMap::Config, FENCING_FORMAT_KEY, Some("1")), &insert), "ok");
    }

    #[test]
    fn schema_metadata_commutes_per_key_and_clashes_on_the_same_key() {
        let a = txn(ConfigMap::SchemaMetadata, "a", Some("1"));
        let b = txn(ConfigMap::SchemaMetadata, "b", Some("1"));
        assert_eq!(verdict(&a, &b), "ok");
        assert_eq!(verdict(&a, &a.clone()), "fail");
    }

    #[test]
    fn field_metadata_commutes_across_keys_of_one_field() {
        let a = txn(ConfigMap::FieldMetadata(3), "a", Some("1"));
        let b = txn(ConfigMap::FieldMetadata(3), "b", Some("1"));
        assert_eq!(verdict(&a, &b), "ok");
    }

    #[test]
    fn deleting_a_config_key_twice_commutes_but_delete_vs_upsert_fails() {
        let del = txn(ConfigMap::Config, "k", None);
        let put = txn(ConfigMap::Config, "k", Some("v"));
        assert_eq!(verdict(&del, &del.clone()), "ok");
        assert_eq!(verdict(&del, &put), "fail");
        assert_eq!(verdict(&put, &del), "fail");
    }

    #[test]
    fn replacing_table_metadata_clashes_with_any_key_of_that_map() {
        let mut replace = txn(ConfigMap::TableMetadata, "a", Some("1"));
        if let crate::AnyAction::UpdateConfig(u) = &mut replace.actions[0] {
            u.update.replace = true;
        }
        let other = txn(ConfigMap::TableMetadata, "zzz", Some("1"));
        assert_eq!(verdict(&other, &replace), "fail");
        assert_eq!(verdict(&txn(ConfigMap::Config, "zzz", Some("1")), &replace), "ok");
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    use lance_table::transaction::UpdateMapEntry;

    fn upsert(key: &str) -> UpdateConfig {
        UpdateConfig {
            map: ConfigMap::Config,
            update: UpdateMap {
                update_entries: vec![UpdateMapEntry { key: key.into(), value: Some("b".into()) }],
                replace: false,
            },
        }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let config = |key| txn(OperationKind::UpdateConfig, vec![upsert(key).into()]);
        vec![
            case("config_after_committed_config_of_other_key_commutes", config("k1"), config("k2"), "ok"),
            case("config_after_committed_config_of_same_key_fails", config("k1"), config("k1"), "fail"),
        ]
    }

    #[test]
    fn rebind_keeps_a_config_change_and_squash_refuses_it() {
        assert_eq!(rebound(upsert("k1")), Ok(upsert("k1").into()), "keys are shared by both branches");
        assert_eq!(
            squashed(vec![(5, vec![], vec![upsert("k1").into()])]).map(|s| s.new_ids),
            Err(SquashRefusal::NotComposable { action: ActionKind::UpdateConfig })
        );
        assert_eq!(upsert("k1").describe(), "Config keys [\"k1\"]");
    }
}
