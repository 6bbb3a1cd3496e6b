//! One type's keyed table: opening it at a recorded (branch, version), reading rows by id in bounded
//! chunks, and writing changes onto a Lance branch the graph branch owns.
//!
//! The graph manifest, not a table's branch head, says what a graph version holds. A table's
//! branch head can run ahead of the manifest (a writer crashed between its table commit and the
//! publish, or a concurrent writer has not published yet). A writer therefore appends to a Lance
//! branch only when its graph branch owns it and its head is exactly the recorded version; in
//! every other case it forks a fresh Lance branch from the recorded version (zero data copied).
//! Its own commits must land consecutively on the recorded version, or the attempt is discarded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use futures::TryStreamExt;
use lance::Dataset;
use lance_actions_keyed::{Error as KeyedError, KeyedTable, Located, WriteOutcome};
use rand::Rng;

use crate::error::{Context, Error, Moved, Result};
use crate::manifest::TableRef;
use crate::schema::TypeDef;
use crate::value::{Row, quote, row_id, rows_from_batch, rows_to_batch};

/// Ids per filtered read and per write chunk (OmniGraph's bound, kept).
pub const CHUNK_ROWS: usize = 8_192;
/// Bytes per filtered read batch and per filter text.
pub const CHUNK_BYTES: usize = 32 * 1024 * 1024;

pub fn table_uri(root: &str, t: &TypeDef) -> String {
    format!("{}/{}", root.trim_end_matches('/'), t.table_dir())
}

/// Create the empty keyed table of a type at graph init.
pub async fn create(root: &str, t: &TypeDef) -> Result<u64> {
    let empty = RecordBatch::new_empty(t.arrow_schema());
    let table = KeyedTable::create(&table_uri(root, t), vec![empty], &["id"]).await?;
    Ok(table.dataset().manifest().version)
}

/// The table of `t` exactly as `r` records it.
pub async fn open_at(root: &str, t: &TypeDef, r: &TableRef) -> Result<Dataset> {
    checkout(&open_root(root, t).await?, t, r).await
}

/// The table of `t` as its main branch's head (to check other versions out from).
pub async fn open_root(root: &str, t: &TypeDef) -> Result<Dataset> {
    lance_actions_commit::storage::open(&table_uri(root, t)).await.lance(format!("opening the {} table", t.key()))
}

/// `r`'s version of a table opened with [`open_root`] (shares its object store and caches).
pub async fn checkout(table_root: &Dataset, t: &TypeDef, r: &TableRef) -> Result<Dataset> {
    table_root.checkout_version((r.branch.as_str(), r.version)).await.lance(format!(
        "opening {} at {} v{}",
        t.key(),
        r.branch,
        r.version
    ))
}

/// `col IN (...)` filters, each under the row and byte bounds.
pub fn in_filters(column: &str, literals: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for lit in literals {
        if !current.is_empty() && (current.len() >= CHUNK_ROWS || bytes + lit.len() + 1 > CHUNK_BYTES) {
            out.push(format!("{column} IN ({})", current.join(",")));
            current.clear();
            bytes = 0;
        }
        bytes += lit.len() + 1;
        current.push(lit);
    }
    if !current.is_empty() {
        out.push(format!("{column} IN ({})", current.join(",")));
    }
    out
}

/// Rows matching `filter`, all columns, in bounded batches.
pub async fn scan_filter(ds: &Dataset, t: &TypeDef, filter: Option<&str>) -> Result<Vec<Row>> {
    let mut scanner = ds.scan();
    scanner.batch_size(CHUNK_ROWS).batch_size_bytes(CHUNK_BYTES as u64);
    if let Some(f) = filter {
        scanner.filter(f).lance(format!("filtering {}", t.key()))?;
    }
    let stream = scanner.try_into_stream().await.lance(format!("reading {}", t.key()))?;
    let batches: Vec<RecordBatch> = stream.try_collect().await.lance(format!("reading {}", t.key()))?;
    let mut rows = Vec::new();
    for b in &batches {
        rows.extend(rows_from_batch(t, b)?);
    }
    Ok(rows)
}

/// The rows with these ids, by id (absent ids are missing from the map).
pub async fn read_ids(ds: &Dataset, t: &TypeDef, ids: &BTreeSet<String>) -> Result<HashMap<String, Row>> {
    let literals: Vec<String> = ids.iter().map(|id| quote(id)).collect();
    let mut out = HashMap::with_capacity(ids.len());
    for filter in in_filters("id", &literals) {
        for row in scan_filter(ds, t, Some(&filter)).await? {
            out.insert(row_id(&row).to_string(), row);
        }
    }
    Ok(out)
}

