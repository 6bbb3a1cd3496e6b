//! # lance-actions
//!
//! Lance transactions re-modelled as ordered lists of actions. Each action declares the manifest
//! paths it reads and writes; conflicts emerge from mask overlap plus a peer-inspecting `rebase`, and
//! the verdict is three-way: Ok (commutes or rebased), Retry (re-read and re-execute), Fail
//! (incompatible). This crate is pure: no IO. Row-level facts a rebase needs come through
//! [`action::RebaseFacts`], which the commit layer implements.

pub mod action;
pub mod actions;
pub mod codec;
pub mod context;
pub mod describe;
pub mod driver;
pub mod error;
pub mod keys;
pub mod life;
#[cfg(any(test, feature = "matrix"))]
pub mod matrix;
pub mod path;
pub mod rebind;
pub mod retired;
#[cfg(any(test, feature = "matrix"))]
pub mod samples;
pub mod screen;
pub mod squash;
pub mod state;
pub mod table_class;
pub mod translate;
pub mod txn;
pub mod verdict;

pub use action::{Action, ActionKind, AnyAction, NoFacts, RebaseFacts};
pub use context::{OperationKind, TxnContext};
pub use driver::{
    Inputs, Peer, Prepared, Resolution, judge_peer, resolve, resolve_in_place, resolve_prepared, resolve_without_peers,
};
pub use error::{Error, Result};
pub use life::ActionLife;
pub use path::{ManifestPath, Mask};
pub use rebind::{RebindRefusal, Rebinder};
pub use squash::{Squash, SquashRefusal, Squashed};
pub use state::TableState;
pub use translate::{lift, lower};
pub use txn::ActionTxn;
pub use verdict::{Reason, Rule, Verdict};
