//! Keyed and keyless append-only tables: creation with the class declared in the first version,
//! and open-for-write that verifies the physical schema carries exactly the declared key.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema as ArrowSchema};
use lance::Dataset;
use lance_actions::table_class::{
    self, FENCING_FORMAT, FENCING_FORMAT_KEY, KEY_NAMES_KEY, KEYED, KEYLESS_APPEND_ONLY, TABLE_CLASS_KEY, TableClass,
};
use lance_actions_commit::branch_names;
use lance_actions_commit::progress::Progress;
use lance_actions_commit::retry::RetryPolicy;
use lance_actions_commit::{CommitReport, DatasetActionsExt};

use crate::chunk::ChunkLimits;
use crate::error::{Error, LanceContext, Result};
use crate::key::{KeySpec, duplicates, sample};
use crate::stage;
use crate::write::Attempt;

/// Arrow field metadata marking a field as part of Lance's unenforced primary key.
pub const PK_METADATA_KEY: &str = "lance-schema:unenforced-primary-key";
/// Arrow field metadata giving a key field's 1-based position in a composite key.
pub const PK_POSITION_METADATA_KEY: &str = "lance-schema:unenforced-primary-key:position";

/// How hard a write tries before giving up, and how big each staged chunk may be.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Logical attempts (each re-reads the table, re-validates and re-stages) and the backoff
    /// between them: the project's one retry policy, by default [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    pub chunk: ChunkLimits,
    /// Told after each chunk a write stages or commits ("chunks", done, total).
    pub progress: Progress,
}

/// What a write did.
#[derive(Debug, Clone, Default)]
pub struct WriteOutcome {
    /// The version the last commit landed (the version read, when nothing needed committing).
    pub version: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Logical attempts over all chunks (1 per chunk when uncontended).
    pub attempts: usize,
    /// One report per landed commit.
    pub commits: Vec<CommitReport>,
}

/// A keyed table opened for write. Every write is one or more action sequences committed through
/// the driver; no method can produce a keyed append.
#[derive(Clone)]
pub struct KeyedTable {
    pub(crate) dataset: Arc<Dataset>,
    pub(crate) key: KeySpec,
    pub(crate) options: WriteOptions,
    pub(crate) arrow_schema: Arc<ArrowSchema>,
}

impl std::fmt::Debug for KeyedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedTable").field("uri", &self.dataset.uri()).field("key", &self.key).finish()
    }
}

/// The config a keyed table is created with, fencing stamp included (`design/fencing.md` §5: a table created
/// at the fencing format has its key from the first version; there is no annotation window).
pub fn keyed_config(key: &[String]) -> HashMap<String, String> {
    HashMap::from([
        (TABLE_CLASS_KEY.to_string(), KEYED.to_string()),
        (KEY_NAMES_KEY.to_string(), key.join(",")),
        (FENCING_FORMAT_KEY.to_string(), FENCING_FORMAT.to_string()),
    ])
}

