//! # lance-actions-commit
//!
//! The layer between the pure action model and real Lance datasets: it reads the committed history
//! as actions (decoding our own encoded lists fail-closed, lifting everything else), performs the IO
//! a rebase needs (deletion vectors), and runs Lance's own resolver side by side as an oracle.

#[cfg(feature = "bench")]
pub mod bench;
pub mod branch_names;
pub mod commit;
pub mod crash;
pub mod deletions;
pub mod error;
pub mod expect_version;
mod handler_around;
pub mod history;
pub mod hooks;
pub mod interference;
pub mod json;
pub mod judge;
pub mod known;
pub mod location;
mod oldest_first;
pub mod oracle;
pub mod presence;
pub mod progress;
pub mod retry;
#[cfg(feature = "samples")]
pub mod scenario;
pub mod staged_delete;
pub mod states;
pub mod storage;

pub use commit::{ActionCommit, CommitError, CommitReport, DatasetActionsExt};
pub use error::{Error, Result};
pub use interference::Interference;
pub use judge::{Judgement, judge, judge_against};
pub use oracle::LanceVerdict;
pub use retry::{Attempts, Exhausted, RetryPolicy};
pub use staged_delete::{StagedDelete, stage_delete};
