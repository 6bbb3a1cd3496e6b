//! Sample datasets and staged transactions of every Lance operation kind.
//!
//! Used by the CLI's `demo` and by the conformance suite, which judges every pair of these against
//! Lance's own resolver. Every transaction is staged against the same read version; the ones Lance
//! writers can stage (append, delete, merge-insert, overwrite) are staged with those writers, the
//! rest are built from the real manifest the way their Lance writers build them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance::dataset::{
    DeleteBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance::index::DatasetIndexExt;
use lance_actions::OperationKind;
use lance_index::IndexType;
use lance_index::scalar::ScalarIndexParams;
use lance_select::RowAddrTreeMap;
use lance_table::format::IndexMetadata;
use roaring::RoaringBitmap;
use uuid::Uuid;

use crate::error::{LanceContext, Result};

mod partition;
pub mod reuse;
pub mod segments;

/// Rows per fragment of the sample table.
pub const ROWS_PER_FRAGMENT: i64 = 8;
/// Fragments of the sample table.
pub const FRAGMENTS: i64 = 4;
/// Name of the sample table's scalar index on `id`.
pub const ID_INDEX: &str = "id_idx";

/// `id` (the unenforced primary key), `v` and `s`.
pub fn schema() -> Arc<ArrowSchema> {
    let pk = HashMap::from([("lance-schema:unenforced-primary-key".to_string(), "true".to_string())]);
    Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false).with_metadata(pk),
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

/// Rows with the given ids; `v = id * 10`, `s = "row{id}"`.
pub fn batch(ids: &[i64]) -> Result<RecordBatch> {
    let v: Vec<i64> = ids.iter().map(|i| i * 10).collect();
    let s: Vec<String> = ids.iter().map(|i| format!("row{i}")).collect();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(Int64Array::from(v)), Arc::new(StringArray::from(s))],
    )
    .map_err(lance::Error::from)
    .lance("building a sample batch")
}

fn write_params(mode: WriteMode) -> WriteParams {
    WriteParams { mode, max_rows_per_file: ROWS_PER_FRAGMENT as usize, ..Default::default() }
}

/// Create the sample table at `uri`: 4 fragments of 8 rows (ids 0..32), a BTree index on `id`,
/// and config key `k1 = a`. Returns the dataset at its latest version.
pub async fn create_sample(uri: &str) -> Result<Arc<Dataset>> {
    let ids: Vec<i64> = (0..ROWS_PER_FRAGMENT * FRAGMENTS).collect();
    let mut ds = InsertBuilder::new(uri)
        .with_params(&write_params(WriteMode::Create))
        .execute(vec![batch(&ids)?])
        .await
        .lance("creating the sample table")?;
    ds.create_index(&["id"], IndexType::BTree, Some(ID_INDEX.into()), &ScalarIndexParams::default(), false)
        .await
        .lance("creating the sample index")?;
    ds.update_config(vec![("k1", "a")]).await.lance("setting sample config")?;
    Ok(Arc::new(ds))
}

/// A transaction staged against the sample table, not yet committed.
#[derive(Debug, Clone)]
pub struct Staged {
    /// A short stable name, e.g. `Delete.frag0-rows01`.
    pub name: String,
    pub kind: OperationKind,
    pub txn: Transaction,
    /// Row addresses the writer reports as affected (what `CommitBuilder::with_affected_rows` takes).
    pub affected_rows: Option<RowAddrTreeMap>,
}

fn staged(kind: OperationKind, variant: &str, read_version: u64, op: Operation) -> Staged {
    Staged {
        name: format!("{kind:?}.{variant}"),
        kind,
        txn: TransactionBuilder::new(read_version, op).build(),
        affected_rows: None,
    }
}

/// Stage every variant of every operation kind against `ds` (none is committed).
pub async fn stage_all(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    let mut out = vec![stage_append(ds, "new-keys", &[100, 101]).await?];
    out.extend(stage_deletes(ds).await?);
    out.extend(stage_overwrites(ds).await?);
    out.extend(stage_create_index(ds).await?);
    out.extend(stage_manifest_edits(ds));
    out.extend(stage_updates(ds).await?);
    out.push(unknown(ds.manifest().version)?);
    Ok(out)
}

