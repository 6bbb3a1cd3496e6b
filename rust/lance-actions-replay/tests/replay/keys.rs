//! Key presence on replay and convergent keyed changes (`design/replay.md`, "2. The primitive
//! (`replay.rs`, `remap.rs`, `graft.rs`)", steps 5b and 5c): a replayed insert into a keyed table
//! proves each key absent on the target where it lands, or reports the keys as a `KeysPresent`
//! conflict with nothing written; never a duplicate.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance_actions::Rule;
use lance_actions_keyed::KeyedTable;
use lance_actions_replay::{Branches, Outcome, ReplayOptions};

use crate::support::*;

fn named(ids: &[i64], name: &str) -> RecordBatch {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|_| name.to_string()))),
        ],
    )
    .expect("batch")
}

/// id -> every name it has on a branch (more than one name = a duplicated key).
async fn rows_by_id(b: &Branches, logical: &str) -> BTreeMap<i64, Vec<String>> {
    let ds = open(b, logical).await;
    let batches: Vec<RecordBatch> =
        ds.scan().try_into_stream().await.expect("scan").try_collect().await.expect("batches");
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for batch in batches {
        let ids = batch.column_by_name("id").expect("id").as_any().downcast_ref::<Int64Array>().expect("ids").clone();
        let names =
            batch.column_by_name("name").expect("name").as_any().downcast_ref::<StringArray>().expect("names").clone();
        for i in 0..batch.num_rows() {
            out.entry(ids.value(i)).or_default().push(names.value(i).to_string());
        }
    }
    out
}

fn assert_unique(rows: &BTreeMap<i64, Vec<String>>) {
    let dups: Vec<_> = rows.iter().filter(|(_, names)| names.len() > 1).collect();
    assert!(dups.is_empty(), "duplicated keys: {dups:?}");
}

/// A cherry-pick that would duplicate a key: ids 1..=100 on main; a branch deletes 80 (v2) and inserts it again (v3).
/// Returns the branches, the physical branch and the versions of the delete and the re-insert.
async fn reinserted_80(uri: &str) -> (Branches, String, u64, u64) {
    let ids: Vec<i64> = (1..=100).collect();
    KeyedTable::create(uri, vec![rows(&ids)], &["id"]).await.expect("keyed table");
    let b = Branches::new(uri);
    let physical = b.create("feature", "main", None).await.expect("branch");
    let mut feature = KeyedTable::open_branch(uri, "feature").await.expect("keyed feature");
    let deleted = feature.delete(vec![rows(&[80])]).await.expect("delete 80").version;
    let inserted = feature.insert(vec![named(&[80], "again")]).await.expect("insert 80 again").version;
    (b, physical, deleted, inserted)
}

#[tokio::test]
async fn cherry_picking_a_reinsert_without_its_delete_reports_the_key_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let (b, _, _, v3) = reinserted_80(&uri).await;
    let before_version = open(&b, "main").await.manifest().version;
    let before = inventory(dir.path());
    for dry_run in [true, false] {
        let opts = ReplayOptions { dry_run, ..Default::default() };
        let out = b.cherry_pick("feature", &[v3], "main", &opts).await.expect("cherry-pick");
        let Outcome::Conflicted { conflicts, landed } = &out else { panic!("a duplicate key must conflict: {out:?}") };
        assert!(landed.is_empty(), "{out:?}");
        let present: Vec<_> = conflicts.iter().filter(|c| c.reason.rule == Rule::KeysPresent).collect();
        assert_eq!(present.len(), 1, "{conflicts:?}");
        assert_eq!(present[0].keys, vec!["80".to_string()], "the key is named");
        assert_eq!(present[0].source_version, v3);
        assert_eq!(present[0].reason.peer_version, Some(before_version), "probed at main's head");
        assert_eq!(inventory(dir.path()), before, "nothing written (dry run {dry_run})");
    }
    let main = rows_by_id(&b, "main").await;
    assert_unique(&main);
    assert_eq!(main.get(&80), Some(&vec!["n80".to_string()]), "main keeps its own row 80");
    assert_eq!(main.len(), 100);
}

