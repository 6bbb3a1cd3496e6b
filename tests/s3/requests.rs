//! What an uncontended commit costs on object storage, request by request: ours must make exactly
//! the requests Lance's own `CommitBuilder` makes for the same staged write, kind for kind (no
//! listing, manifest read or transaction read of our own: `design/commit.md`, "One listing per
//! attempt: Lance's"). Counted at the relay in front of the server (`server::S3::requests_by_kind`),
//! on twin tables, for an append and for a delete given its affected rows. Behind writers, an append
//! judged at the write makes exactly Lance's requests, and a delete behind writers of its fragment
//! one more when a caller gave its rows (its own staged deletion file, read to check them), none
//! when we staged it (`stage_delete`: the rows are Lance's report).

use std::collections::BTreeMap;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::{CommitBuilder, DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use lance_actions_commit::DatasetActionsExt;

use crate::Ctx;
use crate::support::{rows, scan, stage_append};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Lance,
    /// Our commit of Lance's staged write, given the rows Lance reported (a caller's word).
    Ours,
    /// A delete staged by `stage_delete` and committed with `execute_delete` (Lance's own report).
    OursStaged,
}

pub async fn an_uncontended_commit_makes_lances_own_requests(cx: &Ctx<'_>) {
    for (what, delete, way) in
        [("append", false, Way::Ours), ("delete", true, Way::Ours), ("delete-we-staged", true, Way::OursStaged)]
    {
        let lance = commit_once(cx, &format!("{what}-lance"), Way::Lance, delete).await;
        let ours = commit_once(cx, &format!("{what}-ours"), way, delete).await;
        assert!(lance.get("PUT manifest") == Some(&1), "{what}: Lance wrote one manifest: {lance:?}");
        assert_eq!(ours, lance, "{what}: ours made other requests than Lance's own commit");
        println!("    {what}: {} requests, as Lance's: {ours:?}", ours.values().sum::<u64>());
    }
}

/// A table of 16 rows (`id` = `v` = 0..16) in fragments of 8 rows: its uri and rows.
async fn sample_table(cx: &Ctx<'_>, name: &str) -> (String, Vec<(i64, i64)>) {
    let uri = cx.uri(name);
    let create = WriteParams { mode: WriteMode::Create, max_rows_per_file: 8, ..Default::default() };
    let base: Vec<(i64, i64)> = (0..16).map(|id| (id, id)).collect();
    InsertBuilder::new(uri.as_str()).with_params(&create).execute(vec![rows(&base)]).await.expect("create on S3");
    (uri, base)
}