/// Every row, ordered by id (export; bounded batches, the sort is over the result in memory).
pub async fn scan_sorted(ds: &Dataset, t: &TypeDef) -> Result<Vec<Row>> {
    let mut rows = scan_filter(ds, t, None).await?;
    rows.sort_by(|a, b| row_id(a).cmp(row_id(b)));
    Ok(rows)
}

/// Changes to land on one type's table.
#[derive(Debug, Default, Clone)]
pub struct TableWrite {
    /// Rows that must be new (strict insert).
    pub inserts: Vec<Row>,
    pub upserts: Vec<Row>,
    pub deletes: Vec<String>,
    /// Where the recorded version holds the rows this write replaces or deletes (id -> row
    /// address), when the writer already knows it: the write then lands as one `replace_at`
    /// commit that searches nothing (the merge's change detection read the addresses). An id of
    /// `upserts` or `deletes` missing here is one the recorded version does not hold.
    pub located: Option<BTreeMap<String, u64>>,
}

impl TableWrite {
    pub fn is_empty(&self) -> bool {
        self.inserts.is_empty() && self.upserts.is_empty() && self.deletes.is_empty()
    }
}

/// Why a table write did not land cleanly.
pub enum Landed {
    At(TableRef),
    /// Another writer's commit sits between the recorded version and ours (a concurrent insert of
    /// one of the keys, a keyed write that ran out of attempts, a version in between): discard the
    /// write and run it again on a fresh read of the graph. Always a [`Moved::Table`]: what
    /// happened, in the table's terms, as the operation's error names it if it gives up.
    Interfered(Moved),
}

