//! Shared pieces of the upstream ports: the sample table, staging helpers, judging one staged
//! transaction against one committed peer with both resolvers, and the ledger that compares our
//! verdicts with the upstream expectation and the listed deviations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance_actions_commit::scenario::create_sample;
use lance_actions_commit::{Judgement, judge_against};
use lance_select::RowAddrTreeMap;

/// The upstream expectation of one check, in Lance's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// `check_txn` returned Ok.
    Compatible,
    /// `RetryableCommitConflict`.
    Retryable,
    /// `CommitConflict` / `IncompatibleTransaction`.
    NotCompatible,
    /// Any error (upstream asserts only `is_err()`): Retry or Fail.
    Conflict,
    /// Anything but a retryable conflict (upstream asserts only `!matches!(.., Retryable..)`).
    NotRetryable,
}

impl Upstream {
    /// The verdict label of ours that carries the same meaning.
    pub fn label(self) -> &'static str {
        match self {
            Upstream::Compatible => "ok",
            Upstream::Retryable => "retry",
            Upstream::NotCompatible => "fail",
            Upstream::Conflict => "retry|fail",
            Upstream::NotRetryable => "ok|fail",
        }
    }

    /// Does a verdict label (`ok` / `retry` / `fail`) meet this expectation?
    pub fn admits(self, verdict: &str) -> bool {
        match self {
            Upstream::Conflict => verdict != "ok",
            Upstream::NotRetryable => verdict != "retry",
            other => other.label() == verdict,
        }
    }
}

/// A fresh copy of the sample table (4 fragments x 8 rows, ids 0..32, BTree index `id_idx`,
/// config `k1 = a`) in its own temporary directory.
pub async fn sample() -> (tempfile::TempDir, Arc<Dataset>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = create_sample(dir.path().join("t").to_str().expect("utf-8")).await.expect("sample table");
    (dir, ds)
}

/// A transaction read at `ds`'s current version.
pub fn txn(ds: &Dataset, op: Operation) -> Transaction {
    TransactionBuilder::new(ds.manifest().version, op).build()
}

/// Judge `ours` (read at `ds`'s version) as if `peer` had committed at the next version: the
/// shape of an upstream `check_txn(peer, version)` call, asked of our driver and of Lance's
/// resolver on the same real table.
pub async fn judge_after(
    ds: &Arc<Dataset>,
    ours: &Transaction,
    affected: Option<&RowAddrTreeMap>,
    peer: &Transaction,
) -> Judgement {
    let committed = vec![(ds.manifest().version + 1, peer.clone())];
    judge_against(ds, ds, &committed, ours, affected).await.unwrap_or_else(|e| panic!("judging: {e}"))
}

/// One observed case: our verdict, Lance's resolver on the same re-expressed case, and what the
/// upstream test expects.
#[derive(Debug)]
struct Observed {
    ours: &'static str,
    lance: &'static str,
    expected: Upstream,
    detail: String,
}

/// Compares every case with its upstream expectation and the deviations listed for that test.
pub struct Ledger {
    test: &'static str,
    /// case name -> (our verdict, deviation id) for cases where we differ on purpose.
    deviations: BTreeMap<String, (&'static str, &'static str)>,
    observed: BTreeMap<String, Observed>,
}

impl Ledger {
    /// `deviations` and `bugs` are (case, our verdict, deviation id or bug description); both
    /// are excused only while they still occur exactly as listed.
    pub fn new(
        test: &'static str,
        deviations: &[(&str, &'static str, &'static str)],
        bugs: &[(&str, &'static str, &'static str)],
    ) -> Self {
        let deviations = deviations.iter().chain(bugs).map(|(c, v, d)| (c.to_string(), (*v, *d))).collect();
        Ledger { test, deviations, observed: BTreeMap::new() }
    }

    pub fn record(&mut self, case: impl Into<String>, j: &Judgement, expected: Upstream) {
        let case = case.into();
        let observed = Observed {
            ours: j.resolution.verdict.label(),
            lance: j.lance.label(),
            expected,
            detail: format!("ours: {} | lance: {}", j.resolution.verdict, j.lance),
        };
        assert!(self.observed.insert(case.clone(), observed).is_none(), "case {case} recorded twice");
    }

