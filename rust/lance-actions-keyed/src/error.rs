//! Typed errors of the keyed layer. Every one says what to do next; none leaves anything written,
//! except [`Error::PartlyWritten`], which says exactly what did land.

use lance_actions_commit::{CommitError, Exhausted, Interference};
use snafu::Snafu;

/// Why a key conflicted. All causes are the same external `KeyConflict` (`design/fencing.md` §2): a strict
/// insert never switches to an update, and the caller decides whether to resubmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictCause {
    /// The key was already present at the version the write read.
    AlreadyPresent,
    /// The key appears more than once in the rows given.
    DuplicateInBatch,
    /// A concurrent commit inserted the key first.
    InsertedConcurrently,
}

impl std::fmt::Display for ConflictCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConflictCause::AlreadyPresent => "already present",
            ConflictCause::DuplicateInBatch => "duplicated within the rows given",
            ConflictCause::InsertedConcurrently => "inserted by a concurrent commit",
        })
    }
}

/// The first few keys of a list and how many there are, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySample {
    pub first: Vec<String>,
    pub count: usize,
}

impl KeySample {
    pub const SHOWN: usize = 5;

    pub fn of(keys: impl IntoIterator<Item = String>) -> Self {
        let mut first = Vec::new();
        let mut count = 0;
        for key in keys {
            if first.len() < Self::SHOWN {
                first.push(key);
            }
            count += 1;
        }
        Self { first, count }
    }
}

impl std::fmt::Display for KeySample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.first.join(", "))?;
        if self.count > self.first.len() {
            write!(f, " and {} more", self.count - self.first.len())?;
        }
        Ok(())
    }
}

#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Error {
    #[snafu(display("key conflict: {count} key(s) {cause}: {keys}; nothing was written", count = keys.count))]
    KeyConflict { keys: KeySample, cause: ConflictCause },

    #[snafu(display("{count} key(s) to update are not present: {keys}; nothing was written", count = keys.count))]
    KeysNotFound { keys: KeySample },

    #[snafu(display("row {row} has a null value in key column '{column}'; keys are non-null"))]
    NullKey { row: usize, column: String },

    #[snafu(display(
        "the rows to replace are not where the caller located them at v{version}: {detail}; re-read the table and plan again, nothing was written"
    ))]
    RowsMoved { version: u64, detail: String },

    #[snafu(display("the rows given do not fit the table: {detail}"))]
    Input { detail: String },

    #[snafu(display("key column '{column}' has type {data_type}; a key is a string, binary or integer column"))]
    UnsupportedKeyType { column: String, data_type: String },

    #[snafu(display("{uri} is not a keyed table ({class}); create it keyed or run `lance-actions keyed migrate`"))]
    NotKeyed { uri: String, class: String },

    #[snafu(display("{uri} is not declared keyless append-only ({class}); plain appends are not allowed on it"))]
    NotKeyless { uri: String, class: String },

    #[snafu(display("a table already exists at {uri}; nothing was written"))]
    TableExists { uri: String },

    #[snafu(display("{uri}: {detail}"))]
    KeyMismatch { uri: String, detail: String },

    #[snafu(display(
        "{uri} is part way through a key migration (no fencing stamp on main yet); finish it with `lance-actions keyed migrate`"
    ))]
    MigrationIncomplete { uri: String },

    #[snafu(display("{uri} carries fencing format '{found}', which this version does not understand; upgrade"))]
    UnknownFormat { uri: String, found: String },

    #[snafu(display(
        "branch '{branch}' already has primary key {existing:?}, not {wanted:?}; a primary key cannot be changed once set"
    ))]
    DifferentPrimaryKey { branch: String, existing: Vec<String>, wanted: Vec<String> },

    #[snafu(display(
        "branch '{branch}' holds {count} duplicated key(s): {keys}; deduplicate them before migrating, nothing was written",
        count = keys.count
    ))]
    DuplicateKeysInBranch { branch: String, keys: KeySample },

    #[snafu(display(
        "branch '{branch}' is part way through a delete (retired with no successor); let the delete finish or be refused, then run the migration again (nothing was stamped)"
    ))]
    BranchBeingDeleted { branch: String },

    #[snafu(display("branch '{branch}' holds {count} row(s) with a null key; fix them before migrating"))]
    NullKeysInBranch { branch: String, count: usize },

    #[snafu(display("branch '{branch}' has no column '{column}' to key on"))]
    MissingKeyColumn { branch: String, column: String },

    #[snafu(display(
        "gave up after {attempts} attempts: concurrent writers kept changing the table ({last}); retry later"
    ))]
    Contention { attempts: usize, last: Interference },

    /// A write at known row addresses ([`crate::KeyedTable::replace_at`]) met a writer that landed
    /// after the version those addresses belong to. Running it again with the same addresses
    /// cannot help: they may name other rows now.
    #[snafu(display(
        "another writer landed after v{version}, the version the row addresses belong to ({last}); nothing was written: \
         locate the rows again at the table's new version and replace them there"
    ))]
    AddressesOutdated { version: u64, last: Interference },

    /// A strict insert's rows were staged for a version whose columns the table no longer has
    /// exactly: a commit since changed a column (added, dropped, retyped, made non-nullable) or the
    /// file format. Staged rows are committed as they are on every attempt (an append does not
    /// depend on its base), never into columns they were not written for.
    #[snafu(display(
        "the table's columns changed between v{staged}, which the rows were written for, and v{version} \
         ({detail}); nothing was written: retry the insert (with rows that have the table's current \
         columns if a column was added or dropped)"
    ))]
    SchemaChanged { staged: u64, version: u64, detail: String },

    /// A write of several chunks stopped after some chunks had landed: those stay (each chunk is
    /// atomic, the write as a whole is not), the rest was not written.
    #[snafu(display(
        "the write stopped part way: {rows} row(s) in {commits} commit(s) had already landed (up to v{version}) \
         and stay; the remaining rows were not written. Cause: {cause}"
    ))]
    PartlyWritten { commits: usize, rows: u64, version: u64, cause: String, inner: Box<Error> },

    #[snafu(display("{source}"))]
    Commit { source: CommitError },

    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },

    #[snafu(display("{source}"))]
    Branch { source: lance_actions_commit::branch_names::BranchError },

    #[snafu(display("{source}"))]
    Layer { source: lance_actions_commit::Error },

    #[snafu(display("{source}"))]
    Model { source: lance_actions::Error },
}

