//! Translation between Lance operations and action transactions: `lift` and `lower`, with
//! `lower(lift(op)) == op` for every operation Lance can encode.

use std::collections::{BTreeSet, HashMap};

use lance_table::transaction::{Operation, UpdateMap, UpdateMapEntry};

use crate::action::{Action, ActionKind, AnyAction};
use crate::actions::{
    add_bases::AddBases,
    add_fragments::AddFragments,
    add_index::AddIndex,
    add_overlay::AddOverlay,
    change_schema::ChangeSchema,
    clone_table::CloneTable,
    invalidate_index_coverage::InvalidateIndexCoverage,
    merge_columns::MergeColumns,
    opaque::Opaque,
    remove_fragments::RemoveFragments,
    remove_index::RemoveIndex,
    replace_fragment_columns::{ColumnTarget, ReplaceFragmentColumns},
    reserve_fragment_ids::ReserveFragmentIds,
    reset_table::ResetTable,
    restore::Restore,
    rewrite_fragments::RewriteFragments,
    update_config::UpdateConfig,
    update_deletion_vector::UpdateDeletionVector,
    update_mem_wal_state::UpdateMemWalState,
};
use crate::context::{OperationKind, TxnContext};
use crate::error::{Error, Result};
use crate::keys::InsertedKeys;
use crate::life::ActionLife;
use crate::path::ConfigMap;
use crate::txn::ActionTxn;

/// Re-model a Lance operation as an action transaction. `Unknown` becomes an `Opaque` action that
/// conflicts with everything; nothing is dropped.
pub fn lift(op: &Operation) -> ActionTxn {
    let shell = OperationKind::of(op);
    let mut cx = TxnContext::new(shell);
    let actions: Vec<AnyAction> = match op {
        Operation::Append { fragments } => vec![AddFragments { fragments: fragments.clone(), keys: None }.into()],
        Operation::Delete { updated_fragments, deleted_fragment_ids, predicate } => {
            cx.predicate = predicate.clone();
            let mut out: Vec<AnyAction> =
                updated_fragments.iter().map(|f| UpdateDeletionVector::new(f.clone(), None).into()).collect();
            if !deleted_fragment_ids.is_empty() {
                out.push(RemoveFragments { ids: deleted_fragment_ids.clone() }.into());
            }
            out
        }
        Operation::Overwrite { fragments, schema, config_upsert_values, initial_bases } => {
            let mut out: Vec<AnyAction> = vec![
                ResetTable { schema: schema.clone() }.into(),
                AddFragments { fragments: fragments.clone(), keys: None }.into(),
            ];
            if let Some(values) = config_upsert_values {
                out.push(UpdateConfig { map: ConfigMap::Config, update: sorted_upserts(values) }.into());
            }
            if let Some(bases) = initial_bases {
                out.push(AddBases { bases: bases.clone() }.into());
            }
            out
        }
        Operation::CreateIndex { new_indices, removed_indices } => removed_indices
            .iter()
            .map(|i| RemoveIndex { index: i.clone() }.into())
            .chain(new_indices.iter().map(|i| AddIndex { index: i.clone() }.into()))
            .collect(),
        Operation::Rewrite { groups, rewritten_indices, frag_reuse_index } => vec![
            RewriteFragments {
                groups: groups.clone(),
                rewritten_indices: rewritten_indices.clone(),
                frag_reuse_index: frag_reuse_index.clone(),
            }
            .into(),
        ],
        Operation::DataReplacement { replacements } => replacements
            .iter()
            .map(|g| {
                ReplaceFragmentColumns { target: ColumnTarget::File { fragment_id: g.0, file: g.1.clone() } }.into()
            })
            .collect(),
        Operation::DataOverlay { groups } => groups.iter().map(|g| AddOverlay { group: g.clone() }.into()).collect(),
        Operation::Merge { fragments, schema, preserves_nullability } => vec![
            ChangeSchema { schema: schema.clone(), preserves_nullability: *preserves_nullability }.into(),
            MergeColumns { fragments: fragments.clone() }.into(),
        ],
        Operation::Restore { version } => vec![Restore::new(*version).into()],
        Operation::ReserveFragments { num_fragments } => vec![ReserveFragmentIds { count: *num_fragments }.into()],
        Operation::Update { .. } => lift_update(op, &mut cx),
        Operation::Project { schema, preserves_nullability } => {
            vec![ChangeSchema { schema: schema.clone(), preserves_nullability: *preserves_nullability }.into()]
        }
        Operation::UpdateConfig {
            config_updates,
            table_metadata_updates,
            schema_metadata_updates,
            field_metadata_updates,
        } => {
            let mut out: Vec<AnyAction> = Vec::new();
            let maps = [
                (ConfigMap::Config, config_updates),
                (ConfigMap::TableMetadata, table_metadata_updates),
                (ConfigMap::SchemaMetadata, schema_metadata_updates),
            ];
            for (map, update) in maps {
                if let Some(update) = update {
                    out.push(UpdateConfig { map, update: update.clone() }.into());
                }
            }
            let mut fields: Vec<_> = field_metadata_updates.iter().collect();
            fields.sort_by_key(|(id, _)| **id);
            for (id, update) in fields {
                out.push(UpdateConfig { map: ConfigMap::FieldMetadata(*id), update: update.clone() }.into());
            }
            out
        }
        Operation::UpdateMemWalState { compacted_sstables } => {
            cx.compacted_sstables = compacted_sstables.clone();
            vec![UpdateMemWalState.into()]
        }
        Operation::Clone { is_shallow, ref_name, ref_version, ref_path, branch_name } => vec![
            CloneTable {
                is_shallow: *is_shallow,
                ref_name: ref_name.clone(),
                ref_version: *ref_version,
                ref_path: ref_path.clone(),
                branch_name: branch_name.clone(),
            }
            .into(),
        ],
        Operation::UpdateBases { new_bases } => vec![AddBases { bases: new_bases.clone() }.into()],
        Operation::Unknown { .. } => {
            vec![Opaque { description: "an operation written by a newer Lance".into() }.into()]
        }
    };
    ActionTxn { context: cx, actions }
}

