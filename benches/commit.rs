//! Commit throughput and re-executions per commit for N = 1, 2, 4, 8 concurrent writers on a local
//! dataset, through our authoritative commit loop and through Lance's own `CommitBuilder` (default
//! retries, and given `with_affected_rows` where the write reports rows), in one run:
//!   appends, deletes on disjoint fragments, deletes of disjoint rows of ONE fragment, upserts of
//!   disjoint keys, appends mixed with index creation.
//! A re-execution is a Retry verdict handed back to the writer, which re-reads and re-stages.
//! Each cell is the median of three runs of 50 commits per writer, run in rounds that rotate the ways'
//! order, each table removed after its run (`compare`: run one way after the other, the second
//! was measured on a slower machine). Ours is also compared round by round: the median of the
//! rounds' ratios with its 95% interval from 6 rounds on (`bench::stats`); an interval that holds 1.0
//! means the runs do not tell the two ways apart. Where Lance is measured twice (plain, and given the
//! affected rows), plain Lance is compared the same way: for deletes of disjoint fragments and upserts
//! of disjoint keys both do the same work, so their ratio shows how far the bench alone spreads. The
//! workloads are `lance_actions_commit::bench::commit`, which `lance-actions bench commit` also runs.
//!
//! Run: `cargo bench -p lance-actions-benches --bench commit` (`-- --quick`: N = 1, 4 and fewer
//! commits; `-- --only <workload>` for one workload; `-- --writers N` for N writers only; `-- --rounds
//! R` for R rounds instead of three, which narrows the interval). `-- --profile ours|lance --only
//! <workload> --writers N --rounds R` runs one way alone, R tables in a row, and prints its
//! commits/s: a `perf record` of it is that way's CPU.
//! `-- --extra-fragments F` starts every table with F more one-row fragments, which no writer touches: a
//! large manifest, which every commit reads and writes whole (a delete scans them all for its rows).
//! `-- --control-us X` adds a control way, `lance+fixed_cost`: Lance's commit after X microseconds
//! of busy work in each commit call (for X, take ours' own time per commit from the same table). It
//! is compared with Lance like ours: where the two ratios agree, the gap is the fixed cost alone.

use lance_actions_commit::bench::commit::{Way, Workload, compare, run};

