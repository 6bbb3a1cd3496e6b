//! What an uncontended commit costs on object storage, request by request: ours must make exactly
//! the requests Lance's own `CommitBuilder` makes for the same staged write, kind for kind (no
//! listing, manifest read or transaction read of our own: `design/commit.md`, "One listing per
//! attempt: Lance's"). Counted at the relay in front of the server (`server::S3::requests_by_kind`),
//! on twin tables, for an append and for a delete given its affected rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::{CommitBuilder, DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use lance_actions_commit::DatasetActionsExt;

use crate::Ctx;
use crate::support::{rows, scan};

#[derive(Debug, Clone, Copy)]
enum Way {
    Lance,
    Ours,
}

pub async fn an_uncontended_commit_makes_lances_own_requests(cx: &Ctx<'_>) {
    for (what, delete) in [("append", false), ("delete", true)] {
        let lance = commit_once(cx, &format!("{what}-lance"), Way::Lance, delete).await;
        let ours = commit_once(cx, &format!("{what}-ours"), Way::Ours, delete).await;
        assert!(lance.get("PUT manifest") == Some(&1), "{what}: Lance wrote one manifest: {lance:?}");
        assert_eq!(ours, lance, "{what}: ours made other requests than Lance's own commit");
        println!("    {what}: {} requests, as Lance's: {ours:?}", ours.values().sum::<u64>());
    }
}

/// Create a table, open it, stage one write, then count the requests of the commit alone; check
/// the committed data.
async fn commit_once(cx: &Ctx<'_>, name: &str, way: Way, delete: bool) -> BTreeMap<String, u64> {
    let uri = cx.uri(name);
    let create = WriteParams { mode: WriteMode::Create, max_rows_per_file: 8, ..Default::default() };
    let base: Vec<(i64, i64)> = (0..16).map(|id| (id, id)).collect();
    InsertBuilder::new(uri.as_str()).with_params(&create).execute(vec![rows(&base)]).await.expect("create on S3");
    let ds = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
    let (txn, affected) = if delete {
        let staged = DeleteBuilder::new(ds.clone(), "id = 3").execute_uncommitted().await.expect("stage a delete");
        (staged.transaction, staged.affected_rows)
    } else {
        let append = WriteParams { mode: WriteMode::Append, ..Default::default() };
        let txn = InsertBuilder::new(ds.clone())
            .with_params(&append)
            .execute_uncommitted(vec![rows(&[(100, 100)])])
            .await
            .expect("stage an append");
        (txn, None)
    };
    let before = cx.s3.requests_by_kind();
    let landed = match way {
        Way::Lance => {
            let mut builder = CommitBuilder::new(ds.clone());
            if let Some(rows) = affected {
                builder = builder.with_affected_rows(rows);
            }
            builder.execute(txn).await.expect("Lance's commit")
        }
        Way::Ours => {
            let mut commit = ds.action_commit();
            if let Some(rows) = affected {
                commit = commit.with_affected_rows(rows);
            }
            let (landed, report) = commit.execute(txn).await.expect("our commit");
            assert_eq!(report.attempts.len(), 1, "{name}: uncontended, one attempt: {report:?}");
            assert_eq!(report.listings(), 0, "{name}: no listing of ours: {report:?}");
            landed
        }
    };
    let spent = cx.s3.requests_since(&before);
    assert_eq!(landed.manifest().version, 2, "{name}: landed at the next version");
    let (found, total) = scan(&Dataset::open(&uri).await.expect("reopen")).await;
    let mut expected: BTreeMap<i64, i64> = base.into_iter().collect();
    if delete {
        expected.remove(&3);
    } else {
        expected.insert(100, 100);
    }
    assert_eq!((total, found), (expected.len(), expected), "{name}: the committed data");
    spent
}
