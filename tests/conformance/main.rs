//! Differential conformance: our driver against Lance 14.0.2's own resolver (`TransactionRebase`),
//! on real datasets, for every pair of staged operations of all 17 kinds.
//!
//! For each (ours, peer) pair: copy the sample dataset (which holds every staged transaction's
//! files), commit the peer for real with Lance's `CommitBuilder`, then judge ours against that
//! history with both resolvers. A peer Lance itself refuses to commit on this table (a MemWAL update
//! without a MemWAL index, a clone, an operation from a newer Lance) is judged as a what-if: the
//! same two resolvers, given the peer as committed at the next version.
//!
//! Then ours is committed for real through the authoritative commit loop on the same copy, and the
//! outcome (landed, Retry, Fail) must equal the driver's verdict: where both resolvers say Ok, our
//! commit lands (opportunism on real commits, not only through the oracle).
//!
//! Data, not only verdicts: wherever our commit lands, the table is scanned and compared, row for
//! row, with what Lance itself produces for the same pair on a second copy (peer, then ours, both
//! committed by Lance). Where Lance refuses ours but we commit (a permissive difference), the model
//! is the other order (ours, then the peer, committed by Lance); a permissive pair neither order
//! can check fails the suite. A lost, duplicated or changed value fails even where verdicts agree.
//!
//! Every disagreement must be listed in `deviations.txt` with the reason id that design/deviations.md
//! explains; an unlisted disagreement fails, and so does a listed one that no longer occurs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance_actions_commit::scenario::{Staged, create_sample, reuse, segments, stage_all};
use lance_actions_commit::{CommitError, DatasetActionsExt, Judgement, judge, judge_against};

/// One observed pair.
#[derive(Debug, Clone)]
struct Outcome {
    ours_name: String,
    peer_name: String,
    ours_kind: String,
    peer_kind: String,
    ours: &'static str,
    lance: &'static str,
    what_if: bool,
    detail: String,
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// What the authoritative commit of ours did on the real dataset (after the peer committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landed {
    Committed,
    Retry,
    Fail,
    /// The peer was a what-if: nothing to commit against.
    NotTried,
    /// Lance refused to build our transaction for another reason (an error, not a verdict).
    Error,
}

impl Landed {
    fn label(self) -> &'static str {
        match self {
            Landed::Committed => "ok",
            Landed::Retry => "retry",
            Landed::Fail => "fail",
            Landed::NotTried => "-",
            Landed::Error => "error",
        }
    }
}

/// A table's rows, each rendered column by column, sorted: what a reader sees, order aside.
/// `Err` when the table cannot be scanned (a sample whose data files are placeholders).
async fn table_rows(ds: &Dataset) -> Result<Vec<String>, String> {
    let batches: Vec<RecordBatch> =
        ds.scan().try_into_stream().await.map_err(|e| e.to_string())?.try_collect().await.map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .schema()
                .fields()
                .iter()
                .zip(b.columns())
                .map(|(f, c)| {
                    let cell = format!("{:?}", c.slice(i, 1));
                    format!("{}={}", f.name(), cell.split_whitespace().collect::<String>())
                })
                .collect();
            rows.push(cells.join(" "));
        }
    }
    rows.sort();
    Ok(rows)
}

/// Ours as a second writer: the staged transaction under a fresh uuid. (Committed under the peer's
/// uuid, a self-pair would be recognised as the peer's own landed commit and not written again.)
fn as_second_writer(ours: &Staged) -> lance::dataset::transaction::Transaction {
    let mut txn = ours.txn.clone();
    txn.uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    txn
}

/// The commit of ours through the driver, and the rows it left when it landed.
async fn commit_ours(latest: &Arc<Dataset>, ours: &Staged) -> (Landed, Option<Result<Vec<String>, String>>) {
    let mut commit = latest.action_commit().with_max_attempts(3);
    if let Some(rows) = &ours.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    match commit.execute(as_second_writer(ours)).await {
        Ok((ds, _)) => (Landed::Committed, Some(table_rows(&ds).await)),
        Err(CommitError::Retry { .. }) => (Landed::Retry, None),
        Err(CommitError::Fail { .. }) => (Landed::Fail, None),
        Err(e) => {
            eprintln!("commit error for {}: {e}", ours.name);
            (Landed::Error, None)
        }
    }
}

