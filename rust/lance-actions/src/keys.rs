//! Inserted-key sets carried by `AddFragments`.
//!
//! Lance 14's `KeyExistenceFilter` is a 32 KiB bloom filter compared by AND-ing whole bitmaps, so two
//! disjoint sets of a hundred keys "intersect" about 89% of the time. `KeyHashSet` is exact up to
//! 64-bit hash collision: sorted unique xxHash64 values of each key's canonical bytes (the same bytes
//! and hash Lance's filter uses), intersected by a merge walk.

use lance_table::format::key_existence::KeyExistenceFilter;
use xxhash_rust::xxh64::xxh64;

/// An exact set of 64-bit key hashes over the key fields `field_ids` (in key order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyHashSet {
    pub field_ids: Vec<i32>,
    /// Sorted, unique.
    hashes: Vec<u64>,
}

impl KeyHashSet {
    /// Build from already computed hashes; sorts and removes duplicates.
    pub fn from_hashes(field_ids: Vec<i32>, hashes: impl IntoIterator<Item = u64>) -> Self {
        let mut hashes: Vec<u64> = hashes.into_iter().collect();
        hashes.sort_unstable();
        hashes.dedup();
        Self { field_ids, hashes }
    }

    /// Build from each key's canonical bytes (Lance's `KeyValue::to_bytes`).
    pub fn from_key_bytes<'a>(field_ids: Vec<i32>, keys: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self::from_hashes(field_ids, keys.into_iter().map(hash_key_bytes))
    }

    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Hashes present in both sets, by a linear merge of the two sorted lists.
    pub fn intersection(&self, other: &KeyHashSet) -> Vec<u64> {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        while i < self.hashes.len() && j < other.hashes.len() {
            match self.hashes[i].cmp(&other.hashes[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    out.push(self.hashes[i]);
                    i += 1;
                    j += 1;
                }
            }
        }
        out
    }
}

/// xxHash64 with seed 0: the hash Lance's key filter applies to a key's canonical bytes.
pub fn hash_key_bytes(bytes: &[u8]) -> u64 {
    xxh64(bytes, 0)
}

/// The keys an `AddFragments` inserts: Lance's filter (kept so Lance's resolver and Lance-native
/// writers still see it) and our exact set (when this project wrote the action).
#[derive(Debug, Clone, PartialEq)]
pub struct InsertedKeys {
    pub lance_filter: Option<KeyExistenceFilter>,
    pub exact: Option<KeyHashSet>,
}

impl InsertedKeys {
    pub fn from_lance(filter: KeyExistenceFilter) -> Self {
        Self { lance_filter: Some(filter), exact: None }
    }

    pub fn field_ids(&self) -> &[i32] {
        match (&self.exact, &self.lance_filter) {
            (Some(e), _) => &e.field_ids,
            (None, Some(f)) => &f.field_ids,
            (None, None) => &[],
        }
    }

    /// May the two sets share a key? `Err` names why the answer cannot be known (which callers must
    /// treat as a conflict). Exact sets decide exactly; otherwise Lance's filters decide as Lance does.
    pub fn may_intersect(&self, other: &InsertedKeys) -> Result<bool, String> {
        if self.field_ids() != other.field_ids() {
            return Err(format!("key fields differ: ours {:?}, committed {:?}", self.field_ids(), other.field_ids()));
        }
        if let (Some(a), Some(b)) = (&self.exact, &other.exact) {
            return Ok(!a.intersection(b).is_empty());
        }
        match (&self.lance_filter, &other.lance_filter) {
            (Some(a), Some(b)) => a
                .intersects(b)
                .map(|(has, _maybe_false_positive)| has)
                .map_err(|e| format!("key filters cannot be compared: {e}")),
            _ => Err("one side carries only an exact key set, the other only a bloom filter".into()),
        }
    }

    /// A readable account of an intersection: the first few shared hashes and a count.
    pub fn describe_intersection(&self, other: &InsertedKeys) -> String {
        match (&self.exact, &other.exact) {
            (Some(a), Some(b)) => {
                let shared = a.intersection(b);
                let first: Vec<String> = shared.iter().take(5).map(|h| format!("{h:#018x}")).collect();
                format!("{} shared key hash(es), first: {}", shared.len(), first.join(", "))
            }
            _ => "Lance key filters intersect (may be a bloom false positive)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sets_intersect_only_on_shared_keys() {
        let a = KeyHashSet::from_key_bytes(vec![0], [b"1".as_slice(), b"2".as_slice()]);
        let b = KeyHashSet::from_key_bytes(vec![0], [b"3".as_slice()]);
        let c = KeyHashSet::from_key_bytes(vec![0], [b"2".as_slice(), b"9".as_slice()]);
        assert!(a.intersection(&b).is_empty());
        assert_eq!(a.intersection(&c), vec![hash_key_bytes(b"2")]);
    }

    #[test]
    fn differing_key_fields_are_unverifiable() {
        let a = InsertedKeys { lance_filter: None, exact: Some(KeyHashSet::from_hashes(vec![0], [1])) };
        let b = InsertedKeys { lance_filter: None, exact: Some(KeyHashSet::from_hashes(vec![1], [2])) };
        assert!(a.may_intersect(&b).is_err());
    }
}
