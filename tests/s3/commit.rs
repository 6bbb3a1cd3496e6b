//! The commit loop on S3: 4 OS processes x 50 mixed commits through our driver on one table in one
//! bucket: appends, deletes of disjoint rows of shared fragments, overlapping deletes of contested
//! rows, and keyed upserts. A full scan must equal the model built from the commits that landed,
//! every version must decode, and every Retry/Fail must blame a path its peer really wrote.
//! Seeded (`LA_SEED`, default 7); `LA_COMMITS` sets commits per writer (50).
//!
//! Writer 0 also runs Lance's own compaction (a foreign writer, committed by Lance) after every
//! tenth commit of its own, racing the others' deletes and upserts. Besides that coverage it keeps
//! the run's cost linear: every delete and upsert stages by scanning the table, and without
//! compaction each append and upsert leaves one more small fragment for every later scan to fetch
//! from moto (a single Python process all writers wait on; about 5 ms a request).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::Transaction;
use lance::dataset::{
    DeleteBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance::session::Session;
use lance_actions_commit::history::actions_of;
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_select::RowAddrTreeMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Ctx;
use crate::support::{rows, run_children, scan};

const WRITERS: i64 = 4;
const BASE_ROWS: i64 = 128;
const CONTESTED: std::ops::Range<i64> = 10_000..10_016;
/// Writer 0 compacts after every this many commits of its own.
const COMPACT_EVERY: usize = 10;

fn commits_per_writer() -> usize {
    std::env::var("LA_COMMITS").ok().and_then(|v| v.parse().ok()).unwrap_or(50)
}

fn seed() -> u64 {
    std::env::var("LA_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(7)
}

pub async fn four_processes_commit_mixed_writes_on_s3_without_losing_or_resurrecting_rows(cx: &Ctx<'_>) {
    let uri = cx.uri("mixed");
    let base: Vec<(i64, i64)> = (0..BASE_ROWS).chain(CONTESTED).map(|id| (id, id * 10)).collect();
    let params = WriteParams { mode: WriteMode::Create, max_rows_per_file: 16, ..Default::default() };
    InsertBuilder::new(uri.as_str()).with_params(&params).execute(vec![rows(&base)]).await.expect("create on S3");
    let dir = tempfile::tempdir().expect("tempdir for reports");
    let argv = (0..WRITERS)
        .map(|w| vec![dir.path().join(format!("w{w}")).display().to_string(), uri.clone(), w.to_string()])
        .collect();
    let logs: Vec<Log> = run_children("commit-writer", argv).iter().map(|r| Log::parse(r)).collect();
    let commits: usize = logs.iter().map(|l| l.commits).sum();
    let verdicts: usize = logs.iter().map(|l| l.blamed.len()).sum();
    let compactions: usize = logs.iter().map(|l| l.compactions).sum();
    println!(
        "    S3, 4 processes (seed {}): {commits} commits landed, {verdicts} retry/fail verdicts re-checked, {compactions} compactions by Lance",
        seed()
    );
    assert!(
        logs.iter().all(|l| l.commits >= commits_per_writer() * 9 / 10),
        "writers starved: {:?}",
        logs.iter().map(|l| l.commits).collect::<Vec<_>>()
    );
    assert!(verdicts > 0, "no writer met a Retry or Fail verdict: the run proved nothing about conflicts");
    verify(&uri, &base, &logs).await;
}

/// What one writer did, from the commits that landed.
#[derive(Debug, Default)]
struct Log {
    /// The writer's own rows that are live at its end, with their last value.
    live: BTreeMap<i64, i64>,
    deleted: BTreeSet<i64>,
    commits: usize,
    /// Lance compactions that landed (writer 0 only).
    compactions: usize,
    blamed: Vec<(u64, String)>,
    /// Each commit reported landed: the version it was reported at, and its transaction uuid.
    landed: Vec<(u64, String)>,
}

impl Log {
    fn render(&self) -> String {
        let live: Vec<String> = self.live.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let deleted: Vec<String> = self.deleted.iter().map(|k| k.to_string()).collect();
        let landed: Vec<String> = self.landed.iter().map(|(v, u)| format!("{v}:{u}")).collect();
        let mut out = format!(
            "{}\n{}\n{}\n{}\n{}\n",
            live.join(","),
            deleted.join(","),
            self.commits,
            self.compactions,
            landed.join(",")
        );
        for (v, path) in &self.blamed {
            out.push_str(&format!("{v}\t{path}\n"));
        }
        out
    }

    fn parse(text: &str) -> Log {
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 5, "a writer's report is cut short: {text:?}");
        let items = |l: &str| l.split(',').filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
        Log {
            live: items(lines[0])
                .iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("id=value");
                    (k.parse().expect("id"), v.parse().expect("value"))
                })
                .collect(),
            deleted: items(lines[1]).iter().map(|k| k.parse().expect("id")).collect(),
            commits: lines[2].parse().expect("commit count"),
            compactions: lines[3].parse().expect("compaction count"),
            landed: items(lines[4])
                .iter()
                .map(|vu| {
                    let (v, u) = vu.split_once(':').expect("version:uuid");
                    (v.parse().expect("version"), u.to_string())
                })
                .collect(),
            blamed: lines[5..]
                .iter()
                .filter_map(|l| l.split_once('\t'))
                .map(|(v, p)| (v.parse().expect("version"), p.to_string()))
                .collect(),
        }
    }
}

