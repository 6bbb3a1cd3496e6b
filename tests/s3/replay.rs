//! Branch replay on S3: a branch created and written by pylance merged by its logical name with no
//! data object copied, and rebase and squash, whose fresh physical branches graft the old branch's
//! files as bases across S3 prefixes.

use std::collections::BTreeMap;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions_replay::{Branches, Outcome, ReplayOptions};

use crate::Ctx;
use crate::support::{objects, pylance, rows, scan, written_by_kind};

fn values(ids: impl IntoIterator<Item = i64>) -> Vec<(i64, i64)> {
    ids.into_iter().map(|id| (id, id * 10)).collect()
}

async fn create(uri: &str, ids: impl IntoIterator<Item = i64>) {
    let params = WriteParams { mode: WriteMode::Create, max_rows_per_file: 10, ..Default::default() };
    InsertBuilder::new(uri).with_params(&params).execute(vec![rows(&values(ids))]).await.expect("create on S3");
}

/// A plain Lance append to the latest version of logical branch `name`.
async fn append(b: &Branches, name: &str, ids: impl IntoIterator<Item = i64>) {
    let chain = b.resolve(name).await.expect("resolve");
    let ds = b.root().await.expect("root").checkout_branch(chain.as_deref().unwrap_or("main")).await.expect("checkout");
    let params = WriteParams { mode: WriteMode::Append, max_rows_per_file: 10, ..Default::default() };
    InsertBuilder::new(Arc::new(ds)).with_params(&params).execute(vec![rows(&values(ids))]).await.expect("append");
}

async fn content(b: &Branches, name: &str) -> BTreeMap<i64, i64> {
    let chain = b.resolve(name).await.expect("resolve");
    let ds = b.root().await.expect("root").checkout_branch(chain.as_deref().unwrap_or("main")).await.expect("checkout");
    let (found, total) = scan(&ds).await;
    assert_eq!(found.len(), total, "duplicate rows on branch {name}");
    found
}

pub async fn a_branch_made_by_pylance_on_s3_merges_by_logical_name_copying_no_data(cx: &Ctx<'_>) {
    let uri = cx.uri("pylance-branch");
    create(&uri, 0..20).await;
    pylance(
        "import json, sys, lance, pyarrow as pa\n\
         uri = sys.argv[1]\n\
         lance.dataset(uri).create_branch('feature', 1)\n\
         ids = list(range(1000, 1010))\n\
         t = pa.table({'id': pa.array(ids, pa.int64()), 'v': pa.array([i * 10 for i in ids], pa.int64())})\n\
         lance.write_dataset(t, lance.dataset(uri).checkout_version(('feature', None)), mode='append')\n\
         m = pa.table({'id': pa.array([2000, 2001], pa.int64()), 'v': pa.array([20000, 20010], pa.int64())})\n\
         lance.write_dataset(m, uri, mode='append')\n\
         print(json.dumps(sorted(lance.dataset(uri).branches.list().keys())))",
        &[&uri],
    );
    let b = Branches::new(&uri);
    let root = b.root().await.expect("root");
    let before = objects(&root, &format!("{}/pylance-branch", cx.bucket)).await;
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge on S3");
    assert!(matches!(out, Outcome::Merged { .. }), "main had moved, so this is a merge: {out:?}");
    let after = objects(&root, &format!("{}/pylance-branch", cx.bucket)).await;
    let written = written_by_kind(&before, &after);
    assert_eq!(written.get("data"), None, "the merge copied data objects: {written:?}");
    let expected: BTreeMap<i64, i64> = values((0..20).chain(1000..1010).chain(2000..2002)).into_iter().collect();
    assert_eq!(content(&b, "main").await, expected);
    let seen = pylance("import json, sys, lance\nprint(json.dumps(lance.dataset(sys.argv[1]).count_rows()))", &[&uri]);
    assert_eq!(seen, serde_json::json!(expected.len()), "pylance reads the merged main from the bucket");
    println!("    S3 merge of a pylance branch wrote {written:?} bytes by kind, no data");
}

pub async fn rebase_and_squash_on_s3_graft_bases_across_prefixes(cx: &Ctx<'_>) {
    let uri = cx.uri("rebase");
    create(&uri, 0..20).await;
    let b = Branches::new(&uri);
    b.create("feature", "main", None).await.expect("branch on S3");
    append(&b, "feature", 100..103).await;
    append(&b, "feature", 103..106).await;
    append(&b, "main", 20..25).await;
    let out = b.rebase("feature", "main", &ReplayOptions::default()).await.expect("rebase on S3");
    let Outcome::Rebased { new_physical, .. } = out else { panic!("expected a rebase: {out:?}") };
    let expected: BTreeMap<i64, i64> = values((0..25).chain(100..106)).into_iter().collect();
    assert_eq!(content(&b, "feature").await, expected, "the rebased branch");
    // The fresh physical branch reads the old branch's files through grafted bases on S3.
    let rebased = b.root().await.expect("root").checkout_branch(&new_physical).await.expect("the rebased branch");
    let bases: Vec<String> = rebased.manifest().base_paths.values().map(|p| p.path.clone()).collect();
    assert!(bases.iter().any(|p| p.starts_with("s3://")), "no base grafted on S3: {bases:?}");
    let head = rebased.manifest().version;
    let out = b.squash("feature", head - 1, head, &ReplayOptions::default()).await.expect("squash on S3");
    assert!(matches!(out, Outcome::Squashed { .. }), "{out:?}");
    assert_eq!(content(&b, "feature").await, expected, "the squashed branch");
    let out = b.merge("feature", "main", &ReplayOptions::default()).await.expect("merge back");
    assert!(!matches!(out, Outcome::Conflicted { .. }), "{out:?}");
    assert_eq!(content(&b, "main").await, expected, "main after the merge");
    let main: Dataset = b.root().await.expect("root");
    assert!(main.manifest().version > 1);
}
