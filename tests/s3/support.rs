//! Rows, scans, object listings and writer processes shared by the S3 tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;

/// `id` (the unenforced primary key) and `v`.
pub fn schema() -> Arc<Schema> {
    let pk = std::collections::HashMap::from([("lance-schema:unenforced-primary-key".to_string(), "true".to_string())]);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false).with_metadata(pk),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Rows `(id, v)`.
pub fn rows(rows: &[(i64, i64)]) -> RecordBatch {
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let vs: Vec<i64> = rows.iter().map(|r| r.1).collect();
    RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(ids)), Arc::new(Int64Array::from(vs))])
        .expect("a two-column batch")
}

/// An append of `new` staged on `ds` (its files written, nothing committed).
pub async fn stage_append(ds: &Arc<lance::Dataset>, new: &[(i64, i64)]) -> lance::dataset::transaction::Transaction {
    let append = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    lance::dataset::InsertBuilder::new(ds.clone())
        .with_params(&append)
        .execute_uncommitted(vec![rows(new)])
        .await
        .expect("stage an append")
}

/// Every `(id, v)` of `ds`, and how many rows there were (more rows than ids means a duplicate).
pub async fn scan(ds: &Dataset) -> (BTreeMap<i64, i64>, usize) {
    let mut scanner = ds.scan();
    scanner.project(&["id", "v"]).expect("project");
    let batches: Vec<RecordBatch> =
        scanner.try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut out = BTreeMap::new();
    let mut total = 0;
    for b in &batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().expect("int64 ids");
        let vs = b.column(1).as_any().downcast_ref::<Int64Array>().expect("int64 values");
        for i in 0..b.num_rows() {
            out.insert(ids.value(i), vs.value(i));
            total += 1;
        }
    }
    (out, total)
}

/// Every object under `prefix` of the bucket `uri` names (`s3://bucket/...`), with its size.
pub async fn objects(ds: &Dataset, prefix: &str) -> BTreeMap<String, u64> {
    let store = ds.object_store(None).await.expect("the dataset's object store");
    let path = object_store::path::Path::from(prefix);
    let listed: Vec<_> = store.inner.list(Some(&path)).try_collect().await.expect("list objects");
    listed.into_iter().map(|m| (m.location.to_string(), m.size)).collect()
}

/// Bytes of objects that appeared between two listings, by the folder that holds them.
pub fn written_by_kind(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (path, size) in after.iter().filter(|(p, _)| !before.contains_key(*p)) {
        let kind = ["data", "_deletions", "_versions", "_transactions", "_indices", "_refs"]
            .into_iter()
            .find(|k| path.split('/').any(|seg| seg == *k))
            .unwrap_or("other");
        *out.entry(kind.to_string()).or_insert(0) += size;
    }
    out
}

/// Run `role` as writer processes of this binary, one per argument list; each writes its report to
/// the file named by its first argument. Returns the reports, in order. A child that failed, or
/// that wrote no report, fails the test.
pub fn run_children(role: &str, argv: Vec<Vec<String>>) -> Vec<String> {
    let exe = std::env::current_exe().expect("this test binary");
    let children: Vec<_> = argv
        .into_iter()
        .map(|args| {
            let child = std::process::Command::new(&exe)
                .arg("child")
                .arg(role)
                .args(&args)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn a writer process");
            (child, args[0].clone())
        })
        .collect();
    children
        .into_iter()
        .map(|(mut child, report)| {
            let status = child.wait().expect("wait for a writer process");
            assert!(status.success(), "writer process {role} ({report}) failed: {status}");
            std::fs::read_to_string(Path::new(&report))
                .unwrap_or_else(|e| panic!("writer process {role} wrote no report at {report}: {e}"))
        })
        .collect()
}

/// Entry point of `s3 child <role> <report> ...`: the parent's environment (the server) is inherited.
pub fn child_main(args: &[String]) -> ExitCode {
    let Some((role, rest)) = args.split_first() else {
        eprintln!("usage: s3 child <role> <report> ...");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let report = match role.as_str() {
        "commit-writer" => runtime.block_on(crate::commit::child(rest)),
        "keyed-inserter" => runtime.block_on(crate::keyed::child(rest)),
        other => {
            eprintln!("unknown child role {other}");
            return ExitCode::from(2);
        }
    };
    match rest.first() {
        Some(path) => match std::fs::write(path, report) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("writing the report {path}: {e}");
                ExitCode::FAILURE
            }
        },
        None => ExitCode::from(2),
    }
}

/// Run pylance (python/.venv) on `script` with `args`; its stdout, which must be one JSON value.
pub fn pylance(script: &str, args: &[&str]) -> serde_json::Value {
    let python = std::env::var("LANCE_ACTIONS_PYTHON")
        .unwrap_or_else(|_| format!("{}/../python/.venv/bin/python", env!("CARGO_MANIFEST_DIR")));
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running pylance ({python}): {e}"));
    assert!(out.status.success(), "pylance failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("pylance printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}
