//! Typed errors of branch replay. Conflicts are not errors: they come back as data in an outcome.

use lance_actions_commit::CommitError;
use lance_actions_commit::branch_names::BranchError;
use snafu::Snafu;

#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Error {
    #[snafu(display("no branch named '{name}'; known branches: {}", known.join(", ")))]
    NoSuchBranch { name: String, known: Vec<String> },

    #[snafu(display("'{name}' is the physical branch behind '{logical}'; use the branch name '{logical}'"))]
    PhysicalName { name: String, logical: String },

    #[snafu(display("physical branch '{branch}' was retired: the branch now lives in '{successor}'"))]
    Retired { branch: String, successor: String },

    /// Met before a commit of `branch` was replayed: that commit and those after it were not; a
    /// merge's earlier commits may have landed (run it again: they are recognised).
    #[snafu(display(
        "physical branch '{branch}' was deleted while this operation ran; its commits from there on were not replayed"
    ))]
    BranchDeleted { branch: String },

    #[snafu(display("a branch named '{name}' already exists"))]
    BranchExists { name: String },

    #[snafu(display("'{name}' is not a valid branch name: {why}"))]
    InvalidName { name: String, why: String },

    #[snafu(display("version {version} of '{branch}' cannot be replayed: {why}; nothing was written"))]
    NotReplayable { branch: String, version: u64, why: Refusal },

    #[snafu(display("version {version} is not in the history of '{branch}' since it forked from '{target}'"))]
    NotInHistory { branch: String, version: u64, target: String },

    #[snafu(display(
        "cannot fast-forward '{target}' to '{from}': '{target}' has {commits} commit(s) of its own since they forked"
    ))]
    NotFastForward { from: String, target: String, commits: usize },

    #[snafu(display(
        "branch '{name}' changed while we worked on it (another rebase or delete won the race); nothing of ours is left behind"
    ))]
    NameRace { name: String },

    #[snafu(display("branch '{name}' is still referenced by {dependants:?}; merge or delete those first"))]
    InUse { name: String, dependants: Vec<String> },

    #[snafu(display("'main' cannot be {what}"))]
    Main { what: String },

    #[snafu(display("gave up after {attempts} attempts: concurrent writers kept changing '{branch}' ({last})"))]
    Contention { branch: String, attempts: usize, last: Interference },

    #[snafu(display("{source}"))]
    Commit { source: CommitError },

    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },

    #[snafu(display("{source}"))]
    Layer { source: lance_actions_commit::Error },

    /// The branch-name catalog could not be read or written.
    #[snafu(display("{source}"))]
    Names { source: BranchError },

    #[snafu(display("{source}"))]
    Model { source: lance_actions::Error },
}

impl From<BranchError> for Error {
    fn from(e: BranchError) -> Self {
        match e {
            BranchError::NoSuchBranch { name, known } => Error::NoSuchBranch { name, known },
            BranchError::PhysicalName { name, logical } => Error::PhysicalName { name, logical },
            BranchError::Retired { branch, successor } => Error::Retired { branch, successor },
            BranchError::Deleted { branch } => Error::BranchDeleted { branch },
            BranchError::Lance { what, source } => Error::Lance { what, source },
            source @ BranchError::Catalog { .. } => Error::Names { source },
        }
    }
}

impl From<lance_actions_commit::Error> for Error {
    fn from(source: lance_actions_commit::Error) -> Self {
        Error::Layer { source }
    }
}

/// Why a replay, rebase, squash or name change ran an attempt again: the last one met is what
/// [`Error::Contention`] reports, typed so that a caller can tell, say, a key race on the target
/// from a catalog that kept changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interference {
    /// A replayed commit met a writer on the target (the commit loop's own reason).
    Commit(lance_actions_commit::Interference),
    /// Another replay of the same source commit landed on the target first: the next attempt
    /// adopts it.
    ReplayedConcurrently { reason: Box<lance_actions::Reason> },
    /// The replay first added the base paths its commit reads the source's files through; the next
    /// attempt binds on the head that has them.
    BasesAdded,
    /// Writers landed on the branch while a rebase or squash rebuilt it (`operation`), so the
    /// rewrite started over from the new head.
    BranchMoved { operation: &'static str },
    /// Another branch name changed between our read of the name catalog and our write of it.
    CatalogChanged,
    /// Writers landed on a branch being deleted between our read of its head and its retirement.
    DeleteRaced,
}

impl Interference {
    /// A stable name for front ends: the commit loop's ([`lance_actions_commit::Interference::kind`])
    /// or replay's own (`"replayed_concurrently"`, `"bases_added"`, `"branch_moved"`,
    /// `"catalog_changed"`, `"delete_raced"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Interference::Commit(why) => why.kind(),
            Interference::ReplayedConcurrently { .. } => "replayed_concurrently",
            Interference::BasesAdded => "bases_added",
            Interference::BranchMoved { .. } => "branch_moved",
            Interference::CatalogChanged => "catalog_changed",
            Interference::DeleteRaced => "delete_raced",
        }
    }

    /// The judgement that asked for the retry, when one did.
    pub fn reason(&self) -> Option<&lance_actions::Reason> {
        match self {
            Interference::Commit(why) => why.reason(),
            Interference::ReplayedConcurrently { reason } => Some(reason),
            _ => None,
        }
    }

    /// A concurrent writer's keys met the replayed commit's (the fencing of `design/fencing.md`).
    pub fn is_key_race(&self) -> bool {
        matches!(self, Interference::Commit(why) if why.is_key_race())
    }
}

impl std::fmt::Display for Interference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interference::Commit(why) => write!(f, "{why}"),
            Interference::ReplayedConcurrently { reason } => {
                write!(f, "another replay of the same commit landed first ({reason})")
            }
            Interference::BasesAdded => write!(f, "the target gained the bases this replay needs"),
            Interference::BranchMoved { operation } => write!(f, "writers kept landing on it during the {operation}"),
            Interference::CatalogChanged => write!(f, "the branch name catalog kept changing"),
            Interference::DeleteRaced => write!(f, "writers kept landing on the branch being deleted"),
        }
    }
}

/// Why a source commit cannot be replayed, in the user's terms. Typed so callers can tell a commit
/// that needs another one first from one that can never be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Refusal {
    /// One of its actions cannot be bound to the target (the action module's own refusal).
    #[snafu(display("{source}"))]
    Rebind { source: lance_actions::RebindRefusal },

    /// The range it stands for does not compose into one commit.
    #[snafu(display("{source}"))]
    Squash { source: lance_actions::SquashRefusal },

    /// It squashes commits of which the target has some already.
    #[snafu(display("it squashes {commits} commits of which the target already has {known}"))]
    PartlyOnTarget { commits: usize, known: usize },

    /// Its replay created another number of fragments than it did, so they cannot be paired up.
    #[snafu(display("the replay created {replayed} fragment(s) where the source created {created}"))]
    FragmentCount { replayed: usize, created: usize },
}

impl From<lance_actions::RebindRefusal> for Refusal {
    fn from(source: lance_actions::RebindRefusal) -> Self {
        Refusal::Rebind { source }
    }
}

impl From<lance_actions::SquashRefusal> for Refusal {
    fn from(source: lance_actions::SquashRefusal) -> Self {
        Refusal::Squash { source }
    }
}

impl From<crate::remap::CountMismatch> for Refusal {
    fn from(m: crate::remap::CountMismatch) -> Self {
        Refusal::FragmentCount { replayed: m.replayed, created: m.source }
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
