//! All-branch primary-key migration behind a format barrier (`design/fencing.md` §5-§6).
//!
//! 1. Enumerate main and every Lance branch; for each branch head, check the key columns exist
//!    with a key type, hold no null and no duplicate key, and carry no *different* primary key.
//!    Any failure refuses before anything is written.
//! 2. For each branch not yet keyed: commit the schema with the key marked (non-nullable), then the
//!    table class. Both go through the driver; each step is checked for before it is taken, so a
//!    crash at any point resumes by running the migration again (roll-forward only).
//! 3. Re-enumerate the branches; a branch that appeared meanwhile is migrated too.
//! 4. Write the fencing stamp on main, last. Before it, keyed writers refuse the table
//!    ([`crate::Error::MigrationIncomplete`]); after it, every open-for-write verifies the key.
//!
//! Writers must be quiesced for the migration (the RFC's fleet barrier): the stamp is what tells
//! writers of this project that the table is fenced, not a lock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::Array;
use futures::TryStreamExt;
use lance::Dataset;
use lance_actions::actions::change_schema::ChangeSchema;
use lance_actions::actions::update_config::UpdateConfig;
use lance_actions::path::ConfigMap;
use lance_actions::table_class::{
    FENCING_FORMAT, FENCING_FORMAT_KEY, KEY_NAMES_KEY, KEYED, TABLE_CLASS_KEY, TableClass, primary_key_of,
};
use lance_actions::{ActionTxn, OperationKind};
use lance_actions_commit::progress::Progress;
use lance_actions_commit::{CommitError, DatasetActionsExt, Interference, crash};
use lance_core::datatypes::Schema;
use lance_table::format::key_existence::{KeyValue, extract_key_value_from_batch};
use lance_table::transaction::{UpdateMap, UpdateMapEntry};

use crate::error::{Error, LanceContext, Result};
use crate::key::{check_key_type, sample};
use crate::table::{PK_METADATA_KEY, PK_POSITION_METADATA_KEY, WriteOptions};