/// Land `w` on the table of `t` for graph branch `owner`, starting from exactly `r`.
pub async fn apply(root: &str, t: &TypeDef, r: &TableRef, owner: &str, w: &TableWrite) -> Result<Landed> {
    let mut table = writable(root, t, r, owner).await?;
    let branch = table.dataset().manifest().branch.clone().unwrap_or_else(|| "main".to_string());
    let start = r.version;
    let mut versions = Vec::new();
    let mut record = |o: WriteOutcome| versions.extend(o.commits.iter().map(|c| c.version));
    if !w.inserts.is_empty() {
        for chunk in w.inserts.chunks(CHUNK_ROWS) {
            match table.insert(vec![rows_to_batch(t, chunk)?]).await {
                Ok(o) => record(o),
                // Our own check against the recorded version found none of these ids: a key
                // conflict here is an unpublished write of someone else on this Lance branch.
                Err(KeyedError::KeyConflict { keys, cause }) => {
                    let why = format!("{} key(s) {cause}: {keys}", keys.count);
                    return Ok(table_moved(t, why, true, None));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    match &w.located {
        Some(at) => match table.replace_at(vec![rows_to_batch(t, &w.upserts)?], located(w, at)?).await {
            Ok(o) => record(o),
            // The graph locates the rows again itself: the table's own advice is not the user's.
            Err(KeyedError::Contention { last, .. }) => return Ok(moved_by(t, last.to_string(), &last)),
            Err(KeyedError::AddressesOutdated { version, last }) => {
                return Ok(moved_by(t, format!("the rows this write located at v{version} moved: {last}"), &last));
            }
            Err(e) => return Err(e.into()),
        },
        None => {
            for chunk in w.upserts.chunks(CHUNK_ROWS) {
                record(table.upsert(vec![rows_to_batch(t, chunk)?]).await?);
            }
            if !w.deletes.is_empty() {
                record(table.delete(vec![id_batch(&w.deletes)?]).await?);
            }
        }
    }
    let consecutive = versions.iter().enumerate().all(|(i, v)| *v == start + 1 + i as u64);
    if !consecutive {
        let landed: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
        let why = format!(
            "this write's commits landed at {} rather than from v{}: another writer's commit came in between",
            landed.join(", "),
            start + 1
        );
        return Ok(table_moved(t, why, false, None));
    }
    let version = versions.last().copied().unwrap_or(start);
    Ok(Landed::At(TableRef { branch, version, owner: owner.to_string() }))
}

/// Another writer ended the write to `t`'s table, as `why` says.
fn table_moved(t: &TypeDef, why: String, key_race: bool, judged: Option<lance_actions::Reason>) -> Landed {
    Landed::Interfered(Moved::Table { type_key: t.key(), why, key_race, judged: judged.map(Box::new) })
}

/// [`table_moved`], with what the keyed layer knows of the writer that ended it.
fn moved_by(t: &TypeDef, why: String, last: &lance_actions_commit::Interference) -> Landed {
    table_moved(t, why, last.is_key_race(), last.reason().cloned())
}

/// A keyed table handle on a Lance branch `owner` may append to, whose head is `r`.
async fn writable(root: &str, t: &TypeDef, r: &TableRef, owner: &str) -> Result<KeyedTable> {
    let uri = table_uri(root, t);
    if r.owner == owner {
        let table = if r.branch == "main" {
            KeyedTable::open(&uri).await?
        } else {
            KeyedTable::open_branch(&uri, &r.branch).await?
        };
        if table.dataset().manifest().version == r.version {
            return Ok(table);
        }
    }
    let fork = format!("g-{owner}-{:08x}", rand::rng().random::<u32>());
    let mut root_ds =
        lance_actions_commit::storage::open(&uri).await.lance(format!("opening the {} table", t.key()))?;
    root_ds
        .create_branch(&fork, (r.branch.as_str(), r.version), None)
        .await
        .lance(format!("creating a Lance branch of {} for graph branch '{owner}'", t.key()))?;
    Ok(KeyedTable::open_branch(&uri, &fork).await?)
}

/// The rows `w` replaces or deletes that the recorded version holds, with their addresses.
fn located(w: &TableWrite, at: &BTreeMap<String, u64>) -> Result<Located> {
    let (ids, addresses): (Vec<String>, Vec<u64>) = w
        .upserts
        .iter()
        .map(row_id)
        .chain(w.deletes.iter().map(String::as_str))
        .filter_map(|id| at.get(id).map(|a| (id.to_string(), *a)))
        .unzip();
    Ok(Located { keys: vec![id_batch(&ids)?], addresses })
}

fn id_batch(ids: &[String]) -> Result<RecordBatch> {
    let schema = Arc::new(ArrowSchema::new(vec![Field::new("id", DataType::Utf8, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(StringArray::from_iter_values(ids))])
        .map_err(|source| Error::Arrow { what: "building the ids to delete".into(), source })
}

/// Rows keyed by id, for callers that build change sets.
pub fn by_id(rows: Vec<Row>) -> BTreeMap<String, Row> {
    rows.into_iter().map(|r| (row_id(&r).to_string(), r)).collect()
}

/// Build (or rebuild) a BTree index on `id` over the rows at `r`, as one commit through the driver
/// on a Lance branch `owner` may append to. With it, keyed upserts and deletes take Lance's indexed
/// path (their cost follows the rows written, not the table), and `id IN` probes are lookups.
pub async fn index_key(root: &str, t: &TypeDef, r: &TableRef, owner: &str) -> Result<Landed> {
    use lance::dataset::transaction::{Operation, Transaction};
    use lance::index::DatasetIndexExt;
    use lance_actions_commit::DatasetActionsExt;
    use lance_index::IndexType;
    use lance_index::scalar::ScalarIndexParams;

    let table = writable(root, t, r, owner).await?;
    let branch = table.dataset().manifest().branch.clone().unwrap_or_else(|| "main".to_string());
    let mut ds = (**table.dataset()).clone();
    let params = ScalarIndexParams::default();
    let new_index = ds
        .create_index_builder(&["id"], IndexType::BTree, &params)
        .replace(true)
        .execute_uncommitted()
        .await
        .lance(format!("building the id index of {}", t.key()))?;
    let removed: Vec<_> = ds
        .load_indices()
        .await
        .lance("listing indices")?
        .iter()
        .filter(|i| i.name == new_index.name)
        .cloned()
        .collect();
    let op = Operation::CreateIndex { new_indices: vec![new_index], removed_indices: removed };
    let txn = Transaction::new(r.version, op, None);
    match Arc::new(ds).action_commit().execute(txn).await {
        Ok((_, report)) if report.version == r.version + 1 => {
            Ok(Landed::At(TableRef { branch, version: report.version, owner: owner.to_string() }))
        }
        Ok((_, report)) => {
            let why = format!(
                "the index build landed at v{} rather than v{}: another writer's commit came in between",
                report.version,
                r.version + 1
            );
            Ok(table_moved(t, why, false, None))
        }
        Err(
            lance_actions_commit::CommitError::Retry { reason, .. }
            | lance_actions_commit::CommitError::Fail { reason, .. },
        ) => Ok(table_moved(t, reason.to_string(), false, Some(reason))),
        Err(source) => Err(Error::Commit { source }),
    }
}
