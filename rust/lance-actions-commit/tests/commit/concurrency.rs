//! Real concurrent writers on one dataset: 8 threads committing 30 times each, and separately 4 OS
//! processes committing 50 times each, through the action driver, mixing keyed inserts, upserts, deletes on disjoint
//! fragments, on one fragment with disjoint rows and with overlapping rows, compaction, index
//! creation and config updates. Afterwards a full scan must equal a model built from what each
//! successful commit did, every version must open and decode, and every Retry must point at a path
//! its peer really wrote.
//!
//! Seeded (`LA_SEED`, default 7) so a failure replays; `LA_COMMITS` sets commits per writer of both
//! runs. The thread run's 8 x 30 is dense enough: it must meet Retry or Fail verdicts and land every
//! operation kind (both asserted), and more commits only make every operation's staging scan longer
//! and raise the CPU the suite needs (8 x 50 took 49 to 102 s of CPU, by load, the whole suite's
//! budget being 8 core-minutes). The processes keep 50 each, as in the S3 run.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{
    DeleteBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance::session::Session;
use lance_actions::Reason;
use lance_actions_commit::history::actions_of;
use lance_actions_commit::scenario::{batch, stage_btree_index};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_table::transaction::{UpdateMap, UpdateMapEntry};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::scan_ids;

const BASE_ROWS: i64 = 256;
const CONTESTED: std::ops::Range<i64> = 10_000..10_016;
/// Writer 0 also runs Lance's compaction after every this many commits of its own (besides the
/// random `Op::Compact`). It keeps the run's cost linear: every insert, upsert and delete stages by
/// scanning the table, and each insert and upsert leaves one more small fragment for every later
/// scan to open, so with compaction only at random (4% of writer 0's ops) the cost of an operation
/// grew with the run.
const COMPACT_EVERY: usize = 10;

/// Commits per writer of the thread run and of the process run.
const THREAD_COMMITS: usize = 30;
const PROCESS_COMMITS: usize = 50;

