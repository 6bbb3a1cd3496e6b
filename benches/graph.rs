//! Graph merge costs (`design/graph-merge.md`, results in `design/benchmarks.md`).
//!
//! (a) Diverged merge: a node table of N rows (`id`, `n` int64, `v` vector(8)); a branch; each
//!     side updates d different existing rows; time of `merge(feature, main)` and the process's
//!     peak RSS reset before each merge (`/proc/self/clear_refs` 5). The cost should follow d, not N.
//! (b) All-new fast-forward: N rows x vector(256) inserted on a branch, then merged into an
//!     unchanged main, against a direct Lance append of the same rows into a fresh dataset; bytes
//!     written by the merge (files under the graph root before and after).
//!
//! Each diverged merge is set beside Lance's own merge-insert of the same d rows into the same
//! table version, and its phases (detect, validate, land, publish) are printed.
//!
//! `GRAPH_BENCH_SIZES=10000,100000` (default) picks the table sizes of (a); the 1M case is
//! `GRAPH_BENCH_SIZES=10000,1000000`. `GRAPH_BENCH_INDEX=1` builds a BTree index on `id` after the
//! load (as a maintained table would have), so the keyed writes take Lance's indexed merge path.
//! `GRAPH_BENCH_WIDE=1` adds the 100K-row vector(3072) table.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, RecordBatchIterator};
use lance::Dataset;
use lance::dataset::{MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams};
use lance_actions_graph::{Graph, MergeOptions, Outcome, Row, Value, rows_to_batch};

fn vector(seed: u64, dim: usize) -> Value {
    Value::Vector((0..dim).map(|i| ((seed * 31 + i as u64) % 97) as f32).collect())
}