/// Merge and fast-forward replay the delete before the re-insert: the plan sees 80 deleted by the
/// delete it planned first, so the re-insert goes through, and main holds 80 once. A fast-forward
/// cannot duplicate a key: the target has no commits of its own, so each replay lands on exactly
/// the state the source's keyed writer probed; the probe runs anyway and finds nothing.
#[tokio::test]
async fn merging_the_delete_and_the_reinsert_lands_both_and_keeps_one_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let (b, _, v2, v3) = reinserted_80(&uri).await;
    let dry = b.merge("feature", "main", &ReplayOptions { dry_run: true, ..Default::default() }).await.expect("dry");
    assert!(matches!(dry, Outcome::FastForward { ref landed, .. } if landed.len() == 2), "{dry:?}");
    let out = b.fast_forward("feature", "main", &ReplayOptions::default()).await.expect("fast-forward");
    let Outcome::FastForward { landed, .. } = &out else { panic!("{out:?}") };
    assert_eq!(landed.iter().map(|l| l.source_version).collect::<Vec<_>>(), vec![v2, v3]);
    let main = rows_by_id(&b, "main").await;
    assert_unique(&main);
    assert_eq!(main.get(&80), Some(&vec!["again".to_string()]));
    assert_eq!(main, rows_by_id(&b, "feature").await, "main reads like the branch");
}

/// A merge whose insert meets a key the target inserted itself: the driver's key fencing
/// (`KeysIntersect`) and the probe (`KeysPresent`, naming the key) are both reported.
#[tokio::test]
async fn a_merge_reports_every_conflict_of_a_key_on_both_sides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    KeyedTable::create(&uri, vec![rows(&(1..=10).collect::<Vec<_>>())], &["id"]).await.expect("keyed table");
    let b = Branches::new(&uri);
    b.create("feature", "main", None).await.expect("branch");
    let mut feature = KeyedTable::open_branch(&uri, "feature").await.expect("keyed feature");
    let mut main = KeyedTable::open(&uri).await.expect("keyed main");
    let fv = feature.insert(vec![named(&[50, 51], "f")]).await.expect("feature").version;
    let mv = main.insert(vec![named(&[51], "m")]).await.expect("main").version;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::Conflicted { conflicts, landed } = &out else { panic!("{out:?}") };
    assert!(landed.is_empty());
    let rules: Vec<&Rule> = conflicts.iter().map(|c| &c.reason.rule).collect();
    assert!(rules.contains(&&Rule::KeysIntersect) && rules.contains(&&Rule::KeysPresent), "{conflicts:?}");
    assert!(conflicts.iter().all(|c| c.source_version == fv && c.reason.peer_version == Some(mv)), "{conflicts:?}");
    let present = conflicts.iter().find(|c| c.reason.rule == Rule::KeysPresent).expect("present");
    assert_eq!(present.keys, vec!["51".to_string()]);
    let rows = rows_by_id(&b, "main").await;
    assert_unique(&rows);
    assert_eq!(rows.get(&51), Some(&vec!["m".to_string()]));
    assert!(!rows.contains_key(&50), "nothing of the conflicted merge landed");
}

/// Rebase and squash replay the delete with the re-insert (squash composes them into one commit
/// whose own deletion hides the old row): no false conflict, 80 once, then main takes it. The
/// rebase replays the squashed branch, whose new fragment lives under the old physical branch,
/// reached through the base its clone inherited (no name): grafted onto the fresh clone of main,
/// which has an unnamed base of its own, that base must get a name (Lance refuses two unnamed
/// bases; `design/replay.md`, "2. The primitive (`replay.rs`, `remap.rs`, `graft.rs`)").
#[tokio::test]
async fn rebase_and_squash_of_a_reinsert_keep_one_row_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let (b, _, v2, v3) = reinserted_80(&uri).await;
    let mut main = KeyedTable::open(&uri).await.expect("keyed main");
    main.insert(vec![named(&[200], "m")]).await.expect("main inserts 200");
    let squashed = b.squash("feature", v2, v3, &ReplayOptions::default()).await.expect("squash");
    assert!(matches!(squashed, Outcome::Squashed { ref landed, .. } if landed.len() == 1), "{squashed:?}");
    let feature = rows_by_id(&b, "feature").await;
    assert_unique(&feature);
    assert_eq!(feature.get(&80), Some(&vec!["again".to_string()]));
    let rebased = b.rebase("feature", "main", &ReplayOptions::default()).await.expect("rebase");
    assert!(matches!(rebased, Outcome::Rebased { .. }), "{rebased:?}");
    let feature = rows_by_id(&b, "feature").await;
    assert_unique(&feature);
    assert!(feature.contains_key(&200) && feature.get(&80) == Some(&vec!["again".to_string()]), "{feature:?}");
    let merged = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    assert!(matches!(merged, Outcome::FastForward { .. }), "{merged:?}");
    let main = rows_by_id(&b, "main").await;
    assert_unique(&main);
    assert_eq!(main, feature, "main reads like the rebased branch");
}

