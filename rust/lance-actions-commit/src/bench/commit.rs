//! Commit throughput of N concurrent writers, ours against Lance's `CommitBuilder`, on one table
//! layout per run, created fresh under a uri prefix (any store the library can open).
//!
//! Table layout: fragment `w` (for writer `w < N`) holds ids `w*64 .. w*64+64`; one more fragment is
//! shared: its id `1_000_000 + w*K + k` belongs to writer `w`'s `k`-th commit. So every workload's
//! writers are disjoint by construction and a re-execution is only ever a false conflict.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::dataset::{
    CommitBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance_select::RowAddrTreeMap;

use super::lost_puts::CountingPuts;
use super::stats::{self, RatioEstimate};
use super::{BenchError, BenchResult, lance_err};
use crate::scenario::batch;
use crate::{CommitError, DatasetActionsExt, StagedDelete};

/// A commit call's time, split ([`Throughput::split_us`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Split {
    pub in_lance: f64,
    pub own: f64,
    pub waited: f64,
}

impl std::fmt::Display for Split {
    /// The split as the benches print it after the commit call's time.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} in Lance's commit path, {:.0} our own, {:.0} waiting", self.in_lance, self.own, self.waited)
    }
}

/// Who commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `action_commit()`: a delete staged with `stage_delete` (Lance's `DeleteBuilder`) and
    /// committed with `execute_delete`; an upsert given the affected rows Lance reports.
    Ours,
    /// `CommitBuilder` with its default retries.
    Lance,
    /// `CommitBuilder` given `with_affected_rows` (row-level rebase of deletes).
    LanceAffectedRows,
    /// The last of the workload's Lance ways after `us` microseconds of busy work in the writer's
    /// commit call, before Lance's: a control for what a fixed cost per commit, such as our own
    /// steps, does to Lance's throughput at the same N on the same machine.
    LanceWithCost { us: u32 },
}

impl Way {
    pub fn name(self) -> &'static str {
        match self {
            Way::Ours => "ours",
            Way::Lance => "lance",
            Way::LanceAffectedRows => "lance+affected_rows",
            Way::LanceWithCost { .. } => "lance+fixed_cost",
        }
    }
}

/// What each writer commits, K times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One new row per commit.
    Append,
    /// Delete one row of the writer's own fragment per commit.
    DeleteDisjoint,
    /// Delete one row of the shared fragment per commit (disjoint rows of one fragment).
    DeleteRows,
    /// Merge-insert one present row of the writer's own fragment and one new row per commit.
    Upsert,
    /// Appends, every fifth commit a BTree index (re)built under the writer's own name.
    AppendWithIndex,
}

impl Workload {
    pub const ALL: [Workload; 5] =
        [Workload::Append, Workload::DeleteDisjoint, Workload::DeleteRows, Workload::Upsert, Workload::AppendWithIndex];

    /// The name the CLI takes and prints.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::DeleteDisjoint => "delete-disjoint",
            Workload::DeleteRows => "delete-rows",
            Workload::Upsert => "upsert",
            Workload::AppendWithIndex => "append-with-index",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Lance's ways to compare with: deletes are also measured with `with_affected_rows`, which is
    /// what ours is given.
    pub fn lance_ways(self) -> &'static [Way] {
        match self {
            Workload::DeleteDisjoint | Workload::DeleteRows | Workload::Upsert => &[Way::Lance, Way::LanceAffectedRows],
            Workload::Append | Workload::AppendWithIndex => &[Way::Lance],
        }
    }

    /// The Lance way ours (and the control, [`Way::LanceWithCost`]) is compared with: the last of
    /// [`Workload::lance_ways`], given the affected rows where the write reports them, as ours is.
    pub fn compared_lance_way(self) -> Way {
        self.lance_ways().last().copied().unwrap_or(Way::Lance)
    }
}

