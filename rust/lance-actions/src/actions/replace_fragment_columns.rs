//! ReplaceFragmentColumns: new data files for some columns of an existing fragment.
//!
//! Two Lance shapes lower here: a `DataReplacement` group (one data file replacing a column set, as
//! in null-column population) and an updated fragment of an `Update` in `RewriteColumns` mode (the
//! fragment's post-image, whose modified columns are `fields`).

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use std::collections::BTreeSet;

use lance_table::format::{DataFile, Fragment};

use super::{file_fields, key_field_with_new_files, refuses_key_rewrite, supplier_reads, supplier_writes};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::path::{FragmentScope, IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub enum ColumnTarget {
    /// `DataReplacementGroup(fragment_id, file)`.
    File { fragment_id: u64, file: DataFile },
    /// An `Update` (RewriteColumns) post-image; `fields` are the update's `fields_modified`.
    Rewritten { fragment: Fragment, fields: Vec<u32> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplaceFragmentColumns {
    pub target: ColumnTarget,
}

impl ReplaceFragmentColumns {
    pub fn fragment_id(&self) -> u64 {
        match &self.target {
            ColumnTarget::File { fragment_id, .. } => *fragment_id,
            ColumnTarget::Rewritten { fragment, .. } => fragment.id,
        }
    }

    /// The columns whose data this action replaces.
    pub fn fields(&self) -> BTreeSet<i32> {
        match &self.target {
            ColumnTarget::File { file, .. } => file_fields([file]),
            ColumnTarget::Rewritten { fields, .. } => fields.iter().map(|f| *f as i32).collect(),
        }
    }

    /// An update's post-image restates the whole fragment: on a keyed table its key columns must
    /// keep their files, whatever `fields_modified` says.
    fn keeps_key_files(&self, state: &TableState) -> Result<(), Reason> {
        let (ColumnTarget::Rewritten { fragment, .. }, Some(before)) =
            (&self.target, state.fragment(self.fragment_id()))
        else {
            return Ok(());
        };
        let key = crate::table_class::fenced_key_fields(&state.config, &state.schema);
        match key_field_with_new_files(&key, before, fragment) {
            Some(field) => Err(invalid(
                ActionKind::ReplaceFragmentColumns,
                format!(
                    "the table is keyed: the update rewrites key field {field} of fragment {} in place",
                    fragment.id
                ),
            )),
            None => Ok(()),
        }
    }

    /// A `DataReplacement` group rather than an update's column rewrite.
    pub(crate) fn is_data_replacement(&self) -> bool {
        matches!(self.target, ColumnTarget::File { .. })
    }

    fn rebase_one(&self, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::ReplaceFragmentColumns;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        let same_fragment = matches!(peer.their_path, ManifestPath::Fragment { id, .. } if *id == self.fragment_id());
        match peer.action {
            AnyAction::AddFragments(_) | AnyAction::ReserveFragmentIds(_) => Verdict::Ok,
            // An update's own InvalidateIndexCoverage trims the new index when it applies.
            AnyAction::AddIndex(_) if !self.is_data_replacement() => Verdict::Ok,
            AnyAction::AddIndex(ai) => {
                let covered = ai.index.fragment_bitmap.as_ref().is_none_or(|b| b.contains(self.fragment_id() as u32));
                if covered {
                    peer.retry(
                        K,
                        Rule::IndexClash,
                        format!("index {} was trained over a column we replace", ai.index.name),
                    )
                } else {
                    Verdict::Ok
                }
            }
            AnyAction::RemoveIndex(_) => Verdict::Ok,
            AnyAction::ChangeSchema(cs) => {
                let dropped = self.fields().into_iter().find(|f| cs.schema.field_by_id(*f).is_none());
                match dropped {
                    Some(f) if self.is_data_replacement() => {
                        peer.fail(K, Rule::SchemaChanged, format!("the committed schema dropped field {f} we replace"))
                    }
                    Some(f) => peer.retry(K, Rule::SchemaChanged, format!("the committed schema dropped field {f}")),
                    None if !cs.preserves_nullability => {
                        peer.retry(K, Rule::SchemaChanged, "the committed schema change may tighten nullability")
                    }
                    None => Verdict::Ok,
                }
            }
            // A committed overlay on a column we write would lose its values: a columns-mode update
            // rewrote the cells as read before it, and a data replacement commits with the head as
            // its read version, so Lance tombstones every overlay committed up to the head on the
            // columns it replaces (Lance, reading at the older version, would keep it).
            // (The overlap may be met on the field's values rather than on the fragment: compare the
            // overlay's fragment itself.)
            AnyAction::AddOverlay(o) if o.group.fragment_id == self.fragment_id() => {
                let overlaid = file_fields(o.group.overlays.iter().map(|f| &f.data_file));
                if overlaid.iter().any(|f| self.fields().contains(f)) {
                    peer.retry(K, Rule::DataFilesChanged, "the committed overlay covers a column we write")
                } else {
                    Verdict::Ok
                }
            }
            AnyAction::AddOverlay(_) | AnyAction::InvalidateIndexCoverage(_) => Verdict::Ok,
            AnyAction::RemoveFragments(_) if self.is_data_replacement() && same_fragment => {
                peer.fail(K, Rule::FragmentGone, "the committed transaction deleted the fragment we replace columns of")
            }
            // A plain delete's new deletion vector leaves a column replacement valid.
            AnyAction::UpdateDeletionVector(_) if self.is_data_replacement() && !peer.context.moves_rows() => {
                Verdict::Ok
            }
            _ if !same_fragment => Verdict::Ok,
            _ => peer.retry(K, Rule::DataFilesChanged, "the committed transaction changed the fragment"),
        }
    }
}

impl Action for ReplaceFragmentColumns {
    fn kind(&self) -> ActionKind {
        ActionKind::ReplaceFragmentColumns
    }

    fn reads(&self) -> Mask {
        let id = self.fragment_id();
        let fields = self.fields();
        let mut mask = supplier_reads(&fields);
        mask.push(ManifestPath::fragment(id, FragmentScope::Existence));
        mask.push(ManifestPath::fragment(id, FragmentScope::DeletionVector));
        // An index trained concurrently over a column we replace would index the old values.
        for &field in &fields {
            mask.push(ManifestPath::IndicesCoveringField { field, scope: IndexScope::Coverage });
        }
        mask
    }

    fn writes(&self) -> Mask {
        let id = self.fragment_id();
        let fields = self.fields();
        let mut mask =
            Mask(fields.iter().map(|&f| ManifestPath::fragment(id, FragmentScope::DataFiles(Some(f)))).collect());
        mask.extend(supplier_writes(&fields));
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        let id = self.fragment_id();
        if state.fragment(id).is_none() {
            return Err(invalid(ActionKind::ReplaceFragmentColumns, format!("fragment {id} does not exist")));
        }
        match self.fields().into_iter().find(|f| !state.has_field(*f)) {
            Some(f) => Err(invalid(ActionKind::ReplaceFragmentColumns, format!("field {f} is not in the schema"))),
            None => {
                refuses_key_rewrite(ActionKind::ReplaceFragmentColumns, state, &self.fields())?;
                self.keeps_key_files(state)
            }
        }
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        match &self.target {
            ColumnTarget::Rewritten { fragment, .. } => {
                state.fragments.insert(fragment.id, fragment.clone());
            }
            ColumnTarget::File { fragment_id, file } => {
                if let Some(f) = state.fragments.get_mut(fragment_id)
                    && let Some(slot) = f.files.iter_mut().find(|d| d.fields == file.fields)
                {
                    *slot = file.clone();
                }
            }
        }
    }
}

impl ReplaceFragmentColumns {
    pub(crate) fn encode(&self) -> proto::ReplaceFragmentColumns {
        use proto::replace_fragment_columns::{File, Rewritten, Target};
        let target = match &self.target {
            ColumnTarget::File { fragment_id, file } => Target::File(File {
                fragment_id: *fragment_id,
                data_file: codec::lance_bytes(&lance_table::format::pb::DataFile::from(file)),
            }),
            ColumnTarget::Rewritten { fragment, fields } => {
                Target::Rewritten(Rewritten { fragment: codec::fragment_bytes(fragment), fields: fields.clone() })
            }
        };
        proto::ReplaceFragmentColumns { target: Some(target) }
    }

    pub(crate) fn decode(p: proto::ReplaceFragmentColumns) -> Result<Self> {
        use proto::replace_fragment_columns::Target;
        let target = match codec::required(p.target, "column target")? {
            Target::File(f) => ColumnTarget::File {
                fragment_id: f.fragment_id,
                file: codec::lance_convert(
                    codec::lance_message::<lance_table::format::pb::DataFile>(&f.data_file, "data file")?,
                    "data file",
                )?,
            },
            Target::Rewritten(r) => {
                ColumnTarget::Rewritten { fragment: codec::fragment_from(&r.fragment)?, fields: r.fields }
            }
        };
        Ok(Self { target })
    }
}

impl ActionLife for ReplaceFragmentColumns {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        match &self.target {
            ColumnTarget::File { fragment_id, file } => {
                slots.replacements.push(lance_table::transaction::DataReplacementGroup(*fragment_id, file.clone()))
            }
            ColumnTarget::Rewritten { fragment, fields } => {
                slots.updated.push(fragment.clone());
                slots.rewritten_fields.push(fields.clone());
            }
        }
        Ok(())
    }

    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let target = match &self.target {
            ColumnTarget::File { fragment_id, file } => {
                ColumnTarget::File { fragment_id: cx.fragment_id(*fragment_id)?, file: cx.data_file(file)? }
            }
            ColumnTarget::Rewritten { fragment, fields } => {
                ColumnTarget::Rewritten { fragment: rebind::restated_fragment(cx, fragment)?, fields: fields.clone() }
            }
        };
        Ok(ReplaceFragmentColumns { target }.into())
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::ReplaceFragmentColumns })
    }

    fn describe(&self) -> String {
        match &self.target {
            ColumnTarget::File { fragment_id, file } => {
                format!("fragment {fragment_id}, file {} fields {:?}", file.path, file.fields)
            }
            ColumnTarget::Rewritten { fragment, fields } => format!("fragment {}, fields {fields:?}", fragment.id),
        }
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    fn replacement(fragment_id: u64) -> ReplaceFragmentColumns {
        ReplaceFragmentColumns { target: ColumnTarget::File { fragment_id, file: fragment(0).files[0].clone() } }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let replace = |id| txn(OperationKind::DataReplacement, vec![replacement(id).into()]);
        vec![
            case("replacement_after_committed_replacement_of_other_fragment_commutes", replace(0), replace(1), "ok"),
            case("replacement_after_committed_replacement_of_same_fragment_retries", replace(0), replace(0), "retry"),
        ]
    }

    #[test]
    fn rebind_maps_the_fragment_reads_the_file_in_place_and_refuses_unreplayed_ones() {
        let Ok(AnyAction::ReplaceFragmentColumns(r)) = rebound(replacement(10)) else { panic!("replayable") };
        let ColumnTarget::File { fragment_id, file } = r.target else { panic!("still a file replacement") };
        assert_eq!((fragment_id, file.base_id), (20, Some(GRAFTED_BASE)));
        assert_eq!(rebound(replacement(11)), Err(RebindRefusal::UnreplayedFragment { fragment: 11 }));
        assert!(replacement(1).describe().starts_with("fragment 1, file "));
    }
}
