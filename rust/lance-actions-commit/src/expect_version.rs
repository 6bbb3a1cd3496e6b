//! A commit handler that lands a manifest only at the version our driver checked up to.
//!
//! Lance's commit loop rebases a transaction over every version after its read version before it
//! writes the manifest, even with `with_max_retries(0)`. We commit with `read_version` = the head our
//! driver checked, so that rebase is empty unless another writer landed in between, in which case
//! Lance would rebase us over a peer our driver never saw. This wrapper refuses to write any manifest
//! whose version is not `checked head + 1`: then nothing lands, and our loop re-reads and re-checks.
//!
//! A loop may lend the wrapper a [`Rejudge`]: when Lance's own pre-write listing found writers that
//! landed after our head and Lance built the manifest past them, the wrapper asks it whether our
//! driver admits those writers too, and lets the manifest through only then (`design/commit.md`,
//! "Judged at the write").
//!
//! Lance reports the refusal as an ambiguous outcome ("commit status unknown"), so the wrapper
//! records what happened; the caller reads that record to know definitively whether the manifest
//! was written.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{CommitError, CommitHandler, ManifestLocation};

/// What happened at the manifest write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRecord {
    /// Lance never reached the manifest write (an error before it).
    NotAttempted,
    /// Lance asked for a different version than the one we checked up to: refused, nothing written.
    Refused { asked: u64 },
    /// The inner handler reported another manifest already at that version: nothing written.
    LostRace,
    /// The manifest was written.
    Written { version: u64 },
    /// Lance built the manifest past the version we checked up to, our driver admitted every writer
    /// in between ([`Rejudge`]), and the manifest was written.
    WrittenAfterRejudging { version: u64 },
    /// The write failed with an error whose effect is unknown.
    Failed { message: String },
}

impl WriteRecord {
    /// The version written, when one was.
    pub fn written(&self) -> Option<u64> {
        match self {
            WriteRecord::Written { version } | WriteRecord::WrittenAfterRejudging { version } => Some(*version),
            _ => None,
        }
    }
}

/// What Lance handed the manifest write: the manifest it built, on the head its pre-write listing
/// reached, and what it is written with.
#[derive(Debug, Clone, Copy)]
pub struct Built<'a> {
    /// Version `manifest.version - 1` is the head Lance built on.
    pub manifest: &'a Manifest,
    /// The index list written with it (Lance hands `None` for a table without indices).
    pub indices: Option<&'a [IndexMetadata]>,
    /// Lance's rebase of our transaction (`None` when Lance does not hand it over).
    pub transaction: Option<&'a Transaction>,
}

impl Built<'_> {
    /// The head Lance's listing reached.
    pub fn head(&self) -> u64 {
        self.manifest.version.saturating_sub(1)
    }
}

/// Judges, at the manifest write, the writers that landed between the version a loop checked up to
/// and the one Lance's pre-write listing reached.
#[async_trait::async_trait]
pub trait Rejudge: Send + Sync + std::fmt::Debug {
    /// Lance built `built.manifest` past the version we checked up to. True only when the writers
    /// up to its head leave our transaction exactly as it stands: then the manifest may land.
    async fn admits(&self, built: Built<'_>) -> bool;
}

#[derive(Debug)]
pub struct ExpectVersion {
    inner: Arc<dyn CommitHandler>,
    expected: u64,
    rejudge: Option<Arc<dyn Rejudge>>,
    record: Mutex<WriteRecord>,
    /// When the inner put began, and how long it took once it answered.
    put: Mutex<(Option<Instant>, Option<Duration>)>,
}

/// What the wrapper decided about a manifest Lance handed it.
enum Gate {
    /// The version we checked up to, plus one.
    Expected,
    /// Past it, and the writers in between were judged and admitted.
    Rejudged,
    Refused(CommitError),
}

impl ExpectVersion {
    pub fn new(inner: Arc<dyn CommitHandler>, expected: u64) -> Self {
        Self {
            inner,
            expected,
            rejudge: None,
            record: Mutex::new(WriteRecord::NotAttempted),
            put: Mutex::new((None, None)),
        }
    }

    /// Ask `rejudge` about a manifest past the expected version instead of refusing it outright.
    pub fn with_rejudge(mut self, rejudge: Arc<dyn Rejudge>) -> Self {
        self.rejudge = Some(rejudge);
        self
    }

    /// How long the inner manifest put took, from its start to its answer (`None` when none was
    /// made): the window two writers of one version race in, which sizes the waits after a lost
    /// put ([`crate::retry::Attempts::collided_over`]).
    pub fn put_took(&self) -> Option<Duration> {
        self.put.lock().ok().and_then(|p| p.1)
    }

    pub fn record(&self) -> WriteRecord {
        self.record.lock().map(|r| r.clone()).unwrap_or(WriteRecord::NotAttempted)
    }

    fn set(&self, r: WriteRecord) {
        if let Ok(mut slot) = self.record.lock() {
            *slot = r;
        }
    }

    fn note(&self, result: &Result<ManifestLocation, CommitError>, version: u64, gate: &Gate) {
        self.set(match result {
            Ok(_) if matches!(gate, Gate::Rejudged) => WriteRecord::WrittenAfterRejudging { version },
            Ok(_) => WriteRecord::Written { version },
            Err(CommitError::CommitConflict) => WriteRecord::LostRace,
            Err(CommitError::OtherError(e)) => WriteRecord::Failed { message: e.to_string() },
        });
    }

    /// Before a put: refuse a manifest the gate refuses, so nothing is written.
    async fn before_put(&self, built: Built<'_>) -> Result<Gate, CommitError> {
        let gate = self.gate(built).await;
        if let Gate::Refused(refusal) = gate {
            return Err(refusal);
        }
        crate::crash::point("after-transaction-file");
        if let Ok(mut put) = self.put.lock() {
            put.0 = Some(Instant::now());
        }
        Ok(gate)
    }

    /// After a put: record what happened at it.
    fn after_put(&self, result: &Result<ManifestLocation, CommitError>, version: u64, gate: Gate) {
        if let Ok(mut put) = self.put.lock() {
            put.1 = put.0.map(|started| started.elapsed());
        }
        if result.is_ok() {
            crate::crash::point("after-manifest");
        }
        self.note(result, version, &gate);
    }

    /// Only `expected`, or a later version the rejudge admits. Lance builds versions in order, so a
    /// version below `expected` means a listing behind ours: refused without asking.
    async fn gate(&self, built: Built<'_>) -> Gate {
        if built.manifest.version == self.expected {
            return Gate::Expected;
        }
        if built.manifest.version > self.expected
            && let Some(rejudge) = &self.rejudge
            && rejudge.admits(built).await
        {
            return Gate::Rejudged;
        }
        self.set(WriteRecord::Refused { asked: built.manifest.version });
        Gate::Refused(CommitError::CommitConflict)
    }
}

crate::handler_around::commit_handler_around!(ExpectVersion, inner);
