//! The table states ([`TableState`]: a version's manifest and its index list, as the model sees
//! them) of versions this process has already read or committed.
//!
//! Every commit reads the state of its read version, and under contention the state of each head
//! it judges. The manifest is in hand, but the index list comes from Lance's session cache, whose
//! lookup (a formatted key, a Moka entry) took 5 to 7 us of the 7 to 9 a one-writer append spent
//! on its read version's state (`design/benchmarks.md`). A version's state never changes, and writers
//! commit on each other's versions: each remembers the state of the version its own commit landed
//! (after the put, so outside any window), and the next commit on that version, its own or another
//! writer's of the process, finds it here.
//!
//! * A hit requires the same table uri, version, transaction file (named after the committing
//!   transaction's uuid) and manifest timestamp (nanoseconds, the same in memory and on storage):
//!   a table removed and made again at the same uri is told apart by them, even when a caller
//!   committed to both with one transaction uuid. A version without a transaction file (Lance
//!   names none, or an empty one in its in-memory result, when transaction files are off) is never
//!   remembered.
//! * A state is remembered as a reader of storage gets it. Lance's in-memory index list of a
//!   version it just committed keeps each index's creation time to the nanosecond, where storage
//!   keeps milliseconds; the list is passed through Lance's own encoding ([`as_stored`]), so a
//!   commit gets the same state whether it read the version or found it here.
//! * Debug builds read the state again on every hit and compare.
//! * Bounded, oldest first out: at most [`MAX_STATES`] states and [`MAX_FRAGMENTS`] fragments in
//!   all. A state shares its manifest's fragment list, and keeps it alive; one of more than
//!   [`MAX_STATE_FRAGMENTS`] fragments is read each time.

use std::sync::{Arc, Mutex, OnceLock};

use lance::Dataset;
use lance_actions::TableState;

use crate::error::Result;
use crate::judge::table_state;
use crate::oldest_first::OldestFirst;

/// States remembered at most.
pub const MAX_STATES: usize = 64;
/// Fragments, over all remembered states, at most.
pub const MAX_FRAGMENTS: usize = 20_000;
/// Fragments of one remembered state, at most: a state of a larger table is read each time. A
/// remembered state saves the index list's lookup (5 to 7 us) and the fragment list's order check,
/// but keeps its version's fragment list alive, and the commit whose state pushes it out frees it.
/// On a 10,000-fragment table, with four writers appending, a state not found cost 575 us (146 us
/// reading it, the rest freeing the one it pushed out). One writer appending ran at 0.83x of
/// Lance's with up to 100,000 fragments remembered and no cap per state, 1.09x and 0.86x with up
/// to 20,000 (two batches), and 1.03x with this cap (medians of six runs each,
/// `design/benchmarks.md`).
pub const MAX_STATE_FRAGMENTS: usize = 2_000;

/// One committed version: its table, number, transaction file and timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    uri: String,
    version: u64,
    transaction_file: String,
    timestamp_nanos: u128,
}

impl Key {
    /// `None` for a version without a transaction file (Lance's in-memory result names an empty
    /// one when transaction files are off): too little tells it apart from a version of the same
    /// number of a table made again at the same uri.
    fn of(dataset: &Dataset) -> Option<Self> {
        let manifest = dataset.manifest();
        let transaction_file = manifest.transaction_file.clone().filter(|name| !name.is_empty())?;
        Some(Self {
            uri: dataset.uri().to_string(),
            version: manifest.version,
            transaction_file,
            timestamp_nanos: manifest.timestamp_nanos,
        })
    }
}

/// The states, weighed by their fragments.
#[derive(Debug)]
struct States {
    states: OldestFirst<Key, Arc<TableState>>,
}

impl Default for States {
    fn default() -> Self {
        Self { states: OldestFirst::new(MAX_STATES, MAX_FRAGMENTS) }
    }
}

