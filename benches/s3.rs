//! Commit throughput on a real S3-compatible server, ours against Lance's own `CommitBuilder`, in
//! one run: N = 1, 2, 4, 8 concurrent writers, appends and deletes of disjoint rows of ONE
//! fragment (Lance both plain and given `with_affected_rows`, which ours is given too).
//!
//! On an object store a commit costs round trips, so besides commits/s and re-executions per
//! commit (a Retry handed back to the writer, which re-reads and re-stages) this counts the
//! server's responses per landed commit: every request any writer made, staging included, counted
//! at a relay in front of the server (`tests/s3/server.rs`, shared with the S3 tests), minus the
//! table's creation.
//!
//! Each cell is the median of three runs per way, run in rounds that rotate the ways' order.
//! "Wasted" round trips are those past the way's own cost of a commit with one writer (N = 1, run
//! first): what contention cost. The goal: fewer re-executions and wasted round trips per landed
//! commit than Lance's own commit at every N, at no less throughput.
//!
//! The server is moto's (python/.venv, installed by `scripts/setup.sh`), started here on a
//! loopback port and stopped at the end. Run:
//! `cargo bench -p lance-actions-benches --bench s3` (`-- --ops K` commits per writer, default 10;
//! `-- --quick`: N = 1 and 4; `-- --only append|delete-rows`: one workload).

// The tests' server, relay and all; the fault controls (stop, restart) go unused here.
#[allow(dead_code)]
#[path = "../tests/s3/server.rs"]
mod server;

use lance_actions_commit::bench::commit::{Throughput, Way, Workload, create, round_order, run};