fn commits_per_writer(default: usize) -> usize {
    std::env::var("LA_COMMITS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("LA_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(7)
}

/// What one writer did, from its successful commits only.
#[derive(Debug, Default)]
struct Log {
    inserted: BTreeSet<i64>,
    deleted: BTreeSet<i64>,
    commits: usize,
    retries: Vec<Reason>,
    fails: Vec<Reason>,
    /// (peer version, overlapping path as displayed) of every Retry/Fail, for `verify`.
    blamed: Vec<(u64, String)>,
    /// The kinds of operation that landed (a compaction: that Lance ran it).
    landed_kinds: BTreeSet<&'static str>,
}

async fn create_table(uri: &str) -> Arc<Dataset> {
    let mut ids: Vec<i64> = (0..BASE_ROWS).collect();
    ids.extend(CONTESTED);
    let params = WriteParams { mode: WriteMode::Create, max_rows_per_file: 32, ..Default::default() };
    Arc::new(
        InsertBuilder::new(uri).with_params(&params).execute(vec![batch(&ids).expect("batch")]).await.expect("create"),
    )
}

/// The head, read through `session`: each writer holds one, as an application does, so that file
/// footers and deletion vectors (immutable, cached by path) are not decoded again on every
/// attempt; the final audit reads through a fresh one.
async fn open_latest(uri: &str, session: &Arc<Session>) -> Arc<Dataset> {
    let ds = DatasetBuilder::from_uri(uri).with_session(session.clone()).load().await;
    Arc::new(ds.expect("open latest"))
}

/// The version `behind` versions before the head (the head itself when it is that young).
async fn open_at(uri: &str, session: &Arc<Session>, behind: u64) -> Arc<Dataset> {
    let latest = open_latest(uri, session).await;
    let head = latest.manifest().version;
    if behind == 0 || head <= behind {
        return latest;
    }
    Arc::new(latest.checkout_version(head - behind).await.expect("open an older version"))
}

enum Op {
    Insert(Vec<i64>),
    Upsert(i64),
    Delete(Vec<i64>),
    Config(String),
    Index,
    Compact,
}

impl Op {
    const KINDS: [&'static str; 6] = ["insert", "upsert", "delete", "config", "index", "compact"];

    fn kind(&self) -> &'static str {
        match self {
            Op::Insert(_) => "insert",
            Op::Upsert(_) => "upsert",
            Op::Delete(_) => "delete",
            Op::Config(_) => "config",
            Op::Index => "index",
            Op::Compact => "compact",
        }
    }
}

/// Stage `op` and commit it through the driver, re-executing from a fresh read on Retry. The first
/// attempt reads `stale` versions behind the head, so that the driver judges peers that landed
/// before the commit even began, not only the few that race its own staging; re-executions read
/// the head. Returns whether it landed.
async fn run_op(uri: &str, session: &Arc<Session>, op: &Op, stale: u64, log: &mut Log) -> bool {
    for attempt in 0..100 {
        let ds = open_at(uri, session, if attempt == 0 { stale } else { 0 }).await;
        let staged = match stage(&ds, op).await {
            Some(s) => s,
            None => return true, // done by Lance itself (compaction)
        };
        let mut commit = ds.action_commit().with_max_attempts(50);
        if let Some(rows) = staged.1 {
            commit = commit.with_affected_rows(rows);
        }
        match commit.execute(staged.0).await {
            Ok(_) => {
                log.commits += 1;
                return true;
            }
            Err(CommitError::Retry { reason, .. }) => {
                blame(log, &reason);
                log.retries.push(reason);
            }
            Err(CommitError::RetriesExhausted { .. }) => {}
            Err(CommitError::Fail { reason, .. }) => {
                blame(log, &reason);
                log.fails.push(reason);
                return false;
            }
            Err(e) => panic!("unexpected commit error: {e}"),
        }
    }
    false
}

fn blame(log: &mut Log, reason: &Reason) {
    if let (Some(v), Some(path)) = (reason.peer_version, &reason.path) {
        log.blamed.push((v, path.to_string()));
    }
}

async fn stage(
    ds: &Arc<Dataset>,
    op: &Op,
) -> Option<(lance::dataset::transaction::Transaction, Option<lance_select::RowAddrTreeMap>)> {
    match op {
        Op::Insert(_) | Op::Upsert(_) => {
            let ids = match op {
                Op::Insert(ids) => ids.clone(),
                Op::Upsert(id) => vec![*id],
                _ => Vec::new(),
            };
            let mut b = MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).expect("merge insert");
            let matched = if matches!(op, Op::Insert(_)) { WhenMatched::DoNothing } else { WhenMatched::UpdateAll };
            b.when_matched(matched).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
            let staged = b
                .try_build()
                .expect("build")
                .execute_uncommitted_batches(vec![batch(&ids).expect("batch")])
                .await
                .expect("stage");
            Some((staged.transaction, staged.affected_rows))
        }
        Op::Delete(ids) => {
            let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            let staged = DeleteBuilder::new(ds.clone(), format!("id IN ({})", list.join(", ")))
                .execute_uncommitted()
                .await
                .expect("stage delete");
            Some((staged.transaction, staged.affected_rows))
        }
        Op::Config(key) => {
            let op = Operation::UpdateConfig {
                config_updates: Some(UpdateMap {
                    update_entries: vec![UpdateMapEntry {
                        key: key.clone(),
                        value: Some(ds.manifest().version.to_string()),
                    }],
                    replace: false,
                }),
                table_metadata_updates: None,
                schema_metadata_updates: None,
                field_metadata_updates: HashMap::new(),
            };
            Some((TransactionBuilder::new(ds.manifest().version, op).build(), None))
        }
        Op::Index => Some((stage_btree_index(ds, "v", "v_idx").await.expect("stage index"), None)),
        Op::Compact => {
            // A foreign writer: Lance's own compaction, committed by Lance, not by our driver.
            let mut d = (**ds).clone();
            let options = CompactionOptions { target_rows_per_fragment: 64, ..Default::default() };
            let _ = compact_files(&mut d, options, None).await;
            None
        }
    }
}

