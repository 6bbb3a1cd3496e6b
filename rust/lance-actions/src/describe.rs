//! One-line human summaries of actions, for `explain`, `log` and reasons. Each action module
//! describes its own payload ([`crate::ActionLife::describe`]); this adds the kind.

use crate::action::{Action, AnyAction};
use crate::life::ActionLife;

impl AnyAction {
    /// A short description of the action's payload, e.g. `AddFragments(2 fragments, 14 keys)`.
    pub fn summary(&self) -> String {
        format!("{:?}({})", self.kind(), self.describe())
    }
}
