//! Keyed tables against plain Lance, side by side in one run:
//!   (a) a 10-row upsert (5 present keys updated, 5 new keys) into an indexed keyed table of 10K,
//!       100K and 1M rows: `KeyedTable::upsert` against Lance's `MergeInsertBuilder` with its
//!       defaults (`use_index(true)`: the BTree path); median and p90 ms, peak RSS. A third way,
//!       Lance with `use_index(false)` (the join path ours is pinned to), separates the cost of
//!       that path from our own overhead;
//!   (b) the false-conflict rate of two concurrent upserts with DISJOINT keys: our exact key-hash
//!       sets against Lance's bloom filters, from 10 to 100K keys per side; then a small real run
//!       (two staged all-new upserts on the same base, the second committed after the first);
//!   (c) a bulk all-new insert of 100K rows with a 256-dim float32 vector: `KeyedTable::insert`
//!       (strict: presence check, 8,192-row chunks, one commit) against Lance's `InsertBuilder`
//!       append; time and peak RSS. Two more ways separate the causes: Lance's writer staged in our
//!       chunks with one commit, and both main ways in a process whose handle has already answered
//!       one key lookup (Lance's first scan in a process costs a fixed amount of RSS).
//!
//! Peak RSS is each way's own process: the bench re-executes itself with `KEYED_BENCH_CHILD` set,
//! the child opens the table the parent created, does the work and prints its `VmHWM` and timings
//! on one line. Children of the different ways alternate, so all share the machine's noise.
//!
//! Run: `cargo bench -p lance-actions-benches --bench keyed` (`-- --quick`: smaller sizes, fewer
//! trials; `-- --only a,c`: only those parts).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{
    CommitBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance::index::DatasetIndexExt;
use lance_actions::keys::{InsertedKeys, KeyHashSet};
use lance_actions::{AnyAction, lift};
use lance_actions_commit::bench::commit::round_order;
use lance_actions_commit::bench::stats::{median, paired_ratio};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_actions_keyed::key::{KeySpec, hash_key};
use lance_actions_keyed::{ChunkLimits, KeyedTable};
use lance_index::IndexType;
use lance_index::scalar::ScalarIndexParams;
use lance_table::format::key_existence::{KeyExistenceFilterBuilder, KeyValue};

const CHILD_ENV: &str = "KEYED_BENCH_CHILD";
const CHILD_TAG: &str = "KEYED_CHILD";
const MIB: f64 = 1024.0 * 1024.0;
/// Timed runs per way in (c) (after one untimed run each): 21 give the run-by-run interval its
/// sixth smallest and largest ratios (`bench::stats`).
const RUNS_C: usize = 21;
/// Rounds of (a), one child per way each: 15 give the interval the fourth smallest and largest.
const ROUNDS_A: usize = 15;

// ---------------------------------------------------------------------------------------------
// Rows, randomness, files

/// SplitMix64: a seeded generator, so every run draws the same keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `n` distinct values of `[0, below)`.
    fn distinct(&mut self, n: usize, below: u64) -> Vec<i64> {
        let mut out: Vec<i64> = Vec::with_capacity(n);
        while out.len() < n {
            let v = self.below(below) as i64;
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }
}

fn upsert_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// Rows `id`, `name = "n{id}"`, `v`.
fn rows(ids: &[i64], v: i64) -> RecordBatch {
    RecordBatch::try_new(
        upsert_schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
            Arc::new(Int64Array::from(vec![v; ids.len()])),
        ],
    )
    .expect("batch")
}

const DIM: i32 = 256;

fn vector_schema() -> Arc<Schema> {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item, DIM), true),
    ]))
}

/// Rows `id`, `vec` (256 seeded pseudo-random floats each).
fn vector_rows(ids: &[i64], rng: &mut Rng) -> RecordBatch {
    let values = Float32Array::from_iter_values(
        (0..ids.len() * DIM as usize).map(|_| (rng.next() >> 40) as f32 / (1u64 << 24) as f32),
    );
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let vec = FixedSizeListArray::try_new(item, DIM, Arc::new(values), None).expect("vectors");
    RecordBatch::try_new(vector_schema(), vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(vec)]).expect("batch")
}

