//! `KeyedTable::replace_at`: a keyed write at row addresses the caller located. Every claim the
//! caller makes is checked (the address holds the key live, an unlocated key is absent), and a
//! concurrent write of a key is a refusal, never a duplicate. Each test scans the table after.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, UInt64Array};
use futures::TryStreamExt;
use lance::Dataset;
use lance_actions_keyed::{Error, KeyedTable, Located};

use crate::support::*;

/// The row address of each id, read by a scan with addresses.
async fn addresses(ds: &Arc<Dataset>) -> BTreeMap<i64, u64> {
    let mut scanner = ds.scan();
    scanner.project(&["id"]).expect("project").with_row_address();
    let batches: Vec<_> = scanner.try_into_stream().await.expect("scan").try_collect().await.expect("scan");
    let mut out = BTreeMap::new();
    for b in batches {
        let ids = b.column_by_name("id").expect("id").as_any().downcast_ref::<Int64Array>().expect("i64").clone();
        let at =
            b.column_by_name("_rowaddr").expect("addr").as_any().downcast_ref::<UInt64Array>().expect("u64").clone();
        for (i, a) in ids.values().iter().zip(at.values()) {
            out.insert(*i, *a);
        }
    }
    out
}

fn located(ids: &[i64], at: &BTreeMap<i64, u64>) -> Located {
    Located { keys: vec![keys(ids)], addresses: ids.iter().map(|i| at[i]).collect() }
}

/// Ids 1..=100 in one fragment, then 101..=120 upserted into a second.
async fn two_fragments(uri: &str) -> KeyedTable {
    let mut t = keyed_table(uri, &(1..=100).collect::<Vec<_>>()).await;
    t.upsert(vec![rows(&(101..=120).collect::<Vec<_>>(), 0)]).await.expect("upsert");
    assert_eq!(t.dataset().manifest().fragments.len(), 2);
    t
}

#[tokio::test]
async fn replace_at_updates_deletes_and_inserts_at_the_located_rows_in_one_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut t = two_fragments(&uri).await;
    let before = t.dataset().manifest().version;
    let at = addresses(t.dataset()).await;
    // 5 and 110 updated (one in each fragment), 50 deleted, 200 inserted.
    let out = t.replace_at(vec![rows(&[5, 110, 200], 7)], located(&[5, 110, 50], &at)).await.expect("replace");
    assert_eq!((out.inserted, out.updated, out.deleted, out.commits.len()), (1, 2, 1, 1));
    assert_eq!(out.version, before + 1);
    let scan = scan(&latest(&uri).await).await;
    assert!(duplicated(&scan).is_empty(), "duplicates {:?}", duplicated(&scan));
    let mut expected: BTreeMap<i64, i64> = (1..=120).map(|i| (i, 0)).collect();
    expected.remove(&50);
    for id in [5, 110, 200] {
        expected.insert(id, 7);
    }
    let got: BTreeMap<i64, i64> = scan.iter().map(|(id, (_, v))| (*id, *v)).collect();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_wrong_missing_or_deleted_address_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut t = two_fragments(&uri).await;
    let at = addresses(t.dataset()).await;
    t.delete(vec![keys(&[7])]).await.expect("delete 7");
    let version = t.dataset().manifest().version;
    let cases = [
        ("5 located at 50's row", Located { keys: vec![keys(&[5])], addresses: vec![at[&50]] }),
        ("an address in no fragment", Located { keys: vec![keys(&[5])], addresses: vec![(99u64 << 32) | 1] }),
        ("7's address after 7 was deleted", located(&[7], &at)),
    ];
    for (what, claim) in cases {
        match t.replace_at(vec![rows(&[5, 7], 9)], claim).await {
            Err(Error::RowsMoved { version: v, .. }) => assert_eq!(v, version, "{what}"),
            other => panic!("{what}: must be RowsMoved, got {:?}", other.map(|o| o.version)),
        }
    }
    let after = latest(&uri).await;
    assert_eq!(after.manifest().version, version, "nothing committed");
    let scan = scan(&after).await;
    assert!(!scan.contains_key(&7) && scan[&5].1 == 0 && scan.len() == 119);
}

#[tokio::test]
async fn a_present_key_that_was_not_located_is_refused_never_duplicated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut t = two_fragments(&uri).await;
    let version = t.dataset().manifest().version;
    let empty = Located { keys: vec![keys(&[])], addresses: vec![] };
    assert!(matches!(t.replace_at(vec![rows(&[5], 9)], empty).await, Err(Error::RowsMoved { .. })));
    let twice = Located { keys: vec![keys(&[5, 5])], addresses: vec![0, 1] };
    assert!(matches!(t.replace_at(vec![rows(&[5], 9)], twice).await, Err(Error::Input { .. })));
    let after = latest(&uri).await;
    assert_eq!(after.manifest().version, version);
    let scan = scan(&after).await;
    assert!(duplicated(&scan).is_empty() && scan[&5].1 == 0);
}

#[tokio::test]
async fn a_concurrent_upsert_of_a_written_key_outdates_the_addresses_never_a_duplicate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut ours = two_fragments(&uri).await;
    let version = ours.dataset().manifest().version;
    let at = addresses(ours.dataset()).await;
    let mut theirs = KeyedTable::open(&uri).await.expect("open");
    theirs.upsert(vec![rows(&[5], 3)]).await.expect("their upsert");
    // Ours still reads the version before theirs: its addresses are of that version.
    match ours.replace_at(vec![rows(&[5], 9)], located(&[5], &at)).await {
        Err(e @ Error::AddressesOutdated { .. }) => {
            assert!(e.is_interference() && !e.is_retryable(), "re-planned, not run again as it was: {e}");
            assert!(e.to_string().contains("locate the rows again"), "{e}");
            let Error::AddressesOutdated { version: at_version, last } = e else { unreachable!() };
            assert_eq!(at_version, version, "the version the addresses belong to");
            assert!(
                matches!(last, lance_actions_commit::Interference::WriterLanded { .. }),
                "the judged upsert is the reason, not a lost write: {last}"
            );
            // Their upsert moved the row ours replaces: both deleted it from its fragment.
            assert_eq!(last.rule(), Some(&lance_actions::Rule::RowsOverlap), "{last}");
            assert!(!last.is_key_race(), "{last}");
        }
        other => panic!("must lose to the concurrent upsert, got {:?}", other.map(|o| o.version)),
    }
    let scan = scan(&latest(&uri).await).await;
    assert!(duplicated(&scan).is_empty(), "duplicates {:?}", duplicated(&scan));
    assert_eq!(scan[&5].1, 3, "their value stays");
}