enum Op {
    Append(Vec<(i64, i64)>),
    Delete(i64),
    Upsert(i64, i64),
}

/// Child entry point: `<report> <uri> <writer>`. Writer `w` owns base rows with `id % 4 == w` and
/// the ids `(w + 1) * 1_000_000 + k` it appends; contested rows may be deleted by anyone.
pub async fn child(args: &[String]) -> String {
    let (uri, w) = (&args[1], args[2].parse::<i64>().expect("writer id"));
    let mut rng = StdRng::seed_from_u64(seed() ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut log = Log::default();
    let mut own_base: Vec<i64> = (0..BASE_ROWS).filter(|i| i % WRITERS == w).collect();
    let mut next = (w + 1) * 1_000_000;
    // One Lance session per writer process, as an application holds one: its caches (file
    // footers, deletion vectors, manifests, keyed by immutable paths) spare moto, a single Python
    // process that every writer waits on, most of the requests a fresh open would repeat.
    let session = Arc::new(Session::default());
    for n in 0..commits_per_writer() {
        let own: Vec<i64> = log.live.keys().copied().collect();
        let op = match rng.random_range(0..100) {
            0..20 if !own_base.is_empty() => Op::Delete(own_base.swap_remove(rng.random_range(0..own_base.len()))),
            20..32 => Op::Delete(rng.random_range(CONTESTED)),
            32..52 if !own.is_empty() => Op::Upsert(own[rng.random_range(0..own.len())], n as i64),
            52..60 if !own.is_empty() => Op::Delete(own[rng.random_range(0..own.len())]),
            _ => {
                next += 2;
                Op::Append(vec![(next - 2, 0), (next - 1, 0)])
            }
        };
        let landed = run_op(uri, &session, &op, &mut log).await;
        match (op, landed) {
            (Op::Append(new), true) => log.live.extend(new),
            (Op::Upsert(id, v), true) => {
                log.live.insert(id, v);
            }
            (Op::Delete(id), true) => {
                log.deleted.insert(id);
                log.live.remove(&id);
            }
            (Op::Delete(id), false) if id < BASE_ROWS => own_base.push(id),
            _ => {}
        }
        if w == 0 && (n + 1) % COMPACT_EVERY == 0 {
            log.compactions += usize::from(compact(uri, &session).await);
        }
    }
    log.render()
}

/// Lance's own compaction of the head, committed by Lance (a foreign writer to our driver); whether
/// it landed. It may lose to the others' concurrent deletes: then it is tried again from the head.
async fn compact(uri: &str, session: &Arc<Session>) -> bool {
    for _ in 0..3 {
        let ds = DatasetBuilder::from_uri(uri).with_session(session.clone()).load().await;
        let mut ds = ds.expect("open the head on S3");
        let options = CompactionOptions { target_rows_per_fragment: 64, ..Default::default() };
        if compact_files(&mut ds, options, None).await.is_ok() {
            return true;
        }
    }
    false
}

/// Stage `op` on the head and commit it through our driver, re-staging on Retry. Whether it landed.
async fn run_op(uri: &str, session: &Arc<Session>, op: &Op, log: &mut Log) -> bool {
    for _ in 0..50 {
        let ds = DatasetBuilder::from_uri(uri).with_session(session.clone()).load().await;
        let ds = Arc::new(ds.expect("open the head on S3"));
        let (txn, affected) = stage(&ds, op).await;
        let uuid = txn.uuid.clone();
        let mut commit = ds.action_commit().with_max_attempts(50);
        if let Some(rows) = affected {
            commit = commit.with_affected_rows(rows);
        }
        match commit.execute(txn).await {
            Ok((_, report)) => {
                log.commits += 1;
                log.landed.push((report.version, uuid));
                return true;
            }
            Err(CommitError::Retry { reason, .. }) => blame(log, &reason),
            Err(CommitError::RetriesExhausted { .. }) => {}
            Err(CommitError::Fail { reason, .. }) => {
                blame(log, &reason);
                return false;
            }
            Err(e) => panic!("unexpected commit error on S3: {e}"),
        }
    }
    false
}

fn blame(log: &mut Log, reason: &lance_actions::Reason) {
    if let (Some(v), Some(path)) = (reason.peer_version, &reason.path) {
        log.blamed.push((v, path.to_string()));
    }
}

async fn stage(ds: &Arc<Dataset>, op: &Op) -> (Transaction, Option<RowAddrTreeMap>) {
    match op {
        Op::Append(new) => {
            let params = WriteParams { mode: WriteMode::Append, max_rows_per_file: 16, ..Default::default() };
            let txn = InsertBuilder::new(ds.clone())
                .with_params(&params)
                .execute_uncommitted(vec![rows(new)])
                .await
                .expect("stage an append");
            (txn, None)
        }
        Op::Delete(id) => {
            let staged = DeleteBuilder::new(ds.clone(), format!("id = {id}"))
                .execute_uncommitted()
                .await
                .expect("stage a delete");
            (staged.transaction, staged.affected_rows)
        }
        Op::Upsert(id, v) => {
            let mut b = MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).expect("merge insert");
            b.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
            let staged = b
                .try_build()
                .expect("build the upsert")
                .execute_uncommitted_batches(vec![rows(&[(*id, *v)])])
                .await
                .expect("stage an upsert");
            (staged.transaction, staged.affected_rows)
        }
    }
}

