//! InvalidateIndexCoverage: the listed fragments' data in `fields` changed, so every index covering
//! one of those fields must stop claiming those fragments. A criterion action: it names no index,
//! and is evaluated against whatever indices exist when it applies, so it commutes with index
//! creation. Implied by `Update.fields_modified` (Lance prunes the bitmaps when it builds the manifest).
//!
//! A rewritten field is rewritten with every field nested under it (a packed struct is one physical
//! column, while an index on `s.x` names the child's id), so the criterion covers the descendants
//! too (`nested`), as Lance's resolver expands `fields_modified` through the schema before it
//! withdraws an index (model bug 15, `tests/upstream/README.md`). The model is schema-free, so the
//! descendants are filled where the schema is at hand: by the commit layer for every committed peer,
//! from the read version's schema ([`InvalidateIndexCoverage::fill_nested`]).

use super::life_prelude::*;
use crate::action::{Action, ActionKind, PeerAction, RebaseCx, fold_verdicts};
use crate::codec::proto;
use crate::context::TxnContext;
use crate::error::Result;
use crate::path::{IndexScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Verdict};
use lance_core::datatypes::{Field, Schema};

#[derive(Debug, Clone, PartialEq)]
pub struct InvalidateIndexCoverage {
    pub fragments: Vec<u64>,
    /// Lance's `fields_modified`, kept in its order.
    pub fields: Vec<u32>,
    /// The fields nested under `fields` (not in it), ascending. Derived from a schema, never
    /// encoded or lowered: empty until [`Self::fill_nested`], which then covers `fields` alone.
    pub nested: Vec<u32>,
}

impl Action for InvalidateIndexCoverage {
    fn kind(&self) -> ActionKind {
        ActionKind::InvalidateIndexCoverage
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        Mask(
            self.covered_fields()
                .map(|field| ManifestPath::IndicesCoveringField { field, scope: IndexScope::Coverage })
                .collect(),
        )
    }

    fn validate(&self, _state: &TableState) -> Result<(), Reason> {
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| p.baseline_verdict(ActionKind::InvalidateIndexCoverage).unwrap_or(Verdict::Ok))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        let fields: Vec<i32> = self.covered_fields().collect();
        for index in state.indices.iter_mut().filter(|i| i.fields.iter().any(|f| fields.contains(f))) {
            if let Some(bitmap) = index.fragment_bitmap.as_mut() {
                for id in &self.fragments {
                    bitmap.remove(*id as u32);
                }
            }
        }
    }
}

impl InvalidateIndexCoverage {
    /// Coverage withdrawn from `fragments` for `fields` (nothing nested known yet).
    pub fn new(fragments: Vec<u64>, fields: Vec<u32>) -> Self {
        Self { fragments, fields, nested: Vec::new() }
    }

    /// The fields whose indices lose coverage: the rewritten ones and those nested under them.
    fn covered_fields(&self) -> impl Iterator<Item = i32> + '_ {
        self.fields.iter().chain(&self.nested).map(|&f| f as i32)
    }

    /// Fill `nested` from `schema`: every descendant of a rewritten field that is not itself
    /// listed. A field id the schema does not hold has no descendants there.
    pub fn fill_nested(&mut self, schema: &Schema) {
        let mut nested = Vec::new();
        let mut pending: Vec<&Field> = self
            .fields
            .iter()
            .filter_map(|&id| i32::try_from(id).ok().and_then(|id| schema.field_by_id(id)))
            .flat_map(|f| f.children.iter())
            .collect();
        while let Some(child) = pending.pop() {
            if let Ok(id) = u32::try_from(child.id)
                && !self.fields.contains(&id)
            {
                nested.push(id);
            }
            pending.extend(child.children.iter());
        }
        nested.sort_unstable();
        nested.dedup();
        self.nested = nested;
    }

    pub(crate) fn encode(&self) -> proto::InvalidateIndexCoverage {
        proto::InvalidateIndexCoverage { fragments: self.fragments.clone(), fields: self.fields.clone() }
    }

    pub(crate) fn decode(p: proto::InvalidateIndexCoverage) -> Result<Self> {
        Ok(Self::new(p.fragments, p.fields))
    }
}

