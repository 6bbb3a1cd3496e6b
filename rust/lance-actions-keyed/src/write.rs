//! Write routing on a keyed table (`design/fencing.md` §2). Each write is one action sequence per chunk,
//! committed through the driver:
//!
//! | write | staged with | actions | on a concurrent key race |
//! |---|---|---|---|
//! | strict insert | Lance's writer (data files only) | `AddFragments` + exact keys + Lance's filter | `KeyConflict` |
//! | upsert | merge-insert on the key (indexed path when indexed) | lifted Update; keys of every source row | re-run from the new base |
//! | update (rows known present) | merge-insert, `DoNothing` for new keys | lifted Update; no inserted keys | re-run |
//! | delete by key | Lance's delete | lifted Delete | re-run |
//! | overwrite | Lance's writer, key schema | ResetTable + AddFragments | re-run |
//!
//! A re-run is the whole logical attempt: new snapshot, re-validation, re-staging (`design/fencing.md` §2).
//! A staged batch is never committed against a base other than the one it was staged on.

use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::{WhenMatched, WhenNotMatched};
use lance_actions::actions::add_fragments::AddFragments;
use lance_actions::keys::InsertedKeys;
use lance_actions::{ActionTxn, AnyAction, OperationKind, lift};
use lance_actions_commit::{CommitError, CommitReport, DatasetActionsExt, Interference};
use lance_core::datatypes::{NullabilityComparison, SchemaCompareOptions};
use lance_table::format::key_existence::{FilterType, KeyExistenceFilter, KeyValue};
use lance_table::format::{DataStorageFormat, Fragment};

use crate::error::{ConflictCause, Error, Result};
use crate::key::{KeySet, RowKeys, UniqueKeys, sample};
use crate::probe::{key_predicate, present_keys, present_row_keys};
use crate::stage;
use crate::table::{KeyedTable, WriteOutcome, conform};

/// The new rows of a strict insert: batches, which the first attempt stages (and lets go of), or
/// fragments staged by that attempt or by another process.
pub(crate) enum NewRows {
    Batches(Vec<RecordBatch>),
    Staged(StagedRows),
}

/// Fragments staged for one version of the table, with what of that version their files depend
/// on: its columns (field ids, types, nullability, children) and its file format.
pub(crate) struct StagedRows {
    fragments: Vec<Fragment>,
    version: u64,
    schema: lance_core::datatypes::Schema,
    format: DataStorageFormat,
}

impl StagedRows {
    /// `fragments`, staged for (or checked against) `dataset`'s version.
    pub(crate) fn for_version(fragments: Vec<Fragment>, dataset: &Dataset) -> Self {
        Self {
            fragments,
            version: dataset.manifest().version,
            schema: dataset.schema().clone(),
            format: dataset.manifest().data_storage_format.clone(),
        }
    }

    /// The fragments, if files staged for their version can be committed as they are on
    /// `dataset`'s: the same columns and file format. A column added or dropped, a type or a
    /// nullability changed, an overwrite's new schema: each would leave files that do not fit.
    /// Field metadata and dictionaries are not compared: the files do not depend on them.
    fn fitting(&self, dataset: &Dataset) -> Result<&[Fragment]> {
        let changed =
            |detail: String| Error::SchemaChanged { staged: self.version, version: dataset.manifest().version, detail };
        if self.fragments.is_empty() {
            return Ok(&self.fragments);
        }
        let format = &dataset.manifest().data_storage_format;
        if format != &self.format {
            return Err(changed(format!(
                "file format {} {} then, {} {} now",
                self.format.file_format, self.format.version, format.file_format, format.version
            )));
        }
        let columns = SchemaCompareOptions {
            compare_field_ids: true,
            compare_nullability: NullabilityComparison::Strict,
            ..Default::default()
        };
        match dataset.schema().explain_difference(&self.schema, &columns) {
            None => Ok(&self.fragments),
            Some(difference) => Err(changed(difference)),
        }
    }
}

