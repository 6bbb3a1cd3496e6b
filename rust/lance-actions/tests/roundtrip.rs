//! Translation and encoding round trips, as properties over every Lance 14.0.2 operation.
//!
//! 1. `lower(lift(op)) == op` (Lance's order-insensitive `PartialEq`, plus schema metadata, which
//!    Lance's `PartialEq for Schema` ignores).
//! 2. `decode(encode(lift(op))) == lift(op)`, and the same through the transaction property.
//! 3. Decoding is fail-closed: truncation, a newer format, an unknown action kind or a missing
//!    context never decodes into a transaction that passes for the original.

#[path = "roundtrip/strategies.rs"]
mod strategies;

#[path = "roundtrip/fuzz.rs"]
mod fuzz;

use std::collections::{BTreeSet, HashMap};

use lance_actions::actions::{
    add_fragments::AddFragments, opaque::Opaque, remove_fragments::RemoveFragments, restore::Restore,
};
use lance_actions::codec::{self, FORMAT_VERSION, decode, decode_property, encode, encode_property, proto};
use lance_actions::{ActionTxn, AnyAction, Error, OperationKind, lift, lower};
use lance_core::datatypes::Schema;
use lance_table::format::{DeletionFile, DeletionFileType, Fragment};
use lance_table::transaction::Operation;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use prost::Message;

use strategies::{arb_new_fragment, arb_operation, arb_serializable_operation};

/// Cases per property; `PROPTEST_CASES` overrides it for a longer local run.
const CASES: u32 = 96;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(CASES);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// The schema an operation carries, if any.
fn op_schema(op: &Operation) -> Option<&Schema> {
    match op {
        Operation::Overwrite { schema, .. } | Operation::Merge { schema, .. } | Operation::Project { schema, .. } => {
            Some(schema)
        }
        _ => None,
    }
}

/// The schemas an action list carries, in order.
fn txn_schemas(txn: &ActionTxn) -> Vec<&Schema> {
    txn.actions
        .iter()
        .filter_map(|a| match a {
            AnyAction::ChangeSchema(c) => Some(&c.schema),
            AnyAction::ResetTable(r) => Some(&r.schema),
            _ => None,
        })
        .collect()
}

/// Schema-level metadata, which `PartialEq for Schema` does not compare.
fn schema_metadata<'a>(schemas: impl IntoIterator<Item = &'a Schema>) -> Vec<&'a HashMap<String, String>> {
    schemas.into_iter().map(|s| &s.metadata).collect()
}

fn lowered(txn: &ActionTxn) -> Result<Operation, TestCaseError> {
    lower(txn).map_err(|e| TestCaseError::fail(format!("lower failed: {e}")))
}

fn decoded(bytes: &[u8]) -> Result<ActionTxn, TestCaseError> {
    decode(bytes).map_err(|e| TestCaseError::fail(format!("decode failed: {e}")))
}

/// Byte offsets where the encoding of `txn` ends after its context and after each action: prost
/// writes fields in tag order, so the encoding of the first `k` actions is a prefix of the whole.
fn action_boundaries(txn: &ActionTxn) -> Vec<usize> {
    (0..=txn.actions.len())
        .map(|k| encode(&ActionTxn { context: txn.context.clone(), actions: txn.actions[..k].to_vec() }).len())
        .collect()
}

/// Cut points to try: every one for small encodings; for large ones (a 32 KiB bloom filter) both
/// ends, an even spread, and each action boundary with its neighbours.
fn cut_points(txn: &ActionTxn, len: usize) -> BTreeSet<usize> {
    if len <= 2048 {
        return (0..len).collect();
    }
    let mut cuts: BTreeSet<usize> = (0..256).chain(len - 256..len).collect();
    cuts.extend((0..len).step_by(len / 256));
    for b in action_boundaries(txn) {
        cuts.extend([b.saturating_sub(1), b, b + 1].into_iter().filter(|c| *c < len));
    }
    cuts
}