fn lift_update(op: &Operation, cx: &mut TxnContext) -> Vec<AnyAction> {
    let Operation::Update {
        removed_fragment_ids,
        updated_fragments,
        new_fragments,
        fields_modified,
        compacted_sstables,
        fields_for_preserving_frag_bitmap,
        update_mode,
        inserted_rows_filter,
        updated_fragment_offsets,
    } = op
    else {
        return Vec::new();
    };
    cx.update_mode = update_mode.clone();
    cx.fields_for_preserving_frag_bitmap = fields_for_preserving_frag_bitmap.clone();
    cx.updated_fragment_offsets = updated_fragment_offsets.clone();
    cx.compacted_sstables = compacted_sstables.clone();
    let rewrites_columns = *update_mode == Some(lance_table::transaction::UpdateMode::RewriteColumns);

    let mut out: Vec<AnyAction> = Vec::new();
    if !removed_fragment_ids.is_empty() {
        out.push(RemoveFragments { ids: removed_fragment_ids.clone() }.into());
    }
    for fragment in updated_fragments {
        out.push(if rewrites_columns {
            ReplaceFragmentColumns {
                target: ColumnTarget::Rewritten { fragment: fragment.clone(), fields: fields_modified.clone() },
            }
            .into()
        } else {
            UpdateDeletionVector::new(fragment.clone(), None).into()
        });
    }
    if !new_fragments.is_empty() || inserted_rows_filter.is_some() {
        out.push(
            AddFragments {
                fragments: new_fragments.clone(),
                keys: inserted_rows_filter.clone().map(InsertedKeys::from_lance),
            }
            .into(),
        );
    }
    if !fields_modified.is_empty() {
        out.push(
            InvalidateIndexCoverage::new(updated_fragments.iter().map(|f| f.id).collect(), fields_modified.clone())
                .into(),
        );
    }
    out
}

fn sorted_upserts(values: &HashMap<String, String>) -> UpdateMap {
    let mut entries: Vec<UpdateMapEntry> =
        values.iter().map(|(k, v)| UpdateMapEntry { key: k.clone(), value: Some(v.clone()) }).collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    UpdateMap { update_entries: entries, replace: false }
}

pub(crate) fn not_lowerable(shell: OperationKind, reason: impl Into<String>) -> Error {
    Error::NotLowerable { shell: shell.to_string(), reason: reason.into() }
}

fn unexpected(shell: OperationKind, kind: ActionKind) -> Error {
    not_lowerable(shell, format!("a {shell} transaction cannot carry a {kind:?} action"))
}

