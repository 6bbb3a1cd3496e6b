//! For random histories of appends and deletes on two branches, a merge always lands (a row
//! deleted on both sides is a convergent delete, a no-op: `design/replay.md`, and disjoint deletes
//! union), and the merged rows equal applying the same logical writes to the target directly.

use std::collections::BTreeSet;

use lance_actions_replay::{Outcome, ReplayOptions};
use proptest::prelude::*;

use crate::support::*;

#[derive(Debug, Clone)]
enum Write {
    Append(i64),
    Delete(i64),
}

fn writes(offset: i64) -> impl Strategy<Value = Vec<Write>> {
    proptest::collection::vec(
        prop_oneof![(1i64..4).prop_map(move |n| Write::Append(offset + n)), (0i64..30).prop_map(Write::Delete)],
        1..4,
    )
}

async fn apply(
    b: &lance_actions_replay::Branches,
    branch: &str,
    ws: &[Write],
    model: &mut BTreeSet<i64>,
    next: &mut i64,
) -> BTreeSet<i64> {
    let mut deleted = BTreeSet::new();
    for w in ws {
        match w {
            Write::Append(n) => {
                let ids: Vec<i64> = (*next..*next + n).collect();
                *next += n;
                append(b, branch, &ids).await;
                model.extend(ids);
            }
            Write::Delete(id) if model.contains(id) => {
                delete(b, branch, &format!("id = {id}")).await;
                model.remove(id);
                deleted.insert(*id);
            }
            Write::Delete(_) => {}
        }
    }
    deleted
}

/// Two histories written on `main` and a branch `feature` of a 30-row table, merged: the merge's
/// outcome, the rows main holds after it, and the rows the model says it must hold (both sides'
/// additions, less both sides' deletions). `dir` keeps the table alive.
struct Merged {
    out: Outcome,
    rows: Vec<i64>,
    expected: BTreeSet<i64>,
    both_deleted: Vec<i64>,
}

async fn merge_histories(dir: &tempfile::TempDir, main_ws: &[Write], feature_ws: &[Write]) -> Merged {
    let uri = temp_uri(dir);
    let base: BTreeSet<i64> = (0..30).collect();
    let b = create(&uri, &base.iter().copied().collect::<Vec<_>>()).await;
    b.create("feature", "main", None).await.expect("branch");
    let (mut on_main, mut on_feature) = (base.clone(), base.clone());
    let (mut next_main, mut next_feature) = (1_000, 100_000);
    let dm = apply(&b, "main", main_ws, &mut on_main, &mut next_main).await;
    let df = apply(&b, "feature", feature_ws, &mut on_feature, &mut next_feature).await;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge");
    let expected = on_main.union(&on_feature).filter(|i| !dm.contains(i) && !df.contains(i)).copied().collect();
    Merged { out, rows: ids(&b, "main").await, expected, both_deleted: dm.intersection(&df).copied().collect() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, max_shrink_iters: 0, ..ProptestConfig::default() })]
    #[test]
    fn a_merge_of_appends_and_deletes_lands_and_equals_both_sides_writes(main_ws in writes(1_000), feature_ws in writes(2_000)) {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let m = merge_histories(&dir, &main_ws, &feature_ws).await;
            assert!(matches!(m.out, Outcome::Merged { .. } | Outcome::FastForward { .. } | Outcome::AlreadyUpToDate { .. }), "{:?}", m.out);
            assert_eq!(m.rows.len(), set(&m.rows).len(), "a row landed twice");
            assert_eq!(set(&m.rows), m.expected);
        });
    }
}

/// The case a full run found when this property still expected a conflict for a row deleted on
/// both sides: the convergent delete merges, and so do the source's later commits.
#[tokio::test]
async fn a_row_deleted_on_both_sides_before_more_source_commits_merges_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let feature_ws = [Write::Delete(2), Write::Delete(26), Write::Append(2003)];
    let m = merge_histories(&dir, &[Write::Delete(2)], &feature_ws).await;
    assert_eq!(m.both_deleted, [2]);
    assert!(matches!(m.out, Outcome::Merged { ref landed, .. } if landed.len() == 3), "{:?}", m.out);
    assert_eq!(m.rows.len(), set(&m.rows).len(), "a row landed twice");
    assert_eq!(set(&m.rows), m.expected);
}
