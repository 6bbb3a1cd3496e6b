//! The `Action` trait, the closed catalog (`AnyAction`), and what a rebase sees of its peers.

use roaring::RoaringBitmap;

use crate::actions::*;
use crate::context::TxnContext;
use crate::path::{ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

/// Row-level facts a rebase may need that live in files, not in actions. The commit layer reads
/// them (deletion vectors) before the pure driver runs; `None` means unknown, and a rebase that
/// needs an unknown fact answers Retry.
pub trait RebaseFacts {
    /// The row offsets deleted in `fragment` by the deletion file named in `fragment.deletion_file`.
    fn deleted_rows(&self, fragment: &lance_table::format::Fragment) -> Option<RoaringBitmap>;
}

/// Facts for callers that have no storage at hand: every row-level fact is unknown.
pub struct NoFacts;

impl RebaseFacts for NoFacts {
    fn deleted_rows(&self, fragment: &lance_table::format::Fragment) -> Option<RoaringBitmap> {
        // A fragment without a deletion file has no deleted rows; that much is known without IO.
        fragment.deletion_file.is_none().then(RoaringBitmap::new)
    }
}

/// What one transaction does to indices as a whole: the segments it removes (name, uuid) and the
/// names it creates. Lance judges two index transactions by their whole operations (the index
/// rules of `design/action-model.md`): a segment added under a name the same transaction also removes is a
/// replacement of that name's segments, one without is an appended segment, and only an appended
/// segment races a concurrent drop of its name. So an index action's rebase consults these edits of
/// its own transaction (`RebaseCx::index_edits`) and of the peer's (`PeerAction::index_edits`).
/// They are coordinates, never changed by a rebase, so they are computed once per transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexEdits {
    pub removed: Vec<(String, uuid::Uuid)>,
    pub created: Vec<String>,
}

impl IndexEdits {
    pub fn of(actions: &[AnyAction]) -> Self {
        let mut edits = IndexEdits::default();
        for action in actions {
            match action {
                AnyAction::RemoveIndex(ri) => edits.removed.push((ri.index.name.clone(), ri.index.uuid)),
                AnyAction::AddIndex(ai) => edits.created.push(ai.index.name.clone()),
                _ => {}
            }
        }
        edits
    }

    pub fn removes_name(&self, name: &str) -> bool {
        self.removed.iter().any(|(n, _)| n == name)
    }

    pub fn removes_uuid(&self, uuid: uuid::Uuid) -> bool {
        self.removed.iter().any(|(_, u)| *u == uuid)
    }

    pub fn creates_name(&self, name: &str) -> bool {
        self.created.iter().any(|n| n == name)
    }
}

/// What a rebase can consult besides its peers.
pub struct RebaseCx<'a> {
    /// The table at our read version.
    pub base: &'a TableState,
    /// Our own transaction-level context.
    pub ours: &'a TxnContext,
    /// What our whole transaction does to indices (see `IndexEdits`).
    pub index_edits: &'a IndexEdits,
    pub facts: &'a dyn RebaseFacts,
    /// The table at the latest version, when the caller knows it: an action whose effect is already
    /// in place there (a key migration's steps replayed onto a migrated branch) can see so.
    pub head: Option<&'a TableState>,
    /// Every peer of this resolution, in commit order: a rebase may rest a check on a later peer's
    /// (a deletion vector superseded by a later one of the same fragment).
    pub peers: &'a [crate::driver::Peer],
}

/// One committed peer action whose writes overlap ours, with the overlapping paths.
#[derive(Clone, Copy)]
pub struct PeerAction<'a> {
    pub version: u64,
    pub action: &'a AnyAction,
    pub context: &'a TxnContext,
    /// What the peer's whole transaction did to indices (see `IndexEdits`).
    pub index_edits: &'a IndexEdits,
    pub our_path: &'a ManifestPath,
    pub their_path: &'a ManifestPath,
    /// The shell of the transaction being rebased (ours).
    pub our_shell: crate::context::OperationKind,
}

