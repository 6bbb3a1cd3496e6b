//! The key of a keyed table and the keys of rows: extraction, canonical bytes, hashes, display.
//!
//! Key values and their bytes are Lance's own (`KeyValue`, `KeyValue::to_bytes`), so the exact set we
//! carry and the bloom filter Lance's resolver compares are built from the same hash of the same bytes.

use std::collections::{HashMap, HashSet};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, make_array};
use arrow_data::transform::MutableArrayData;
use arrow_schema::DataType;
use lance_actions::keys::{InsertedKeys, KeyHashSet};
use lance_core::datatypes::Schema;
use lance_core::utils::bloomfilter::sbbf::SbbfBuilder;
use lance_table::format::key_existence::{
    BLOOM_FILTER_DEFAULT_NUMBER_OF_ITEMS, BLOOM_FILTER_DEFAULT_PROBABILITY, FilterType, KeyExistenceFilter, KeyValue,
    extract_key_value_from_batch,
};

use crate::error::{ConflictCause, Error, KeySample, Result};

/// The primary key of a keyed table: field names and Lance field ids, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    pub names: Vec<String>,
    pub field_ids: Vec<i32>,
}

impl KeySpec {
    /// The schema's unenforced primary key.
    pub fn of_schema(schema: &Schema) -> Self {
        let (field_ids, names) = lance_actions::table_class::primary_key_of(schema);
        Self { names, field_ids }
    }

    /// Check that each key column of `batch` exists with a type a key can have.
    pub fn check_batch_schema(&self, batch: &RecordBatch) -> Result<()> {
        for name in &self.names {
            let Some(field) = batch.schema().field_with_name(name).ok().cloned() else {
                return Err(Error::Input { detail: format!("the rows have no key column '{name}'") });
            };
            check_key_type(name, field.data_type())?;
        }
        Ok(())
    }

    /// The key of every row of `batch`, in row order. A null key part is an error naming the row.
    pub fn keys_of(&self, batch: &RecordBatch, first_row: usize) -> Result<Vec<KeyValue>> {
        let mut out = Vec::with_capacity(batch.num_rows());
        self.visit_keys(batch, first_row, |key| out.push(key))?;
        Ok(out)
    }

    /// The keys of all rows of `batches`, in order, in one allocation (a bulk insert holds 100K
    /// keys or more: growing the vector batch by batch would copy and free it along the way).
    pub fn keys_of_all(&self, batches: &[RecordBatch]) -> Result<Vec<KeyValue>> {
        let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
        for batch in batches {
            let first_row = out.len();
            self.visit_keys(batch, first_row, |key| out.push(key))?;
        }
        Ok(out)
    }

    /// Hand `visit` the key of every row of `batch`, in row order, without collecting them. Rows
    /// are numbered from `first_row` in errors; a null key part is an error naming the row.
    pub fn visit_keys(&self, batch: &RecordBatch, first_row: usize, mut visit: impl FnMut(KeyValue)) -> Result<()> {
        self.check_batch_schema(batch)?;
        for name in &self.names {
            if let Some(column) = batch.column_by_name(name)
                && column.null_count() > 0
            {
                let row = (0..column.len()).find(|i| column.is_null(*i)).unwrap_or(0);
                return Err(Error::NullKey { row: first_row + row, column: name.clone() });
            }
        }
        if let [name] = self.names.as_slice()
            && let Some(column) = batch.column_by_name(name)
            && visit_integer_keys(column.as_ref(), &mut visit)
        {
            return Ok(());
        }
        for row in 0..batch.num_rows() {
            let key = extract_key_value_from_batch(batch, row, &self.names).ok_or_else(|| Error::Input {
                detail: format!("row {} has a key Lance cannot read", first_row + row),
            })?;
            visit(key);
        }
        Ok(())
    }

    /// What the write declares it may insert: our exact hash set plus Lance's own filter, so that
    /// both our driver and Lance's resolver (and Lance-native writers) see the keys.
    pub fn inserted_keys(&self, keys: &[KeyValue]) -> Result<InsertedKeys> {
        self.inserted_keys_of(keys, self.hash_set(keys))
    }

