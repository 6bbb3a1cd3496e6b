//! Branch replay cost against the size of the replayed commit, side by side with the way a user
//! moves the same rows today without replay: scan the branch's new rows and append them to main.
//!
//! For each size (1K, 100K, 1M rows appended in one commit on a branch), each trial builds a fresh
//! dataset (main with 1,000 rows, a branch, the commit on it), then times:
//!   ours:  `Branches::cherry_pick` of that commit onto main (graft + one replayed commit);
//!   naive: a scan of the commit's rows on the branch and an `InsertBuilder` append to main;
//! and counts the bytes each wrote (new files under the dataset, by kind). Medians of 3 trials.
//!
//! Then a merge of K commits of 10 rows onto a main with K commits of its own (K = 10, 50, 100),
//! against the plain-Lance way of bringing the rows over: scan the branch's new rows and append
//! them to main in one commit (which flattens the branch's history).
//!
//! Run: `cargo bench -p lance-actions-benches --bench replay` (`-- --quick`: 1K and 100K rows, K =
//! 10 and 50 only).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions_replay::{Branches, Outcome, ReplayOptions};

const BASE_ROWS: i64 = 1_000;

fn rows(from: i64, n: i64) -> RecordBatch {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(from..from + n)),
            Arc::new(StringArray::from_iter_values((from..from + n).map(|i| format!("row-{i:012}")))),
        ],
    )
    .expect("batch")
}

fn batches(from: i64, n: i64) -> Vec<RecordBatch> {
    let step = 100_000;
    (0..n).step_by(step as usize).map(|o| rows(from + o, step.min(n - o))).collect()
}

async fn write(
    dest: impl Into<lance::dataset::WriteDestination<'_>>,
    mode: WriteMode,
    data: Vec<RecordBatch>,
) -> Dataset {
    InsertBuilder::new(dest)
        .with_params(&WriteParams { mode, ..Default::default() })
        .execute(data)
        .await
        .expect("write")
}

/// main with BASE_ROWS rows, branch `feature` with one commit of `n` rows. Returns the version.
async fn setup(uri: &str, n: i64) -> u64 {
    write(uri, WriteMode::Create, batches(0, BASE_ROWS)).await;
    let b = Branches::new(uri);
    let physical = b.create("feature", "main", None).await.expect("branch");
    let root = Dataset::open(uri).await.expect("open");
    let feature = root.checkout_branch(&physical).await.expect("feature");
    write(Arc::new(feature), WriteMode::Append, batches(1_000_000_000, n)).await.manifest().version
}

