//! `lance-actions bench`: the cargo benches' side-by-side comparisons, on the user's own storage.
//!
//! `bench commit <uri-prefix>` creates fresh tables under `<uri-prefix>/lance-actions-bench-<pid>-<nanos>/`
//! (any uri the library opens), runs the same writers through Lance's `CommitBuilder` and through
//! our commit loop, prints both throughputs, the ratio and the re-executions (and our retries) per
//! commit, and removes the tables. `bench check` times judging one committed peer, ours against
//! Lance's `check_txn`, on in-memory-sized local tables. Both run the workloads of
//! `lance_actions_commit::bench`, which `cargo bench` runs too.

use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use lance_actions_commit::bench::commit::{Throughput, Way, Workload};
use lance_actions_commit::bench::stats::RatioEstimate;
use lance_actions_commit::bench::{self, BenchError, check};
use serde_json::{Value, json};

use crate::failure::{Failure, Kind};
use crate::{CliResult, JSON_HELP};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Commit throughput of N concurrent writers: ours against Lance's own commit, same data, one
    /// run. Deletes and upserts are compared with Lance given the affected rows.
    Commit {
        /// Where to create the bench tables (a directory or an object-store prefix); they go in a
        /// new sub-directory that is removed afterwards.
        uri_prefix: String,
        /// Concurrent writers (tasks in this process).
        #[arg(long, default_value_t = 4)]
        writers: i64,
        /// Commits per writer.
        #[arg(long, default_value_t = 20)]
        ops: i64,
        /// What each commit does: append rows, delete in disjoint fragments, delete disjoint rows
        /// of one fragment, or upsert by key.
        #[arg(long, value_enum, default_value = "append")]
        workload: WorkloadArg,
        /// Runs per way; the median is reported. Runs go in rounds, Lance's first in the first round,
        /// ours first in the second, and so on: on a busy machine the way run second is measured
        /// slower. The rounds' ratios also give an interval: more rounds narrow it.
        #[arg(long, default_value_t = 2)]
        repeats: usize,
        /// Start every table with this many more one-row fragments, which no writer touches: a
        /// large manifest, which every commit reads and writes whole. A delete scans them all for
        /// its rows, so deletes on such tables mostly measure the scan.
        #[arg(long, default_value_t = 0)]
        extra_fragments: usize,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The cost of judging one committed peer: ours against Lance's `check_txn`, same pairs.
    Check {
        /// Manifest sizes (fragments) to measure on.
        #[arg(long, value_delimiter = ',', default_value = "10,1000")]
        fragments: Vec<usize>,
        /// Time spent per figure, in milliseconds.
        #[arg(long, default_value_t = 100)]
        millis: u64,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    Append,
    DeleteDisjoint,
    DeleteRows,
    Upsert,
}

impl WorkloadArg {
    fn workload(self) -> Workload {
        match self {
            WorkloadArg::Append => Workload::Append,
            WorkloadArg::DeleteDisjoint => Workload::DeleteDisjoint,
            WorkloadArg::DeleteRows => Workload::DeleteRows,
            WorkloadArg::Upsert => Workload::Upsert,
        }
    }
}

pub async fn run(command: BenchCommand) -> CliResult {
    match command {
        BenchCommand::Commit { uri_prefix, writers, ops, workload, repeats, extra_fragments, json } => {
            let shape = Shape { writers, ops, workload: workload.workload(), repeats, extra_fragments };
            commit(&uri_prefix, shape, json).await
        }
        BenchCommand::Check { fragments, millis, json } => run_check(&fragments, millis, json).await,
    }
}

fn failure(e: BenchError) -> Failure {
    match e {
        BenchError::Setup { what } => Failure::new(Kind::Usage, what),
        other => Failure::new(Kind::Other, other.to_string()),
    }
}

fn figures(t: &Throughput) -> Value {
    json!({
        "commits_per_s": t.commits_per_s,
        "all_writing_per_s": t.all_writing_per_s,
        "finish_spread": t.finish_spread,
        "reexecutions_per_commit": t.reexecutions_per_commit,
        "retries_per_commit": t.retries_per_commit,
        "lost_puts_per_commit": t.lost_puts_per_commit,
        "open_and_stage_us": t.open_and_stage_us,
        "commit_call_us": t.commit_call_us,
        "cpu_us": t.cpu_us,
        "in_lance_us": t.split_us.map(|s| s.in_lance),
        "own_us": t.split_us.map(|s| s.own),
        "waited_us": t.split_us.map(|s| s.waited),
    })
}

/// More runs per way than this only repeat what the median already shows.
const MAX_REPEATS: usize = 25;

/// What `bench commit` runs.
#[derive(Clone, Copy)]
struct Shape {
    writers: i64,
    ops: i64,
    workload: Workload,
    repeats: usize,
    extra_fragments: usize,
}

async fn commit(prefix: &str, shape: Shape, as_json: bool) -> CliResult {
    let Shape { writers, ops, workload, repeats, extra_fragments } = shape;
    if writers < 1 || ops < 1 || repeats < 1 {
        return Err(Failure::new(
            Kind::Usage,
            format!("--writers ({writers}), --ops ({ops}) and --repeats ({repeats}) must be at least 1"),
        ));
    }
    if repeats > MAX_REPEATS {
        return Err(Failure::new(Kind::Usage, format!("--repeats ({repeats}) is at most {MAX_REPEATS}")));
    }
    if extra_fragments > bench::commit::MAX_EXTRA_FRAGMENTS {
        return Err(Failure::new(
            Kind::Usage,
            format!("--extra-fragments ({extra_fragments}) is at most {}", bench::commit::MAX_EXTRA_FRAGMENTS),
        ));
    }
    let dir = format!("{}/lance-actions-bench-{}", prefix.trim_end_matches('/'), run_directory_name());
    let lance_way = workload.compared_lance_way();
    let outcome = side_by_side(&dir, lance_way, shape).await;
    // The tables are the bench's own: removed whether or not the run completed.
    let removed = bench::remove_tables(&dir).await;
    let (lance, ours, estimate) = outcome.map_err(failure)?;
    removed.map_err(failure)?;
    let ratio = ours.commits_per_s / lance.commits_per_s;
    if as_json {
        let mut lance_json = figures(&lance);
        lance_json["way"] = json!(lance_way.name());
        println!(
            "{}",
            json!({
                "workload": workload.name(),
                "writers": writers,
                "ops": ops,
                "extra_fragments": extra_fragments,
                "ours": figures(&ours),
                "lance": lance_json,
                "ratio": ratio,
                // Ours over Lance round by round: the median and its 95% interval.
                // (`low` and `high` are null below 6 rounds: too few for a 95% interval.)
                "ratio_by_round": estimate.map(|e| json!({
                    "median": e.ratio,
                    "low": e.interval.map(|i| i.0),
                    "high": e.interval.map(|i| i.1),
                    "rounds": e.pairs,
                })),
            })
        );
        return Ok(());
    }
    let table =
        if extra_fragments > 0 { format!(", tables of {extra_fragments} more fragments") } else { String::new() };
    println!("workload {}, {writers} writer(s) x {ops} commit(s){table}, under {dir}", workload.name());
    print_line(lance_way.name(), &lance);
    print_line("ours", &ours);
    println!("ratio (ours / {}): {ratio:.2}x", lance_way.name());
    if let Some(e) = estimate {
        let verdict = match e.interval {
            None => "",
            Some(_) if e.differs() => ", the runs tell the two apart",
            Some(_) => ", within the spread between runs",
        };
        println!("  round by round: median {} over {} round(s){verdict}", e.display(), e.pairs);
    }
    Ok(())
}

/// Lance's way and ours, `repeats` rounds each, each round in a rotated order, every table removed
/// after its run (`bench::commit::compare`).
async fn side_by_side(
    dir: &str,
    lance_way: Way,
    shape: Shape,
) -> Result<(Throughput, Throughput, Option<RatioEstimate>), BenchError> {
    let Shape { writers, ops, workload, repeats, extra_fragments } = shape;
    let ways = [lance_way, Way::Ours];
    let comparison = bench::commit::compare(dir, &ways, workload, writers, ops, repeats, extra_fragments).await?;
    match comparison.medians().as_slice() {
        [lance, ours] => Ok((*lance, *ours, comparison.ratio(1, 0))),
        other => Err(BenchError::Setup { what: format!("expected two ways' figures, got {}", other.len()) }),
    }
}

fn print_line(name: &str, t: &Throughput) {
    let retries = t.retries_per_commit.map(|r| format!(", {r:.2} retries/commit")).unwrap_or_default();
    let split = t.split_us.map(|s| format!(" ({s})")).unwrap_or_default();
    let cpu = t.cpu_us.map(|c| format!(", {c:.0} us CPU")).unwrap_or_default();
    println!(
        "  {name:<20} {:>8.1} commits/s ({:.1} while all write, finish spread {:.2}), {:.2} re-executions/commit{retries}, {:.2} lost puts/commit, {:.0} us opening and staging, {:.0} us a commit call{split}{cpu}",
        t.commits_per_s,
        t.all_writing_per_s,
        t.finish_spread,
        t.reexecutions_per_commit,
        t.lost_puts_per_commit,
        t.open_and_stage_us,
        t.commit_call_us
    );
}

/// A fresh directory name per run, so concurrent runs under one prefix never share tables.
fn run_directory_name() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

async fn run_check(sizes: &[usize], millis: u64, as_json: bool) -> CliResult {
    if sizes.iter().any(|&n| n < 2) {
        return Err(Failure::new(
            Kind::Usage,
            "--fragments: every size must be at least 2 (the pairs use two fragments)",
        ));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::new(Kind::Other, format!("cannot create a temporary directory: {e}")))?;
    let root = dir.path().to_string_lossy().to_string();
    let target = Duration::from_millis(millis.max(1));
    let mut rows = Vec::new();
    for &n in sizes {
        let ds = check::table(&root, n).await.map_err(failure)?;
        for shape in check::shapes(&ds).map_err(failure)? {
            let t = check::measure(&ds, &shape, target).await.map_err(failure)?;
            rows.push(json!({
                "shape": shape.name,
                "fragments": n,
                "ours_ns": t.ours_peer_ns,
                "lance_ns": t.lance_ns,
                "ratio": t.ours_peer_ns / t.lance_ns,
                "ours_resolve_ns": t.ours_resolve_ns,
                "ours_lift_resolve_ns": t.ours_lift_resolve_ns,
            }));
        }
    }
    if as_json {
        println!("{}", json!({ "check": rows }));
        return Ok(());
    }
    println!("judging one committed peer, median ns (ours: the per-peer step, both sides prepared)");
    for r in &rows {
        println!(
            "  {:<40} {:>6} fragments  ours {:>8.0}  lance {:>8.0}  ratio {:.2}x  (whole resolve {:.0})",
            r["shape"].as_str().unwrap_or(""),
            r["fragments"],
            r["ours_ns"].as_f64().unwrap_or(f64::NAN),
            r["lance_ns"].as_f64().unwrap_or(f64::NAN),
            r["ratio"].as_f64().unwrap_or(f64::NAN),
            r["ours_resolve_ns"].as_f64().unwrap_or(f64::NAN),
        );
    }
    Ok(())
}