/// Commit `first` then `second` with Lance alone on a fresh copy; the rows if both land.
async fn lance_rows(
    base_dir: &Path,
    dir: &Path,
    first: &Staged,
    second: &Staged,
) -> Option<Result<Vec<String>, String>> {
    copy_dir(base_dir, dir).expect("copy sample dataset");
    let uri = dir.to_str().expect("utf-8 path");
    let ds = Arc::new(Dataset::open(uri).await.expect("open copy"));
    let commit = |ds: Arc<Dataset>, s: &Staged| {
        let mut b = CommitBuilder::new(ds).with_skip_auto_cleanup(true);
        if let Some(rows) = &s.affected_rows {
            b = b.with_affected_rows(rows.clone());
        }
        b.execute(as_second_writer(s))
    };
    let rows = match commit(ds, first).await {
        Ok(after_first) => match commit(Arc::new(after_first), second).await {
            Ok(both) => Some(table_rows(&both).await),
            Err(_) => None,
        },
        Err(_) => None,
    };
    let _ = std::fs::remove_dir_all(dir);
    rows
}

/// What the data check found for one pair where our commit landed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DataCheck {
    /// Same rows as Lance's own commit of the pair (in the order named).
    Same {
        reversed: bool,
    },
    /// Neither table can be scanned (placeholder data files in the sample): nothing to compare.
    Unscannable,
    /// Lance commits the pair in neither order: no model to compare with.
    NoModel,
    Differs(String),
}

async fn check_data(
    base_dir: &Path,
    dir: &Path,
    ours: &Staged,
    peer: &Staged,
    our_rows: Result<Vec<String>, String>,
) -> DataCheck {
    let (model, reversed) = match lance_rows(base_dir, dir, peer, ours).await {
        Some(rows) => (rows, false),
        None => match lance_rows(base_dir, dir, ours, peer).await {
            Some(rows) => (rows, true),
            None => return DataCheck::NoModel,
        },
    };
    match (our_rows, model) {
        (Ok(a), Ok(b)) if a == b => DataCheck::Same { reversed },
        (Err(_), Err(_)) => DataCheck::Unscannable,
        (Ok(a), Ok(b)) => {
            let lost: Vec<_> = b.iter().filter(|r| !a.contains(r)).take(3).collect();
            let extra: Vec<_> = a.iter().filter(|r| !b.contains(r)).take(3).collect();
            DataCheck::Differs(format!("{} rows vs Lance's {}; missing {lost:?}, extra {extra:?}", a.len(), b.len()))
        }
        (a, b) => DataCheck::Differs(format!("scan: ours {:?}, Lance's {:?}", a.err(), b.err())),
    }
}

/// Can Lance commit `staged` on the sample table with no concurrent peer at all? Some cannot (a
/// clone into an existing dataset, a MemWAL update without a MemWAL index): for those only the
/// verdicts are compared, not a real commit.
async fn committable_alone(base_dir: &Path, dir: &Path, staged: &Staged) -> bool {
    copy_dir(base_dir, dir).expect("copy sample dataset");
    let ds = Arc::new(Dataset::open(dir.to_str().expect("utf-8")).await.expect("open copy"));
    let ok = CommitBuilder::new(ds).execute(staged.txn.clone()).await.is_ok();
    let _ = std::fs::remove_dir_all(dir);
    ok
}

