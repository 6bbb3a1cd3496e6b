//! What the action modules' own case tests share: the synthetic table of the generated matrix, a
//! rebinder with fixed coordinates, and one-line judges. Each module's tests are tables of cases
//! named for the direction they check (`ours_after_committed_theirs_verdict`).

use std::collections::HashMap;

use lance_table::format::{DataFile, Fragment, IndexMetadata};
use roaring::RoaringBitmap;

use crate::action::{Action, ActionKind, AnyAction, NoFacts};
use crate::context::OperationKind;
use crate::driver::{Inputs, Peer, resolve};
use crate::life::ActionLife;
use crate::rebind::{RebindRefusal, Rebinder};
use crate::squash::{Squash, SquashRefusal, Squashed};
use crate::state::TableState;
use crate::txn::ActionTxn;

/// The table the cases are read against: fragments 0..=3 (fields 0, 1, 2), index `id_idx` on field
/// 0, config `k1 = a` (the generated matrix's table).
pub fn table() -> TableState {
    crate::matrix::sample_state()
}

/// Fragment `id` of [`table`], as a writer holds it.
pub fn fragment(id: u64) -> Fragment {
    let mut f = table().fragment(id.min(3)).cloned().unwrap_or_else(|| Fragment::new(id));
    f.id = id;
    f
}

/// One judging case: our transaction after a committed one, and the verdict label expected.
pub struct Case {
    pub name: &'static str,
    pub ours: ActionTxn,
    pub theirs: ActionTxn,
    pub expect: &'static str,
}

pub fn case(name: &'static str, ours: ActionTxn, theirs: ActionTxn, expect: &'static str) -> Case {
    Case { name, ours, theirs, expect }
}

/// A transaction of one shell.
pub fn txn(shell: OperationKind, actions: Vec<AnyAction>) -> ActionTxn {
    ActionTxn::new(shell, actions)
}

/// A plain append of one fragment: the writer most cases judge an action against.
pub fn append() -> ActionTxn {
    let add = crate::actions::add_fragments::AddFragments { fragments: vec![fragment(0)], keys: None };
    txn(OperationKind::Append, vec![add.into()])
}

/// The verdict label of `ours` after `theirs` committed on [`table`] (validated at the head).
pub fn verdict(ours: &ActionTxn, theirs: &ActionTxn) -> &'static str {
    let base = table();
    let peers = [Peer::new(2, theirs.clone())];
    resolve(ours, &Inputs { base: &base, head: None, peers: &peers, facts: &NoFacts }).verdict.label()
}

/// Every case's verdict is what its name says.
pub fn check(cases: &[Case]) {
    for c in cases {
        assert_eq!(verdict(&c.ours, &c.theirs), c.expect, "{}", c.name);
    }
}

/// An action module's own cases ([`crate::action`]'s catalog runs every module's): at least one,
/// each with the module's action on one side or both, each named `ours_after_committed_theirs_<verdict>`
/// with the verdict word its label expects (`commutes` for ok, `retries`, `fails`), and each judged
/// as its name says.
pub fn check_module(action: ActionKind, cases: &[Case]) {
    assert!(!cases.is_empty(), "{action:?}: an action module judges at least one case of its own");
    let holds = |t: &ActionTxn| t.actions.iter().any(|a| a.kind() == action);
    for c in cases {
        assert!(holds(&c.ours) || holds(&c.theirs), "{action:?}: '{}' judges another action", c.name);
        assert!(c.name.contains("_after_committed_"), "{action:?}: '{}' names no direction", c.name);
        let word = match c.expect {
            "ok" => "_commutes",
            "retry" => "_retries",
            "fail" => "_fails",
            other => panic!("{action:?}: '{}' expects an unknown verdict '{other}'", c.name),
        };
        assert!(c.name.ends_with(word), "{action:?}: '{}' expects {} but its name ends otherwise", c.name, c.expect);
    }
    check(cases);
}

