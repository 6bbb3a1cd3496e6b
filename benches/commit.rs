//! Commit throughput and re-executions per commit for N = 1, 2, 4, 8 concurrent writers on a local
//! dataset, through our authoritative commit loop and through Lance's own `CommitBuilder` (default
//! retries), in one run:
//!   (a) appends, (b) deletes on disjoint fragments, (c) deletes of disjoint rows of ONE fragment
//!   (Lance with and without `with_affected_rows`), (d) appends mixed with index creation.
//! A re-execution is a Retry verdict handed back to the writer, which re-reads and re-stages.
//! Each cell is the median of three runs of 50 commits per writer.
//!
//! Run: `cargo bench -p lance-actions-benches --bench commit` (`-- --quick`: N = 1, 4 and fewer commits).

use std::sync::Arc;
use std::time::Instant;

use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance::dataset::{CommitBuilder, DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::index::DatasetIndexExt;
use lance_actions_commit::scenario::batch;
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_index::IndexType;
use lance_index::scalar::ScalarIndexParams;
use lance_select::RowAddrTreeMap;

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Ours,
    Lance,
    LanceAffectedRows,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Ours => "ours",
            Way::Lance => "lance",
            Way::LanceAffectedRows => "lance+affected_rows",
        }
    }
}

#[derive(Clone, Copy)]
enum Workload {
    Appends,
    DisjointFragments,
    OneFragmentDisjointRows,
    AppendsWithIndex,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Appends => "(a) appends",
            Workload::DisjointFragments => "(b) deletes, disjoint fragments",
            Workload::OneFragmentDisjointRows => "(c) deletes, one fragment, disjoint rows",
            Workload::AppendsWithIndex => "(d) appends + index creation",
        }
    }
}

const ROWS_PER_FRAGMENT: i64 = 64;

async fn create(uri: &str, writers: i64, commits: i64) -> Arc<Dataset> {
    // Fragment f (f < writers) holds rows f*64 .. f*64+64; fragment `writers` is shared: its row
    // w*commits + k belongs to writer w's k-th one-fragment delete.
    let mut ids: Vec<i64> = (0..writers * ROWS_PER_FRAGMENT).collect();
    ids.extend((0..writers * commits).map(|i| 1_000_000 + i));
    let params =
        WriteParams { mode: WriteMode::Create, max_rows_per_file: ROWS_PER_FRAGMENT as usize, ..Default::default() };
    let mut ds = InsertBuilder::new(uri)
        .with_params(&params)
        .execute(vec![batch(&ids[..(writers * ROWS_PER_FRAGMENT) as usize]).expect("batch")])
        .await
        .expect("create");
    let shared = InsertBuilder::new(Arc::new(ds.clone()))
        .with_params(&WriteParams { mode: WriteMode::Append, max_rows_per_file: 1 << 20, ..Default::default() })
        .execute(vec![batch(&ids[(writers * ROWS_PER_FRAGMENT) as usize..]).expect("batch")])
        .await
        .expect("shared fragment");
    ds = shared;
    Arc::new(ds)
}

async fn stage(
    ds: &Arc<Dataset>,
    workload: Workload,
    w: i64,
    k: i64,
    commits: i64,
) -> (Transaction, Option<RowAddrTreeMap>) {
    let append = |id: i64| async move {
        let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
        (
            InsertBuilder::new(ds.clone())
                .with_params(&params)
                .execute_uncommitted(vec![batch(&[id]).expect("batch")])
                .await
                .expect("append"),
            None,
        )
    };
    let delete = |pred: String| async move {
        let d = DeleteBuilder::new(ds.clone(), pred).execute_uncommitted().await.expect("delete");
        (d.transaction, d.affected_rows)
    };
    match workload {
        Workload::Appends => append(10_000_000 + w * 100_000 + k).await,
        Workload::DisjointFragments => delete(format!("id = {}", w * ROWS_PER_FRAGMENT + k)).await,
        Workload::OneFragmentDisjointRows => delete(format!("id = {}", 1_000_000 + w * commits + k)).await,
        Workload::AppendsWithIndex if k % 5 == 4 => {
            let mut d = (**ds).clone();
            let params = ScalarIndexParams::default();
            let meta = d
                .create_index_builder(&["v"], IndexType::BTree, &params)
                .name(format!("v_idx_{w}"))
                .replace(true)
                .execute_uncommitted()
                .await
                .expect("index");
            let removed: Vec<_> =
                ds.load_indices().await.expect("indices").iter().filter(|i| i.name == meta.name).cloned().collect();
            let op = Operation::CreateIndex { new_indices: vec![meta], removed_indices: removed };
            (TransactionBuilder::new(ds.manifest().version, op).build(), None)
        }
        Workload::AppendsWithIndex => append(10_000_000 + w * 100_000 + k).await,
    }
}