/// A plain append of rows with the given ids.
pub async fn stage_append(ds: &Arc<Dataset>, variant: &str, ids: &[i64]) -> Result<Staged> {
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&write_params(WriteMode::Append))
        .execute_uncommitted(vec![batch(ids)?])
        .await
        .lance("staging an append")?;
    Ok(Staged { name: format!("Append.{variant}"), kind: OperationKind::Append, txn, affected_rows: None })
}

/// A delete by predicate, with the affected rows Lance's delete reports.
pub async fn stage_delete(ds: &Arc<Dataset>, variant: &str, predicate: &str) -> Result<Staged> {
    let staged = DeleteBuilder::new(ds.clone(), predicate)
        .execute_uncommitted()
        .await
        .lance(format!("staging delete where {predicate}"))?;
    Ok(Staged {
        name: format!("Delete.{variant}"),
        kind: OperationKind::Delete,
        txn: staged.transaction,
        affected_rows: staged.affected_rows,
    })
}

async fn stage_deletes(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    Ok(vec![
        stage_delete(ds, "frag0-rows01", "id IN (0, 1)").await?,
        stage_delete(ds, "frag0-rows45", "id IN (4, 5)").await?,
        stage_delete(ds, "frag1-rows01", "id IN (8, 9)").await?,
        stage_delete(ds, "frag0-all", "id < 8").await?,
    ])
}

async fn stage_overwrites(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    let base = InsertBuilder::new(ds.clone())
        .with_params(&write_params(WriteMode::Overwrite))
        .execute_uncommitted(vec![batch(&[1000, 1001])?])
        .await
        .lance("staging an overwrite")?;
    let mut with_config = base.clone();
    if let Operation::Overwrite { config_upsert_values, .. } = &mut with_config.operation {
        *config_upsert_values = Some(HashMap::from([("k1".to_string(), "ow".to_string())]));
    }
    Ok(vec![
        Staged { name: "Overwrite.plain".into(), kind: OperationKind::Overwrite, txn: base, affected_rows: None },
        Staged {
            name: "Overwrite.config-k1".into(),
            kind: OperationKind::Overwrite,
            txn: with_config,
            affected_rows: None,
        },
    ])
}

fn index_on(ds: &Dataset, name: &str, field: i32) -> IndexMetadata {
    let fragments: RoaringBitmap = ds.manifest().fragments.iter().map(|f| f.id as u32).collect();
    lance_actions::samples::index_on(Uuid::new_v4(), name, field, ds.manifest().version, fragments)
}

async fn stage_create_index(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    let v = ds.manifest().version;
    let existing: Vec<IndexMetadata> = ds.load_indices().await.lance("loading indices")?.iter().cloned().collect();
    let id_index: Vec<IndexMetadata> = existing.into_iter().filter(|i| i.name == ID_INDEX).collect();
    let replacement = index_on(ds, ID_INDEX, 0);
    Ok(vec![
        staged(
            OperationKind::CreateIndex,
            "new-v",
            v,
            Operation::CreateIndex { new_indices: vec![index_on(ds, "v_idx", 1)], removed_indices: vec![] },
        ),
        staged(
            OperationKind::CreateIndex,
            "new-s",
            v,
            Operation::CreateIndex { new_indices: vec![index_on(ds, "s_idx", 2)], removed_indices: vec![] },
        ),
        staged(
            OperationKind::CreateIndex,
            "replace-id",
            v,
            Operation::CreateIndex { new_indices: vec![replacement], removed_indices: id_index.clone() },
        ),
        staged(
            OperationKind::CreateIndex,
            "drop-id",
            v,
            Operation::CreateIndex { new_indices: vec![], removed_indices: id_index },
        ),
        staged(
            OperationKind::CreateIndex,
            "mem-wal-install-shardA-gen1",
            v,
            Operation::CreateIndex { new_indices: vec![mem_wal_install(v, 1, 1)?], removed_indices: vec![] },
        ),
    ])
}

