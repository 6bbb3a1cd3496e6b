//! The action lists of committed transactions this process has already decoded, or committed itself.
//!
//! Decoding a peer's action list (parse, check it against the operation it rides on) costs about
//! 17 us for a one-fragment delete on the bench machine (`design/benchmarks.md`). The judgement at
//! the write decodes the writers Lance's listing found inside the window between that listing and
//! the manifest put, where every microsecond delays the table's next commit. Writers in one process
//! (a server's request handlers) commit to the same tables and meet each other's commits as peers:
//! each remembers its own commit's list once its put landed (outside any window; as written, or
//! decoded, [`remember_landed`]), and every other writer of the process finds it here instead of
//! decoding it again.
//!
//! What is remembered is exactly what decoding gives, on every hit:
//! * Only lists this project encoded (the `lance-actions.v1` property) are remembered. Their content
//!   comes from the encoding, which is the same bytes in memory and on storage. A transaction
//!   lifted from its operation (Lance's own writers) is lifted each time: lifting is cheap, and
//!   Lance's in-memory copy of its own commit is not what a reader of storage decodes (the protobuf
//!   round trip drops some of it).
//! * A hit requires the same table uri, version, transaction uuid and encoding, byte for byte: a
//!   table removed and made again at the same uri, or a staged transaction committed twice, is
//!   told apart by its uuid or its encoding, or else carries the very same list.
//! * What decoding takes from the operation rather than from the list, each deletion-vector change's
//!   fragment (the file Lance's rebase may have merged), is taken again from the reader's own
//!   transaction on every hit (`codec::take_vectors_from_operation`).
//! * A list that does not decode is never remembered: each reader meets the error itself.
//!
//! Bounded, oldest first out: at most [`MAX_ENTRIES`] transactions and [`MAX_BYTES`] bytes of
//! encoding in all; a list whose encoding is over [`MAX_BYTES_PER_ENTRY`] is decoded each time (its
//! own IO dwarfs its decoding). The lock is held only to look up or insert: lists are shared out and
//! copied after it is released.

use std::sync::{Arc, Mutex, OnceLock};

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance_actions::{ActionTxn, codec};

use crate::oldest_first::OldestFirst;

/// Transactions remembered at most.
pub const MAX_ENTRIES: usize = 4_096;
/// Bytes of encoding remembered at most, over all transactions.
pub const MAX_BYTES: usize = 64 << 20;
/// The encoding of the largest list remembered, in bytes.
pub const MAX_BYTES_PER_ENTRY: usize = 64 << 10;

/// One committed transaction: its table, version and uuid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    uri: String,
    version: u64,
    uuid: String,
}

/// A list, with the encoding it was decoded from.
#[derive(Debug)]
struct Remembered {
    encoded: String,
    list: ActionTxn,
    /// Remembered as our commit wrote it ([`remember_landed`]), not decoded.
    as_written: bool,
}

/// The lists, weighed by the bytes of their encoding.
#[derive(Debug)]
struct Known {
    lists: OldestFirst<Key, Arc<Remembered>>,
}

impl Default for Known {
    fn default() -> Self {
        Self { lists: OldestFirst::new(MAX_ENTRIES, MAX_BYTES) }
    }
}

impl Known {
    fn insert(&mut self, key: Key, remembered: Arc<Remembered>) {
        let size = remembered.encoded.len();
        if size > MAX_BYTES_PER_ENTRY {
            return;
        }
        match self.lists.get(&key) {
            Some(old) if old.encoded == remembered.encoded => return,
            // Another encoding under the same key (a staged transaction committed again, on a table
            // made again): the newest reading replaces it.
            Some(_) => self.lists.remove(&key),
            None => {}
        }
        self.lists.insert(key, remembered, size);
    }

    /// The list remembered under `key`, shared out (copied by the caller, after the lock).
    fn get(&self, key: &Key) -> Option<Arc<Remembered>> {
        self.lists.get(key).cloned()
    }
}

fn known() -> &'static Mutex<Known> {
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    KNOWN.get_or_init(Mutex::default)
}

fn key(uri: &str, version: u64, txn: &Transaction) -> Key {
    Key { uri: uri.to_string(), version, uuid: txn.uuid.clone() }
}

/// The action list of `txn`, committed at `version` of the table at `uri`: remembered, or decoded
/// ([`crate::history::actions_of`]) and then remembered.
pub fn actions_of_committed(uri: &str, version: u64, txn: &Transaction) -> Result<ActionTxn, lance_actions::Error> {
    let Some(encoded) = crate::history::encoded_list(txn) else { return crate::history::actions_of(txn) };
    let key = key(uri, version, txn);
    let hit = lock().get(&key);
    if let Some(remembered) = hit.filter(|r| r.encoded == encoded) {
        let mut list = remembered.list.clone();
        codec::take_vectors_from_operation(&mut list, &txn.operation)?;
        return Ok(list);
    }
    Ok(decode_and_remember(key, encoded, txn)?.list.clone())
}

