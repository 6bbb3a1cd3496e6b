//! Key presence: the probe that reads key columns only, then takes the matching rows, finds the
//! same rows with the same values as a scan of every column, also where row ids are not addresses.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions::keys::hash_key_bytes;
use lance_actions_commit::presence::{key_rows, rows_with_keys};
use lance_table::format::key_existence::KeyValue;

fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, false),
    ]));
    let payload: Vec<String> = ids.clone().map(|i| format!("payload-{i}")).collect();
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(ids)), Arc::new(StringArray::from(payload))],
    )
    .expect("batch")
}

fn hash(id: i64) -> u64 {
    hash_key_bytes(&KeyValue::Int64(id).to_bytes())
}

/// A table of ids 0..24 in fragments of 4 with rows 2 and 7 deleted, then (`compacted`) rewritten
/// into fragments of 10: with stable row ids on, the rows' ids are then no longer their addresses;
/// uncompacted, two fragments carry deletion files.
async fn moved_table(uri: &str, stable_row_ids: bool, compacted: bool) -> Dataset {
    let params = WriteParams {
        max_rows_per_file: 4,
        enable_stable_row_ids: stable_row_ids,
        mode: WriteMode::Create,
        ..Default::default()
    };
    let mut ds = InsertBuilder::new(uri).with_params(&params).execute(vec![rows(0..24)]).await.expect("create");
    ds.delete("id = 2 OR id = 7").await.expect("delete");
    if !compacted {
        assert_eq!(ds.manifest().fragments.iter().filter(|f| f.deletion_file.is_some()).count(), 2);
        return ds;
    }
    let options = CompactionOptions { target_rows_per_fragment: 10, ..Default::default() };
    compact_files(&mut ds, options, None).await.expect("compaction");
    ds
}

#[tokio::test]
async fn the_key_probe_finds_the_rows_and_values_a_full_scan_finds() {
    for (stable_row_ids, compacted) in [(false, false), (false, true), (true, false), (true, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = dir.path().join("t").to_string_lossy().to_string();
        let ds = moved_table(&uri, stable_row_ids, compacted).await;
        let key = vec!["id".to_string()];
        // Present keys, a deleted one, and one never written.
        let wanted: HashSet<u64> = [5, 2, 19, 23, 100].into_iter().map(hash).collect();
        let mut probed = rows_with_keys(&ds, &key, &wanted).await.expect("probe");
        let mut scanned: Vec<_> = key_rows(&ds, &key, None).await.expect("scan");
        scanned.retain(|r| wanted.contains(&r.hash));
        probed.sort_by_key(|r| (r.fragment, r.offset));
        scanned.sort_by_key(|r| (r.fragment, r.offset));
        let keys: Vec<&str> = probed.iter().map(|r| r.key.as_str()).collect();
        let case = format!("stable row ids {stable_row_ids}, compacted {compacted}");
        assert_eq!(keys, vec!["5", "19", "23"], "{case}: the live rows holding those keys");
        assert_eq!(probed.len(), scanned.len());
        for (p, s) in probed.iter().zip(&scanned) {
            assert_eq!((p.hash, &p.key, p.fragment, p.offset), (s.hash, &s.key, s.fragment, s.offset));
            assert!(p.same_values(s), "{case}: key {} holds the scan's values", p.key);
            let payload = p.values.column_by_name("payload").expect("payload");
            let payload = payload.as_any().downcast_ref::<StringArray>().expect("utf8");
            assert_eq!(payload.value(0), format!("payload-{}", p.key));
        }
        assert!(rows_with_keys(&ds, &key, &HashSet::new()).await.expect("no keys").is_empty());
    }
}