async fn verify(uri: &str, base: &[(i64, i64)], logs: &[Log]) {
    let ds = Dataset::open(uri).await.expect("open the head");
    // Every version's transaction, read once for the checks below.
    let mut history = BTreeMap::new();
    for v in 1..=ds.manifest().version {
        let txn = ds.read_transaction_by_version(v).await.expect("read a transaction").expect("a transaction");
        history.insert(v, txn);
    }
    // Every commit reported landed is in the history, once, at the version reported: the history
    // is what a lost or doubled landing would show first, before any scan.
    for (w, log) in logs.iter().enumerate() {
        for (v, uuid) in &log.landed {
            let at: Vec<u64> = history.iter().filter(|(_, t)| &t.uuid == uuid).map(|(v, _)| *v).collect();
            let around: Vec<_> = history
                .range(v.saturating_sub(3)..=v + 3)
                .map(|(v, t)| (v, &t.uuid, t.operation.name(), t.read_version))
                .collect();
            assert_eq!(
                at,
                [*v],
                "writer {w}'s commit {uuid}, reported landed at v{v}, is in the history at {at:?}; history around it: {around:?}"
            );
        }
    }
    let (found, total) = scan(&ds).await;
    assert_eq!(total, found.len(), "duplicate rows on S3");
    let mut expected: BTreeMap<i64, i64> = base.iter().copied().collect();
    for log in logs {
        for id in &log.deleted {
            expected.remove(id);
        }
        expected.extend(&log.live);
    }
    let lost: Vec<_> = expected.iter().filter(|(k, v)| found.get(k) != Some(v)).take(10).collect();
    let extra: Vec<_> = found.keys().filter(|k| !expected.contains_key(k)).take(10).collect();
    assert!(lost.is_empty() && extra.is_empty(), "lost or wrong rows {lost:?}, resurrected rows {extra:?}");
    for (v, txn) in &history {
        actions_of(txn).unwrap_or_else(|e| panic!("version {v}'s actions do not decode: {e}"));
    }
    for (v, path) in logs.iter().flat_map(|l| l.blamed.iter()) {
        let txn = history.get(v).expect("the blamed peer is in the history");
        let wrote = actions_of(txn).expect("peer decodes").writes().iter().any(|p| &p.to_string() == path);
        assert!(wrote, "a verdict blamed v{v} for writing {path}, which it did not");
    }
}
