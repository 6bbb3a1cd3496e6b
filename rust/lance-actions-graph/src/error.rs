//! Typed errors, each with a message in the user's terms (graph branch, type, id).

use snafu::Snafu;

use crate::conflict::Conflict;

#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Error {
    #[snafu(display("schema: {detail}"))]
    Schema { detail: String },

    #[snafu(display("unknown type '{name}'; the schema declares no such node or edge type"))]
    UnknownType { name: String },

    #[snafu(display("bad input: {detail}; nothing was written"))]
    Input { detail: String },

    #[snafu(display("{root} is not a graph (no graph manifest); create it with `lance-actions graph init`"))]
    NotAGraph { root: String },

    #[snafu(display("{root} already holds a graph"))]
    GraphExists { root: String },

    #[snafu(display("no graph branch '{name}'"))]
    NoSuchBranch { name: String },

    #[snafu(display("graph branch '{name}' already exists"))]
    BranchExists { name: String },

    #[snafu(display("invalid graph branch name '{name}': {why}"))]
    InvalidName { name: String, why: String },

    #[snafu(display("branches '{source_branch}' and '{target}' have no common ancestor"))]
    NoCommonAncestor { source_branch: String, target: String },

    #[snafu(display("cannot merge branch '{name}' into itself"))]
    SameBranch { name: String },

    #[snafu(display(
        "{count} id(s) of {type_key} are already present: {sample}; a strict insert never updates, nothing was written"
    ))]
    AlreadyPresent { type_key: String, count: usize, sample: String },

    /// A write refused by a constraint, with the same conflict kinds a merge reports.
    #[snafu(display("{} constraint violation(s), nothing was written: {}", conflicts.len(), crate::conflict::summary(conflicts)))]
    Violations { conflicts: Vec<Conflict> },

    #[snafu(display(
        "this {what} on graph branch '{branch}' gave up after {attempts} attempt(s), the last because {last}; nothing of it was published: retry later"
    ))]
    Contention { branch: String, what: GraphOp, attempts: usize, last: Moved },

    #[snafu(display("{detail}"))]
    Unsupported { detail: String },

    #[snafu(display("graph manifest is damaged: {detail}"))]
    Corrupt { detail: String },

    #[snafu(display("{source}"))]
    Keyed { source: lance_actions_keyed::Error },

    #[snafu(display("{source}"))]
    Commit { source: lance_actions_commit::CommitError },

    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },

    #[snafu(display("{what}: {source}"))]
    Io { what: String, source: std::io::Error },

    #[snafu(display("{what}: {source}"))]
    Arrow { what: String, source: arrow_schema::ArrowError },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<lance_actions_keyed::Error> for Error {
    fn from(source: lance_actions_keyed::Error) -> Self {
        Error::Keyed { source }
    }
}

pub(crate) trait Context<T> {
    fn lance(self, what: impl Into<String>) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, lance::Error> {
    fn lance(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|source| Error::Lance { what: what.into(), source })
    }
}

/// A graph operation that runs again when its branch or one of its tables moves under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphOp {
    Write,
    Merge,
    IndexBuild,
}

impl std::fmt::Display for GraphOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GraphOp::Write => "write",
            GraphOp::Merge => "merge",
            GraphOp::IndexBuild => "index build",
        })
    }
}

/// What moved under an attempt of a graph operation, so that it ran again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// Another writer published a new version of the branch between our read and our publish.
    Branch,
    /// Another writer committed to a type's table under ours (`why` in the table's terms;
    /// `key_race`: its keys met ours, a concurrent insert of an id this write inserts; `judged`:
    /// the judgement of that writer's commit against ours, when one was made).
    Table { type_key: String, why: String, key_race: bool, judged: Option<Box<lance_actions::Reason>> },
}

impl Moved {
    /// A short name for the cause, stable for programs: `"branch_moved"` or `"table_moved"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Moved::Branch => "branch_moved",
            Moved::Table { .. } => "table_moved",
        }
    }

    /// Did a concurrent writer's keys meet this write's?
    pub fn is_key_race(&self) -> bool {
        matches!(self, Moved::Table { key_race: true, .. })
    }

    /// The judgement of the other writer's commit against ours, when one was made.
    pub fn reason(&self) -> Option<&lance_actions::Reason> {
        match self {
            Moved::Table { judged, .. } => judged.as_deref(),
            Moved::Branch => None,
        }
    }
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Moved::Branch => f.write_str("another writer published to the branch first"),
            Moved::Table { type_key, why, .. } => {
                write!(f, "another writer committed to the table of {type_key} ({why})")
            }
        }
    }
}