impl PeerAction<'_> {
    fn reason(&self, ours: ActionKind, rule: Rule, detail: impl Into<String>) -> Reason {
        Reason {
            rule,
            ours,
            peer_version: Some(self.version),
            peer_action: Some(self.action.kind()),
            path: Some(self.their_path.clone()),
            detail: detail.into(),
        }
    }

    pub fn retry(&self, ours: ActionKind, rule: Rule, detail: impl Into<String>) -> Verdict {
        Verdict::Retry(self.reason(ours, rule, detail))
    }

    pub fn fail(&self, ours: ActionKind, rule: Rule, detail: impl Into<String>) -> Verdict {
        Verdict::Fail(self.reason(ours, rule, detail))
    }

    /// The peer replaced the whole baseline (overwrite or restore) or is not understood.
    pub fn replaced_baseline(&self) -> bool {
        matches!(self.action, AnyAction::ResetTable(_) | AnyAction::Restore(_))
    }

    pub fn is_opaque(&self) -> bool {
        matches!(self.action, AnyAction::Opaque(_))
    }

    /// The usual answer when a peer replaced the baseline, is opaque, or is a standalone MemWAL state
    /// update (which claims the table's data is exactly what its log was compacted against; only a
    /// merge, the MemWAL's own write path, may race it, and the context checks its generations).
    pub fn baseline_verdict(&self, ours: ActionKind) -> Option<Verdict> {
        if matches!(self.action, AnyAction::UpdateMemWalState(_)) {
            return Some(if self.our_shell == crate::context::OperationKind::Update {
                Verdict::Ok
            } else {
                self.fail(ours, Rule::MemWalGeneration, "a MemWAL state update fixed the table data")
            });
        }
        if self.is_opaque() {
            Some(self.fail(ours, Rule::Opaque, "the committed operation is not understood"))
        } else if self.replaced_baseline() {
            Some(self.fail(ours, Rule::BaselineReplaced, "the table was replaced after our read"))
        } else {
            None
        }
    }
}

/// Validation failure: the action's precondition does not hold on the state it is applied to.
pub fn invalid(ours: ActionKind, detail: impl Into<String>) -> Reason {
    Reason { rule: Rule::Invalid, ours, peer_version: None, peer_action: None, path: None, detail: detail.into() }
}

/// One step of a transaction. Each implementation lives in its own module under `actions/` and owns
/// its definition, masks, rebase, apply and encoding.
pub trait Action {
    fn kind(&self) -> ActionKind;
    /// Paths whose committed change invalidates what this action planned.
    fn reads(&self) -> Mask;
    /// Paths this action changes.
    fn writes(&self) -> Mask;
    /// Does the precondition hold on `state`? Pure.
    fn validate(&self, state: &TableState) -> Result<(), Reason>;
    /// Called only with peers whose writes overlap our reads or writes. May adjust `self` (trim an
    /// index's coverage, mark a deletion vector for union) and answers for this action alone.
    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict;
    /// Apply to the in-progress state; late-bound outputs (fragment ids) go to `txn`.
    fn apply(&self, state: &mut TableState, txn: &mut TxnContext);
}

