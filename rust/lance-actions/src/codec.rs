//! The action wire format (`protos/actions.proto`), fail-closed.
//!
//! Each action module owns its own `encode` / `decode`; this module owns the envelope (format
//! version, context) and the helpers that embed Lance's own protobuf messages as bytes.

use base64::Engine as _;
use lance_table::system_index::mem_wal::CompactedSsTable;
use lance_table::transaction::{UpdateMode, UpdatedFragmentOffsets};
use prost::Message;
use roaring::RoaringBitmap;
use uuid::Uuid;

use crate::action::AnyAction;
use crate::context::{OperationKind, TxnContext};
use crate::error::{Error, Result};
use crate::txn::ActionTxn;

#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/lance_actions.v1.rs"));
}

/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The `transaction_properties` key our encoded action list travels under.
pub const PROPERTY_KEY: &str = "lance-actions.v1";

pub(crate) fn corrupt(reason: impl Into<String>) -> Error {
    Error::CorruptEncoding { reason: reason.into() }
}

/// Encode a Lance protobuf message as embedded bytes.
pub(crate) fn lance_bytes<M: Message>(message: &M) -> Vec<u8> {
    message.encode_to_vec()
}

/// Decode embedded Lance protobuf bytes; `what` names the field for the error.
pub(crate) fn lance_message<M: Message + Default>(bytes: &[u8], what: &str) -> Result<M> {
    let message = M::decode(bytes).map_err(|e| corrupt(format!("{what}: {e}")))?;
    canonical_length(&message, bytes.len(), what)?;
    Ok(message)
}

/// Prost skips fields it does not know. A message that re-encodes shorter than it arrived carried
/// something this build would silently drop (a field from a newer writer, or junk), so it is refused.
/// Every encoder of these messages is prost, which writes each field once and no default values, so
/// an honest message re-encodes to exactly its length.
fn canonical_length<M: Message>(message: &M, arrived: usize, what: &str) -> Result<()> {
    let canonical = message.encoded_len();
    if canonical != arrived {
        return Err(corrupt(format!(
            "{what}: {arrived} bytes arrived, {canonical} understood (unknown or repeated fields)"
        )));
    }
    Ok(())
}

/// Convert with Lance's own fallible conversion, mapping its error to a corrupt-encoding error.
pub(crate) fn lance_convert<T, U>(value: T, what: &str) -> Result<U>
where
    U: TryFrom<T, Error = lance_core::Error>,
{
    U::try_from(value).map_err(|e| corrupt(format!("{what}: {e}")))
}

pub(crate) fn bitmap_bytes(bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::with_capacity(bitmap.serialized_size());
    // Writing into a Vec cannot fail.
    let _ = bitmap.serialize_into(&mut out);
    out
}

pub(crate) fn bitmap_from(bytes: &[u8], what: &str) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes).map_err(|e| corrupt(format!("{what}: {e}")))
}

pub(crate) fn required<T>(value: Option<T>, what: &str) -> Result<T> {
    value.ok_or_else(|| corrupt(format!("missing {what}")))
}

/// Encode an action transaction, whole.
pub fn encode(txn: &ActionTxn) -> Vec<u8> {
    to_proto(txn).encode_to_vec()
}

fn to_proto(txn: &ActionTxn) -> proto::ActionList {
    proto::ActionList {
        format_version: FORMAT_VERSION,
        context: Some(encode_context(&txn.context)),
        actions: txn.actions.iter().map(AnyAction::encode).collect(),
        action_count: Some(txn.actions.len() as u32),
    }
}

/// Decode an action transaction. Fails on anything not fully understood.
pub fn decode(bytes: &[u8]) -> Result<ActionTxn> {
    from_proto(parse(bytes)?)
}