impl Error {
    /// May the same logical write succeed if the caller runs it again later?
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Contention { .. })
    }

    /// Did a concurrent writer end the write, so that it may succeed when planned again on a fresh
    /// read of the table: run again as it was ([`Error::is_retryable`]), or, for a write at row
    /// addresses, with the rows located again ([`Error::AddressesOutdated`])?
    pub fn is_interference(&self) -> bool {
        matches!(self, Error::Contention { .. } | Error::AddressesOutdated { .. })
    }

    /// Can no commit of the write this error ended have landed? True for every error but one from a
    /// commit itself whose outcome is not a refusal (an answer lost on the way back, a store that
    /// failed part way) and a write that says what landed.
    pub(crate) fn wrote_nothing(&self) -> bool {
        match self {
            Error::Commit { source } => matches!(source, CommitError::Fail { .. } | CommitError::Retry { .. }),
            Error::PartlyWritten { .. } => false,
            _ => true,
        }
    }

    /// `self`, or, when `outcome` shows commits already landed, [`Error::PartlyWritten`] wrapping it:
    /// an error never claims "nothing was written" after something was.
    pub(crate) fn after(self, outcome: &crate::WriteOutcome) -> Self {
        if outcome.commits.is_empty() {
            return self;
        }
        let cause = self.to_string().replace("; nothing was written", "").replace(", nothing was written", "");
        Error::PartlyWritten {
            commits: outcome.commits.len(),
            rows: outcome.inserted + outcome.updated + outcome.deleted,
            version: outcome.version,
            cause,
            inner: Box::new(self),
        }
    }
}

impl From<lance_actions_commit::Error> for Error {
    fn from(source: lance_actions_commit::Error) -> Self {
        Error::Layer { source }
    }
}

impl From<Exhausted<Interference>> for Error {
    fn from(Exhausted { attempts, last }: Exhausted<Interference>) -> Self {
        Error::Contention { attempts, last }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) trait LanceContext<T> {
    fn lance(self, what: impl Into<String>) -> Result<T>;
}

impl<T> LanceContext<T> for std::result::Result<T, lance::Error> {
    fn lance(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|source| Error::Lance { what: what.into(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WriteOutcome;

    fn missing() -> Error {
        Error::KeysNotFound { keys: KeySample::of(["999".to_string()]) }
    }

    #[test]
    fn an_error_after_a_landed_chunk_says_what_landed_and_never_nothing_was_written() {
        assert!(missing().after(&WriteOutcome::default()).to_string().contains("nothing was written"));
        let two_chunks = WriteOutcome {
            version: 3,
            updated: 20,
            commits: (2..=3)
                .map(|v| lance_actions_commit::CommitReport { version: v, read_version: v - 1, ..Default::default() })
                .collect(),
            ..Default::default()
        };
        let e = missing().after(&two_chunks);
        let text = e.to_string();
        assert!(matches!(e, Error::PartlyWritten { commits: 2, rows: 20, version: 3, .. }), "{text}");
        assert!(!text.contains("nothing was written"), "{text}");
        assert!(text.contains("20 row(s) in 2 commit(s)") && text.contains("999"), "{text}");
    }
}
