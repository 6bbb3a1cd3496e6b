//! The authoritative commit: our driver judges every committed peer, and Lance only ever lands the
//! transaction at the version right after the head we checked.
//!
//! Each attempt: read the peers committed in `(read_version, head]` as actions (our encoded lists
//! fail-closed, everything else lifted); read the deletion vectors a rebase may compare; run the pure
//! driver; on Ok, perform the rebase's IO (write merged deletion files); lower to a Lance operation
//! whose read version is `head`, carrying the encoded action list in its properties; commit it
//! through Lance with the [`ExpectVersion`] handler, which refuses any manifest version other than
//! `head + 1`. If another writer landed first, nothing was written and the next attempt re-reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::transaction::{Transaction, TransactionBuilder};
use lance_actions::driver::PeerCheck;
use lance_actions::{ActionTxn, AnyAction, Inputs, Verdict, codec, lower, resolve_in_place};
use lance_core::utils::deletion::DeletionVector;
use lance_select::RowAddrTreeMap;
use lance_table::io::commit::commit_handler_from_url;
use lance_table::io::deletion::write_deletion_file;
use rand::Rng;
use roaring::RoaringBitmap;
use snafu::Snafu;

use crate::expect_version::{ExpectVersion, WriteRecord};
use crate::facts::DeletionFacts;
use crate::history::{actions_of, committed_since, peers_of};
use crate::judge::{attach_affected_rows, attach_restore_targets, deleted_rows, table_state};

/// Property key recording the commit's verdict history (one line per attempt).
pub const HISTORY_KEY: &str = "lance-actions.history";

/// What one attempt saw and decided.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    /// The head the driver checked up to.
    pub head: u64,
    pub peers: Vec<PeerCheck>,
    pub verdict: Verdict,
    /// What happened at the manifest write (when the verdict was Ok).
    pub write: Option<WriteRecord>,
    pub checking: Duration,
}

/// The outcome of a commit.
#[derive(Debug, Clone)]
pub struct CommitReport {
    /// The version that landed.
    pub version: u64,
    pub read_version: u64,
    pub attempts: Vec<AttemptReport>,
}

impl CommitReport {
    /// Total time spent reading peers and judging them.
    pub fn checking_time(&self) -> Duration {
        self.attempts.iter().map(|a| a.checking).sum()
    }

    /// Number of committed peers checked over all attempts.
    pub fn peers_checked(&self) -> usize {
        self.attempts.iter().map(|a| a.peers.len()).sum()
    }
}

/// Why a commit did not land.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum CommitError {
    /// A committed peer changed what this transaction was built on: re-read and re-execute it.
    #[snafu(display("retry: {reason} (re-read the table and re-execute the write)"))]
    Retry { reason: lance_actions::Reason, report: Box<CommitReport> },
    /// The transaction is incompatible with what was committed; re-executing will not help.
    #[snafu(display("incompatible: {reason}"))]
    Fail { reason: lance_actions::Reason, report: Box<CommitReport> },
    /// Other writers kept landing first.
    #[snafu(display("gave up after {attempts} attempts: other writers kept landing first"))]
    RetriesExhausted { attempts: usize, report: Box<CommitReport> },
    /// The manifest write was attempted and failed in a way that leaves its effect unknown: check
    /// the dataset's latest version for transaction `uuid` before retrying.
    #[snafu(display("commit status unknown for transaction {uuid}: {message}"))]
    CommitStatusUnknown { uuid: String, message: String },
    #[snafu(display("{source}"))]
    Layer { source: crate::Error },
    #[snafu(display("cannot express the rebased actions as a Lance operation: {source}"))]
    Lower { source: lance_actions::Error },
}

impl From<crate::Error> for CommitError {
    fn from(source: crate::Error) -> Self {
        CommitError::Layer { source }
    }
}

pub type CommitResult<T> = std::result::Result<T, CommitError>;

fn lance_err(what: &str) -> impl FnOnce(lance::Error) -> CommitError + '_ {
    move |source| CommitError::Layer { source: crate::Error::Lance { what: what.into(), source } }
}

/// Commit through the action driver. Build it with [`DatasetActionsExt::action_commit`].
#[derive(Clone)]
pub struct ActionCommit {
    dataset: Arc<Dataset>,
    max_attempts: usize,
    affected_rows: Option<RowAddrTreeMap>,
    base_backoff: Duration,
    properties: HashMap<String, String>,
}

/// The extension of `lance::Dataset`: commit staged work through the action driver.
pub trait DatasetActionsExt {
    fn action_commit(&self) -> ActionCommit;
}