async fn judge_pair(
    base_dir: &Path,
    pair_dir: &Path,
    ours: &Staged,
    peer: &Staged,
    ours_committable: bool,
) -> (Judgement, bool, Landed, Option<Result<Vec<String>, String>>) {
    copy_dir(base_dir, pair_dir).expect("copy sample dataset");
    let uri = pair_dir.to_str().expect("utf-8 path");
    let at_read = Arc::new(Dataset::open(uri).await.expect("open pair copy"));
    let mut commit = CommitBuilder::new(at_read.clone()).with_skip_auto_cleanup(true);
    if let Some(rows) = &peer.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    let (judgement, what_if, landed, rows) = match commit.execute(peer.txn.clone()).await {
        Ok(latest) => {
            let latest = Arc::new(latest);
            let j = judge(&latest, &ours.txn, ours.affected_rows.as_ref()).await;
            let (landed, rows) =
                if ours_committable { commit_ours(&latest, ours).await } else { (Landed::NotTried, None) };
            (j, false, landed, rows)
        }
        Err(_) => {
            let committed = vec![(at_read.manifest().version + 1, peer.txn.clone())];
            (
                judge_against(&at_read, &at_read, &committed, &ours.txn, ours.affected_rows.as_ref()).await,
                true,
                Landed::NotTried,
                None,
            )
        }
    };
    let _ = std::fs::remove_dir_all(pair_dir);
    (judgement.unwrap_or_else(|e| panic!("judging {} vs {}: {e}", ours.name, peer.name)), what_if, landed, rows)
}

fn expected_deviations() -> BTreeMap<(String, String), (String, String, String)> {
    let text = include_str!("deviations.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert!(cols.len() == 5, "deviations.txt line needs 5 columns: {l}");
            ((cols[0].into(), cols[1].into()), (cols[2].into(), cols[3].into(), cols[4].into()))
        })
        .collect()
}

fn summarize(outcomes: &[Outcome]) -> String {
    let agree = outcomes.iter().filter(|o| o.ours == o.lance).count();
    let what_if = outcomes.iter().filter(|o| o.what_if).count();
    let kinds: BTreeSet<(String, String)> =
        outcomes.iter().map(|o| (o.ours_kind.clone(), o.peer_kind.clone())).collect();
    let stricter = outcomes.iter().filter(|o| o.lance == "ok" && o.ours != "ok").count();
    let looser = outcomes.iter().filter(|o| o.ours == "ok" && o.lance != "ok").count();
    format!(
        "pairs {} (what-if peers {}), kind cells covered {}, agree {}, disagree {} (we refuse where Lance commits: {}, we commit where Lance refuses: {}, other: {})",
        outcomes.len(),
        what_if,
        kinds.len(),
        agree,
        outcomes.len() - agree,
        stricter,
        looser,
        outcomes.len() - agree - stricter - looser
    )
}

/// How many pairs are judged and committed at once.
const PAIRS_IN_FLIGHT: usize = 4;

/// Everything one (ours, peer) pair contributes to the report.
struct PairResult {
    outcome: Outcome,
    data_check: Option<(String, DataCheck, bool)>,
    /// The authoritative commit disagreed with the driver's verdict.
    mismatch: Option<String>,
    real_commit: bool,
}

/// Judge, commit for real and check the data of pair (`i`, `j`) of `staged`, on copies under
/// `pair_dir`.
async fn run_pair(
    base_dir: std::path::PathBuf,
    pair_dir: std::path::PathBuf,
    staged: Arc<Vec<Staged>>,
    i: usize,
    j: usize,
    ours_committable: bool,
) -> PairResult {
    let (ours, peer) = (&staged[i], &staged[j]);
    let (judged, what_if, landed, rows) = judge_pair(&base_dir, &pair_dir, ours, peer, ours_committable).await;
    let mut data_check = None;
    if let Some(rows) = rows {
        let permissive = judged.lance.label() != "ok";
        let check = check_data(&base_dir, &pair_dir, ours, peer, rows).await;
        data_check = Some((format!("{} vs {}", ours.name, peer.name), check, permissive));
    }
    let mismatch = (landed != Landed::NotTried && landed.label() != judged.resolution.verdict.label()).then(|| {
        format!(
            "{} vs {}: driver said {}, the real commit did {}",
            ours.name,
            peer.name,
            judged.resolution.verdict.label(),
            landed.label()
        )
    });
    let outcome = Outcome {
        ours_name: ours.name.clone(),
        peer_name: peer.name.clone(),
        ours_kind: format!("{:?}", ours.kind),
        peer_kind: format!("{:?}", peer.kind),
        ours: judged.resolution.verdict.label(),
        lance: judged.lance.label(),
        what_if,
        detail: format!("ours: {} | lance: {}", judged.resolution.verdict, judged.lance),
    };
    PairResult { outcome, data_check, mismatch, real_commit: landed != Landed::NotTried }
}

