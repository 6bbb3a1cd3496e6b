//! Shared helpers: rows, temp tables, full scans.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance_actions_keyed::KeyedTable;

pub fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Rows `id`, `name = "n{id}"`, `v`.
pub fn rows(ids: &[i64], v: i64) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
            Arc::new(Int64Array::from(vec![v; ids.len()])),
        ],
    )
    .expect("batch")
}

/// Rows `id`, `tags` (a list of strings: `["t{id}"]`) and `at` (a struct: `x = y = id`): a table
/// with nested columns, whose parent fields Lance's 2.1+ files store no column for.
pub fn nested_rows(ids: &[i64]) -> RecordBatch {
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, StructArray};
    use arrow_schema::Fields;
    let point = Fields::from(vec![Field::new("x", DataType::Int64, true), Field::new("y", DataType::Int64, true)]);
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tags", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), true),
        Field::new("at", DataType::Struct(point.clone()), true),
    ]));
    let mut tags = ListBuilder::new(StringBuilder::new());
    for id in ids {
        tags.values().append_value(format!("t{id}"));
        tags.append(true);
    }
    let xs: ArrayRef = Arc::new(Int64Array::from(ids.to_vec()));
    let at = StructArray::new(point, vec![xs.clone(), xs], None);
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(tags.finish()), Arc::new(at)])
        .expect("nested batch")
}

/// Just the key column, for deletes.
pub fn keys(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).expect("batch")
}

pub fn temp_uri(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).to_str().expect("utf-8 path").to_string()
}

pub async fn keyed_table(uri: &str, ids: &[i64]) -> KeyedTable {
    KeyedTable::create(uri, vec![rows(ids, 0)], &["id"]).await.expect("create keyed table")
}

/// The entries of the table's `data/` directory (its data files; a blob column's sidecar folders
/// would count too).
pub fn data_files(uri: &str) -> usize {
    std::fs::read_dir(std::path::Path::new(uri).join("data")).map_or(0, |dir| dir.count())
}

pub async fn latest(uri: &str) -> Arc<Dataset> {
    Arc::new(Dataset::open(uri).await.expect("open"))
}

/// id -> (occurrences, last v seen) over a full scan of `ds`.
pub async fn scan(ds: &Arc<Dataset>) -> BTreeMap<i64, (usize, i64)> {
    let mut scanner = ds.scan();
    scanner.project(&["id", "v"]).expect("project");
    let batches: Vec<RecordBatch> =
        scanner.try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut out = BTreeMap::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        let vs = b.column(1).as_any().downcast_ref::<Int64Array>().expect("v");
        for i in 0..b.num_rows() {
            let e = out.entry(ids.value(i)).or_insert((0, 0));
            e.0 += 1;
            e.1 = vs.value(i);
        }
    }
    out
}

/// Keys present more than once.
pub fn duplicated(scan: &BTreeMap<i64, (usize, i64)>) -> Vec<i64> {
    scan.iter().filter(|(_, (n, _))| *n > 1).map(|(k, _)| *k).collect()
}

/// A child test process run by name must have run exactly that one test: libtest exits 0 having
/// run nothing when the name matches no test, which must not pass for a child that did its work.
pub fn assert_child_ran(stdout: &[u8], name: &str) {
    let out = String::from_utf8_lossy(stdout);
    assert!(
        out.contains("running 1 test") && out.contains(&format!("test {name} ")),
        "child {name} did not run: {out}"
    );
}