/// One run's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    /// All commits over the run's time, which ends with the last writer's last commit.
    pub commits_per_s: f64,
    /// The commits that landed while every writer was still writing, over that time: until the
    /// first writer to finish landed its last commit ([`steady_rate`]). A writer that falls
    /// behind the others (its retries waited longer) leaves the run's end to fewer writers, which
    /// `commits_per_s` counts and this does not.
    pub all_writing_per_s: f64,
    /// The last writer's finishing time over the first's: 1.0 when all finish together.
    pub finish_spread: f64,
    /// Retry verdicts handed back to the writer (which re-read and re-staged), per commit.
    pub reexecutions_per_commit: f64,
    /// Our loop's attempts after the first, per commit (`None` for Lance: it does not report them).
    pub retries_per_commit: Option<f64>,
    /// Manifest puts the store answered with a conflict, per commit, for every way
    /// ([`CountingPuts`]): what each way loses to the others, where `retries_per_commit` also counts
    /// attempts that stopped before the put.
    pub lost_puts_per_commit: f64,
    /// Our judgements at the write (`commit::AtWriteReport`) in the commits that landed, and their
    /// mean time in microseconds: time inside the window between Lance's listing and its manifest
    /// put (`None` for Lance). A judgement that refused before reporting (Lance changed our
    /// transaction) is not counted, nor are those of a commit refused with Retry.
    pub at_write: Option<(usize, f64)>,
    /// The mean wall time of one commit call per commit, in microseconds (ours: `execute`; Lance's:
    /// `CommitBuilder::execute`, its retries inside), re-executed calls included.
    pub commit_call_us: f64,
    /// The mean wall time per commit of a writer's work before its commit call: opening the table
    /// and staging the write (re-stagings included), in microseconds. The same code for every way:
    /// where it differs, the ways' commits slow the writers' other work.
    pub open_and_stage_us: f64,
    /// The process's CPU time (user and system, every thread) over the run, per commit, in
    /// microseconds ([`process_cpu`]); `None` where it cannot be read. On a machine with as many
    /// cores as writers, a commit that costs more CPU leaves less for the other writers.
    pub cpu_us: Option<f64>,
    /// Ours: of the commit calls, the mean time per commit inside Lance's commit path
    /// ([`crate::CommitReport::in_lance`]), our own ([`crate::CommitReport::own_time`]) and the
    /// waits between attempts, in microseconds, re-executed calls included. What is left of the
    /// call is outside our loop (building the commit, returning). `None` for Lance.
    pub split_us: Option<Split>,
}

const ROWS_PER_FRAGMENT: i64 = 64;
/// Bounds of a run: writer `w`'s new ids start at `10_000_000 + w * 100_000`, so a writer commits
/// fewer than 100,000 rows and the shared fragment's ids (`1_000_000 + w * K + k`) stay below them.
const MAX_WRITERS: i64 = 1_000;
const MAX_COMMITS: i64 = 9_000;
const SHARED_BASE: i64 = 1_000_000;
/// The ids of the one-row fragments a table of many fragments starts with, above every writer's.
const FILLER_BASE: i64 = 200_000_000;
/// At most this many extra fragments: a larger table is not a commit benchmark's to write.
pub const MAX_EXTRA_FRAGMENTS: usize = 100_000;

