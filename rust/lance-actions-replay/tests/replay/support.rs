//! Shared helpers: tables, branch writes with plain Lance, scans, file inventories.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::{DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use lance_actions_replay::Branches;

pub fn rows(ids: &[i64]) -> RecordBatch {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
        ],
    )
    .expect("batch")
}

pub fn temp_uri(dir: &tempfile::TempDir) -> String {
    dir.path().join("t").to_str().expect("utf-8").to_string()
}

/// main with `ids` (one fragment per 10 rows).
pub async fn create(uri: &str, ids: &[i64]) -> Branches {
    InsertBuilder::new(uri)
        .with_params(&WriteParams { mode: WriteMode::Create, max_rows_per_file: 10, ..Default::default() })
        .execute(vec![rows(ids)])
        .await
        .expect("create");
    Branches::new(uri)
}

/// The latest version of a logical branch.
pub async fn open(b: &Branches, logical: &str) -> Dataset {
    let root = b.root().await.expect("root");
    let chain = b.resolve(logical).await.expect("resolve");
    root.checkout_branch(chain.as_deref().unwrap_or("main")).await.expect("checkout")
}

/// A plain Lance append on a branch; returns the new version.
pub async fn append(b: &Branches, logical: &str, ids: &[i64]) -> u64 {
    let ds = open(b, logical).await;
    InsertBuilder::new(Arc::new(ds))
        .with_params(&WriteParams { mode: WriteMode::Append, max_rows_per_file: 10, ..Default::default() })
        .execute(vec![rows(ids)])
        .await
        .expect("append")
        .manifest()
        .version
}

/// A plain Lance delete on a branch; returns the new version.
pub async fn delete(b: &Branches, logical: &str, predicate: &str) -> u64 {
    let ds = open(b, logical).await;
    DeleteBuilder::new(Arc::new(ds), predicate).execute().await.expect("delete").new_dataset.manifest().version
}

/// Every id of a branch's latest version, with duplicates detected, read by plain Lance.
pub async fn ids(b: &Branches, logical: &str) -> Vec<i64> {
    let ds = open(b, logical).await;
    let mut scanner = ds.scan();
    scanner.project(&["id"]).expect("project");
    let batches: Vec<RecordBatch> =
        scanner.try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().expect("ids").values().to_vec())
        .collect();
    out.sort_unstable();
    out
}

pub fn range(a: i64, b: i64) -> Vec<i64> {
    (a..b).collect()
}

/// Every file under `dir` with its size.
pub fn inventory(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let (Ok(rel), Ok(meta)) = (p.strip_prefix(root), e.metadata()) {
                out.insert(rel.to_string_lossy().to_string(), meta.len());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Bytes of files that appeared between two inventories, by kind of file (the directory that
/// holds them: data, _deletions, _versions, _transactions, _indices, _refs).
pub fn written_by_kind(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (path, size) in after {
        if before.contains_key(path) {
            continue;
        }
        let kind = ["data", "_deletions", "_versions", "_transactions", "_indices", "_refs"]
            .into_iter()
            .find(|k| path.split('/').any(|seg| seg == *k))
            .unwrap_or("other");
        *out.entry(kind.to_string()).or_insert(0) += size;
    }
    out
}

pub fn set(v: &[i64]) -> BTreeSet<i64> {
    v.iter().copied().collect()
}