    /// [`KeySpec::inserted_keys`] of `keys`, whose exact set `exact` is. Lance's filter is an exact
    /// set of Lance's own key hashes up to [`EXACT_LANCE_FILTER_MAX_KEYS`] keys, and its bloom
    /// filter, built from `exact`'s hashes (inserting a hash twice sets no other bit), above.
    pub fn inserted_keys_of(&self, keys: &[KeyValue], exact: KeyHashSet) -> Result<InsertedKeys> {
        let few = (keys.len() <= EXACT_LANCE_FILTER_MAX_KEYS).then_some(keys);
        Ok(InsertedKeys { lance_filter: Some(self.lance_filter(few, &exact)?), exact: Some(exact) })
    }

    /// Lance's filter of keys whose exact set is `exact`: Lance's exact set of `few` (the values,
    /// given when there are at most [`EXACT_LANCE_FILTER_MAX_KEYS`]), else its bloom filter built
    /// from `exact`'s hashes (inserting a hash twice sets no other bit).
    fn lance_filter(&self, few: Option<&[KeyValue]>, exact: &KeyHashSet) -> Result<KeyExistenceFilter> {
        match few {
            Some(keys) => Ok(lance_exact_filter_of(self.field_ids.clone(), keys)),
            None => lance_filter_of(self.field_ids.clone(), exact.hashes()),
        }
    }

    /// The exact hash set of `keys`.
    pub fn hash_set(&self, keys: &[KeyValue]) -> KeyHashSet {
        KeyHashSet::from_hashes(self.field_ids.clone(), keys.iter().map(hash_key))
    }

    /// `keys`, refused ([`ConflictCause::DuplicateInBatch`], naming them) when a key occurs twice;
    /// with their exact hash set, which the check computes and an insert then declares. Distinct
    /// hashes are distinct keys, so the keys are compared one by one only when two hashes are
    /// equal (a collision of two distinct keys is not a duplicate).
    pub fn unique(&self, keys: Vec<KeyValue>) -> Result<UniqueKeys> {
        let exact = self.hash_set(&keys);
        if exact.len() != keys.len() {
            let dups = duplicates(&keys);
            if !dups.is_empty() {
                return Err(Error::KeyConflict { keys: sample(&dups), cause: ConflictCause::DuplicateInBatch });
            }
        }
        Ok(UniqueKeys { keys, exact })
    }
}

impl KeySpec {
    /// The keys of `rows`, refused ([`ConflictCause::DuplicateInBatch`], naming them) when a key
    /// occurs twice, as their exact hash set: what a strict insert declares and probes the table
    /// with. The key values are kept only when there are at most [`KEPT_KEYS_MAX`]; past that, a
    /// copy of the key columns is, to name a conflict from, so a bulk insert holds its key bytes and
    /// an 8-byte hash a key rather than a 32-byte value and a hash (`design/benchmarks.md`, keyed
    /// bench (c)), and no buffer of `rows`.
    pub fn row_keys(&self, rows: &[RecordBatch]) -> Result<RowKeys> {
        let count: usize = rows.iter().map(RecordBatch::num_rows).sum();
        let mut hashes = Vec::with_capacity(count);
        let mut kept = (count <= KEPT_KEYS_MAX).then(|| Vec::with_capacity(count));
        for batch in rows {
            let first_row = hashes.len();
            self.visit_keys(batch, first_row, |key| {
                hashes.push(hash_key(&key));
                if let Some(kept) = kept.as_mut() {
                    kept.push(key);
                }
            })?;
        }
        let exact = KeyHashSet::from_hashes(self.field_ids.clone(), hashes);
        // Distinct hashes are distinct keys; equal hashes are compared by value (a collision of two
        // distinct keys is not a duplicate).
        if exact.len() != count {
            let dups = duplicates(&self.keys_of_all(rows)?);
            if !dups.is_empty() {
                return Err(Error::KeyConflict { keys: sample(&dups), cause: ConflictCause::DuplicateInBatch });
            }
        }
        debug_assert!(kept.as_ref().is_none_or(|k| k.len() == count), "every kept key is a row's");
        let key_columns = match kept {
            Some(_) => Vec::new(),
            None => rows.iter().map(|batch| self.key_columns_of(batch)).collect::<Result<_>>()?,
        };
        Ok(RowKeys { spec: self.clone(), key_columns, kept, exact, count })
    }

