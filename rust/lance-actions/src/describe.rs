//! One-line human summaries of actions, for `explain`, `log` and reasons.

use crate::action::{Action, AnyAction};
use crate::actions::replace_fragment_columns::ColumnTarget;

impl AnyAction {
    /// A short description of the action's payload, e.g. `AddFragments(2 fragments, 14 keys)`.
    pub fn summary(&self) -> String {
        let detail = match self {
            AnyAction::AddFragments(a) => {
                let keys = match &a.keys {
                    None => String::new(),
                    Some(k) => match &k.exact {
                        Some(e) => format!(", {} exact key(s) on fields {:?}", e.len(), e.field_ids),
                        None => format!(", Lance key filter on fields {:?}", k.field_ids()),
                    },
                };
                format!("{} fragment(s){keys}", a.fragments.len())
            }
            AnyAction::RemoveFragments(a) => format!("fragments {:?}", a.ids),
            AnyAction::UpdateDeletionVector(a) => match &a.affected_rows {
                Some(rows) => format!("fragment {}, {} row(s)", a.fragment.id, rows.len()),
                None => format!("fragment {}, rows from its deletion file", a.fragment.id),
            },
            AnyAction::ReplaceFragmentColumns(a) => match &a.target {
                ColumnTarget::File { fragment_id, file } => {
                    format!("fragment {fragment_id}, file {} fields {:?}", file.path, file.fields)
                }
                ColumnTarget::Rewritten { fragment, fields } => format!("fragment {}, fields {fields:?}", fragment.id),
            },
            AnyAction::AddOverlay(a) => {
                format!("fragment {}, {} overlay file(s)", a.group.fragment_id, a.group.overlays.len())
            }
            AnyAction::RewriteFragments(a) => {
                format!("old fragments {:?}, {} index remap(s)", a.old_ids(), a.rewritten_indices.len())
            }
            AnyAction::MergeColumns(a) => format!("{} fragment(s) restated", a.fragments.len()),
            AnyAction::InvalidateIndexCoverage(a) => format!("fields {:?} on fragments {:?}", a.fields, a.fragments),
            AnyAction::AddIndex(a) => format!("{} ({}) on fields {:?}", a.index.name, a.index.uuid, a.index.fields),
            AnyAction::RemoveIndex(a) => format!("{} ({})", a.index.name, a.index.uuid),
            AnyAction::ChangeSchema(a) => format!(
                "{} field(s), preserves nullability: {}",
                a.schema.fields_pre_order().count(),
                a.preserves_nullability
            ),
            AnyAction::ResetTable(a) => format!("schema of {} field(s)", a.schema.fields_pre_order().count()),
            AnyAction::UpdateConfig(a) => {
                let keys: Vec<&str> = a.update.update_entries.iter().map(|e| e.key.as_str()).collect();
                format!("{:?} keys {keys:?}{}", a.map, if a.update.replace { " (replace)" } else { "" })
            }
            AnyAction::AddBases(a) => {
                let paths: Vec<&str> = a.bases.iter().map(|b| b.path.as_str()).collect();
                format!("{paths:?}")
            }
            AnyAction::ReserveFragmentIds(a) => format!("{} id(s)", a.count),
            AnyAction::Restore(a) => format!("version {}", a.version),
            AnyAction::CloneTable(a) => format!("from {} v{}", a.ref_path, a.ref_version),
            AnyAction::Opaque(a) => a.description.clone(),
            AnyAction::UpdateMemWalState(_) => "shard generations in the context".into(),
        };
        format!("{:?}({detail})", self.kind())
    }
}
