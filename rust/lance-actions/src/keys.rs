//! Inserted-key sets carried by `AddFragments`.
//!
//! Lance 14's `KeyExistenceFilter` is a 32 KiB bloom filter compared by AND-ing whole bitmaps, so two
//! disjoint sets of a hundred keys "intersect" about 89% of the time. `KeyHashSet` is exact up to
//! 64-bit hash collision: sorted unique xxHash64 values of each key's canonical bytes (the same bytes
//! and hash Lance's filter uses), intersected by a merge walk.

use std::sync::Arc;

use lance_core::utils::bloomfilter::sbbf::Sbbf;
use lance_table::format::key_existence::{FilterType, KeyExistenceFilter};
use xxhash_rust::xxh64::xxh64;

/// An exact set of 64-bit key hashes over the key fields `field_ids` (in key order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyHashSet {
    pub field_ids: Vec<i32>,
    /// Sorted, unique. Shared: a bulk insert's set (8 bytes a key) is cloned into every attempt's
    /// actions and the judgement at the write, and a copy each would be megabytes.
    hashes: Arc<Vec<u64>>,
}

impl KeyHashSet {
    /// Build from already computed hashes; sorts and removes duplicates.
    pub fn from_hashes(field_ids: Vec<i32>, hashes: impl IntoIterator<Item = u64>) -> Self {
        let mut hashes: Vec<u64> = hashes.into_iter().collect();
        hashes.sort_unstable();
        hashes.dedup();
        Self { field_ids, hashes: Arc::new(hashes) }
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

    /// Whether `hash` is in the set (a binary search of the sorted hashes).
    pub fn contains(&self, hash: u64) -> bool {
        self.hashes.binary_search(&hash).is_ok()
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
        if let Some(answer) = exact_against_bloom(self, other).or_else(|| exact_against_bloom(other, self)) {
            return answer;
        }
        if self.exact.is_some() || other.exact.is_some() {
            // Our exact set against a side that has only Lance's exact set (a Lance-native or
            // foreign writer): the two hash their keys differently, and Lance reads a filter of a
            // kind it does not know as an empty exact set. Nothing can be concluded.
            return Err("one side carries only our exact key set, the other only Lance's exact set".into());
        }
        match (&self.lance_filter, &other.lance_filter) {
            (Some(a), Some(b)) => a
                .intersects(b)
                .map(|(has, _maybe_false_positive)| has)
                .map_err(|e| format!("key filters cannot be compared: {e}")),
            _ => Err("one side carries only an exact key set, the other only a bloom filter".into()),
        }
    }

    /// The bitmap of Lance's bloom filter, when that is all this side declares (a Lance-native
    /// writer's merge-insert).
    fn bloom_only(&self) -> Option<&[u8]> {
        match (&self.exact, self.lance_filter.as_ref().map(|f| &f.filter)) {
            (None, Some(FilterType::Bloom { bitmap, .. })) => Some(bitmap),
            _ => None,
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
            (Some(_), None) | (None, Some(_)) if self.bloom_only().or(other.bloom_only()).is_some() => {
                "a declared key is in the other writer's bloom filter (may be a false positive)".into()
            }
            _ => "Lance key filters intersect (may be a bloom false positive)".into(),
        }
    }
}

/// One side's exact set tested key by key against the other side's bloom filter (a Lance-native
/// writer's), which holds the same xxHash64 of the same canonical bytes: as precise as the filter's
/// per-key false-positive rate, where comparing two filters bitmap against bitmap finds most
/// disjoint sets of a hundred keys intersecting. `None` when the sides are not of these shapes.
fn exact_against_bloom(exact: &InsertedKeys, bloom: &InsertedKeys) -> Option<Result<bool, String>> {
    let (exact, bitmap) = (exact.exact.as_ref()?, bloom.bloom_only()?);
    if bitmap.is_empty() {
        // Lance's reader accepts an empty bitmap, and a filter of no blocks cannot be probed.
        return Some(Err("a key filter has an empty bitmap".into()));
    }
    Some(
        Sbbf::new(bitmap)
            .map(|filter| exact.hashes().iter().any(|hash| filter.check_hash(*hash)))
            .map_err(|e| format!("a key filter cannot be read: {e}")),
    )
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

    /// Lance's bloom filter of `keys` (what a Lance-native merge-insert attaches).
    fn lance_bloom(keys: impl IntoIterator<Item = i64>) -> InsertedKeys {
        use lance_table::format::key_existence::{KeyExistenceFilterBuilder, KeyValue};
        let mut builder = KeyExistenceFilterBuilder::new(vec![0]);
        for key in keys {
            builder.insert(KeyValue::Int64(key)).expect("insert");
        }
        InsertedKeys::from_lance(builder.build())
    }

    fn exact(keys: impl IntoIterator<Item = i64>) -> InsertedKeys {
        let bytes: Vec<Vec<u8>> = keys.into_iter().map(|k| k.to_le_bytes().to_vec()).collect();
        InsertedKeys {
            lance_filter: None,
            exact: Some(KeyHashSet::from_key_bytes(vec![0], bytes.iter().map(|b| &b[..]))),
        }
    }

    /// An exact set is tested key by key against a Lance-native bloom filter, either way round:
    /// disjoint hundreds of keys do not intersect (bitmap against bitmap they nearly always do),
    /// one shared key does.
    #[test]
    fn an_exact_set_is_tested_key_by_key_against_a_lance_bloom_filter() {
        let theirs = lance_bloom(0..300);
        assert_eq!(exact(1_000..1_300).may_intersect(&theirs), Ok(false));
        assert_eq!(theirs.may_intersect(&exact(1_000..1_300)), Ok(false));
        assert_eq!(exact((1_000..1_300).chain([299])).may_intersect(&theirs), Ok(true));
        assert_eq!(theirs.may_intersect(&exact([0])), Ok(true));
        // Two bloom filters: Lance's own bitmap test, which calls these disjoint sets intersecting.
        assert_eq!(lance_bloom(1_000..1_300).may_intersect(&theirs), Ok(true));
    }

    /// What cannot be compared is an error (a conflict to callers), never a disjoint answer: our
    /// exact set against only Lance's exact set (another hash; Lance reads a filter kind it does
    /// not know as an empty exact set), or against a bloom filter with an empty bitmap.
    #[test]
    fn our_exact_set_against_only_lances_exact_set_or_an_empty_bitmap_is_unverifiable() {
        use lance_table::format::key_existence::FilterType;
        let lance_exact = |hashes: Vec<u64>| {
            InsertedKeys::from_lance(KeyExistenceFilter {
                field_ids: vec![0],
                filter: FilterType::ExactSet(hashes.into_iter().collect()),
            })
        };
        let ours = exact(0..10);
        assert!(ours.may_intersect(&lance_exact(vec![])).is_err());
        assert!(lance_exact(vec![1, 2]).may_intersect(&ours).is_err());
        let empty_bloom = InsertedKeys::from_lance(KeyExistenceFilter {
            field_ids: vec![0],
            filter: FilterType::Bloom { bitmap: vec![], num_bits: 0, number_of_items: 8192, probability: 0.00057 },
        });
        assert!(ours.may_intersect(&empty_bloom).is_err());
        assert!(empty_bloom.may_intersect(&ours).is_err());
        // Two Lance-only sides are judged as Lance judges them.
        assert_eq!(lance_exact(vec![1]).may_intersect(&lance_exact(vec![2])), Ok(false));
        assert_eq!(lance_exact(vec![1]).may_intersect(&lance_exact(vec![1, 2])), Ok(true));
    }

    #[test]
    fn differing_key_fields_are_unverifiable() {
        let a = InsertedKeys { lance_filter: None, exact: Some(KeyHashSet::from_hashes(vec![0], [1])) };
        let b = InsertedKeys { lance_filter: None, exact: Some(KeyHashSet::from_hashes(vec![1], [2])) };
        assert!(a.may_intersect(&b).is_err());
    }
}
