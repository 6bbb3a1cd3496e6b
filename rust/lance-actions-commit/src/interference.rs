//! What made a write built on the commit loop run again. The layers above (keyed writes, replay,
//! graph writes) re-read and re-run a whole logical attempt when the loop answers this way, and
//! report the last one met when their attempts run out (their `Contention` errors), typed so that a
//! caller can tell a key race from a writer that only took the version first.

use std::fmt;

use lance_actions::{Reason, Rule};

use crate::CommitError;

/// Why a logical attempt must be run again on a fresh read of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interference {
    /// Our driver judged a writer that landed after the version the attempt read, and said Retry:
    /// the write must be re-read and re-executed on the new head.
    WriterLanded { reason: Box<Reason> },
    /// Every attempt of the commit loop lost its manifest write to other writers.
    VersionTaken { attempts: usize },
}

impl Interference {
    /// The interference a commit error stands for: a Retry verdict or lost writes. Any other error
    /// (a Fail verdict, IO, a refused input) is not one and is `None`.
    pub fn of(error: &CommitError) -> Option<Interference> {
        match error {
            CommitError::Retry { reason, .. } => Some(Interference::WriterLanded { reason: Box::new(reason.clone()) }),
            CommitError::RetriesExhausted { attempts, .. } => Some(Interference::VersionTaken { attempts: *attempts }),
            _ => None,
        }
    }

    /// A concurrent writer's keys met ours (or could not be checked against them): the fencing of
    /// `design/fencing.md`, as opposed to any other change under the write.
    pub fn is_key_race(&self) -> bool {
        matches!(self, Interference::WriterLanded { reason } if matches!(reason.rule, Rule::KeysIntersect | Rule::KeysUnverifiable))
    }

    /// The rule our driver applied, when a judgement (not a lost write) asked for the retry.
    pub fn rule(&self) -> Option<&Rule> {
        self.reason().map(|reason| &reason.rule)
    }

    /// The judgement that asked for the retry; `None` for lost writes.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Interference::WriterLanded { reason } => Some(reason),
            Interference::VersionTaken { .. } => None,
        }
    }

    /// A stable name for front ends (`"writer_landed"`, `"version_taken"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Interference::WriterLanded { .. } => "writer_landed",
            Interference::VersionTaken { .. } => "version_taken",
        }
    }
}

impl fmt::Display for Interference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interference::WriterLanded { reason } if self.is_key_race() => write!(f, "key race: {reason}"),
            Interference::WriterLanded { reason } => write!(f, "{reason}"),
            Interference::VersionTaken { attempts: 1 } => write!(f, "the commit lost its write to another writer"),
            Interference::VersionTaken { attempts } => write!(f, "{attempts} commit attempts lost to other writers"),
        }
    }
}

#[cfg(test)]
mod tests {
    use lance_actions::ActionKind;

    use super::*;
    use crate::CommitReport;

    fn reason(rule: Rule) -> Reason {
        Reason {
            rule,
            ours: ActionKind::AddFragments,
            peer_version: Some(7),
            peer_action: None,
            path: None,
            detail: String::new(),
        }
    }

    #[test]
    fn a_retry_verdict_and_lost_writes_are_interference_and_a_fail_verdict_is_not() {
        let report = || Box::new(CommitReport::default());
        let retry = CommitError::Retry { reason: reason(Rule::KeysIntersect), report: report() };
        let lost = CommitError::RetriesExhausted { attempts: 3, report: report() };
        let fail = CommitError::Fail { reason: reason(Rule::KeysIntersect), report: report() };
        let key_race = Interference::of(&retry).expect("a Retry verdict is interference");
        assert!(key_race.is_key_race());
        assert_eq!(key_race.rule(), Some(&Rule::KeysIntersect));
        assert!(key_race.to_string().starts_with("key race: "), "{key_race}");
        let taken = Interference::of(&lost).expect("lost writes are interference");
        assert_eq!(taken, Interference::VersionTaken { attempts: 3 });
        assert!(!taken.is_key_race());
        assert_eq!(taken.rule(), None);
        assert_eq!((key_race.kind(), taken.kind()), ("writer_landed", "version_taken"));
        assert_eq!(key_race.reason().map(|r| r.peer_version), Some(Some(7)));
        assert_eq!(taken.reason(), None);
        assert_eq!(taken.to_string(), "3 commit attempts lost to other writers");
        assert_eq!(Interference::of(&fail), None);
        // A loop of one attempt (a replay judged up to its read version) lost one write.
        let once = Interference::VersionTaken { attempts: 1 };
        assert_eq!(once.to_string(), "the commit lost its write to another writer");
    }

    #[test]
    fn a_writer_that_touched_no_key_is_no_key_race() {
        let other = Interference::WriterLanded { reason: Box::new(reason(Rule::HeadMoved)) };
        assert!(!other.is_key_race());
        assert!(!other.to_string().starts_with("key race"), "{other}");
    }
}
