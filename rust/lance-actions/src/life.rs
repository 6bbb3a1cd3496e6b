//! What an action owns besides its conflict semantics ([`crate::Action`]): how it is written to
//! Lance, how it is re-bound when replayed onto another branch, how it composes in a squash, and how
//! it is described to people.
//!
//! Every action type in the catalog implements this trait in its own module, and the trait has no
//! default methods: the `catalog!` macro dispatches [`AnyAction`]'s implementation to each type's,
//! so a new action that lacks any of these does not compile (`design/action-model.md`, adding an
//! action).

use crate::action::AnyAction;
use crate::context::OperationKind;
use crate::error::Result;
use crate::rebind::{RebindRefusal, Rebinder};
use crate::squash::{Squash, SquashRefusal};
use crate::translate::Lowering;

/// Lowering, re-binding, squash composition and description: one implementation per action module.
pub trait ActionLife {
    /// Put this action into the slot of the Lance operation its transaction's `shell` lowers to.
    /// An action the slot already holds, or a payload the shell cannot carry, is a typed error.
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()>;

    /// This action as committed on a source branch, bound to the target's coordinates; or why it
    /// cannot be replayed.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal>;

    /// Fold this action into a squash of the commits it belongs to; or why it does not compose.
    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal>;

    /// A short description of the payload, e.g. `2 fragment(s), 14 exact key(s) on fields [0]`.
    fn describe(&self) -> String;
}
