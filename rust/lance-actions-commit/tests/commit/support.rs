//! Shared helpers: scanning ids, staging with retries.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::Int64Array;
use futures::TryStreamExt;
use lance::Dataset;

/// Every `id` in the dataset's latest version, with duplicates detected.
pub async fn scan_ids(ds: &Dataset) -> (BTreeSet<i64>, usize) {
    let mut scanner = ds.scan();
    scanner.project(&["id"]).expect("project");
    let batches: Vec<_> = scanner.try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut ids = BTreeSet::new();
    let mut total = 0;
    for b in batches {
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().expect("int64 ids");
        for v in col.values() {
            ids.insert(*v);
            total += 1;
        }
    }
    (ids, total)
}

pub async fn latest(uri: &str) -> Arc<Dataset> {
    Arc::new(Dataset::open(uri).await.expect("open"))
}
