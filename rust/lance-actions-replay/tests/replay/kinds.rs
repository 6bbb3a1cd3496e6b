//! Every replayable operation kind, written on a branch by plain Lance and merged into main: the
//! merged main must read exactly like the branch.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::Operation;
use lance::dataset::{
    InsertBuilder, MergeInsertBuilder, NewColumnTransform, UpdateBuilder, WhenMatched, WhenNotMatched, WriteMode,
    WriteParams,
};
use lance_actions_replay::{Branches, Outcome, ReplayOptions};

use crate::support::*;

/// Rows with `id` marked as Lance's unenforced primary key, so Lance's merge-insert attaches its key set.
fn keyed_rows(ids: &[i64], tag: &str) -> RecordBatch {
    let id = Field::new("id", DataType::Int64, false)
        .with_metadata(HashMap::from([("lance-schema:unenforced-primary-key".to_string(), "true".to_string())]));
    let schema = Arc::new(Schema::new(vec![id, Field::new("name", DataType::Utf8, true)]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("{tag}{i}")))),
        ],
    )
    .expect("batch")
}

/// (id, name) of every row, sorted, and the schema's field names.
async fn image(ds: &Dataset) -> (Vec<(i64, String)>, Vec<String>) {
    let mut scanner = ds.scan();
    scanner.project(&["id", "name"]).expect("project");
    let batches: Vec<RecordBatch> = scanner.try_into_stream().await.expect("scan").try_collect().await.expect("rows");
    let mut rows = Vec::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        let names = b.column(1).as_any().downcast_ref::<StringArray>().expect("names");
        for i in 0..b.num_rows() {
            rows.push((ids.value(i), names.value(i).to_string()));
        }
    }
    rows.sort();
    (rows, ds.schema().fields.iter().map(|f| f.name.clone()).collect())
}

#[tokio::test]
async fn every_replayable_kind_merges_and_main_reads_like_the_branch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    InsertBuilder::new(uri.as_str())
        .with_params(&WriteParams { mode: WriteMode::Create, max_rows_per_file: 5, ..Default::default() })
        .execute(vec![keyed_rows(&(0..20).collect::<Vec<_>>(), "n")])
        .await
        .expect("create");
    let b = Branches::new(&uri);
    b.create("feature", "main", None).await.expect("branch");
    let mut kinds = Vec::new();
    let mut ds = open(&b, "feature").await;

    // Update (rows move: deleted in place, rewritten as new fragments).
    let updated = UpdateBuilder::new(Arc::new(ds.clone()))
        .update_where("id < 3")
        .expect("where")
        .set("name", "'updated'")
        .expect("set")
        .build()
        .expect("job")
        .execute()
        .await
        .expect("update");
    ds = (*updated.new_dataset).clone();
    kinds.push("update");
    // Merge-insert on the key (Lance's v2 path): carries Lance's inserted-key set.
    let mut mi = MergeInsertBuilder::try_new(Arc::new(ds.clone()), vec!["id".into()]).expect("builder");
    mi.when_matched(WhenMatched::UpdateAll).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
    let (next, _) =
        mi.try_build().expect("job").execute_batches(vec![keyed_rows(&[5, 40, 41], "m")]).await.expect("upsert");
    ds = (*next).clone();
    let upsert_version = ds.manifest().version;
    kinds.push("merge-insert");
    // Config.
    ds.update_config(vec![("owner", "feature")]).await.expect("config");
    kinds.push("config");
    // Compaction of the small fragments (shared and new).
    compact_files(&mut ds, CompactionOptions::default(), None).await.expect("compaction");
    kinds.push("compaction");
    // Schema: add a column (Merge), then drop it again (Project).
    ds.add_columns(NewColumnTransform::SqlExpressions(vec![("twice".into(), "id * 2".into())]), None, None)
        .await
        .expect("add column");
    kinds.push("add-column");
    ds.drop_columns(&["twice"]).await.expect("drop column");
    kinds.push("drop-column");

    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::FastForward { landed, .. } = &out else { panic!("{out:?}") };
    assert_eq!(
        landed.len(),
        kinds.len(),
        "one replay per kind (the id reservation of the compaction is skipped): {kinds:?}"
    );
    let main = open(&b, "main").await;
    let feature = open(&b, "feature").await;
    assert_eq!(image(&main).await, image(&feature).await, "main reads exactly like the branch");
    assert_eq!(main.manifest().config.get("owner").map(String::as_str), Some("feature"));
    // The replayed merge-insert still carries the inserted-key set Lance's resolver compares.
    let replay_of_upsert = landed.iter().find(|l| l.source_version == upsert_version).expect("replayed");
    let txn = main.read_transaction_by_version(replay_of_upsert.target_version).await.expect("read").expect("txn");
    assert!(matches!(txn.operation, Operation::Update { inserted_rows_filter: Some(_), .. }), "{}", txn.operation);

    // Both directions (`design/replay.md`, "4. Operations (`ops.rs`)"): main merged back into the
    // branch replays none of the branch's own commits (their replays on main are known to the
    // branch by their origins), and a commit of main's own of every kind above then goes the other
    // way and reads alike.
    let feature_before = image(&feature).await;
    let back = b.merge("main", "feature", &ReplayOptions::default()).await.expect("main into feature");
    let back_landed = match &back {
        Outcome::AlreadyUpToDate { .. } => Vec::new(),
        Outcome::FastForward { landed, .. } | Outcome::Merged { landed, .. } => landed.clone(),
        other => panic!("{other:?}"),
    };
    for l in landed.iter() {
        assert!(
            back_landed.iter().all(|b| b.source_version != l.target_version),
            "main's replay v{} of the branch's v{} went back: {back:?}",
            l.target_version,
            l.source_version
        );
    }
    assert_eq!(image(&open(&b, "feature").await).await, feature_before, "the branch is unchanged");
    let mut on_main = open(&b, "main").await;
    let updated = UpdateBuilder::new(Arc::new(on_main.clone()))
        .update_where("id = 41")
        .expect("where")
        .set("name", "'main'")
        .expect("set")
        .build()
        .expect("job")
        .execute()
        .await
        .expect("update on main");
    on_main = (*updated.new_dataset).clone();
    on_main.update_config(vec![("reviewed", "yes")]).await.expect("config on main");
    let back = b.merge("main", "feature", &ReplayOptions::default()).await.expect("main into feature again");
    assert!(matches!(back, Outcome::FastForward { .. } | Outcome::Merged { .. }), "{back:?}");
    let (main, feature) = (open(&b, "main").await, open(&b, "feature").await);
    assert_eq!(image(&feature).await, image(&main).await, "the branch reads like main again");
    assert_eq!(feature.manifest().config.get("reviewed").map(String::as_str), Some("yes"));
    let again = b.merge("feature", "main", &ReplayOptions::default()).await.expect("and back to main");
    assert!(matches!(again, Outcome::AlreadyUpToDate { .. }), "{again:?}");
}