/// Runs per way and cell (the median is reported): single runs on a shared 2-core machine vary by
/// tens of percent. Three rounds put each of three ways first once.
const REPEATS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).and_then(|w| Workload::parse(w));
    let writers: Option<i64> = count(&args, "--writers");
    let ns: Vec<i64> = match writers {
        Some(n) => vec![n],
        None if quick => vec![1, 4],
        None => vec![1, 2, 4, 8],
    };
    let commits = if quick { 10 } else { 50 };
    let rounds = count(&args, "--rounds").unwrap_or(REPEATS);
    // Tables that start with this many more one-row fragments (a large manifest).
    let fragments = count(&args, "--extra-fragments").unwrap_or(0);
    let control: Option<u32> = count(&args, "--control-us");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_str().expect("utf-8 temp dir").to_string();
    if let Some(way) = args.iter().position(|a| a == "--profile").and_then(|i| args.get(i + 1)) {
        profile(&root, way, only.unwrap_or(Workload::Append), writers.unwrap_or(4), commits, rounds, fragments).await;
        return;
    }
    // Warm the page cache, the allocator and Lance's session caches before measuring anything.
    run(&format!("{root}/warm-lance"), Way::Lance, Workload::Append, 2, 10, 0).await.expect("warm-up");
    run(&format!("{root}/warm-ours"), Way::Ours, Workload::Append, 2, 10, 0).await.expect("warm-up");
    println!(
        "| workload | N | way | commits/s | re-executions/commit | retries/commit | lost puts/commit | open and stage (us) | commit call (us) | CPU (us) | in Lance / our own / waits (us) | throughput vs lance | round by round [95%] | while all write: commits/s | finish spread | while all write: round by round [95%] |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let workloads: Vec<Workload> = match only {
        Some(w) => vec![w],
        None => Workload::ALL.to_vec(),
    };
    for workload in workloads {
        for &n in &ns {
            let control = control.map(|us| Way::LanceWithCost { us });
            let ways: Vec<Way> = workload.lance_ways().iter().copied().chain(control).chain([Way::Ours]).collect();
            let comparison = compare(&root, &ways, workload, n, commits, rounds, fragments).await.expect("run");
            let figures = comparison.medians();
            // Ours (and the control) is compared with the last Lance way: given the affected rows
            // where Lance takes them.
            let ours = ways.len() - 1;
            let lance = ways.iter().position(|w| *w == workload.compared_lance_way()).expect("a Lance way is run");
            let lance_tput = figures[lance].commits_per_s;
            for (i, (way, t)) in ways.iter().zip(&figures).enumerate() {
                // Plain Lance is compared with Lance given the rows too: for deletes of disjoint
                // fragments and upserts of disjoint keys they do the same work, so that ratio is
                // the spread of the bench itself (an A/A comparison, `design/benchmarks.md`). For
                // deletes of rows of one fragment it is a real comparison: only Lance given the
                // rows merges the vectors instead of refusing.
                let compared =
                    i != lance && (i == ours || *way == Way::Lance || matches!(way, Way::LanceWithCost { .. }));
                let ratio = if compared { t.commits_per_s / lance_tput } else { 1.0 };
                let by_round = match comparison.ratio(i, lance) {
                    Some(e) if compared => e.display(),
                    _ => "-".into(),
                };
                let all_writing_by_round = match comparison.all_writing_ratio(i, lance) {
                    Some(e) if compared => e.display(),
                    _ => "-".into(),
                };
                let retries = t.retries_per_commit.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into());
                let cpu = t.cpu_us.map(|c| format!("{c:.0}")).unwrap_or_else(|| "-".into());
                let split = t
                    .split_us
                    .map(|s| format!("{:.0} / {:.0} / {:.0}", s.in_lance, s.own, s.waited))
                    .unwrap_or_else(|| "-".into());
                println!(
                    "| {} | {n} | {} | {:.1} | {:.2} | {retries} | {:.2} | {:.0} | {:.0} | {cpu} | {split} | {ratio:.2}x | {by_round} | {:.1} | {:.2} | {all_writing_by_round} |",
                    workload.name(),
                    way.name(),
                    t.commits_per_s,
                    t.reexecutions_per_commit,
                    t.lost_puts_per_commit,
                    t.open_and_stage_us,
                    t.commit_call_us,
                    t.all_writing_per_s,
                    t.finish_spread
                );
            }
        }
    }
}

/// The count given after `flag`, if the flag is given.
fn count<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    let given = args.get(args.iter().position(|a| a == flag)? + 1);
    Some(given.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{flag} takes a count")))
}

/// One way alone, `rounds` tables in a row (each removed after its run): its commits/s per table.
async fn profile(
    root: &str,
    way: &str,
    workload: Workload,
    writers: i64,
    commits: i64,
    rounds: usize,
    fragments: usize,
) {
    let way = match way {
        "ours" => Way::Ours,
        "lance" => workload.compared_lance_way(),
        other => panic!("--profile takes ours or lance, not {other}"),
    };
    for round in 0..rounds {
        let uri = format!("{root}/profile-{round}");
        let t = run(&uri, way, workload, writers, commits, fragments).await.expect("run");
        std::fs::remove_dir_all(&uri).expect("remove the table");
        let at_write = match t.at_write {
            Some((judged, us)) => format!(", {judged} judged at the write, {us:.1} us each"),
            None => String::new(),
        };
        let split = t.split_us.map(|s| format!(" ({s})")).unwrap_or_default();
        let cpu = t.cpu_us.map(|c| format!(", {c:.0} us CPU")).unwrap_or_default();
        println!(
            "{} {} N={writers}: {:.1} commits/s ({:.1} while all write, finish spread {:.2}), {:.2} lost puts/commit{at_write}, {:.0} us opening and staging, {:.0} us a commit call{split}{cpu}",
            workload.name(),
            way.name(),
            t.commits_per_s,
            t.all_writing_per_s,
            t.finish_spread,
            t.lost_puts_per_commit,
            t.open_and_stage_us,
            t.commit_call_us
        );
    }
}