/// Decode `txn`'s list (its encoding `encoded`) and remember it under `key`; a list that fails to
/// decode is not remembered.
fn decode_and_remember(key: Key, encoded: &str, txn: &Transaction) -> Result<Arc<Remembered>, lance_actions::Error> {
    let remembered = Arc::new(Remembered {
        encoded: encoded.to_string(),
        list: crate::history::actions_of(txn)?,
        as_written: false,
    });
    lock().insert(key, remembered.clone());
    Ok(remembered)
}

/// Our list as we wrote it: the actions we lowered into the operation Lance committed, and their
/// encoding, the transaction property a reader decodes.
#[derive(Debug)]
pub struct WrittenList {
    pub list: ActionTxn,
    pub encoded: String,
}

/// Whether `list`, encoded as `encoded`, may be remembered as written should it land as built: its
/// decoding gives it back ([`codec::decodes_to_itself`]) and its encoding is not too large to be
/// remembered at all. Asked before the write, so that a list that could not be is not copied.
pub fn rememberable_as_written(list: &ActionTxn, encoded: &str) -> bool {
    encoded.len() <= MAX_BYTES_PER_ENTRY && codec::decodes_to_itself(list)
}

/// Remember the list of the transaction our commit landed as `landed`'s version.
///
/// * `written`, our list as we wrote it, when Lance committed our transaction as we built it, read
///   version aside (no writer landed in between, so Lance's rebase had no writer to rebase over; or
///   our judgement at the write admitted the writers in between and found Lance's rebase had left
///   the transaction as handed, `commit::committed_as_built`) and the list is one whose decoding
///   gives it back ([`rememberable_as_written`]: fragments, rows and ids, the key filters and
///   deletion files taken from an operation that is the one we lowered): it is remembered as it
///   is, without decoding. Decoding had cost about 26 us of a one-writer append
///   (`design/benchmarks.md`, tenth session), work Tokio ran on the writer's own worker as soon as
///   the writer next waited (a task spawned from a worker waits in that worker's slot,
///   which other workers do not take from). Debug builds decode the committed transaction and
///   compare.
/// * Otherwise (a delete handed its rows that landed past `head + 1`, whose vector Lance's rebase may
///   have merged with a writer's; a list whose decoding would not give it back; a commit Lance
///   reported as failed, or as lost, after its put had landed) it is decoded
///   from the transaction Lance committed (in `landed`'s session cache right after the commit;
///   when it is not there, nothing is read and nothing remembered), in a task of its own on a
///   multi-threaded runtime, here on a current-thread one.
///
/// Called after the put, so it never delays the table's next commit. Another writer that needs the
/// list before it is remembered decodes it itself, as it would without this module.
pub async fn remember_landed(landed: &Dataset, uuid: &str, written: Option<WrittenList>) {
    let version = landed.manifest().version;
    if let Some(written) = written {
        debug_assert!(rememberable_as_written(&written.list, &written.encoded), "asked before the write");
        let key = Key { uri: landed.uri().to_string(), version, uuid: uuid.to_string() };
        if cfg!(debug_assertions) {
            debug_check_written(landed, &key, &written).await;
        }
        lock().insert(key, Arc::new(Remembered { encoded: written.encoded, list: written.list, as_written: true }));
        return;
    }
    let Some(txn) = crate::history::cached_transaction_shared(landed, version).await else { return };
    let uri = landed.uri().to_string();
    let decode = move || remember(&uri, version, &txn);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            drop(runtime.spawn(async move { decode() }));
        }
        _ => decode(),
    }
}

/// Debug builds: our list as written is what decoding the transaction Lance committed gives, under
/// the committed uuid, and its encoding is the one that transaction carries (a check that cannot
/// read the transaction fails).
async fn debug_check_written(landed: &Dataset, key: &Key, written: &WrittenList) {
    let txn = match crate::history::transaction_of(landed, key.version).await {
        Ok(Some(txn)) => txn,
        other => {
            debug_assert!(false, "version {} has no readable transaction: {other:?}", key.version);
            return;
        }
    };
    debug_assert_eq!(txn.uuid, key.uuid, "the landed transaction is ours");
    debug_assert_eq!(crate::history::encoded_list(&txn), Some(written.encoded.as_str()), "the encoding we wrote");
    match crate::history::actions_of(&txn) {
        Ok(decoded) => debug_assert_eq!(decoded, written.list, "our list as written is what decoding gives"),
        Err(e) => debug_assert!(false, "our own committed list does not decode: {e}"),
    }
}