impl States {
    /// A version's state never changes: the first reading stays.
    fn insert(&mut self, key: Key, state: Arc<TableState>) {
        if may_remember(state.fragments.len()) && !self.states.contains_key(&key) {
            let size = state.fragments.len();
            self.states.insert(key, state, size);
        }
    }
}

/// Whether a state of `fragments` fragments is remembered at all ([`MAX_STATE_FRAGMENTS`]): checked
/// where one is stored, and before reading or looking up one that never would be.
fn may_remember(fragments: usize) -> bool {
    fragments <= MAX_STATE_FRAGMENTS
}

/// The lock, even when a thread panicked holding it: every change under it keeps the bound.
fn lock() -> std::sync::MutexGuard<'static, States> {
    static STATES: OnceLock<Mutex<States>> = OnceLock::new();
    STATES.get_or_init(Mutex::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The state of `dataset`'s version: remembered, or read ([`table_state`]) and then remembered.
pub async fn state_of(dataset: &Dataset) -> Result<Arc<TableState>> {
    let key = Key::of(dataset).filter(|_| may_remember(dataset.manifest().fragments.len()));
    let hit = key.as_ref().and_then(|key| lock().states.get(key).cloned());
    if let Some(state) = hit {
        debug_check(dataset, &state).await;
        return Ok(state);
    }
    read_and_remember(dataset, key).await
}

/// Read the state of `dataset`'s version, its index list as storage holds it, and remember it under
/// `key` (none: not remembered).
async fn read_and_remember(dataset: &Dataset, key: Option<Key>) -> Result<Arc<TableState>> {
    let mut state = table_state(dataset).await?;
    // An index without details is a legacy one whose details Lance infers from its files on each
    // load, and leaves unset when that fails: such a reading may differ next time, so it is not
    // remembered.
    let settled = state.indices.iter().all(|index| index.index_details.is_some());
    let storable = as_stored(&mut state) && settled;
    let state = Arc::new(state);
    if let Some(key) = key.filter(|_| storable) {
        lock().insert(key, state.clone());
    }
    Ok(state)
}

/// Pass `state`'s index list through Lance's encoding of it (what a manifest on storage holds);
/// false, and the list left as read, if Lance cannot decode its own encoding (never expected:
/// such a state is then not remembered).
fn as_stored(state: &mut TableState) -> bool {
    use lance_table::format::{IndexMetadata, pb};
    let stored: Result<Vec<IndexMetadata>, _> =
        state.indices.iter().map(|index| IndexMetadata::try_from(pb::IndexMetadata::from(index))).collect();
    match stored {
        Ok(stored) => {
            state.indices = stored;
            true
        }
        Err(_) => false,
    }
}

/// Remember the state of the version our commit landed as `landed`. On a multi-threaded Tokio
/// runtime as a task of its own, so that it delays neither the table's next commit nor this one's
/// return; on a current-thread runtime nothing is read (a task would run only when this writer
/// next waits, and the next commit reads the state itself). A state that cannot be read is not
/// remembered.
pub fn remember_landed(landed: &Dataset) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return;
    }
    // A state too large to be remembered is not read for nothing.
    if !may_remember(landed.manifest().fragments.len()) {
        return;
    }
    let Some(key) = Key::of(landed) else { return };
    let landed = landed.clone();
    // Not through `state_of`: a debug check failing in this task would go unseen. A state another
    // writer already remembered is left as it is (the next commit's lookup checks it).
    drop(runtime.spawn(async move {
        if !lock().states.contains_key(&key) {
            let _ = read_and_remember(&landed, Some(key)).await;
        }
    }));
}

