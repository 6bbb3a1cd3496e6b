//! Surface guards (`design/fencing.md` §3-§4), pinned against Lance 14.0.2's actual behaviour so that a Lance
//! upgrade that changes any of them fails here loudly, plus the source walk that keeps Lance's raw
//! append / merge-insert entry points inside the one staging module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance::dataset::{
    CommitBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams,
};
use lance::index::DatasetIndexExt;
use lance_index::IndexType;
use lance_index::scalar::ScalarIndexParams;
use lance_table::format::key_existence::FilterType;

use crate::support::*;

async fn stage_merge(ds: &Arc<Dataset>, on: &str, ids: &[i64], matched: WhenMatched, use_index: bool) -> Transaction {
    let mut b = MergeInsertBuilder::try_new(ds.clone(), vec![on.into()]).expect("builder");
    b.when_matched(matched).when_not_matched(WhenNotMatched::InsertAll).use_index(use_index).conflict_retries(0);
    b.try_build().expect("job").execute_uncommitted_batches(vec![rows(ids, 5)]).await.expect("stage").transaction
}

async fn stage_append(ds: &Arc<Dataset>, ids: &[i64]) -> Transaction {
    InsertBuilder::new(ds.clone())
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute_uncommitted(vec![rows(ids, 0)])
        .await
        .expect("stage append")
}

fn filter_of(txn: &Transaction) -> Option<&lance_table::format::key_existence::KeyExistenceFilter> {
    match &txn.operation {
        lance::dataset::transaction::Operation::Update { inserted_rows_filter, .. } => inserted_rows_filter.as_ref(),
        _ => None,
    }
}

/// Commit as Lance's own loop does, with no retries: Ok, or Lance's conflict error.
async fn lance_commit(ds: &Arc<Dataset>, txn: Transaction) -> Result<Dataset, lance::Error> {
    CommitBuilder::new(ds.clone()).with_max_retries(0).execute(txn).await
}

#[tokio::test]
async fn lance_attaches_its_key_filter_only_on_the_v2_path_with_on_equal_to_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1, 2, 3]).await;
    let ds = latest(&uri).await;
    let id = ds.schema().field("id").expect("id").id;
    let on_key = stage_merge(&ds, "id", &[4], WhenMatched::UpdateAll, false).await;
    let f = filter_of(&on_key).expect("v2 merge on the key attaches a filter");
    assert_eq!(f.field_ids, vec![id]);
    assert!(matches!(f.filter, FilterType::Bloom { .. }), "Lance 14 writes only bloom filters");
    assert!(filter_of(&stage_merge(&ds, "name", &[5], WhenMatched::UpdateAll, false).await).is_none());
    let mut indexed = (*ds).clone();
    indexed
        .create_index(&["id"], IndexType::BTree, None, &ScalarIndexParams::default(), false)
        .await
        .expect("btree on id");
    let indexed = Arc::new(indexed);
    let v1 = stage_merge(&indexed, "id", &[6], WhenMatched::UpdateAll, true).await;
    assert!(filter_of(&v1).is_none(), "the indexed (v1) path drops the filter: we must stay on use_index(false)");
    assert!(filter_of(&stage_merge(&indexed, "id", &[6], WhenMatched::UpdateAll, false).await).is_some());
}

#[tokio::test]
async fn when_matched_fail_reports_an_existing_key_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1, 2, 3]).await;
    let ds = latest(&uri).await;
    let mut b = MergeInsertBuilder::try_new(ds.clone(), vec!["id".into()]).expect("builder");
    b.when_matched(WhenMatched::Fail).when_not_matched(WhenNotMatched::InsertAll).use_index(false);
    let fresh = b.clone().try_build().expect("job").execute_uncommitted_batches(vec![rows(&[9], 0)]).await;
    assert!(fresh.expect("new key stages").inserted_rows_filter.is_some(), "Fail keeps the filter");
    let existing = b.try_build().expect("job").execute_uncommitted_batches(vec![rows(&[2], 0)]).await;
    assert!(existing.is_err(), "an existing key fails the merge");
    assert_eq!(latest(&uri).await.manifest().version, 1);
}

