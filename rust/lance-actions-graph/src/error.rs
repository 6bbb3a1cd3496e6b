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

    #[snafu(display("graph branch '{branch}' moved while this {what} ran, {attempts} time(s); retry later"))]
    Contention { branch: String, what: String, attempts: usize },

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