/// Create the workload's table at `uri` for `writers` writers of `commits` commits each, and then
/// `extra` one-row fragments no writer touches, written at once: a table of many fragments, whose
/// manifest every commit reads and writes whole.
pub async fn create(uri: &str, writers: i64, commits: i64, extra: usize) -> BenchResult<Arc<Dataset>> {
    if extra > MAX_EXTRA_FRAGMENTS {
        return Err(BenchError::Setup {
            what: format!("extra fragments ({extra}) must be at most {MAX_EXTRA_FRAGMENTS}"),
        });
    }
    let own: Vec<i64> = (0..writers * ROWS_PER_FRAGMENT).collect();
    let shared: Vec<i64> = (0..writers * commits).map(|i| SHARED_BASE + i).collect();
    // Storage options registered for the prefix (the CLI's `--storage-option`) reach every open.
    let params = WriteParams {
        max_rows_per_file: ROWS_PER_FRAGMENT as usize,
        ..crate::storage::write_params(uri, WriteMode::Create)
    };
    let ds = InsertBuilder::new(uri)
        .with_params(&params)
        .execute(vec![batch(&own)?])
        .await
        .map_err(lance_err("creating the bench table"))?;
    let ds = InsertBuilder::new(Arc::new(ds))
        .with_params(&WriteParams { mode: WriteMode::Append, max_rows_per_file: 1 << 20, ..Default::default() })
        .execute(vec![batch(&shared)?])
        .await
        .map_err(lance_err("writing the shared fragment"))?;
    if extra == 0 {
        return Ok(Arc::new(ds));
    }
    let filler: Vec<i64> = (0..extra as i64).map(|i| FILLER_BASE + i).collect();
    let ds = InsertBuilder::new(Arc::new(ds))
        .with_params(&WriteParams { mode: WriteMode::Append, max_rows_per_file: 1, ..Default::default() })
        .execute(vec![batch(&filler)?])
        .await
        .map_err(lance_err("writing the extra fragments"))?;
    Ok(Arc::new(ds))
}

/// A staged write: a transaction and the rows Lance reported it deleted, or a delete staged by
/// `stage_delete` (the same `DeleteBuilder` run), which our way commits with `execute_delete`.
enum Staged {
    Write { txn: Transaction, rows: Option<RowAddrTreeMap> },
    Delete(StagedDelete),
}

impl Staged {
    /// The transaction and rows, as Lance's `CommitBuilder` takes them.
    fn into_parts(self) -> (Transaction, Option<RowAddrTreeMap>) {
        match self {
            Staged::Write { txn, rows } => (txn, rows),
            Staged::Delete(d) => (d.transaction().clone(), d.affected_rows().cloned()),
        }
    }
}

/// A fresh id for writer `w`'s `k`-th new row, disjoint from every other writer's.
fn new_id(w: i64, k: i64) -> i64 {
    10_000_000 + w * 100_000 + k
}

async fn stage_append(ds: &Arc<Dataset>, id: i64) -> BenchResult<Staged> {
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[id])?])
        .await
        .map_err(lance_err("staging an append"))?;
    Ok(Staged::Write { txn, rows: None })
}

async fn stage_delete(ds: &Arc<Dataset>, id: i64) -> BenchResult<Staged> {
    Ok(Staged::Delete(
        crate::stage_delete(ds, &format!("id = {id}"))
            .await
            .map_err(|e| BenchError::Setup { what: format!("staging a delete: {e}") })?,
    ))
}

async fn stage_upsert(ds: &Arc<Dataset>, present: i64, new: i64) -> BenchResult<Staged> {
    let mut builder =
        MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).map_err(lance_err("building an upsert"))?;
    builder.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll);
    let job = builder.try_build().map_err(lance_err("building an upsert"))?;
    let staged =
        job.execute_uncommitted_batches(vec![batch(&[present, new])?]).await.map_err(lance_err("staging an upsert"))?;
    Ok(Staged::Write { txn: staged.transaction, rows: staged.affected_rows })
}

async fn stage_index(ds: &Arc<Dataset>, w: i64) -> BenchResult<Staged> {
    let txn = crate::scenario::stage_btree_index(ds, "v", &format!("v_idx_{w}")).await?;
    Ok(Staged::Write { txn, rows: None })
}