macro_rules! catalog {
    ($($name:ident => $module:ident),* $(,)?) => {
        /// Every action kind, as a tag.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ActionKind {
            $($name,)*
            /// The transaction-level context (MemWAL compaction progress), checked like an action.
            TxnContext,
        }

        impl ActionKind {
            pub const ALL: &'static [ActionKind] = &[$(ActionKind::$name,)*];
        }

        /// The closed catalog of actions.
        #[derive(Debug, Clone, PartialEq)]
        pub enum AnyAction {
            $($name($module::$name),)*
        }

        $(impl From<$module::$name> for AnyAction {
            fn from(a: $module::$name) -> Self { AnyAction::$name(a) }
        })*

        impl AnyAction {
            /// Encode into the wire format; each action module owns its message.
            pub fn encode(&self) -> crate::codec::proto::Action {
                use crate::codec::proto::action::Kind;
                crate::codec::proto::Action { kind: Some(match self { $(AnyAction::$name(a) => Kind::$name(a.encode()),)* }) }
            }

            /// Decode from the wire format. An action kind this build does not know is an error.
            pub fn decode(p: crate::codec::proto::Action) -> crate::error::Result<Self> {
                use crate::codec::proto::action::Kind;
                match p.kind {
                    $(Some(Kind::$name(k)) => Ok(AnyAction::$name($module::$name::decode(k)?)),)*
                    None => Err(crate::codec::corrupt(
                        "an action kind this build does not understand (written by a newer lance-actions?)",
                    )),
                }
            }
        }

        impl Action for AnyAction {
            fn kind(&self) -> ActionKind {
                match self { $(AnyAction::$name(a) => a.kind(),)* }
            }
            fn reads(&self) -> Mask {
                match self { $(AnyAction::$name(a) => a.reads(),)* }
            }
            fn writes(&self) -> Mask {
                match self { $(AnyAction::$name(a) => a.writes(),)* }
            }
            fn validate(&self, state: &TableState) -> Result<(), Reason> {
                match self { $(AnyAction::$name(a) => a.validate(state),)* }
            }
            fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
                match self { $(AnyAction::$name(a) => a.rebase(cx, peers),)* }
            }
            fn apply(&self, state: &mut TableState, txn: &mut TxnContext) {
                match self { $(AnyAction::$name(a) => a.apply(state, txn),)* }
            }
        }

        // Each arm names the action type's own implementation: an action type without one (or
        // without any of its methods, the trait has no defaults) does not compile.
        impl crate::life::ActionLife for AnyAction {
            fn lower_into(
                &self,
                slots: &mut crate::translate::Lowering,
                shell: crate::context::OperationKind,
            ) -> crate::error::Result<()> {
                match self {
                    $(AnyAction::$name(a) => <$module::$name as crate::life::ActionLife>::lower_into(a, slots, shell),)*
                }
            }
            fn rebind(
                &self,
                cx: &mut dyn crate::rebind::Rebinder,
            ) -> Result<AnyAction, crate::rebind::RebindRefusal> {
                match self { $(AnyAction::$name(a) => <$module::$name as crate::life::ActionLife>::rebind(a, cx),)* }
            }
            fn squash_into(&self, squash: &mut crate::squash::Squash) -> Result<(), crate::squash::SquashRefusal> {
                match self {
                    $(AnyAction::$name(a) => <$module::$name as crate::life::ActionLife>::squash_into(a, squash),)*
                }
            }
            fn describe(&self) -> String {
                match self { $(AnyAction::$name(a) => <$module::$name as crate::life::ActionLife>::describe(a),)* }
            }
        }

        // Every action module's own judging cases, run as one table: a module without its
        // `case_tests::cases()` does not compile (under test), and every case is named for the
        // direction and verdict it checks (`cases::check_module`).
        #[cfg(test)]
        #[test]
        fn every_action_module_judges_its_own_cases() {
            $(crate::actions::cases::check_module(ActionKind::$name, &$module::case_tests::cases());)*
        }
    };
}

catalog! {
    AddFragments => add_fragments,
    RemoveFragments => remove_fragments,
    UpdateDeletionVector => update_deletion_vector,
    ReplaceFragmentColumns => replace_fragment_columns,
    AddOverlay => add_overlay,
    RewriteFragments => rewrite_fragments,
    MergeColumns => merge_columns,
    InvalidateIndexCoverage => invalidate_index_coverage,
    AddIndex => add_index,
    RemoveIndex => remove_index,
    ChangeSchema => change_schema,
    ResetTable => reset_table,
    UpdateConfig => update_config,
    AddBases => add_bases,
    ReserveFragmentIds => reserve_fragment_ids,
    Restore => restore,
    CloneTable => clone_table,
    UpdateMemWalState => update_mem_wal_state,
    Opaque => opaque,
}

/// Fold per-peer answers into one verdict: the worst wins, and the first of equals is kept.
pub fn fold_verdicts<'a>(peers: &[PeerAction<'a>], mut f: impl FnMut(&PeerAction<'a>) -> Verdict) -> Verdict {
    peers.iter().fold(Verdict::Ok, |acc, p| acc.worst(f(p)))
}
