//! The one module that calls Lance's raw writers (`InsertBuilder`, `MergeInsertBuilder`,
//! `DeleteBuilder` through the commit layer's `stage_delete`, `CommitBuilder::new`, a fragment's
//! `extend_deletions`). Everything here only
//! *stages*: it writes data and deletion files and returns an uncommitted transaction, which the
//! caller turns into actions and commits through the driver. The exception is table creation,
//! which has no base to conflict with.
//!
//! A source-walk test (`tests/keyed/guards.rs`) fails if any other production module names these
//! entry points: a keyed append must be hard to express by accident (`design/fencing.md` §1).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{
    CommitBuilder, InsertBuilder, MergeInsertBuilder, UncommittedMergeInsert, WhenMatched, WhenNotMatched, WriteMode,
    WriteParams,
};
use lance_actions_commit::StagedDelete;
use lance_table::format::Fragment;

use crate::Progress;
use crate::error::{Error, LanceContext, Result};

/// Stage a table at `uri` from `batches` (which may be empty batches carrying only the schema),
/// with `config` set in the same first version: the class is declared with the data, never after.
/// Nothing is committed: the caller keeps the transaction to know which files are its own.
pub(crate) async fn stage_table(
    uri: &str,
    batches: Vec<RecordBatch>,
    config: HashMap<String, String>,
) -> Result<Transaction> {
    let params = lance_actions_commit::storage::write_params(uri, WriteMode::Create);
    let mut txn = InsertBuilder::new(uri)
        .with_params(&params)
        .execute_uncommitted(batches)
        .await
        .lance(format!("staging the new table at {uri}"))?;
    match &mut txn.operation {
        Operation::Overwrite { config_upsert_values, .. } => *config_upsert_values = Some(config),
        _ => return Err(unexpected("creating a table", &txn)),
    }
    Ok(txn)
}

/// Commit a table `stage_table` staged as its version 1: fails if another writer created it first.
pub(crate) async fn commit_table(uri: &str, txn: Transaction) -> Result<Dataset> {
    let mut builder = CommitBuilder::new(uri);
    if let Some(params) = lance_actions_commit::storage::store_params(uri) {
        builder = builder.with_store_params(params);
    }
    builder.execute(txn).await.lance(format!("creating the table at {uri}"))
}

/// Write `batches` as new fragments of `dataset` (ids unbound), without committing anything, telling
/// `progress` the rows written so far (of all of `batches`).
pub(crate) async fn new_fragments(
    dataset: &Arc<Dataset>,
    batches: Vec<RecordBatch>,
    progress: &Progress,
) -> Result<Vec<Fragment>> {
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if total == 0 {
        return Ok(Vec::new());
    }
    let progress = progress.clone();
    let txn = InsertBuilder::new(dataset.clone())
        .with_params(&params)
        .progress(move |stats| progress.tell("rows staged", stats.rows_written as usize, total))
        .execute_uncommitted(batches)
        .await
        .lance("writing new rows")?;
    match txn.operation {
        Operation::Append { fragments } => Ok(fragments),
        _ => Err(unexpected("writing new rows", &txn)),
    }
}

/// Remove the data files of `fragments`, staged by [`new_fragments`] on `dataset` and committed by
/// no version: a refused insert leaves nothing behind. Best effort: a file that cannot be removed
/// stays for Lance's cleanup of unreferenced files, as the files of any failed Lance write do, and
/// so does a blob column's sidecar folder (`data/<file stem>/`), which this does not look for.
pub(crate) async fn remove_staged(dataset: &Dataset, fragments: &[Fragment]) {
    let Ok(store) = dataset.object_store(None).await else { return };
    let data = dataset.data_dir();
    for file in fragments.iter().flat_map(|f| &f.files) {
        // `new_fragments` writes under the table's own base; a file under another base is not one
        // it staged.
        if file.base_id.is_none() {
            let _ = store.delete(&data.clone().join(file.path.as_str())).await;
        }
    }
}

/// Stage a merge-insert on exactly the key columns. With a scalar index on the key Lance takes its
/// indexed path, whose cost does not grow with the table but which attaches no key filter; the
/// caller then attaches one built from the merge's keys (`design/fencing.md` §3, done here rather
/// than upstream). Without one, Lance's v2 path attaches its own. Lance's own retries are off:
/// conflicts are the driver's to judge.
pub(crate) async fn merge_on_key(
    dataset: &Arc<Dataset>,
    key: &[String],
    when_matched: WhenMatched,
    when_not_matched: WhenNotMatched,
    batches: Vec<RecordBatch>,
) -> Result<UncommittedMergeInsert> {
    let mut builder = MergeInsertBuilder::try_new(dataset.clone(), key.to_vec()).lance("building a merge-insert")?;
    builder.when_matched(when_matched).when_not_matched(when_not_matched).use_index(true).conflict_retries(0);
    let job = builder.try_build().lance("building a merge-insert")?;
    job.execute_uncommitted_batches(batches).await.lance("staging a merge-insert")
}

/// Stage a delete of the rows matching `predicate`, through the commit layer's `DeleteBuilder` run,
/// whose rows the commit then takes as Lance reported them (`StagedDelete`).
pub(crate) async fn delete_where(dataset: &Arc<Dataset>, predicate: &str) -> Result<StagedDelete> {
    use lance_actions_commit::CommitError;
    lance_actions_commit::stage_delete(dataset, predicate).await.map_err(|e| match e {
        // Lance's own refusal stays what it was for a keyed write: a Lance error saying what failed.
        CommitError::Layer { source: lance_actions_commit::Error::Lance { what, source } } => {
            Error::Lance { what, source }
        }
        source => Error::Commit { source },
    })
}

/// Delete rows of one fragment by offset: write the fragment's new deletion vector and return the
/// fragment as it would then be (`None`: every row deleted, the fragment goes). Only the deletion
/// file is written; nothing is committed.
pub(crate) async fn delete_offsets(
    dataset: &Arc<Dataset>,
    fragment: u64,
    offsets: Vec<u32>,
) -> Result<Option<Fragment>> {
    let Some(file) = dataset.get_fragment(fragment as usize) else {
        return Err(Error::Input { detail: format!("fragment {fragment} is not in v{}", dataset.manifest().version) });
    };
    let updated = file.extend_deletions(offsets).await.lance("writing a deletion vector")?;
    Ok(updated.map(|f| f.metadata().clone()))
}

/// Stage an overwrite of `dataset` with `batches` (whose schema carries the key metadata).
pub(crate) async fn overwrite(dataset: &Arc<Dataset>, batches: Vec<RecordBatch>) -> Result<Transaction> {
    let params = WriteParams { mode: WriteMode::Overwrite, ..Default::default() };
    InsertBuilder::new(dataset.clone())
        .with_params(&params)
        .execute_uncommitted(batches)
        .await
        .lance("staging an overwrite")
}

/// Stage a plain append. Only [`crate::KeylessTable`] calls this: the class check there is what
/// makes it legal (`design/fencing.md` §1).
pub(crate) async fn keyless_append(dataset: &Arc<Dataset>, batches: Vec<RecordBatch>) -> Result<Transaction> {
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    InsertBuilder::new(dataset.clone())
        .with_params(&params)
        .execute_uncommitted(batches)
        .await
        .lance("staging an append")
}

fn unexpected(what: &str, txn: &Transaction) -> Error {
    Error::Lance {
        what: what.into(),
        source: lance::Error::internal(format!(
            "Lance staged an unexpected {} operation",
            lance_actions::OperationKind::of(&txn.operation).code()
        )),
    }
}
