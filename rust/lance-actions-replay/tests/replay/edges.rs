//! Graft edge cases (`design/replay.md`, "2. The primitive (`replay.rs`, `remap.rs`, `graft.rs`)")
//! and merging in both directions ("4. Operations (`ops.rs`)").

use std::sync::Arc;

use lance_actions_replay::{Branches, Outcome, ReplayOptions};

use crate::support::*;

fn dry() -> ReplayOptions {
    ReplayOptions { dry_run: true, ..Default::default() }
}

/// A table with no fragments: Lance gives the first fragment id 0, and so must the plan. Before,
/// the model numbered it 1 and took the source's fragment 0 for one that existed at the fork, so
/// a branch's append followed by a delete in it could not be planned onto the empty main.
#[tokio::test]
async fn an_empty_table_gets_its_first_fragment_id_right_in_plans_and_dry_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &[]).await;
    assert_eq!(open(&b, "main").await.manifest().fragments.len(), 0, "main has no fragment");
    b.create("feature", "main", None).await.expect("branch");
    let f1 = append(&b, "feature", &range(0, 10)).await;
    let f2 = delete(&b, "feature", "id = 3").await;
    let planned = b.merge("feature", "main", &dry()).await.expect("dry run");
    let Outcome::FastForward { landed: would, .. } = &planned else { panic!("{planned:?}") };
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let Outcome::FastForward { landed, .. } = &out else { panic!("{out:?}") };
    assert_eq!(landed.iter().map(|l| l.source_version).collect::<Vec<_>>(), vec![f1, f2]);
    assert_eq!(would, landed, "the dry run predicted the versions that landed");
    let main = open(&b, "main").await;
    assert_eq!(main.manifest().fragments.iter().map(|f| f.id).collect::<Vec<_>>(), vec![0]);
    let expected: Vec<i64> = range(0, 10).into_iter().filter(|i| *i != 3).collect();
    assert_eq!(ids(&b, "main").await, expected);
}

/// A branch of a branch reaches its parent's files through a base it inherited (no graft name):
/// merged straight into main, without the parent being merged first, main reads every row.
#[tokio::test]
async fn a_branch_of_a_branch_merges_straight_into_main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("other", "main", None).await.expect("other");
    b.create("feature", "main", None).await.expect("feature");
    append(&b, "feature", &range(100, 105)).await;
    b.create("feature/child", "feature", None).await.expect("child");
    append(&b, "feature/child", &range(200, 205)).await;
    delete(&b, "feature/child", "id = 102 OR id = 5").await;
    append(&b, "main", &range(10, 12)).await;
    for options in [dry(), ReplayOptions::default()] {
        let out = b.merge("feature/child", "main", &options).await.expect("child into main");
        assert!(matches!(out, Outcome::Merged { ref landed, .. } if landed.len() == 3), "{out:?}");
    }
    let mut expected: Vec<i64> = range(0, 12)
        .into_iter()
        .chain(range(100, 105))
        .chain(range(200, 205))
        .filter(|i| *i != 102 && *i != 5)
        .collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected);
    // Then the parent: its commits came along with the child, nothing is replayed twice.
    let parent = b.merge("feature", "main", &ReplayOptions::default()).await.expect("feature into main");
    assert!(matches!(parent, Outcome::AlreadyUpToDate { .. }), "{parent:?}");
    assert_eq!(ids(&b, "main").await, expected, "no row twice");
    // Into a sibling branch (a clone of main made before any of it): every row arrives once.
    let out = b.merge("feature/child", "other", &ReplayOptions::default()).await.expect("child into other");
    assert!(matches!(out, Outcome::FastForward { ref landed, .. } if landed.len() >= 3), "{out:?}");
    let mut in_other: Vec<i64> = range(0, 10)
        .into_iter()
        .chain(range(100, 105))
        .chain(range(200, 205))
        .filter(|i| *i != 102 && *i != 5)
        .collect();
    in_other.sort_unstable();
    assert_eq!(ids(&b, "other").await, in_other);
}

/// Both directions: a branch merged into main, then main merged back into the branch, for plain
/// appends, deletes and updates on both sides. The commits main got from the branch are known to
/// the branch by their origins (the exclusion is the same rule both ways); main's own commits
/// come across; afterwards both read alike, and a merge either way is up to date.
#[tokio::test]
async fn main_merges_back_into_a_branch_that_was_merged_into_main() {
    use lance::dataset::UpdateBuilder;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 30)).await;
    b.create("feature", "main", None).await.expect("branch");
    append(&b, "feature", &range(100, 110)).await;
    delete(&b, "feature", "id = 2 OR id = 105").await;
    let update = |logical: &'static str, predicate: &'static str| {
        let b = &b;
        async move {
            let ds = open(b, logical).await;
            UpdateBuilder::new(std::sync::Arc::new(ds))
                .update_where(predicate)
                .expect("where")
                .set("name", "'updated'")
                .expect("set")
                .build()
                .expect("job")
                .execute()
                .await
                .expect("update");
        }
    };
    update("feature", "id = 12").await;
    let mut own = vec![append(&b, "main", &range(30, 35)).await, delete(&b, "main", "id = 25").await];
    update("main", "id = 21").await;
    own.push(open(&b, "main").await.manifest().version);

    let into_main = b.merge("feature", "main", &ReplayOptions::default()).await.expect("feature into main");
    let Outcome::Merged { landed: replays, .. } = &into_main else { panic!("{into_main:?}") };
    assert_eq!(replays.len(), 3, "{into_main:?}");
    let back = b.merge("main", "feature", &ReplayOptions::default()).await.expect("main into feature");
    // From the branch's side main holds nothing of the branch's that it lacks: a fast-forward.
    let (Outcome::FastForward { landed, skipped } | Outcome::Merged { landed, skipped }) = &back else {
        panic!("{back:?}")
    };
    let came: Vec<u64> = landed.iter().map(|l| l.source_version).collect();
    assert!(own.iter().all(|v| came.contains(v)), "main's own commits come across: {back:?}");
    for r in replays {
        assert!(!came.contains(&r.target_version), "a replay of the branch's commit went back: {back:?}");
        assert!(skipped.contains(&r.target_version), "{back:?}");
    }
    assert_eq!(ids(&b, "feature").await, ids(&b, "main").await, "both read alike");
    let mut expected: Vec<i64> =
        range(0, 35).into_iter().chain(range(100, 110)).filter(|i| ![2, 25, 105].contains(i)).collect();
    expected.sort_unstable();
    assert_eq!(ids(&b, "main").await, expected, "every row once");
    for (from, into) in [("feature", "main"), ("main", "feature")] {
        let again = b.merge(from, into, &ReplayOptions::default()).await.expect("again");
        assert!(matches!(again, Outcome::AlreadyUpToDate { .. }), "{from} into {into}: {again:?}");
    }
}