const BUCKET: &str = "bench";
/// Runs per way and cell; the median is reported. Three rounds put each of three ways first once.
const ROUNDS: usize = 3;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let ops = args.iter().position(|a| a == "--ops").and_then(|i| args.get(i + 1)).and_then(|k| k.parse().ok());
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).and_then(|w| Workload::parse(w));
    let s3 = server::S3::start().expect("start the S3 server (run ./scripts/setup.sh first)");
    s3.create_bucket(BUCKET).expect("create the bench bucket");
    for (key, value) in s3.env() {
        // SAFETY: no other thread exists yet; Lance's S3 client reads the standard AWS_* variables.
        unsafe { std::env::set_var(key, value) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let ns: &[i64] = if quick { &[1, 4] } else { &[1, 2, 4, 8] };
    runtime.block_on(measure(&s3, ns, ops.unwrap_or(10), only));
}

/// One cell: throughput and the server's responses per landed commit.
struct Cell {
    t: Throughput,
    round_trips_per_commit: f64,
    /// Requests per landed commit by method and what they touch (`GET manifest 2.0, LIST 1.0`).
    by_kind: String,
}

async fn measure(s3: &server::S3, ns: &[i64], ops: i64, only: Option<Workload>) {
    // Warm the clients, Lance's session caches and moto itself before anything is measured.
    run(&uri("warm-lance"), Way::Lance, Workload::Append, 2, 3, 0).await.expect("warm-up");
    run(&uri("warm-ours"), Way::Ours, Workload::Append, 2, 3, 0).await.expect("warm-up");
    println!(
        "| workload | N | way | commits/s | re-executions/commit | retries/commit | round trips/commit | wasted round trips/commit | commits/s vs lance | round trips vs lance | wasted vs lance |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut breakdown = Vec::new();
    let workloads = [Workload::Append, Workload::DeleteRows];
    for workload in workloads.into_iter().filter(|w| only.is_none_or(|o| o == *w)) {
        let ways: Vec<Way> = workload.lance_ways().iter().copied().chain([Way::Ours]).collect();
        // Each way's round trips per commit with one writer: what a commit costs when nothing
        // contends. Past it, a round trip per landed commit is one the contention wasted.
        let mut alone: Vec<Option<f64>> = vec![None; ways.len()];
        for &n in ns {
            let cells = rounds(s3, workload, &ways, n, ops).await;
            if n == 1 {
                alone = cells.iter().map(|c| Some(c.round_trips_per_commit)).collect();
            }
            let wasted: Vec<Option<f64>> =
                cells.iter().zip(&alone).map(|(c, a)| a.map(|a| (c.round_trips_per_commit - a).max(0.0))).collect();
            // Ours is compared with the last Lance way: given the affected rows where it takes them.
            let (lance, lance_wasted) = (&cells[cells.len() - 2], wasted[cells.len() - 2]);
            for ((way, cell), wasted) in ways.iter().zip(&cells).zip(&wasted) {
                let (tput, trips, waste) = if *way == Way::Ours {
                    let waste = match (wasted, lance_wasted) {
                        (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}x", ours / theirs),
                        _ => "-".into(),
                    };
                    (
                        format!("{:.2}x", cell.t.commits_per_s / lance.t.commits_per_s),
                        format!("{:.2}x", cell.round_trips_per_commit / lance.round_trips_per_commit),
                        waste,
                    )
                } else {
                    Default::default()
                };
                let retries = cell.t.retries_per_commit.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into());
                let wasted = wasted.map(|w| format!("{w:.1}")).unwrap_or_else(|| "-".into());
                println!(
                    "| {} | {n} | {} | {:.2} | {:.2} | {retries} | {:.1} | {wasted} | {tput} | {trips} | {waste} |",
                    workload.name(),
                    way.name(),
                    cell.t.commits_per_s,
                    cell.t.reexecutions_per_commit,
                    cell.round_trips_per_commit,
                );
                breakdown.push(format!("| {} | {n} | {} | {} |", workload.name(), way.name(), cell.by_kind));
            }
        }
    }
    println!("\nRequests per landed commit, by kind:\n\n| workload | N | way | requests |\n|---|---|---|---|");
    for line in breakdown {
        println!("{line}");
    }
}

/// Each way's cell, the median of `ROUNDS` runs: round `r` runs the ways in an order rotated by `r`,
/// so none always runs after the others (on a busy machine, and on a server holding ever more
/// objects, the way run later is measured slower; `bench::commit::compare`). The median run by
/// round trips gives the round trips and their kinds; the median by throughput, the throughput.
async fn rounds(s3: &server::S3, workload: Workload, ways: &[Way], n: i64, ops: i64) -> Vec<Cell> {
    let mut runs: Vec<Vec<Cell>> = ways.iter().map(|_| Vec::new()).collect();
    for round in 0..ROUNDS {
        for i in round_order(round, ways.len()) {
            runs[i].push(cell(s3, workload, ways[i], n, ops, round).await);
        }
    }
    runs.into_iter().map(median_cell).collect()
}

fn median_cell(mut runs: Vec<Cell>) -> Cell {
    runs.sort_by(|a, b| a.t.commits_per_s.total_cmp(&b.t.commits_per_s));
    let t = runs[runs.len() / 2].t;
    runs.sort_by(|a, b| a.round_trips_per_commit.total_cmp(&b.round_trips_per_commit));
    let mid = runs.swap_remove(runs.len() / 2);
    Cell { t, ..mid }
}

async fn cell(s3: &server::S3, workload: Workload, way: Way, n: i64, ops: i64, round: usize) -> Cell {
    let name = format!("{}-{}-{n}-{round}", workload.name(), way.name());
    // What creating the table costs, measured on a twin, is not a commit's cost.
    let (before, kinds_before) = (s3.responses(), s3.requests_by_kind());
    create(&uri(&format!("{name}-twin")), n, ops, 0).await.expect("create the twin table");
    let creation = s3.responses() - before;
    let creation_kinds = s3.requests_since(&kinds_before);
    let (before, kinds_before) = (s3.responses(), s3.requests_by_kind());
    let t = run(&uri(&name), way, workload, n, ops, 0).await.expect("run");
    let spent = (s3.responses() - before).saturating_sub(creation);
    let commits = (n * ops) as f64;
    let by_kind = server::requests_minus(&s3.requests_since(&kinds_before), &creation_kinds)
        .into_iter()
        .map(|(kind, count)| format!("{kind} {:.1}", count as f64 / commits))
        .collect::<Vec<_>>()
        .join(", ");
    Cell { t, round_trips_per_commit: spent as f64 / commits, by_kind }
}

fn uri(name: &str) -> String {
    format!("s3://{BUCKET}/{name}")
}
