//! A table's fragments by id, sharing the manifest's list instead of copying it.
//!
//! Every commit attempt summarises one or two manifests (its base, and the head it lands on), and the
//! driver applies the transaction to a copy of the head. A manifest holds every fragment of the
//! table, each with its data files, paths and field lists; copying them all, two or three times per
//! attempt, was most of what our commit path spent beyond Lance's own (`design/benchmarks.md`, "An
//! append's CPU"). An action changes a handful of fragments, so the map keeps the manifest's
//! `Arc<Vec<Fragment>>` as it is and records only the changes: a copy of this map copies the
//! changes, and a change copies the one fragment it touches.

use std::collections::BTreeMap;
use std::fmt;
use std::iter::Peekable;
use std::sync::Arc;

use lance_table::format::Fragment;

/// Fragments by id, iterated in ascending id order (as a `BTreeMap<u64, Fragment>` would be).
#[derive(Clone, Default)]
pub struct Fragments {
    /// The manifest's list, shared with it and never written.
    base: Arc<Vec<Fragment>>,
    /// Positions of `base` in ascending id order, when the list is not already in that order (Lance
    /// keeps appended fragments in id order, but a compaction puts a new id where the old one was).
    order: Option<Arc<Vec<usize>>>,
    /// What changed since `base`: a fragment added or replaced (`Some`), or removed (`None`).
    changes: BTreeMap<u64, Option<Fragment>>,
    /// How many fragments there are, changes included.
    len: usize,
}

impl Fragments {
    /// The fragments of a manifest's list, sharing it. Ids are unique in a manifest Lance wrote; a
    /// list with a repeated id keeps the later fragment under it, as collecting into a map would.
    pub fn shared(list: Arc<Vec<Fragment>>) -> Self {
        let in_order = list.windows(2).all(|pair| pair[0].id < pair[1].id);
        if in_order {
            let len = list.len();
            let fragments = Self { base: list, order: None, changes: BTreeMap::new(), len };
            fragments.debug_check();
            return fragments;
        }
        // Ids with their positions, sorted together, so the sort reads no fragment (at 10,000
        // fragments after ten compactions: 170 us, against 264 us reading ids through the list and
        // 3.1 ms for the copy this map replaces). Among equal ids the later position sorts last,
        // which the dedup below keeps.
        let mut by_id: Vec<(u64, usize)> = list.iter().enumerate().map(|(p, f)| (f.id, p)).collect();
        by_id.sort_unstable();
        let mut kept: Vec<usize> = Vec::with_capacity(by_id.len());
        let mut last_id = None;
        for (id, p) in by_id {
            match kept.last_mut() {
                Some(last) if last_id == Some(id) => *last = p,
                _ => kept.push(p),
            }
            last_id = Some(id);
        }
        let len = kept.len();
        let fragments = Self { base: list, order: Some(Arc::new(kept)), changes: BTreeMap::new(), len };
        fragments.debug_check();
        fragments
    }