/// A list from a newer writer is refused as such before anything else in it is read.
fn check_format_version(list: &proto::ActionList) -> Result<()> {
    match list.format_version {
        0 => Err(corrupt("missing format version")),
        v if v > FORMAT_VERSION => Err(Error::NewerFormat { found: v, supported: FORMAT_VERSION }),
        _ => Ok(()),
    }
}

fn parse(bytes: &[u8]) -> Result<proto::ActionList> {
    let list = proto::ActionList::decode(bytes).map_err(|e| corrupt(format!("action list: {e}")))?;
    canonical_length(&list, bytes.len(), "action list")?;
    Ok(list)
}

fn from_proto(list: proto::ActionList) -> Result<ActionTxn> {
    check_format_version(&list)?;
    let count = required(list.action_count, "action count")?;
    if count as usize != list.actions.len() {
        return Err(corrupt(format!("{} action(s) present, {count} declared", list.actions.len())));
    }
    let context = decode_context(required(list.context, "transaction context")?)?;
    let actions = list
        .actions
        .into_iter()
        .enumerate()
        .map(|(i, a)| AnyAction::decode(a).map_err(|e| corrupt(format!("action {i}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(ActionTxn { context, actions })
}

/// Encode for the transaction property a commit carries next to the lowered operation (base64 of
/// the protobuf bytes). What that operation carries already is left out and named instead: Lance's
/// key filter (`AddFragments::leave_filter_to_operation`). [`decode_for_operation`] restores it.
pub fn encode_property(txn: &ActionTxn) -> String {
    let mut list = to_proto(txn);
    add_fragments_of(&mut list).for_each(crate::actions::add_fragments::AddFragments::leave_filter_to_operation);
    base64::engine::general_purpose::STANDARD.encode(list.encode_to_vec())
}

/// Whether [`decode_for_operation`] of `txn`'s [`encode_property`], on the operation `txn` lowers
/// to, gives `txn` back, so that a writer may remember its own committed list without decoding it:
/// every action embeds only what Lance's own encoding keeps exactly (fragments, row sets, ids), and
/// what the decoding takes from the operation (key filters, deletion-vector fragments) is what
/// `txn` itself lowered into it. Not so for an action embedding an index (Lance's encoding keeps
/// its creation time to the millisecond, where a staged index has nanoseconds) or a schema, nor for
/// a fragment whose zero row count Lance's encoding reads back as none, a key filter Lance's
/// encoding reads back otherwise, two changes of one fragment's deletion vector, or fragment ids
/// bound by `apply` (not encoded): such a list is decoded.
/// Every kind is named, so a new action is placed here before it compiles.
pub fn decodes_to_itself(txn: &ActionTxn) -> bool {
    // Bound by `apply` alone, never encoded.
    if !txn.context.assigned_fragment_ids.is_empty() {
        return false;
    }
    let kinds_kept = txn.actions.iter().all(|action| match action {
        AnyAction::AddFragments(add) => {
            add.fragments.iter().all(counts_survive_encoding)
                && add.keys.as_ref().and_then(|keys| keys.lance_filter.as_ref()).is_none_or(filter_survives_encoding)
        }
        AnyAction::UpdateDeletionVector(change) => counts_survive_encoding(&change.fragment),
        AnyAction::RemoveFragments(_) => true,
        AnyAction::ReplaceFragmentColumns(_)
        | AnyAction::AddOverlay(_)
        | AnyAction::RewriteFragments(_)
        | AnyAction::MergeColumns(_)
        | AnyAction::InvalidateIndexCoverage(_)
        | AnyAction::AddIndex(_)
        | AnyAction::RemoveIndex(_)
        | AnyAction::ChangeSchema(_)
        | AnyAction::ResetTable(_)
        | AnyAction::UpdateConfig(_)
        | AnyAction::AddBases(_)
        | AnyAction::ReserveFragmentIds(_)
        | AnyAction::Restore(_)
        | AnyAction::CloneTable(_)
        | AnyAction::UpdateMemWalState(_)
        | AnyAction::Opaque(_) => false,
    });
    kinds_kept && vector_fragments_distinct(txn)
}

/// Decoding takes each deletion-vector change's fragment from the operation by id: two changes of
/// one fragment (which Lance never commits) would both get the first.
fn vector_fragments_distinct(txn: &ActionTxn) -> bool {
    let mut ids: Vec<u64> = txn
        .actions
        .iter()
        .filter_map(|action| match action {
            AnyAction::UpdateDeletionVector(change) => Some(change.fragment.id),
            _ => None,
        })
        .collect();
    let changes = ids.len();
    ids.sort_unstable();
    ids.dedup();
    ids.len() == changes
}

/// Lance's key filter message reads a Bloom filter's zero item count or zero probability back as
/// its defaults (`lance-table` `format/key_existence.rs`, `TryFrom<&pb::...KeyExistenceFilter>`),
/// and a probability that is not a number never equals itself. Lance's own builder makes neither.
fn filter_survives_encoding(filter: &lance_table::format::key_existence::KeyExistenceFilter) -> bool {
    use lance_table::format::key_existence::FilterType;
    match &filter.filter {
        FilterType::ExactSet(_) => true,
        FilterType::Bloom { number_of_items, probability, .. } => {
            *number_of_items != 0 && *probability != 0.0 && !probability.is_nan()
        }
    }
}

/// Lance's fragment message has no "unset" for a row count: zero reads back as none
/// (`tests/roundtrip.rs`, `lance_pb_normalizations_are_inherited`).
fn counts_survive_encoding(fragment: &lance_table::format::Fragment) -> bool {
    fragment.physical_rows != Some(0)
        && fragment.deletion_file.as_ref().is_none_or(|deletion| deletion.num_deleted_rows != Some(0))
}

/// Decode a transaction property value written by [`encode_property`], without its operation: a
/// key filter left to the operation stays absent (the list then does not lower). A committed list
/// is read with [`decode_for_operation`].
pub fn decode_property(value: &str) -> Result<ActionTxn> {
    from_proto(parse_property(value)?)
}

/// The `AddFragments` actions of an encoded list: the ones whose key filter a committed list
/// leaves to its operation.
fn add_fragments_of(list: &mut proto::ActionList) -> impl Iterator<Item = &mut proto::AddFragments> {
    list.actions.iter_mut().filter_map(|action| match action.kind.as_mut() {
        Some(proto::action::Kind::AddFragments(add)) => Some(add),
        _ => None,
    })
}

fn parse_property(value: &str) -> Result<proto::ActionList> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|e| corrupt(format!("property is not base64: {e}")))?;
    parse(&bytes)
}

/// Decode the action list a committed transaction carries and check that it stands for the
/// operation it was committed with: it must lower to an operation of the same kind that touches the
/// same manifest coordinates. Payloads a rebase may change (merged deletion files, affected rows)
/// are not compared; coordinates (fragments, columns, indices, config keys) are.
pub fn decode_for_operation(value: &str, operation: &lance_table::transaction::Operation) -> Result<ActionTxn> {
    let committed = OperationKind::of(operation);
    let mismatch = |reason: String| Error::ActionsMismatch { operation: format!("{committed:?}"), reason };
    let mut list = parse_property(value)?;
    check_format_version(&list)?;
    for add in add_fragments_of(&mut list) {
        crate::actions::add_fragments::AddFragments::take_filter_from_operation(add, operation).map_err(mismatch)?;
    }
    let txn = from_proto(list)?;
    if txn.context.shell != committed {
        return Err(mismatch(format!("the list is a {:?}", txn.context.shell)));
    }
    let lowered = crate::translate::lower(&txn).map_err(|e| mismatch(format!("the list does not lower: {e}")))?;
    let (ours, theirs) = (crate::translate::lift(&lowered), crate::translate::lift(operation));
    // Lance renumbers the fields of an overwrite or merge at commit when the table uses
    // non-reusable field ids, so for those the actions are compared by kind, not by coordinate.
    let differ = if matches!(committed, OperationKind::Overwrite | OperationKind::Merge) {
        differences(&action_kinds(&ours), &action_kinds(&theirs))
    } else {
        differences(&coordinates(&ours), &coordinates(&theirs))
    };
    if let Some((only_list, only_op)) = differ {
        return Err(mismatch(format!("the list touches {only_list:?}, the operation {only_op:?}")));
    }
    let mut txn = txn;
    take_vectors_from_operation(&mut txn, operation)?;
    Ok(txn)
}

/// Take again, from `operation`, what [`decode_for_operation`] takes from the operation a list rides
/// on rather than from the list: each deletion-vector change's fragment, deletion file included.
/// For a list decoded from the very same encoding on another transaction of the same uuid
/// (remembered by a reader, `lance-actions-commit`'s `known`), whose committed deletion files Lance's
/// rebase may have merged differently.
pub fn take_vectors_from_operation(txn: &mut ActionTxn, operation: &lance_table::transaction::Operation) -> Result<()> {
    vectors_as_committed(txn, operation)
        .map_err(|reason| Error::ActionsMismatch { operation: format!("{:?}", OperationKind::of(operation)), reason })
}

/// Each deletion-vector change names the fragment the operation committed, deletion file included:
/// the operation is what the table holds. Lance's rebase of a delete handed its rows
/// (`CommitBuilder::with_affected_rows`) merges the vector with a writer's and commits the merged
/// file, after the list riding on the transaction was written (`design/commit.md`, "Judged at the
/// write"). The coordinates compared above already match, fragment by fragment.
fn vectors_as_committed(
    txn: &mut ActionTxn,
    operation: &lance_table::transaction::Operation,
) -> std::result::Result<(), String> {
    use lance_table::transaction::Operation;
    let committed = match operation {
        Operation::Delete { updated_fragments, .. } | Operation::Update { updated_fragments, .. } => updated_fragments,
        _ => return Ok(()),
    };
    for action in txn.actions.iter_mut() {
        let AnyAction::UpdateDeletionVector(u) = action else { continue };
        let Some(fragment) = committed.iter().find(|f| f.id == u.fragment.id) else {
            return Err(format!(
                "the list changes the deletion vector of fragment {}, the operation does not",
                u.fragment.id
            ));
        };
        u.fragment = fragment.clone();
    }
    Ok(())
}

/// The kinds of a transaction's actions, with their counts.
fn action_kinds(txn: &ActionTxn) -> std::collections::BTreeSet<String> {
    use crate::action::Action as _;
    let mut counts = std::collections::BTreeMap::new();
    for a in &txn.actions {
        *counts.entry(format!("{:?}", a.kind())).or_insert(0usize) += 1;
    }
    counts.into_iter().map(|(k, n)| format!("{n} x {k}")).collect()
}

/// Every manifest path a transaction reads or writes (order and duplicates do not matter).
fn coordinates(txn: &ActionTxn) -> std::collections::BTreeSet<crate::path::ManifestPath> {
    use crate::action::Action as _;
    txn.actions.iter().flat_map(|a| a.reads().0.into_iter().chain(a.writes().0)).collect()
}

/// The first few elements only `ours` holds and only `theirs` holds, as text; `None` when the two
/// sets are equal. Paths are compared as paths (two paths that print alike are still told apart),
/// and turned into text only for the message of a mismatch.
fn differences<T: Ord + std::fmt::Display>(
    ours: &std::collections::BTreeSet<T>,
    theirs: &std::collections::BTreeSet<T>,
) -> Option<(Vec<String>, Vec<String>)> {
    if ours == theirs {
        return None;
    }
    let text = |only: std::collections::btree_set::Difference<'_, T>| only.take(3).map(T::to_string).collect();
    Some((text(ours.difference(theirs)), text(theirs.difference(ours))))
}

fn shell_to_proto(kind: OperationKind) -> proto::OperationShell {
    use proto::OperationShell as S;
    match kind {
        OperationKind::Append => S::Append,
        OperationKind::Delete => S::Delete,
        OperationKind::Overwrite => S::Overwrite,
        OperationKind::CreateIndex => S::CreateIndex,
        OperationKind::Rewrite => S::Rewrite,
        OperationKind::DataReplacement => S::DataReplacement,
        OperationKind::DataOverlay => S::DataOverlay,
        OperationKind::Merge => S::Merge,
        OperationKind::Restore => S::Restore,
        OperationKind::ReserveFragments => S::ReserveFragments,
        OperationKind::Update => S::Update,
        OperationKind::Project => S::Project,
        OperationKind::UpdateConfig => S::UpdateConfig,
        OperationKind::UpdateMemWalState => S::UpdateMemWalState,
        OperationKind::Clone => S::Clone,
        OperationKind::UpdateBases => S::UpdateBases,
        OperationKind::Unknown => S::Unknown,
    }
}

fn shell_from_proto(value: i32) -> Result<OperationKind> {
    use proto::OperationShell as S;
    let shell = S::try_from(value).map_err(|_| corrupt(format!("unknown operation shell {value}")))?;
    Ok(match shell {
        S::Unspecified => return Err(corrupt("missing operation shell")),
        S::Append => OperationKind::Append,
        S::Delete => OperationKind::Delete,
        S::Overwrite => OperationKind::Overwrite,
        S::CreateIndex => OperationKind::CreateIndex,
        S::Rewrite => OperationKind::Rewrite,
        S::DataReplacement => OperationKind::DataReplacement,
        S::DataOverlay => OperationKind::DataOverlay,
        S::Merge => OperationKind::Merge,
        S::Restore => OperationKind::Restore,
        S::ReserveFragments => OperationKind::ReserveFragments,
        S::Update => OperationKind::Update,
        S::Project => OperationKind::Project,
        S::UpdateConfig => OperationKind::UpdateConfig,
        S::UpdateMemWalState => OperationKind::UpdateMemWalState,
        S::Clone => OperationKind::Clone,
        S::UpdateBases => OperationKind::UpdateBases,
        S::Unknown => OperationKind::Unknown,
    })
}

fn encode_context(cx: &TxnContext) -> proto::TxnContext {
    let mut offsets: Vec<proto::FragmentRows> = cx
        .updated_fragment_offsets
        .iter()
        .flat_map(|o| o.0.iter())
        .map(|(id, rows)| proto::FragmentRows { fragment_id: *id, rows: bitmap_bytes(rows) })
        .collect();
    offsets.sort_by_key(|r| r.fragment_id);
    proto::TxnContext {
        shell: shell_to_proto(cx.shell) as i32,
        predicate: cx.predicate.clone(),
        update_mode: match cx.update_mode {
            None => proto::UpdateMode::Unset,
            Some(UpdateMode::RewriteRows) => proto::UpdateMode::RewriteRows,
            Some(UpdateMode::RewriteColumns) => proto::UpdateMode::RewriteColumns,
        } as i32,
        fields_for_preserving_frag_bitmap: cx.fields_for_preserving_frag_bitmap.clone(),
        has_updated_fragment_offsets: cx.updated_fragment_offsets.is_some(),
        updated_fragment_offsets: offsets,
        compacted_sstables: cx
            .compacted_sstables
            .iter()
            .map(|s| proto::CompactedSsTable { shard_id: s.shard_id.as_bytes().to_vec(), generation: s.generation })
            .collect(),
        replay_origins: cx.replay_origins.clone(),
    }
}

fn decode_context(p: proto::TxnContext) -> Result<TxnContext> {
    let mut cx = TxnContext::new(shell_from_proto(p.shell)?);
    cx.predicate = p.predicate;
    cx.update_mode = match proto::UpdateMode::try_from(p.update_mode) {
        Ok(proto::UpdateMode::Unset) => None,
        Ok(proto::UpdateMode::RewriteRows) => Some(UpdateMode::RewriteRows),
        Ok(proto::UpdateMode::RewriteColumns) => Some(UpdateMode::RewriteColumns),
        Err(_) => return Err(corrupt(format!("unknown update mode {}", p.update_mode))),
    };
    cx.fields_for_preserving_frag_bitmap = p.fields_for_preserving_frag_bitmap;
    if p.has_updated_fragment_offsets {
        let mut offsets = UpdatedFragmentOffsets::default();
        for r in p.updated_fragment_offsets {
            offsets.0.insert(r.fragment_id, bitmap_from(&r.rows, "updated fragment offsets")?);
        }
        cx.updated_fragment_offsets = Some(offsets);
    } else if !p.updated_fragment_offsets.is_empty() {
        return Err(corrupt("updated fragment offsets present but not flagged"));
    }
    cx.compacted_sstables = p
        .compacted_sstables
        .into_iter()
        .map(|s| {
            let shard_id = Uuid::from_slice(&s.shard_id).map_err(|e| corrupt(format!("shard id: {e}")))?;
            Ok(CompactedSsTable { shard_id, generation: s.generation })
        })
        .collect::<Result<_>>()?;
    cx.replay_origins = p.replay_origins;
    Ok(cx)
}

/// Embedded Lance fragment.
pub(crate) fn fragment_bytes(f: &lance_table::format::Fragment) -> Vec<u8> {
    lance_bytes(&lance_table::format::pb::DataFragment::from(f))
}

pub(crate) fn fragment_from(bytes: &[u8]) -> Result<lance_table::format::Fragment> {
    lance_convert(lance_message::<lance_table::format::pb::DataFragment>(bytes, "fragment")?, "fragment")
}

pub(crate) fn fragments_from(list: &[Vec<u8>]) -> Result<Vec<lance_table::format::Fragment>> {
    list.iter().map(|b| fragment_from(b)).collect()
}

pub(crate) fn index_bytes(i: &lance_table::format::IndexMetadata) -> Vec<u8> {
    lance_bytes(&lance_table::format::pb::IndexMetadata::from(i))
}

pub(crate) fn index_from(bytes: &[u8]) -> Result<lance_table::format::IndexMetadata> {
    let message = lance_message::<lance_table::format::pb::IndexMetadata>(bytes, "index")?;
    // Lance's conversion panics on a creation time chrono cannot represent (it reads the u64 as
    // i64, as here); refuse it as corrupt instead.
    if let Some(ms) = message.created_at
        && chrono::DateTime::from_timestamp_millis(ms as i64).is_none()
    {
        return Err(corrupt(format!("index: creation time {ms} ms is out of range")));
    }
    lance_convert(message, "index")
}

/// A Lance schema as Lance's flattened field messages plus its metadata.
pub(crate) fn schema_to_proto(schema: &lance_core::datatypes::Schema) -> proto::Schema {
    let fields = lance_file::datatypes::Fields::from(schema);
    proto::Schema {
        fields: fields.0.iter().map(lance_bytes).collect(),
        metadata: schema.metadata.clone().into_iter().collect(),
    }
}

pub(crate) fn schema_from_proto(p: Option<proto::Schema>) -> Result<lance_core::datatypes::Schema> {
    let p = required(p, "schema")?;
    let fields = p
        .fields
        .iter()
        .map(|b| lance_message::<lance_file::format::pb::Field>(b, "schema field"))
        .collect::<Result<Vec<_>>>()?;
    let with_meta = lance_file::datatypes::FieldsWithMeta {
        fields: lance_file::datatypes::Fields(fields),
        metadata: p.metadata.into_iter().map(|(k, v)| (k, v.into_bytes())).collect(),
    };
    lance_convert(with_meta, "schema")
}
