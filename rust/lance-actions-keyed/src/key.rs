//! The key of a keyed table and the keys of rows: extraction, canonical bytes, hashes, display.
//!
//! Key values and their bytes are Lance's own (`KeyValue`, `KeyValue::to_bytes`), so the exact set we
//! carry and the bloom filter Lance's resolver compares are built from the same hash of the same bytes.

use std::collections::HashMap;

use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use lance_actions::keys::{InsertedKeys, KeyHashSet};
use lance_core::datatypes::Schema;
use lance_table::format::key_existence::{KeyExistenceFilterBuilder, KeyValue, extract_key_value_from_batch};

use crate::error::{Error, KeySample, Result};

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
        let mut bloom = KeyExistenceFilterBuilder::new(self.field_ids.clone());
        for key in keys {
            bloom
                .insert(key.clone())
                .map_err(|source| Error::Lance { what: "building Lance's key filter".into(), source })?;
        }
        let exact = KeyHashSet::from_hashes(self.field_ids.clone(), keys.iter().map(hash_key));
        Ok(InsertedKeys { lance_filter: Some(bloom.build()), exact: Some(exact) })
    }
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

/// The 64-bit hash of a key: xxHash64 of Lance's canonical bytes, as Lance's filter hashes it.
pub fn hash_key(key: &KeyValue) -> u64 {
    lance_actions::keys::hash_key_bytes(&key.to_bytes())
}

/// A key as a user reads it (one definition, shared with replay's key probe).
pub use lance_actions_commit::presence::display_key;

/// Keys that occur more than once, each reported once, in first-occurrence order.
pub fn duplicates(keys: &[KeyValue]) -> Vec<KeyValue> {
    let mut seen: HashMap<&KeyValue, usize> = HashMap::with_capacity(keys.len());
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

    #[test]
    fn duplicates_are_reported_once() {
        let k = |v: i64| KeyValue::Int64(v);
        assert_eq!(duplicates(&[k(1), k(2), k(1), k(1), k(3), k(2)]), vec![k(1), k(2)]);
    }
}
