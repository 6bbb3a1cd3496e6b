//! AddFragments: new fragments, ids bound at apply time, optionally with the set of keys they insert.
//!
//! Lowers to `Append.fragments` or `Update.new_fragments` (+ `inserted_rows_filter`), or to the
//! fragments of an `Overwrite`. The key set is what makes keyed inserts fence each other: Lance's
//! own bloom filter is kept for Lance's resolver, and an exact 64-bit key-hash set, when present,
//! decides intersections exactly.

use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use crate::keys::KeyHashSet;
use lance_table::format::Fragment;
use lance_table::format::key_existence::KeyExistenceFilter;

use super::change_schema::ChangeSchema;
use super::{fragment_fields, supplier_reads, supplier_writes};
use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::keys::InsertedKeys;
use crate::path::{ConfigMap, KeyKind, ManifestPath, Mask};
use crate::state::TableState;
use crate::table_class::{self, TableClass};
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct AddFragments {
    /// New fragments. Their `id` is ignored and bound at apply time.
    pub fragments: Vec<Fragment>,
    /// The keys these fragments insert, if the writer declared them.
    pub keys: Option<InsertedKeys>,
}

impl AddFragments {
    fn inserts_rows(&self) -> bool {
        !self.fragments.is_empty()
    }

    fn rebase_one(&self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::AddFragments;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match (peer.action, peer.their_path) {
            (AnyAction::ChangeSchema(cs), _) if !cs.preserves_nullability && !self.keeps_tightened_fields(cx, cs) => {
                peer.retry(
                    K,
                    Rule::SchemaChanged,
                    "the committed schema change may tighten nullability of values we write",
                )
            }
            (AnyAction::AddFragments(theirs), _) => self.rebase_against_insert(peer, theirs),
            // A committed in-place write of a key column changes keys we cannot see.
            // Every written path of the peer reaches us as its own `PeerAction`, so matching on the
            // path is order-independent.
            (_, ManifestPath::FieldValues { field }) if self.key_fields().contains(field) => peer.retry(
                K,
                Rule::KeysUnverifiable,
                format!("the committed action rewrote values of key field {field}"),
            ),
            // The table's class or key changed under us: what we insert must be re-validated.
            // An insert that declares its keys is re-validated against the head's class and key by
            // `validate`; only an undeclared one may have relied on the class it read.
            (_, ManifestPath::ConfigEntry { key, .. })
                if self.keys.is_none() && table_class::FROZEN_KEYS.contains(&key.as_str()) =>
            {
                peer.retry(K, Rule::KeysUnverifiable, format!("the committed action changed the table's {key}"))
            }
            (_, ManifestPath::ConfigMapWhole(ConfigMap::Config)) if self.inserts_rows() => {
                peer.retry(K, Rule::KeysUnverifiable, "the committed action replaced the table's config")
            }
            _ => Verdict::Ok,
        }
    }

    /// On a keyed table every insert declares its keys over exactly the primary key: a bare append
    /// would add keys no concurrent keyed writer can see (`design/fencing.md` §1).
    fn validate_keyed_insert(&self, state: &TableState) -> Result<(), Reason> {
        // The rows of an overwrite replace every row: uniqueness within them is the writer's check.
        if !self.inserts_rows() || state.replaced_by_txn {
            return Ok(());
        }
        let refuse = |detail: String| Err(invalid(ActionKind::AddFragments, detail));
        match TableClass::of(&state.config) {
            TableClass::Undeclared | TableClass::KeylessAppendOnly => Ok(()),
            TableClass::Unknown(class) => {
                refuse(format!("the table's class '{class}' is not understood by this version; refusing to insert"))
            }
            TableClass::Keyed { key } => {
                let (pk_ids, _) = table_class::primary_key_of(&state.schema);
                match &self.keys {
                    None => refuse(format!(
                        "table is keyed on {key:?}: an insert must declare its keys (no keyed Append); \
                         use a strict insert or an upsert"
                    )),
                    Some(keys) if keys.field_ids() != pk_ids.as_slice() => refuse(format!(
                        "the insert declares keys over fields {:?}, the table's primary key is fields {pk_ids:?}",
                        keys.field_ids()
                    )),
                    Some(_) => Ok(()),
                }
            }
        }
    }