impl ActionLife for InvalidateIndexCoverage {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.invalidate, self.clone(), shell, "InvalidateIndexCoverage")
    }

    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let fragments = rebind::fragment_ids(cx, &self.fragments)?;
        Ok(InvalidateIndexCoverage { fragments, fields: self.fields.clone(), nested: self.nested.clone() }.into())
    }

    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal> {
        squash.invalidated_fragments.extend(self.fragments.iter().copied());
        for field in &self.fields {
            if !squash.invalidated_fields.contains(field) {
                squash.invalidated_fields.push(*field);
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        if self.nested.is_empty() {
            format!("fields {:?} on fragments {:?}", self.fields, self.fragments)
        } else {
            format!("fields {:?} (nested {:?}) on fragments {:?}", self.fields, self.nested, self.fragments)
        }
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::action::NoFacts;
    use crate::actions::cases::*;
    use crate::driver::{Inputs, Peer, resolve};

    pub(crate) fn cases() -> Vec<Case> {
        let index = |field: i32| {
            let index =
                crate::samples::index_on(uuid::Uuid::from_u128(9), "new_idx", field, 1, [1u32].into_iter().collect());
            txn(OperationKind::CreateIndex, vec![crate::actions::add_index::AddIndex { index }.into()])
        };
        let update = txn(
            OperationKind::Update,
            vec![
                crate::actions::update_deletion_vector::UpdateDeletionVector::new(fragment(1), Some(rows(&[0]))).into(),
                crate::actions::add_fragments::AddFragments { fragments: vec![fragment(4)], keys: None }.into(),
                InvalidateIndexCoverage::new(vec![1], vec![1]).into(),
            ],
        );
        // The index stops claiming the fragment the update rewrote (as Lance's rebase withdraws it).
        vec![
            case("index_after_committed_update_rewriting_its_field_commutes", index(1), update.clone(), "ok"),
            case("index_after_committed_update_of_another_field_commutes", index(2), update.clone(), "ok"),
            case("update_after_committed_index_on_the_rewritten_field_commutes", update, index(1), "ok"),
        ]
    }

    #[test]
    fn rebind_maps_fragments_and_squash_joins_fields_in_first_seen_order() {
        let inv = InvalidateIndexCoverage::new;
        assert_eq!(rebound(inv(vec![1, 10], vec![1])), Ok(inv(vec![1, 20], vec![1]).into()));
        assert_eq!(rebound(inv(vec![12], vec![1])), Err(RebindRefusal::UnreplayedFragment { fragment: 12 }));
        let only_coverage = squashed(vec![(5, vec![], vec![inv(vec![1], vec![2]).into()])]);
        assert_eq!(only_coverage.map(|s| s.new_ids), Err(SquashRefusal::CoverageWithoutUpdate), "needs an update");
        let delete = |id| {
            AnyAction::from(crate::actions::update_deletion_vector::UpdateDeletionVector::new(
                fragment(id),
                Some(rows(&[0])),
            ))
        };
        let add =
            AnyAction::from(crate::actions::add_fragments::AddFragments { fragments: vec![fragment(0)], keys: None });
        let s = squashed(vec![
            (5, vec![4], vec![delete(1), add, inv(vec![1], vec![2, 1]).into()]),
            (6, vec![], vec![delete(2), inv(vec![2], vec![1, 3]).into()]),
        ])
        .expect("composes");
        assert_eq!(s.txn.shell(), OperationKind::Update);
        assert_eq!(s.txn.actions.last(), Some(&inv(vec![1, 2], vec![2, 1, 3]).into()));
        assert_eq!(inv(vec![1], vec![2]).describe(), "fields [2] on fragments [1]");
    }

    /// Model bug 15: a packed struct `s` (field 1) rewritten in place names only `s`; an index on
    /// its child `s.x` (field 2) built meanwhile must still stop claiming the rewritten fragment.
    #[test]
    fn a_rewritten_struct_withdraws_the_coverage_of_an_index_on_its_child() {
        use crate::actions::add_index::AddIndex;
        use arrow_schema::{DataType, Field as ArrowField, Fields, Schema as ArrowSchema};
        let children = Fields::from(vec![
            ArrowField::new("x", DataType::Int32, false),
            ArrowField::new("y", DataType::Int32, false),
        ]);
        let arrow = ArrowSchema::new(vec![
            ArrowField::new("i", DataType::Int32, false),
            ArrowField::new("s", DataType::Struct(children), false),
        ]);
        let mut schema = Schema::try_from(&arrow).expect("a lance schema");
        schema.set_field_id(None);
        let mut inv = InvalidateIndexCoverage::new(vec![1], vec![1]);
        inv.fill_nested(&schema);
        assert_eq!(inv.nested, vec![2, 3], "x and y are rewritten with s");
        assert_eq!(inv.describe(), "fields [1] (nested [2, 3]) on fragments [1]");

        let child_index = |fragments: &[u32]| AddIndex {
            index: crate::samples::index_on(
                uuid::Uuid::from_u128(7),
                "x_idx",
                2,
                1,
                fragments.iter().copied().collect(),
            ),
        };
        let ours = txn(OperationKind::CreateIndex, vec![child_index(&[0, 1]).into()]);
        let peers = [Peer::new(2, txn(OperationKind::Update, vec![inv.clone().into()]))];
        let base = table();
        let resolved = resolve(&ours, &Inputs { base: &base, head: None, peers: &peers, facts: &NoFacts });
        assert_eq!(resolved.verdict.label(), "ok");
        assert_eq!(resolved.txn.actions, vec![child_index(&[0]).into()], "fragment 1 is withdrawn");

        // Unfilled (no schema at hand), the criterion covers `s` alone and the child index keeps 1.
        let unfilled =
            [Peer::new(2, txn(OperationKind::Update, vec![InvalidateIndexCoverage::new(vec![1], vec![1]).into()]))];
        let resolved = resolve(&ours, &Inputs { base: &base, head: None, peers: &unfilled, facts: &NoFacts });
        assert_eq!(resolved.txn.actions, vec![child_index(&[0, 1]).into()]);
    }
}