/// `schema` with `key` marked as the unenforced primary key (non-nullable, positions in key order).
pub fn with_primary_key(schema: &ArrowSchema, key: &[String]) -> Result<ArrowSchema> {
    for name in key {
        if schema.field_with_name(name).is_err() {
            return Err(Error::Input { detail: format!("the rows have no key column '{name}'") });
        }
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match key.iter().position(|k| k == f.name()) {
            None => f.as_ref().clone(),
            Some(pos) => {
                let mut metadata = f.metadata().clone();
                metadata.insert(PK_METADATA_KEY.to_string(), "true".to_string());
                if key.len() > 1 {
                    metadata.insert(PK_POSITION_METADATA_KEY.to_string(), (pos + 1).to_string());
                }
                f.as_ref().clone().with_nullable(false).with_metadata(metadata)
            }
        })
        .collect();
    Ok(ArrowSchema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Re-shape `batches` to `schema`: columns by name, each with the table's exact type. Extra or
/// missing columns and type differences are typed input errors.
pub(crate) fn conform(batches: &[RecordBatch], schema: &Arc<ArrowSchema>) -> Result<Vec<RecordBatch>> {
    batches
        .iter()
        .map(|batch| {
            if batch.num_columns() != schema.fields().len() {
                let have: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
                let want: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
                return Err(Error::Input { detail: format!("the rows have columns {have:?}, the table {want:?}") });
            }
            let columns = schema
                .fields()
                .iter()
                .map(|field| {
                    let column = batch.column_by_name(field.name()).ok_or_else(|| Error::Input {
                        detail: format!("the rows have no column '{}'", field.name()),
                    })?;
                    if column.data_type() != field.data_type() {
                        return Err(Error::Input {
                            detail: format!(
                                "column '{}' has type {}, the table's is {}",
                                field.name(),
                                column.data_type(),
                                field.data_type()
                            ),
                        });
                    }
                    Ok(column.clone())
                })
                .collect::<Result<Vec<_>>>()?;
            RecordBatch::try_new(schema.clone(), columns)
                .map_err(|e| Error::Input { detail: format!("the rows do not fit the table's schema: {e}") })
        })
        .collect()
}

/// A key names at least one column, each once: `--key id --key id` would declare a key the schema
/// can never carry.
fn check_key_names(key: &[String]) -> Result<()> {
    if key.is_empty() || key.iter().any(|k| k.trim().is_empty()) {
        return Err(Error::Input { detail: "name at least one key column, none of them empty".into() });
    }
    if let Some(dup) = key.iter().enumerate().find_map(|(i, k)| key[..i].contains(k).then_some(k)) {
        return Err(Error::Input { detail: format!("key column '{dup}' is named twice; name each key column once") });
    }
    if let Some(comma) = key.iter().find(|k| k.contains(',')) {
        return Err(Error::Input { detail: format!("key column '{comma}' contains a comma, which a key name cannot") });
    }
    Ok(())
}

fn describe_class(class: &TableClass) -> String {
    match class {
        TableClass::Undeclared => "no table class declared".into(),
        TableClass::Keyed { key } => format!("keyed on {key:?}"),
        TableClass::KeylessAppendOnly => "keyless append-only".into(),
        TableClass::Unknown(c) => format!("unknown class '{c}'"),
    }
}

/// A fresh directory name next to `path`, unique to this create.
fn staging_sibling(path: &std::path::Path) -> Result<std::path::PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .ok_or_else(|| Error::Input { detail: format!("{} names no directory to create", path.display()) })?;
    let suffix: u64 = rand::random();
    Ok(path.with_file_name(format!(".{name}.creating-{suffix:016x}")))
}

/// Check the fencing stamp on main (`design/fencing.md` §5: read from main before any branch is opened).
async fn check_stamp(dataset: &Dataset, uri: &str, branch_is_keyed: bool) -> Result<()> {
    let main = match dataset.manifest().branch.as_deref() {
        None => dataset.clone(),
        Some(_) => dataset.checkout_branch("main").await.lance("opening main to read the fencing stamp")?,
    };
    match main.manifest().config.get(FENCING_FORMAT_KEY).map(String::as_str) {
        Some(FENCING_FORMAT) => Ok(()),
        Some(other) => Err(Error::UnknownFormat { uri: uri.into(), found: other.into() }),
        None if branch_is_keyed => Err(Error::MigrationIncomplete { uri: uri.into() }),
        None => Ok(()),
    }
}

impl KeyedTable {
    /// Create a keyed table at `uri` from `batches`, keyed on `key` (field names in key order).
    /// The rows' keys must be non-null and unique.
    /// Every argument is checked before anything is written; if the table cannot be opened as keyed
    /// once written, what was written is removed again (a local path only), so a failed create
    /// leaves no table behind. A local create is built in a sibling directory and renamed into
    /// place, so one that loses to a concurrent create of the same path leaves the winner's alone.
    pub async fn create(uri: &str, batches: Vec<RecordBatch>, key: &[&str]) -> Result<Self> {
        let key: Vec<String> = key.iter().map(|s| s.to_string()).collect();
        check_key_names(&key)?;
        let Some(first) = batches.first() else {
            return Err(Error::Input {
                detail: "give at least one batch (it may be empty) to define the schema".into(),
            });
        };
        let schema = Arc::new(with_primary_key(first.schema().as_ref(), &key)?);
        let spec = KeySpec { names: key.clone(), field_ids: Vec::new() };
        let keys = spec.keys_of_all(&batches)?;
        let dups = duplicates(&keys);
        if !dups.is_empty() {
            return Err(Error::KeyConflict { keys: sample(&dups), cause: crate::ConflictCause::DuplicateInBatch });
        }
        let batches = conform(&batches, &schema)?;
        match lance_actions_commit::location::local_path(uri) {
            Some(path) => Self::create_local(uri, &path, batches, &key).await,
            None => {
                let txn = stage::stage_table(uri, batches, keyed_config(&key)).await?;
                Self::from_dataset(Arc::new(stage::commit_table(uri, txn).await?)).await
            }
        }
    }

    /// Create in a fresh sibling directory, then rename it into place. Lance's commit of an
    /// Overwrite onto a table another writer created meanwhile lands as its version 2, and a
    /// losing create cannot tell its files from the winner's; a rename onto a non-empty directory
    /// fails instead, so the table appears whole or not at all and the winner's is never touched.
    async fn create_local(
        uri: &str,
        path: &std::path::Path,
        batches: Vec<RecordBatch>,
        key: &[String],
    ) -> Result<Self> {
        if path.exists() {
            return Err(Error::TableExists { uri: uri.into() });
        }
        let staging = staging_sibling(path)?;
        let staged = staging.to_string_lossy().to_string();
        let built = match stage::stage_table(&staged, batches, keyed_config(key)).await {
            Ok(txn) => match stage::commit_table(&staged, txn).await {
                Ok(dataset) => Self::from_dataset(Arc::new(dataset)).await.map(|_| ()),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // The staging directory is this create's own: removing it can touch no other table.
        let placed =
            built.and_then(|()| std::fs::rename(&staging, path).map_err(|_| Error::TableExists { uri: uri.into() }));
        if let Err(e) = placed {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        Self::open(uri).await
    }

    /// Open the latest version of main for keyed writes.
    pub async fn open(uri: &str) -> Result<Self> {
        let dataset = lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?;
        Self::from_dataset(Arc::new(dataset)).await
    }

    /// Open the latest version of a branch, by its logical name (`branch create`'s names; a plain
    /// Lance branch nobody maps is its own name), for keyed writes.
    pub async fn open_branch(uri: &str, branch: &str) -> Result<Self> {
        let main = lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?;
        let physical = branch_names::resolve(&main, branch).await.map_err(|source| Error::Branch { source })?;
        Self::open_chain(&main, physical.as_deref().unwrap_or("main")).await
    }

    /// Open a physical Lance branch by its physical name, for keyed writes: refused when a rebase,
    /// squash or delete retired it (the error names its successor).
    pub async fn open_physical_branch(uri: &str, physical: &str) -> Result<Self> {
        let main = lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?;
        let physical =
            branch_names::resolve_physical(&main, physical).await.map_err(|source| Error::Branch { source })?;
        Self::open_chain(&main, physical.as_deref().unwrap_or("main")).await
    }

    async fn open_chain(main: &Dataset, physical: &str) -> Result<Self> {
        let dataset = main.checkout_branch(physical).await.lance(format!("opening branch '{physical}'"))?;
        Self::from_dataset(Arc::new(dataset)).await
    }

    /// Verify that `dataset` is a keyed table whose physical schema carries exactly the declared key.
    pub async fn from_dataset(dataset: Arc<Dataset>) -> Result<Self> {
        let uri = dataset.uri().to_string();
        let class = TableClass::of(&dataset.manifest().config);
        check_stamp(&dataset, &uri, class.is_keyed()).await?;
        let TableClass::Keyed { key } = &class else {
            return Err(Error::NotKeyed { uri, class: describe_class(&class) });
        };
        table_class::check_primary_key(dataset.schema(), key)
            .map_err(|detail| Error::KeyMismatch { uri: uri.clone(), detail })?;
        let spec = KeySpec::of_schema(dataset.schema());
        let arrow_schema = Arc::new(ArrowSchema::from(dataset.schema()));
        Ok(Self { dataset, key: spec, options: WriteOptions::default(), arrow_schema })
    }

    pub fn with_options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    pub fn key(&self) -> &KeySpec {
        &self.key
    }

    /// The table's Arrow schema, primary key metadata included.
    pub fn arrow_schema(&self) -> &Arc<ArrowSchema> {
        &self.arrow_schema
    }

    /// Re-read the latest version of the branch this table is on.
    pub async fn refresh(&mut self) -> Result<()> {
        let mut latest = (*self.dataset).clone();
        latest.checkout_latest().await.lance("reading the latest version")?;
        // A concurrent schema change (a column added) changes what rows must look like.
        if latest.manifest().version != self.dataset.manifest().version {
            self.arrow_schema = Arc::new(ArrowSchema::from(latest.schema()));
        }
        self.dataset = Arc::new(latest);
        Ok(())
    }
}

/// A table declared keyless and append-only (`design/fencing.md` §1): plain appends, no key guarantee.
#[derive(Clone)]
pub struct KeylessTable {
    dataset: Arc<Dataset>,
}

impl KeylessTable {
    pub async fn create(uri: &str, batches: Vec<RecordBatch>) -> Result<Self> {
        let config = HashMap::from([(TABLE_CLASS_KEY.to_string(), KEYLESS_APPEND_ONLY.to_string())]);
        let dataset = stage::commit_table(uri, stage::stage_table(uri, batches, config).await?).await?;
        Ok(Self { dataset: Arc::new(dataset) })
    }

    pub async fn open(uri: &str) -> Result<Self> {
        let dataset = Arc::new(lance_actions_commit::storage::open(uri).await.lance(format!("opening {uri}"))?);
        let class = TableClass::of(&dataset.manifest().config);
        if class != TableClass::KeylessAppendOnly {
            return Err(Error::NotKeyless { uri: uri.into(), class: describe_class(&class) });
        }
        Ok(Self { dataset })
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// Append rows through the driver (a concurrent writer makes it re-stage, bounded).
    pub async fn append(&mut self, batches: Vec<RecordBatch>) -> Result<WriteOutcome> {
        let options = WriteOptions::default();
        let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut attempts = options.retry.attempts();
        let mut attempt = attempts.first();
        loop {
            let mut latest = (*self.dataset).clone();
            latest.checkout_latest().await.lance("reading the latest version")?;
            let latest = Arc::new(latest);
            let txn = stage::keyless_append(&latest, batches.clone()).await?;
            match crate::write::judge(latest.action_commit().execute(txn).await)? {
                Attempt::Landed(landed) => {
                    let (ds, report) = *landed;
                    self.dataset = Arc::new(ds);
                    return Ok(WriteOutcome {
                        version: report.version,
                        inserted: rows,
                        attempts: attempt,
                        commits: vec![report],
                        ..Default::default()
                    });
                }
                Attempt::Again(why) => attempt = attempts.next_or(why).await?,
            }
        }
    }
}
