//! The three-way verdict and its typed, readable reason.

use std::fmt;

use crate::{action::ActionKind, path::ManifestPath};

/// The rule that produced a Retry or Fail. Typed so tools can group verdicts; rendered for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// The committed peer replaced the baseline (overwrite, restore); our work was planned on the old one.
    BaselineReplaced,
    /// The committed peer removed or rewrote a fragment we use.
    FragmentGone,
    /// Both transactions changed the same rows of a fragment.
    RowsOverlap,
    /// Row-level overlap cannot be decided (affected rows unknown on one side).
    RowsUnknown,
    /// The committed peer changed data files of a fragment we change.
    DataFilesChanged,
    /// Inserted key sets intersect (exactly, or by Lance's bloom filter).
    KeysIntersect,
    /// One side inserts keys it has not declared, so the other side's uniqueness claim is unverifiable.
    KeysUnverifiable,
    /// The schema changed under values we write or read.
    SchemaChanged,
    /// The same index name, or the same index, is written by both.
    IndexClash,
    /// The same config or metadata key is written by both.
    ConfigClash,
    /// The same base id, name or path is added by both.
    BaseClash,
    /// A MemWAL shard generation was already compacted by the peer (Fail) or is behind ours (Retry).
    MemWalGeneration,
    /// One side is an operation this build does not understand; it conflicts with everything.
    Opaque,
    /// An action's precondition no longer holds on the current table.
    Invalid,
    /// Lance's resolver rejects this pair and the model keeps Lance's answer.
    LanceCompatible,
    /// Both transactions replay the same original commit: the first one to land has it.
    AlreadyReplayed,
    /// A replayed insert would add keys the target already holds (found by probing the target at
    /// the version the replay lands on): replaying it would duplicate them.
    KeysPresent,
    /// The branch was retired (rebased, squashed or deleted) or moved under its retirement.
    BranchRetired,
    /// A writer landed after the head a caller judged its transaction against itself (a replay):
    /// it judges again on the new head.
    HeadMoved,
}

/// Why a transaction cannot commit as is: names our action, the committed peer's version and action,
/// and the overlapping path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub rule: Rule,
    pub ours: ActionKind,
    pub peer_version: Option<u64>,
    pub peer_action: Option<ActionKind>,
    pub path: Option<ManifestPath>,
    pub detail: String,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: our {:?}", self.rule, self.ours)?;
        if let (Some(v), Some(a)) = (self.peer_version, &self.peer_action) {
            write!(f, " vs {a:?} committed at v{v}")?;
        }
        if let Some(p) = &self.path {
            write!(f, " on {p}")?;
        }
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// Ok: commutes or was rebased. Retry: re-read and re-execute. Fail: incompatible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Retry(Reason),
    Fail(Reason),
}

impl Verdict {
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }

    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Verdict::Ok => None,
            Verdict::Retry(r) | Verdict::Fail(r) => Some(r),
        }
    }

    /// Lower-case label used by the CLI's JSON and the conformance test.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Retry(_) => "retry",
            Verdict::Fail(_) => "fail",
        }
    }

    fn severity(&self) -> u8 {
        match self {
            Verdict::Ok => 0,
            Verdict::Retry(_) => 1,
            Verdict::Fail(_) => 2,
        }
    }

    /// The more severe of two verdicts: Fail outranks Retry outranks Ok; the first wins ties.
    pub fn worst(self, other: Verdict) -> Verdict {
        if other.severity() > self.severity() { other } else { self }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Ok => write!(f, "ok"),
            Verdict::Retry(r) => write!(f, "retry: {r}"),
            Verdict::Fail(r) => write!(f, "fail: {r}"),
        }
    }
}