/// `count` rows with ids `first..first+count`, in batches of 10,000 rows.
fn vector_batches(first: i64, count: i64, seed: u64) -> Vec<RecordBatch> {
    let mut rng = Rng(seed);
    let ids: Vec<i64> = (first..first + count).collect();
    ids.chunks(10_000).map(|c| vector_rows(c, &mut rng)).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

fn uri(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_string()
}

/// Write every dirty page back (`sync`), so that the next child is not measured beside writeback.
fn flush_to_disk() {
    let _ = std::process::Command::new("sync").status();
}

/// One kB figure of this process's `/proc/self/status` (`VmHWM`, `RssFile`, ...).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|rest| rest.strip_prefix(':')))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Nearest-rank 90th percentile.
fn p90(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((v.len() as f64) * 0.9).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn runtime() -> tokio::runtime::Runtime {
    named_runtime("tokio-runtime-worker")
}

/// A runtime whose threads carry `name` (tokio's default is `tokio-runtime-worker`).
fn named_runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().thread_name(name).build().expect("tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// Child processes

#[derive(Clone, Copy, PartialEq, Debug)]
enum Side {
    Ours,
    /// Lance's defaults: on an indexed key, `use_index(true)` takes the BTree path.
    Lance,
    /// Lance's merge-insert with `use_index(false)`: the join path ours is pinned to (the only one on
    /// which Lance attaches its key filter). Shown to separate path choice from our own overhead.
    LanceNoIndex,
    /// Lance's writer staged in our chunks (8,192 rows), one `Append` commit: the shape of our strict
    /// insert without its key work, to separate the two.
    LanceChunked,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Lance => "lance",
            Side::LanceNoIndex => "lance-no-index",
            Side::LanceChunked => "lance-chunked",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Lance => "lance (defaults, BTree path)",
            Side::LanceNoIndex => "lance, use_index(false)",
            Side::LanceChunked => "lance, staged in 8,192-row chunks, one commit",
        }
    }

    fn parse(s: &str) -> Side {
        match s {
            "ours" => Side::Ours,
            "lance" => Side::Lance,
            "lance-no-index" => Side::LanceNoIndex,
            "lance-chunked" => Side::LanceChunked,
            other => panic!("unknown side {other}"),
        }
    }
}

/// What a child reports: its peak RSS, the file-backed part of its RSS at the end (pages of the
/// binary's code and of mapped files: shared and evictable, not memory the work allocated) and the
/// milliseconds of each timed operation.
struct ChildReport {
    hwm_kb: u64,
    file_kb: u64,
    ms: Vec<f64>,
}

fn run_child(spec: &str) -> ChildReport {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe).env(CHILD_ENV, spec).output().expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        panic!("child '{spec}' failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD_TAG))
        .unwrap_or_else(|| panic!("child '{spec}' printed no result line:\n{stdout}"));
    let mut report = ChildReport { hwm_kb: 0, file_kb: 0, ms: Vec::new() };
    for field in line.split_whitespace() {
        if let Some(v) = field.strip_prefix("hwm_kb=") {
            report.hwm_kb = v.parse().expect("hwm");
        } else if let Some(v) = field.strip_prefix("file_kb=") {
            report.file_kb = v.parse().expect("file");
        } else if let Some(v) = field.strip_prefix("ms=") {
            report.ms = v.split(',').map(|x| x.parse().expect("ms")).collect();
        }
    }
    report
}

fn child(spec: &str) {
    // The runtime's threads carry the way's name (`kb-ours`, `kb-lance`, ...) and the work runs on
    // them, so that a profile of a whole bench run (`perf record`, then `--comm kb-ours`) tells the
    // ways apart.
    let name = format!("kb-{}", spec.split('|').nth(1).unwrap_or("child"));
    let rt = named_runtime(&name);
    let spec = spec.to_string();
    let ms = rt.block_on(async move {
        let work = tokio::spawn(async move { child_work(&spec).await });
        work.await.expect("the child's work ran to the end")
    });
    let ms: Vec<String> = ms.iter().map(|m| format!("{m:.3}")).collect();
    println!("{CHILD_TAG} hwm_kb={} file_kb={} ms={}", status_kb("VmHWM"), status_kb("RssFile"), ms.join(","));
}

/// What the child `spec` names, timed: one figure per timed operation.
async fn child_work(spec: &str) -> Vec<f64> {
    let parts: Vec<&str> = spec.split('|').collect();
    match parts.as_slice() {
        ["upsert", side, uri, table_rows, ops, key_base, seed] => {
            child_upsert(
                Side::parse(side),
                uri,
                table_rows.parse().expect("rows"),
                ops.parse().expect("ops"),
                key_base.parse().expect("key base"),
                seed.parse().expect("seed"),
            )
            .await
        }
        ["insert", side, uri, first, count, warm] => {
            let (first, count) = (first.parse().expect("first"), count.parse().expect("count"));
            child_insert(Side::parse(side), uri, first, count, *warm == "warm").await
        }
        _ => panic!("unknown child spec {spec}"),
    }
}

/// Open once, one untimed warm-up upsert, then `ops` timed upserts of 5 present + 5 new keys.
async fn child_upsert(side: Side, uri: &str, table_rows: u64, ops: usize, key_base: i64, seed: u64) -> Vec<f64> {
    let mut rng = Rng(seed);
    let mut batch_for = |op: usize| {
        let mut ids = rng.distinct(5, table_rows);
        ids.extend((0..5).map(|j| key_base + (op * 5 + j) as i64));
        rows(&ids, op as i64 + 1)
    };
    let mut ms = Vec::with_capacity(ops);
    match side {
        Side::Ours => {
            let mut table = KeyedTable::open(uri).await.expect("open keyed table");
            for op in 0..=ops {
                let batch = batch_for(op);
                let t = Instant::now();
                let out = table.upsert(vec![batch]).await.expect("keyed upsert");
                let elapsed = t.elapsed().as_secs_f64() * 1e3;
                assert_eq!((out.inserted, out.updated), (5, 5), "ours: 5 new keys and 5 present");
                if op > 0 {
                    ms.push(elapsed);
                }
            }
        }
        Side::Lance | Side::LanceNoIndex | Side::LanceChunked => {
            let mut ds = Arc::new(Dataset::open(uri).await.expect("open dataset"));
            for op in 0..=ops {
                let batch = batch_for(op);
                let t = Instant::now();
                let mut builder = MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).expect("merge builder");
                builder.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll);
                if side == Side::LanceNoIndex {
                    builder.use_index(false);
                }
                let (next, stats) =
                    builder.try_build().expect("merge job").execute_batches(vec![batch]).await.expect("lance merge");
                let elapsed = t.elapsed().as_secs_f64() * 1e3;
                assert_eq!((stats.num_inserted_rows, stats.num_updated_rows), (5, 5), "lance: 5 new and 5 present");
                ds = next;
                if op > 0 {
                    ms.push(elapsed);
                }
            }
        }
    }
    ms
}