/// The sample table's 42 transactions of all 17 kinds, every ordered pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_agrees_with_lance_on_every_operation_pair() {
    let root = tempfile::tempdir().expect("tempdir");
    let base_dir = root.path().join("base");
    let ds = create_sample(base_dir.to_str().expect("utf-8")).await.expect("sample table");
    let staged = stage_all(&ds).await.expect("stage every operation");
    let kinds: BTreeSet<_> = staged.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.len(), 17, "every Lance operation kind is staged");
    run_table("sample", root.path(), base_dir, staged).await;
}

/// A table with a tagged fragment-reuse history (`scenario::reuse`): tagged rewrites, replacements
/// of the reuse entry, index builds over rewritten fragments, every ordered pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_agrees_with_lance_on_a_tagged_table() {
    let root = tempfile::tempdir().expect("tempdir");
    let base_dir = root.path().join("base");
    let ds = reuse::create_tagged(base_dir.to_str().expect("utf-8")).await.expect("tagged table");
    let staged = reuse::stage_tagged(&ds).await.expect("stage the tagged samples");
    run_table("tagged", root.path(), base_dir, staged).await;
}

/// A table with stable row ids (`scenario::reuse`): deferred compactions with a v0 reuse entry and
/// index builds in the row-id domain, every ordered pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_agrees_with_lance_on_a_stable_row_id_table() {
    let root = tempfile::tempdir().expect("tempdir");
    let base_dir = root.path().join("base");
    let ds = reuse::create_stable_row_ids(base_dir.to_str().expect("utf-8")).await.expect("stable-row-id table");
    let staged = reuse::stage_stable_row_ids(&ds).await.expect("stage the stable-row-id samples");
    run_table("stable", root.path(), base_dir, staged).await;
}

/// A table whose index has two segments under one name (`scenario::segments`, the shape of model
/// bug 2): samples under each segment, rebuilds, a replacement and a drop of one segment, every
/// ordered pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_agrees_with_lance_on_a_two_segment_index() {
    let root = tempfile::tempdir().expect("tempdir");
    let base_dir = root.path().join("base");
    let ds = segments::create_two_segments(base_dir.to_str().expect("utf-8")).await.expect("two-segment table");
    let staged = segments::stage_two_segments(&ds).await.expect("stage the two-segment samples");
    run_table("segments", root.path(), base_dir, staged).await;
}