/// One writer: `commits` logical writes, each re-staged on a Retry. Returns re-executions.
async fn writer(uri: String, way: Way, workload: Workload, w: i64, commits: i64) -> usize {
    let mut reexecutions = 0;
    for k in 0..commits {
        loop {
            let ds = Arc::new(Dataset::open(&uri).await.expect("open"));
            let (txn, rows) = stage(&ds, workload, w, k, commits).await;
            let landed = match way {
                Way::Ours => {
                    let mut c = ds.action_commit().with_max_attempts(100);
                    if let Some(r) = rows {
                        c = c.with_affected_rows(r);
                    }
                    match c.execute(txn).await {
                        Ok(_) => true,
                        Err(CommitError::Retry { .. }) => false,
                        Err(e) => panic!("ours: {e}"),
                    }
                }
                Way::Lance | Way::LanceAffectedRows => {
                    let mut c = CommitBuilder::new(ds.clone());
                    if let (Way::LanceAffectedRows, Some(r)) = (way, rows) {
                        c = c.with_affected_rows(r);
                    }
                    match c.execute(txn).await {
                        Ok(_) => true,
                        Err(
                            lance::Error::RetryableCommitConflict { .. }
                            | lance::Error::CommitConflict { .. }
                            | lance::Error::TooMuchWriteContention { .. },
                        ) => false,
                        Err(e) => panic!("lance: {e}"),
                    }
                }
            };
            if landed {
                break;
            }
            reexecutions += 1;
        }
    }
    reexecutions
}

/// Median throughput (and its run's re-executions) over `REPEATS` runs: single runs on a shared
/// 2-core machine vary by tens of percent.
const REPEATS: usize = 3;

async fn measure(way: Way, workload: Workload, writers: i64, commits: i64) -> (f64, f64) {
    let mut runs = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        runs.push(run(way, workload, writers, commits).await);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[REPEATS / 2]
}

async fn run(way: Way, workload: Workload, writers: i64, commits: i64) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    create(&uri, writers, commits).await;
    let start = Instant::now();
    let handles: Vec<_> = (0..writers).map(|w| tokio::spawn(writer(uri.clone(), way, workload, w, commits))).collect();
    let mut re = 0;
    for h in handles {
        re += h.await.expect("writer");
    }
    let total = (writers * commits) as f64;
    (total / start.elapsed().as_secs_f64(), re as f64 / total)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let ns: &[i64] = if quick { &[1, 4] } else { &[1, 2, 4, 8] };
    let commits = if quick { 10 } else { 50 };
    // Warm the page cache, the allocator and Lance's session caches before measuring anything.
    run(Way::Lance, Workload::Appends, 2, 10).await;
    run(Way::Ours, Workload::Appends, 2, 10).await;
    println!("| workload | N | way | commits/s | re-executions/commit | throughput vs lance |");
    println!("|---|---|---|---|---|---|");
    for workload in
        [Workload::Appends, Workload::DisjointFragments, Workload::OneFragmentDisjointRows, Workload::AppendsWithIndex]
    {
        for &n in ns {
            let ways: &[Way] = match workload {
                Workload::OneFragmentDisjointRows => &[Way::Lance, Way::LanceAffectedRows, Way::Ours],
                _ => &[Way::Lance, Way::Ours],
            };
            let mut lance_tput = None;
            for &way in ways {
                let (tput, re) = measure(way, workload, n, commits).await;
                if way == Way::Lance {
                    lance_tput = Some(tput);
                }
                let ratio = lance_tput.map(|l| format!("{:.2}x", tput / l)).unwrap_or_default();
                println!("| {} | {n} | {} | {tput:.1} | {re:.2} | {ratio} |", workload.name(), way.name());
            }
        }
    }
}