/// Writer `w`'s `k`-th write of `workload`, staged on `ds`.
async fn stage(ds: &Arc<Dataset>, workload: Workload, w: i64, k: i64, commits: i64) -> BenchResult<Staged> {
    match workload {
        Workload::Append => stage_append(ds, new_id(w, k)).await,
        Workload::DeleteDisjoint => stage_delete(ds, w * ROWS_PER_FRAGMENT + k % ROWS_PER_FRAGMENT).await,
        Workload::DeleteRows => stage_delete(ds, SHARED_BASE + w * commits + k).await,
        Workload::Upsert => stage_upsert(ds, w * ROWS_PER_FRAGMENT + k % ROWS_PER_FRAGMENT, new_id(w, k)).await,
        Workload::AppendWithIndex if k % 5 == 4 => stage_index(ds, w).await,
        Workload::AppendWithIndex => stage_append(ds, new_id(w, k)).await,
    }
}

/// How one commit attempt of a writer ended.
enum Landed {
    Yes {
        retries: usize,
        /// Judgements at the write, and their time.
        at_write: (usize, Duration),
        /// Ours: the call's time split ([`CallSplit::of`]).
        split: CallSplit,
    },
    /// A Retry verdict (or Lance's conflict error): re-read and re-stage.
    Reexecute { split: CallSplit },
}

async fn commit_once(
    ds: &Arc<Dataset>,
    way: Way,
    workload: Workload,
    w: i64,
    staged: Staged,
    puts: &Arc<CountingPuts>,
) -> BenchResult<Landed> {
    match way {
        Way::Ours => {
            let c = ds.action_commit().with_commit_handler(puts.clone()).with_max_attempts(100);
            let committed = match staged {
                Staged::Delete(d) => c.execute_delete(d).await,
                Staged::Write { txn, rows: Some(rows) } => c.with_affected_rows(rows).execute(txn).await,
                Staged::Write { txn, rows: None } => c.execute(txn).await,
            };
            match committed {
                Ok((_, report)) => {
                    let judged = report.attempts.iter().filter_map(|a| a.at_write.as_ref());
                    let at_write = judged.fold((0, Duration::ZERO), |(n, t), j| (n + 1, t + j.judging));
                    let split = CallSplit::of(&report);
                    Ok(Landed::Yes { retries: report.attempts.len().saturating_sub(1), at_write, split })
                }
                Err(CommitError::Retry { report, .. }) => Ok(Landed::Reexecute { split: CallSplit::of(&report) }),
                Err(e) => Err(BenchError::Ours { writer: w, source: Box::new(e) }),
            }
        }
        Way::Lance | Way::LanceAffectedRows | Way::LanceWithCost { .. } => {
            let mut c = CommitBuilder::new(ds.clone()).with_commit_handler(puts.clone());
            let (txn, rows) = staged.into_parts();
            let lance_way = match way {
                Way::LanceWithCost { us } => {
                    busy_for(Duration::from_micros(us.into()));
                    workload.compared_lance_way()
                }
                other => other,
            };
            if let (Way::LanceAffectedRows, Some(rows)) = (lance_way, rows) {
                c = c.with_affected_rows(rows);
            }
            match c.execute(txn).await {
                Ok(_) => Ok(Landed::Yes { retries: 0, at_write: (0, Duration::ZERO), split: CallSplit::default() }),
                Err(
                    lance::Error::RetryableCommitConflict { .. }
                    | lance::Error::CommitConflict { .. }
                    | lance::Error::TooMuchWriteContention { .. },
                ) => Ok(Landed::Reexecute { split: CallSplit::default() }),
                Err(e) => Err(lance_err("lance's commit")(e)),
            }
        }
    }
}