    /// The map's invariants, checked in debug builds where a whole walk is already paid for: the
    /// count kept is the count iterated, and the walk yields strictly ascending ids (the shared
    /// list's order merged with the changes, none of them twice).
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            let ids: Vec<u64> = self.keys().copied().collect();
            debug_assert_eq!(ids.len(), self.len, "the count kept is the count held");
            debug_assert!(ids.windows(2).all(|p| p[0] < p[1]), "ids ascend, each once");
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, id: &u64) -> Option<&Fragment> {
        match self.changes.get(id) {
            Some(changed) => changed.as_ref(),
            None => self.in_base(*id),
        }
    }

    pub fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }

    /// The fragment to change in place: copied out of the shared list the first time.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut Fragment> {
        if !self.changes.contains_key(id) {
            let copy = self.in_base(*id)?.clone();
            self.changes.insert(*id, Some(copy));
        }
        self.changes.get_mut(id).and_then(Option::as_mut)
    }

    /// Add or replace a fragment; whether it replaced one. (Unlike a map's, it does not hand back
    /// the one replaced: that would copy it out of the shared list, and no action needs it.)
    pub fn insert(&mut self, id: u64, fragment: Fragment) -> bool {
        let replaced = self.remove(&id);
        debug_assert!(self.get(&id).is_none(), "removed before it is added");
        self.changes.insert(id, Some(fragment));
        self.len += 1;
        debug_assert!(self.get(&id).is_some(), "held once added");
        replaced
    }

    /// Remove a fragment; whether there was one (without a copy of it, as [`Fragments::insert`]).
    pub fn remove(&mut self, id: &u64) -> bool {
        let held = match self.changes.get(id) {
            Some(changed) => changed.is_some(),
            None => self.in_base(*id).is_some(),
        };
        if held {
            // A removed fragment stays marked removed, else the shared list's one would show again.
            self.changes.insert(*id, None);
            debug_assert!(self.len > 0, "a held fragment was counted");
            self.len -= 1;
        }
        debug_assert!(self.get(id).is_none(), "gone once removed");
        held
    }

    /// No fragments at all (a table replaced by an overwrite).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Ids and fragments in ascending id order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { base: self.base_in_order().peekable(), changes: self.changes.iter().peekable() }
    }

    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = &Fragment> + '_ {
        self.iter().map(|(_, fragment)| fragment)
    }

    /// The highest id held: the shared list is walked from its top, past the ids changed.
    pub fn last_id(&self) -> Option<u64> {
        let in_base = (0..self.base_len_in_order())
            .rev()
            .filter_map(|k| self.base_in_order_at(k))
            .map(|f| f.id)
            .find(|id| !self.changes.contains_key(id));
        let changed = self.changes.iter().rev().find(|(_, f)| f.is_some()).map(|(id, _)| *id);
        in_base.max(changed)
    }

    fn in_base(&self, id: u64) -> Option<&Fragment> {
        let at = match &self.order {
            None => self.base.binary_search_by_key(&id, |f| f.id).ok()?,
            Some(order) => {
                let k = order.binary_search_by_key(&id, |p| self.base[*p].id).ok()?;
                order[k]
            }
        };
        self.base.get(at)
    }

    fn base_in_order(&self) -> BaseInOrder<'_> {
        BaseInOrder { of: self, next: 0 }
    }

    /// How many fragments the shared list holds by distinct id.
    fn base_len_in_order(&self) -> usize {
        self.order.as_ref().map_or(self.base.len(), |order| order.len())
    }

    /// The shared list's `k`-th fragment in id order.
    fn base_in_order_at(&self, k: usize) -> Option<&Fragment> {
        match &self.order {
            None => self.base.get(k),
            Some(order) => self.base.get(*order.get(k)?),
        }
    }
}

/// The shared list in ascending id order.
struct BaseInOrder<'a> {
    of: &'a Fragments,
    next: usize,
}

impl<'a> Iterator for BaseInOrder<'a> {
    type Item = &'a Fragment;

    fn next(&mut self) -> Option<&'a Fragment> {
        let fragment = self.of.base_in_order_at(self.next)?;
        self.next += 1;
        Some(fragment)
    }
}

/// [`Fragments::iter`]: the shared list and the changes merged by id, a change winning.
pub struct Iter<'a> {
    base: Peekable<BaseInOrder<'a>>,
    changes: Peekable<std::collections::btree_map::Iter<'a, u64, Option<Fragment>>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a u64, &'a Fragment);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let base_id = self.base.peek().map(|f| f.id);
            let change_id = self.changes.peek().map(|(id, _)| **id);
            let from_changes = match (base_id, change_id) {
                (None, None) => return None,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(b), Some(c)) => {
                    if b == c {
                        // Replaced or removed: the change speaks for this id.
                        self.base.next();
                    }
                    c <= b
                }
            };
            if !from_changes {
                let fragment = self.base.next()?;
                return Some((&fragment.id, fragment));
            }
            if let (id, Some(fragment)) = self.changes.next()? {
                return Some((id, fragment));
            }
        }
    }
}

impl<'a> IntoIterator for &'a Fragments {
    type Item = (&'a u64, &'a Fragment);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<(u64, Fragment)> for Fragments {
    fn from_iter<I: IntoIterator<Item = (u64, Fragment)>>(items: I) -> Self {
        let mut out = Self::default();
        for (id, fragment) in items {
            out.insert(id, fragment);
        }
        out
    }
}

impl Extend<(u64, Fragment)> for Fragments {
    fn extend<I: IntoIterator<Item = (u64, Fragment)>>(&mut self, items: I) {
        for (id, fragment) in items {
            self.insert(id, fragment);
        }
    }
}

impl PartialEq for Fragments {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Fragments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    //! Model-based: every operation on a map built over a shared list, in or out of id order, is
    //! checked against the same operation on a `BTreeMap` built by copying the list.

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use lance_table::format::Fragment;
    use proptest::prelude::*;

    use super::Fragments;