/// Keyed tables: a key inserted on both branches is a conflict of the merge (the exact key sets
/// meet in the driver), disjoint keys merge, and the merged table holds no duplicate.
#[tokio::test]
async fn a_key_inserted_on_both_branches_conflicts_and_disjoint_keys_merge() {
    use lance_actions_keyed::KeyedTable;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    KeyedTable::create(&uri, vec![rows(&(0..10).collect::<Vec<_>>())], &["id"]).await.expect("keyed table");
    let b = Branches::new(&uri);
    b.create("feature", "main", None).await.expect("branch");
    let mut feature = KeyedTable::open_branch(&uri, "feature").await.expect("keyed feature");
    let mut main = KeyedTable::open(&uri).await.expect("keyed main");
    feature.insert(vec![rows(&[50, 51])]).await.expect("feature inserts");
    main.insert(vec![rows(&[60])]).await.expect("main inserts");
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    assert!(matches!(out, Outcome::Merged { .. }), "disjoint keys merge: {out:?}");
    // The same row inserted on both sides converges: skipped, nothing written (`design/replay.md`,
    // "2. The primitive (`replay.rs`, `remap.rs`, `graft.rs`)").
    let fv = feature.insert(vec![rows(&[65])]).await.expect("feature inserts 65").version;
    let mv = main.insert(vec![rows(&[65])]).await.expect("main inserts the same 65").version;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    assert!(matches!(out, Outcome::Merged { ref landed, ref skipped } if landed.is_empty() && skipped.contains(&fv)));
    assert_eq!(open(&b, "main").await.manifest().version, mv, "a convergent insert writes nothing");
    // The same key with other values is a divergent insert: a conflict.
    feature.insert(vec![keyed_rows(&[70], "f")]).await.expect("feature inserts 70");
    main.insert(vec![keyed_rows(&[70], "m")]).await.expect("main inserts 70 too");
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::Conflicted { conflicts, .. } = out else { panic!("a key on both sides must conflict: {out:?}") };
    assert_eq!(conflicts[0].reason.rule, lance_actions::Rule::KeysIntersect);
    assert!(conflicts.iter().any(|c| c.reason.rule == lance_actions::Rule::KeysPresent && c.keys == ["70"]));
    let merged = ids(&b, "main").await;
    let mut unique = merged.clone();
    unique.dedup();
    assert_eq!(merged, unique, "no duplicate key");
    assert!(merged.contains(&50) && merged.contains(&60) && merged.contains(&65) && merged.contains(&70));
}