/// A data file naming a base id its branch does not define (written here through Lance's own
/// commit API, which does not check it) is refused by the replay, naming the id, with nothing
/// written; before, the graft kept the number, and main would have read whatever its own base of
/// that id names (or nothing).
#[tokio::test]
async fn a_dangling_source_base_id_is_refused_not_reused() {
    use lance::dataset::transaction::Operation;
    use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
    use lance_actions::RebindRefusal;
    use lance_actions_replay::{Error, Refusal};

    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let feature = std::sync::Arc::new(open(&b, "feature").await);
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let mut txn = InsertBuilder::new(feature.clone())
        .with_params(&params)
        .execute_uncommitted(vec![rows(&[500])])
        .await
        .expect("stage");
    let Operation::Append { fragments } = &mut txn.operation else { panic!("{}", txn.operation) };
    for file in fragments.iter_mut().flat_map(|f| f.files.iter_mut()) {
        file.base_id = Some(42);
    }
    CommitBuilder::new(feature).execute(txn).await.expect("Lance commits the dangling id unchecked");
    let before = inventory(dir.path());
    for options in [dry(), ReplayOptions::default()] {
        match b.merge("feature", "main", &options).await {
            Err(Error::NotReplayable { why, .. }) => assert!(
                matches!(&why, Refusal::Rebind { source: RebindRefusal::UndefinedBase { base: 42, .. } }),
                "{why}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(inventory(dir.path()), before, "nothing written");
    assert_eq!(ids(&b, "main").await, range(0, 10));
}

/// A plain Lance delete on a branch whose properties carry our encoded action list declaring only
/// `declared` (offsets in fragment 0) as deleted, while its deletion file deletes every row the
/// predicate matches: what an older build or a foreign writer copying our encoding can leave.
async fn delete_declaring_fewer_rows(b: &Branches, logical: &str, predicate: &str, declared: &[u32]) -> u64 {
    use lance::dataset::transaction::TransactionBuilder;
    use lance::dataset::{CommitBuilder, DeleteBuilder};
    use lance_actions::{AnyAction, codec, lift};
    let ds = Arc::new(open(b, logical).await);
    let staged = DeleteBuilder::new(ds.clone(), predicate).execute_uncommitted().await.expect("stage delete");
    let mut actions = lift(&staged.transaction.operation);
    for a in actions.actions.iter_mut() {
        if let AnyAction::UpdateDeletionVector(u) = a {
            u.affected_rows = Some(roaring::RoaringBitmap::from_iter(declared.iter().copied()));
        }
    }
    let props = std::collections::HashMap::from([(codec::PROPERTY_KEY.to_string(), codec::encode_property(&actions))]);
    let txn = TransactionBuilder::new(staged.transaction.read_version, staged.transaction.operation)
        .transaction_properties(Some(Arc::new(props)))
        .build();
    CommitBuilder::new(ds).execute(txn).await.expect("commits").manifest().version
}

/// A branch commit declares row 1 deleted while its deletion file deletes rows 1 and 2; main deleted
/// row 5 of the same fragment meanwhile. The merge must delete what the commit's file deleted, not
/// what it declared: before, main kept row 2.
#[tokio::test]
async fn a_merge_replays_the_rows_a_deletion_file_deleted_not_the_declared_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    delete_declaring_fewer_rows(&b, "feature", "id IN (1, 2)", &[1]).await;
    assert_eq!(ids(&b, "feature").await, vec![0, 3, 4, 5, 6, 7, 8, 9]);
    delete(&b, "main", "id = 5").await;
    b.merge("feature", "main", &Default::default()).await.expect("merge");
    assert_eq!(ids(&b, "main").await, vec![0, 3, 4, 6, 7, 8, 9], "rows 1, 2 and 5 are gone");
}

/// The same lie under squash: the squashed commit must delete rows 1, 2 and 5.
#[tokio::test]
async fn a_squash_composes_the_rows_a_deletion_file_deleted_not_the_declared_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir);
    let b = create(&uri, &range(0, 10)).await;
    b.create("feature", "main", None).await.expect("branch");
    let first = delete(&b, "feature", "id = 5").await;
    let last = delete_declaring_fewer_rows(&b, "feature", "id IN (1, 2)", &[1]).await;
    b.squash("feature", first, last, &Default::default()).await.expect("squash");
    assert_eq!(ids(&b, "feature").await, vec![0, 3, 4, 6, 7, 8, 9], "rows 1, 2 and 5 are gone");
}
