//! Strict insert of rows that another process already wrote as fragments: Lance's
//! `write_fragments`, lance-ray's workers, any distributed writer that stages data files and leaves
//! the commit to a coordinator (`design/fencing.md` §2, "Rows staged elsewhere").
//!
//! Nothing the caller says about the rows is trusted. The keys are read back from the staged data
//! files themselves, so the exact key set the commit declares is the set the files hold; fragments
//! already in the table, given twice, carrying deletions or missing a column of the table are
//! refused before anything is committed, because committing them would duplicate or corrupt rows.

use std::collections::BTreeSet;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lance_core::datatypes::{Field, Schema};
use lance_table::format::Fragment;

use crate::error::{Error, LanceContext, Result};
use crate::table::{KeyedTable, WriteOutcome};
use crate::write::{NewRows, StagedRows};

/// At most this many staged fragments in one insert: one commit's manifest grows by each of them.
pub const MAX_STAGED_FRAGMENTS: usize = 100_000;

impl KeyedTable {
    /// Strict insert of staged `fragments` (ids unbound, as `write_fragments` returns them), all in
    /// one commit: every key they hold must be new, exactly as for [`Self::insert`]. A key already
    /// present, held twice by the fragments, or inserted by a concurrent commit is a
    /// [`Error::KeyConflict`], and nothing is committed (the staged files are left for Lance's
    /// cleanup).
    pub async fn insert_fragments(&mut self, fragments: Vec<Fragment>) -> Result<WriteOutcome> {
        self.refresh().await?;
        self.check_staged(&fragments)?;
        let keys = self.key.row_keys(&self.staged_key_columns(&fragments).await?)?;
        let staged = StagedRows::for_version(fragments, &self.dataset);
        self.insert_new_keys(&keys, NewRows::Staged(staged)).await
    }

    /// Refuse fragments that cannot be a fresh append to this table.
    fn check_staged(&self, fragments: &[Fragment]) -> Result<()> {
        if fragments.is_empty() || fragments.len() > MAX_STAGED_FRAGMENTS {
            return Err(Error::Input {
                detail: format!("give between 1 and {MAX_STAGED_FRAGMENTS} staged fragments, not {}", fragments.len()),
            });
        }
        let committed: BTreeSet<&str> = self
            .dataset
            .manifest()
            .fragments
            .iter()
            .flat_map(|f| f.files.iter().map(|file| file.path.as_str()))
            .collect();
        let version = self.dataset.manifest().version;
        let mut seen = BTreeSet::new();
        for (i, fragment) in fragments.iter().enumerate() {
            let at = |what: String| Error::Input { detail: format!("staged fragment {i}: {what}") };
            if fragment.deletion_file.is_some() {
                return Err(at("it has deleted rows; stage only new rows".into()));
            }
            if fragment.physical_rows.is_none_or(|rows| rows == 0) || fragment.files.is_empty() {
                return Err(at("it holds no rows".into()));
            }
            for file in &fragment.files {
                if committed.contains(file.path.as_str()) {
                    return Err(at(format!("its data file {} is already in the table at v{version}", file.path)));
                }
                if !seen.insert(file.path.as_str()) {
                    return Err(at(format!("its data file {} is given twice", file.path)));
                }
            }
            let covered: BTreeSet<i32> = fragment.files.iter().flat_map(|f| f.fields.iter().copied()).collect();
            if !stores_every_column(self.dataset.schema(), &covered) {
                let wanted: BTreeSet<i32> = self.dataset.schema().fields_pre_order().map(|f| f.id).collect();
                return Err(at(format!(
                    "it was written for another schema (field ids {covered:?}; the table's at v{version} are {wanted:?})"
                )));
            }
        }
        Ok(())
    }

    /// The key columns of the staged rows, read from their data files. Ids are bound to unused
    /// values for the read only: staged fragments all carry id 0 until Lance binds them at commit.
    async fn staged_key_columns(&self, fragments: &[Fragment]) -> Result<Vec<RecordBatch>> {
        let first_free = self.dataset.manifest().max_fragment_id().map_or(0, |max| max + 1);
        let bound: Vec<Fragment> =
            fragments.iter().enumerate().map(|(i, f)| Fragment { id: first_free + i as u64, ..f.clone() }).collect();
        let mut scan = self.dataset.scan();
        scan.with_fragments(bound).project(&self.key.names).lance("reading the staged rows' keys")?;
        scan.scan_in_order(true);
        let stream = scan.try_into_stream().await.lance("reading the staged rows' keys")?;
        stream.try_collect().await.lance("reading the staged rows' keys")
    }
}

/// Whether data files holding the field ids `covered` store every column of `schema`: no id is
/// foreign to the schema, and every leaf field has a column of its own or in an ancestor (a packed
/// struct). Lance's 2.1+ files hold no column for a list's or a struct's parent field; 2.0 files do.
fn stores_every_column(schema: &Schema, covered: &BTreeSet<i32>) -> bool {
    let known: BTreeSet<i32> = schema.fields_pre_order().map(|f| f.id).collect();
    covered.is_subset(&known) && schema.fields.iter().all(|field| leaves_stored(field, covered, false))
}

fn leaves_stored(field: &Field, covered: &BTreeSet<i32>, in_ancestor: bool) -> bool {
    let here = in_ancestor || covered.contains(&field.id);
    if field.children.is_empty() {
        here
    } else {
        field.children.iter().all(|child| leaves_stored(child, covered, here))
    }
}