#[tokio::test]
async fn lance_key_conflicts_are_directional() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1, 2, 3]).await;

    // Each case stages two transactions on the same base, commits the first, then the second.
    async fn second_lands(uri: &str, first: Transaction, second: Transaction) -> bool {
        let ds = latest(uri).await;
        lance_commit(&ds, first).await.expect("first commits");
        lance_commit(&ds, second).await.is_ok()
    }
    let base = latest(&uri).await;
    let same_a = stage_merge(&base, "id", &[10], WhenMatched::UpdateAll, false).await;
    let same_b = stage_merge(&base, "id", &[10], WhenMatched::UpdateAll, false).await;
    assert!(!second_lands(&uri, same_a, same_b).await, "filtered vs filtered, same key: retry");

    let base = latest(&uri).await;
    let a = stage_merge(&base, "id", &[20], WhenMatched::UpdateAll, false).await;
    let b = stage_merge(&base, "id", &[21], WhenMatched::UpdateAll, false).await;
    assert!(second_lands(&uri, a, b).await, "filtered vs filtered, disjoint keys: rebases");

    let base = latest(&uri).await;
    let filtered = stage_merge(&base, "id", &[30], WhenMatched::UpdateAll, false).await;
    let append = stage_append(&base, &[30]).await;
    assert!(!second_lands(&uri, append, filtered).await, "filtered after a bare Append: retry");

    let base = latest(&uri).await;
    let filtered = stage_merge(&base, "id", &[40], WhenMatched::UpdateAll, false).await;
    let append = stage_append(&base, &[40]).await;
    assert!(
        second_lands(&uri, filtered, append).await,
        "Lance 14: a bare Append after a filtered Update lands (the asymmetry design/fencing.md §4 names)"
    );

    let base = latest(&uri).await;
    let filtered = stage_merge(&base, "id", &[50], WhenMatched::UpdateAll, false).await;
    let unfiltered = stage_merge(&base, "name", &[50], WhenMatched::UpdateAll, false).await;
    assert!(
        second_lands(&uri, filtered, unfiltered).await,
        "Lance 14: an unfiltered Update after a filtered one lands"
    );
    let (dups, scan) = {
        let s = scan(&latest(&uri).await).await;
        (duplicated(&s), s)
    };
    assert_eq!(dups, [40, 50], "Lance alone admits these duplicates: {scan:?}");
}

#[tokio::test]
async fn a_primary_key_cannot_be_changed_once_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1]).await;
    let mut ds = (*latest(&uri).await).clone();
    let attempt = ds
        .update_field_metadata()
        .update("name", [("lance-schema:unenforced-primary-key", "true")])
        .expect("builder")
        .await;
    assert!(attempt.is_err(), "Lance refuses to change a set primary key");
    let mut ds = (*latest(&uri).await).clone();
    let attempt = ds
        .update_field_metadata()
        .update("id", [("lance-schema:unenforced-primary-key", "true")])
        .expect("builder")
        .await;
    assert!(attempt.is_err(), "Lance refuses even to re-set the same key");
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Production sources (each crate's `src/`), with comment lines dropped.
fn production_sources() -> Vec<(String, String)> {
    let root = workspace_root().join("rust");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root).expect("rust/").flatten() {
        rust_sources(&krate.path().join("src"), &mut files);
    }
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("source");
            let code: String =
                text.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect();
            let rel = p.strip_prefix(&root).expect("under rust/").to_string_lossy().replace('\\', "/");
            (rel, code)
        })
        .collect()
}

#[test]
fn lance_raw_writers_are_called_only_from_the_staging_module() {
    const RAW: [&str; 9] = [
        "InsertBuilder",
        "MergeInsertBuilder",
        "DeleteBuilder",
        "UpdateBuilder",
        ".merge_insert(",
        "Dataset::write(",
        "write_fragments(",
        "WriteMode::Append",
        "extend_deletions(",
    ];
    // The staging module of the keyed layer, the plain-Lance samples the conformance oracle
    // compares against (the sample table's and the reuse tables'; they never write to a keyed
    // table through this project's API), and the
    // graph manifest's creation (an empty, keyless dataset whose config is the manifest), the
    // bench workloads, whose plain tables Lance's own writers stage for both sides of a comparison,
    // and the commit layer's delete staging (`stage_delete`: a `DeleteBuilder` only, which removes
    // rows and can insert no key; the keyed layer's deletes go through it).
    const ALLOWED: [&str; 8] = [
        "lance-actions-keyed/src/stage.rs",
        "lance-actions-commit/src/staged_delete.rs",
        "lance-actions-commit/src/scenario.rs",
        "lance-actions-commit/src/scenario/reuse.rs",
        "lance-actions-commit/src/scenario/segments.rs",
        "lance-actions-graph/src/manifest.rs",
        "lance-actions-commit/src/bench/commit.rs",
        "lance-actions-commit/src/bench/check.rs",
    ];
    let sources = production_sources();
    assert!(sources.iter().any(|(p, _)| p == ALLOWED[0]), "the walk must see the staging module");
    let offenders: Vec<String> = sources
        .iter()
        .filter(|(path, _)| !ALLOWED.contains(&path.as_str()))
        .flat_map(|(path, code)| RAW.iter().filter(|raw| code.contains(*raw)).map(move |raw| format!("{path}: {raw}")))
        .collect();
    assert!(offenders.is_empty(), "Lance's raw writers outside the staging module: {offenders:?}");
}

#[test]
fn the_plain_append_is_reachable_only_from_the_keyless_table() {
    let callers: Vec<String> = production_sources()
        .into_iter()
        .filter(|(_, code)| code.contains("stage::keyless_append("))
        .map(|(p, code)| format!("{p} x{}", code.matches("stage::keyless_append(").count()))
        .collect();
    assert_eq!(callers, ["lance-actions-keyed/src/table.rs x1"]);
}
