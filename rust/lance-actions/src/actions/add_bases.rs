//! AddBases: register base paths (other roots data files may live under). Lowers to
//! `UpdateBases.new_bases` or `Overwrite.initial_bases`. Two additions collide only on the same id,
//! name or path.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::BasePath;

use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::path::{BaseKey, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct AddBases {
    /// `id == 0` means "assign one at apply time".
    pub bases: Vec<BasePath>,
}

impl AddBases {
    fn rebase_one(peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::AddBases;
        match peer.action {
            // Fail closed, where Lance 14 lets a base addition pass an unknown operation.
            AnyAction::Opaque(_) => peer.fail(K, Rule::Opaque, "the committed operation is not understood"),
            AnyAction::AddBases(_) => peer.fail(K, Rule::BaseClash, "the same base id, name or path was added"),
            _ => Verdict::Ok,
        }
    }
}

impl Action for AddBases {
    fn kind(&self) -> ActionKind {
        ActionKind::AddBases
    }

    fn reads(&self) -> Mask {
        Mask::new()
    }

    fn writes(&self) -> Mask {
        let mut mask = Mask::new();
        for base in &self.bases {
            if base.id != 0 {
                mask.push(ManifestPath::Base(BaseKey::Id(base.id)));
            }
            if let Some(name) = &base.name {
                mask.push(ManifestPath::Base(BaseKey::Name(name.clone())));
            }
            mask.push(ManifestPath::Base(BaseKey::Path(base.path.clone())));
        }
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        for base in &self.bases {
            let clash = state.bases.values().find(|b| {
                (base.id != 0 && b.id == base.id) || (base.name.is_some() && b.name == base.name) || b.path == base.path
            });
            if let Some(b) = clash {
                return Err(invalid(ActionKind::AddBases, format!("base {} ({}) already exists", b.id, b.path)));
            }
        }
        Ok(())
    }

    fn rebase(&mut self, _cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, Self::rebase_one)
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        for base in &self.bases {
            let mut base = base.clone();
            if base.id == 0 {
                base.id = (1..).find(|id| !state.bases.contains_key(id)).unwrap_or(u32::MAX);
            }
            state.bases.insert(base.id, base);
        }
    }
}

impl AddBases {
    pub(crate) fn encode(&self) -> proto::AddBases {
        proto::AddBases {
            bases: self
                .bases
                .iter()
                .map(|b| codec::lance_bytes(&lance_table::format::pb::BasePath::from(b.clone())))
                .collect(),
        }
    }

    pub(crate) fn decode(p: proto::AddBases) -> Result<Self> {
        let bases = p
            .bases
            .iter()
            .map(|b| codec::lance_message::<lance_table::format::pb::BasePath>(b, "base path").map(BasePath::from))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { bases })
    }
}

impl ActionLife for AddBases {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        set_once(&mut slots.bases, self.bases.clone(), shell, "AddBases")
    }

    /// Replay grafts the bases it needs onto the target itself; the source's own additions are its
    /// bookkeeping.
    fn rebind(&self, _cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        Err(RebindRefusal::SourceBookkeeping { action: ActionKind::AddBases })
    }

    fn squash_into(&self, _squash: &mut Squash) -> Result<(), SquashRefusal> {
        Err(SquashRefusal::NotComposable { action: ActionKind::AddBases })
    }

    fn describe(&self) -> String {
        let paths: Vec<&str> = self.bases.iter().map(|b| b.path.as_str()).collect();
        format!("{paths:?}")
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;

    fn base(name: &str) -> AddBases {
        AddBases {
            bases: vec![BasePath {
                id: 0,
                name: Some(name.into()),
                is_dataset_root: false,
                path: format!("/b/{name}"),
            }],
        }
    }

    pub(crate) fn cases() -> Vec<Case> {
        let add = |name| txn(OperationKind::UpdateBases, vec![base(name).into()]);
        vec![
            case("base_after_committed_base_of_other_name_commutes", add("b1"), add("b2"), "ok"),
            case("base_after_committed_base_of_same_name_fails", add("b1"), add("b1"), "fail"),
        ]
    }

    #[test]
    fn rebind_refuses_source_bookkeeping_and_description_lists_paths() {
        assert_eq!(rebound(base("b1")), Err(RebindRefusal::SourceBookkeeping { action: ActionKind::AddBases }));
        assert_eq!(base("b1").describe(), "[\"/b/b1\"]");
    }
}
