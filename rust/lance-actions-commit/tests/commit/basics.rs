//! Single-writer and two-writer behaviour of the commit loop.

use std::sync::Arc;

use lance_actions::{Rule, codec};
use lance_actions_commit::commit::HISTORY_KEY;
use lance_actions_commit::scenario::{create_sample, stage_append, stage_delete};
use lance_actions_commit::{CommitError, DatasetActionsExt};

use crate::support::{latest, scan_ids};

#[tokio::test]
async fn a_commit_lands_at_the_next_version_and_carries_its_actions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let v = ds.manifest().version;
    let staged = stage_append(&ds, "a", &[100, 101]).await.expect("stage");
    let stopwatch = std::time::Instant::now();
    let (landed, report) = ds.action_commit().execute(staged.txn).await.expect("commit");
    let call = stopwatch.elapsed();
    assert_eq!(landed.manifest().version, v + 1);
    assert_eq!(report.version, v + 1);
    assert_eq!(report.attempts.len(), 1);
    // One attempt, nothing slept: the commit's time is Lance's commit path and ours, within the call.
    assert_eq!(report.waited, std::time::Duration::ZERO, "no wait before the first attempt: {report:?}");
    let in_lance = report.attempts[0].in_lance;
    assert!(in_lance > std::time::Duration::ZERO && in_lance < report.elapsed, "{report:?}");
    assert!(report.elapsed <= call, "the report's time lies within the call's: {report:?}, {call:?}");
    let txn = landed.read_transaction().await.expect("read").expect("txn");
    let props = txn.transaction_properties.expect("properties");
    let decoded = codec::decode_property(&props[codec::PROPERTY_KEY]).expect("decodes");
    assert_eq!(decoded.actions.len(), 1);
    assert!(props[HISTORY_KEY].contains("ok"));
    let (ids, total) = scan_ids(&landed).await;
    assert_eq!(total, 34);
    assert!(ids.contains(&100) && ids.contains(&101));
}

#[tokio::test]
async fn row_disjoint_deletes_in_one_fragment_both_land_and_both_rows_are_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let a = stage_delete(&ds, "a", "id = 1").await.expect("a");
    let b = stage_delete(&ds, "b", "id = 5").await.expect("b");
    // Neither passes affected rows: the loop derives them from the deletion files.
    ds.action_commit().execute(a.txn).await.expect("a lands");
    let (landed, report) = ds.action_commit().execute(b.txn).await.expect("b lands after a row-level rebase");
    // The first attempt stands on the stale handle and Lance's listing refuses it; the second judges
    // a's delete on the head Lance saw.
    let last = report.attempts.last().expect("an attempt");
    assert_eq!((last.head, last.peers.len()), (landed.manifest().version - 1, 1));
    let (ids, total) = scan_ids(&landed).await;
    assert_eq!(total, 30);
    assert!(!ids.contains(&1) && !ids.contains(&5));
    let reopened = latest(&uri).await;
    assert_eq!(scan_ids(&reopened).await.1, 30);
}

#[tokio::test]
async fn overlapping_deletes_retry_and_name_the_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let a = stage_delete(&ds, "a", "id IN (1, 2)").await.expect("a");
    let b = stage_delete(&ds, "b", "id = 2").await.expect("b");
    let (after_a, _) = ds.action_commit().execute(a.txn).await.expect("a lands");
    let err = ds.action_commit().execute(b.txn).await.expect_err("b must retry");
    match err {
        CommitError::Retry { reason, .. } => {
            assert_eq!(reason.rule, Rule::RowsOverlap);
            assert_eq!(reason.peer_version, Some(after_a.manifest().version));
        }
        other => panic!("expected Retry, got {other}"),
    }
    assert_eq!(latest(&uri).await.manifest().version, after_a.manifest().version, "nothing was committed");
}

#[tokio::test]
async fn an_append_after_an_overwrite_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let append = stage_append(&ds, "a", &[100]).await.expect("append");
    let overwrite = lance::dataset::InsertBuilder::new(ds.clone())
        .with_params(&lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Overwrite, ..Default::default() })
        .execute(vec![lance_actions_commit::scenario::batch(&[7]).expect("batch")])
        .await
        .expect("overwrite by plain Lance");
    let err = ds.action_commit().execute(append.txn).await.expect_err("must fail");
    assert!(matches!(err, CommitError::Fail { .. }), "{err}");
    assert_eq!(latest(&uri).await.manifest().version, overwrite.manifest().version);
    let _ = Arc::new(overwrite);
}

/// The shared key probe: a table declared keyed in its config is probed by key hash; deleted rows
/// are not present; each hit names its row address and key; rows compare by value.
#[tokio::test]
async fn the_key_probe_finds_live_rows_by_key_with_their_addresses() {
    use std::collections::HashSet;

    use lance_actions::keys::hash_key_bytes;
    use lance_actions::table_class::{KEY_NAMES_KEY, KEYED, TABLE_CLASS_KEY};
    use lance_actions_commit::presence::{key_columns, key_rows, rows_with_keys};

    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    assert_eq!(key_columns(&ds), None, "an undeclared table has no key to probe");
    let mut ds = (*ds).clone();
    ds.update_config(vec![(TABLE_CLASS_KEY, KEYED), (KEY_NAMES_KEY, "id")]).await.expect("declare keyed");
    let key = key_columns(&ds).expect("keyed on id");
    assert_eq!(key, vec!["id".to_string()]);
    let ds = lance::dataset::DeleteBuilder::new(Arc::new(ds), "id = 3").execute().await.expect("delete").new_dataset;
    let wanted: HashSet<u64> = [3i64, 12].iter().map(|k| hash_key_bytes(&k.to_le_bytes())).collect();
    let hits = rows_with_keys(&ds, &key, &wanted).await.expect("probe");
    assert_eq!(hits.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(), vec!["12"], "3 was deleted");
    let first = &ds.manifest().fragments[0];
    let all = key_rows(&ds, &key, Some(&[first.id])).await.expect("fragment rows");
    assert!(all.iter().all(|r| r.fragment == first.id) && !all.iter().any(|r| r.key == "3"));
    let twelve = key_rows(&ds, &key, None).await.expect("all rows").into_iter().find(|r| r.key == "12").expect("12");
    assert_eq!((twelve.fragment, twelve.offset), (hits[0].fragment, hits[0].offset));
    assert!(twelve.same_values(&hits[0]));
    assert!(!twelve.same_values(&all[0]), "another row differs");
}