    fn fragment(id: u64, rows: usize) -> Fragment {
        let mut f = Fragment::new(id);
        f.physical_rows = Some(rows);
        f
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, usize),
        Remove(u64),
        Touch(u64, usize),
        Clone,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..24, 0usize..9).prop_map(|(id, rows)| Op::Insert(id, rows)),
            3 => (0u64..24).prop_map(Op::Remove),
            3 => (0u64..24, 0usize..9).prop_map(|(id, rows)| Op::Touch(id, rows)),
            1 => Just(Op::Clone),
            1 => Just(Op::Clear),
        ]
    }

    fn assert_same(ours: &Fragments, model: &BTreeMap<u64, Fragment>) {
        assert_eq!(ours.len(), model.len());
        assert_eq!(ours.is_empty(), model.is_empty());
        let listed: Vec<(u64, Fragment)> = ours.iter().map(|(id, f)| (*id, f.clone())).collect();
        let expected: Vec<(u64, Fragment)> = model.iter().map(|(id, f)| (*id, f.clone())).collect();
        assert_eq!(listed, expected);
        assert_eq!(ours.last_id(), model.keys().next_back().copied());
        for id in 0..26 {
            assert_eq!(ours.get(&id), model.get(&id), "fragment {id}");
            assert_eq!(ours.contains_key(&id), model.contains_key(&id));
        }
    }

    proptest! {
        #[test]
        fn behaves_as_a_map_of_copied_fragments(
            ids in proptest::collection::vec(0u64..20, 0..12),
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            // The list as a manifest may hold it: any order (a repeated id keeps the later one).
            let list: Vec<Fragment> = ids.iter().enumerate().map(|(k, id)| fragment(*id, k)).collect();
            let mut model: BTreeMap<u64, Fragment> = list.iter().map(|f| (f.id, f.clone())).collect();
            let shared = Arc::new(list);
            let mut ours = Fragments::shared(shared.clone());
            let untouched = shared.as_ref().clone();
            assert_same(&ours, &model);
            for op in ops {
                match op {
                    Op::Insert(id, rows) => {
                        prop_assert_eq!(ours.insert(id, fragment(id, rows)), model.insert(id, fragment(id, rows)).is_some());
                    }
                    Op::Remove(id) => prop_assert_eq!(ours.remove(&id), model.remove(&id).is_some()),
                    Op::Touch(id, rows) => {
                        let got = ours.get_mut(&id).map(|f| f.physical_rows = Some(rows));
                        let want = model.get_mut(&id).map(|f| f.physical_rows = Some(rows));
                        prop_assert_eq!(got, want);
                    }
                    Op::Clone => {
                        let copy = ours.clone();
                        prop_assert!(copy == ours);
                        ours = copy;
                    }
                    Op::Clear => {
                        ours.clear();
                        model.clear();
                    }
                }
                assert_same(&ours, &model);
            }
            // The manifest's list is never written.
            prop_assert_eq!(shared.as_ref(), &untouched);
        }
    }

    #[test]
    fn a_copy_shares_the_list_and_a_change_stays_in_its_copy() {
        let shared = Arc::new(vec![fragment(0, 1), fragment(1, 1)]);
        let first = Fragments::shared(shared.clone());
        let mut second = first.clone();
        assert_eq!(Arc::strong_count(&shared), 3, "both maps hold the manifest's list, not a copy");
        if let Some(f) = second.get_mut(&1) {
            f.physical_rows = Some(7);
        }
        second.remove(&0);
        assert_eq!(first.get(&1).and_then(|f| f.physical_rows), Some(1));
        assert!(first.contains_key(&0));
        assert_eq!(second.get(&1).and_then(|f| f.physical_rows), Some(7));
        assert!(!second.contains_key(&0));
        assert!(first != second);
    }

    #[test]
    fn a_fragment_removed_twice_stays_removed() {
        // The first version forgot the removal on the second remove, and the shared one showed again.
        let mut ours = Fragments::shared(Arc::new(vec![fragment(13, 1)]));
        assert!(ours.remove(&13));
        assert!(!ours.remove(&13));
        assert!(ours.get(&13).is_none() && ours.is_empty() && ours.iter().next().is_none());
    }

    #[test]
    fn a_list_out_of_id_order_iterates_in_id_order() {
        // A compaction puts the new fragment (id 5) where the old one was.
        let ours = Fragments::shared(Arc::new(vec![fragment(5, 1), fragment(1, 1), fragment(3, 1)]));
        assert_eq!(ours.keys().copied().collect::<Vec<_>>(), vec![1, 3, 5]);
        assert_eq!(ours.last_id(), Some(5));
        assert!(ours.get(&3).is_some() && ours.get(&2).is_none());
    }
}