    /// Fail on any difference from upstream that is not listed, on any listed deviation that no
    /// longer occurs, and on a re-expressed case where Lance's own resolver does not give the
    /// upstream answer either (the port would not be faithful). Returns (cases, deviating).
    pub fn finish(self) -> (usize, usize) {
        let mut failures = Vec::new();
        let mut deviating = 0;
        for (case, o) in &self.observed {
            if !o.expected.admits(o.lance) {
                failures.push(format!(
                    "{case}: Lance's resolver on the re-expressed case says {}, upstream expects {} ({})",
                    o.lance,
                    o.expected.label(),
                    o.detail
                ));
            }
            match self.deviations.get(case) {
                Some((verdict, _)) if o.ours == *verdict && !o.expected.admits(o.ours) => deviating += 1,
                Some((verdict, id)) => failures.push(format!(
                    "{case}: listed as {id} (ours {verdict}) but ours is {} and upstream expects {} ({})",
                    o.ours,
                    o.expected.label(),
                    o.detail
                )),
                None if !o.expected.admits(o.ours) => failures.push(format!(
                    "{case}: ours {}, upstream expects {} — not a listed deviation ({})",
                    o.ours,
                    o.expected.label(),
                    o.detail
                )),
                None => {}
            }
        }
        let seen: BTreeSet<&String> = self.observed.keys().collect();
        for case in self.deviations.keys().filter(|c| !seen.contains(c)) {
            failures.push(format!("{case}: listed as a deviation but never judged"));
        }
        println!(
            "{}: {} cases, {} deviating (listed deviations and known model bugs)",
            self.test,
            self.observed.len(),
            deviating
        );
        assert!(failures.is_empty(), "{}: {} failure(s):\n{}", self.test, failures.len(), failures.join("\n"));
        (self.observed.len(), deviating)
    }
}

/// Upstream tests that commit for real: commit `peer` with Lance's own `CommitBuilder`, judge
/// `ours` (read at `at_read`'s version) against that history with both resolvers, then commit
/// `ours` through our commit loop. Returns the judgement and the dataset ours landed on, or the
/// verdict label our commit loop refused with; the commit's outcome must equal the driver's verdict.
pub async fn commit_peer_then_ours(
    at_read: &Arc<Dataset>,
    peer: Transaction,
    ours: Transaction,
) -> (Judgement, Result<Dataset, &'static str>) {
    commit_peer_then_ours_with(at_read, peer, ours, None).await
}

/// Our commit loop's refusal of a commit: its verdict label for a Retry or a Fail, else the error.
pub struct Refused(pub lance_actions_commit::CommitError);

impl Refused {
    pub fn label(&self) -> Option<&'static str> {
        use lance_actions_commit::CommitError;
        match self.0 {
            CommitError::Retry { .. } => Some("retry"),
            CommitError::Fail { .. } => Some("fail"),
            _ => None,
        }
    }
}

/// Judge `ours` against `latest`'s history with both resolvers, then commit it through our commit
/// loop (at most 3 attempts) on `latest`, given `affected` rows if any.
pub async fn judge_then_commit(
    latest: &Arc<Dataset>,
    ours: Transaction,
    affected: Option<RowAddrTreeMap>,
) -> (Judgement, Result<Dataset, Refused>) {
    use lance_actions_commit::{DatasetActionsExt, judge};
    let j = judge(latest, &ours, affected.as_ref()).await.unwrap_or_else(|e| panic!("judging: {e}"));
    let mut commit = latest.action_commit().with_max_attempts(3);
    if let Some(rows) = affected {
        commit = commit.with_affected_rows(rows);
    }
    let outcome = commit.execute(ours).await.map(|(ds, _)| ds).map_err(Refused);
    (j, outcome)
}

/// `commit_peer_then_ours`, with the rows ours reports as affected (`with_affected_rows`).
pub async fn commit_peer_then_ours_with(
    at_read: &Arc<Dataset>,
    peer: Transaction,
    ours: Transaction,
    affected: Option<RowAddrTreeMap>,
) -> (Judgement, Result<Dataset, &'static str>) {
    let latest = Arc::new(
        lance::dataset::CommitBuilder::new(at_read.clone()).execute(peer).await.expect("Lance commits the peer"),
    );
    let (j, outcome) = judge_then_commit(&latest, ours, affected).await;
    let outcome = outcome.map_err(|e| e.label().unwrap_or_else(|| panic!("our commit loop errored: {}", e.0)));
    let landed = if outcome.is_ok() { "ok" } else { outcome.as_ref().err().copied().unwrap_or("?") };
    assert_eq!(landed, j.resolution.verdict.label(), "the commit loop's outcome equals the driver's verdict");
    (j, outcome)
}