/// Busy work on this thread for `time`: a cost a commit layer adds (the spin keeps a core, as
/// computing does).
fn busy_for(time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// One commit call's time, split as its report splits it (zero for Lance's calls).
#[derive(Debug, Clone, Copy, Default)]
struct CallSplit {
    in_lance: Duration,
    own: Duration,
    waited: Duration,
}

impl CallSplit {
    fn of(report: &crate::CommitReport) -> Self {
        Self { in_lance: report.in_lance(), own: report.own_time(), waited: report.waited }
    }

    fn add(&mut self, other: CallSplit) {
        self.in_lance += other.in_lance;
        self.own += other.own;
        self.waited += other.waited;
    }
}

/// Totals of one writer.
#[derive(Default)]
struct WriterTotals {
    reexecutions: usize,
    retries: usize,
    judged_at_write: usize,
    judging: Duration,
    /// Commit calls, landed or re-executed.
    calls: Duration,
    /// Opening the table and staging, before each commit call.
    staging: Duration,
    split: CallSplit,
    /// When each of this writer's commits landed.
    landed: Vec<Instant>,
}

/// One writer: `commits` logical writes, each re-staged on a Retry.
async fn writer(
    uri: String,
    way: Way,
    workload: Workload,
    w: i64,
    commits: i64,
    puts: Arc<CountingPuts>,
) -> BenchResult<WriterTotals> {
    let mut totals = WriterTotals::default();
    for k in 0..commits {
        loop {
            let staging = Instant::now();
            let ds = Arc::new(crate::storage::open(&uri).await.map_err(lance_err("opening the bench table"))?);
            let staged = stage(&ds, workload, w, k, commits).await?;
            totals.staging += staging.elapsed();
            let call = Instant::now();
            let landed = commit_once(&ds, way, workload, w, staged, &puts).await?;
            totals.calls += call.elapsed();
            match landed {
                Landed::Yes { retries, at_write, split } => {
                    totals.retries += retries;
                    totals.judged_at_write += at_write.0;
                    totals.judging += at_write.1;
                    totals.split.add(split);
                    totals.landed.push(Instant::now());
                    break;
                }
                Landed::Reexecute { split } => {
                    totals.reexecutions += 1;
                    totals.split.add(split);
                }
            }
        }
    }
    Ok(totals)
}

/// Create the table at `uri` ([`create`], with `extra` more fragments), then time `writers`
/// concurrent writers of `commits` commits each.
pub async fn run(
    uri: &str,
    way: Way,
    workload: Workload,
    writers: i64,
    commits: i64,
    extra: usize,
) -> BenchResult<Throughput> {
    if writers < 1 || commits < 1 {
        return Err(BenchError::Setup { what: format!("writers ({writers}) and ops ({commits}) must be at least 1") });
    }
    if writers > MAX_WRITERS || commits > MAX_COMMITS {
        return Err(BenchError::Setup {
            what: format!(
                "writers ({writers}) and ops ({commits}) must be at most {MAX_WRITERS} and {MAX_COMMITS}: ids are laid out per writer and commit"
            ),
        });
    }
    if workload == Workload::DeleteDisjoint && commits > ROWS_PER_FRAGMENT {
        return Err(BenchError::Setup {
            what: format!(
                "delete-disjoint deletes rows of each writer's own {ROWS_PER_FRAGMENT}-row fragment: at most {ROWS_PER_FRAGMENT} ops"
            ),
        });
    }
    create(uri, writers, commits, extra).await?;
    let puts = CountingPuts::for_uri(uri).await?;
    let cpu_before = process_cpu();
    let start = Instant::now();
    let handles: Vec<_> =
        (0..writers).map(|w| tokio::spawn(writer(uri.to_string(), way, workload, w, commits, puts.clone()))).collect();
    let mut totals = WriterTotals::default();
    let mut landed = Vec::with_capacity(handles.len());
    for h in handles {
        let t = h.await.map_err(|e| BenchError::Setup { what: format!("a writer task ended abnormally: {e}") })??;
        totals.reexecutions += t.reexecutions;
        totals.retries += t.retries;
        totals.judged_at_write += t.judged_at_write;
        totals.judging += t.judging;
        totals.calls += t.calls;
        totals.staging += t.staging;
        totals.split.add(t.split);
        landed.push(t.landed);
    }
    let cpu = process_cpu().zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
    let (all_writing_per_s, finish_spread) = steady_rate(start, &landed);
    let judging_us = totals.judging.as_secs_f64() * 1e6 / totals.judged_at_write.max(1) as f64;
    let total = (writers * commits) as f64;
    let per_commit_us = |d: Duration| d.as_secs_f64() * 1e6 / total;
    Ok(Throughput {
        commits_per_s: total / start.elapsed().as_secs_f64(),
        all_writing_per_s,
        finish_spread,
        reexecutions_per_commit: totals.reexecutions as f64 / total,
        retries_per_commit: (way == Way::Ours).then_some(totals.retries as f64 / total),
        lost_puts_per_commit: puts.lost() as f64 / total,
        at_write: (way == Way::Ours).then_some((totals.judged_at_write, judging_us)),
        commit_call_us: per_commit_us(totals.calls),
        open_and_stage_us: per_commit_us(totals.staging),
        cpu_us: cpu.map(per_commit_us),
        split_us: (way == Way::Ours).then(|| Split {
            in_lance: per_commit_us(totals.split.in_lance),
            own: per_commit_us(totals.split.own),
            waited: per_commit_us(totals.split.waited),
        }),
    })
}

/// The CPU time this process has used so far, user and system, over every thread (ended ones
/// too): `getrusage(RUSAGE_SELF)`. `None` off Unix or when the call fails.
fn process_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        // SAFETY: `getrusage` writes only into the zeroed struct it is handed.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return None;
        }
        let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000));
        Some(time(usage.ru_utime) + time(usage.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// From each writer's landing times (the run began at `start`): the commits per second while every
/// writer was still writing (up to the first writer's last landing), and the last writer's
/// finishing time over the first's.
/// A writer that landed nothing (or a run timed at zero) gives no rate and a spread of 1. The
/// window ends at one of the first writer's landings, so the other writers' commits then in
/// progress are left out (about half a commit each): both ways alike.
fn steady_rate(start: Instant, landed: &[Vec<Instant>]) -> (f64, f64) {
    let Some(finishes) = landed.iter().map(|l| l.last().map(|t| t.duration_since(start))).collect::<Option<Vec<_>>>()
    else {
        return (0.0, 1.0);
    };
    let (Some(first), Some(last)) = (finishes.iter().min(), finishes.iter().max()) else { return (0.0, 1.0) };
    if first.is_zero() {
        return (0.0, 1.0);
    }
    let within = landed.iter().flatten().filter(|t| t.duration_since(start) <= *first).count();
    (within as f64 / first.as_secs_f64(), last.as_secs_f64() / first.as_secs_f64())
}

/// Each of `ways`' runs (in that order), measured in rounds: round `r` runs every way once, in the
/// order of `ways` rotated by `r`, each on a fresh table under `dir` that is removed after its run
/// (on any store).
///
/// Rounds, because order matters on a busy machine: run one way's repeats after the other's, the
/// way run second was measured on a machine still writing back the first way's files, and each
/// way's figures fell run after run. On this 2-core machine, ours run second measured 0.95x Lance's
/// on average over the four writer counts, and run first 1.01x (`design/benchmarks.md`, "Run in
/// rounds"). Rounds also pair the ways' runs, which [`Comparison::ratio`] uses. The tables start
/// with `extra` more fragments ([`create`]).
pub async fn compare(
    dir: &str,
    ways: &[Way],
    workload: Workload,
    writers: i64,
    commits: i64,
    repeats: usize,
    extra: usize,
) -> BenchResult<Comparison> {
    let repeats = repeats.max(1);
    let mut runs: Vec<Vec<Throughput>> = vec![Vec::new(); ways.len()];
    for round in 0..repeats {
        for i in round_order(round, ways.len()) {
            let uri = format!("{dir}/{}-{}-{writers}-{round}", workload.name(), ways[i].name());
            let measured = run(&uri, ways[i], workload, writers, commits, extra).await;
            // The table goes whether or not the run completed; the run's error comes first.
            let removed = super::remove_tables(&uri).await;
            runs[i].push(measured?);
            removed?;
        }
    }
    Ok(Comparison { runs })
}

/// Every run of each way of a [`compare`], round by round.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// `runs[way][round]`, ways in the order given to [`compare`]; at least one round (private, so
    /// only [`compare`] makes one).
    runs: Vec<Vec<Throughput>>,
}

impl Comparison {
    /// Each way's run of median throughput (single runs on a shared machine vary by tens of
    /// percent): one run's figures, so its retries and re-executions go with its throughput.
    pub fn medians(&self) -> Vec<Throughput> {
        self.runs.iter().map(|runs| median_throughput(runs.clone())).collect()
    }

    /// Throughput of way `ours` over way `theirs`, round by round: the median ratio and its
    /// interval ([`stats::paired_ratio`]). `None` for a way out of range.
    pub fn ratio(&self, ours: usize, theirs: usize) -> Option<RatioEstimate> {
        self.ratio_of(ours, theirs, |t| t.commits_per_s)
    }

    /// The same for the commits landed while every writer was writing
    /// ([`Throughput::all_writing_per_s`]).
    pub fn all_writing_ratio(&self, ours: usize, theirs: usize) -> Option<RatioEstimate> {
        self.ratio_of(ours, theirs, |t| t.all_writing_per_s)
    }

    fn ratio_of(&self, ours: usize, theirs: usize, figure: fn(&Throughput) -> f64) -> Option<RatioEstimate> {
        let figures = |way: usize| -> Option<Vec<f64>> { Some(self.runs.get(way)?.iter().map(figure).collect()) };
        stats::paired_ratio(&figures(ours)?, &figures(theirs)?)
    }
}

/// The order in which round `round` runs `count` ways (indices): rotated by the round, so over
/// `count` rounds each way runs first once and none always runs right after the same other.
pub fn round_order(round: usize, count: usize) -> impl Iterator<Item = usize> {
    (0..count).map(move |k| (round + k) % count)
}

/// The run of median throughput (single runs on a shared machine vary by tens of percent).
fn median_throughput(mut runs: Vec<Throughput>) -> Throughput {
    debug_assert!(!runs.is_empty(), "compare makes at least one run per way");
    runs.sort_by(|a, b| a.commits_per_s.total_cmp(&b.commits_per_s));
    runs[runs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, millis: &[u64]) -> Vec<Instant> {
        millis.iter().map(|m| start + Duration::from_millis(*m)).collect()
    }

    #[test]
    fn writers_finishing_together_count_every_commit_and_spread_one() {
        let start = Instant::now();
        let landed = [at(start, &[10, 20, 30, 40]), at(start, &[15, 25, 35, 40])];
        let (rate, spread) = steady_rate(start, &landed);
        assert!((rate - 8.0 / 0.040).abs() < 1e-6, "8 commits in 40 ms: {rate}");
        assert!((spread - 1.0).abs() < 1e-9, "{spread}");
    }

    #[test]
    fn a_writer_left_alone_at_the_end_is_not_counted_after_the_first_finished() {
        let start = Instant::now();
        // The first writer lands its last commit at 20 ms; the other goes on alone until 80 ms.
        let landed = [at(start, &[10, 20]), at(start, &[15, 40, 60, 80])];
        let (rate, spread) = steady_rate(start, &landed);
        assert!((rate - 3.0 / 0.020).abs() < 1e-6, "3 commits landed by 20 ms: {rate}");
        assert!((spread - 4.0).abs() < 1e-9, "80 ms over 20 ms: {spread}");
    }

    #[test]
    fn no_commit_at_all_or_a_writer_without_one_is_no_rate() {
        let start = Instant::now();
        assert_eq!(steady_rate(start, &[vec![], vec![]]), (0.0, 1.0));
        assert_eq!(steady_rate(start, &[at(start, &[10]), vec![]]), (0.0, 1.0), "one writer never wrote");
        assert_eq!(steady_rate(start, &[at(start, &[0])]), (0.0, 1.0), "no time passed");
    }
}