/// Decode and remember the list of `txn`, unless it carries none or is remembered already. Only
/// remembered, not used: a list that fails to decode is each reader's to meet.
fn remember(uri: &str, version: u64, txn: &Transaction) {
    let Some(encoded) = crate::history::encoded_list(txn) else { return };
    let key = key(uri, version, txn);
    if lock().get(&key).is_some_and(|r| r.encoded == encoded) {
        return;
    }
    let _ = decode_and_remember(key, encoded, txn);
}

/// The list remembered for the transaction `uuid` committed at `version` of the table at `uri`, if
/// one is, as remembered (for tests and diagnostics: readers go through [`actions_of_committed`]).
pub fn remembered(uri: &str, version: u64, uuid: &str) -> Option<ActionTxn> {
    lookup(uri, version, uuid).map(|r| r.list.clone())
}

/// Whether the list remembered for that transaction was remembered as our commit wrote it (true)
/// or decoded (false); `None` when none is remembered. For tests: which way a landed list took.
pub fn remembered_as_written(uri: &str, version: u64, uuid: &str) -> Option<bool> {
    lookup(uri, version, uuid).map(|r| r.as_written)
}

/// The entry for the transaction `uuid` committed at `version` of the table at `uri`, shared out
/// (the lock released before the caller reads it).
fn lookup(uri: &str, version: u64, uuid: &str) -> Option<Arc<Remembered>> {
    let key = Key { uri: uri.to_string(), version, uuid: uuid.to_string() };
    lock().get(&key)
}

/// The lock, even when a thread panicked holding it: every change under it keeps the bounds.
fn lock() -> std::sync::MutexGuard<'static, Known> {
    known().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lance_actions::OperationKind;

    fn entry(bytes: usize) -> Arc<Remembered> {
        Arc::new(Remembered {
            encoded: "x".repeat(bytes),
            list: ActionTxn::new(OperationKind::Append, Vec::new()),
            as_written: false,
        })
    }

    fn k(version: u64) -> Key {
        Key { uri: "memory://t".into(), version, uuid: format!("u{version}") }
    }

    #[test]
    fn the_oldest_list_leaves_first_when_the_entries_are_full() {
        let mut known = Known::default();
        for v in 0..MAX_ENTRIES as u64 + 1 {
            known.insert(k(v), entry(1));
        }
        assert_eq!(known.lists.len(), MAX_ENTRIES);
        assert!(!known.lists.contains_key(&k(0)), "the oldest left");
        assert!(known.lists.contains_key(&k(1)) && known.lists.contains_key(&k(MAX_ENTRIES as u64)));
        assert_eq!(known.lists.weight(), MAX_ENTRIES);
    }

    #[test]
    fn the_bytes_in_all_stay_within_their_bound() {
        let mut known = Known::default();
        let per = MAX_BYTES_PER_ENTRY;
        let fit = MAX_BYTES / per;
        for v in 0..fit as u64 + 3 {
            known.insert(k(v), entry(per));
        }
        assert_eq!(known.lists.weight(), MAX_BYTES);
        assert_eq!(known.lists.len(), fit);
        assert!(!known.lists.contains_key(&k(2)) && known.lists.contains_key(&k(3)), "the three oldest left");
    }

    #[test]
    fn a_list_too_large_is_not_remembered_and_one_remembered_is_not_replaced() {
        let mut known = Known::default();
        known.insert(k(1), entry(MAX_BYTES_PER_ENTRY + 1));
        assert!(known.lists.len() == 0 && known.lists.weight() == 0);
        known.insert(k(1), entry(1));
        known.insert(k(1), entry(1));
        assert_eq!(known.lists.get(&k(1)).map(|r| r.encoded.len()), Some(1));
        assert_eq!((known.lists.order().len(), known.lists.weight()), (1, 1));
    }

    #[test]
    fn another_encoding_under_the_same_key_replaces_the_one_remembered() {
        let mut known = Known::default();
        known.insert(k(1), entry(1));
        known.insert(k(2), entry(1));
        known.insert(k(1), entry(3));
        assert_eq!(known.lists.get(&k(1)).map(|r| r.encoded.len()), Some(3));
        assert_eq!(known.lists.order(), &[k(2), k(1)], "the newest reading is the newest entry");
        assert_eq!(known.lists.weight(), 4);
    }
}