/// A MemWAL index install (Lance's system index `__lance_mem_wal`, details inline) recording shard
/// `shard` compacted to `generation`: the shard of the `UpdateMemWalState` samples
/// (`samples::manifest_edits`), so both sides of its generation rule meet in the pairs.
fn mem_wal_install(version: u64, shard: u128, generation: u64) -> Result<IndexMetadata> {
    use lance_table::system_index::mem_wal::{CompactedSsTable, MemWalIndexDetails, new_mem_wal_index_meta};
    let details = MemWalIndexDetails {
        compacted_sstables: vec![CompactedSsTable::new(Uuid::from_u128(shard), generation)],
        ..Default::default()
    };
    new_mem_wal_index_meta(version, details).lance("building a MemWAL index install")
}

/// Operations built directly from the manifest, as their Lance writers build them.
fn stage_manifest_edits(ds: &Arc<Dataset>) -> Vec<Staged> {
    let m = ds.manifest();
    provide_sample_files(ds);
    lance_actions::samples::manifest_edits(&m.fragments, &m.schema, m.version)
        .into_iter()
        .map(|(kind, variant, op)| staged(kind, variant, m.version, op))
        .collect()
}

/// A BTree index on `column` named `name`, built on `ds` and staged (not committed): it replaces
/// an index of that name, as `replace(true)` does.
pub async fn stage_btree_index(ds: &Arc<Dataset>, column: &str, name: &str) -> Result<Transaction> {
    let mut d = (**ds).clone();
    let params = ScalarIndexParams::default();
    let meta = d
        .create_index_builder(&[column], IndexType::BTree, &params)
        .name(name.to_string())
        .replace(true)
        .execute_uncommitted()
        .await
        .lance("staging an index")?;
    let removed: Vec<IndexMetadata> =
        ds.load_indices().await.lance("loading indices")?.iter().filter(|i| i.name == name).cloned().collect();
    let op = Operation::CreateIndex { new_indices: vec![meta], removed_indices: removed };
    Ok(TransactionBuilder::new(ds.manifest().version, op).build())
}

/// A keyed upsert (merge-insert on the primary key): Lance attaches its key filter.
pub async fn stage_upsert(ds: &Arc<Dataset>, variant: &str, ids: &[i64]) -> Result<Staged> {
    let mut builder = MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).lance("building a merge-insert")?;
    builder.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
    let job = builder.try_build().lance("building a merge-insert")?;
    let staged = job.execute_uncommitted_batches(vec![batch(ids)?]).await.lance("staging an upsert")?;
    Ok(Staged {
        name: format!("Update.{variant}"),
        kind: OperationKind::Update,
        txn: staged.transaction,
        affected_rows: staged.affected_rows,
    })
}

/// An unfiltered update that moves one row (delete it where it is, append its new version), the
/// shape Lance's `UpdateBuilder` commits.
async fn stage_row_update(ds: &Arc<Dataset>, variant: &str, id: i64) -> Result<Staged> {
    let delete = stage_delete(ds, "tmp", &format!("id = {id}")).await?;
    let append = stage_append(ds, "tmp", &[id]).await?;
    let (Operation::Delete { updated_fragments, deleted_fragment_ids, .. }, Operation::Append { fragments }) =
        (delete.txn.operation, append.txn.operation)
    else {
        return Err(crate::error::Error::Lance {
            what: "staging a row update".into(),
            source: lance::Error::invalid_input("unexpected staged operation shapes"),
        });
    };
    let op = lance_actions::samples::row_moving_update(deleted_fragment_ids, updated_fragments, fragments);
    let mut s = staged(OperationKind::Update, variant, ds.manifest().version, op);
    s.affected_rows = delete.affected_rows;
    Ok(s)
}