fn inventory(dir: &Path) -> BTreeMap<String, u64> {
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
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// (data bytes, all bytes) of the files that appeared.
fn written(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> (u64, u64) {
    let new = after.iter().filter(|(p, _)| !before.contains_key(*p));
    new.fold((0, 0), |(data, all), (p, size)| {
        let is_data = p.split('/').any(|s| s == "data");
        (data + if is_data { *size } else { 0 }, all + size)
    })
}

struct Trial {
    ms: f64,
    data_bytes: u64,
    all_bytes: u64,
}

async fn ours(n: i64) -> Trial {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_string_lossy().to_string();
    let v = setup(&uri, n).await;
    let before = inventory(dir.path());
    let t = Instant::now();
    let out = Branches::new(&uri).cherry_pick("feature", &[v], "main", &ReplayOptions::default()).await.expect("pick");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(matches!(out, Outcome::CherryPicked { .. }), "{out:?}");
    let (data_bytes, all_bytes) = written(&before, &inventory(dir.path()));
    assert_eq!(Dataset::open(&uri).await.expect("open").count_rows(None).await.expect("count") as i64, BASE_ROWS + n);
    Trial { ms, data_bytes, all_bytes }
}

/// The plain-Lance way to bring the branch's rows to main: scan its new rows, append them to main.
async fn copy_branch_rows(uri: &str) {
    let root = Dataset::open(uri).await.expect("open");
    let physical = Branches::new(uri).resolve("feature").await.expect("resolve").expect("branch");
    let feature = root.checkout_branch(&physical).await.expect("feature");
    let mut scan = feature.scan();
    scan.filter(&format!("id >= {}", 1_000_000_000)).expect("filter");
    let data: Vec<RecordBatch> = scan.try_into_stream().await.expect("scan").try_collect().await.expect("rows");
    write(Arc::new(root), WriteMode::Append, data).await;
}

async fn naive(n: i64) -> Trial {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_string_lossy().to_string();
    setup(&uri, n).await;
    let before = inventory(dir.path());
    let t = Instant::now();
    copy_branch_rows(&uri).await;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let (data_bytes, all_bytes) = written(&before, &inventory(dir.path()));
    assert_eq!(Dataset::open(&uri).await.expect("open").count_rows(None).await.expect("count") as i64, BASE_ROWS + n);
    Trial { ms, data_bytes, all_bytes }
}

/// main with BASE_ROWS rows, then `k` commits of 10 rows on branch `feature` and `k` of 10 rows
/// on main (so a merge replays `k` commits onto a target with `k` of its own).
async fn setup_histories(uri: &str, k: i64) {
    write(uri, WriteMode::Create, batches(0, BASE_ROWS)).await;
    let b = Branches::new(uri);
    let physical = b.create("feature", "main", None).await.expect("branch");
    for i in 0..k {
        let root = Dataset::open(uri).await.expect("open");
        let feature = root.checkout_branch(&physical).await.expect("feature");
        write(Arc::new(feature), WriteMode::Append, vec![rows(1_000_000_000 + 10 * i, 10)]).await;
        write(Arc::new(root), WriteMode::Append, vec![rows(2_000_000_000 + 10 * i, 10)]).await;
    }
}

/// Ours: merge the branch's `k` commits into main, each replayed as a commit of its own.
async fn ours_merge(k: i64) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_string_lossy().to_string();
    setup_histories(&uri, k).await;
    let t = Instant::now();
    let out = Branches::new(&uri).merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(matches!(&out, Outcome::Merged { landed, .. } if landed.len() == k as usize), "{out:?}");
    assert_eq!(
        Dataset::open(&uri).await.expect("open").count_rows(None).await.expect("count") as i64,
        BASE_ROWS + 20 * k
    );
    ms
}

/// Plain Lance: scan the branch's new rows and append them to main in one commit (the history of
/// `k` commits is flattened into one).
async fn naive_merge(k: i64) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_string_lossy().to_string();
    setup_histories(&uri, k).await;
    let t = Instant::now();
    copy_branch_rows(&uri).await;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        Dataset::open(&uri).await.expect("open").count_rows(None).await.expect("count") as i64,
        BASE_ROWS + 20 * k
    );
    ms
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[i64] = if quick { &[1_000, 100_000] } else { &[1_000, 100_000, 1_000_000] };
    println!(
        "| rows in the replayed commit | ours: cherry-pick (ms) | naive: scan + append (ms) | ours / naive | ours: data bytes written | naive: data bytes written | ours: all bytes written | naive: all bytes written |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let (mut o, mut p) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            o.push(ours(n).await);
            p.push(naive(n).await);
        }
        let (om, pm) = (median(o.iter().map(|t| t.ms).collect()), median(p.iter().map(|t| t.ms).collect()));
        let last = |v: &[Trial]| (v[v.len() - 1].data_bytes, v[v.len() - 1].all_bytes);
        let ((od, oa), (pd, pa)) = (last(&o), last(&p));
        println!("| {n} | {om:.1} | {pm:.1} | {:.3}x | {od} | {pd} | {oa} | {pa} |", om / pm);
    }
    // A merge's cost against the length of both histories: each replayed commit is judged against
    // the target's own commits, which the run decodes once, not again for every replayed commit.
    let ks: &[i64] = if quick { &[10, 50] } else { &[10, 50, 100] };
    println!();
    println!(
        "| commits on each side | ours: merge (ms) | ours: ms per replayed commit | naive: scan + append (ms) | ours / naive |"
    );
    println!("|---|---|---|---|---|");
    for &k in ks {
        let (mut o, mut p) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            o.push(ours_merge(k).await);
            p.push(naive_merge(k).await);
        }
        let (om, pm) = (median(o), median(p));
        println!("| {k} | {om:.1} | {:.2} | {pm:.1} | {:.1}x |", om / k as f64, om / pm);
    }
}