/// Whatever decoded re-encodes and decodes to itself. A decoded NaN (a corrupt bloom filter's
/// probability) makes the value unequal to itself; then only the second decode is checked.
fn assert_reencodes(txn: &ActionTxn) -> Result<(), TestCaseError> {
    let again = decoded(&encode(txn))?;
    #[allow(clippy::eq_op)]
    let reflexive = txn == txn;
    if reflexive {
        prop_assert_eq!(&again, txn);
    }
    Ok(())
}

fn action_list(bytes: &[u8]) -> proto::ActionList {
    proto::ActionList::decode(bytes).expect("a valid encoding")
}

fn sample_txn() -> ActionTxn {
    let mut fragment = Fragment::new(3);
    fragment.deletion_file = Some(DeletionFile {
        read_version: 2,
        id: 9,
        file_type: DeletionFileType::Bitmap,
        num_deleted_rows: Some(4),
        base_id: None,
    });
    lift(&Operation::Delete {
        updated_fragments: vec![fragment],
        deleted_fragment_ids: vec![5],
        predicate: "x > 1".into(),
    })
}

/// The list with every Lance key filter taken out (what a property holds without its operation).
fn without_lance_filters(txn: &ActionTxn) -> ActionTxn {
    let mut txn = txn.clone();
    for action in &mut txn.actions {
        if let AnyAction::AddFragments(AddFragments { keys: Some(keys), .. }) = action {
            keys.lance_filter = None;
        }
    }
    txn
}

/// The keys each `AddFragments` of a list declares, in order.
fn inserted_keys(txn: &ActionTxn) -> Vec<Option<lance_actions::keys::InsertedKeys>> {
    txn.actions
        .iter()
        .filter_map(|a| match a {
            AnyAction::AddFragments(add) => Some(add.keys.clone()),
            _ => None,
        })
        .collect()
}

