//! A map bounded in entries and in a weight summed over them, that forgets its oldest entries
//! first: the memory of the process-wide caches (`known.rs`: lists by bytes of encoding;
//! `states.rs`: table states by fragments).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub(crate) struct OldestFirst<K, V> {
    entries: HashMap<K, (V, usize)>,
    /// Insertion order, oldest first: the eviction order.
    order: VecDeque<K>,
    /// The weights of all entries, summed.
    weight: usize,
    max_entries: usize,
    max_weight: usize,
}

impl<K: Clone + Eq + Hash, V> OldestFirst<K, V> {
    pub(crate) fn new(max_entries: usize, max_weight: usize) -> Self {
        Self { entries: HashMap::new(), order: VecDeque::new(), weight: 0, max_entries, max_weight }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(value, _)| value)
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }

    /// The keys, oldest first.
    #[cfg(test)]
    pub(crate) fn order(&self) -> &VecDeque<K> {
        &self.order
    }

    /// Add `value` under `key`, which must be absent, forgetting the oldest entries until both
    /// bounds hold. A value heavier than the whole bound is not added, and nothing is forgotten.
    pub(crate) fn insert(&mut self, key: K, value: V, weight: usize) {
        debug_assert!(!self.entries.contains_key(&key), "a key is removed before it is added again");
        if weight > self.max_weight {
            return;
        }
        while self.entries.len() >= self.max_entries || self.weight + weight > self.max_weight {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some((_, gone)) = self.entries.remove(&oldest) {
                self.weight -= gone;
            }
        }
        self.weight += weight;
        self.order.push_back(key.clone());
        self.entries.insert(key, (value, weight));
        debug_assert_eq!(self.entries.len(), self.order.len(), "one order entry per entry");
        debug_assert!(self.entries.len() <= self.max_entries && self.weight <= self.max_weight, "within the bounds");
    }

    pub(crate) fn remove(&mut self, key: &K) {
        if let Some((_, gone)) = self.entries.remove(key) {
            self.weight -= gone;
            self.order.retain(|k| k != key);
        }
        debug_assert_eq!(self.entries.len(), self.order.len(), "one order entry per entry");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_under_either_bound_and_the_order_follows() {
        let mut map = OldestFirst::new(3, 10);
        for k in 0..4 {
            map.insert(k, (), 1);
        }
        assert_eq!((map.len(), map.weight()), (3, 3));
        assert!(!map.contains_key(&0), "the entry bound pushed the oldest out");
        // The entry bound pushes 1 out, then the weight bound 2.
        map.insert(9, (), 9);
        assert_eq!(map.order(), &VecDeque::from([3, 9]), "as many pushed out as the bounds needed");
        assert_eq!(map.weight(), 10);
        map.insert(10, (), 11);
        assert!(!map.contains_key(&10), "heavier than the whole bound");
        assert_eq!((map.len(), map.weight()), (2, 10), "and nothing was forgotten for it");
        map.remove(&3);
        assert_eq!((map.order(), map.weight()), (&VecDeque::from([9]), 9));
    }
}
