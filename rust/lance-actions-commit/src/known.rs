//! The action lists of committed transactions this process has already decoded, or committed itself.
//!
//! Decoding a peer's action list (parse, check it against the operation it rides on) costs about
//! 17 us for a one-fragment delete on the bench machine (`design/benchmarks.md`). The judgement at
//! the write decodes the writers Lance's listing found inside the window between that listing and
//! the manifest put, where every microsecond delays the table's next commit. Writers in one process
//! (a server's request handlers) commit to the same tables and meet each other's commits as peers:
//! each decodes its own commit once, after its put landed (outside any window), and every other
//! writer of the process finds it here instead of decoding it again.
//!
//! Sound because a committed version never changes: the transaction at version `v` of the table at
//! `uri` that carries uuid `u` is one transaction, so its decoding is one list. The uuid guards a
//! table removed and created again at the same uri, whose version numbers start over. Only what was
//! read from a table's own history is looked up or remembered here, never a caller's what-if peer;
//! a list that does not decode is never remembered (each reader meets the error itself).
//!
//! Bounded, oldest first out: at most [`MAX_ENTRIES`] transactions and [`MAX_ACTIONS`] actions in
//! all; a transaction of more than [`MAX_ACTIONS_PER_ENTRY`] actions is decoded each time (its own
//! IO dwarfs its decoding).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance_actions::ActionTxn;

/// Transactions remembered at most.
pub const MAX_ENTRIES: usize = 4_096;
/// Actions remembered at most, over all transactions.
pub const MAX_ACTIONS: usize = 65_536;
/// Actions of the largest transaction remembered.
pub const MAX_ACTIONS_PER_ENTRY: usize = 256;

/// One committed transaction: its table, version and uuid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    uri: String,
    version: u64,
    uuid: String,
}

#[derive(Debug, Default)]
struct Known {
    lists: HashMap<Key, Arc<ActionTxn>>,
    /// Insertion order, oldest first: the eviction order.
    order: VecDeque<Key>,
    /// Actions over all remembered lists.
    actions: usize,
}

impl Known {
    fn insert(&mut self, key: Key, list: Arc<ActionTxn>) {
        let size = list.actions.len();
        if size > MAX_ACTIONS_PER_ENTRY || self.lists.contains_key(&key) {
            return;
        }
        while self.lists.len() >= MAX_ENTRIES || self.actions + size > MAX_ACTIONS {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(gone) = self.lists.remove(&oldest) {
                self.actions -= gone.actions.len();
            }
        }
        self.actions += size;
        self.order.push_back(key.clone());
        self.lists.insert(key, list);
        debug_assert_eq!(self.lists.len(), self.order.len(), "one order entry per list");
        debug_assert!(self.lists.len() <= MAX_ENTRIES && self.actions <= MAX_ACTIONS, "within the bounds");
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
    let key = key(uri, version, txn);
    if let Some(list) = lock().lists.get(&key).cloned() {
        return Ok((*list).clone());
    }
    let list = crate::history::actions_of(txn)?;
    lock().insert(key, Arc::new(list.clone()));
    Ok(list)
}

/// Remember the list of the transaction our commit landed as `landed`'s version, decoded from the
/// transaction Lance committed (in `landed`'s session cache right after the commit; when it is not
/// there, nothing is read and nothing remembered). Called after the put: the decoding delays only
/// the writer that landed, not the table's next commit.
pub async fn remember_landed(landed: &Dataset) {
    let version = landed.manifest().version;
    let Some(txn) = crate::history::cached_transaction_shared(landed, version).await else { return };
    let key = key(landed.uri(), version, &txn);
    if lock().lists.contains_key(&key) {
        return;
    }
    if let Ok(list) = crate::history::actions_of(&txn) {
        lock().insert(key, Arc::new(list));
    }
}

/// The list remembered for the transaction `uuid` committed at `version` of the table at `uri`, if
/// one is (for tests and diagnostics: readers go through [`actions_of_committed`]).
pub fn remembered(uri: &str, version: u64, uuid: &str) -> Option<ActionTxn> {
    let key = Key { uri: uri.to_string(), version, uuid: uuid.to_string() };
    lock().lists.get(&key).map(|list| (**list).clone())
}

/// The lock, even when a thread panicked holding it: every change under it keeps the bounds.
fn lock() -> std::sync::MutexGuard<'static, Known> {
    known().lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lance_actions::OperationKind;

    fn list(actions: usize) -> Arc<ActionTxn> {
        let action = lance_actions::AnyAction::Opaque(lance_actions::actions::opaque::Opaque {
            description: "a test list".into(),
        });
        Arc::new(ActionTxn::new(OperationKind::Append, vec![action; actions]))
    }

    fn k(version: u64) -> Key {
        Key { uri: "memory://t".into(), version, uuid: format!("u{version}") }
    }

    #[test]
    fn the_oldest_list_leaves_first_when_the_entries_are_full() {
        let mut known = Known::default();
        for v in 0..MAX_ENTRIES as u64 + 1 {
            known.insert(k(v), list(1));
        }
        assert_eq!(known.lists.len(), MAX_ENTRIES);
        assert!(!known.lists.contains_key(&k(0)), "the oldest left");
        assert!(known.lists.contains_key(&k(1)) && known.lists.contains_key(&k(MAX_ENTRIES as u64)));
    }

    #[test]
    fn the_actions_in_all_stay_within_their_bound() {
        let mut known = Known::default();
        let per = MAX_ACTIONS_PER_ENTRY;
        let fit = MAX_ACTIONS / per;
        for v in 0..fit as u64 + 3 {
            known.insert(k(v), list(per));
        }
        assert_eq!(known.actions, MAX_ACTIONS);
        assert_eq!(known.lists.len(), fit);
        assert!(!known.lists.contains_key(&k(2)) && known.lists.contains_key(&k(3)), "the three oldest left");
    }

    #[test]
    fn a_list_too_large_is_not_remembered_and_one_remembered_is_not_replaced() {
        let mut known = Known::default();
        known.insert(k(1), list(MAX_ACTIONS_PER_ENTRY + 1));
        assert!(known.lists.is_empty() && known.actions == 0);
        known.insert(k(1), list(1));
        known.insert(k(1), list(2));
        assert_eq!(known.lists[&k(1)].actions.len(), 1);
        assert_eq!((known.order.len(), known.actions), (1, 1));
    }

    #[test]
    fn the_same_version_of_a_table_made_again_is_another_transaction() {
        let mut known = Known::default();
        known.insert(k(1), list(1));
        let again = Key { uuid: "another".into(), ..k(1) };
        assert!(!known.lists.contains_key(&again));
        known.insert(again.clone(), list(2));
        assert_eq!(known.lists[&again].actions.len(), 2);
        assert_eq!(known.lists[&k(1)].actions.len(), 1);
    }
}