/// What one logical attempt came to.
pub(crate) enum Attempt {
    Landed(Box<(Dataset, CommitReport)>),
    /// Re-read and run the whole attempt again, for this reason.
    Again(Interference),
}

/// Sort a commit's outcome into landed, run-again, or a typed error.
pub(crate) fn judge(commit: Result<(Dataset, CommitReport), CommitError>) -> Result<Attempt> {
    match commit {
        Ok(landed) => Ok(Attempt::Landed(Box::new(landed))),
        Err(source) => match Interference::of(&source) {
            Some(why) => Ok(Attempt::Again(why)),
            None => Err(Error::Commit { source }),
        },
    }
}

impl KeyedTable {
    /// Strict insert: every key must be new. A key already present, duplicated in `batches`, or
    /// inserted by a concurrent commit is a [`Error::KeyConflict`] and nothing is written. Never
    /// switches to an update. The whole insert is one commit, however many chunks it is staged in.
    pub async fn insert(&mut self, batches: Vec<RecordBatch>) -> Result<WriteOutcome> {
        // The conformed batches share the given ones' buffers. The writer gets the only handle to
        // them (the keys hold values or a copy of the key columns, no buffer of the rows), so the
        // rows are freed once written, as a plain append's are, rather than held through the commit.
        let conformed = conform(&batches, &self.arrow_schema)?;
        drop(batches);
        let keys = self.key.row_keys(&conformed)?;
        self.insert_new_keys(&keys, NewRows::Batches(conformed)).await
    }

    /// The strict-insert loop shared by [`Self::insert`] and [`Self::insert_fragments`]: per
    /// attempt, refuse keys the head holds, then commit the rows' fragments with their exact keys.
    /// A lost key race re-reads the head and names the keys a concurrent writer inserted.
    ///
    /// Rows given as batches are staged here: when the insert is refused and no attempt of it can
    /// have landed, their files are removed, so a refused insert leaves nothing behind. Fragments a
    /// caller staged stay theirs.
    pub(crate) async fn insert_new_keys(&mut self, keys: &RowKeys, mut rows: NewRows) -> Result<WriteOutcome> {
        let staged_here = matches!(rows, NewRows::Batches(_));
        let inserted = self.insert_attempts(keys, &mut rows).await;
        if let (Err(refusal), true, NewRows::Staged(staged)) = (&inserted, staged_here, &rows)
            && refusal.wrote_nothing()
        {
            stage::remove_staged(&self.dataset, &staged.fragments).await;
        }
        inserted
    }

    /// The attempts of [`Self::insert_new_keys`]; `rows` holds the staged fragments once the first
    /// attempt has staged them.
    async fn insert_attempts(&mut self, keys: &RowKeys, rows: &mut NewRows) -> Result<WriteOutcome> {
        let inserted = keys.declared()?;
        let mut outcome = WriteOutcome { inserted: keys.len() as u64, ..Default::default() };
        let mut attempts = self.options.retry.attempts();
        attempts.first();
        loop {
            self.refresh().await?;
            outcome.attempts += 1;
            self.refuse_present(keys, ConflictCause::AlreadyPresent).await?;
            let fragments = self.fragments_for_attempt(rows).await?;
            // A test can land a concurrent writer between the staging and the commit.
            lance_actions_commit::hooks::point("keyed:insert-staged", self.dataset.uri()).await;
            let add = AddFragments { fragments, keys: Some(inserted.clone()) };
            let txn = ActionTxn::new(OperationKind::Update, vec![add.into()]);
            let commit = self.dataset.action_commit().execute_actions(self.dataset.manifest().version, txn).await;
            match judge(commit)? {
                Attempt::Landed(landed) => return Ok(self.landed(*landed, outcome)),
                Attempt::Again(why) => {
                    // A concurrent insert of one of our keys is a conflict, not a reason to retry.
                    self.refresh().await?;
                    self.refuse_present(keys, ConflictCause::InsertedConcurrently).await?;
                    attempts.next_or(why).await?;
                }
            }
        }
    }

