//! The fragment-reuse history of a tagged table: Lance's `__lance_frag_reuse` entry at
//! `index_version` 1, whose transitions record which source fragments' rows moved to which
//! destinations (`design/action-model.md`, RewriteFragments). A rewrite that appends transitions
//! defers the index remap: an index keeps its old coverage as provenance and the reader translates
//! it through the history. The rewrite and index rules consult the history to tell such a deferred
//! remap from an eager one. Only what the entry holds inline is read: a history stored in its own
//! file needs IO the pure model does not do, and every caller treats it as unknown.

use std::collections::BTreeSet;

use lance_table::format::IndexMetadata;
pub(crate) use lance_table::system_index::frag_reuse::FRAG_REUSE_INDEX_NAME;
use lance_table::system_index::frag_reuse::ledger::FragReuseLedger;
use lance_table::system_index::frag_reuse::metadata::is_tagged;

/// A table with stable row ids carrying a fragment-reuse entry must hold only indices that store
/// row addresses (Lance 14.0.2 refuses to build any other manifest: the entry is applied to every
/// index as row-address moves). `None` when `state` is no such table or `index` may join it; else
/// why not. Deviation D9 (`design/deviations.md`): Lance's resolver admits the commit and its
/// manifest build then refuses it; we refuse at validation.
pub(crate) fn stable_row_id_refusal(state: &crate::state::TableState, index: &IndexMetadata) -> Option<String> {
    let stable = state.fragments.values().any(|f| f.row_id_meta.is_some());
    if !stable || entry(&state.indices).is_none() || !answers_in_row_ids(index) {
        return None;
    }
    Some(format!(
        "the table uses stable row ids and carries a fragment-reuse entry, which is applied to every index as \
         row-address moves, but index {} ({}) does not store row addresses; rebuild it as one that does, or \
         drop the entry first",
        index.name, index.uuid
    ))
}

/// A user index whose answers are row ids rather than row addresses (not a system index, results
/// not row addresses, as Lance tells them apart).
pub(crate) fn answers_in_row_ids(index: &IndexMetadata) -> bool {
    !lance_table::system_index::is_system_index(index) && !index.results_are_row_addrs()
}

pub(crate) fn is_entry(index: &IndexMetadata) -> bool {
    index.name == FRAG_REUSE_INDEX_NAME
}

/// The table's fragment-reuse entry, in whatever form.
pub(crate) fn entry(indices: &[IndexMetadata]) -> Option<&IndexMetadata> {
    indices.iter().find(|i| is_entry(i))
}

/// The table's entry when it is a tagged history (transitions, not v0 compaction versions).
pub(crate) fn tagged_entry(indices: &[IndexMetadata]) -> Option<&IndexMetadata> {
    entry(indices).filter(|e| is_tagged(e))
}

/// The history `entry` holds inline; `None` when it is stored in its own file or does not decode.
pub(crate) fn ledger(entry: &IndexMetadata) -> Option<FragReuseLedger> {
    let details = entry.index_details.as_ref()?;
    FragReuseLedger::decode_inline(entry.index_version, details).ok().flatten()
}

/// Is every one of `sources` on the lineage `entry` records? Its fragment bitmap lists every
/// source and destination of its transitions; an entry without a bitmap may record anything.
pub(crate) fn records(entry: &IndexMetadata, mut sources: impl Iterator<Item = u64>) -> bool {
    match &entry.fragment_bitmap {
        None => true,
        Some(bitmap) => sources.all(|id| bitmap.contains(id as u32)),
    }
}

/// Does the v0 (untagged) `entry` record a compaction group of exactly `sources`? A v0 entry's
/// versions hold one record per group, each naming its source fragments; one stored in its own
/// file is unknown here, so it records nothing.
pub(crate) fn v0_records_group(entry: &IndexMetadata, sources: impl Iterator<Item = u64>) -> bool {
    if is_tagged(entry) {
        return false;
    }
    let mut wanted: Vec<u64> = sources.collect();
    wanted.sort_unstable();
    ledger(entry).is_some_and(|l| {
        l.transitions().iter().any(|t| {
            let mut ids: Vec<u64> = t.sources().iter().map(|d| d.id).collect();
            ids.sort_unstable();
            ids == wanted
        })
    })
}

/// The fragment ids of transitions in `ours` that `base` does not hold: what a rewrite's complete
/// entry (built at its read version, whose entry is `base`) adds. Transitions are told apart by
/// their fingerprints. A `base` history that cannot be read inline counts as empty, so the whole
/// of `ours` is taken as added: a rewrite may claim more than it adds, never less.
pub(crate) fn added_fragments(ours: &FragReuseLedger, base: Option<&IndexMetadata>) -> BTreeSet<u64> {
    let known: BTreeSet<[u8; 32]> =
        base.and_then(ledger).map(|l| l.transitions().iter().map(|t| *t.fingerprint()).collect()).unwrap_or_default();
    ours.transitions()
        .iter()
        .filter(|t| !known.contains(t.fingerprint()))
        .flat_map(|t| t.sources().iter().chain(t.destinations()).map(|d| d.id))
        .collect()
}

/// `fragment` and every fragment its rows came from through the history, transitively.
pub(crate) fn ancestors(ledger: &FragReuseLedger, fragment: u64) -> BTreeSet<u64> {
    let mut found = BTreeSet::from([fragment]);
    let mut pending = vec![fragment];
    while let Some(id) = pending.pop() {
        let Some(position) = ledger.producer(id as u32) else { continue };
        let Some(transition) = ledger.transitions().get(position) else { continue };
        for source in transition.sources() {
            if found.insert(source.id) {
                pending.push(source.id);
            }
        }
    }
    found
}