/// Debug builds: a remembered state is what reading the version gives. Every field the model
/// reads is compared.
async fn debug_check(dataset: &Dataset, remembered: &TableState) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Ok(mut read) = table_state(dataset).await else { return };
    as_stored(&mut read);
    debug_assert_eq!(remembered.version, read.version, "a remembered state: version");
    debug_assert!(remembered.fragments == read.fragments, "a remembered state: fragments");
    debug_assert_eq!(remembered.max_fragment_id, read.max_fragment_id, "a remembered state: high-water mark");
    debug_assert_eq!(remembered.no_fragment_id_yet, read.no_fragment_id_yet, "a remembered state: first id");
    debug_assert_eq!(remembered.schema, read.schema, "a remembered state: schema");
    debug_assert_eq!(remembered.indices, read.indices, "a remembered state: indices");
    debug_assert_eq!(remembered.config, read.config, "a remembered state: config");
    debug_assert_eq!(remembered.table_metadata, read.table_metadata, "a remembered state: table metadata");
    debug_assert_eq!(remembered.bases, read.bases, "a remembered state: bases");
    debug_assert_eq!(remembered.replaced_by_txn, read.replaced_by_txn, "a remembered state: replaced");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(version: u64) -> Key {
        Key { uri: "memory://t".into(), version, transaction_file: format!("{version}-u.txn"), timestamp_nanos: 1 }
    }

    fn state(version: u64) -> Arc<TableState> {
        state_of_size(version, 0)
    }

    fn state_of_size(version: u64, fragments: u64) -> Arc<TableState> {
        let mut state = TableState::empty(lance_core::datatypes::Schema::default());
        state.version = version;
        for id in 0..fragments {
            state.fragments.insert(id, lance_table::format::Fragment::new(id));
        }
        Arc::new(state)
    }

    #[test]
    fn fragments_are_bounded_over_all_states() {
        let mut states = States::default();
        let big = MAX_STATE_FRAGMENTS as u64;
        let fit = (MAX_FRAGMENTS / MAX_STATE_FRAGMENTS) as u64;
        for version in 0..=fit {
            states.insert(key(version), state_of_size(version, big));
        }
        assert_eq!(states.states.len(), fit as usize, "the last pushed the first out");
        assert!(!states.states.contains_key(&key(0)));
        assert!(states.states.contains_key(&key(fit)));
        assert_eq!(states.states.weight(), MAX_FRAGMENTS);
    }

    #[test]
    fn a_state_of_more_fragments_than_one_may_hold_is_read_each_time() {
        let mut states = States::default();
        states.insert(key(1), state(1));
        states.insert(key(9), state_of_size(9, MAX_STATE_FRAGMENTS as u64 + 1));
        assert!(!states.states.contains_key(&key(9)), "a state over the bound is not remembered");
        assert!(states.states.contains_key(&key(1)), "and pushes nothing out");
        states.insert(key(10), state_of_size(10, MAX_STATE_FRAGMENTS as u64));
        assert!(states.states.contains_key(&key(10)), "one at the bound is");
    }

    #[test]
    fn the_oldest_state_goes_first_and_the_bound_holds() {
        let mut states = States::default();
        for version in 0..(MAX_STATES as u64 + 5) {
            states.insert(key(version), state(version));
        }
        assert_eq!(states.states.len(), MAX_STATES);
        assert!(!states.states.contains_key(&key(4)), "the five oldest are gone");
        assert!(states.states.contains_key(&key(5)));
        assert_eq!(states.states.get(&key(MAX_STATES as u64 + 4)).map(|s| s.version), Some(MAX_STATES as u64 + 4));
    }

    #[test]
    fn a_state_is_found_only_under_its_own_transaction_file() {
        let mut states = States::default();
        states.insert(key(3), state(3));
        let remade = Key { transaction_file: "3-other.txn".into(), ..key(3) };
        let same_uuid_later = Key { timestamp_nanos: 2, ..key(3) };
        assert!(states.states.contains_key(&key(3)));
        assert!(!states.states.contains_key(&remade), "a table made again at the uri is another table");
        assert!(!states.states.contains_key(&same_uuid_later), "even when committed with the same uuid");
        // The first reading stays: a version's state never changes.
        states.insert(key(3), state(99));
        assert_eq!(states.states.get(&key(3)).map(|s| s.version), Some(3));
    }
}