    /// A copy of `batch`'s key columns in buffers of their own: a column shares its buffers with
    /// whatever it was read from (an Arrow IPC reader slices one buffer per batch), which holding
    /// the column would keep alive whole.
    fn key_columns_of(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let schema = batch.schema();
        let indices = self
            .names
            .iter()
            .map(|name| {
                schema
                    .index_of(name)
                    .map_err(|_| Error::Input { detail: format!("the rows have no key column '{name}'") })
            })
            .collect::<Result<Vec<usize>>>()?;
        let keys =
            batch.project(&indices).map_err(|e| Error::Input { detail: format!("the rows' key columns: {e}") })?;
        let copies = keys.columns().iter().map(|column| owned_copy(column.as_ref())).collect();
        RecordBatch::try_new(keys.schema(), copies)
            .map_err(|e| Error::Input { detail: format!("the rows' key columns: {e}") })
    }
}

/// `array`'s values in buffers of its own.
fn owned_copy(array: &dyn Array) -> ArrayRef {
    let data = array.to_data();
    let mut copy = MutableArrayData::new(vec![&data], false, data.len());
    copy.extend(0, 0, data.len());
    make_array(copy.freeze())
}

/// Up to this many keys a [`RowKeys`] keeps as values: an `IN` lookup and Lance's exact-set filter
/// (both up to 1,024 keys) are built from them.
pub const KEPT_KEYS_MAX: usize = EXACT_LANCE_FILTER_MAX_KEYS;

/// The distinct keys of rows ([`KeySpec::row_keys`]): their exact hash set, and the values when few.
/// It holds no buffer of the rows, so they can go once written.
#[derive(Debug, Clone)]
pub struct RowKeys {
    spec: KeySpec,
    /// A copy of the rows' key columns, batch by batch, when the values are not kept.
    key_columns: Vec<RecordBatch>,
    /// The key values in row order, when there are at most [`KEPT_KEYS_MAX`].
    kept: Option<Vec<KeyValue>>,
    exact: KeyHashSet,
    count: usize,
}

impl RowKeys {
    /// The key these are values of.
    pub fn spec(&self) -> &KeySpec {
        &self.spec
    }

    /// How many keys (rows) there are.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The exact hash set of the keys.
    pub fn exact(&self) -> &KeyHashSet {
        &self.exact
    }

    /// The key values in row order, when there are at most [`KEPT_KEYS_MAX`].
    pub fn kept(&self) -> Option<&[KeyValue]> {
        self.kept.as_deref()
    }

    /// What an insert of these keys declares ([`KeySpec::inserted_keys`], without rebuilding the
    /// hash set).
    pub fn declared(&self) -> Result<InsertedKeys> {
        let lance_filter = self.spec.lance_filter(self.kept(), &self.exact)?;
        Ok(InsertedKeys { lance_filter: Some(lance_filter), exact: Some(self.exact.clone()) })
    }

    /// The keys, in row order, that are in `found`: read from the copy of the key columns when the
    /// values are not kept.
    pub fn among(&self, found: &HashSet<KeyValue, FastHash>) -> Result<Vec<KeyValue>> {
        let mut out = Vec::new();
        if found.is_empty() {
            return Ok(out);
        }
        if let Some(kept) = &self.kept {
            out.extend(kept.iter().filter(|k| found.contains(*k)).cloned());
            return Ok(out);
        }
        let mut first_row = 0;
        for batch in &self.key_columns {
            self.spec.visit_keys(batch, first_row, |key| {
                if found.contains(&key) {
                    out.push(key);
                }
            })?;
            first_row += batch.num_rows();
        }
        Ok(out)
    }
}

/// Keys checked to be distinct ([`KeySpec::unique`]), with their exact hash set.
#[derive(Debug, Clone)]
pub struct UniqueKeys {
    pub keys: Vec<KeyValue>,
    pub exact: KeyHashSet,
}