    /// The fragments one attempt commits. Rows given as batches are staged by the first attempt in
    /// one pass of Lance's writer, as a plain append: the insert is one commit however it is
    /// staged, and staging it in chunks cost a writer per chunk (1.5x a single append,
    /// `design/benchmarks.md`) and more, smaller fragments. Staged fragments are committed as they
    /// are on every attempt, as Lance's own append retries do (Lance binds fragment ids, row ids
    /// and version stamps at commit), so long as the attempt's base has exactly the schema and file
    /// format they were staged for ([`Error::SchemaChanged`] otherwise).
    async fn fragments_for_attempt(&self, rows: &mut NewRows) -> Result<Vec<Fragment>> {
        let staged = match std::mem::replace(rows, NewRows::Batches(Vec::new())) {
            NewRows::Batches(batches) => {
                let fragments = stage::new_fragments(&self.dataset, batches, &self.options.progress).await?;
                StagedRows::for_version(fragments, &self.dataset)
            }
            NewRows::Staged(staged) => staged,
        };
        let fragments = staged.fitting(&self.dataset).map(<[Fragment]>::to_vec);
        *rows = NewRows::Staged(staged);
        fragments
    }

    /// Upsert: insert new keys, update present ones. On any conflict the whole attempt re-runs from
    /// the new base (bounded); chunks commit one after another.
    pub async fn upsert(&mut self, batches: Vec<RecordBatch>) -> Result<WriteOutcome> {
        self.merge(batches, Merge::Upsert).await
    }

    /// Update rows whose keys are present. A key that is not present is [`Error::KeysNotFound`],
    /// and that chunk writes nothing.
    pub async fn update(&mut self, batches: Vec<RecordBatch>) -> Result<WriteOutcome> {
        self.merge(batches, Merge::UpdatePresent).await
    }

    /// Delete the rows with these keys (given as rows holding at least the key columns). Keys not
    /// present are ignored; the outcome counts the rows deleted.
    pub async fn delete(&mut self, keys: Vec<RecordBatch>) -> Result<WriteOutcome> {
        let keys = self.key.keys_of_all(&keys)?;
        let mut outcome = WriteOutcome { version: self.dataset.manifest().version, ..Default::default() };
        // Every predicate is built before the first chunk commits.
        let predicates = keys
            .chunks(self.options.chunk.max_rows.max(1))
            .map(|chunk| {
                key_predicate(&self.key, chunk)
                    .ok_or_else(|| Error::Input { detail: "these keys cannot be written as a delete predicate".into() })
            })
            .collect::<Result<Vec<_>>>()?;
        let total = predicates.len();
        for (i, predicate) in predicates.iter().enumerate() {
            if let Err(e) = self.delete_chunk(predicate, &mut outcome).await {
                return Err(e.after(&outcome));
            }
            self.options.progress.tell("chunks", i + 1, total);
        }
        Ok(outcome)
    }

    /// Replace every row. The new rows' keys must be unique; the table keeps its key and class.
    pub async fn overwrite(&mut self, batches: Vec<RecordBatch>) -> Result<WriteOutcome> {
        let batches = conform(&batches, &self.arrow_schema)?;
        let rows = self.unique_keys(&batches)?.keys.len() as u64;
        let mut outcome = WriteOutcome { inserted: rows, ..Default::default() };
        let mut attempts = self.options.retry.attempts();
        attempts.first();
        loop {
            self.refresh().await?;
            outcome.attempts += 1;
            let mut txn = stage::overwrite(&self.dataset, batches.clone()).await?;
            if let lance::dataset::transaction::Operation::Overwrite { config_upsert_values, .. } = &mut txn.operation {
                // Restate the class: an overwrite must never leave a keyed table undeclared.
                *config_upsert_values = Some(class_config(&self.dataset));
            }
            match judge(self.dataset.action_commit().execute(txn).await)? {
                Attempt::Landed(landed) => return Ok(self.landed(*landed, outcome)),
                Attempt::Again(why) => attempts.next_or(why).await?,
            };
        }
    }