/// Coordinates of a target branch: fragments up to 3 existed at the fork, source fragment 10 was
/// replayed as target fragment 20, every source base (and the source root) is target base 7, and
/// the head is [`table`] with fragment 1 carrying the target's own deletion file.
pub struct Target {
    pub head: TableState,
    pub created: HashMap<u64, u64>,
}

impl Default for Target {
    fn default() -> Self {
        let mut head = table();
        if let Some(f) = head.fragments.get_mut(&1) {
            f.deletion_file = Some(lance_table::format::DeletionFile {
                read_version: 2,
                id: 99,
                file_type: lance_table::format::DeletionFileType::Array,
                num_deleted_rows: Some(1),
                base_id: None,
            });
        }
        Self { head, created: HashMap::from([(10, 20)]) }
    }
}

pub const GRAFTED_BASE: u32 = 7;

impl Rebinder for Target {
    fn fragment_id(&mut self, source: u64) -> Result<u64, RebindRefusal> {
        if source <= 3 {
            return Ok(source);
        }
        self.created.get(&source).copied().ok_or(RebindRefusal::UnreplayedFragment { fragment: source })
    }

    fn head_fragment(&mut self, source: &Fragment) -> Result<Fragment, RebindRefusal> {
        let id = self.fragment_id(source.id)?;
        Ok(crate::rebind::head_fragment_or_source(&self.head, source, id))
    }

    fn head_fragment_ids(&self) -> Vec<u64> {
        self.head.fragments.keys().copied().collect()
    }

    fn data_file(&mut self, file: &DataFile) -> Result<DataFile, RebindRefusal> {
        let mut out = file.clone();
        out.base_id = Some(GRAFTED_BASE);
        Ok(out)
    }

    fn index(&mut self, index: &IndexMetadata) -> Result<IndexMetadata, RebindRefusal> {
        let mut out = index.clone();
        out.base_id = Some(GRAFTED_BASE);
        Ok(out)
    }
}

/// `action` re-bound to the default [`Target`].
pub fn rebound(action: impl Into<AnyAction>) -> Result<AnyAction, RebindRefusal> {
    action.into().rebind(&mut Target::default())
}

/// One commit of a squash range: its version, the fragment ids it created, its actions.
pub type Commit = (u64, Vec<u64>, Vec<AnyAction>);

/// The squash of `commits`.
pub fn squashed(commits: Vec<Commit>) -> Result<Squashed, SquashRefusal> {
    let mut squash = Squash::default();
    for (version, ids, actions) in commits {
        squash.commit(version, &ids, &actions)?;
    }
    squash.finish()
}

/// A bitmap of row offsets.
pub fn rows(offsets: &[u32]) -> RoaringBitmap {
    offsets.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_case_named_for_its_direction_and_verdict_passes() {
        check_module(
            ActionKind::AddFragments,
            &[case("append_after_committed_append_commutes", append(), append(), "ok")],
        );
    }

    #[test]
    #[should_panic(expected = "judges at least one case")]
    fn a_module_without_cases_is_refused() {
        check_module(ActionKind::AddFragments, &[]);
    }

    #[test]
    #[should_panic(expected = "names no direction")]
    fn a_case_without_a_direction_is_refused() {
        check_module(ActionKind::AddFragments, &[case("two_appends_commute", append(), append(), "ok")]);
    }

    #[test]
    #[should_panic(expected = "judges another action")]
    fn a_case_of_another_action_is_refused() {
        check_module(ActionKind::Restore, &[case("append_after_committed_append_commutes", append(), append(), "ok")]);
    }

    #[test]
    #[should_panic(expected = "its name ends otherwise")]
    fn a_case_named_for_another_verdict_is_refused() {
        check_module(
            ActionKind::AddFragments,
            &[case("append_after_committed_append_retries", append(), append(), "ok")],
        );
    }
}