/// The keys of a one-column integer key without nulls, read straight from the typed column: what
/// Lance's `extract_key_value_from_batch` gives row by row (32-bit values widened to 64), without
/// its per-row column lookup and allocation, which cost a bulk insert of 100K rows milliseconds.
/// False (nothing visited) for any other column type.
fn visit_integer_keys(column: &dyn Array, visit: &mut impl FnMut(KeyValue)) -> bool {
    match column.data_type() {
        DataType::Int64 => column.as_primitive::<Int64Type>().values().iter().for_each(|v| visit(KeyValue::Int64(*v))),
        DataType::Int32 => {
            column.as_primitive::<Int32Type>().values().iter().for_each(|v| visit(KeyValue::Int64(i64::from(*v))))
        }
        DataType::UInt64 => {
            column.as_primitive::<UInt64Type>().values().iter().for_each(|v| visit(KeyValue::UInt64(*v)))
        }
        DataType::UInt32 => {
            column.as_primitive::<UInt32Type>().values().iter().for_each(|v| visit(KeyValue::UInt64(u64::from(*v))))
        }
        _ => return false,
    }
    true
}

/// Up to this many keys, the filter a keyed write attaches for Lance's resolver is Lance's exact
/// set (about 10 bytes a key) rather than its bloom filter (32 KiB however few keys it holds, which
/// a commit writes twice, in its transaction file and its manifest: what kept a 10-row upsert
/// slower than Lance's own, `design/benchmarks.md`, "What a keyed commit writes").
///
/// Lance 14 compares two exact sets exactly, and an exact set with a bloom filter as intersecting;
/// so a Lance-native merge-insert on its bloom path committing beside ours retries where its bloom
/// filter might have told the two apart. At a thousand keys per side it cannot: two bloom filters
/// are compared bitmap against bitmap, and disjoint sets of that size always intersect
/// (`fencing.rs` pins this on Lance 14.0.2). Our own driver tests our exact set key by key against
/// a Lance-native bloom filter (`InsertedKeys::may_intersect`), so that direction loses nothing.
pub const EXACT_LANCE_FILTER_MAX_KEYS: usize = 1024;

/// Lance's exact-set key filter over `keys`: each key's `KeyValue::hash_value`, the hash Lance
/// compares exact sets by.
fn lance_exact_filter_of(field_ids: Vec<i32>, keys: &[KeyValue]) -> KeyExistenceFilter {
    KeyExistenceFilter { field_ids, filter: FilterType::ExactSet(keys.iter().map(KeyValue::hash_value).collect()) }
}

/// Lance's key filter over keys with these hashes ([`hash_key`]): what its
/// `KeyExistenceFilterBuilder` builds from the keys themselves (its bloom filter, sized by its
/// defaults, fed the xxHash64 of each key's canonical bytes with seed 0, which is [`hash_key`]),
/// without the copy of every key's bytes the builder makes (milliseconds for a bulk insert).
/// `tests::lances_filter_is_built_from_the_hashes` holds the two equal.
fn lance_filter_of(field_ids: Vec<i32>, hashes: &[u64]) -> Result<KeyExistenceFilter> {
    let mut bloom = SbbfBuilder::new()
        .expected_items(BLOOM_FILTER_DEFAULT_NUMBER_OF_ITEMS)
        .false_positive_probability(BLOOM_FILTER_DEFAULT_PROBABILITY)
        .build()
        .map_err(|e| Error::Input { detail: format!("Lance's key filter cannot be sized: {e}") })?;
    for hash in hashes {
        bloom.insert_hash(*hash);
    }
    let num_bits = u32::try_from(bloom.size_bytes() * 8)
        .map_err(|_| Error::Input { detail: "Lance's key filter is too large".into() })?;
    Ok(KeyExistenceFilter {
        field_ids,
        filter: FilterType::Bloom {
            bitmap: bloom.to_bytes(),
            num_bits,
            number_of_items: BLOOM_FILTER_DEFAULT_NUMBER_OF_ITEMS,
            probability: BLOOM_FILTER_DEFAULT_PROBABILITY,
        },
    })
}

/// Can a column of this type be (part of) a key?
pub(crate) fn check_key_type(name: &str, data_type: &DataType) -> Result<()> {
    match data_type {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Binary
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt32
        | DataType::UInt64 => Ok(()),
        other => Err(Error::UnsupportedKeyType { column: name.to_string(), data_type: other.to_string() }),
    }
}

