//! All-branch key migration behind the fencing stamp (`design/fencing.md` §6), on real Lance branches.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance_actions::actions::change_schema::ChangeSchema;
use lance_actions::{ActionTxn, OperationKind};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_actions_keyed::migrate::BranchStep;
use lance_actions_keyed::{ConflictCause, Error, KeyedTable, migrate};

use crate::support::*;

/// Rows as a plain Lance writer writes them: nullable columns, no key metadata.
fn plain_rows(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
            Arc::new(Int64Array::from(vec![0; ids.len()])),
        ],
    )
    .expect("batch")
}

async fn plain_write(dest: &Dataset, ids: &[i64]) -> Dataset {
    InsertBuilder::new(Arc::new(dest.clone()))
        .with_params(&WriteParams { mode: WriteMode::Append, ..Default::default() })
        .execute(vec![plain_rows(ids)])
        .await
        .expect("plain append")
}

/// A plain table with main (two versions), `feature` from main v1 (appended to), and
/// `feature-child` branched from feature: every kind of branch state the migration must reach.
async fn plain_table_with_branches(uri: &str) -> Dataset {
    let mut main = InsertBuilder::new(uri)
        .with_params(&WriteParams { mode: WriteMode::Create, ..Default::default() })
        .execute(vec![plain_rows(&(0..10).collect::<Vec<_>>())])
        .await
        .expect("create plain table");
    let feature = main.create_branch("feature", 1, None).await.expect("branch feature");
    let feature = plain_write(&feature, &[100, 101]).await;
    main.create_branch("feature-child", ("feature", None), None).await.expect("nested branch");
    let _ = feature;
    plain_write(&main, &[10, 11]).await
}

async fn versions(uri: &str) -> Vec<(String, u64)> {
    let main = Dataset::open(uri).await.expect("open");
    let mut out = vec![("main".to_string(), main.manifest().version)];
    let mut names: Vec<String> = main.list_branches().await.expect("branches").into_keys().collect();
    names.sort();
    for b in names {
        let ds = main.checkout_branch(&b).await.expect("branch");
        out.push((b, ds.manifest().version));
    }
    out
}

async fn branch_rows(uri: &str, branch: &str) -> usize {
    let main = Dataset::open(uri).await.expect("open");
    main.checkout_branch(branch).await.expect("branch").count_rows(None).await.expect("count")
}

#[tokio::test]
async fn migration_keys_main_and_every_branch_then_stamps_and_is_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    plain_table_with_branches(&uri).await;
    assert!(matches!(KeyedTable::open(&uri).await, Err(Error::NotKeyed { .. })));
    let rows_before =
        [branch_rows(&uri, "main").await, branch_rows(&uri, "feature").await, branch_rows(&uri, "feature-child").await];

    let report = migrate(&uri, &["id"]).await.expect("migrate");
    let names: Vec<&str> = report.branches.iter().map(|b| b.branch.as_str()).collect();
    assert_eq!(names, ["main", "feature", "feature-child"]);
    assert!(report.branches.iter().all(|b| matches!(b.step, BranchStep::Installed { .. })));
    assert!(report.stamped);
    for (branch, rows) in ["main", "feature", "feature-child"].iter().zip(rows_before) {
        let table = KeyedTable::open_branch(&uri, branch).await.expect("keyed on every branch");
        assert_eq!(table.key().names, ["id"]);
        assert_eq!(branch_rows(&uri, branch).await, rows, "migration changes no rows");
    }

    let after = versions(&uri).await;
    let again = migrate(&uri, &["id"]).await.expect("second run");
    assert!(again.branches.iter().all(|b| b.step == BranchStep::AlreadyKeyed));
    assert!(!again.stamped);
    assert_eq!(versions(&uri).await, after, "an already-keyed table is not rewritten");

    // Fenced writes work on a branch, and a branch created now inherits the key.
    let mut feature = KeyedTable::open_branch(&uri, "feature").await.expect("feature");
    assert!(matches!(
        feature.insert(vec![rows(&[100], 0)]).await,
        Err(Error::KeyConflict { cause: ConflictCause::AlreadyPresent, .. })
    ));
    feature.insert(vec![rows(&[102], 0)]).await.expect("new key on feature");
    let mut main = Dataset::open(&uri).await.expect("open");
    main.create_branch("late", ("feature", None), None).await.expect("branch after migration");
    let late = KeyedTable::open_branch(&uri, "late").await.expect("a new branch keeps the key");
    assert_eq!(late.dataset().count_rows(None).await.expect("count"), rows_before[1] + 1);
}

#[tokio::test]
async fn duplicate_keys_on_any_branch_refuse_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let main = plain_table_with_branches(&uri).await;
    let dup = main.checkout_branch("feature-child").await.expect("child");
    plain_write(&dup, &[3, 101]).await;
    let before = versions(&uri).await;
    match migrate(&uri, &["id"]).await {
        Err(Error::DuplicateKeysInBranch { branch, keys }) => {
            assert_eq!(branch, "feature-child");
            assert_eq!((keys.first, keys.count), (vec!["3".to_string(), "101".to_string()], 2));
        }
        other => panic!("expected a duplicate-key refusal, got {other:?}"),
    }
    assert_eq!(versions(&uri).await, before, "nothing written on any branch");
}

