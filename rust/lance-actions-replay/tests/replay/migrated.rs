//! A branch that existed before `keyed migrate` was migrated with main; afterwards it merges into
//! main like any other branch (`design/fencing.md`, "1. Table classes live in the manifest, and
//! the action model enforces them"): its copy of the key install is the one main already has, and
//! its keyed writes are judged by their keys, not refused for the schema step.

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use futures::TryStreamExt;
use lance_actions_keyed::{KeyedTable, migrate};
use lance_actions_replay::{Outcome, ReplayOptions};

use crate::support::*;

/// id -> name over main's latest version, every occurrence kept.
async fn names(b: &lance_actions_replay::Branches) -> Vec<(i64, String)> {
    let ds = open(b, "main").await;
    let batches: Vec<RecordBatch> =
        ds.scan().try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut out = Vec::new();
    for batch in &batches {
        let id = batch.column_by_name("id").expect("id");
        let id = id.as_any().downcast_ref::<Int64Array>().expect("int ids");
        let name = batch.column_by_name("name").expect("name");
        let name = name.as_any().downcast_ref::<StringArray>().expect("names");
        for i in 0..batch.num_rows() {
            out.push((id.value(i), if name.is_null(i) { String::new() } else { name.value(i).to_string() }));
        }
    }
    out.sort();
    out
}

fn named(ids: &[i64], name: &str) -> RecordBatch {
    let batch = rows(ids);
    let names = StringArray::from_iter_values(ids.iter().map(|_| name.to_string()));
    RecordBatch::try_new(batch.schema(), vec![batch.column(0).clone(), std::sync::Arc::new(names)]).expect("batch")
}

#[tokio::test]
async fn a_branch_migrated_with_main_merges_into_main_and_keys_still_fence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &(0..10).collect::<Vec<_>>()).await;
    b.create("feature", "main", None).await.expect("branch before the migration");
    migrate(&uri, &["id"]).await.expect("migrate main and feature");

    let mut feature = KeyedTable::open_branch(&uri, "feature").await.expect("feature is keyed");
    let mut main = KeyedTable::open(&uri).await.expect("main is keyed");
    feature.insert(vec![rows(&[50, 51])]).await.expect("feature inserts");
    feature.upsert(vec![named(&[5], "feature")]).await.expect("feature updates 5");
    main.insert(vec![rows(&[60])]).await.expect("main inserts");

    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    assert!(matches!(out, Outcome::Merged { .. }), "a migrated branch merges: {out:?}");
    let mut expected: Vec<(i64, String)> = (0..10).chain([50, 51, 60]).map(|i| (i, format!("n{i}"))).collect();
    expected.retain(|(i, _)| *i != 5);
    expected.push((5, "feature".into()));
    expected.sort();
    assert_eq!(names(&b).await, expected, "main holds both sides' rows, each key once");
    KeyedTable::open(&uri).await.expect("main is still keyed after the merge");

    // The key fence still holds across the merged branches (different values: the same row
    // inserted on both sides would converge, `design/replay.md`, "2. The primitive (`replay.rs`,
    // `remap.rs`, `graft.rs`)").
    feature.insert(vec![named(&[70], "feature")]).await.expect("feature inserts 70");
    main.refresh().await.expect("refresh");
    main.insert(vec![rows(&[70])]).await.expect("main inserts 70 too");
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::Conflicted { conflicts, .. } = out else { panic!("a key on both sides must conflict: {out:?}") };
    let rule = &conflicts[0].reason.rule;
    assert!(matches!(rule, lance_actions::Rule::KeysIntersect | lance_actions::Rule::KeysPresent), "{rule:?}");
    assert_eq!(names(&b).await.iter().filter(|(i, _)| *i == 70).count(), 1, "70 once");
}
