//! # lance-actions-replay
//!
//! Branch replay on Lance (the primitive of Lance #7263): a commit of one branch is replayed onto
//! another as actions through the commit driver, its data files referenced in place through a
//! grafted base path, its fragment ids re-bound and its deletion files re-derived. Cherry-pick,
//! merge, fast-forward, rebase and squash are sequences of that primitive. Logical branch names map
//! to physical Lance branches (Lance #7185), so a rebase swaps a name instead of moving data.

pub mod compose;
pub mod error;
pub mod graft;
mod keycheck;
pub mod lineage;
pub mod materialize;
pub mod names;
pub mod ops;
pub mod provenance;
pub mod remap;
pub mod replay;

pub use error::{Error, Interference, Refusal, Result};
pub use lance_actions_commit::progress::{Progress, Tick};
pub use lance_actions_commit::retry::RetryPolicy;
pub use materialize::Materialized;
pub use names::{Branches, RetiredBranch};
pub use ops::{Outcome, ReplayOptions};
pub use replay::{Conflict, Landed};
