//! Bounded work per staged chunk (`design/fencing.md` §2): at most 8,192 rows and 32 MiB
//! of Arrow data, so a merge-insert's join and a writer's buffers stay bounded by the chunk, not by
//! the size of the write.

use arrow_array::RecordBatch;

/// Limits of one staged chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        Self { max_rows: 8_192, max_bytes: 32 * 1024 * 1024 }
    }
}

impl ChunkLimits {
    /// Split `batches` into chunks, each within the limits (a single row larger than `max_bytes`
    /// is a chunk of its own). Slices share buffers with the input: nothing is copied.
    pub fn split(&self, batches: &[RecordBatch]) -> Vec<Vec<RecordBatch>> {
        let mut chunks = Vec::new();
        let mut current: Vec<RecordBatch> = Vec::new();
        let (mut rows, mut bytes) = (0usize, 0usize);
        for batch in batches {
            let row_bytes = bytes_per_row(batch);
            let mut offset = 0;
            while offset < batch.num_rows() {
                let room_rows = self.max_rows.saturating_sub(rows);
                let room_bytes = self.max_bytes.saturating_sub(bytes) / row_bytes.max(1);
                let take = room_rows.min(room_bytes).min(batch.num_rows() - offset);
                if take == 0 {
                    if current.is_empty() {
                        // One row over the byte limit: it goes alone.
                        current.push(batch.slice(offset, 1));
                        offset += 1;
                    }
                    chunks.push(std::mem::take(&mut current));
                    (rows, bytes) = (0, 0);
                    continue;
                }
                current.push(batch.slice(offset, take));
                offset += take;
                rows += take;
                bytes += take * row_bytes;
            }
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        chunks
    }
}

fn bytes_per_row(batch: &RecordBatch) -> usize {
    batch.get_array_memory_size().div_ceil(batch.num_rows().max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use proptest::prelude::*;

    fn batch(rows: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))]).unwrap()
    }

    #[test]
    fn byte_limit_splits_wide_rows() {
        let b = batch(10_000);
        let per_row = bytes_per_row(&b);
        let chunks = ChunkLimits { max_rows: 8_192, max_bytes: per_row * 1_000 }.split(&[b]);
        assert_eq!(chunks.len(), 10);
        assert!(chunks.iter().all(|c| c.iter().map(|b| b.num_rows()).sum::<usize>() == 1_000));
    }

    proptest! {
        #[test]
        fn chunks_keep_every_row_once_within_limits(
            sizes in proptest::collection::vec(0usize..3000, 0..6),
            max_rows in 1usize..2000,
            max_bytes in 8usize..40_000,
        ) {
            let batches: Vec<RecordBatch> = sizes.iter().map(|n| batch(*n)).collect();
            let limits = ChunkLimits { max_rows, max_bytes };
            let chunks = limits.split(&batches);
            let total: usize = chunks.iter().flatten().map(|b| b.num_rows()).sum();
            prop_assert_eq!(total, sizes.iter().sum::<usize>());
            for chunk in &chunks {
                let rows: usize = chunk.iter().map(|b| b.num_rows()).sum();
                prop_assert!(rows >= 1 && rows <= max_rows);
            }
            // Row order is kept: the concatenated ids are the input's ids.
            let ids = |bs: &mut dyn Iterator<Item = &RecordBatch>| -> Vec<i64> {
                bs.flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect()
            };
            prop_assert_eq!(ids(&mut chunks.iter().flatten()), ids(&mut batches.iter()));
        }
    }
}