fn schema(dim: usize) -> String {
    format!(r#"{{"nodes": {{"Item": {{"properties": {{"n": "int64", "v": "vector({dim})"}}}}}}}}"#)
}

/// Columns in name order: id, n, v.
fn item(i: u64, n: i64, dim: usize) -> Row {
    vec![Value::Str(format!("i{i:08}")), Value::Int(n), vector(i, dim)]
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                total += e.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    total
}

async fn load(g: &Graph, n: u64, dim: usize) {
    // About 100 MB of rows per write, whatever the width.
    let chunk = (100_000u64 * 8 / dim as u64).clamp(2_000, 100_000);
    let mut start = 0;
    while start < n {
        let rows: Vec<Row> = (start..(start + chunk).min(n)).map(|i| item(i, 0, dim)).collect();
        g.upsert("main", "Item", rows).await.expect("load");
        start += chunk;
    }
}

/// One diverged merge, measured.
struct Diverged {
    merge_ms: f64,
    dry_ms: f64,
    /// The merge's phases (detect, validate, land, publish), ms.
    phases: Vec<(&'static str, f64)>,
    /// Lance's own merge-insert of the same d source rows into the target's table at the same
    /// version (on a zero-copy Lance branch of it): the plain-Lance way of applying rows already
    /// known to have changed. It finds nothing itself; a plain-Lance user would also need a diff.
    lance_ms: f64,
    rss_mb: f64,
}

async fn diverged(n: u64, d: u64, dim: usize) -> Diverged {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("g");
    let g = Graph::init(root.to_str().expect("utf8"), &schema(dim)).await.expect("init");
    load(&g, n, dim).await;
    if std::env::var("GRAPH_BENCH_INDEX").is_ok() {
        g.index_keys("main").await.expect("index");
    }
    g.branch("feature", "main").await.expect("branch");
    let step = n / (2 * d);
    let s: Vec<Row> = (0..d).map(|k| item(k * 2 * step, 1, dim)).collect();
    let t: Vec<Row> = (0..d).map(|k| item(k * 2 * step + step, 2, dim)).collect();
    g.upsert("feature", "Item", s.clone()).await.expect("source");
    g.upsert("main", "Item", t).await.expect("target");
    let lance_ms = lance_merge_insert(&g, &s).await;
    reset_peak_rss();
    // A dry run is the change detection, the truth table and validation, without landing.
    let t0 = Instant::now();
    let dry = g.merge("feature", "main", &MergeOptions { dry_run: true, ..Default::default() }).await.expect("dry");
    let dry_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(dry.outcome, Outcome::Merged);
    let t0 = Instant::now();
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    let merge_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(r.outcome, Outcome::Merged);
    assert_eq!(r.written.values().sum::<usize>() as u64, d);
    let phases = r.phases.iter().map(|(name, t)| (*name, t.as_secs_f64() * 1e3)).collect();
    Diverged { merge_ms, dry_ms, phases, lance_ms, rss_mb: peak_rss_kb() as f64 / 1024.0 }
}

/// Time Lance's own merge-insert (upsert on `id`, its indexed path when indexed) of `rows` into
/// the target's Item table, on a zero-copy Lance branch at the version main's graph head records.
async fn lance_merge_insert(g: &Graph, rows: &[Row]) -> f64 {
    let view = g.view().await.expect("view");
    let at = view.head("main").expect("main").tables["Item"].clone();
    let t = g.schema().get("Item").expect("Item").clone();
    let uri = format!("{}/{}", g.root(), t.table_dir());
    let mut root_ds = Dataset::open(&uri).await.expect("open");
    root_ds.create_branch("plain-lance", (at.branch.as_str(), at.version), None).await.expect("branch");
    let ds = Arc::new(root_ds.checkout_branch("plain-lance").await.expect("checkout"));
    let batch = rows_to_batch(&t, rows).expect("batch");
    let t0 = Instant::now();
    let mut builder = MergeInsertBuilder::try_new(ds, vec!["id".into()]).expect("builder");
    builder.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll).use_index(true);
    let schema = batch.schema();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    let (_, stats) = builder.try_build().expect("job").execute_reader(reader).await.expect("merge-insert");
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(stats.num_updated_rows, rows.len() as u64);
    ms
}

fn print_diverged(n: u64, d: u64, dim: usize, r: &Diverged) {
    let phase = |name: &str| r.phases.iter().find(|(p, _)| *p == name).map(|(_, ms)| *ms).unwrap_or(0.0);
    println!(
        "| {n} | {dim} | {d} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.0} |",
        r.merge_ms,
        r.dry_ms,
        phase("detect"),
        phase("validate"),
        phase("land"),
        phase("publish"),
        r.lance_ms,
        r.merge_ms / r.lance_ms,
        r.rss_mb
    );
}

async fn fast_forward(n: u64) -> (f64, f64, u64) {
    let dim = 256;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("g");
    let g = Graph::init(root.to_str().expect("utf8"), &schema(dim)).await.expect("init");
    g.branch("feature", "main").await.expect("branch");
    let rows: Vec<Row> = (0..n).map(|i| item(i, 0, dim)).collect();
    let t = g.schema().get("Item").expect("Item").clone();
    let batch: RecordBatch = rows_to_batch(&t, &rows).expect("batch");
    g.insert("feature", "Item", rows).await.expect("feature");
    let before = dir_bytes(&root);
    let t0 = Instant::now();
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("ff");
    let ff_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(r.outcome, Outcome::FastForward);
    let written = dir_bytes(&root) - before;
    let plain = dir.path().join("plain.lance");
    let schema = batch.schema();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
    let t0 = Instant::now();
    let ds = Dataset::write(reader, plain.to_str().expect("utf8"), Some(params)).await.expect("append");
    let append_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(Arc::new(ds).count_rows(None).await.expect("count"), n as usize);
    (ff_ms, append_ms, written)
}

#[tokio::main]
async fn main() {
    let sizes: Vec<u64> = std::env::var("GRAPH_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!("(a) diverged merge, d rows changed per side; Lance = Lance's merge-insert of the same d rows");
    println!(
        "| rows | dim | d | merge ms | dry run ms | detect | validate | land | publish | Lance ms | merge / Lance | peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        for d in [1u64, 50, 1000] {
            print_diverged(n, d, 8, &diverged(n, d, 8).await);
        }
    }
    if std::env::var("GRAPH_BENCH_WIDE").is_ok() {
        for d in [1u64, 50, 1000] {
            print_diverged(100_000, d, 3072, &diverged(100_000, d, 3072).await);
        }
    }
    println!("\n(b) all-new fast-forward vs direct append, vector(256)");
    println!("| rows | fast-forward ms | direct append ms | ratio | bytes written by the merge |");
    println!("|---|---|---|---|---|");
    for n in [10_000u64, 100_000] {
        let (ff, append, bytes) = fast_forward(n).await;
        println!("| {n} | {ff:.1} | {append:.1} | {:.3}x | {bytes} |", ff / append);
    }
}