/// Judge, commit and check every ordered pair of `staged` (staged on the table at `base_dir`),
/// each on its own copies under `root`, and compare the disagreements with `deviations.txt`'s lines
/// for these samples. `table` names the report (`target/conformance-observed-{table}.txt`).
async fn run_table(table: &str, root: &Path, base_dir: std::path::PathBuf, staged: Vec<Staged>) {
    let staged = Arc::new(staged);
    let mut committable = Vec::new();
    for (i, s) in staged.iter().enumerate() {
        committable.push(committable_alone(&base_dir, &root.join(format!("alone-{i}")), s).await);
    }
    // Every pair works on its own copies, so pairs run concurrently (while one waits on the disk,
    // another computes); results are gathered in pair order, so the report reads the same.
    let pairs: Vec<(usize, usize)> = (0..staged.len()).flat_map(|i| (0..staged.len()).map(move |j| (i, j))).collect();
    let results: Vec<PairResult> = futures::stream::iter(pairs)
        .map(|(i, j)| {
            let (base, pair_dir) = (base_dir.clone(), root.join(format!("pair-{i}-{j}")));
            tokio::spawn(run_pair(base, pair_dir, staged.clone(), i, j, committable[i]))
        })
        .buffered(PAIRS_IN_FLIGHT)
        .map(|joined| joined.expect("a pair's task panicked"))
        .collect()
        .await;
    let real_commits = results.iter().filter(|r| r.real_commit).count();
    let commit_mismatches: Vec<String> = results.iter().filter_map(|r| r.mismatch.clone()).collect();
    let data_checks: Vec<(String, DataCheck, bool)> = results.iter().filter_map(|r| r.data_check.clone()).collect();
    let outcomes: Vec<Outcome> = results.into_iter().map(|r| r.outcome).collect();

    let observed: BTreeMap<(String, String), (String, String)> = outcomes
        .iter()
        .filter(|o| o.ours != o.lance)
        .map(|o| ((o.ours_name.clone(), o.peer_name.clone()), (o.ours.to_string(), o.lance.to_string())))
        .collect();
    let listing: String = outcomes
        .iter()
        .filter(|o| o.ours != o.lance)
        .map(|o| format!("{} {} {} {} ?  # {}\n", o.ours_name, o.peer_name, o.ours, o.lance, o.detail))
        .collect();
    let _ = std::fs::write(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/conformance-observed-{table}.txt")),
        format!("# {}\n{listing}", summarize(&outcomes)),
    );
    println!(
        "conformance ({table} table): {}; our transaction committed for real after {real_commits} real peers",
        summarize(&outcomes)
    );
    let count = |f: &dyn Fn(&DataCheck) -> bool| data_checks.iter().filter(|(_, c, _)| f(c)).count();
    println!(
        "data: {} landed commits scanned; same rows as Lance's own commit {} (of which in the other order {}), unscannable samples {}, no model {}",
        data_checks.len(),
        count(&|c| matches!(c, DataCheck::Same { .. })),
        count(&|c| matches!(c, DataCheck::Same { reversed: true })),
        count(&|c| *c == DataCheck::Unscannable),
        count(&|c| *c == DataCheck::NoModel),
    );
    let data_failures: Vec<String> = data_checks
        .iter()
        .filter_map(|(pair, check, permissive)| match check {
            DataCheck::Differs(why) => Some(format!("{pair}: {why}")),
            // Where we admit what Lance retries, the data must be checked against some model.
            DataCheck::NoModel | DataCheck::Unscannable if *permissive => {
                Some(format!("{pair}: we commit where Lance retries, and no data check was possible ({check:?})"))
            }
            _ => None,
        })
        .collect();
    assert!(
        data_failures.is_empty(),
        "our landed commits left different data from Lance's in {} pair(s):\n{}",
        data_failures.len(),
        data_failures.join("\n")
    );
    assert!(
        commit_mismatches.is_empty(),
        "the authoritative commit disagreed with the driver's verdict in {} pair(s):\n{}",
        commit_mismatches.len(),
        commit_mismatches.join("\n")
    );

    // This table's lines of the list: those naming one of its samples.
    let names: BTreeSet<&str> = staged.iter().map(|s| s.name.as_str()).collect();
    let mut expected = expected_deviations();
    expected.retain(|(ours, _), _| names.contains(ours.as_str()));
    let unlisted: Vec<String> = observed
        .iter()
        .filter(|(k, v)| expected.get(*k).map(|e| (&e.0, &e.1)) != Some((&v.0, &v.1)))
        .map(|((a, b), (o, l))| format!("{a} vs {b}: ours {o}, lance {l}"))
        .collect();
    let stale: Vec<String> =
        expected.keys().filter(|k| !observed.contains_key(*k)).map(|(a, b)| format!("{a} vs {b}")).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "conformance drift.\nunlisted disagreements ({}):\n{}\nlisted but no longer disagreeing ({}):\n{}\n(see target/conformance-observed-{table}.txt)",
        unlisted.len(),
        unlisted.join("\n"),
        stale.len(),
        stale.join("\n")
    );
}