    /// A committed schema change that tightens nullability (relative to our base) of no field but
    /// our declared key fields cannot be falsified by our rows: our exact key set was built from
    /// non-null keys, and our writer built the other columns to the base's nullability. This is a
    /// key migration's schema step met by a keyed insert replayed from a migrated branch
    /// (`design/fencing.md`, "1. Table classes live in the manifest, and the action model enforces
    /// them"). Lance-staged inserts (no exact set) keep the conservative Retry.
    fn keeps_tightened_fields(&self, cx: &RebaseCx<'_>, cs: &ChangeSchema) -> bool {
        let Some(exact) = self.keys.as_ref().and_then(|k| k.exact.as_ref()) else { return false };
        let tightened: Vec<i32> = cs
            .schema
            .fields_pre_order()
            .filter(|f| !f.nullable && cx.base.schema.field_by_id(f.id).is_some_and(|b| b.nullable))
            .map(|f| f.id)
            .collect();
        tightened.iter().all(|id| exact.field_ids.contains(id))
    }

    fn key_fields(&self) -> &[i32] {
        self.keys.as_ref().map(|k| k.field_ids()).unwrap_or_default()
    }

    /// Two inserts commute unless keys may collide. Symmetric by design (`design/fencing.md` §4): an undeclared
    /// insert conflicts with a keyed one in both commit orders.
    fn rebase_against_insert(&self, peer: &PeerAction<'_>, theirs: &AddFragments) -> Verdict {
        const K: ActionKind = ActionKind::AddFragments;
        if !theirs.inserts_rows() {
            return Verdict::Ok;
        }
        match (&self.keys, &theirs.keys) {
            (None, None) => Verdict::Ok,
            (Some(_), None) => peer.retry(K, Rule::KeysUnverifiable, "the committed insert declared no keys"),
            (None, Some(_)) => peer.retry(
                K,
                Rule::KeysUnverifiable,
                "we insert undeclared keys into a table a committed keyed insert fenced",
            ),
            (Some(ours), Some(theirs)) => match ours.may_intersect(theirs) {
                Ok(false) => Verdict::Ok,
                Ok(true) => peer.retry(K, Rule::KeysIntersect, ours.describe_intersection(theirs)),
                Err(why) => peer.retry(K, Rule::KeysUnverifiable, why),
            },
        }
    }
}

impl Action for AddFragments {
    fn kind(&self) -> ActionKind {
        ActionKind::AddFragments
    }

    fn reads(&self) -> Mask {
        let mut mask = supplier_reads(&fragment_fields(&self.fragments));
        if self.keys.is_some() {
            mask.push(ManifestPath::UnenforcedKey(KeyKind::Primary));
        }
        if self.inserts_rows() {
            // Whether an insert must declare keys depends on the table's class (`design/fencing.md` §1).
            for key in table_class::FROZEN_KEYS {
                mask.push(ManifestPath::ConfigEntry { map: ConfigMap::Config, key: key.to_string() });
            }
        }
        mask
    }

    fn writes(&self) -> Mask {
        if !self.inserts_rows() {
            return Mask::new();
        }
        // Values first: when two inserts meet, the reported overlap names the (key) field.
        let mut mask = supplier_writes(&fragment_fields(&self.fragments));
        mask.push(ManifestPath::FragmentSet);
        mask.push(ManifestPath::FragmentIdCounter);
        mask.push(ManifestPath::RowIdCounter);
        mask
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        // A deletion file's path embeds its fragment's id, so a fragment whose id is not yet bound
        // cannot carry one (Lance rejects it at commit; we reject it before any IO).
        if let Some(f) = self.fragments.iter().find(|f| f.deletion_file.is_some()) {
            return Err(invalid(
                ActionKind::AddFragments,
                format!("new fragment (given id {}) carries a deletion file", f.id),
            ));
        }
        self.validate_keyed_insert(state)
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, txn: &mut TxnContext) {
        let bound_before = txn.assigned_fragment_ids.len();
        for fragment in &self.fragments {
            let id = state.allocate_fragment_id();
            debug_assert!(!state.fragments.contains_key(&id), "fragment id {id} is bound twice");
            let mut bound = fragment.clone();
            bound.id = id;
            state.fragments.insert(id, bound);
            txn.assigned_fragment_ids.push(id);
        }
        // One bound id per new fragment, ascending: what the fragment map pairs with the source's.
        debug_assert_eq!(txn.assigned_fragment_ids.len() - bound_before, self.fragments.len());
        debug_assert!(txn.assigned_fragment_ids[bound_before..].windows(2).all(|w| w[0] < w[1]));
    }
}

