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
//! Every disagreement must be listed in `deviations.txt` with the reason id that design/deviations.md
//! explains; an unlisted disagreement fails, and so does a listed one that no longer occurs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance_actions_commit::scenario::{Staged, create_sample, stage_all};
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

async fn commit_ours(latest: &Arc<Dataset>, ours: &Staged) -> Landed {
    let mut commit = latest.action_commit().with_max_attempts(3);
    if let Some(rows) = &ours.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    match commit.execute(ours.txn.clone()).await {
        Ok(_) => Landed::Committed,
        Err(CommitError::Retry { .. }) => Landed::Retry,
        Err(CommitError::Fail { .. }) => Landed::Fail,
        Err(e) => {
            eprintln!("commit error for {}: {e}", ours.name);
            Landed::Error
        }
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
) -> (Judgement, bool, Landed) {
    copy_dir(base_dir, pair_dir).expect("copy sample dataset");
    let uri = pair_dir.to_str().expect("utf-8 path");
    let at_read = Arc::new(Dataset::open(uri).await.expect("open pair copy"));
    let mut commit = CommitBuilder::new(at_read.clone()).with_skip_auto_cleanup(true);
    if let Some(rows) = &peer.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    let (judgement, what_if, landed) = match commit.execute(peer.txn.clone()).await {
        Ok(latest) => {
            let latest = Arc::new(latest);
            let j = judge(&latest, &ours.txn, ours.affected_rows.as_ref()).await;
            let landed = if ours_committable { commit_ours(&latest, ours).await } else { Landed::NotTried };
            (j, false, landed)
        }
        Err(_) => {
            let committed = vec![(at_read.manifest().version + 1, peer.txn.clone())];
            (
                judge_against(&at_read, &at_read, &committed, &ours.txn, ours.affected_rows.as_ref()).await,
                true,
                Landed::NotTried,
            )
        }
    };
    let _ = std::fs::remove_dir_all(pair_dir);
    (judgement.unwrap_or_else(|e| panic!("judging {} vs {}: {e}", ours.name, peer.name)), what_if, landed)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_agrees_with_lance_on_every_operation_pair() {
    let root = tempfile::tempdir().expect("tempdir");
    let base_dir = root.path().join("base");
    let ds = create_sample(base_dir.to_str().expect("utf-8")).await.expect("sample table");
    let staged = Arc::new(stage_all(&ds).await.expect("stage every operation"));
    let kinds: BTreeSet<_> = staged.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.len(), 17, "every Lance operation kind is staged");

    let mut outcomes = Vec::new();
    let mut commit_mismatches = Vec::new();
    let mut real_commits = 0;
    let mut committable = Vec::new();
    for (i, s) in staged.iter().enumerate() {
        committable.push(committable_alone(&base_dir, &root.path().join(format!("alone-{i}")), s).await);
    }
    for (i, ours) in staged.iter().enumerate() {
        for (j, peer) in staged.iter().enumerate() {
            let pair_dir = root.path().join(format!("pair-{i}-{j}"));
            let (j, what_if, landed) = judge_pair(&base_dir, &pair_dir, ours, peer, committable[i]).await;
            if landed != Landed::NotTried && landed.label() != j.resolution.verdict.label() {
                commit_mismatches.push(format!(
                    "{} vs {}: driver said {}, the real commit did {}",
                    ours.name,
                    peer.name,
                    j.resolution.verdict.label(),
                    landed.label()
                ));
            }
            real_commits += usize::from(landed != Landed::NotTried);
            outcomes.push(Outcome {
                ours_name: ours.name.clone(),
                peer_name: peer.name.clone(),
                ours_kind: format!("{:?}", ours.kind),
                peer_kind: format!("{:?}", peer.kind),
                ours: j.resolution.verdict.label(),
                lance: j.lance.label(),
                what_if,
                detail: format!("ours: {} | lance: {}", j.resolution.verdict, j.lance),
            });
        }
    }

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
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/conformance-observed.txt"),
        format!("# {}\n{listing}", summarize(&outcomes)),
    );
    println!(
        "conformance: {}; our transaction committed for real after {real_commits} real peers",
        summarize(&outcomes)
    );
    assert!(
        commit_mismatches.is_empty(),
        "the authoritative commit disagreed with the driver's verdict in {} pair(s):\n{}",
        commit_mismatches.len(),
        commit_mismatches.join("\n")
    );

    let expected = expected_deviations();
    let unlisted: Vec<String> = observed
        .iter()
        .filter(|(k, v)| expected.get(*k).map(|e| (&e.0, &e.1)) != Some((&v.0, &v.1)))
        .map(|((a, b), (o, l))| format!("{a} vs {b}: ours {o}, lance {l}"))
        .collect();
    let stale: Vec<String> =
        expected.keys().filter(|k| !observed.contains_key(*k)).map(|(a, b)| format!("{a} vs {b}")).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "conformance drift.\nunlisted disagreements ({}):\n{}\nlisted but no longer disagreeing ({}):\n{}\n(see target/conformance-observed.txt)",
        unlisted.len(),
        unlisted.join("\n"),
        stale.len(),
        stale.join("\n")
    );
}