/// The 64-bit hash of a key: xxHash64 of Lance's canonical bytes (`KeyValue::to_bytes`), as
/// Lance's filter hashes it. A one-part key's bytes are hashed where they are, not copied first.
pub fn hash_key(key: &KeyValue) -> u64 {
    use lance_actions::keys::hash_key_bytes;
    match key {
        KeyValue::Int64(v) => hash_key_bytes(&v.to_le_bytes()),
        KeyValue::UInt64(v) => hash_key_bytes(&v.to_le_bytes()),
        KeyValue::String(v) => hash_key_bytes(v.as_bytes()),
        KeyValue::Binary(v) => hash_key_bytes(v),
        composite => hash_key_bytes(&composite.to_bytes()),
    }
}

/// The hasher of the sets of keys a write builds (100K keys and more in a bulk insert): std's
/// SipHash costs several times more per key; foldhash is seeded per process.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// A set of keys under [`FastHash`].
pub(crate) type KeySet<'a> = HashSet<&'a KeyValue, FastHash>;

/// A key as a user reads it (one definition, shared with replay's key probe).
pub use lance_actions_commit::presence::display_key;

/// Keys that occur more than once, each reported once, in first-occurrence order.
pub fn duplicates(keys: &[KeyValue]) -> Vec<KeyValue> {
    let mut seen: HashMap<&KeyValue, usize, FastHash> =
        HashMap::with_capacity_and_hasher(keys.len(), FastHash::default());
    let mut out = Vec::new();
    for key in keys {
        let n = seen.entry(key).or_insert(0);
        *n += 1;
        if *n == 2 {
            out.push(key.clone());
        }
    }
    out
}