impl AddFragments {
    pub(crate) fn encode(&self) -> proto::AddFragments {
        proto::AddFragments {
            fragments: self.fragments.iter().map(codec::fragment_bytes).collect(),
            keys: self.keys.as_ref().map(|k| proto::InsertedKeys {
                lance_filter: k
                    .lance_filter
                    .as_ref()
                    .map(|f| codec::lance_bytes(&lance_table::format::pb::transaction::KeyExistenceFilter::from(f))),
                exact: k
                    .exact
                    .as_ref()
                    .map(|e| proto::KeyHashSet { field_ids: e.field_ids.clone(), hashes: e.hashes().to_vec() }),
                lance_filter_in_operation: false,
            }),
        }
    }

    /// In the list a commit carries, Lance's key filter is left out and marked as the operation's:
    /// the lowered `Update` carries the same filter as its `inserted_rows_filter` (see `lower_into`),
    /// and Lance's default bloom filter is 32 KiB, so writing it twice doubled what each keyed
    /// commit wrote (`design/benchmarks.md`, "What a keyed commit writes").
    pub(crate) fn leave_filter_to_operation(p: &mut proto::AddFragments) {
        if let Some(keys) = p.keys.as_mut()
            && keys.lance_filter.take().is_some()
        {
            keys.lance_filter_in_operation = true;
        }
    }

    /// The reverse of [`Self::leave_filter_to_operation`] for a committed list: a filter marked as
    /// the operation's is taken from the operation, and a filter the list carries (written before
    /// the mark existed) must be the operation's, so that our driver and Lance's resolver judge the
    /// same keys. `Err` says why the list and the operation disagree (the caller refuses the list).
    pub(crate) fn take_filter_from_operation(
        p: &mut proto::AddFragments,
        operation: &lance_table::transaction::Operation,
    ) -> std::result::Result<(), String> {
        let Some(keys) = p.keys.as_mut() else { return Ok(()) };
        let committed = match operation {
            lance_table::transaction::Operation::Update { inserted_rows_filter, .. } => inserted_rows_filter.as_ref(),
            _ => None,
        };
        match (keys.lance_filter_in_operation, keys.lance_filter.as_deref(), committed) {
            (true, Some(_), _) => Err("the list carries a key filter and also names the operation's".into()),
            (true, None, None) => {
                Err("the list's inserted keys name the operation's key filter, and the operation has none".into())
            }
            (true, None, Some(filter)) => {
                keys.lance_filter =
                    Some(codec::lance_bytes(&lance_table::format::pb::transaction::KeyExistenceFilter::from(filter)));
                keys.lance_filter_in_operation = false;
                Ok(())
            }
            (false, Some(bytes), committed) => match decode_lance_filter(bytes) {
                Ok(carried) if Some(&carried) == committed => Ok(()),
                Ok(_) => Err("the list's key filter is not the operation's".into()),
                Err(e) => Err(e.to_string()),
            },
            (false, None, _) => Ok(()),
        }
    }

    pub(crate) fn decode(p: proto::AddFragments) -> Result<Self> {
        let keys = match p.keys {
            None => None,
            Some(k) => {
                if k.lance_filter_in_operation && k.lance_filter.is_some() {
                    return Err(codec::corrupt("inserted keys carry a key filter and also name the operation's"));
                }
                // Marked as the operation's and decoded without it (`codec::decode_property`): the
                // keys hold no Lance filter, so the list does not lower until it is restored.
                let lance_filter = k.lance_filter.as_deref().map(decode_lance_filter).transpose()?;
                let exact = k
                    .exact
                    .map(|e| {
                        let sorted = e.hashes.windows(2).all(|w| w[0] < w[1]);
                        if sorted {
                            Ok(KeyHashSet::from_hashes(e.field_ids, e.hashes))
                        } else {
                            Err(codec::corrupt("key hashes are not sorted and unique"))
                        }
                    })
                    .transpose()?;
                Some(InsertedKeys { lance_filter, exact })
            }
        };
        Ok(Self { fragments: codec::fragments_from(&p.fragments)?, keys })
    }
}

/// Lance's key filter from its embedded protobuf bytes.
fn decode_lance_filter(bytes: &[u8]) -> Result<KeyExistenceFilter> {
    let pb: lance_table::format::pb::transaction::KeyExistenceFilter = codec::lance_message(bytes, "key filter")?;
    KeyExistenceFilter::try_from(&pb).map_err(|e| codec::corrupt(format!("key filter: {e}")))
}

