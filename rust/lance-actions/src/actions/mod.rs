//! The catalog: one module per action, each owning its definition, masks, rebase and apply.
//! Encoding lives in `codec`, which maps each action to its own protobuf message.

pub mod add_bases;
pub mod add_fragments;
pub mod add_index;
pub mod add_overlay;
#[cfg(test)]
pub(crate) mod cases;
pub mod change_schema;
pub mod clone_table;
pub mod invalidate_index_coverage;
pub mod merge_columns;
pub mod opaque;
pub mod remove_fragments;
pub mod remove_index;
pub mod replace_fragment_columns;
pub mod reserve_fragment_ids;
pub mod reset_table;
pub mod restore;
pub(crate) mod reuse_history;
pub mod rewrite_fragments;
pub mod update_config;
pub mod update_deletion_vector;
pub mod update_mem_wal_state;

use std::collections::BTreeSet;

use lance_table::format::{DataFile, Fragment};

use crate::path::{FieldScope, ManifestPath, Mask};

/// Field ids with data in `files` (tombstoned columns, id < 0, excluded), sorted and unique.
pub(crate) fn file_fields<'a>(files: impl IntoIterator<Item = &'a DataFile>) -> BTreeSet<i32> {
    files.into_iter().flat_map(|f| f.fields.iter().copied()).filter(|id| *id >= 0).collect()
}

/// Field ids with data in any of `fragments`.
pub(crate) fn fragment_fields<'a>(fragments: impl IntoIterator<Item = &'a Fragment>) -> BTreeSet<i32> {
    file_fields(fragments.into_iter().flat_map(|f| f.files.iter()))
}

/// What a value supplier reads of the schema: each field's definition and nullability, because a
/// concurrent drop, retype or nullability tightening invalidates the values it wrote.
pub(crate) fn supplier_reads(fields: &BTreeSet<i32>) -> Mask {
    let mut mask = Mask::new();
    for &id in fields {
        mask.push(ManifestPath::field(id, FieldScope::Definition));
        mask.push(ManifestPath::field(id, FieldScope::Nullability));
    }
    mask
}

/// The values a supplier writes: one `FieldValues` path per field.
pub(crate) fn supplier_writes(fields: &BTreeSet<i32>) -> Mask {
    Mask(fields.iter().map(|&field| ManifestPath::FieldValues { field }).collect())
}

/// On a keyed table, a new schema must carry exactly the declared primary key, on the same field
/// ids, non-nullable: overwrite and schema change preserve the key (`design/fencing.md` §1).
///
/// `same_field_ids`: a schema change must keep the key on the same field ids; an overwrite assigns
/// field ids afresh (Lance numbers an overwrite's fields by position), so only names are compared.
pub(crate) fn keeps_primary_key(
    ours: crate::ActionKind,
    state: &crate::TableState,
    new_schema: &lance_core::datatypes::Schema,
    same_field_ids: bool,
) -> Result<(), crate::Reason> {
    use crate::table_class::{TableClass, check_primary_key, primary_key_of};
    let refuse = |detail: String| Err(crate::action::invalid(ours, detail));
    let key = match TableClass::of(&state.config) {
        TableClass::Keyed { key } => key,
        TableClass::Unknown(class) => {
            return refuse(format!("the table's class '{class}' is not understood by this version"));
        }
        TableClass::Undeclared | TableClass::KeylessAppendOnly => return Ok(()),
    };
    if let Err(why) = check_primary_key(new_schema, &key) {
        return refuse(format!("a keyed table keeps its primary key: {why}"));
    }
    let (before, _) = primary_key_of(&state.schema);
    let (after, _) = primary_key_of(new_schema);
    if same_field_ids && before != after && !before.is_empty() {
        return refuse(format!("the primary key moved from field ids {before:?} to {after:?}"));
    }
    Ok(())
}

/// On a keyed table no action rewrites key values in place (a column replacement, a column-rewriting
/// update, an overlay, a merge that swaps a key column's files): the new keys would reach the table
/// without any key declaration, so no fence could see a duplicate. Keys change only by deleting and
/// inserting rows, which the key rules judge (`design/fencing.md`, "1. Table classes live in the
/// manifest, and the action model enforces them").
pub(crate) fn refuses_key_rewrite(
    ours: crate::ActionKind,
    state: &crate::TableState,
    written: &BTreeSet<i32>,
) -> Result<(), crate::Reason> {
    let key = crate::table_class::fenced_key_fields(&state.config, &state.schema);
    match written.iter().find(|f| key.contains(f)) {
        Some(field) => Err(crate::action::invalid(
            ours,
            format!(
                "the table is keyed: rewriting values of key field {field} in place bypasses the key fence; \
                 delete the rows and insert them with their new keys instead"
            ),
        )),
        None => Ok(()),
    }
}

/// A key field of `key` whose data files differ between `before` and `after` (the same fragment):
/// restating a fragment with other files for a key column rewrites its keys in place.
pub(crate) fn key_field_with_new_files(key: &[i32], before: &Fragment, after: &Fragment) -> Option<i32> {
    let files_of = |fragment: &Fragment, field: i32| -> Vec<String> {
        fragment.files.iter().filter(|f| f.fields.contains(&field)).map(|f| f.path.clone()).collect()
    };
    key.iter().copied().find(|&field| files_of(before, field) != files_of(after, field))
}

/// What every module's [`crate::ActionLife`] implementation uses.
pub(crate) mod life_prelude {
    pub(crate) use crate::action::AnyAction;
    pub(crate) use crate::context::OperationKind;
    pub(crate) use crate::life::ActionLife;
    pub(crate) use crate::rebind::{self, RebindRefusal, Rebinder};
    pub(crate) use crate::squash::{Squash, SquashRefusal};
    pub(crate) use crate::translate::{Lowering, not_lowerable, set_once};
}