pub fn sample(keys: &[KeyValue]) -> KeySample {
    KeySample::of(keys.iter().map(display_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema as ArrowSchema};

    fn spec(names: &[&str]) -> KeySpec {
        KeySpec { names: names.iter().map(|s| s.to_string()).collect(), field_ids: (0..names.len() as i32).collect() }
    }

    #[test]
    fn null_keys_are_refused_by_row() {
        let schema = Arc::new(ArrowSchema::new(vec![Field::new("id", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![Some(1), None]))]).unwrap();
        match spec(&["id"]).keys_of(&batch, 10) {
            Err(Error::NullKey { row, .. }) => assert_eq!(row, 11),
            other => panic!("expected a null-key error, got {other:?}"),
        }
    }

    #[test]
    fn composite_keys_hash_like_lance_bytes() {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("tenant", DataType::Utf8, false),
            Field::new("id", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(vec!["a", "a"])), Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let keys = spec(&["tenant", "id"]).keys_of(&batch, 0).unwrap();
        assert_eq!(display_key(&keys[1]), "(a, 2)");
        let mut bytes = b"a\0".to_vec();
        bytes.extend(2i64.to_le_bytes());
        bytes.push(0);
        assert_eq!(hash_key(&keys[1]), lance_actions::keys::hash_key_bytes(&bytes));
    }

    /// The integer fast path gives what Lance's own extraction gives, row for row, and the hash
    /// of every kind of key is xxHash64 of Lance's canonical bytes.
    #[test]
    fn integer_keys_read_from_the_column_are_lances_and_hash_as_its_bytes() {
        use arrow_array::{ArrayRef, Int32Array, UInt32Array, UInt64Array};
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![i64::MIN, -1, 0, 7, i64::MAX])),
            Arc::new(Int32Array::from(vec![i32::MIN, -1, 0, 7, i32::MAX])),
            Arc::new(UInt64Array::from(vec![0, 1, 7, u64::MAX - 1, u64::MAX])),
            Arc::new(UInt32Array::from(vec![0, 1, 7, u32::MAX - 1, u32::MAX])),
        ];
        for column in columns {
            let schema = Arc::new(ArrowSchema::new(vec![Field::new("id", column.data_type().clone(), false)]));
            let batch = RecordBatch::try_new(schema, vec![column.clone()]).unwrap();
            let ours = spec(&["id"]).keys_of(&batch, 0).unwrap();
            let names = ["id".to_string()];
            let lance: Vec<KeyValue> =
                (0..batch.num_rows()).map(|r| extract_key_value_from_batch(&batch, r, &names).unwrap()).collect();
            assert_eq!(ours, lance, "{}", column.data_type());
            // A slice reads its own rows, not the buffer's from its start.
            let sliced = batch.slice(1, 3);
            let lance_sliced: Vec<KeyValue> =
                (0..3).map(|r| extract_key_value_from_batch(&sliced, r, &names).unwrap()).collect();
            assert_eq!(spec(&["id"]).keys_of(&sliced, 0).unwrap(), lance_sliced, "sliced {}", column.data_type());
            assert_eq!(lance_sliced[..], lance[1..4]);
            let mut fast = Vec::new();
            assert!(
                visit_integer_keys(column.as_ref(), &mut |k| fast.push(k)),
                "the fast path takes {}",
                column.data_type()
            );
            assert_eq!(fast, lance);
        }
        let strings = StringArray::from(vec!["a"]);
        assert!(!visit_integer_keys(&strings, &mut |_| panic!("no string is read here")));
        for key in [
            KeyValue::Int64(-5),
            KeyValue::UInt64(u64::MAX),
            KeyValue::String("ключ".into()),
            KeyValue::Binary(vec![0, 255]),
            KeyValue::Composite(vec![KeyValue::String("a".into()), KeyValue::Int64(2)]),
        ] {
            assert_eq!(hash_key(&key), lance_actions::keys::hash_key_bytes(&key.to_bytes()), "{key:?}");
        }
    }

    /// Our Lance filter is the one Lance makes from the same keys, for every kind of key: its exact
    /// set up to [`EXACT_LANCE_FILTER_MAX_KEYS`] keys, its builder's bloom filter above.
    #[test]
    fn lances_filter_is_built_from_the_hashes() {
        use lance_table::format::key_existence::KeyExistenceFilterBuilder;
        let sets: Vec<Vec<KeyValue>> = vec![
            vec![],
            (0..20_000).map(KeyValue::Int64).collect(),
            (0..1_025).map(|v| KeyValue::String(format!("s{v}"))).collect(),
            (0..1_024).map(KeyValue::Int64).collect(),
            (0..300u64).map(|v| KeyValue::UInt64(v * 7919)).collect(),
            (0..500).map(|v| KeyValue::String(format!("key-{v}"))).collect(),
            vec![KeyValue::Binary(vec![1, 2, 3])],
            vec![KeyValue::Int64(1), KeyValue::Int64(2), KeyValue::Int64(1)],
            (0..100)
                .map(|v| KeyValue::Composite(vec![KeyValue::String(format!("t{}", v % 3)), KeyValue::Int64(v)]))
                .collect(),
        ];
        for keys in sets {
            let ours = spec(&["a", "b"]);
            let ours = KeySpec { field_ids: vec![3, 4], ..ours }.inserted_keys(&keys).unwrap();
            let lances = if keys.len() <= EXACT_LANCE_FILTER_MAX_KEYS {
                let hashes = keys.iter().map(KeyValue::hash_value).collect();
                KeyExistenceFilter { field_ids: vec![3, 4], filter: FilterType::ExactSet(hashes) }
            } else {
                let mut lance = KeyExistenceFilterBuilder::new(vec![3, 4]);
                for key in &keys {
                    lance.insert(key.clone()).unwrap();
                }
                lance.build()
            };
            assert_eq!(ours.lance_filter, Some(lances), "{} keys", keys.len());
            let exact = ours.exact.expect("an exact set");
            assert_eq!(exact.len(), keys.iter().map(hash_key).collect::<HashSet<_>>().len());
        }
    }

    /// The exact set we attach holds Lance's `KeyValue::hash_value`, which is std's `DefaultHasher`
    /// (SipHash-1-3 with zero keys over the length-prefixed bytes): std does not promise it stays
    /// the same across Rust releases. Pinned here, so that a toolchain that changes it fails this
    /// test before it writes exact sets that Lance's resolver compares against ours built earlier.
    #[test]
    fn lances_exact_set_hash_is_pinned() {
        let golden = [
            (KeyValue::Int64(1), 12_124_562_064_509_242_066u64),
            (KeyValue::String("ключ".into()), 11_170_173_189_932_204_163),
            (KeyValue::Composite(vec![KeyValue::String("a".into()), KeyValue::Int64(2)]), 434_176_473_302_132_771),
        ];
        for (key, hash) in golden {
            assert_eq!(key.hash_value(), hash, "{key:?}");
        }
    }

    #[test]
    fn unique_keys_refuse_a_key_given_twice_and_carry_their_hashes() {
        let k = |v: i64| KeyValue::Int64(v);
        let spec = spec(&["id"]);
        let unique = spec.unique(vec![k(3), k(1), k(2)]).unwrap();
        assert_eq!(unique.keys, vec![k(3), k(1), k(2)]);
        assert_eq!(unique.exact, spec.hash_set(&[k(1), k(2), k(3)]));
        match spec.unique(vec![k(1), k(2), k(1)]) {
            Err(Error::KeyConflict { cause: ConflictCause::DuplicateInBatch, keys }) => {
                assert!(keys.to_string().contains('1'), "{keys}")
            }
            other => panic!("a key given twice is refused, not {other:?}"),
        }
    }

    #[test]
    fn duplicates_are_reported_once() {
        let k = |v: i64| KeyValue::Int64(v);
        assert_eq!(duplicates(&[k(1), k(2), k(1), k(1), k(3), k(2)]), vec![k(1), k(2)]);
    }

    /// Rows `id` (the key) and `name`, batch by batch.
    fn id_name_batches(batches: &[&[i64]]) -> Vec<RecordBatch> {
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        batches
            .iter()
            .map(|ids| {
                let names = StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")));
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(names)])
                    .unwrap()
            })
            .collect()
    }

    /// Few keys are kept as values, many only as hashes; either way the declared sets are the ones
    /// built from the values, and a key is found again in row order across batches.
    #[test]
    fn row_keys_keep_values_only_when_few_and_declare_what_the_values_would() {
        let spec = spec(&["id"]);
        for n in [1usize, KEPT_KEYS_MAX, KEPT_KEYS_MAX + 1, 5_000] {
            let ids: Vec<i64> = (0..n as i64).map(|i| i * 7 + 3).collect();
            let (first, second) = ids.split_at(n / 2);
            let rows = id_name_batches(&[first, second]);
            let keys = spec.row_keys(&rows).unwrap();
            let values = spec.keys_of_all(&rows).unwrap();
            assert_eq!(keys.len(), n);
            assert_eq!(keys.kept().is_some(), n <= KEPT_KEYS_MAX, "{n} keys");
            assert_eq!(keys.declared().unwrap(), spec.inserted_keys(&values).unwrap(), "{n} keys");
            // Two keys, given out of row order, are named in row order; a key not ours is not.
            let wanted = [values[n - 1].clone(), values[0].clone(), KeyValue::Int64(-1)];
            let found: HashSet<KeyValue, FastHash> = wanted.iter().cloned().collect();
            let mut expected = vec![values[0].clone(), values[n - 1].clone()];
            expected.dedup();
            assert_eq!(keys.among(&found).unwrap(), expected, "{n} keys");
            assert!(keys.among(&HashSet::with_hasher(FastHash::default())).unwrap().is_empty());
        }
    }

    /// A key given twice is refused whether or not the values are kept, naming it. The keys hold
    /// no array of the rows, yet still name a key found.
    #[test]
    fn row_keys_refuse_a_key_given_twice_and_hold_only_the_key_columns() {
        let spec = spec(&["id"]);
        for n in [10i64, 3_000] {
            let mut ids: Vec<i64> = (0..n).collect();
            ids.push(n / 2);
            match spec.row_keys(&id_name_batches(&[&ids[..5], &ids[5..]])) {
                Err(Error::KeyConflict { cause: ConflictCause::DuplicateInBatch, keys }) => {
                    assert_eq!(keys.first, [(n / 2).to_string()], "{n} keys")
                }
                other => panic!("a key given twice is refused, not {other:?}"),
            }
        }
        for n in [3i64, 3_000] {
            let ids: Vec<i64> = (0..n).collect();
            let rows = id_name_batches(&[&ids]);
            let columns: Vec<_> = rows[0].columns().iter().map(Arc::downgrade).collect();
            let keys = spec.row_keys(&rows).unwrap();
            drop(rows);
            assert!(columns.iter().all(|c| c.upgrade().is_none()), "{n} keys: no column of the rows is held");
            assert_eq!(keys.among(&[KeyValue::Int64(2)].into_iter().collect()).unwrap(), [KeyValue::Int64(2)]);
        }
    }
}