fn assert_corrupt(result: lance_actions::Result<ActionTxn>, what: &str) {
    match result {
        Err(Error::CorruptEncoding { .. }) => {}
        other => panic!("{what}: expected CorruptEncoding, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// Property 1: lowering a lifted operation gives the operation back, and lifting that again
    /// gives the same action list (the translation is a bijection on Lance's shapes).
    #[test]
    fn lower_of_lift_is_identity(op in arb_operation()) {
        let txn = lift(&op);
        prop_assert_eq!(txn.shell(), OperationKind::of(&op));
        prop_assert!(!txn.is_opaque());
        let back = lowered(&txn)?;
        prop_assert_eq!(&back, &op);
        prop_assert_eq!(schema_metadata(op_schema(&back)), schema_metadata(op_schema(&op)));
        prop_assert_eq!(lift(&back), txn);
    }

    /// A list [`codec::decodes_to_itself`] names is what decoding its property on the operation it
    /// lowers to gives: the commit loop remembers such a list of its own without decoding it.
    #[test]
    fn a_list_said_to_decode_to_itself_does(op in arb_serializable_operation()) {
        let txn = lift(&op);
        prop_assume!(codec::decodes_to_itself(&txn));
        let committed = lowered(&txn)?;
        let back = codec::decode_for_operation(&encode_property(&txn), &committed)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(back, txn);
    }

    /// Property 2: the wire format loses nothing the action list holds (replay claims included;
    /// they live in our encoding only and never reach the Lance operation).
    #[test]
    fn decode_of_encode_is_identity(
        op in arb_serializable_operation(),
        origins in proptest::collection::vec("[0-9a-f-]{1,36}", 0..3),
    ) {
        let mut txn = lift(&op);
        txn.context.replay_origins = origins;
        let bytes = encode(&txn);
        let back = decoded(&bytes)?;
        prop_assert_eq!(&back, &txn);
        prop_assert_eq!(schema_metadata(txn_schemas(&back)), schema_metadata(txn_schemas(&txn)));

        // The property a commit carries leaves Lance's key filter to the operation beside it: read
        // alone it lacks exactly the filter, read with that operation the filter is back. (Whole
        // lists are not compared there: the generator may repeat a fragment id, and a committed
        // list's deletion files are taken from the operation by id.)
        let property = encode_property(&txn);
        let alone = decode_property(&property).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(&alone, &without_lance_filters(&txn));
        prop_assert_eq!(schema_metadata(txn_schemas(&alone)), schema_metadata(txn_schemas(&txn)));
        let from_property =
            codec::decode_for_operation(&property, &op).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(inserted_keys(&from_property), inserted_keys(&txn));

        // And the decoded list still lowers to the operation it came from.
        let op_back = lowered(&back)?;
        prop_assert_eq!(&op_back, &op);
        prop_assert_eq!(schema_metadata(op_schema(&op_back)), schema_metadata(op_schema(&op)));

        // Re-encoding what was decoded is stable (bytes may differ: protobuf maps are unordered).
        prop_assert_eq!(decoded(&encode(&back))?, txn);
    }

    /// Property 3: no strict prefix of an encoding decodes. Protobuf alone would accept a prefix
    /// that ends between two actions (a shorter list); the trailing action count refuses it.
    #[test]
    fn truncation_never_decodes_to_the_original(op in arb_serializable_operation()) {
        let txn = lift(&op);
        let bytes = encode(&txn);
        // The action count is encoded after the actions, so no strict prefix decodes at all, even
        // one cut exactly between two actions.
        for cut in cut_points(&txn, bytes.len()) {
            if cut < bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err(), "a {}-byte prefix of {} decoded", cut, bytes.len());
            }
        }
    }

    /// Decoding arbitrary bytes returns an error or a transaction; it never panics, and whatever
    /// decodes re-encodes to itself.
    #[test]
    fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(txn) = decode(&bytes) {
            assert_reencodes(&txn)?;
        }
    }

    /// Flipping one byte of a valid encoding never panics the decoder.
    #[test]
    fn corrupting_one_byte_never_panics(op in arb_serializable_operation(), at in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let mut bytes = encode(&lift(&op));
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
        if let Ok(txn) = decode(&bytes) {
            assert_reencodes(&txn)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Coverage of the strategy
// ---------------------------------------------------------------------------------------------

/// `arb_operation` reaches every operation kind but `Unknown`, and every `Update` mode.
#[test]
fn arb_operation_covers_every_kind() {
    let mut runner = TestRunner::deterministic();
    let strategy = arb_operation();
    let mut kinds = BTreeSet::new();
    let mut update_modes = BTreeSet::new();
    let mut frag_reuse = false;
    for _ in 0..2000 {
        let op = strategy.new_tree(&mut runner).expect("a value").current();
        kinds.insert(OperationKind::of(&op));
        match &op {
            Operation::Update { update_mode, .. } => {
                update_modes.insert(format!("{update_mode:?}"));
            }
            Operation::Rewrite { frag_reuse_index, .. } => frag_reuse |= frag_reuse_index.is_some(),
            _ => {}
        }
    }
    let expected: BTreeSet<_> = OperationKind::ALL.into_iter().filter(|k| *k != OperationKind::Unknown).collect();
    assert_eq!(kinds, expected);
    assert_eq!(update_modes.len(), 3, "{update_modes:?}");
    assert!(frag_reuse, "no Rewrite with a frag_reuse_index was generated");
}

// ---------------------------------------------------------------------------------------------
// Fail-closed decoding
// ---------------------------------------------------------------------------------------------

#[test]
fn newer_format_version_is_refused() {
    let mut list = action_list(&encode(&sample_txn()));
    list.format_version = FORMAT_VERSION + 1;
    match decode(&list.encode_to_vec()) {
        Err(Error::NewerFormat { found, supported }) => {
            assert_eq!(found, FORMAT_VERSION + 1);
            assert_eq!(supported, FORMAT_VERSION);
        }
        other => panic!("expected NewerFormat, got {other:?}"),
    }
}

#[test]
fn missing_format_version_is_corrupt() {
    let mut list = action_list(&encode(&sample_txn()));
    list.format_version = 0;
    assert_corrupt(decode(&list.encode_to_vec()), "format version 0");
}

/// An action whose oneof holds a field number this build does not know (99) is not skipped.
#[test]
fn unknown_action_kind_is_corrupt() {
    let valid = encode(&sample_txn());
    assert!(decode(&valid).is_ok());
    // Field 3 (actions), length-delimited, holding a message with field 99 as a varint (tag 99<<3|0
    // = 792 = 0x98 0x06) ...
    let varint_kind = [0x1A, 0x03, 0x98, 0x06, 0x01];
    // ... or as an embedded message (tag 99<<3|2 = 794 = 0x9A 0x06) holding field 1 = 1.
    let message_kind = [0x1A, 0x05, 0x9A, 0x06, 0x02, 0x08, 0x01];
    for extra in [&varint_kind[..], &message_kind[..]] {
        let mut bytes = valid.clone();
        bytes.extend_from_slice(extra);
        // The appended action really is the only thing wrong.
        assert_eq!(action_list(&bytes).actions.len(), sample_txn().actions.len() + 1);
        assert_corrupt(decode(&bytes), "unknown action kind");
    }
    // An action with no kind at all (an empty message) is refused the same way.
    let mut bytes = valid;
    bytes.extend_from_slice(&[0x1A, 0x00]);
    assert_corrupt(decode(&bytes), "empty action");
}

#[test]
fn missing_context_is_corrupt() {
    let mut list = action_list(&encode(&sample_txn()));
    list.context = None;
    assert_corrupt(decode(&list.encode_to_vec()), "missing context");

    let empty =
        proto::ActionList { format_version: FORMAT_VERSION, context: None, actions: vec![], action_count: Some(0) };
    assert_corrupt(decode(&empty.encode_to_vec()), "no context, no actions");
}

#[test]
fn unknown_shell_and_update_mode_are_corrupt() {
    let list = action_list(&encode(&sample_txn()));
    for shell in [0, 99] {
        let mut l = list.clone();
        l.context.as_mut().expect("context").shell = shell;
        assert_corrupt(decode(&l.encode_to_vec()), "shell");
    }
    let mut l = list;
    l.context.as_mut().expect("context").update_mode = 7;
    assert_corrupt(decode(&l.encode_to_vec()), "update mode");
}

#[test]
fn empty_and_non_base64_input_is_corrupt() {
    assert_corrupt(decode(&[]), "empty buffer");
    assert_corrupt(decode_property("not base64!"), "property");
    assert_corrupt(decode_property(""), "empty property");
}

/// Regression: Lance's `IndexMetadata` conversion `expect`s a creation time chrono can represent
/// and panicked the decoder on a crafted one; it is now refused as corrupt.
#[test]
fn an_unrepresentable_index_creation_time_is_corrupt() {
    let mut runner = TestRunner::deterministic();
    let index = strategies::arb_index().new_tree(&mut runner).expect("a value").current();
    let txn = lift(&Operation::CreateIndex { new_indices: vec![index.clone()], removed_indices: vec![] });
    let list = action_list(&encode(&txn));
    // u64::MAX reads (as Lance reads it) as -1 ms, a valid instant in 1969.
    for (ms, valid) in [(1_700_000_000_000u64, true), (u64::MAX, true), (1 << 62, false), (1 << 63, false)] {
        let mut message = lance_table::format::pb::IndexMetadata::from(&index);
        message.created_at = Some(ms);
        let bytes = message.encode_to_vec();
        for kind in [
            proto::action::Kind::AddIndex(proto::AddIndex { index: bytes.clone() }),
            proto::action::Kind::RemoveIndex(proto::RemoveIndex { index: bytes.clone() }),
        ] {
            let mut l = list.clone();
            l.actions = vec![proto::Action { kind: Some(kind) }];
            let result = decode(&l.encode_to_vec());
            if valid {
                assert!(result.is_ok(), "created_at {ms}: {result:?}");
            } else {
                assert_corrupt(result, "unrepresentable created_at");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What cannot be lowered
// ---------------------------------------------------------------------------------------------

fn assert_not_lowerable(txn: &ActionTxn, what: &str) {
    match lower(txn) {
        Err(Error::NotLowerable { .. }) => {}
        other => panic!("{what}: expected NotLowerable, got {other:?}"),
    }
}

/// `Operation::Unknown` is `#[non_exhaustive]`, so outside lance-table it can only come from Lance
/// decoding a transaction whose operation it does not know. That lifts to one opaque action,
/// survives the codec, and never lowers.
#[test]
fn unknown_operation_lifts_to_opaque_and_never_lowers() {
    let read = lance_table::transaction::Transaction::try_from(lance_table::format::pb::Transaction::default())
        .expect("Lance reads a transaction without an operation");
    assert_eq!(OperationKind::of(&read.operation), OperationKind::Unknown);
    let txn = lift(&read.operation);
    assert_eq!(txn.shell(), OperationKind::Unknown);
    assert!(txn.is_opaque());
    assert_eq!(decode(&encode(&txn)).expect("decode"), txn);
    assert_not_lowerable(&txn, "Unknown");
}

#[test]
fn an_opaque_action_is_not_lowerable() {
    for shell in OperationKind::ALL {
        let txn = ActionTxn::new(shell, vec![Opaque { description: "from the future".into() }.into()]);
        assert_not_lowerable(&txn, &format!("{shell} with an opaque action"));
    }
}

#[test]
fn a_shell_cannot_carry_a_foreign_action() {
    let add: AnyAction = AddFragments { fragments: vec![Fragment::new(0)], keys: None }.into();
    let remove: AnyAction = RemoveFragments { ids: vec![1] }.into();
    let restore: AnyAction = Restore::new(3).into();

    assert!(lower(&ActionTxn::new(OperationKind::Append, vec![add.clone()])).is_ok());
    assert_not_lowerable(&ActionTxn::new(OperationKind::Append, vec![add.clone(), remove.clone()]), "Append + Remove");
    assert_not_lowerable(&ActionTxn::new(OperationKind::Append, vec![add.clone(), add.clone()]), "two AddFragments");
    assert_not_lowerable(&ActionTxn::new(OperationKind::Restore, vec![restore, remove]), "Restore + Remove");
    assert_not_lowerable(&ActionTxn::new(OperationKind::Delete, vec![add]), "Delete + Add");
    // A required action is missing.
    assert_not_lowerable(&ActionTxn::new(OperationKind::Restore, vec![]), "Restore without Restore");
    assert_not_lowerable(&ActionTxn::new(OperationKind::Merge, vec![]), "Merge without its actions");
}

/// The codec carries `frag_reuse_index` even though Lance never serializes it.
#[test]
fn frag_reuse_index_survives_the_codec() {
    let mut runner = TestRunner::deterministic();
    let strategy = arb_operation();
    let mut seen = 0;
    while seen < 8 {
        let op = strategy.new_tree(&mut runner).expect("a value").current();
        if matches!(&op, Operation::Rewrite { frag_reuse_index: Some(_), .. }) {
            let txn = lift(&op);
            assert_eq!(decode(&encode(&txn)).expect("decode"), txn);
            seen += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Normalizations inherited from Lance's protobuf
// ---------------------------------------------------------------------------------------------

/// A deletion file whose count of deleted rows is zero, which Lance's encoding reads back as none.
fn deletion_counting_zero_rows() -> DeletionFile {
    DeletionFile {
        read_version: 1,
        id: 1,
        file_type: DeletionFileType::Array,
        num_deleted_rows: Some(0),
        base_id: None,
    }
}

/// Lance structures travel as Lance's own protobuf messages, so the codec normalizes exactly what a
/// Lance transaction file does: a zero `physical_rows` or `num_deleted_rows` reads back as `None`.
/// The strategies never generate these values; this test pins the behaviour down so a change in
/// either Lance or the codec is noticed.
#[test]
fn lance_pb_normalizations_are_inherited() {
    let mut runner = TestRunner::deterministic();
    let mut fragment = arb_new_fragment().new_tree(&mut runner).expect("a value").current();
    fragment.physical_rows = Some(0);
    let txn = lift(&Operation::Append { fragments: vec![fragment.clone()] });
    let back = decode(&encode(&txn)).expect("decode");
    let AnyAction::AddFragments(add) = &back.actions[0] else { panic!("expected AddFragments") };
    assert_eq!(add.fragments[0].physical_rows, None);
    let via_lance = Fragment::try_from(lance_table::format::pb::DataFragment::from(&fragment)).expect("lance");
    assert_eq!(add.fragments[0], via_lance);

    fragment.deletion_file = Some(deletion_counting_zero_rows());
    let txn = lift(&Operation::Delete {
        updated_fragments: vec![fragment],
        deleted_fragment_ids: vec![],
        predicate: String::new(),
    });
    let back = decode(&encode(&txn)).expect("decode");
    let AnyAction::UpdateDeletionVector(dv) = &back.actions[0] else { panic!("expected UpdateDeletionVector") };
    assert_eq!(dv.fragment.deletion_file.as_ref().and_then(|d| d.num_deleted_rows), None);
}

/// The envelope helpers are reachable and agree with each other.
#[test]
fn property_is_base64_of_the_encoding() {
    let txn = sample_txn();
    let property = encode_property(&txn);
    assert_eq!(decode_property(&property).expect("decode"), txn);
    assert!(!property.is_empty());
    assert_eq!(codec::PROPERTY_KEY, "lance-actions.v1");
}

/// A keyed update: ten keys in Lance's default bloom filter, with one new fragment.
fn keyed_update(inserted_rows_filter: Option<lance_table::format::key_existence::KeyExistenceFilter>) -> Operation {
    Operation::Update {
        removed_fragment_ids: vec![],
        updated_fragments: vec![],
        new_fragments: vec![Fragment::new(0)],
        fields_modified: vec![],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: None,
        inserted_rows_filter,
        updated_fragment_offsets: None,
    }
}

/// Lance's bloom filter of these keys, as its merge-insert builds it.
fn bloom_of(keys: impl IntoIterator<Item = i64>) -> lance_table::format::key_existence::KeyExistenceFilter {
    use lance_table::format::key_existence::{KeyExistenceFilterBuilder, KeyValue};
    let mut builder = KeyExistenceFilterBuilder::new(vec![0]);
    for key in keys {
        builder.insert(KeyValue::Int64(key)).expect("insert a key");
    }
    builder.build()
}

fn ten_key_filter() -> lance_table::format::key_existence::KeyExistenceFilter {
    bloom_of(0..10)
}

/// The property a keyed commit carries does not hold a second copy of Lance's key filter (tens of
/// KiB): it names the operation's, and reading it with that operation gives the whole list back.
#[test]
fn a_keyed_property_leaves_the_key_filter_to_the_operation() {
    let filter = ten_key_filter();
    let lance_table::format::key_existence::FilterType::Bloom { bitmap, .. } = &filter.filter else {
        panic!("Lance's builder makes a bloom filter")
    };
    let filter_bytes = bitmap.len();
    let op = keyed_update(Some(filter.clone()));
    // As our keyed writes commit it: Lance's filter and our exact set.
    let mut txn = lift(&op);
    let AnyAction::AddFragments(AddFragments { keys: Some(keys), .. }) = &mut txn.actions[0] else {
        panic!("a keyed update lifts to AddFragments with keys first")
    };
    keys.exact = Some(lance_actions::keys::KeyHashSet::from_hashes(vec![0], 0..10));

    let whole = encode(&txn).len();
    let property = encode_property(&txn);
    assert!(whole > filter_bytes, "the whole encoding holds the filter: {whole} bytes, filter {filter_bytes}");
    assert!(property.len() < 1024, "the property is {} bytes; the filter alone is {filter_bytes}", property.len());

    assert_eq!(codec::decode_for_operation(&property, &op).expect("decodes with its operation"), txn);
    let alone = decode_property(&property).expect("decodes alone");
    assert_eq!(alone, without_lance_filters(&txn));
    assert!(lower(&alone).is_err(), "without the operation's filter the list does not lower");
}

/// A list that names the operation's key filter is refused beside an operation without one, and a
/// list that both carries a filter and names the operation's is corrupt, read either way.
#[test]
fn a_key_filter_named_but_missing_or_doubled_is_refused() {
    let op = keyed_update(Some(ten_key_filter()));
    let property = encode_property(&lift(&op));
    match codec::decode_for_operation(&property, &keyed_update(None)) {
        Err(Error::ActionsMismatch { reason, .. }) => assert!(reason.contains("key filter"), "{reason}"),
        other => panic!("expected ActionsMismatch, got {other:?}"),
    }

    let mut list = proto::ActionList::decode(encode(&lift(&op)).as_slice()).expect("parses");
    let Some(proto::action::Kind::AddFragments(add)) = list.actions[0].kind.as_mut() else {
        panic!("a keyed update lifts to AddFragments first")
    };
    add.keys.as_mut().expect("keys").lance_filter_in_operation = true;
    let doubled = list.encode_to_vec();
    assert_corrupt(decode(&doubled), "a filter both carried and named");
    let property = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &doubled);
    assert!(codec::decode_for_operation(&property, &op).is_err(), "a filter both carried and named");
}

/// A list that carries its key filter (as lists written before the filter was left to the
/// operation do) is read when the filter is the operation's, and refused when it is not: our driver
/// and Lance's resolver must judge the same keys.
#[test]
fn a_carried_key_filter_must_be_the_operations() {
    let op = keyed_update(Some(ten_key_filter()));
    let carried = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, encode(&lift(&op)));
    assert_eq!(codec::decode_for_operation(&carried, &op).expect("the operation's filter"), lift(&op));
    for committed in [keyed_update(Some(bloom_of([99]))), keyed_update(None)] {
        match codec::decode_for_operation(&carried, &committed) {
            Err(Error::ActionsMismatch { reason, .. }) => assert!(reason.contains("key filter"), "{reason}"),
            other => panic!("expected ActionsMismatch, got {other:?}"),
        }
    }
}

/// A list from a newer writer is refused as newer, before its key filter is looked for.
#[test]
fn a_newer_list_naming_the_operations_filter_is_refused_as_newer() {
    let op = keyed_update(Some(ten_key_filter()));
    let property = encode_property(&lift(&op));
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &property).expect("base64");
    let mut list = proto::ActionList::decode(bytes.as_slice()).expect("parses");
    list.format_version = FORMAT_VERSION + 1;
    let newer = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, list.encode_to_vec());
    for committed in [op, keyed_update(None)] {
        match codec::decode_for_operation(&newer, &committed) {
            Err(Error::NewerFormat { found, .. }) => assert_eq!(found, FORMAT_VERSION + 1),
            other => panic!("expected NewerFormat, got {other:?}"),
        }
    }
}

/// Where Lance's encoding does not keep what a list holds, the list is not said to decode to
/// itself, and indeed does not: an index staged with a creation time in nanoseconds, a fragment
/// with a zero row count. Its plain twin is.
#[test]
fn a_list_whose_encoding_loses_something_is_not_said_to_decode_to_itself() {
    let decodes = |op: &Operation| {
        let txn = lift(op);
        let back = codec::decode_for_operation(&encode_property(&txn), op).expect("decodes");
        (codec::decodes_to_itself(&txn), back == txn)
    };
    let mut index = lance_table::format::IndexMetadata {
        uuid: uuid::Uuid::from_u128(7),
        fields: vec![1],
        name: "v_idx".into(),
        dataset_version: 3,
        fragment_bitmap: Some([0u32].into_iter().collect()),
        index_details: None,
        index_version: 0,
        created_at: Some(chrono::DateTime::from_timestamp_nanos(1_765_000_000_123_456_789)),
        base_id: None,
        files: None,
        covering_fields: Vec::new(),
    };
    let create = |index: lance_table::format::IndexMetadata| Operation::CreateIndex {
        new_indices: vec![index],
        removed_indices: vec![],
    };
    assert_eq!(decodes(&create(index.clone())), (false, false), "nanoseconds are lost");
    index.created_at = chrono::DateTime::from_timestamp_millis(1_765_000_000_123);
    assert_eq!(decodes(&create(index)), (false, true), "an index is decoded, whatever its time");

    let mut fragment = Fragment::new(3);
    fragment.physical_rows = Some(0);
    let append = |fragment: Fragment| Operation::Append { fragments: vec![fragment] };
    assert_eq!(decodes(&append(fragment.clone())), (false, false), "a zero row count reads back as none");
    fragment.physical_rows = Some(10);
    assert_eq!(decodes(&append(fragment.clone())), (true, true), "its plain twin decodes to itself");

    fragment.deletion_file = Some(deletion_counting_zero_rows());
    let delete = |fragment: Fragment| Operation::Delete {
        updated_fragments: vec![fragment],
        deleted_fragment_ids: vec![4],
        predicate: "id > 1".into(),
    };
    assert!(!decodes(&delete(fragment.clone())).0, "a deletion file counting zero rows");
    fragment.deletion_file.as_mut().expect("a deletion file").num_deleted_rows = Some(2);
    assert_eq!(decodes(&delete(fragment.clone())), (true, true), "a delete's twin decodes to itself");

    // Decoding takes a vector change's fragment from the operation by id: of two, both get the first.
    let mut again = fragment.clone();
    again.physical_rows = Some(11);
    let twice = Operation::Delete {
        updated_fragments: vec![fragment, again],
        deleted_fragment_ids: vec![],
        predicate: "id > 1".into(),
    };
    assert_eq!(decodes(&twice), (false, false), "two changes of one fragment");
}

/// A key filter Lance's encoding reads back otherwise (a zero item count, which only a hand-built
/// Bloom filter has) keeps a keyed list from being said to decode to itself, and so do fragment ids
/// bound by `apply`, which are not encoded; Lance's own filter does not.
#[test]
fn a_hand_built_key_filter_or_bound_ids_are_not_said_to_decode_to_themselves() {
    use lance_table::format::key_existence::{FilterType, KeyExistenceFilter};
    let lances = ten_key_filter();
    assert!(codec::decodes_to_itself(&lift(&keyed_update(Some(lances.clone())))), "Lance's own filter");
    let mut hand_built = lances;
    let FilterType::Bloom { number_of_items, .. } = &mut hand_built.filter else { panic!("a bloom filter") };
    *number_of_items = 0;
    let stored = lance_table::format::pb::transaction::KeyExistenceFilter::from(&hand_built);
    assert_ne!(KeyExistenceFilter::try_from(&stored).expect("decodes"), hand_built, "storage reads it back otherwise");
    assert!(!codec::decodes_to_itself(&lift(&keyed_update(Some(hand_built)))));

    let mut bound = lift(&keyed_update(Some(ten_key_filter())));
    bound.context.assigned_fragment_ids = vec![7];
    let back = codec::decode_for_operation(&encode_property(&bound), &keyed_update(Some(ten_key_filter())));
    assert_ne!(back.expect("decodes"), bound, "the ids are not encoded");
    assert!(!codec::decodes_to_itself(&bound));
}