/// Generate `count` all-new vector rows (untimed), then time one insert of all of them.
/// With `warm`, the handle first answers one small key lookup (untimed), as a long-lived process
/// that has read the table would have: Lance's first scan in a process costs a fixed amount of RSS.
async fn child_insert(side: Side, uri: &str, first: i64, count: i64, warm: bool) -> Vec<f64> {
    let batches = vector_batches(first, count, 7);
    let lookup = |ds: Arc<Dataset>| async move {
        let mut scanner = ds.scan();
        scanner.project(&["id"]).expect("project");
        scanner.filter("id IN (1, 2, 3)").expect("filter");
        assert_eq!(scanner.count_rows().await.expect("lookup"), 3);
    };
    match side {
        Side::Ours => {
            let mut table = KeyedTable::open(uri).await.expect("open keyed table");
            if warm {
                lookup(table.dataset().clone()).await;
            }
            let t = Instant::now();
            let out = table.insert(batches).await.expect("keyed insert");
            let elapsed = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(out.inserted, count as u64);
            assert_eq!(out.commits.len(), 1, "one commit");
            vec![elapsed]
        }
        Side::LanceChunked => {
            let ds = Arc::new(Dataset::open(uri).await.expect("open dataset"));
            if warm {
                lookup(ds.clone()).await;
            }
            let t = Instant::now();
            let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
            let mut fragments = Vec::new();
            for chunk in ChunkLimits::default().split(&batches) {
                let staged = InsertBuilder::new(ds.clone())
                    .with_params(&params)
                    .execute_uncommitted(chunk)
                    .await
                    .expect("stage chunk");
                match staged.operation {
                    Operation::Append { fragments: f } => fragments.extend(f),
                    _ => panic!("an append stages an Append"),
                }
            }
            let txn = TransactionBuilder::new(ds.manifest().version, Operation::Append { fragments }).build();
            let next = CommitBuilder::new(ds).execute(txn).await.expect("commit chunks");
            let elapsed = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(next.count_rows(None).await.expect("count") as i64, count + 1_000);
            vec![elapsed]
        }
        Side::Lance | Side::LanceNoIndex => {
            let ds = Arc::new(Dataset::open(uri).await.expect("open dataset"));
            if warm {
                lookup(ds.clone()).await;
            }
            let t = Instant::now();
            let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
            let next = InsertBuilder::new(ds).with_params(&params).execute(batches).await.expect("lance append");
            let elapsed = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(next.count_rows(None).await.expect("count") as i64, count + 1_000);
            vec![elapsed]
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (a) small upserts

async fn create_indexed_keyed(path: &Path, table_rows: i64) {
    let ids: Vec<i64> = (0..table_rows).collect();
    let batches: Vec<RecordBatch> = ids.chunks(100_000).map(|c| rows(c, 0)).collect();
    let table = KeyedTable::create(&uri(path), batches, &["id"]).await.expect("create keyed table");
    let mut ds = (**table.dataset()).clone();
    ds.create_index(&["id"], IndexType::BTree, None, &ScalarIndexParams::default(), false).await.expect("btree on id");
}

fn bench_upserts(root: &Path, quick: bool) {
    let sizes: &[i64] = if quick { &[10_000, 100_000] } else { &[10_000, 100_000, 1_000_000] };
    let (rounds, ops) = if quick { (2, 3) } else { (ROUNDS_A, 5) };
    println!("## (a) 10-row upsert (5 present + 5 new keys), indexed keyed table");
    println!();
    println!(
        "Each way: {rounds} child processes x (open, 1 untimed warm-up, {ops} timed upserts), in rounds that \
         rotate the ways' order, each child on a fresh copy of the same table; peak RSS is the largest VmHWM of \
         that way's children. Ratios are against Lance's defaults; \"round by round\" is the median of the \
         rounds' ratios of the children's medians, with its 95% interval (the sign test's; an interval that holds 1.0: \
         the runs do not tell the two ways apart)."
    );
    println!("OmniGraph's gate: 1M rows <= 50 ms and <= 256 MiB. Our goal: <= 1.1x plain Lance.");
    println!();
    println!(
        "| rows | way | median ms | p90 ms | peak RSS MiB | median vs lance | p90 vs lance | round by round [95%] |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let rt = runtime();
    let mut gate = None;
    let mut goal_a = Vec::new();
    for (s, &n) in sizes.iter().enumerate() {
        let sides = [Side::Ours, Side::Lance, Side::LanceNoIndex];
        let paths: Vec<PathBuf> = sides.iter().map(|side| root.join(format!("upsert-{n}-{}", side.name()))).collect();
        let t = Instant::now();
        rt.block_on(create_indexed_keyed(&paths[0], n));
        for path in &paths[1..] {
            copy_dir(&paths[0], path);
        }
        eprintln!("created the {n}-row tables in {:.1}s", t.elapsed().as_secs_f64());
        let mut ms = [Vec::new(), Vec::new(), Vec::new()];
        let mut by_round = [Vec::new(), Vec::new(), Vec::new()];
        let mut hwm = [0u64; 3];
        for round in 0..rounds {
            // A fresh copy per child: every round starts from the same table (the writes of
            // earlier rounds would add a fragment per upsert that no index covers). All of the
            // round's copies are made and flushed before its first child, so no child runs while
            // another way's copy is still being written back.
            let copies: Vec<PathBuf> =
                sides.iter().map(|side| root.join(format!("upsert-{n}-{}-{round}", side.name()))).collect();
            for (side, copy) in sides.iter().zip(&copies) {
                copy_dir(&paths[*side as usize], copy);
            }
            flush_to_disk();
            // Rotate who goes first, so no side always runs right after the same other side.
            for k in round_order(round, sides.len()) {
                let side = sides[k];
                let path = &copies[k];
                let key_base = 1_000_000_000 * (1 + s as i64) + 10_000 * round as i64;
                let seed = 1000 * s as u64 + round as u64;
                let spec = format!("upsert|{}|{}|{n}|{ops}|{key_base}|{seed}", side.name(), uri(path));
                let report = run_child(&spec);
                let _ = std::fs::remove_dir_all(path);
                let i = side as usize;
                by_round[i].push(median(&report.ms));
                ms[i].extend(report.ms);
                hwm[i] = hwm[i].max(report.hwm_kb);
            }
        }
        let lance = Side::Lance as usize;
        let (lance_med, lance_p90) = (median(&ms[lance]), p90(&ms[lance]));
        for side in [Side::Lance, Side::LanceNoIndex, Side::Ours] {
            let i = side as usize;
            let (med, p) = (median(&ms[i]), p90(&ms[i]));
            let paired = if side == Side::Lance { None } else { paired_ratio(&by_round[i], &by_round[lance]) };
            println!(
                "| {n} | {} | {med:.1} | {p:.1} | {:.0} | {:.2}x | {:.2}x | {} |",
                side.label(),
                hwm[i] as f64 * 1024.0 / MIB,
                med / lance_med,
                p / lance_p90,
                paired.map(|e| e.display()).unwrap_or_else(|| "-".into())
            );
        }
        let ours = Side::Ours as usize;
        let paired = paired_ratio(&by_round[ours], &by_round[lance]);
        goal_a.push(format!(
            "{n} rows: {}",
            match paired {
                Some(e) => match e.interval {
                    Some((_, high)) if high <= 1.1 => format!("{}, met (the interval is within 1.1x)", e.display()),
                    Some((low, _)) if low > 1.1 => format!("{}, NOT met (the interval is above 1.1x)", e.display()),
                    Some(_) => format!("{}, not shown either way (the interval holds 1.1x)", e.display()),
                    None => e.display(),
                },
                None => "no pairs".into(),
            }
        ));
        if n == 1_000_000 {
            let (med, rss) = (median(&ms[ours]), hwm[ours] as f64 * 1024.0 / MIB);
            gate = Some(format!(
                "OmniGraph's gate at 1M rows, ours: median {med:.1} ms ({}), peak RSS {rss:.0} MiB ({}).",
                if med <= 50.0 { "<= 50 ms: met" } else { "> 50 ms: NOT met" },
                if rss <= 256.0 { "<= 256 MiB: met" } else { "> 256 MiB: NOT met" },
            ));
        }
        for path in &paths {
            let _ = std::fs::remove_dir_all(path);
        }
    }
    println!();
    if let Some(gate) = gate {
        println!("{gate}");
        println!();
    }
    println!("Goal, ours <= 1.1x Lance's defaults, round by round: {}.", goal_a.join("; "));
    println!();
}

// ---------------------------------------------------------------------------------------------
// (b) false conflicts between disjoint key sets

fn bench_false_conflicts(quick: bool) {
    let cases: &[(usize, usize)] = if quick {
        &[(10, 100), (100, 100), (1_000, 50), (10_000, 10)]
    } else {
        // 3,000 trials at 100K: with no hit, the 95% upper bound on the rate is just under 0.1%.
        &[(10, 2_000), (100, 2_000), (1_000, 2_000), (10_000, 500), (100_000, 3_000)]
    };
    let spec = KeySpec { names: vec!["id".into()], field_ids: vec![0] };
    println!("## (b) false-conflict rate, two upserts with disjoint random Int64 keys");
    println!();
    println!("Goal: ours < 0.1% at 100K keys per side.");
    println!();
    println!(
        "| keys per side | trials | ours (exact sets) say may intersect | ours rate | ours rate, 95% upper bound | \
         Lance (bloom) says intersect | Lance rate |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut rng = Rng(0xB10F);
    for &(n, trials) in cases {
        let case_started = Instant::now();
        let (mut ours, mut lance) = (0usize, 0usize);
        for _ in 0..trials {
            // Two disjoint sets: draw 2n distinct keys, split them in halves.
            let mut seen = std::collections::HashSet::with_capacity(2 * n);
            let mut keys = Vec::with_capacity(2 * n);
            while keys.len() < 2 * n {
                let k = rng.next() as i64;
                if seen.insert(k) {
                    keys.push(KeyValue::Int64(k));
                }
            }
            let (a, b) = keys.split_at(n);
            let exact = |ks: &[KeyValue]| InsertedKeys {
                lance_filter: None,
                exact: Some(KeyHashSet::from_hashes(spec.field_ids.clone(), ks.iter().map(hash_key))),
            };
            if exact(a).may_intersect(&exact(b)).expect("comparable") {
                ours += 1;
            }
            let bloom = |ks: &[KeyValue]| {
                let mut builder = KeyExistenceFilterBuilder::new(spec.field_ids.clone());
                for k in ks {
                    builder.insert(k.clone()).expect("bloom insert");
                }
                builder.build()
            };
            if bloom(a).intersects(&bloom(b)).expect("comparable filters").0 {
                lance += 1;
            }
        }
        eprintln!("(b) {n} keys x {trials} trials in {:.1}s", case_started.elapsed().as_secs_f64());
        let rate = |c: usize| 100.0 * c as f64 / trials as f64;
        // With no hit in `trials` independent trials, the rate is below 1 - 0.05^(1/trials) at 95%.
        let bound = if ours == 0 {
            format!("{:.2}%", 100.0 * (1.0 - 0.05f64.powf(1.0 / trials as f64)))
        } else {
            "-".to_string()
        };
        println!("| {n} | {trials} | {ours} | {:.1}% | {bound} | {lance} | {:.1}% |", rate(ours), rate(lance));
    }
    println!();
}

/// Stage an all-new upsert of `ids` on `base` (Lance's v2 path, which attaches its key filter).
async fn stage_upsert(base: &Arc<Dataset>, ids: &[i64]) -> lance::dataset::UncommittedMergeInsert {
    let mut b = MergeInsertBuilder::try_new(base.clone(), vec!["id".into()]).expect("merge builder");
    b.when_matched(WhenMatched::UpdateAll)
        .when_not_matched(WhenNotMatched::InsertAll)
        .use_index(false)
        .conflict_retries(0);
    b.try_build().expect("merge job").execute_uncommitted_batches(vec![rows(ids, 1)]).await.expect("stage merge")
}

/// Two all-new upserts with disjoint keys staged on one base; the first commits, then the second.
/// Counts how often the second is refused. Ours: our actions carrying exact key sets, committed
/// through the driver. Lance: the staged transactions through `CommitBuilder` (no retries).
async fn real_disjoint_pairs(root: &Path, keys: usize, trials: usize) -> (usize, usize) {
    let ours_path = root.join("pairs-ours");
    let lance_path = root.join("pairs-lance");
    let seed: Vec<i64> = (0..1_000).collect();
    let table = KeyedTable::create(&uri(&ours_path), vec![rows(&seed, 0)], &["id"]).await.expect("create");
    let field_ids = table.key().field_ids.clone();
    copy_dir(&ours_path, &lance_path);
    let (mut ours_refused, mut lance_refused) = (0, 0);
    for trial in 0..trials {
        let ids: Vec<i64> = (0..2 * keys).map(|i| 10_000_000 + (trial * 2 * keys + i) as i64).collect();
        let (a, b) = ids.split_at(keys);
        // Lance.
        let base = Arc::new(Dataset::open(&uri(&lance_path)).await.expect("open"));
        let (sa, sb) = (stage_upsert(&base, a).await, stage_upsert(&base, b).await);
        CommitBuilder::new(base.clone()).with_max_retries(0).execute(sa.transaction).await.expect("first lands");
        if CommitBuilder::new(base.clone()).with_max_retries(0).execute(sb.transaction).await.is_err() {
            lance_refused += 1;
        }
        // Ours.
        let base = Arc::new(Dataset::open(&uri(&ours_path)).await.expect("open"));
        let (sa, sb) = (stage_upsert(&base, a).await, stage_upsert(&base, b).await);
        let ours_txn = |staged: &lance::dataset::UncommittedMergeInsert, ids: &[i64]| {
            let mut txn = lift(&staged.transaction.operation);
            let exact = KeyHashSet::from_hashes(field_ids.clone(), ids.iter().map(|i| hash_key(&KeyValue::Int64(*i))));
            for action in &mut txn.actions {
                if let AnyAction::AddFragments(add) = action {
                    add.keys = Some(InsertedKeys {
                        lance_filter: staged.inserted_rows_filter.clone(),
                        exact: Some(exact.clone()),
                    });
                }
            }
            txn
        };
        let (ta, tb) = (ours_txn(&sa, a), ours_txn(&sb, b));
        base.action_commit().execute_actions(sa.transaction.read_version, ta).await.expect("first lands");
        match base.action_commit().execute_actions(sb.transaction.read_version, tb).await {
            Ok(_) => {}
            Err(CommitError::Retry { .. }) => ours_refused += 1,
            Err(e) => panic!("ours: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&ours_path);
    let _ = std::fs::remove_dir_all(&lance_path);
    (ours_refused, lance_refused)
}

fn bench_real_pairs(root: &Path, quick: bool) {
    let trials = if quick { 5 } else { 50 };
    println!("Real commits: two staged all-new upserts, disjoint keys, same base; the first commits, then the second:");
    println!();
    println!("| keys per side | trials | ours: second refused | Lance: second refused |");
    println!("|---|---|---|---|");
    let rt = runtime();
    for keys in [10, 100] {
        let (ours, lance) = rt.block_on(real_disjoint_pairs(root, keys, trials));
        println!("| {keys} | {trials} | {ours} | {lance} |");
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// (c) bulk all-new insert with a vector column

fn bench_bulk_insert(root: &Path, quick: bool) {
    let (count, runs) = if quick { (20_000i64, 2) } else { (100_000i64, RUNS_C) };
    let seed_rows = 1_000i64;
    let ours_template = root.join("bulk-ours");
    let lance_template = root.join("bulk-lance");
    let rt = runtime();
    rt.block_on(async {
        KeyedTable::create(&uri(&ours_template), vector_batches(0, seed_rows, 1), &["id"]).await.expect("keyed table");
        let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
        InsertBuilder::new(uri(&lance_template).as_str())
            .with_params(&params)
            .execute(vector_batches(0, seed_rows, 1))
            .await
            .expect("plain table");
    });
    println!("## (c) bulk all-new insert: {count} rows of id Int64 + 256-dim float32 vector, into a 1K-row table");
    println!();
    println!(
        "Each run: a child process on a fresh copy of the table; rows generated in the child before timing (in \
         batches of 10,000). One untimed run per way first, then {runs} runs per way, rotating. Goals (issue \
         14): <= 1.2x time, <= +16 MiB peak RSS. \"fresh\": the child opens the table and inserts; \"after one key lookup\": the \
         handle first answers one 3-key `IN` lookup (untimed), as in a long-lived process that has read the table."
    );
    println!();
    println!(
        "\"file-backed\" is the part of the RSS that maps files (mostly the binary's code: shared, evictable, \
         not allocated by the work), at the end of the child; \"anonymous\" is the peak RSS less it."
    );
    println!();
    println!(
        "| rows | process | way | median ms | runs (ms) | median peak RSS MiB | of which file-backed MiB | time vs lance | run by run [95%] | RSS over lance MiB | anonymous over lance MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let template = |side: Side| if side == Side::Ours { &ours_template } else { &lance_template };
    for warm in [false, true] {
        let sides: &[Side] =
            if warm { &[Side::Ours, Side::Lance] } else { &[Side::Ours, Side::Lance, Side::LanceChunked] };
        let mut ms = vec![Vec::new(); 4];
        let mut hwm = vec![Vec::new(); 4];
        let mut file = vec![Vec::new(); 4];
        for run in 0..=runs {
            for k in round_order(run, sides.len()) {
                let side = sides[k];
                let path: PathBuf = root.join(format!("bulk-{}-{run}", side.name()));
                copy_dir(template(side), &path);
                let how = if warm { "warm" } else { "fresh" };
                let report = run_child(&format!("insert|{}|{}|{seed_rows}|{count}|{how}", side.name(), uri(&path)));
                let _ = std::fs::remove_dir_all(&path);
                // Run 0 warms up: the first children after the tables were written run cold.
                if run > 0 {
                    ms[side as usize].extend(report.ms);
                    hwm[side as usize].push(report.hwm_kb as f64 * 1024.0 / MIB);
                    file[side as usize].push(report.file_kb as f64 * 1024.0 / MIB);
                }
            }
        }
        let (lance_ms, lance_rss) = (median(&ms[Side::Lance as usize]), median(&hwm[Side::Lance as usize]));
        let lance_file = median(&file[Side::Lance as usize]);
        for &side in [Side::Lance, Side::LanceChunked, Side::Ours].iter().filter(|s| sides.contains(s)) {
            let i = side as usize;
            let runs: Vec<String> = ms[i].iter().map(|m| format!("{m:.0}")).collect();
            let label = match side {
                Side::Lance => "lance, InsertBuilder append",
                other => other.label(),
            };
            let process = if warm { "after one key lookup" } else { "fresh" };
            // Runs pair by index: run `r` made one child of each way, in a rotated order.
            let paired = if side == Side::Lance { None } else { paired_ratio(&ms[i], &ms[Side::Lance as usize]) };
            println!(
                "| {count} | {process} | {label} | {:.0} | {} | {:.0} | {:.0} | {:.2}x | {} | {:+.0} | {:+.0} |",
                median(&ms[i]),
                runs.join(", "),
                median(&hwm[i]),
                median(&file[i]),
                median(&ms[i]) / lance_ms,
                paired.map(|e| e.display()).unwrap_or_else(|| "-".into()),
                median(&hwm[i]) - lance_rss,
                (median(&hwm[i]) - median(&file[i])) - (lance_rss - lance_file)
            );
        }
    }
    println!();
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only a,c`: only those parts ((b) at 100K keys takes most of a full run).
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let part = |name: &str| only.as_ref().is_none_or(|o| o.split(',').any(|p| p == name));
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    if part("a") {
        bench_upserts(dir.path(), quick);
        eprintln!("(a) done at {:.0}s", started.elapsed().as_secs_f64());
    }
    if part("b") {
        bench_false_conflicts(quick);
        bench_real_pairs(dir.path(), quick);
        eprintln!("(b) done at {:.0}s", started.elapsed().as_secs_f64());
    }
    if part("c") {
        bench_bulk_insert(dir.path(), quick);
        eprintln!("(c) done at {:.0}s", started.elapsed().as_secs_f64());
    }
}