    async fn merge(&mut self, batches: Vec<RecordBatch>, kind: Merge) -> Result<WriteOutcome> {
        let batches = conform(&batches, &self.arrow_schema)?;
        let keys = self.unique_keys(&batches)?.keys;
        if kind == Merge::UpdatePresent {
            // Every key is checked before the first chunk commits: a missing key writes nothing.
            self.refresh().await?;
            self.refuse_missing(&keys).await?;
        }
        let mut outcome = WriteOutcome { version: self.dataset.manifest().version, ..Default::default() };
        let chunks = self.options.chunk.split(&batches);
        let total = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            if let Err(e) = self.merge_chunk(chunk, kind, &mut outcome).await {
                // A key deleted concurrently after the check can still stop a later chunk.
                return Err(e.after(&outcome));
            }
            self.options.progress.tell("chunks", i + 1, total);
        }
        Ok(outcome)
    }

    async fn merge_chunk(&mut self, chunk: Vec<RecordBatch>, kind: Merge, outcome: &mut WriteOutcome) -> Result<()> {
        let keys = self.key.keys_of_all(&chunk)?;
        // What the chunk declares is the same on every attempt: built once.
        let declared = self.key.inserted_keys(match kind {
            Merge::Upsert => keys.as_slice(),
            Merge::UpdatePresent => &[],
        })?;
        let mut attempts = self.options.retry.attempts();
        let mut attempt = attempts.first();
        loop {
            refresh_after_first(self, attempt).await?;
            outcome.attempts += 1;
            let (matched, not_matched) = kind.behaviour();
            let staged =
                stage::merge_on_key(&self.dataset, &self.key.names, matched, not_matched, chunk.clone()).await?;
            if kind == Merge::UpdatePresent && staged.stats.num_updated_rows != keys.len() as u64 {
                self.refuse_missing(&keys).await?;
            }
            let txn = self.with_declared_keys(
                lift(&staged.transaction.operation),
                staged.inserted_rows_filter,
                declared.clone(),
            )?;
            let mut commit = self.dataset.action_commit();
            if let Some(rows) = staged.affected_rows {
                commit = commit.with_affected_rows(rows);
            }
            match judge(commit.execute_actions(staged.transaction.read_version, txn).await)? {
                Attempt::Landed(landed) => {
                    outcome.inserted += staged.stats.num_inserted_rows;
                    outcome.updated += staged.stats.num_updated_rows;
                    self.record(*landed, outcome);
                    return Ok(());
                }
                Attempt::Again(why) => attempt = attempts.next_or(why).await?,
            }
        }
    }

    async fn delete_chunk(&mut self, predicate: &str, outcome: &mut WriteOutcome) -> Result<()> {
        let mut attempts = self.options.retry.attempts();
        let mut attempt = attempts.first();
        loop {
            refresh_after_first(self, attempt).await?;
            outcome.attempts += 1;
            let staged = stage::delete_where(&self.dataset, predicate).await?;
            let deleted = staged.num_deleted_rows();
            if deleted == 0 {
                return Ok(());
            }
            match judge(self.dataset.action_commit().execute_delete(staged).await)? {
                Attempt::Landed(landed) => {
                    outcome.deleted += deleted;
                    self.record(*landed, outcome);
                    return Ok(());
                }
                Attempt::Again(why) => attempt = attempts.next_or(why).await?,
            }
        }
    }

    /// Attach what the merge declares it may insert. Our exact set holds every key the merge may
    /// insert. For Lance's resolver (and Lance-native keyed writers): Lance's exact-set filter of
    /// the declared keys when they are few (`EXACT_LANCE_FILTER_MAX_KEYS`: a fraction of the size
    /// of its bloom filter); otherwise Lance's own bloom filter (inserted keys only) when Lance
    /// attached one (its v2 path), and one built from the declared keys on its indexed path, which
    /// attaches none. `built` is [`KeySpec::inserted_keys`] of the declared keys.
    pub(crate) fn with_declared_keys(
        &self,
        mut txn: ActionTxn,
        lance_filter: Option<KeyExistenceFilter>,
        built: InsertedKeys,
    ) -> Result<ActionTxn> {
        let built_exact = matches!(&built.lance_filter, Some(f) if matches!(f.filter, FilterType::ExactSet(_)));
        let lance_filter = match lance_filter {
            Some(f) if f.field_ids != self.key.field_ids => {
                return Err(Error::Lance {
                    what: "staging a keyed merge".into(),
                    source: lance::Error::internal(format!(
                        "Lance attached a key filter over fields {:?}, the primary key is {:?}; refusing the write",
                        f.field_ids, self.key.field_ids
                    )),
                });
            }
            Some(f) if !built_exact => Some(f),
            _ => built.lance_filter,
        };
        for action in &mut txn.actions {
            if let AnyAction::AddFragments(add) = action {
                add.keys = Some(InsertedKeys { lance_filter: lance_filter.clone(), exact: built.exact.clone() });
            }
        }
        Ok(txn)
    }

    /// The keys of `batches`, refusing duplicates within them.
    pub(crate) fn unique_keys(&self, batches: &[RecordBatch]) -> Result<UniqueKeys> {
        self.key.unique(self.key.keys_of_all(batches)?)
    }

    /// [`Error::KeysNotFound`] naming the keys of `keys` the current version does not hold.
    async fn refuse_missing(&self, keys: &[KeyValue]) -> Result<()> {
        let present = present_keys(&self.dataset, &self.key, keys).await?;
        // A set: a chunk of 8,192 keys compared against a list costs 67M comparisons.
        let present: KeySet<'_> = present.iter().collect();
        let missing: Vec<KeyValue> = keys.iter().filter(|k| !present.contains(k)).cloned().collect();
        if missing.is_empty() { Ok(()) } else { Err(Error::KeysNotFound { keys: sample(&missing) }) }
    }

    /// [`Error::KeyConflict`] naming the keys of `keys` the current version holds.
    async fn refuse_present(&self, keys: &RowKeys, cause: ConflictCause) -> Result<()> {
        let present = present_row_keys(&self.dataset, keys).await?;
        if present.is_empty() { Ok(()) } else { Err(Error::KeyConflict { keys: sample(&present), cause }) }
    }

    fn landed(&mut self, landed: (Dataset, CommitReport), mut outcome: WriteOutcome) -> WriteOutcome {
        self.record(landed, &mut outcome);
        outcome
    }

    /// A commit landed: note it in the outcome and continue from the version it made.
    pub(crate) fn record(&mut self, (dataset, report): (Dataset, CommitReport), outcome: &mut WriteOutcome) {
        outcome.version = report.version;
        outcome.commits.push(report);
        self.dataset = Arc::new(dataset);
    }
}

/// A chunk's first attempt stages on the handle as it stands, as Lance's own merge-insert and delete
/// do: the commit judges every version landed since (a stale handle costs a re-run, never a wrong
/// write), and the handle is already the latest after the caller's or the previous chunk's commit.
/// Reading the latest first would add a version listing to every small write
/// (`design/benchmarks.md`, the keyed upsert). A re-run reads the latest: it follows a conflict.
async fn refresh_after_first(table: &mut KeyedTable, attempt: usize) -> Result<()> {
    if attempt > 1 {
        table.refresh().await?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    Upsert,
    UpdatePresent,
}

impl Merge {
    fn behaviour(self) -> (WhenMatched, WhenNotMatched) {
        match self {
            Merge::Upsert => (WhenMatched::UpdateAll, WhenNotMatched::InsertAll),
            Merge::UpdatePresent => (WhenMatched::UpdateAll, WhenNotMatched::DoNothing),
        }
    }
}

/// The frozen class entries of the table, to restate on an overwrite.
fn class_config(dataset: &Dataset) -> std::collections::HashMap<String, String> {
    lance_actions::table_class::FROZEN_KEYS
        .iter()
        .filter_map(|k| dataset.manifest().config.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}