/// Create a table, open it, stage one write, then count the requests of the commit alone; check
/// the committed data.
async fn commit_once(cx: &Ctx<'_>, name: &str, way: Way, delete: bool) -> BTreeMap<String, u64> {
    let (uri, base) = sample_table(cx, name).await;
    let ds = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
    // A delete is staged by `stage_delete` (Lance's `DeleteBuilder`) for every way.
    let staged_delete = if delete {
        Some(lance_actions_commit::stage_delete(&ds, "id = 3").await.expect("stage a delete"))
    } else {
        None
    };
    let (txn, affected) = match &staged_delete {
        Some(staged) => (staged.transaction().clone(), staged.affected_rows().cloned()),
        None => (stage_append(&ds, &[(100, 100)]).await, None),
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
        Way::Ours | Way::OursStaged => {
            let mut commit = ds.action_commit();
            if let Some(rows) = affected {
                commit = commit.with_affected_rows(rows);
            }
            let committed = match staged_delete {
                Some(staged) if way == Way::OursStaged => commit.execute_delete(staged).await,
                _ => commit.execute(txn).await,
            };
            let (landed, report) = committed.expect("our commit");
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

/// Three writers land (through a handle and session of their own) after ours was staged; ours then
/// commits from its stale handle. Lance's pre-write listing loads the three versions; ours judges
/// them at the write from what that listing cached (`history::cached_transaction`), and reads the
/// head back from the manifest Lance built (an append whose writers the screen settles): exactly
/// Lance's own requests, whatever the number of writers in between (each used to cost a version
/// lookup, then the head alone did).
pub async fn an_append_behind_writers_costs_what_lances_commit_costs(cx: &Ctx<'_>) {
    const WRITERS: i64 = 3;
    let lance = behind_writers(cx, "behind-lance", Way::Lance, WRITERS).await;
    let ours = behind_writers(cx, "behind-ours", Way::Ours, WRITERS).await;
    let extra = crate::server::requests_minus(&ours, &lance);
    let missing = crate::server::requests_minus(&lance, &ours);
    assert!(missing.is_empty(), "ours skipped requests Lance made: {missing:?} (ours {ours:?}, Lance {lance:?})");
    assert!(
        extra.is_empty(),
        "behind {WRITERS} writers ours made requests Lance's commit did not: {extra:?} (ours {ours:?}, Lance {lance:?})"
    );
    println!("    behind {WRITERS} writers: Lance {lance:?}, ours the same");
}

async fn behind_writers(cx: &Ctx<'_>, name: &str, way: Way, writers: i64) -> BTreeMap<String, u64> {
    let (uri, base) = sample_table(cx, name).await;
    let stale = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
    let txn = stage_append(&stale, &[(100, 100)]).await;
    // The writers in between: another process, as far as the stale handle's session knows.
    let mut expected: BTreeMap<i64, i64> = base.into_iter().collect();
    for w in 0..writers {
        let id = 200 + w;
        append_through_a_handle_of_its_own(&uri, id).await;
        expected.insert(id, id);
    }
    let before = cx.s3.requests_by_kind();
    let landed = match way {
        Way::Lance => CommitBuilder::new(stale.clone()).execute(txn).await.expect("Lance's commit"),
        // An append has no rows: both of our ways commit it alike.
        Way::Ours | Way::OursStaged => {
            let (landed, report) = stale.action_commit().execute(txn).await.expect("our commit");
            assert_eq!(report.attempts.len(), 1, "{name}: judged at the write, one attempt: {report:?}");
            let at_write = report.attempts[0].at_write.as_ref().expect("judged at the write");
            assert_eq!(at_write.peers.len() as i64, writers, "{name}: every writer in between judged");
            assert!(at_write.head_read_back, "{name}: the head read back from Lance's manifest");
            landed
        }
    };
    let spent = cx.s3.requests_since(&before);
    assert_eq!(landed.manifest().version, 2 + writers as u64, "{name}: landed past the writers");
    expected.insert(100, 100);
    let (found, total) = scan(&Dataset::open(&uri).await.expect("reopen")).await;
    assert_eq!((total, found), (expected.len(), expected), "{name}: the committed data");
    spent
}

/// Three writers delete other rows of fragment 0 (through handles and sessions of their own) after
/// ours was staged; ours, given its rows, then commits from its stale handle, as does Lance's
/// `CommitBuilder` given the same rows on a twin table. Both land in one attempt: Lance's rebase
/// merges the newest writer's vector with our rows, and ours judges that merge at the write
/// (`design/commit.md`, "Judged at the write"), reading of the writers' vectors only the newest
/// ("Only the newest deletion vector"), which Lance's rebase has just read into the session's
/// cache. The head is read back from the manifest Lance built (the newest writer's vector is the
/// head's). Ours makes one request more than Lance: our own staged deletion file, read to check the
/// rows given against it.
pub async fn a_delete_behind_deletes_of_its_fragment_costs_about_what_lances_commit_costs(cx: &Ctx<'_>) {
    delete_costs_lances_requests_and(cx, "its fragment", 0, Way::Ours, &[("GET deletion", 1)]).await;
}

/// The same delete staged by `stage_delete` and committed with `execute_delete`: its rows are
/// Lance's report of the staging, not a caller's word, so our staged file is not read to check
/// them, and ours makes exactly Lance's requests (`design/commit.md`, "Rows Lance reported").
pub async fn a_delete_we_staged_behind_deletes_of_its_fragment_makes_exactly_lances_requests(cx: &Ctx<'_>) {
    delete_costs_lances_requests_and(cx, "its fragment", 0, Way::OursStaged, &[]).await;
}

/// Three writers delete rows of fragment 1 after ours (a delete of a row of fragment 0, given its
/// rows) was staged. No writer touched our fragment, so no vector is compared and our staged file
/// is not read, and the head is read back from the manifest Lance built: ours makes exactly Lance's
/// requests.
pub async fn a_delete_behind_deletes_of_another_fragment_reads_no_deletion_file(cx: &Ctx<'_>) {
    delete_costs_lances_requests_and(cx, "another fragment", 8, Way::Ours, &[]).await;
}

/// Ours (`way`) and Lance's commit of one delete given its rows, each on a twin table behind three
/// writers deleting rows from id `first_id` on (`delete_behind_deletes`): ours makes every request
/// Lance's makes, and exactly `extra` more.
async fn delete_costs_lances_requests_and(
    cx: &Ctx<'_>,
    writers_of: &str,
    first_id: i64,
    way: Way,
    extra: &[(&str, u64)],
) {
    const WRITERS: i64 = 3;
    let tag = if first_id == 0 { "behind" } else { "beside" };
    let lance = delete_behind_deletes(cx, &format!("delete-{tag}-lance"), Way::Lance, WRITERS, first_id).await;
    let ours = delete_behind_deletes(cx, &format!("delete-{tag}-ours"), way, WRITERS, first_id).await;
    let more = crate::server::requests_minus(&ours, &lance);
    let missing = crate::server::requests_minus(&lance, &ours);
    println!("    behind {WRITERS} deletes of {writers_of}: Lance {lance:?}; ours more {more:?}, fewer {missing:?}");
    assert!(missing.is_empty(), "ours skipped requests Lance made: {missing:?} (ours {ours:?}, Lance {lance:?})");
    let expected: BTreeMap<String, u64> = extra.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    assert_eq!(more, expected, "ours made other requests than Lance's plus {expected:?}: {ours:?} vs {lance:?}");
}

/// Ours deletes row 7 (fragment 0), given its rows; `writers` writers then delete rows
/// `first_id`, `first_id + 1`, ... each from a session of its own.
async fn delete_behind_deletes(
    cx: &Ctx<'_>,
    name: &str,
    way: Way,
    writers: i64,
    first_id: i64,
) -> BTreeMap<String, u64> {
    let (uri, base) = sample_table(cx, name).await;
    let stale = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
    let staged = lance_actions_commit::stage_delete(&stale, "id = 7").await.expect("stage ours");
    let rows_given = staged.affected_rows().cloned().expect("Lance reports the rows");
    let mut expected: BTreeMap<i64, i64> = base.into_iter().collect();
    for id in first_id..first_id + writers {
        let other = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
        DeleteBuilder::new(other, format!("id = {id}")).execute().await.expect("a writer in between");
        expected.remove(&id);
    }
    let before = cx.s3.requests_by_kind();
    let landed = match way {
        Way::Lance => CommitBuilder::new(stale.clone())
            .with_affected_rows(rows_given)
            .execute(staged.transaction().clone())
            .await
            .expect("Lance's commit"),
        Way::Ours | Way::OursStaged => {
            let commit = stale.action_commit();
            let (landed, report) = if way == Way::OursStaged {
                commit.execute_delete(staged).await
            } else {
                commit.with_affected_rows(rows_given).execute(staged.transaction().clone()).await
            }
            .expect("our commit");
            assert_eq!(report.attempts.len(), 1, "{name}: judged at the write, one attempt: {report:?}");
            let at_write = report.attempts[0].at_write.as_ref().expect("judged at the write");
            assert_eq!(at_write.peers.len() as i64, writers, "{name}: every writer in between judged");
            assert!(at_write.head_read_back, "{name}: the head read back from Lance's manifest");
            landed
        }
    };
    let spent = cx.s3.requests_since(&before);
    assert_eq!(landed.manifest().version, 2 + writers as u64, "{name}: landed past the writers");
    expected.remove(&7);
    let (found, total) = scan(&Dataset::open(&uri).await.expect("reopen")).await;
    assert_eq!((total, found), (expected.len(), expected), "{name}: every delete holds");
    spent
}

/// A put lost after the judgement at the write admitted the writer before it, on S3, a store Lance
/// lists in order: the next attempt stands where the first stood (standing on the newest writer
/// would mean looking it up, a HEAD request), since Lance's next listing finds both writers in one
/// request; the judgement at the second write judges both, from the log the first filled. Checked
/// from the report; the requests are not counted here (writer b's own fall in the same window).
/// (On a local disk, where Lance's listing probes each version, it stands on the writer it judged
/// instead: `tests/commit/at_write.rs`.) Every row lands once.
pub async fn an_append_whose_put_was_lost_stands_where_it_stood_on_an_ordered_store(cx: &Ctx<'_>) {
    let (uri, base) = sample_table(cx, "lost-put").await;
    let stale = Arc::new(Dataset::open(&uri).await.expect("open on S3"));
    let v = stale.manifest().version;
    let ours = stage_append(&stale, &[(100, 100)]).await;
    append_through_a_handle_of_its_own(&uri, 200).await;
    // Writer b takes the version our put asks for, between our judgement at the write and the put.
    let hook_uri = uri.clone();
    lance_actions_commit::hooks::register("commit:admitted-at-write", &uri, move || async move {
        append_through_a_handle_of_its_own(&hook_uri, 300).await
    });
    let (landed, report) = stale.action_commit().execute(ours).await.expect("ours lands");
    assert_eq!(report.attempts.len(), 2, "{report:?}");
    let (first, second) = (&report.attempts[0], &report.attempts[1]);
    assert_eq!(first.write, Some(lance_actions_commit::expect_version::WriteRecord::LostRace), "{report:?}");
    assert_eq!(first.at_write.as_ref().map(|j| j.peers.len()), Some(1), "writer a judged at the first write");
    assert_eq!(second.head, v, "the second attempt stands where the first stood: {report:?}");
    let at_write = second.at_write.as_ref().expect("judged at the second write");
    assert_eq!((at_write.head, at_write.peers.len()), (v + 2, 2), "both writers judged at the write: {report:?}");
    assert_eq!(landed.manifest().version, v + 3, "landed past both writers");
    let mut expected: BTreeMap<i64, i64> = base.into_iter().collect();
    expected.extend([(100, 100), (200, 200), (300, 300)]);
    let (found, total) = scan(&Dataset::open(&uri).await.expect("reopen")).await;
    assert_eq!((total, found), (expected.len(), expected), "every row once");
}

/// Append the row `(id, id)` through a handle (and session) of its own, as another process would.
async fn append_through_a_handle_of_its_own(uri: &str, id: i64) {
    let other = Arc::new(Dataset::open(uri).await.expect("open on S3"));
    let append = WriteParams { mode: WriteMode::Append, ..Default::default() };
    InsertBuilder::new(other).with_params(&append).execute(vec![rows(&[(id, id)])]).await.expect("a writer lands");
}