/// Express an action transaction as the Lance operation named by its shell. Every action must be one
/// the shell can carry, and derived actions must agree with what the shell implies; otherwise a
/// typed error says which action could not be expressed.
pub fn lower(txn: &ActionTxn) -> Result<Operation> {
    let shell = txn.shell();
    let mut acc = Lowering::default();
    for action in &txn.actions {
        acc.take(shell, action)?;
    }
    acc.finish(shell, &txn.context)
}

/// Actions sorted into the slots Lance operations have. Each action module puts itself in its slot
/// ([`crate::ActionLife::lower_into`]); which slots a shell may fill is decided here, per shell.
#[derive(Default)]
pub struct Lowering {
    /// The kinds of every action taken, so a slot the shell cannot carry is never silently dropped.
    present: BTreeSet<ActionKind>,
    pub(crate) added: Vec<lance_table::format::Fragment>,
    pub(crate) keys: Option<InsertedKeys>,
    pub(crate) removed_ids: Vec<u64>,
    pub(crate) updated: Vec<lance_table::format::Fragment>,
    pub(crate) rewritten_fields: Vec<Vec<u32>>,
    pub(crate) replacements: Vec<lance_table::transaction::DataReplacementGroup>,
    pub(crate) overlays: Vec<lance_table::transaction::DataOverlayGroup>,
    pub(crate) rewrite: Option<RewriteFragments>,
    pub(crate) merge: Option<Vec<lance_table::format::Fragment>>,
    pub(crate) invalidate: Option<InvalidateIndexCoverage>,
    pub(crate) new_indices: Vec<lance_table::format::IndexMetadata>,
    pub(crate) removed_indices: Vec<lance_table::format::IndexMetadata>,
    pub(crate) schema: Option<ChangeSchema>,
    pub(crate) reset: Option<ResetTable>,
    pub(crate) config: Vec<UpdateConfig>,
    pub(crate) bases: Option<Vec<lance_table::format::BasePath>>,
    pub(crate) reserve: Option<u32>,
    pub(crate) restore: Option<u64>,
    pub(crate) clone: Option<CloneTable>,
    pub(crate) memwal: Option<()>,
}

impl Lowering {
    /// Has an action of `kind` been taken already?
    pub(crate) fn holds(&self, kind: ActionKind) -> bool {
        self.present.contains(&kind)
    }

    fn take(&mut self, shell: OperationKind, action: &AnyAction) -> Result<()> {
        action.lower_into(self, shell)?;
        self.present.insert(action.kind());
        // Positive and negative space: a taken action fills a slot, and the opaque one never does.
        debug_assert!(action.kind() != ActionKind::Opaque, "an opaque action is never lowered");
        Ok(())
    }

    /// Fail if any slot other than `allowed` holds something: it would be silently dropped.
    fn only(&self, shell: OperationKind, allowed: &[ActionKind]) -> Result<()> {
        match self.present.iter().find(|kind| !allowed.contains(kind)) {
            Some(kind) => Err(unexpected(shell, *kind)),
            None => Ok(()),
        }
    }