impl DatasetActionsExt for Arc<Dataset> {
    fn action_commit(&self) -> ActionCommit {
        ActionCommit {
            dataset: self.clone(),
            max_attempts: 20,
            affected_rows: None,
            base_backoff: Duration::from_millis(2),
            properties: HashMap::new(),
        }
    }
}

impl ActionCommit {
    /// At most this many attempts (each re-reads the head). Default 20.
    pub fn with_max_attempts(mut self, n: usize) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The rows the staged write deleted (what Lance's `DeleteBuilder` / merge-insert report), so
    /// row-level rebase needs no IO for our side.
    pub fn with_affected_rows(mut self, rows: RowAddrTreeMap) -> Self {
        self.affected_rows = Some(rows);
        self
    }

    /// First backoff step; each retry doubles it (capped at 64 steps) with full jitter.
    pub fn with_backoff(mut self, base: Duration) -> Self {
        self.base_backoff = base;
        self
    }

    /// Extra transaction properties to record with the commit (provenance, for example). Keys of
    /// this project's own (`lance-actions.v1`, the history) are always ours.
    pub fn with_properties(mut self, properties: HashMap<String, String>) -> Self {
        self.properties.extend(properties);
        self
    }

    /// Commit a transaction staged with Lance's own uncommitted writers.
    pub async fn execute(self, staged: Transaction) -> CommitResult<(Dataset, CommitReport)> {
        let mut actions = actions_of(&staged).map_err(|source| CommitError::Lower { source })?;
        attach_affected_rows(&mut actions, self.affected_rows.as_ref());
        attach_restore_targets(&mut actions, &self.dataset).await;
        let mut props = staged.transaction_properties.as_deref().cloned().unwrap_or_default();
        props.extend(self.properties.clone());
        self.run(staged.read_version, actions, staged.uuid.clone(), staged.tag.clone(), props).await
    }

    /// Commit an action transaction built by hand against `read_version`.
    pub async fn execute_actions(
        self,
        read_version: u64,
        mut actions: ActionTxn,
    ) -> CommitResult<(Dataset, CommitReport)> {
        attach_affected_rows(&mut actions, self.affected_rows.as_ref());
        attach_restore_targets(&mut actions, &self.dataset).await;
        let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
        let props = self.properties.clone();
        self.run(read_version, actions, uuid, None, props).await
    }

    async fn run(
        self,
        read_version: u64,
        ours: ActionTxn,
        uuid: String,
        tag: Option<String>,
        properties: HashMap<String, String>,
    ) -> CommitResult<(Dataset, CommitReport)> {
        // Usually the caller staged on the very handle it commits through: no need to reopen it.
        let at_read = if self.dataset.manifest().version == read_version {
            self.dataset.clone()
        } else {
            Arc::new(self.dataset.checkout_version(read_version).await.map_err(lance_err("opening the read version"))?)
        };
        let base = table_state(&at_read).await?;
        let inner_handler = commit_handler_from_url(self.dataset.uri(), &None)
            .await
            .map_err(lance_err("opening the commit handler"))?;
        let mut report = CommitReport { version: 0, read_version, attempts: Vec::new() };
        let mut committed = Vec::new();
        for attempt in 0..self.max_attempts {
            if attempt > 0 {
                tokio::time::sleep(self.backoff(attempt)).await;
            }
            let started = Instant::now();
            // A version listing is cheaper than reading the head's manifest; skip the read when the
            // head is still the version we read (the uncontended case).
            let head_id = self.dataset.latest_version_id().await.map_err(lance_err("listing versions"))?;
            let latest = if head_id == at_read.manifest().version {
                at_read.clone()
            } else {
                let mut latest = (*self.dataset).clone();
                latest.checkout_latest().await.map_err(lance_err("reading the latest version"))?;
                Arc::new(latest)
            };
            let head = latest.manifest().version;
            let known = read_version + committed.len() as u64;
            committed.extend(committed_since(&latest, known).await?);
            let peers = peers_of(&committed)?;
            let mut txn = ours.clone();
            // With no peer the head is the base: skip re-reading it.
            let head_state = if peers.is_empty() { None } else { Some(table_state(&latest).await?) };
            let facts = DeletionFacts::load(&latest, &base, &txn, &peers).await?;
            let head_ref = head_state.as_ref().unwrap_or(&base);
            let (verdict, checks) =
                resolve_in_place(&mut txn, &Inputs { base: &base, head: Some(head_ref), peers: &peers, facts: &facts });
            let mut entry = AttemptReport {
                head,
                peers: checks,
                verdict: verdict.clone(),
                write: None,
                checking: started.elapsed(),
            };
            match verdict {
                Verdict::Retry(reason) => {
                    report.attempts.push(entry);
                    return Err(CommitError::Retry { reason, report: Box::new(report) });
                }
                Verdict::Fail(reason) => {
                    report.attempts.push(entry);
                    return Err(CommitError::Fail { reason, report: Box::new(report) });
                }
                Verdict::Ok => {}
            }
            merge_deletion_vectors(&latest, &mut txn).await?;
            let op = lower(&txn).map_err(|source| CommitError::Lower { source })?;
            let mut props = properties.clone();
            props.insert(codec::PROPERTY_KEY.to_string(), codec::encode_property(&txn));
            props.insert(HISTORY_KEY.to_string(), history_line(&report, &entry));
            let lance_txn = TransactionBuilder::new(head, op)
                .uuid(uuid.clone())
                .tag(tag.clone())
                .transaction_properties(Some(Arc::new(props)))
                .build();
            let handler = Arc::new(ExpectVersion::new(inner_handler.clone(), head + 1));
            crate::crash::point("before-lance-commit");
            let result = CommitBuilder::new(latest.clone())
                .with_commit_handler(handler.clone())
                .with_max_retries(0)
                .execute(lance_txn)
                .await;
            let record = handler.record();
            entry.write = Some(record.clone());
            report.attempts.push(entry);
            match (result, record) {
                (Ok(ds), _) => {
                    report.version = ds.manifest().version;
                    return Ok((ds, report));
                }
                (Err(_), WriteRecord::Written { version }) => {
                    // Written, but Lance failed afterwards (for example reading it back): it landed.
                    let ds = latest.checkout_version(version).await.map_err(lance_err("opening the landed version"))?;
                    report.version = version;
                    return Ok((ds, report));
                }
                (Err(_), WriteRecord::Refused { .. } | WriteRecord::LostRace) => continue,
                // Lance's own rebase saw a peer landing between our read and its commit.
                (
                    Err(
                        lance::Error::RetryableCommitConflict { .. }
                        | lance::Error::IncompatibleTransaction { .. }
                        | lance::Error::CommitConflict { .. },
                    ),
                    WriteRecord::NotAttempted,
                ) => continue,
                (Err(e), WriteRecord::Failed { message }) => {
                    return Err(CommitError::CommitStatusUnknown {
                        uuid: uuid.clone(),
                        message: format!("{message}; lance: {e}"),
                    });
                }
                (Err(e), _) => return Err(lance_err("committing")(e)),
            }
        }
        Err(CommitError::RetriesExhausted { attempts: self.max_attempts, report: Box::new(report) })
    }

    fn backoff(&self, attempt: usize) -> Duration {
        let cap = self.base_backoff * (1u32 << attempt.min(6));
        let jitter = rand::rng().random_range(0.0..1.0);
        cap.mul_f64(jitter)
    }
}

/// One line per attempt, stored with the commit so `log` can show how it got there.
fn history_line(report: &CommitReport, current: &AttemptReport) -> String {
    let mut lines: Vec<String> = report
        .attempts
        .iter()
        .map(|a| format!("head v{}: {} peer(s), {}, lost the race", a.head, a.peers.len(), a.verdict.label()))
        .collect();
    lines.push(format!("head v{}: {} peer(s), {}", current.head, current.peers.len(), current.verdict.label()));
    lines.join("\n")
}

/// Perform the IO the rebase asked for: a deletion vector marked for union with the head's is
/// rewritten as the union, attached to the head's fragment.
async fn merge_deletion_vectors(latest: &Arc<Dataset>, txn: &mut ActionTxn) -> CommitResult<()> {
    let head = latest.manifest().version;
    let base_path = latest.branch_location().path;
    let store = latest.object_store(None).await.map_err(lance_err("opening the object store"))?;
    for action in txn.actions.iter_mut() {
        let AnyAction::UpdateDeletionVector(u) = action else { continue };
        if !u.merge_with_head {
            continue;
        }
        // The rebase proved the fragment still exists at the head; if it does not, refuse rather than
        // guess.
        let head_fragment =
            latest.manifest().fragments.iter().find(|f| f.id == u.fragment.id).cloned().ok_or_else(|| {
                lance_err("merging deletion vectors")(lance::Error::invalid_input(format!(
                    "fragment {} vanished between the check and the merge",
                    u.fragment.id
                )))
            })?;
        let committed = deleted_rows(latest, &head_fragment).await?;
        let ours = u.affected_rows.clone().unwrap_or_default();
        let union: RoaringBitmap = committed | ours;
        let file = write_deletion_file(&base_path, u.fragment.id, head, &DeletionVector::from(union), &store)
            .await
            .map_err(lance_err("writing the merged deletion vector"))?;
        let mut fragment = head_fragment;
        fragment.deletion_file = file;
        u.fragment = fragment;
        u.merge_with_head = false;
    }
    Ok(())
}