/// The same key upserted to the same values on both sides is a convergent change, a
/// no-op (skipped, nothing written); the same key upserted to different values is a conflict.
#[tokio::test]
async fn the_same_upsert_on_both_sides_merges_and_a_different_one_conflicts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    KeyedTable::create(&uri, vec![rows(&(1..=10).collect::<Vec<_>>())], &["id"]).await.expect("keyed table");
    let b = Branches::new(&uri);
    b.create("feature", "main", None).await.expect("branch");
    let mut feature = KeyedTable::open_branch(&uri, "feature").await.expect("keyed feature");
    let mut main = KeyedTable::open(&uri).await.expect("keyed main");
    let fv = feature.upsert(vec![named(&[5], "same")]).await.expect("feature upsert").version;
    let mv = main.upsert(vec![named(&[5], "same")]).await.expect("main upsert").version;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::Merged { landed, skipped } = &out else { panic!("a convergent upsert merges: {out:?}") };
    assert!(landed.is_empty() && skipped.contains(&fv), "{out:?}");
    assert_eq!(open(&b, "main").await.manifest().version, mv, "nothing written");
    let rows = rows_by_id(&b, "main").await;
    assert_unique(&rows);
    assert_eq!(rows.get(&5), Some(&vec!["same".to_string()]));

    feature.upsert(vec![named(&[6], "ours")]).await.expect("feature upsert 6");
    let mv = main.upsert(vec![named(&[6], "theirs")]).await.expect("main upsert 6").version;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::Conflicted { conflicts, .. } = &out else { panic!("divergent upserts conflict: {out:?}") };
    assert!(conflicts.iter().any(|c| c.reason.rule == Rule::KeysPresent && c.keys == vec!["6".to_string()]));
    assert_eq!(open(&b, "main").await.manifest().version, mv, "nothing written");
    let rows = rows_by_id(&b, "main").await;
    assert_unique(&rows);
    assert_eq!(rows.get(&6), Some(&vec!["theirs".to_string()]));
}

/// The proof holds where the replay lands, not only where it read: a cherry-pick of the re-insert
/// of 80 races a keyed insert of 80 on main (main deleted its 80 first, so the probe at the read
/// version finds nothing). The driver's key fencing makes the later one retry and probe again:
/// exactly one of the two lands, and main holds 80 once, every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_racing_a_keyed_insert_of_the_same_key_never_duplicates_it() {
    let mut replay_won = 0;
    for round in 0..8u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir);
        let (b, _, _, v3) = reinserted_80(&uri).await;
        let mut main = KeyedTable::open(&uri).await.expect("keyed main");
        main.delete(vec![rows(&[80])]).await.expect("main deletes 80");
        let replay = {
            let b = Branches::new(&uri);
            tokio::spawn(async move { b.cherry_pick("feature", &[v3], "main", &ReplayOptions::default()).await })
        };
        // Staggered so that rounds meet the replay before, during and after its probe.
        let delay = std::time::Duration::from_millis(40 * round);
        let insert = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            main.insert(vec![named(&[80], "main")]).await
        });
        let (replay, insert) = (replay.await.expect("join"), insert.await.expect("join"));
        let replayed = matches!(replay, Ok(Outcome::CherryPicked { .. }));
        let inserted = insert.is_ok();
        assert!(replayed != inserted, "round {round}: exactly one lands: replay {replay:?}, insert {insert:?}");
        if let Ok(Outcome::Conflicted { conflicts, .. }) = &replay {
            let rules: Vec<_> = conflicts.iter().map(|c| &c.reason.rule).collect();
            println!("round {round}: the insert won; the replay reported {rules:?}");
            assert!(
                conflicts.iter().any(|c| matches!(c.reason.rule, Rule::KeysPresent | Rule::KeysIntersect)),
                "round {round}: {conflicts:?}"
            );
        }
        let rows = rows_by_id(&b, "main").await;
        assert_unique(&rows);
        let expected = if replayed { "again" } else { "main" };
        assert_eq!(rows.get(&80), Some(&vec![expected.to_string()]), "round {round}");
        replay_won += usize::from(replayed);
    }
    println!("the replay won {replay_won} of 8 rounds");
}