    fn finish(self, shell: OperationKind, cx: &TxnContext) -> Result<Operation> {
        use ActionKind as K;
        check_context_fits(shell, cx)?;
        if !cx.compacted_sstables.is_empty()
            && !matches!(shell, OperationKind::Update | OperationKind::UpdateMemWalState)
        {
            return Err(not_lowerable(shell, "only Update and UpdateMemWalState carry compacted SSTables"));
        }
        let required = |what: &str| not_lowerable(shell, format!("missing its {what} action"));
        let op = match shell {
            OperationKind::Append => {
                self.only(shell, &[K::AddFragments])?;
                if self.keys.is_some() {
                    return Err(not_lowerable(shell, "an Append cannot carry inserted keys; use an Update shell"));
                }
                Operation::Append { fragments: self.added }
            }
            OperationKind::Delete => {
                self.only(shell, &[K::UpdateDeletionVector, K::RemoveFragments])?;
                Operation::Delete {
                    updated_fragments: self.updated,
                    deleted_fragment_ids: self.removed_ids,
                    predicate: cx.predicate.clone(),
                }
            }
            OperationKind::Overwrite => {
                self.only(shell, &[K::ResetTable, K::AddFragments, K::UpdateConfig, K::AddBases])?;
                let reset = self.reset.ok_or_else(|| required("ResetTable"))?;
                if self.keys.is_some() {
                    return Err(not_lowerable(shell, "an Overwrite cannot carry inserted keys"));
                }
                Operation::Overwrite {
                    fragments: self.added,
                    schema: reset.schema,
                    config_upsert_values: overwrite_config(shell, self.config)?,
                    initial_bases: self.bases,
                }
            }
            OperationKind::CreateIndex => {
                self.only(shell, &[K::AddIndex, K::RemoveIndex])?;
                Operation::CreateIndex { new_indices: self.new_indices, removed_indices: self.removed_indices }
            }
            OperationKind::Rewrite => {
                self.only(shell, &[K::RewriteFragments])?;
                let rw = self.rewrite.ok_or_else(|| required("RewriteFragments"))?;
                Operation::Rewrite {
                    groups: rw.groups,
                    rewritten_indices: rw.rewritten_indices,
                    frag_reuse_index: rw.frag_reuse_index,
                }
            }
            OperationKind::DataReplacement => {
                self.only(shell, &[K::ReplaceFragmentColumns])?;
                if !self.rewritten_fields.is_empty() {
                    return Err(not_lowerable(
                        shell,
                        "a DataReplacement replaces whole files, not rewritten fragments",
                    ));
                }
                Operation::DataReplacement { replacements: self.replacements }
            }
            OperationKind::DataOverlay => {
                self.only(shell, &[K::AddOverlay])?;
                Operation::DataOverlay { groups: self.overlays }
            }
            OperationKind::Merge => {
                self.only(shell, &[K::ChangeSchema, K::MergeColumns])?;
                let schema = self.schema.ok_or_else(|| required("ChangeSchema"))?;
                let fragments = self.merge.ok_or_else(|| required("MergeColumns"))?;
                Operation::Merge {
                    fragments,
                    schema: schema.schema,
                    preserves_nullability: schema.preserves_nullability,
                }
            }
            OperationKind::Restore => {
                self.only(shell, &[K::Restore])?;
                Operation::Restore { version: self.restore.ok_or_else(|| required("Restore"))? }
            }
            OperationKind::ReserveFragments => {
                self.only(shell, &[K::ReserveFragmentIds])?;
                Operation::ReserveFragments {
                    num_fragments: self.reserve.ok_or_else(|| required("ReserveFragmentIds"))?,
                }
            }
            OperationKind::Update => self.finish_update(shell, cx)?,
            OperationKind::Project => {
                self.only(shell, &[K::ChangeSchema])?;
                let schema = self.schema.ok_or_else(|| required("ChangeSchema"))?;
                Operation::Project { schema: schema.schema, preserves_nullability: schema.preserves_nullability }
            }
            OperationKind::UpdateConfig => {
                self.only(shell, &[K::UpdateConfig])?;
                update_config_op(shell, self.config)?
            }
            OperationKind::UpdateMemWalState => {
                self.only(shell, &[K::UpdateMemWalState])?;
                Operation::UpdateMemWalState { compacted_sstables: cx.compacted_sstables.clone() }
            }
            OperationKind::Clone => {
                self.only(shell, &[K::CloneTable])?;
                let c = self.clone.ok_or_else(|| required("CloneTable"))?;
                Operation::Clone {
                    is_shallow: c.is_shallow,
                    ref_name: c.ref_name,
                    ref_version: c.ref_version,
                    ref_path: c.ref_path,
                    branch_name: c.branch_name,
                }
            }
            OperationKind::UpdateBases => {
                self.only(shell, &[K::AddBases])?;
                Operation::UpdateBases { new_bases: self.bases.unwrap_or_default() }
            }
            OperationKind::Unknown => return Err(not_lowerable(shell, "an Unknown operation cannot be written")),
        };
        Ok(op)
    }