/// What the migration did to one branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchStep {
    /// Key and class were already in place: nothing written.
    AlreadyKeyed,
    /// The key was installed; the class declared at `version`.
    Installed { version: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchMigration {
    /// `main` or the Lance branch name.
    pub branch: String,
    pub rows: usize,
    pub step: BranchStep,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub key: Vec<String>,
    pub branches: Vec<BranchMigration>,
    /// True when this run wrote the stamp; false when it was already there.
    pub stamped: bool,
}

const MAIN: &str = "main";

/// Install `key` as the primary key of the table at `uri` on main and every branch, then stamp it.
pub async fn migrate(uri: &str, key: &[&str]) -> Result<MigrationReport> {
    migrate_with_progress(uri, key, &Progress::default()).await
}

/// [`migrate`], telling `progress` after each branch is keyed ("branches", keyed so far, known so
/// far: a branch created during the run raises the total).
pub async fn migrate_with_progress(uri: &str, key: &[&str], progress: &Progress) -> Result<MigrationReport> {
    let key: Vec<String> = key.iter().map(|s| s.to_string()).collect();
    let main = lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?;
    let mut report = MigrationReport { key: key.clone(), branches: Vec::new(), stamped: false };
    let mut done: HashSet<String> = HashSet::new();
    // Branches retired for a delete: neither writable nor gone yet, so neither done nor failed.
    let mut deleting: HashSet<String> = HashSet::new();
    // Re-enumerate until no branch is new: one created during the run is migrated too. Then
    // re-check the branches being deleted: one whose retirement was lifted meanwhile is live again
    // and is migrated like the rest.
    loop {
        migrate_pending(&main, &key, &mut report, &mut done, &mut deleting, progress).await?;
        if !recheck_deleting(&main, &mut deleting).await? {
            break;
        }
    }
    if let Some(branch) = deleting.into_iter().min() {
        // Stamping now would leave that branch unkeyed on a stamped table should its delete be
        // refused (which lifts the retirement): roll forward by running again instead.
        return Err(Error::BranchBeingDeleted { branch });
    }
    report.stamped = stamp(uri).await?;
    Ok(report)
}

/// Verify, then key, every branch not yet `done` nor `deleting`, until enumeration finds no new one.
async fn migrate_pending(
    main: &Dataset,
    key: &[String],
    report: &mut MigrationReport,
    done: &mut HashSet<String>,
    deleting: &mut HashSet<String>,
    progress: &Progress,
) -> Result<()> {
    loop {
        let pending: Vec<String> =
            branch_names(main).await?.into_iter().filter(|b| !done.contains(b) && !deleting.contains(b)).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut heads = Vec::new();
        for branch in &pending {
            let head = open_branch(main, branch).await?;
            match lance_actions::retired::retired_into(&head.manifest().config) {
                // Rebased or squashed: it takes no write, and its successor is migrated under
                // its own name.
                Some(successor) if !successor.is_empty() => {
                    done.insert(branch.clone());
                }
                // Being deleted: it takes no write, but a refused delete lifts the retirement.
                Some(_) => {
                    deleting.insert(branch.clone());
                }
                None => {
                    let rows = verify_branch(&head, branch, key).await?;
                    heads.push((branch.clone(), head, rows));
                }
            }
        }
        // Every pending branch verified: only now write.
        let total = report.branches.len() + heads.len();
        for (branch, head, rows) in heads {
            let (step, rows) = install_verified(main, &branch, key, head, rows).await?;
            crash::point("migrate-after-branch");
            report.branches.push(BranchMigration { branch: branch.clone(), rows, step });
            done.insert(branch);
            progress.tell("branches", report.branches.len(), total);
        }
    }
}

/// Drop from `deleting` the branches whose delete finished (gone) or was refused (retirement
/// lifted); true when one came back live and must be migrated.
async fn recheck_deleting(main: &Dataset, deleting: &mut HashSet<String>) -> Result<bool> {
    let existing: HashSet<String> = branch_names(main).await?.into_iter().collect();
    let mut revived = false;
    for branch in deleting.clone() {
        if !existing.contains(&branch) {
            deleting.remove(&branch);
            continue;
        }
        let head = open_branch(main, &branch).await?;
        if lance_actions::retired::retired_into(&head.manifest().config).is_none() {
            deleting.remove(&branch);
            revived = true;
        } else if past_lifting(main, &branch).await? {
            // Its name no longer designates it: the delete went past the catalog swap and can
            // only finish, so the branch takes no write ever again.
            deleting.remove(&branch);
        }
    }
    Ok(revived)
}

/// Is the delete of `physical` past the point where it could still be refused? Its logical name
/// (the catalog entry it is, or is an incarnation of) no longer designates it. A plain Lance
/// branch nobody maps has no such point recorded, so it may still come back.
async fn past_lifting(main: &Dataset, physical: &str) -> Result<bool> {
    use lance_actions_commit::branch_names::{NameCatalog, is_incarnation_of};
    let catalog = NameCatalog::of(main).await.map_err(|source| Error::Branch { source })?;
    let names = catalog.read(main).await.map_err(|source| Error::Branch { source })?;
    let designated = names.map.values().any(|p| p == physical);
    let family = names.map.keys().any(|l| l == physical || is_incarnation_of(physical, l));
    Ok(family && !designated)
}

/// `main` first, then the Lance branches by name.
async fn branch_names(main: &Dataset) -> Result<Vec<String>> {
    let mut names: Vec<String> = main.list_branches().await.lance("listing branches")?.into_keys().collect();
    names.sort();
    names.insert(0, MAIN.to_string());
    Ok(names)
}

async fn open_branch(main: &Dataset, branch: &str) -> Result<Arc<Dataset>> {
    let ds = main.checkout_branch(branch).await.lance(format!("opening branch '{branch}'"))?;
    Ok(Arc::new(ds))
}

/// Check one branch head can take the key. Returns its row count.
async fn verify_branch(head: &Dataset, branch: &str, key: &[String]) -> Result<usize> {
    let (_, existing) = primary_key_of(head.schema());
    if !existing.is_empty() && existing != key {
        return Err(Error::DifferentPrimaryKey { branch: branch.into(), existing, wanted: key.to_vec() });
    }
    for name in key {
        let Some(field) = head.schema().field(name) else {
            return Err(Error::MissingKeyColumn { branch: branch.into(), column: name.clone() });
        };
        check_key_type(name, &field.data_type())?;
    }
    let (rows, nulls, dups) = scan_keys(head, key).await?;
    if nulls > 0 {
        return Err(Error::NullKeysInBranch { branch: branch.into(), count: nulls });
    }
    if !dups.is_empty() {
        return Err(Error::DuplicateKeysInBranch { branch: branch.into(), keys: sample(&dups) });
    }
    Ok(rows)
}

/// One scan of the key columns: (rows, rows with a null key part, duplicated keys).
async fn scan_keys(head: &Dataset, key: &[String]) -> Result<(usize, usize, Vec<KeyValue>)> {
    let mut scanner = head.scan();
    scanner.project(key).lance("projecting the key columns")?;
    let mut stream = scanner.try_into_stream().await.lance("scanning keys")?;
    let (mut rows, mut nulls) = (0, 0);
    let mut seen: HashMap<KeyValue, u32> = HashMap::new();
    let mut dups = Vec::new();
    while let Some(batch) = stream.try_next().await.lance("scanning keys")? {
        for row in 0..batch.num_rows() {
            if batch.columns().iter().any(|c| c.is_null(row)) {
                nulls += 1;
                continue;
            }
            let Some(k) = extract_key_value_from_batch(&batch, row, key) else {
                return Err(Error::Input { detail: format!("row {} has a key Lance cannot read", rows + row) });
            };
            let n = seen.entry(k.clone()).or_insert(0);
            *n += 1;
            if *n == 2 {
                dups.push(k);
            }
        }
        rows += batch.num_rows();
    }
    Ok((rows, nulls, dups))
}

/// Install the key on a branch whose `head` was verified. Both steps read the rows that were
/// verified (the schema step its nullability claim, the class step every row), so a concurrent
/// write makes the driver answer Retry; then the branch is read and verified again, and a duplicate
/// a concurrent insert brought in is refused instead of keyed over (`design/fencing.md`, "6. Migration
/// (`lance_actions_keyed::migrate`, `lance-actions keyed migrate <uri> --key id`)").
async fn install_verified(
    main: &Dataset,
    branch: &str,
    key: &[String],
    mut head: Arc<Dataset>,
    mut rows: usize,
) -> Result<(BranchStep, usize)> {
    let mut attempts = WriteOptions::default().retry.attempts();
    attempts.first();
    loop {
        match install(head.clone(), key).await {
            Err(Error::Commit { source: CommitError::Retry { reason, .. } }) => {
                attempts.next_or(Interference::WriterLanded { reason: Box::new(reason) }).await?;
                head = open_branch(main, branch).await?;
                rows = verify_branch(&head, branch, key).await?;
            }
            other => return other.map(|step| (step, rows)),
        }
    }
}

/// Install the key and the class on one branch head, skipping what is already there.
async fn install(head: Arc<Dataset>, key: &[String]) -> Result<BranchStep> {
    let mut head = head;
    let (_, existing) = primary_key_of(head.schema());
    let class = TableClass::of(&head.manifest().config);
    if existing == key && class == (TableClass::Keyed { key: key.to_vec() }) {
        return Ok(BranchStep::AlreadyKeyed);
    }
    if existing.is_empty() {
        let schema = schema_with_key(head.schema(), key);
        let change = ChangeSchema { schema, preserves_nullability: false };
        let txn = ActionTxn::new(OperationKind::Project, vec![change.into()]);
        let (ds, _) = head
            .action_commit()
            .execute_actions(head.manifest().version, txn)
            .await
            .map_err(|source| Error::Commit { source })?;
        head = Arc::new(ds);
        crash::point("migrate-after-key");
    }
    let declare = UpdateConfig {
        map: ConfigMap::Config,
        update: upserts(&[(TABLE_CLASS_KEY, KEYED), (KEY_NAMES_KEY, &key.join(","))]),
    };
    let txn = ActionTxn::new(OperationKind::UpdateConfig, vec![declare.into()]);
    let (ds, _) = head
        .action_commit()
        .execute_actions(head.manifest().version, txn)
        .await
        .map_err(|source| Error::Commit { source })?;
    Ok(BranchStep::Installed { version: ds.manifest().version })
}

/// `schema` with `key` marked as the unenforced primary key, non-nullable, positions in key order.
fn schema_with_key(schema: &Schema, key: &[String]) -> Schema {
    let mut schema = schema.clone();
    for (pos, name) in key.iter().enumerate() {
        if let Some(field) = schema.mut_field_by_id(schema.field(name).map(|f| f.id).unwrap_or(-1)) {
            field.nullable = false;
            field.metadata.insert(PK_METADATA_KEY.to_string(), "true".to_string());
            // Lance reads the key from this attribute (derived from the metadata only when a
            // field is built from Arrow), so set both. 0 is Lance's position for a lone key.
            field.unenforced_primary_key_position = Some(0);
            if key.len() > 1 {
                field.metadata.insert(PK_POSITION_METADATA_KEY.to_string(), (pos + 1).to_string());
                field.unenforced_primary_key_position = Some(pos as u32 + 1);
            }
        }
    }
    schema
}

fn upserts(entries: &[(&str, &str)]) -> UpdateMap {
    UpdateMap {
        update_entries: entries
            .iter()
            .map(|(k, v)| UpdateMapEntry { key: k.to_string(), value: Some(v.to_string()) })
            .collect(),
        replace: false,
    }
}

/// Write the fencing stamp on main, last. Returns false when it was already there.
async fn stamp(uri: &str) -> Result<bool> {
    let main = Arc::new(lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?);
    if main.manifest().config.get(FENCING_FORMAT_KEY).map(String::as_str) == Some(FENCING_FORMAT) {
        return Ok(false);
    }
    crash::point("migrate-before-stamp");
    let stamp = UpdateConfig { map: ConfigMap::Config, update: upserts(&[(FENCING_FORMAT_KEY, FENCING_FORMAT)]) };
    let txn = ActionTxn::new(OperationKind::UpdateConfig, vec![stamp.into()]);
    main.action_commit()
        .execute_actions(main.manifest().version, txn)
        .await
        .map_err(|source| Error::Commit { source })?;
    Ok(true)
}