impl ActionLife for AddFragments {
    fn lower_into(&self, slots: &mut Lowering, shell: OperationKind) -> Result<()> {
        if slots.holds(ActionKind::AddFragments) {
            return Err(not_lowerable(shell, "more than one AddFragments action"));
        }
        slots.added = self.fragments.clone();
        slots.keys = self.keys.clone();
        Ok(())
    }

    /// New fragments reference the source's files in place and get their ids on the target when
    /// they land; the declared keys are what they are on any branch.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let fragments = self.fragments.iter().map(|f| rebind::new_fragment(cx, f)).collect::<Result<_, _>>()?;
        Ok(AddFragments { fragments, keys: self.keys.clone() }.into())
    }

    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal> {
        if self.keys.is_some() {
            squash.keyed = true;
            if squash.keys.is_none() {
                squash.keys = self.keys.clone();
            }
        }
        for fragment in &self.fragments {
            let id = squash.claim_new_id()?;
            squash.added.insert(id, fragment.clone());
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let keys = match &self.keys {
            None => String::new(),
            Some(k) => match &k.exact {
                Some(e) => format!(", {} exact key(s) on fields {:?}", e.len(), e.field_ids),
                None => format!(", Lance key filter on fields {:?}", k.field_ids()),
            },
        };
        format!("{} fragment(s){keys}", self.fragments.len())
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::actions::cases::*;
    use crate::txn::ActionTxn;

    use crate::keys::{InsertedKeys, KeyHashSet};

    fn insert(keys: Option<&[u64]>) -> AnyAction {
        let keys = keys.map(|k| InsertedKeys {
            lance_filter: None,
            exact: Some(KeyHashSet::from_hashes(vec![0], k.iter().copied())),
        });
        AddFragments { fragments: vec![fragment(0)], keys }.into()
    }

    fn update(keys: Option<&[u64]>) -> ActionTxn {
        txn(OperationKind::Update, vec![insert(keys)])
    }

    pub(crate) fn cases() -> Vec<Case> {
        let append = || txn(OperationKind::Append, vec![insert(None)]);
        let overwrite = txn(
            OperationKind::Overwrite,
            vec![crate::actions::reset_table::ResetTable { schema: table().schema }.into(), insert(None)],
        );
        vec![
            case("append_after_committed_append_commutes", append(), append(), "ok"),
            case(
                "keyed_insert_after_committed_insert_of_the_same_key_retries",
                update(Some(&[5])),
                update(Some(&[5])),
                "retry",
            ),
            case(
                "keyed_insert_after_committed_insert_of_other_keys_commutes",
                update(Some(&[5])),
                update(Some(&[6])),
                "ok",
            ),
            case("undeclared_insert_after_committed_keyed_insert_retries", append(), update(Some(&[5])), "retry"),
            case("keyed_insert_after_committed_undeclared_insert_retries", update(Some(&[5])), append(), "retry"),
            case("append_after_committed_overwrite_fails", append(), overwrite, "fail"),
        ]
    }

    #[test]
    fn rebound_fragments_are_unbound_and_read_in_place() {
        let Ok(AnyAction::AddFragments(a)) = rebound(AddFragments { fragments: vec![fragment(10)], keys: None }) else {
            panic!("an append is replayable")
        };
        assert_eq!(a.fragments[0].id, 0, "bound when it lands on the target");
        assert!(a.fragments[0].files.iter().all(|f| f.base_id == Some(GRAFTED_BASE)));
    }

    #[test]
    fn squash_adds_take_their_commits_ids_and_refuse_more_fragments_than_ids() {
        let two = AddFragments { fragments: vec![fragment(0), fragment(0)], keys: None };
        let s = squashed(vec![(5, vec![4, 5], vec![two.clone().into()])]).expect("composes");
        assert_eq!(s.new_ids, vec![4, 5]);
        assert_eq!(s.txn.shell(), OperationKind::Append);
        assert_eq!(
            squashed(vec![(6, vec![4], vec![two.into()])]),
            Err(SquashRefusal::MoreFragmentsThanIds { version: 6 })
        );
    }

    #[test]
    fn lowering_refuses_a_second_add_and_description_counts_fragments() {
        let err = crate::lower(&txn(OperationKind::Append, vec![insert(None), insert(None)])).expect_err("two adds");
        assert!(err.to_string().contains("more than one AddFragments"), "{err}");
        assert_eq!(insert(Some(&[1, 2])).describe(), "1 fragment(s), 2 exact key(s) on fields [0]");
    }
}