/// One writer's run. Writer `w` owns base rows with `id % writers == w` and inserts ids
/// `(w + 1) * 1_000_000 + k`; contested ids may be deleted by anyone.
async fn writer(uri: String, w: i64, writers: i64, seed: u64, commits: usize) -> Log {
    let mut rng = StdRng::seed_from_u64(seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut log = Log::default();
    let mut own_base: Vec<i64> = (0..BASE_ROWS).filter(|i| i % writers == w).collect();
    let mut own_inserted: Vec<i64> = Vec::new();
    let mut next = (w + 1) * 1_000_000;
    let session = Arc::new(Session::default());
    for n in 0..commits {
        let roll = rng.random_range(0..100);
        let op = match roll {
            0..30 => {
                next += 2;
                Op::Insert(vec![next - 2, next - 1])
            }
            30..45 if !own_base.is_empty() => {
                Op::Delete(vec![own_base.swap_remove(rng.random_range(0..own_base.len()))])
            }
            45..55 if !own_inserted.is_empty() => {
                Op::Delete(vec![own_inserted.swap_remove(rng.random_range(0..own_inserted.len()))])
            }
            55..65 => Op::Delete(vec![rng.random_range(CONTESTED)]),
            65..80 if !own_inserted.is_empty() => Op::Upsert(own_inserted[rng.random_range(0..own_inserted.len())]),
            80..92 => Op::Config(format!("writer{w}")),
            92..96 => Op::Index,
            96..100 if w == 0 => Op::Compact,
            _ => Op::Config(format!("writer{w}")),
        };
        // Only config updates and deletes of rows that exist since v1 read stale: a stale read that
        // predates a row's insert sees no such row, so its delete or upsert would rightly do
        // something else than the model records (delete nothing; insert a second copy).
        let since_v1 = match &op {
            Op::Delete(ids) => ids.iter().all(|id| *id < 1_000_000),
            Op::Config(_) => true,
            _ => false,
        };
        let stale = if since_v1 { rng.random_range(0..4) } else { 0 };
        let landed = run_op(&uri, &session, &op, stale, &mut log).await;
        if landed {
            log.landed_kinds.insert(op.kind());
        }
        match (&op, landed) {
            (Op::Insert(ids), true) => {
                log.inserted.extend(ids);
                own_inserted.extend(ids);
            }
            (Op::Delete(ids), true) => log.deleted.extend(ids),
            (Op::Delete(ids), false) => {
                // Not deleted: the row stays ours to delete later (contested rows need no tracking).
                for id in ids {
                    if *id < BASE_ROWS {
                        own_base.push(*id);
                    } else if *id >= 1_000_000 {
                        own_inserted.push(*id);
                    }
                }
            }
            _ => {}
        }
        if w == 0 && (n + 1) % COMPACT_EVERY == 0 && run_op(&uri, &session, &Op::Compact, 0, &mut log).await {
            log.landed_kinds.insert(Op::Compact.kind());
        }
    }
    log
}

/// Full-scan and history checks shared by the thread and process runs.
async fn verify(uri: &str, logs: &[Log]) {
    let ds = open_latest(uri, &Arc::new(Session::default())).await;
    let (ids, total) = scan_ids(&ds).await;
    assert_eq!(total, ids.len(), "duplicate rows");
    println!("v{}: {} rows in {} fragments", ds.manifest().version, total, ds.get_fragments().len());
    let mut expected: BTreeSet<i64> = (0..BASE_ROWS).chain(CONTESTED).collect();
    for log in logs {
        expected.extend(&log.inserted);
    }
    for log in logs {
        for id in &log.deleted {
            expected.remove(id);
        }
    }
    let lost: Vec<_> = expected.difference(&ids).take(10).collect();
    let extra: Vec<_> = ids.difference(&expected).take(10).collect();
    assert!(lost.is_empty() && extra.is_empty(), "lost rows {lost:?}, resurrected or unexpected rows {extra:?}");
    for v in 1..=ds.manifest().version {
        let at = ds.checkout_version(v).await.unwrap_or_else(|e| panic!("version {v} does not open: {e}"));
        let txn = ds
            .read_transaction_by_version(v)
            .await
            .expect("read txn")
            .unwrap_or_else(|| panic!("version {v} has no transaction"));
        actions_of(&txn).unwrap_or_else(|e| panic!("version {v}'s actions do not decode: {e}"));
        drop(at);
    }
    for (v, path) in logs.iter().flat_map(|l| l.blamed.iter()) {
        let txn = ds.read_transaction_by_version(*v).await.expect("read").expect("peer txn");
        let peer = actions_of(&txn).expect("peer decodes");
        let wrote = peer.writes().iter().any(|p| &p.to_string() == path);
        assert!(wrote, "a verdict blamed v{v} for writing {path}, which it did not");
    }
}

/// A run where no verdict ever sent a writer back proved nothing about conflicts: fail it.
fn assert_contended(logs: &[Log]) {
    // `blamed` is what survives the trip back from a child process: one entry per Retry or Fail.
    let verdicts: usize = logs.iter().map(|l| l.blamed.len()).sum();
    assert!(verdicts > 0, "no writer met a Retry or Fail verdict: {}", summary(logs));
}

fn summary(logs: &[Log]) -> String {
    let commits: usize = logs.iter().map(|l| l.commits).sum();
    let retries: usize = logs.iter().map(|l| l.blamed.len()).sum();
    let fails: usize = logs.iter().map(|l| l.fails.len()).sum();
    format!(
        "{commits} commits through the driver, {retries} retry/fail verdicts (re-executed, each re-checked), {fails} fails"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_threads_commit_concurrently_without_losing_or_resurrecting_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    create_table(&uri).await;
    let writers = 8;
    let commits = commits_per_writer(THREAD_COMMITS);
    let handles: Vec<_> =
        (0..writers).map(|w| tokio::spawn(writer(uri.clone(), w, writers, seed(), commits))).collect();
    let mut logs = Vec::new();
    for h in handles {
        logs.push(h.await.expect("writer task"));
    }
    println!("threads (seed {}): {}", seed(), summary(&logs));
    assert!(logs.iter().all(|l| l.commits >= commits * 9 / 10), "writers starved: {}", summary(&logs));
    let landed: BTreeSet<&str> = logs.iter().flat_map(|l| l.landed_kinds.iter().copied()).collect();
    let missing: Vec<&str> = Op::KINDS.into_iter().filter(|k| !landed.contains(k)).collect();
    assert!(missing.is_empty(), "no {missing:?} landed: the run did not mix every operation kind");
    assert_contended(&logs);
    verify(&uri, &logs).await;
}

/// Entry point of a child process: runs one writer when spawned by the parent test, which runs it
/// explicitly (`--ignored --exact`); ignored so that the runner does not count it as a test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of four_processes_commit_concurrently_without_losing_or_resurrecting_rows"]
async fn process_writer_child() {
    let (Ok(uri), Ok(w), Ok(out)) =
        (std::env::var("LA_CHILD_URI"), std::env::var("LA_CHILD_WRITER"), std::env::var("LA_CHILD_OUT"))
    else {
        return;
    };
    let w: i64 = w.parse().expect("writer id");
    let log = writer(uri, w, 4, seed(), commits_per_writer(PROCESS_COMMITS)).await;
    let mut f = std::fs::File::create(out).expect("log file");
    let ids = |s: &BTreeSet<i64>| s.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    writeln!(f, "{}\n{}\n{}", ids(&log.inserted), ids(&log.deleted), log.commits).expect("write log");
    for (v, path) in &log.blamed {
        writeln!(f, "{v}\t{path}").expect("write log");
    }
}

fn parse_ids(line: &str) -> BTreeSet<i64> {
    line.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_commit_concurrently_without_losing_or_resurrecting_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    create_table(&uri).await;
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..4)
        .map(|w| {
            let out = dir.path().join(format!("writer{w}.log"));
            let child = std::process::Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "concurrency::process_writer_child",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("LA_CHILD_URI", &uri)
                .env("LA_CHILD_WRITER", w.to_string())
                .env("LA_CHILD_OUT", &out)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn writer process");
            (child, out)
        })
        .collect();
    let mut logs = Vec::new();
    for (mut child, out) in children {
        assert!(child.wait().expect("wait").success(), "a writer process failed");
        // No log means the child never ran its writer (a filter that matched nothing passes).
        let text = std::fs::read_to_string(&out)
            .unwrap_or_else(|e| panic!("writer process wrote no log at {}: {e}", out.display()));
        let lines: Vec<&str> = text.lines().collect();
        logs.push(Log {
            inserted: parse_ids(lines[0]),
            deleted: parse_ids(lines[1]),
            commits: lines[2].parse().expect("commits"),
            blamed: lines[3..]
                .iter()
                .filter_map(|l| l.split_once('\t'))
                .map(|(v, p)| (v.parse().expect("version"), p.to_string()))
                .collect(),
            ..Default::default()
        });
    }
    println!("processes (seed {}): {}", seed(), summary(&logs));
    let commits = commits_per_writer(PROCESS_COMMITS);
    assert!(logs.iter().all(|l| l.commits >= commits * 9 / 10), "writers starved: {}", summary(&logs));
    assert_contended(&logs);
    verify(&uri, &logs).await;
}