    fn finish_update(self, shell: OperationKind, cx: &TxnContext) -> Result<Operation> {
        use ActionKind as K;
        self.only(
            shell,
            &[
                K::RemoveFragments,
                K::UpdateDeletionVector,
                K::ReplaceFragmentColumns,
                K::AddFragments,
                K::InvalidateIndexCoverage,
            ],
        )?;
        if !self.replacements.is_empty() {
            return Err(not_lowerable(
                shell,
                "an Update rewrites fragments; whole-file replacement needs a DataReplacement shell",
            ));
        }
        let fields_modified = self.invalidate.as_ref().map(|i| i.fields.clone()).unwrap_or_default();
        if let Some(inv) = &self.invalidate {
            let updated: Vec<u64> = self.updated.iter().map(|f| f.id).collect();
            if inv.fragments != updated {
                return Err(not_lowerable(shell, "InvalidateIndexCoverage must name exactly the updated fragments"));
            }
        }
        if self.rewritten_fields.iter().any(|f| *f != fields_modified) {
            return Err(not_lowerable(shell, "rewritten columns must equal the update's modified fields"));
        }
        let rewrites_columns = cx.update_mode == Some(lance_table::transaction::UpdateMode::RewriteColumns);
        if rewrites_columns != (self.rewritten_fields.len() == self.updated.len()) && !self.updated.is_empty() {
            return Err(not_lowerable(
                shell,
                "updated fragments must all be column rewrites in RewriteColumns mode, and none otherwise",
            ));
        }
        Ok(Operation::Update {
            removed_fragment_ids: self.removed_ids,
            updated_fragments: self.updated,
            new_fragments: self.added,
            fields_modified,
            compacted_sstables: cx.compacted_sstables.clone(),
            fields_for_preserving_frag_bitmap: cx.fields_for_preserving_frag_bitmap.clone(),
            update_mode: cx.update_mode.clone(),
            inserted_rows_filter: match self.keys {
                None => None,
                Some(InsertedKeys { lance_filter: Some(f), .. }) => Some(f),
                Some(InsertedKeys { lance_filter: None, .. }) => {
                    return Err(not_lowerable(
                        shell,
                        "inserted keys without Lance's filter; build one so Lance's resolver sees them",
                    ));
                }
            },
            updated_fragment_offsets: cx.updated_fragment_offsets.clone(),
        })
    }
}

/// Context fields belong to one shell each; a field the shell cannot carry would be dropped.
fn check_context_fits(shell: OperationKind, cx: &TxnContext) -> Result<()> {
    let is_update = shell == OperationKind::Update;
    let misplaced = [
        ("a predicate", !cx.predicate.is_empty() && shell != OperationKind::Delete),
        ("an update mode", cx.update_mode.is_some() && !is_update),
        ("fields for preserving fragment bitmaps", !cx.fields_for_preserving_frag_bitmap.is_empty() && !is_update),
        ("updated fragment offsets", cx.updated_fragment_offsets.is_some() && !is_update),
    ];
    match misplaced.iter().find(|(_, here)| *here) {
        Some((what, _)) => Err(not_lowerable(shell, format!("a {shell} operation cannot carry {what}"))),
        None => Ok(()),
    }
}

pub(crate) fn set_once<T>(slot: &mut Option<T>, value: T, shell: OperationKind, what: &str) -> Result<()> {
    if slot.is_some() {
        return Err(not_lowerable(shell, format!("more than one {what} action")));
    }
    *slot = Some(value);
    Ok(())
}

fn overwrite_config(shell: OperationKind, config: Vec<UpdateConfig>) -> Result<Option<HashMap<String, String>>> {
    match config.as_slice() {
        [] => Ok(None),
        [u] if u.map == ConfigMap::Config && !u.update.replace => u
            .update
            .update_entries
            .iter()
            .map(|e| match &e.value {
                Some(v) => Ok((e.key.clone(), v.clone())),
                None => Err(not_lowerable(shell, format!("an overwrite cannot delete config key {}", e.key))),
            })
            .collect::<Result<HashMap<_, _>>>()
            .map(Some),
        _ => Err(not_lowerable(shell, "an overwrite carries at most one config upsert map")),
    }
}

fn update_config_op(shell: OperationKind, config: Vec<UpdateConfig>) -> Result<Operation> {
    let (mut config_updates, mut table_metadata_updates, mut schema_metadata_updates) = (None, None, None);
    let mut field_metadata_updates = HashMap::new();
    for u in config {
        let slot = match u.map {
            ConfigMap::Config => &mut config_updates,
            ConfigMap::TableMetadata => &mut table_metadata_updates,
            ConfigMap::SchemaMetadata => &mut schema_metadata_updates,
            ConfigMap::FieldMetadata(id) => {
                if field_metadata_updates.insert(id, u.update).is_some() {
                    return Err(not_lowerable(shell, format!("two updates of field {id}'s metadata")));
                }
                continue;
            }
        };
        if slot.replace(u.update).is_some() {
            return Err(not_lowerable(shell, format!("two updates of the {:?} map", u.map)));
        }
    }
    Ok(Operation::UpdateConfig {
        config_updates,
        table_metadata_updates,
        schema_metadata_updates,
        field_metadata_updates,
    })
}
