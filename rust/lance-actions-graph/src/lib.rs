//! # lance-actions-graph
//!
//! Keyed graphs on Lance with OmniGraph's three-way merge (`design/graph-merge.md`).
//!
//! A graph is a root directory holding one keyed table per node type and per edge type (key `id`)
//! and a graph manifest naming, per graph branch, the exact (Lance branch, version) of every
//! type's table. Every write and merge lands its table commits through the driver and then
//! publishes them all with one compare-and-swap commit of the manifest.
//!
//! - [`Graph`]: `init` / `open`, `branch`, `insert` / `upsert` / `delete` / `write`, `merge`,
//!   `scan`, `log`.
//! - [`GraphSchema`]: the schema file (types, property types, constraints).
//! - [`Conflict`]: the seven conflict kinds, reported as data.

pub mod conflict;
pub mod delta;
pub mod error;
pub mod graph;
pub mod manifest;
pub mod merge;
pub mod schema;
pub mod table;
pub mod validate;
pub mod value;

pub use conflict::{Conflict, ConflictKind};
pub use error::{Error, GraphOp, Moved, Result};
pub use graph::{Graph, WriteOp, WriteReport};
pub use lance_actions_commit::progress::{Progress, Tick};
pub use merge::{Decision, MergeOptions, MergeReport, Outcome, Strategy, decide, merge_base};
pub use schema::{GraphSchema, PropType, TypeDef};
pub use value::{Row, Value, row_from_json, row_id, row_to_json, rows_from_batch, rows_to_batch};