async fn stage_updates(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    Ok(vec![
        stage_upsert(ds, "upsert-0-new200", &[0, 200]).await?,
        stage_upsert(ds, "upsert-9-new200", &[9, 200]).await?,
        stage_upsert(ds, "upsert-10-new300", &[10, 300]).await?,
        stage_row_update(ds, "move-row2", 2).await?,
        stage_row_update(ds, "move-row12", 12).await?,
        column_rewrite(ds, 1, 1)?,
    ])
}

/// An update in `RewriteColumns` mode (Lance's column-rewriting update shape): field `field` of
/// fragment `i` rewritten in place into the sample file `replacement-{i}.lance` (a copy of the
/// fragment's data file, see `provide_sample_files`, so the values read back unchanged), the
/// original file's column of that field tombstoned.
fn column_rewrite(ds: &Dataset, i: usize, field: i32) -> Result<Staged> {
    use lance_table::format::overlay::TOMBSTONE_FIELD_ID;
    let missing = || crate::error::Error::Lance {
        what: "staging a column rewrite".into(),
        source: lance::Error::invalid_input(format!("the table has no fragment {i} with a data file")),
    };
    let mut fragment = ds.manifest().fragments.get(i).cloned().ok_or_else(missing)?;
    let original = fragment.files.first().cloned().ok_or_else(missing)?;
    let only = |keep: bool| -> Vec<i32> {
        original.fields.iter().map(|f| if (*f == field) == keep { *f } else { TOMBSTONE_FIELD_ID }).collect()
    };
    let mut kept = original.clone();
    kept.fields = Arc::from(only(false));
    let mut rewritten = original.clone();
    rewritten.path = format!("replacement-{i}.lance");
    rewritten.fields = Arc::from(only(true));
    fragment.files = vec![kept, rewritten];
    let op = Operation::Update {
        removed_fragment_ids: vec![],
        updated_fragments: vec![fragment],
        new_fragments: vec![],
        fields_modified: vec![field as u32],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(lance_table::transaction::UpdateMode::RewriteColumns),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    // Named by the rewritten column, so a rewrite of the key or an indexed column reads as such.
    let column = ds.schema().field_by_id(field).map_or_else(|| format!("field{field}"), |f| f.name.clone());
    Ok(staged(OperationKind::Update, &format!("rewrite-{column}-frag{i}"), ds.manifest().version, op))
}

/// An operation from a newer Lance: a transaction whose operation field this Lance does not know.
fn unknown(read_version: u64) -> Result<Staged> {
    use prost::Message;
    let mut bytes =
        lance_table::format::pb::Transaction { read_version, uuid: Uuid::new_v4().to_string(), ..Default::default() }
            .encode_to_vec();
    // Field 150 (length-delimited, empty): an operation number reserved for future Lance versions.
    bytes.extend_from_slice(&[0xb2, 0x09, 0x00]);
    let pb = lance_table::format::pb::Transaction::decode(bytes.as_slice())
        .map_err(|e| lance::Error::invalid_input(e.to_string()))
        .lance("decoding a future transaction")?;
    let txn = Transaction::try_from(pb).lance("decoding a future transaction")?;
    Ok(Staged { name: "Unknown.future".into(), kind: OperationKind::Unknown, txn, affected_rows: None })
}

/// The sample replacement and overlay files name `replacement-{i}.lance` / `overlay-{i}.lance`:
/// copies of fragment `i`'s data file, so a table that commits them can be scanned (a replacement
/// reads the same values; an overlay reads its first column's values as `v`). Only on a local
/// dataset; elsewhere the files stay placeholders and scans of such tables fail.
fn provide_sample_files(ds: &Dataset) {
    let data = std::path::Path::new(ds.uri()).join("data");
    for (i, fragment) in ds.manifest().fragments.iter().enumerate() {
        let Some(file) = fragment.files.first() else { continue };
        for name in [format!("replacement-{i}.lance"), format!("overlay-{i}.lance")] {
            let _ = std::fs::copy(data.join(&file.path), data.join(name));
        }
    }
}
