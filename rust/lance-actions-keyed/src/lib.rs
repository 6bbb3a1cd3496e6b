//! # lance-actions-keyed
//!
//! Keyed Lance tables with key-conflict fencing (`design/fencing.md`). A table is declared keyed (or keyless
//! append-only) in its manifest; on a keyed table every write is an action sequence through the
//! commit driver that declares the keys it may insert, as an exact 64-bit key-hash set next to
//! Lance's own bloom filter. Two concurrent writes that may insert the same key never both commit
//! silently: the driver's key rule is symmetric in both commit orders.
//!
//! - [`KeyedTable`]: create / open, then `insert` (strict), `upsert`, `update`, `delete`, `overwrite`,
//!   and `replace_at` for a caller that already located the rows it replaces.
//! - [`KeylessTable`]: a table declared keyless append-only.
//! - [`migrate`]: install a primary key on an existing table across main and every branch, then
//!   write the fencing stamp.

pub mod chunk;
pub mod error;
pub mod key;
pub mod migrate;
pub mod probe;
mod replace;
mod stage;
mod staged;
pub mod table;
mod write;

pub use chunk::ChunkLimits;
pub use error::{ConflictCause, Error, KeySample, Result};
pub use key::KeySpec;
pub use lance_actions_commit::progress::{Progress, Tick};
pub use lance_actions_commit::retry::RetryPolicy;
pub use migrate::{MigrationReport, migrate, migrate_with_progress};
pub use replace::Located;
pub use staged::MAX_STAGED_FRAGMENTS;
pub use table::{KeyedTable, KeylessTable, WriteOptions, WriteOutcome};