#[tokio::test]
async fn a_different_existing_primary_key_is_a_loud_refusal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let mut main = plain_table_with_branches(&uri).await;
    main.update_field_metadata()
        .update("name", [("lance-schema:unenforced-primary-key", "true")])
        .expect("builder")
        .await
        .expect_err("a nullable field cannot be a key");
    let mut k = KeyedTable::create(&temp_uri(&dir, "k"), vec![rows(&[1], 0)], &["name"]).await.expect("keyed on name");
    k.insert(vec![rows(&[2], 0)]).await.expect("insert");
    match migrate(&temp_uri(&dir, "k"), &["id"]).await {
        Err(Error::DifferentPrimaryKey { existing, .. }) => assert_eq!(existing, ["name"]),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Entry point of a child process: run the migration (which may be armed to crash). Ignored, so
/// the runner never counts it as a test of its own; the parent runs it by name.
#[tokio::test]
#[ignore = "child process of a_crash_at_any_step_resumes_by_running_again"]
async fn migration_child() {
    let uri = std::env::var("LA_MIGRATE_URI")
        .expect("run by a_crash_at_any_step_resumes_by_running_again, which sets LA_MIGRATE_URI");
    migrate(&uri, &["id"]).await.expect("migration in the child");
}

#[tokio::test]
async fn a_crash_at_any_step_resumes_by_running_again() {
    for point in ["migrate-after-key", "migrate-after-branch", "migrate-before-stamp"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir, "t");
        plain_table_with_branches(&uri).await;
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "migration::migration_child", "--test-threads", "1"])
            .env("LA_MIGRATE_URI", &uri)
            .env("LANCE_ACTIONS_CRASH_AT", point)
            .stderr(std::process::Stdio::null())
            .output()
            .expect("spawn child");
        // The child started the test (libtest prints its name before running it) and aborted in it.
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("running 1 test"), "the child test did not start at {point}: {stdout}");
        assert!(!output.status.success(), "the child must have crashed at {point}");
        assert!(
            matches!(KeyedTable::open(&uri).await, Err(Error::MigrationIncomplete { .. } | Error::NotKeyed { .. })),
            "a half-migrated table refuses keyed writes ({point})"
        );
        let report = migrate(&uri, &["id"]).await.expect("resume");
        assert!(report.stamped, "{point}");
        for branch in ["main", "feature", "feature-child"] {
            KeyedTable::open_branch(&uri, branch).await.unwrap_or_else(|e| panic!("{branch} after {point}: {e}"));
        }
        assert_eq!(branch_rows(&uri, "main").await, 12);
    }
}

#[tokio::test]
async fn after_the_stamp_a_schema_change_must_keep_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    plain_table_with_branches(&uri).await;
    migrate(&uri, &["id"]).await.expect("migrate");
    let ds = latest(&uri).await;
    let mut dropped = ds.schema().clone();
    let id = dropped.field("id").expect("id").id;
    if let Some(f) = dropped.mut_field_by_id(id) {
        f.metadata.clear();
        f.unenforced_primary_key_position = None;
    }
    let txn = ActionTxn::new(
        OperationKind::Project,
        vec![ChangeSchema { schema: dropped, preserves_nullability: true }.into()],
    );
    match ds.action_commit().execute_actions(ds.manifest().version, txn).await {
        Err(CommitError::Fail { reason, .. }) => assert!(reason.detail.contains("primary key"), "{}", reason.detail),
        other => panic!("expected the key drop to be refused, got {:?}", other.map(|(_, r)| r.version)),
    }
    // A schema change that keeps the key lands.
    let mut kept = ds.schema().clone();
    let name = kept.field("name").expect("name").id;
    if let Some(f) = kept.mut_field_by_id(name) {
        f.metadata.insert("doc".into(), "display name".into());
    }
    let txn =
        ActionTxn::new(OperationKind::Project, vec![ChangeSchema { schema: kept, preserves_nullability: true }.into()]);
    ds.action_commit().execute_actions(ds.manifest().version, txn).await.expect("a key-preserving change lands");
    KeyedTable::open(&uri).await.expect("still keyed");
}

/// A branch retired for a delete (`retired-into = ""`) may yet have the retirement lifted (a refused
/// delete undoes its first step): the migration must not count it done and stamp without it, or the
/// branch comes back unkeyed on a stamped table. It refuses to stamp instead; once the retirement
/// is lifted, running it again keys the branch.
#[tokio::test]
async fn a_branch_retired_for_a_delete_is_not_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let main = plain_table_with_branches(&uri).await;
    let mut feature = main.checkout_branch("feature").await.expect("feature");
    let retired = lance_actions::retired::RETIRED_KEY;
    feature.update_config([(retired, "")]).await.expect("retire for a delete");
    match migrate(&uri, &["id"]).await {
        Err(Error::BranchBeingDeleted { branch }) => assert_eq!(branch, "feature"),
        other => panic!("a branch half-way through a delete must stop the stamp, got {other:?}"),
    }
    // The delete is refused and lifts the retirement: the branch is live again.
    feature.checkout_latest().await.expect("latest feature");
    feature.update_config([(retired, None::<&str>)]).await.expect("lift the retirement");
    let report = migrate(&uri, &["id"]).await.expect("migration after the lift");
    assert!(report.stamped, "stamped once every branch is keyed");
    let table = KeyedTable::open_branch(&uri, "feature").await.expect("the lifted branch is keyed");
    assert_eq!(table.key().names, ["id"]);
}
