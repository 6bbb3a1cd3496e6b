//! The `lance-actions` binary on real datasets: explain, check (.txn files), matrix, demo, keyed, errors.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use lance::dataset::CommitBuilder;
use lance_actions_commit::scenario::{Staged, create_sample, stage_append, stage_delete};
use lance_table::format::pb;
use prost::Message;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lance-actions"))
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = bin().args(args).output().expect("run lance-actions");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn write_txn(staged: &Staged, path: &Path) {
    let pb = pb::Transaction::try_from(&staged.txn).expect("encode transaction");
    std::fs::write(path, pb.encode_to_vec()).expect("write .txn");
}

/// A sample table with `first` committed and `second` staged at the same read version.
async fn race(dir: &Path, first: &str, second: &str) -> (String, std::path::PathBuf) {
    let uri = dir.join("t");
    let uri_s = uri.to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri_s).await.expect("sample");
    let a = stage_delete(&ds, "a", first).await.expect("stage a");
    let b = stage_delete(&ds, "b", second).await.expect("stage b");
    CommitBuilder::new(ds.clone())
        .with_affected_rows(a.affected_rows.clone().expect("rows"))
        .execute(a.txn.clone())
        .await
        .expect("commit a");
    let txn = dir.join("b.txn");
    write_txn(&b, &txn);
    (uri_s, txn)
}

/// `check --json`; its exit code is the verdict's (0 ok, 4 retry, 5 fail).
fn json_check(uri: &str, txn: &Path) -> serde_json::Value {
    let out = bin().args(["check", uri, "--txn", txn.to_str().expect("utf-8"), "--json"]).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let expected = match v["verdict"].as_str() {
        Some("ok") => 0,
        Some("retry") => 4,
        _ => 5,
    };
    assert_eq!(out.status.code(), Some(expected), "{v}");
    v
}

#[tokio::test]
async fn check_reports_row_disjoint_deletes_as_ok_without_affected_rows_in_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, txn) = race(dir.path(), "id IN (4, 5)", "id IN (0, 1)").await;
    let v = json_check(&uri, &txn);
    assert_eq!(v["verdict"], "ok", "{v}");
    assert_eq!(v["lance_verdict"], "ok", "{v}");
    assert_eq!(v["peers"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn check_explains_a_row_overlap_with_the_peer_version_and_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uri, txn) = race(dir.path(), "id IN (0, 1)", "id = 1").await;
    let v = json_check(&uri, &txn);
    assert_eq!(v["verdict"], "retry", "{v}");
    assert_eq!(v["lance_verdict"], "retry", "{v}");
    assert_eq!(v["reason"]["rule"], "RowsOverlap");
    assert_eq!(v["reason"]["peer_version"], v["latest_version"]);
    assert!(v["reason"]["path"].as_str().is_some_and(|p| p.contains("fragment[0].DeletionVector")), "{v}");
}

#[tokio::test]
async fn explain_shows_lifted_actions_and_masks_for_every_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t");
    let uri_s = uri.to_str().expect("utf-8");
    let ds = create_sample(uri_s).await.expect("sample");
    let staged = stage_append(&ds, "x", &[500]).await.expect("stage");
    CommitBuilder::new(Arc::clone(&ds)).execute(staged.txn).await.expect("commit");
    let (ok, out, err) = run(&["explain", uri_s]);
    assert!(ok, "{err}");
    assert!(out.contains("v1: Overwrite"), "{out}");
    assert!(out.contains("v2: CreateIndex"), "{out}");
    assert!(out.contains("v3: UpdateConfig"), "{out}");
    assert!(out.contains("v4: Append"), "{out}");
    assert!(out.contains("AddFragments(1 fragment(s))"), "{out}");
    assert!(
        out.contains("writes: values(field 0), values(field 1), values(field 2), fragments, counter.fragment_id"),
        "{out}"
    );
    let (ok, one, _) = run(&["explain", uri_s, "--version", "4"]);
    assert!(ok && one.starts_with("v4: Append") && !one.contains("v1:"), "{one}");
}

#[test]
fn errors_are_one_line_and_exit_non_zero() {
    let (ok, _, err) = run(&["explain", "/nonexistent/dataset"]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no such path"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, _, err) = run(&["explain", dir.path().to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(err.starts_with("error: ") && err.contains("not a Lance dataset"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn demo_prints_both_verdicts_for_four_scenarios() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, out, err) = run(&["demo", "--dir", dir.path().to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    assert_eq!(out.matches("ours:").count(), 4, "{out}");
    assert_eq!(out.matches("lance:").count(), 4, "{out}");
    assert_eq!(out.matches("ours:  ok").count(), 2, "{out}");
    assert_eq!(out.matches("ours:  retry").count(), 2, "{out}");
}

#[tokio::test]
async fn log_shows_writer_actions_and_verdict_history() {
    use lance_actions_commit::DatasetActionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t");
    let uri_s = uri.to_str().expect("utf-8");
    let ds = create_sample(uri_s).await.expect("sample");
    let staged = stage_delete(&ds, "d", "id = 4").await.expect("stage");
    let rows = staged.affected_rows.clone().expect("delete reports its rows");
    ds.action_commit().with_affected_rows(rows).execute(staged.txn).await.expect("commit through the driver");
    let (ok, out, err) = run(&["log", uri_s]);
    assert!(ok, "{err}");
    let newest = out.lines().next().expect("a line");
    assert!(newest.starts_with("v4  Delete") && newest.ends_with("written by lance-actions"), "{out}");
    assert!(out.contains("UpdateDeletionVector(fragment 0, 1 row(s))"), "{out}");
    assert!(out.contains("attempt: head v3: 0 peer(s), ok"), "{out}");
    assert!(out.contains("v1  Overwrite") && out.contains("written by lance"), "{out}");
}

/// The Python with pylance 14.0.2 that `scripts/test.sh` prepares (`scripts/setup.sh` installs it).
/// A missing interpreter fails the test loudly: a pylance test that silently returns would count
/// as a pass that checked nothing.
fn pylance() -> String {
    let python = std::env::var("LANCE_ACTIONS_PYTHON").unwrap_or_else(|_| {
        panic!(
            "LANCE_ACTIONS_PYTHON is not set: run ./scripts/test.sh, or run ./scripts/setup.sh and \
             export LANCE_ACTIONS_PYTHON=$PWD/python/.venv/bin/python"
        )
    });
    let ok = Command::new(&python).args(["-c", "import lance; assert lance.__version__ == '14.0.2'"]).status();
    assert!(ok.is_ok_and(|s| s.success()), "LANCE_ACTIONS_PYTHON={python} has no pylance 14.0.2");
    python
}

#[tokio::test]
async fn datasets_written_by_pylance_are_explained_judged_and_committed_to() {
    use lance_actions_commit::DatasetActionsExt;
    let python = pylance();
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("py").to_str().expect("utf-8").to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/python/write_with_pylance.py");
    let out = Command::new(&python).args([script, &uri]).output().expect("run pylance");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, text, err) = run(&["explain", &uri]);
    assert!(ok, "{err}");
    for expected in ["v1: Overwrite", "v2: Append", "v3: Delete", "UpdateDeletionVector(fragment 0", "v4: CreateIndex"]
    {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
    // Our driver commits onto the pylance-written table, and pylance reads the result.
    let ds = Arc::new(lance::Dataset::open(&uri).await.expect("open"));
    let staged = stage_delete(&ds, "rust", "id = 5").await.expect("stage");
    let (landed, _) = ds.action_commit().execute(staged.txn).await.expect("commit");
    let read_back = format!("import lance; d = lance.dataset({uri:?}); print(d.count_rows(), d.version)");
    let out = Command::new(&python).args(["-c", &read_back]).output().expect("pylance reads back");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("15 {}", landed.manifest().version));
    let (ok, log, _) = run(&["log", &uri]);
    assert!(ok && log.lines().next().is_some_and(|l| l.ends_with("written by lance-actions")), "{log}");
}

// ---- keyed ----

fn run_code(args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin().args(args).output().expect("run lance-actions");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// Write JSON lines to `dir/name` and return the path.
fn jsonl(dir: &Path, name: &str, lines: &[&str]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write json lines");
    path.to_str().expect("utf-8").to_string()
}

async fn count_rows(uri: &str) -> usize {
    lance::Dataset::open(uri).await.expect("open").count_rows(None).await.expect("count")
}

/// A keyed table on `id` with ids 1 and 2, created from JSON lines.
fn create_keyed(dir: &Path) -> String {
    let uri = dir.join("k").to_str().expect("utf-8").to_string();
    let input = jsonl(dir, "rows.jsonl", &[r#"{"id": 1, "name": "a"}"#, r#"{"id": 2, "name": "b"}"#]);
    let (code, out, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &input]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("2 row(s) at v1"), "{out}");
    uri
}

#[tokio::test]
async fn keyed_create_from_json_lines_then_strict_insert_refuses_a_present_key_with_exit_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let new = jsonl(dir.path(), "new.jsonl", &[r#"{"id": 3, "name": "c"}"#, r#"{"id": 4, "name": "d"}"#]);
    let (code, out, err) = run_code(&["keyed", "insert", &uri, "--input", &new]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("inserted 2") && out.contains("at v2"), "{out}");
    assert_eq!(count_rows(&uri).await, 4);

    let dup = jsonl(dir.path(), "dup.jsonl", &[r#"{"id": 5, "name": "e"}"#, r#"{"id": 3, "name": "x"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &dup]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.starts_with("error: key conflict") && err.contains("already present"), "{err}");
    assert!(err.lines().any(|l| l.trim() == "3"), "the conflicting key is listed: {err}");

    let (code, out, _) = run_code(&["keyed", "insert", &uri, "--input", &dup, "--json"]);
    assert_eq!(code, Some(3));
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let e = &v["error"];
    assert_eq!(e["kind"], "key_conflict", "{v}");
    assert_eq!(e["cause"], "already_present", "{v}");
    assert_eq!(e["keys"], serde_json::json!(["3"]), "{v}");
    assert_eq!(e["count"], 1, "{v}");
    assert_eq!(e["message"], "key conflict: id 3 already present; nothing was written", "{v}");
    assert_eq!(count_rows(&uri).await, 4, "a refused insert writes nothing");
}

#[tokio::test]
async fn keyed_upsert_then_update_of_a_missing_key_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let rows = jsonl(dir.path(), "up.jsonl", &[r#"{"id": 2, "name": "B"}"#, r#"{"id": 7, "name": "g"}"#]);
    let (code, out, err) = run_code(&["keyed", "upsert", &uri, "--input", &rows, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!((v["op"].as_str(), v["inserted"].as_u64(), v["updated"].as_u64()), (Some("upsert"), Some(1), Some(1)));
    assert_eq!(v["version"], 2, "{v}");
    assert_eq!(count_rows(&uri).await, 3);

    let missing = jsonl(dir.path(), "missing.jsonl", &[r#"{"id": 1, "name": "A"}"#, r#"{"id": 777, "name": "z"}"#]);
    let (code, _, err) = run_code(&["keyed", "update", &uri, "--input", &missing]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: ") && err.contains("777") && err.contains("not present"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let present = jsonl(dir.path(), "present.jsonl", &[r#"{"id": 1, "name": "A"}"#]);
    let (code, out, err) = run_code(&["keyed", "update", &uri, "--input", &present]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("inserted 0, updated 1"), "{out}");
}

#[tokio::test]
async fn keyed_delete_needs_only_the_key_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let keys = jsonl(dir.path(), "del.jsonl", &[r#"{"id": 1}"#, r#"{"id": 99}"#]);
    let (code, out, err) = run_code(&["keyed", "delete", &uri, "--input", &keys]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("deleted 1 row(s) at v2"), "{out}");
    assert_eq!(count_rows(&uri).await, 1);
}

#[tokio::test]
async fn keyed_create_reads_arrow_ipc_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = lance_actions_commit::scenario::batch(&[10, 11, 12]).expect("batch");
    // No `.arrow` extension: detected by the ARROW1 magic.
    let input = dir.path().join("rows.bin");
    let file = std::fs::File::create(&input).expect("create");
    let mut writer = arrow_ipc::writer::FileWriter::try_new(file, &rows.schema()).expect("ipc writer");
    writer.write(&rows).expect("write");
    writer.finish().expect("finish");
    let uri = dir.path().join("k").to_str().expect("utf-8").to_string();
    let (code, out, err) =
        run_code(&["keyed", "create", &uri, "--key", "id", "--input", input.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("3 row(s) at v1"), "{out}");
    let more = jsonl(dir.path(), "more.jsonl", &[r#"{"id": 13, "v": 130, "s": "row13"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &more]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(count_rows(&uri).await, 4);
}

#[test]
fn keyed_bad_input_files_are_one_line_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let missing = dir.path().join("absent.jsonl").to_str().expect("utf-8").to_string();
    let malformed = jsonl(dir.path(), "bad.jsonl", &[r#"{"id": 5, "name":"#]);
    let extra = jsonl(dir.path(), "extra.jsonl", &[r#"{"id": 5, "nme": "e"}"#]);
    let wrong_type = jsonl(dir.path(), "type.jsonl", &[r#"{"id": "five", "name": "e"}"#]);
    let ipc = jsonl(dir.path(), "fake.arrow", &[r#"{"id": 5}"#]);
    let no_key = jsonl(dir.path(), "nokey.jsonl", &[r#"{"id": 6, "name": "f"}"#, r#"{"name": "e"}"#]);
    let null_key = jsonl(dir.path(), "nullkey.jsonl", &[r#"{"id": null, "name": "e"}"#]);
    let no_value = "line 2: no value for column 'id', which cannot be null";
    for (command, input, expect) in [
        ("insert", &missing, "absent.jsonl"),
        ("insert", &malformed, "bad.jsonl"),
        ("insert", &extra, "nme"),
        ("insert", &wrong_type, "five"),
        ("insert", &ipc, "Arrow IPC"),
        ("insert", &no_key, no_value),
        ("upsert", &no_key, no_value),
        ("delete", &no_key, no_value),
        ("delete", &null_key, "line 1: no value for column 'id'"),
    ] {
        let (code, out, err) = run_code(&["keyed", command, &uri, "--input", input]);
        assert_eq!(code, Some(1), "{command} {input}: {out} {err}");
        assert!(err.starts_with("error: ") && err.contains(expect), "{command} {input}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // Nothing was written: key 6, on the good first line of the refused files, is absent.
    let six = jsonl(dir.path(), "six.jsonl", &[r#"{"id": 6, "name": "g"}"#]);
    let (code, out, err) = run_code(&["keyed", "update", &uri, "--input", &six]);
    assert_ne!(code, Some(0), "key 6 was never written: {out} {err}");
    let (code, _, err) = run_code(&["keyed", "create", &format!("{uri}2"), "--key", "id", "--input", &malformed]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[tokio::test]
async fn keyed_migrate_refuses_a_different_primary_key_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("plain").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let row = jsonl(dir.path(), "row.jsonl", &[r#"{"id": 0, "v": 0, "s": "again"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &row]);
    assert_eq!(code, Some(1), "a plain table is not keyed: {err}");
    assert!(err.contains("keyed migrate"), "{err}");
    // The sample schema already marks `id` as Lance's unenforced primary key.
    let (code, _, err) = run_code(&["keyed", "migrate", &uri, "--key", "s"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: ") && err.contains("already has primary key"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let latest = lance::Dataset::open(&uri).await.expect("open");
    assert_eq!(latest.manifest().version, ds.manifest().version, "a refused migration writes nothing");
}

/// A plain Lance table (no primary key, no class): ids 0..3 on main and on branch `feature`.
async fn create_plain(uri: &str) {
    use lance::deps::arrow_array::{Int64Array, RecordBatch, StringArray};
    use lance::deps::arrow_schema::{DataType, Field, Schema};
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true), Field::new("s", DataType::Utf8, true)]));
    let columns: Vec<lance::deps::arrow_array::ArrayRef> =
        vec![Arc::new(Int64Array::from(vec![0, 1, 2])), Arc::new(StringArray::from(vec!["a", "b", "c"]))];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    let mut ds = lance::dataset::InsertBuilder::new(uri).execute(vec![batch]).await.expect("plain table");
    ds.create_branch("feature", 1, None).await.expect("branch");
}

#[tokio::test]
async fn keyed_migrate_installs_the_key_on_every_branch_of_a_plain_table_and_fences_inserts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("plain").to_str().expect("utf-8").to_string();
    create_plain(&uri).await;
    let dev = cli_branch(&uri, "dev");
    let row = jsonl(dir.path(), "row.jsonl", &[r#"{"id": 0, "s": "again"}"#]);

    let (code, out, err) = run_code(&["keyed", "migrate", &uri, "--key", "id"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("main: installed at v") && out.contains("feature: installed at v"), "{out}");
    assert!(out.contains("  dev: installed at v") && !out.contains(&dev), "a logical name, not {dev}: {out}");
    assert!(out.contains("3 row(s)") && out.contains("fencing stamp: written"), "{out}");

    let (code, out, err) = run_code(&["keyed", "migrate", &uri, "--key", "id", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["branches"][0]["step"], "already_keyed", "{v}");
    assert_eq!(v["branches"][1]["branch"], "dev", "{v}");
    assert_eq!(v["branches"][1]["physical"], dev.as_str(), "{v}");
    assert_eq!(v["branches"][2]["branch"], "feature", "{v}");
    assert_eq!(v["stamped"], false, "{v}");

    let (code, _, err) = run_code(&["keyed", "migrate", &uri, "--key", "s"]);
    assert_eq!(code, Some(1), "a different key is refused: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &row]);
    assert_eq!(code, Some(3), "{err}");
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &row, "--branch", "feature"]);
    assert_eq!(code, Some(3), "{err}");
    let new = jsonl(dir.path(), "new.jsonl", &[r#"{"id": 3, "s": "d"}"#]);
    let (code, out, err) = run_code(&["keyed", "insert", &uri, "--input", &new, "--branch", "feature"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("(feature): inserted 1"), "{out}");
}

// ---- branch replay ----

/// main with ids `0..10` (Int64 `id`, Utf8 `name`), written by plain Lance.
async fn create_replay_table(dir: &Path) -> String {
    use lance::deps::arrow_array::{Int64Array, RecordBatch, StringArray};
    use lance::deps::arrow_schema::{DataType, Field, Schema};
    let uri = dir.join("r").to_str().expect("utf-8").to_string();
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
    let ids: Vec<i64> = (0..10).collect();
    let columns: Vec<lance::deps::arrow_array::ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
    ];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    lance::dataset::InsertBuilder::new(uri.as_str()).execute(vec![batch]).await.expect("create");
    uri
}

/// Create a logical branch with the CLI; returns its physical Lance branch from `branch list --json`.
fn cli_branch(uri: &str, name: &str) -> String {
    let (code, out, err) = run_code(&["branch", "create", uri, name]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("created branch '{name}' from main")), "{out}");
    physical_of(uri, name).expect("listed")
}

/// The physical branch `name` designates, from `branch list --json`.
fn physical_of(uri: &str, name: &str) -> Option<String> {
    let (code, out, err) = run_code(&["branch", "list", uri, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let entry = v["branches"].as_array()?.iter().find(|e| e["name"] == name)?;
    entry["physical"].as_str().map(String::from)
}

/// The latest version of `branch` (a physical Lance branch; "main" for main).
async fn open_branch(uri: &str, branch: &str) -> Arc<lance::Dataset> {
    let root = lance::Dataset::open(uri).await.expect("open");
    Arc::new(if branch == "main" { root } else { root.checkout_branch(branch).await.expect("checkout") })
}

/// A plain Lance append of `ids` on `branch`; returns the new version.
async fn append_ids(uri: &str, branch: &str, ids: &[i64]) -> u64 {
    use lance::deps::arrow_array::{Int64Array, RecordBatch, StringArray};
    let ds = open_branch(uri, branch).await;
    let schema = Arc::new(lance::deps::arrow_schema::Schema::from(ds.schema()));
    let columns: Vec<lance::deps::arrow_array::ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.to_vec())),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))),
    ];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    let ds = lance::dataset::InsertBuilder::new(ds).with_params(&params).execute(vec![batch]).await.expect("append");
    ds.manifest().version
}

/// A plain Lance delete on `branch`; returns the new version.
async fn delete_where(uri: &str, branch: &str, predicate: &str) -> u64 {
    let ds = open_branch(uri, branch).await;
    let result = lance::dataset::DeleteBuilder::new(ds, predicate).execute().await.expect("delete");
    result.new_dataset.manifest().version
}

async fn count_where(uri: &str, branch: &str, filter: &str) -> usize {
    open_branch(uri, branch).await.count_rows(Some(filter.to_string())).await.expect("count")
}

fn replay_json(args: &[&str], expect_code: i32) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (code, out, err) = run_code(&args);
    assert_eq!(code, Some(expect_code), "{args:?}: {out} {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("one JSON object ({e}): {out}"))
}

/// Every file under `dir` with its size.
fn inventory(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, u64>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let (Ok(rel), Ok(meta)) = (p.strip_prefix(root), e.metadata()) {
                out.insert(rel.to_string_lossy().to_string(), meta.len());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[tokio::test]
async fn merge_lands_a_branch_append_on_main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    let appended = append_ids(&uri, &feature, &[100, 101, 102]).await;

    let v = replay_json(&["merge", &uri, "--from", "feature", "--into", "main"], 0);
    assert!(v["outcome"] == "fast-forward" || v["outcome"] == "merged", "{v}");
    assert_eq!(v["dry_run"], false, "{v}");
    assert_eq!(v["landed"][0]["source_version"], appended, "{v}");
    assert_eq!(v["conflicts"], serde_json::json!([]), "{v}");
    let landed_at = v["landed"][0]["target_version"].as_u64().expect("target version");

    assert_eq!(count_where(&uri, "main", "id >= 100").await, 3, "main scans the branch's rows");
    assert_eq!(count_rows(&uri).await, 13);
    assert_eq!(open_branch(&uri, "main").await.manifest().version, landed_at);
    let (ok, log, err) = run(&["log", &uri]);
    assert!(ok, "{err}");
    let newest = log.lines().next().expect("a line");
    assert!(
        newest.starts_with(&format!("v{landed_at}  Append")) && newest.ends_with("written by lance-actions"),
        "{log}"
    );
    assert!(log.contains("lance-actions.replay.operation = merge"), "{log}");

    // Again: nothing left to replay, still exit 0; the human summary says so in one line.
    let (code, out, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    assert!(out.starts_with("already-up-to-date: merge feature into main") && out.contains("skipped"), "{out}");
}

/// A plain Lance update of `predicate` on `branch` (rows move: deleted in place, rewritten).
async fn update_where(uri: &str, branch: &str, predicate: &str) -> u64 {
    let ds = open_branch(uri, branch).await;
    let job = lance::dataset::UpdateBuilder::new(ds)
        .update_where(predicate)
        .expect("where")
        .set("name", "'updated'")
        .expect("set")
        .build()
        .expect("job");
    job.execute().await.expect("update").new_dataset.manifest().version
}

/// Delete on the branch vs update on main, twice: every conflict is listed (JSON and table), each
/// with its source version and the main version it meets; exit 3; main untouched. (The same row
/// deleted on both sides is convergent and merges: tested in the replay crate.)
#[tokio::test]
async fn a_conflicting_merge_exits_3_with_every_conflict_and_leaves_main_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    let ours = [delete_where(&uri, &feature, "id = 4").await, delete_where(&uri, &feature, "id = 6").await];
    let theirs = [update_where(&uri, "main", "id = 4").await, update_where(&uri, "main", "id = 6").await];

    let v = replay_json(&["merge", &uri, "--from", "feature", "--into", "main"], 3);
    assert_eq!(v["outcome"], "conflicted", "{v}");
    assert_eq!(v["landed"], serde_json::json!([]), "{v}");
    let conflicts = v["conflicts"].as_array().expect("conflicts");
    assert_eq!(conflicts.len(), 2, "{v}");
    for (c, (ours, theirs)) in conflicts.iter().zip(ours.iter().zip(&theirs)) {
        assert_eq!(c["source_branch"], "feature", "{v}");
        assert_eq!(c["source_physical"], feature.as_str(), "{v}");
        assert_eq!(c["source_version"], *ours, "{v}");
        assert_eq!(c["peer_version"], *theirs, "{v}");
        assert_eq!(c["action"], "UpdateDeletionVector", "{v}");
        assert_eq!(c["rule"], "RowsOverlap", "{v}");
        assert!(c["path"].as_str().is_some_and(|p| p.contains("DeletionVector")), "{v}");
        assert!(c["retryable"].is_boolean() && c["keys"] == serde_json::json!([]), "{v}");
    }
    assert_eq!(open_branch(&uri, "main").await.manifest().version, theirs[1], "main's version is unchanged");

    // The human form: one summary line, then the table; still exit 3, nothing on stderr.
    let (code, out, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.is_empty(), "conflicts are data, not an error: {err}");
    let mut lines = out.lines();
    let head = lines.next().expect("summary");
    assert!(head.starts_with("conflicted: merge feature into main") && head.contains("2 conflict(s)"), "{out}");
    assert!(head.contains("main unchanged"), "{out}");
    assert!(lines.next().is_some_and(|l| l.contains("SOURCE") && l.contains("CONFLICTS WITH")), "{out}");
    for (ours, theirs) in ours.iter().zip(&theirs) {
        let row = lines.next().expect("a conflict row");
        assert!(row.contains(&format!("feature@v{ours}")) && row.contains(&format!("v{theirs} ")), "{out}");
    }
    assert_eq!(open_branch(&uri, "main").await.manifest().version, theirs[1]);

    // A fast-forward is refused outright (main has commits of its own): one line, exit 6.
    let (code, _, err) = run_code(&["fast-forward", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(6), "{err}");
    assert!(err.starts_with("error: ") && err.contains("cannot fast-forward"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A cherry-pick that would duplicate a key, through the CLI: a branch deletes key 80 and inserts it again;
/// cherry-picking only the insert onto main is a `KeysPresent` conflict naming 80, exit 3, and
/// main holds 80 once.
#[tokio::test]
async fn cherry_picking_a_reinserted_key_exits_3_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let lines: Vec<String> = (1..=100).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let input = jsonl(dir.path(), "rows.jsonl", &lines);
    let (code, _, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &input]);
    assert_eq!(code, Some(0), "{err}");
    let physical = cli_branch(&uri, "feature");
    let del = jsonl(dir.path(), "del80.jsonl", &[r#"{"id": 80}"#]);
    let (code, _, err) = run_code(&["keyed", "delete", &uri, "--branch", "feature", "--input", &del]);
    assert_eq!(code, Some(0), "{err}");
    let ins = jsonl(dir.path(), "ins80.jsonl", &[r#"{"id": 80, "name": "again"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &ins]);
    assert_eq!(code, Some(0), "{err}");
    let reinsert = open_branch(&uri, &physical).await.manifest().version.to_string();
    let before = open_branch(&uri, "main").await.manifest().version;

    let v = replay_json(&["cherry-pick", &uri, "--from", "feature", "--version", &reinsert, "--onto", "main"], 3);
    assert_eq!(v["outcome"], "conflicted", "{v}");
    let conflicts = v["conflicts"].as_array().expect("conflicts");
    let present = conflicts.iter().find(|c| c["rule"] == "KeysPresent").unwrap_or_else(|| panic!("{v}"));
    assert_eq!(present["keys"], serde_json::json!(["80"]), "{v}");
    assert_eq!(open_branch(&uri, "main").await.manifest().version, before, "nothing written");
    assert_eq!(count_where(&uri, "main", "id = 80").await, 1, "no duplicate");
}

#[tokio::test]
async fn dry_runs_report_the_outcome_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    let f1 = append_ids(&uri, &feature, &[100, 101]).await;
    let f2 = append_ids(&uri, &feature, &[102, 103]).await;
    append_ids(&uri, "main", &[10]).await;
    let main_before = open_branch(&uri, "main").await.manifest().version;
    let before = inventory(dir.path());

    let v = replay_json(&["merge", &uri, "--from", "feature", "--into", "main", "--dry-run"], 0);
    assert_eq!((v["outcome"].as_str(), v["dry_run"].as_bool()), (Some("merged"), Some(true)), "{v}");
    assert_eq!(v["landed"].as_array().map(Vec::len), Some(2), "{v}");
    let f1s = f1.to_string();
    let v =
        replay_json(&["cherry-pick", &uri, "--from", "feature", "--version", &f1s, "--onto", "main", "--dry-run"], 0);
    assert_eq!(v["outcome"], "cherry-picked", "{v}");
    let v = replay_json(&["rebase", &uri, "--branch", "feature", "--onto", "main", "--dry-run"], 0);
    assert_eq!(v["outcome"], "rebased", "{v}");
    assert_eq!(v["new_physical"], serde_json::Value::Null, "a dry run creates no branch: {v}");
    let f2s = f2.to_string();
    let v = replay_json(&["squash", &uri, "--branch", "feature", "--from", &f1s, "--to", &f2s, "--dry-run"], 0);
    assert_eq!(v["outcome"], "squashed", "{v}");
    let (code, out, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main", "--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("merged: merge feature into main (dry run, nothing written); would land"), "{out}");

    assert_eq!(inventory(dir.path()), before, "a dry run writes no file at all");
    assert_eq!(open_branch(&uri, "main").await.manifest().version, main_before);
}

#[tokio::test]
async fn cherry_pick_replays_one_version_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100, 101, 102]).await;
    let picked = append_ids(&uri, &feature, &[200, 201]).await;

    let picked_s = picked.to_string();
    let (code, out, err) =
        run_code(&["cherry-pick", &uri, "--from", "feature", "--version", &picked_s, "--onto", "main"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    assert!(
        out.starts_with(&format!(
            "cherry-picked: cherry-pick v{picked} of feature onto main; landed 1 commit: feature@v{picked} -> v"
        )),
        "{out}"
    );
    assert_eq!(count_where(&uri, "main", "id >= 200").await, 2, "the picked rows are on main");
    assert_eq!(count_where(&uri, "main", "id >= 100 AND id < 200").await, 0, "the other commit is not");
    assert_eq!(count_rows(&uri).await, 12);

    // Picking it again: already up to date, exit 0, the version reported as skipped.
    let v = replay_json(&["cherry-pick", &uri, "--from", "feature", "--version", &picked_s, "--onto", "main"], 0);
    assert_eq!(v["outcome"], "already-up-to-date", "{v}");
    assert_eq!(v["skipped"], serde_json::json!([picked]), "{v}");
    // A version the branch never had: one line, exit 1.
    let (code, _, err) = run_code(&["cherry-pick", &uri, "--from", "feature", "--version", "999", "--onto", "main"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: ") && err.contains("999"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[tokio::test]
async fn branch_delete_of_a_branch_main_reads_is_refused_and_names_main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100]).await;
    let (code, _, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(0), "{err}");

    let (code, out, err) = run_code(&["branch", "delete", &uri, "feature"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(err.starts_with("error: cannot delete branch 'feature'") && err.contains("main"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let (code, out, _) = run_code(&["branch", "list", &uri]);
    assert_eq!(code, Some(0));
    assert!(out.lines().any(|l| l.starts_with("feature ") && l.ends_with(&format!(" -> {feature}"))), "{out}");

    // A branch nobody reads goes; its name is then free.
    cli_branch(&uri, "scratch");
    let (code, out, err) = run_code(&["branch", "delete", &uri, "scratch"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("deleted branch 'scratch'"), "{out}");
    let (_, out, _) = run_code(&["branch", "list", &uri]);
    assert!(!out.contains("scratch"), "{out}");
    let (code, _, err) = run_code(&["branch", "create", &uri, "feature"]);
    assert_eq!(code, Some(1), "an existing name is refused: {err}");
    assert!(err.contains("already exists"), "{err}");
    let (code, _, err) = run_code(&["merge", &uri, "--from", "nosuch", "--into", "main"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("error: ") && err.contains("nosuch") && err.trim().lines().count() == 1, "{err}");
}

#[tokio::test]
async fn rebase_and_squash_repoint_the_name_and_keep_the_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100, 101]).await;
    append_ids(&uri, &feature, &[102]).await;
    append_ids(&uri, "main", &[10]).await;

    let v = replay_json(&["rebase", &uri, "--branch", "feature", "--onto", "main"], 0);
    assert_eq!(v["outcome"], "rebased", "{v}");
    assert_eq!(v["old_physical"], feature.as_str(), "{v}");
    let rebased = v["new_physical"].as_str().expect("new physical").to_string();
    assert_ne!(rebased, feature);
    assert_eq!(physical_of(&uri, "feature"), Some(rebased.clone()));
    assert_eq!(count_where(&uri, &rebased, "id >= 10").await, 4, "main's row and the branch's three");

    let landed: Vec<u64> =
        v["landed"].as_array().expect("landed").iter().filter_map(|l| l["target_version"].as_u64()).collect();
    assert_eq!(landed.len(), 2, "{v}");
    let (from, to) = (landed[0].to_string(), landed[1].to_string());
    let (code, out, err) = run_code(&["squash", &uri, "--branch", "feature", "--from", &from, "--to", &to]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("squashed: squash") && out.contains("'feature' now designates"), "{out}");
    let squashed = physical_of(&uri, "feature").expect("listed");
    assert_ne!(squashed, rebased);
    assert_eq!(count_where(&uri, &squashed, "id >= 10").await, 4, "same rows, one commit");
}

/// pylance as a foreign writer on a keyed table (design/fencing.md §5): its keyed merge-insert is
/// fenced against ours (Lance's filters meet), its stale bare append committed through Lance's own
/// loop after our insert is not (the boundary), and our next strict insert sees whatever landed.
#[tokio::test]
async fn pylance_writers_on_a_keyed_table_show_the_fence_and_its_boundary() {
    let python = pylance();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/python/keyed_foreign_writers.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let py = |args: &[&str]| {
        let out = Command::new(&python).arg(script).arg(&uri).args(args).output().expect("run pylance");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let ten = jsonl(dir.path(), "ten.jsonl", &[r#"{"id": 10, "name": "ours"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &ten]);
    assert_eq!(code, Some(0), "{err}");
    // A pylance append staged on v1 lands after our insert of 10: Lance's resolver does not check keys.
    py(&["stale-append", "10", "1"]);
    let ds = lance::Dataset::open(&uri).await.expect("open");
    assert_eq!(ds.count_rows(Some("id = 10".into())).await.expect("count"), 2, "the documented boundary");
    // pylance's keyed merge-insert inserts 20; our strict insert of 20 then names it.
    py(&["merge-insert", "20"]);
    let twenty = jsonl(dir.path(), "twenty.jsonl", &[r#"{"id": 20, "name": "ours"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &twenty]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("already present"), "{err}");
    let thirty = jsonl(dir.path(), "thirty.jsonl", &[r#"{"id": 30, "name": "ours"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &thirty]);
    assert_eq!(code, Some(0), "our keyed insert commits after pylance's filtered one: {err}");
}

/// Bad input never half-writes (`design/fencing.md`, "2. Write routing, one action sequence per
/// chunk"): a key named twice is refused before anything is written, and no table is left behind.
#[test]
fn keyed_create_with_a_key_named_twice_fails_and_leaves_no_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("k").to_str().expect("utf-8").to_string();
    let input = jsonl(dir.path(), "rows.jsonl", &[r#"{"id": 1, "name": "a"}"#]);
    let (code, _, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--key", "id", "--input", &input]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("'id' is named twice"), "{err}");
    assert!(!Path::new(&uri).exists(), "a failed create leaves no table behind");
    let (code, _, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &input]);
    assert_eq!(code, Some(0), "the same path is free for a sound create: {err}");
}

/// arrow-json would store 9.5 as 9 and "13" as 13 in an integer key: both are refused, naming the
/// line (counted from 1) and the column, and nothing is written.
#[tokio::test]
async fn keyed_writes_refuse_a_value_that_does_not_fit_its_column_and_name_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let cases = [
        ("float.jsonl", r#"{"id": 9.5, "name": "x"}"#, "9.5"),
        ("string.jsonl", r#"{"id": "13", "name": "x"}"#, "\"13\""),
        ("name.jsonl", r#"{"id": 14, "name": 7}"#, "7"),
    ];
    for (file, bad, shown) in cases {
        let input = jsonl(dir.path(), file, &[r#"{"id": 8, "name": "ok"}"#, bad]);
        for op in ["insert", "upsert", "update"] {
            let (code, _, err) = run_code(&["keyed", op, &uri, "--input", &input]);
            assert_eq!(code, Some(1), "{op} {file}: {err}");
            assert!(err.contains("line 2") && err.contains(shown) && err.contains("nothing was written"), "{err}");
        }
    }
    let delete = jsonl(dir.path(), "delete.jsonl", &[r#"{"id": 1.5}"#]);
    let (code, _, err) = run_code(&["keyed", "delete", &uri, "--input", &delete]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("line 1"), "{err}");
    let ds = lance::Dataset::open(&uri).await.expect("open");
    assert_eq!(ds.manifest().version, 1, "nothing was written");
    assert_eq!(count_rows(&uri).await, 2);
}

// ---- logical names everywhere, relative URIs ----
// (`design/replay.md`, "5. Branch names decoupled from directories (`names.rs`, Lance #7185)")

fn run_in(cwd: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin().current_dir(cwd).args(args).output().expect("run lance-actions");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The duplicated-key cherry-pick with the names `branch create` gave: keyed writes address the branch by its
/// logical name; its physical name is refused unless asked for with `--physical`; an unknown name
/// is named with the known ones; a retired physical branch is refused, naming its successor.
#[tokio::test]
async fn keyed_writes_and_replays_take_logical_branch_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<String> = (1..=100).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#)).collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let input = jsonl(dir.path(), "rows.jsonl", &rows);
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let (code, _, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &input]);
    assert_eq!(code, Some(0), "{err}");
    let physical = cli_branch(&uri, "feature");

    let x = jsonl(dir.path(), "x.jsonl", &[r#"{"id": 101, "name": "x"}"#]);
    let (code, out, err) = run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &x]);
    assert_eq!(code, Some(0), "the logical name works: {err}");
    assert!(out.contains("(feature): inserted 1"), "{out}");
    let del = jsonl(dir.path(), "del80.jsonl", &[r#"{"id": 80}"#]);
    let (code, _, err) = run_code(&["keyed", "delete", &uri, "--branch", "feature", "--input", &del]);
    assert_eq!(code, Some(0), "{err}");
    let again = jsonl(dir.path(), "ins80.jsonl", &[r#"{"id": 80, "name": "again"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &again]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(count_where(&uri, &physical, "id = 80").await, 1);
    assert_eq!(count_where(&uri, &physical, "true").await, 101);

    // The physical name is not a branch name, unless asked for.
    let y = jsonl(dir.path(), "y.jsonl", &[r#"{"id": 102, "name": "y"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", &physical, "--input", &y]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("'{physical}'")) && err.contains("'feature'"), "{err}");
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", &physical, "--physical", "--input", &y]);
    assert_eq!(code, Some(0), "{err}");
    // An unknown branch: named, with the known ones, and no Lance path.
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", "featur", "--input", &y]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("'featur'") && err.contains("known branches: main, feature"), "{err}");
    assert!(!err.contains("_versions") && !err.contains("tree/"), "{err}");
    for args in [
        vec!["merge", &uri, "--from", "featur", "--into", "main"],
        vec!["branch", "create", &uri, "other", "--from", "featur"],
        vec!["rebase", &uri, "--branch", &physical, "--onto", "main"],
    ] {
        let (code, _, err) = run_code(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains("featur") && !err.contains("_versions"), "{args:?}: {err}");
    }

    // After a rebase the old physical branch is retired: a write to it names the new one.
    let v = replay_json(&["rebase", &uri, "--branch", "feature", "--onto", "main"], 0);
    let rebased = v["new_physical"].as_str().expect("new physical").to_string();
    let z = jsonl(dir.path(), "z.jsonl", &[r#"{"id": 103, "name": "z"}"#]);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", &physical, "--physical", "--input", &z]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("retired") && err.contains(&rebased), "{err}");
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &z]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(count_where(&uri, &rebased, "id > 100").await, 3, "101, 102 and 103 on the rebased branch");
}

/// A merge run with a relative URI from the table's parent directory records absolute locations:
/// main then reads from any other directory, by us and by pylance.
#[tokio::test]
async fn replays_with_a_relative_uri_write_absolute_locations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let input = jsonl(&work, "rows.jsonl", &[r#"{"id": 1, "name": "a"}"#, r#"{"id": 2, "name": "b"}"#]);
    let x = jsonl(&work, "x.jsonl", &[r#"{"id": 3, "name": "c"}"#]);
    let y = jsonl(&work, "y.jsonl", &[r#"{"id": 4, "name": "d"}"#]);
    for args in [
        vec!["keyed", "create", "t", "--key", "id", "--input", &input],
        vec!["branch", "create", "t", "feature"],
        vec!["keyed", "insert", "t", "--branch", "feature", "--input", &x],
        vec!["merge", "t", "--from", "feature", "--into", "main"],
        vec!["branch", "create", "t", "second"],
        vec!["keyed", "insert", "t", "--branch", "second", "--input", &y],
    ] {
        let (code, out, err) = run_in(&work, &args);
        assert_eq!(code, Some(0), "{args:?}: {out} {err}");
    }
    let table = work.join("t");
    let uri = table.to_str().expect("utf-8");
    let second = physical_of(uri, "second").expect("second");
    let picked = open_branch(uri, &second).await.manifest().version.to_string();
    for args in [
        vec!["cherry-pick", "t", "--from", "second", "--version", &picked, "--onto", "main"],
        vec!["rebase", "t", "--branch", "feature", "--onto", "main"],
    ] {
        let (code, out, err) = run_in(&work, &args);
        assert_eq!(code, Some(0), "{args:?}: {out} {err}");
    }
    // Every location written into a manifest is absolute.
    let root = lance::Dataset::open(uri).await.expect("open");
    for chain in ["main".to_string(), physical_of(uri, "feature").expect("feature")] {
        let ds = if chain == "main" { root.clone() } else { root.checkout_branch(&chain).await.expect("checkout") };
        for base in ds.manifest().base_paths.values() {
            assert!(Path::new(&base.path).is_absolute() || base.path.contains("://"), "{chain}: {base:?}");
        }
    }
    // This process runs elsewhere (the crate directory): main reads in full.
    assert_ne!(std::env::current_dir().expect("cwd"), work);
    assert_eq!(count_rows(uri).await, 4);
    let scanned = root.count_rows(Some("id >= 3".into())).await.expect("scan main");
    assert_eq!(scanned, 2);
    let python = pylance();
    let code = format!("import lance; print(lance.dataset({uri:?}).to_table().num_rows)");
    let out = Command::new(&python).current_dir("/").args(["-c", &code]).output().expect("pylance");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "4");
}

/// `graph ...`: init, writes from JSON lines, branches, a conflicted merge (exit 3 with the list as
/// data), a clean merge, export ordered by id, and one-line errors for bad input.
#[test]
fn graph_commands_merge_with_conflicts_as_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("g");
    let root = root.to_str().expect("utf-8");
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    let schema = file(
        "schema.json",
        r#"{"nodes": {"Person": {"properties": {"name": "string", "age": {"type": "int64", "range": [0, 150]}}}},
            "edges": {"Knows": {"src": "Person", "dst": "Person"}}}"#,
    );
    let (ok, _, err) = run(&["graph", "init", root, "--schema", &schema]);
    assert!(ok, "{err}");
    let seed = file("seed.jsonl", "{\"id\": \"p2\", \"name\": \"b\"}\n{\"id\": \"p1\", \"name\": \"a\"}\n");
    let (ok, _, err) = run(&["graph", "insert", root, "--type", "Person", "--input", &seed]);
    assert!(ok, "{err}");
    let (ok, _, err) = run(&["graph", "branch", "create", root, "feature"]);
    assert!(ok, "{err}");
    let s = file("s.jsonl", "{\"id\": \"p1\", \"name\": \"S\"}\n");
    let t = file("t.jsonl", "{\"id\": \"p1\", \"name\": \"T\"}\n");
    assert!(run(&["graph", "upsert", root, "--type", "Person", "--input", &s, "--branch", "feature"]).0);
    assert!(run(&["graph", "upsert", root, "--type", "Person", "--input", &t]).0);
    let out =
        bin().args(["graph", "merge", root, "--from", "feature", "--into", "main", "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["outcome"], "conflicted");
    assert_eq!(v["conflicts"][0]["kind"], "divergent_update");
    assert_eq!(v["conflicts"][0]["type"], "node:Person");
    assert_eq!(v["conflicts"][0]["id"], "p1");
    // What would resolve it: a strategy that picks a side, or a change on a branch; never "retry".
    let resolution = v["resolution"].as_str().expect("a resolution");
    for expected in ["--strategy ours keeps the rows of 'main'", "--strategy theirs", "--cells", "then merge again"] {
        assert!(resolution.contains(expected), "{expected:?} in {resolution}");
    }
    let (code, text, _) = run_code(&["graph", "merge", root, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(3));
    assert!(text.contains(resolution) && !text.to_lowercase().contains("retry"), "{text}");
    let (ok, out, err) =
        run(&["graph", "merge", root, "--from", "feature", "--into", "main", "--strategy", "theirs", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(v["outcome"], "merged");
    let (ok, out, _) = run(&["graph", "export", root, "--type", "Person"]);
    assert!(ok);
    let ids: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(ids.iter().map(|r| r["id"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["p1", "p2"]);
    assert_eq!(ids[0]["name"], "S");
    let (ok, _, err) = run(&["graph", "index", root]);
    assert!(ok, "{err}");
    assert_eq!(run(&["graph", "export", root, "--type", "Person"]).1, out, "an index build changed rows");
    let (ok, out, _) = run(&["graph", "log", root, "--json"]);
    assert!(ok);
    let log = one_json(&out);
    assert_eq!(log["branch"], "main", "{log}");
    let commits = log["commits"].as_array().expect("commits");
    assert_eq!(commits[0]["parents"].as_array().map(Vec::len), Some(1), "the index build is one graph version");
    assert_eq!(commits[1]["parents"].as_array().map(Vec::len), Some(2), "the merge has two parents");
    let (ok, text, _) = run(&["graph", "log", root]);
    assert!(ok);
    assert_eq!(text.lines().count(), commits.len(), "the same versions in text and JSON: {text}");
    let (ok, out, _) = run(&["graph", "branch", "list", root, "--json"]);
    assert!(ok);
    let list = one_json(&out);
    let names: Vec<&str> =
        list["branches"].as_array().expect("branches").iter().filter_map(|b| b["branch"].as_str()).collect();
    assert_eq!(names, ["feature", "main"], "{list}");
    assert_eq!(list["branches"][1]["head"], commits[0]["id"], "main's head is its newest version: {list}");

    // Bad input: one line, exit 1, nothing written.
    let before = run(&["graph", "export", root, "--type", "Person"]).1;
    for (name, text, ty, expected) in [
        ("noid.jsonl", "{\"name\": \"x\"}\n", "Person", "'id'"),
        ("wrong.jsonl", "{\"id\": \"p9\", \"age\": \"old\"}\n", "Person", "'age'"),
        ("x.jsonl", "{\"id\": \"p9\"}\n", "Robot", "unknown type 'Robot'"),
    ] {
        let input = file(name, text);
        let (ok, _, err) = run(&["graph", "insert", root, "--type", ty, "--input", &input]);
        assert!(!ok && err.contains(expected) && err.trim().lines().count() == 1, "{name}: {err}");
    }
    let old = file("old.jsonl", "{\"id\": \"p9\", \"age\": 200}\n");
    let out =
        bin().args(["graph", "insert", root, "--type", "Person", "--input", &old, "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["conflicts"][0]["kind"], "value_constraint_violation");
    let bad_schema = file("bad.json", r#"{"nodes": {"P": {"properties": {"x": "decimal"}}}}"#);
    let (ok, _, err) = run(&["graph", "init", &format!("{root}2"), "--schema", &bad_schema]);
    assert!(!ok && err.contains("unknown type 'decimal'"), "{err}");
    assert_eq!(run(&["graph", "export", root, "--type", "Person"]).1, before, "a refused write changed the graph");
}

/// A graph made with a relative root (replay's rule for relative URIs, `design/replay.md`, "5. Branch
/// names decoupled from directories (`names.rs`, Lance #7185)", here for the graph layer): the
/// per-type Lance branches a graph branch creates must record absolute locations, so the graph reads
/// the same from any other working directory, by us and by pylance.
#[test]
fn a_graph_made_with_a_relative_root_reads_from_anywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let write = |name: &str, text: &str| std::fs::write(work.join(name), text).expect("write");
    write("schema.json", r#"{"nodes": {"Person": {"properties": {"name": "string"}}}}"#);
    write("seed.jsonl", "{\"id\": \"p1\", \"name\": \"a\"}\n");
    write("more.jsonl", "{\"id\": \"p2\", \"name\": \"b\"}\n");
    for args in [
        vec!["graph", "init", "g", "--schema", "schema.json"],
        vec!["graph", "insert", "g", "--type", "Person", "--input", "seed.jsonl"],
        vec!["graph", "branch", "create", "g", "feature"],
        vec!["graph", "insert", "g", "--type", "Person", "--input", "more.jsonl", "--branch", "feature"],
        vec!["graph", "merge", "g", "--from", "feature", "--into", "main"],
    ] {
        let (code, out, err) = run_in(&work, &args);
        assert_eq!(code, Some(0), "{args:?}: {out} {err}");
    }
    // From another directory, by absolute root: both branches read in full.
    let root = work.join("g");
    let root = root.to_str().expect("utf-8");
    for branch in ["feature", "main"] {
        let (code, out, err) =
            run_in(Path::new("/"), &["graph", "export", root, "--type", "Person", "--branch", branch]);
        assert_eq!(code, Some(0), "{branch}: {err}");
        assert_eq!(out.lines().count(), 2, "{branch}: {out}");
    }
    // Every base path in every per-type table's manifests (main and its Lance branches) is absolute.
    let python = pylance();
    let code = format!(
        "import lance, os\n\
         root = {root:?}\n\
         n = 0\n\
         for t in os.listdir(root):\n\
         \x20   if not t.endswith('.lance') or t.startswith('_'): continue\n\
         \x20   ds = lance.dataset(os.path.join(root, t))\n\
         \x20   for b in [None] + list(ds.branches.list().keys()):\n\
         \x20       d = ds if b is None else ds.checkout_version((b, None))\n\
         \x20       d.to_table()\n\
         \x20       for p in d.base_paths().values():\n\
         \x20           assert os.path.isabs(p.path), p.path\n\
         \x20       n += 1\n\
         print(n)\n"
    );
    let out = Command::new(&python).current_dir("/").args(["-c", &code]).output().expect("pylance");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let opened: usize = String::from_utf8_lossy(&out.stdout).trim().parse().expect("count");
    assert!(opened >= 2, "main and the branch of the Person table were read: {opened}");
}

/// `log` and `explain` piped into a reader that stops early (`| head -1`) end quietly: no panic
/// about a broken pipe, whatever the exit status.
#[test]
fn output_piped_into_a_reader_that_stops_early_ends_without_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines: Vec<String> = (1..=50).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let input = jsonl(dir.path(), "rows.jsonl", &lines);
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let (code, _, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &input]);
    assert_eq!(code, Some(0), "{err}");
    for i in 51..=80 {
        let one = jsonl(dir.path(), "one.jsonl", &[&format!(r#"{{"id": {i}, "name": "m"}}"#)]);
        assert_eq!(run_code(&["keyed", "insert", &uri, "--input", &one]).0, Some(0));
    }
    for verb in ["log", "explain"] {
        let mut child = bin()
            .args([verb, &uri])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // Read one line, then close the pipe while the command still has much more to print.
        let mut stdout = child.stdout.take().expect("stdout");
        let mut first = [0u8; 16];
        std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
        drop(stdout);
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{verb}: {err}");
    }
}

// ---- the CLI as people meet it: exit codes, one JSON object on stdout, help, names, inputs ----

/// Parse stdout as exactly one JSON object.
fn one_json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("one JSON object ({e}): {out:?}"))
}

#[tokio::test]
async fn check_exits_with_its_verdict_0_ok_4_retry_5_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = dir.path().join("ok");
    std::fs::create_dir(&ok).expect("mkdir");
    let (uri, txn) = race(&ok, "id IN (4, 5)", "id IN (0, 1)").await;
    let (code, out, err) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains("ours:  ok"), "{out}");

    let retry = dir.path().join("retry");
    std::fs::create_dir(&retry).expect("mkdir");
    let (uri, txn) = race(&retry, "id IN (0, 1)", "id = 1").await;
    let (code, out, err) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8")]);
    assert_eq!(code, Some(4), "{out} {err}");
    assert!(out.contains("ours:  retry") && err.is_empty(), "a verdict is a result, not an error: {out} {err}");
    assert!(!out.contains(".rs:"), "no Lance source location in the lance: line: {out}");
    let (code, out, _) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(4));
    assert_eq!(one_json(&out)["verdict"], "retry");

    // A delete staged at v3, after which the table was overwritten: incompatible.
    let fail = dir.path().join("fail");
    std::fs::create_dir(&fail).expect("mkdir");
    let uri = fail.join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let staged = stage_delete(&ds, "d", "id = 3").await.expect("stage");
    let rows = lance_actions_commit::scenario::batch(&[1, 2]).expect("batch");
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Overwrite, ..Default::default() };
    lance::dataset::InsertBuilder::new(ds.clone()).with_params(&params).execute(vec![rows]).await.expect("overwrite");
    let txn = fail.join("d.txn");
    write_txn(&staged, &txn);
    let (code, out, err) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(5), "{out} {err}");
    let v = one_json(&out);
    assert_eq!(v["verdict"], "fail", "{v}");
    assert!(!v["lance_reason"].as_str().unwrap_or("").contains(".rs:"), "{v}");
}

#[tokio::test]
async fn check_reports_a_transaction_already_committed_with_its_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t").to_str().expect("utf-8").to_string();
    let ds = create_sample(&uri).await.expect("sample");
    let staged = stage_delete(&ds, "d", "id = 3").await.expect("stage");
    let txn = dir.path().join("d.txn");
    write_txn(&staged, &txn);
    let landed = CommitBuilder::new(ds.clone())
        .with_affected_rows(staged.affected_rows.clone().expect("rows"))
        .execute(staged.txn.clone())
        .await
        .expect("commit");
    let version = landed.manifest().version;
    let (code, out, err) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("is already committed as main v{version}")), "{out}");
    let (code, out, _) = run_code(&["check", &uri, "--txn", txn.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(0));
    let v = one_json(&out);
    assert_eq!((v["verdict"].as_str(), v["committed_as"].as_u64()), (Some("committed"), Some(version)), "{v}");
}

/// `log`, `explain` and `check` read a branch by its logical name; an unknown one is named with
/// the known ones.
#[tokio::test]
async fn log_explain_and_check_take_a_logical_branch_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let physical = cli_branch(&uri, "feature");
    let row = jsonl(dir.path(), "r.jsonl", &[r#"{"id": 9, "name": "on feature"}"#]);
    assert_eq!(run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &row]).0, Some(0));
    let branch_head = open_branch(&uri, &physical).await.manifest().version;

    let v = one_json(&run_code(&["log", &uri, "--branch", "feature", "--json"]).1);
    assert_eq!(v["branch"], "feature", "{v}");
    assert_eq!(v["versions"][0]["version"], branch_head, "newest first: {v}");
    assert_eq!(v["versions"][0]["writer"], "lance-actions", "{v}");
    let main_log = one_json(&run_code(&["log", &uri, "--json"]).1);
    assert_eq!(main_log["versions"].as_array().map(Vec::len), Some(1), "main has only its create: {main_log}");

    let (code, out, err) = run_code(&["explain", &uri, "--branch", "feature", "--version", &branch_head.to_string()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with(&format!("v{branch_head}: ")), "{out}");
    let (code, _, err) = run_code(&["explain", &uri, "--version", &branch_head.to_string()]);
    assert_eq!(code, Some(1), "main has no such version: {err}");
    assert!(err.contains(&format!("version {branch_head} of main does not exist")), "{err}");

    // A delete staged on the branch, checked against the branch.
    let ds = open_branch(&uri, &physical).await;
    let staged = stage_delete(&ds, "d", "id = 9").await.expect("stage on the branch");
    let txn = dir.path().join("b.txn");
    write_txn(&staged, &txn);
    let (code, out, err) =
        run_code(&["check", &uri, "--branch", "feature", "--txn", txn.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(0), "{out} {err}");
    assert_eq!(one_json(&out)["branch"], "feature");

    for verb in ["log", "explain"] {
        let (code, out, err) = run_code(&[verb, &uri, "--branch", "featur", "--json"]);
        assert_eq!(code, Some(1), "{verb}: {err}");
        let v = one_json(&out);
        assert_eq!(v["error"]["kind"], "no_such_branch", "{v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("known branches: main, feature")), "{v}");
    }
}

/// With `--json`, every failure is one JSON object on stdout with its kind, stderr stays empty,
/// and the exit code is the one documented for the kind; usage errors are JSON too (exit 2).
#[test]
fn json_errors_are_one_object_on_stdout_for_every_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().to_str().expect("utf-8");
    let missing = dir.path().join("nope");
    let missing = missing.to_str().expect("utf-8");
    let txn = dir.path().join("x.txn");
    std::fs::write(&txn, b"not a transaction").expect("write");
    let rows = jsonl(dir.path(), "rows.jsonl", &[r#"{"id": 1}"#]);
    let commands: Vec<Vec<&str>> = vec![
        vec!["explain", empty],
        vec!["log", empty],
        vec!["check", empty, "--txn", txn.to_str().expect("utf-8")],
        vec!["keyed", "insert", empty, "--input", &rows],
        vec!["keyed", "migrate", empty, "--key", "id"],
        vec!["branch", "list", empty],
        vec!["branch", "create", empty, "x"],
        vec!["branch", "gc", empty],
        vec!["merge", empty, "--from", "a", "--into", "main"],
        vec!["rebase", empty, "--branch", "a", "--onto", "main"],
    ];
    for args in &commands {
        for (path, kind) in [(empty, "not_a_dataset"), (missing, "no_such_path")] {
            let args: Vec<&str> = args.iter().map(|a| if *a == empty { path } else { a }).collect();
            let mut with_json = args.clone();
            with_json.push("--json");
            let (code, out, err) = run_code(&with_json);
            assert_eq!(code, Some(1), "{with_json:?}: {out} {err}");
            assert!(err.is_empty(), "{with_json:?}: nothing on stderr: {err}");
            let v = one_json(&out);
            assert_eq!(v["error"]["kind"], kind, "{with_json:?}: {v}");
            // The same condition in the same words, whichever command met it.
            let expected = if kind == "not_a_dataset" {
                format!("{path} is not a Lance dataset")
            } else {
                format!("{path}: no such path")
            };
            assert_eq!(v["error"]["message"], expected.as_str(), "{with_json:?}");
            let (code, out, err) = run_code(&args);
            assert_eq!(code, Some(1), "{args:?}");
            assert!(out.is_empty() && err == format!("error: {expected}\n"), "{args:?}: {out} {err}");
        }
    }
    let (code, out, err) = run_code(&["explain", "--bogus", "--json"]);
    assert_eq!(code, Some(2), "{err}");
    let v = one_json(&out);
    assert_eq!(v["error"]["kind"], "usage", "{v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("--bogus")), "{v}");
    let (code, out, err) = run_code(&["explain", "--bogus"]);
    assert_eq!(code, Some(2));
    assert!(out.is_empty() && err.contains("--bogus"), "{err}");
    // A bad .txn file is an input error naming the file.
    let (code, out, _) =
        run_code(&["check", &create_sample_blocking(dir.path()), "--txn", txn.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(1));
    let v = one_json(&out);
    assert_eq!(v["error"]["kind"], "input", "{v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("x.txn is not a Lance transaction file")), "{v}");
}

/// A sample table made on a runtime of its own, for tests that are not async.
fn create_sample_blocking(dir: &Path) -> String {
    let uri = dir.join("sample").to_str().expect("utf-8").to_string();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(create_sample(&uri)).expect("sample");
    uri
}

/// `--help` documents the exit codes; each command's help has text for its options.
#[test]
fn help_documents_the_exit_codes_and_every_option() {
    let (code, out, _) = run_code(&["--help"]);
    assert_eq!(code, Some(0));
    for line in [
        "Exit codes:",
        "0  ok",
        "2  usage",
        "3  conflict",
        "4  retry",
        "5  fail",
        "6  fast-forward refused",
        "7  lost a race",
    ] {
        assert!(out.contains(line), "missing {line:?} in {out}");
    }
    for (args, expected) in [
        (vec!["check", "--help"], "--txn <FILE>"),
        (vec!["check", "--help"], "--branch <BRANCH>"),
        (vec!["merge", "--help"], "The branch that receives them"),
        (vec!["demo", "--help"], "--dir <DIR>"),
        (vec!["explain", "--help"], "The Lance table"),
        (vec!["log", "--help"], "errors too"),
    ] {
        let (code, out, _) = run_code(&args);
        assert_eq!(code, Some(0));
        assert!(out.contains(expected), "{args:?}: missing {expected:?} in {out}");
    }
}

#[test]
fn matrix_json_holds_the_operation_and_the_action_matrix() {
    for args in [vec!["matrix", "--format", "json"], vec!["matrix", "--json"]] {
        let (code, out, _) = run_code(&args);
        assert_eq!(code, Some(0));
        let v = one_json(&out);
        let ops = v["operations"].as_object().expect("operations");
        assert_eq!(ops.len(), 17);
        assert!(ops.values().all(|r| r.as_object().is_some_and(|c| c.len() == 17)));
        assert_eq!(v["operations"]["Unknown"]["Append"], "F");
        let actions = v["actions"].as_object().expect("actions");
        assert!(actions.len() >= 19, "{}", actions.len());
        assert!(actions.values().all(|r| r.as_object().is_some_and(|c| c.len() == actions.len())));
        assert_eq!(v["legend"]["R"], "retry");
    }
}

#[tokio::test]
async fn explain_and_log_print_one_json_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = dir.path().join("t");
    let uri_s = uri.to_str().expect("utf-8");
    let ds = create_sample(uri_s).await.expect("sample");
    let staged = stage_append(&ds, "x", &[500]).await.expect("stage");
    CommitBuilder::new(Arc::clone(&ds)).execute(staged.txn).await.expect("commit");
    let v = one_json(&run_code(&["explain", uri_s, "--json"]).1);
    let versions = v["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 4, "{v}");
    assert_eq!(versions[3]["operation"], "Append", "{v}");
    assert_eq!(versions[3]["source"], "lifted", "{v}");
    let writes = versions[3]["actions"][0]["writes"].as_array().expect("writes");
    assert!(writes.iter().any(|w| w == "fragments"), "{v}");
    let v = one_json(&run_code(&["log", uri_s, "--json"]).1);
    assert_eq!(v["versions"][0]["version"], 4, "newest first: {v}");
    assert_eq!(v["versions"][0]["writer"], "lance", "{v}");
}

/// `demo --dir D` keeps its tables in D, says where each is, and runs again over its own output.
#[test]
fn demo_keeps_its_tables_in_dir_and_can_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    for _ in 0..2 {
        let (code, out, err) = run_code(&["demo", "--dir", d]);
        assert_eq!(code, Some(0), "{err}");
        let tables: Vec<&str> = out.lines().filter_map(|l| l.trim().strip_prefix("table: ")).collect();
        assert_eq!(tables.len(), 5, "{out}");
        assert!(tables.iter().all(|t| Path::new(t).join("_versions").is_dir()), "{tables:?}");
        assert!(!out.contains(".rs:"), "no Lance source location: {out}");
        assert!(out.contains("after 8 commits"), "{out}");
    }
    let (code, out, err) = run_code(&["demo", "--dir", d, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v = one_json(&out);
    assert_eq!(v["scenarios"].as_array().map(Vec::len), Some(4), "{v}");
    assert_eq!(v["concurrent"]["rows"], 32, "{v}");
    assert_eq!(v["concurrent"]["commits"].as_array().map(Vec::len), Some(8), "{v}");
    // Something at a scenario's path that is not the demo's table is never removed.
    let foreign = dir.path().join("other");
    std::fs::create_dir_all(foreign.join("scenario-1")).expect("mkdir");
    std::fs::write(foreign.join("scenario-1").join("mine.txt"), "keep").expect("write");
    let (code, _, err) = run_code(&["demo", "--dir", foreign.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is not a table an earlier demo made"), "{err}");
    assert!(foreign.join("scenario-1").join("mine.txt").exists());
}

/// Two branches insert key 50: the merge names the key, the branches by their logical names and
/// versions, never a key hash; it says what would resolve it instead of "retry".
#[tokio::test]
async fn a_key_conflict_in_a_merge_names_the_key_and_both_branches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let physical = cli_branch(&uri, "feature");
    let fifty = jsonl(dir.path(), "fifty.jsonl", &[r#"{"id": 50, "name": "x"}"#]);
    assert_eq!(run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &fifty]).0, Some(0));
    let fifty_main = jsonl(dir.path(), "fifty-main.jsonl", &[r#"{"id": 50, "name": "y"}"#]);
    assert_eq!(run_code(&["keyed", "insert", &uri, "--input", &fifty_main]).0, Some(0));
    let feature_v = open_branch(&uri, &physical).await.manifest().version;
    let main_v = open_branch(&uri, "main").await.manifest().version;

    let (code, out, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(3), "{out} {err}");
    assert!(out.contains("key 50 inserted"), "{out}");
    assert!(out.contains(&format!("feature (v{feature_v})")) && out.contains(&format!("main (v{main_v})")), "{out}");
    assert!(!out.contains("0x") && !out.contains(&physical), "no hashes, no physical names: {out}");
    assert!(!out.to_lowercase().contains("retry"), "{out}");
    assert!(out.contains("resolve on 'feature'") && out.contains("then merge again"), "{out}");

    let v = replay_json(&["merge", &uri, "--from", "feature", "--into", "main"], 3);
    let conflicts = v["conflicts"].as_array().expect("conflicts");
    assert!(conflicts.iter().all(|c| c["keys"] == serde_json::json!(["50"])), "{v}");
    assert!(conflicts.iter().all(|c| !c["text"].as_str().unwrap_or("").contains("0x")), "{v}");
    assert!(v["resolution"].as_str().is_some_and(|r| r.contains("resolve on 'feature'")), "{v}");
}

#[tokio::test]
async fn a_refused_fast_forward_exits_6() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100]).await;
    append_ids(&uri, "main", &[10]).await;
    let (code, out, err) = run_code(&["fast-forward", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(6), "{out} {err}");
    assert!(err.contains("cannot fast-forward 'main' to 'feature'") && err.contains("merge instead"), "{err}");
    let (code, out, _) = run_code(&["fast-forward", &uri, "--from", "feature", "--into", "main", "--json"]);
    assert_eq!(code, Some(6));
    assert_eq!(one_json(&out)["error"]["kind"], "not_fast_forward");
}

/// A rebase retires the old physical branch, whose files the rebased branch still reads (a rebase
/// grafts, it does not copy): `branch list --all` shows it with its readers by logical name. Once
/// the branch is deleted nothing reads it, and `branch gc` reclaims it; one still read is kept.
#[tokio::test]
async fn branch_gc_reclaims_retired_branches_nothing_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100]).await;
    let other = cli_branch(&uri, "other");
    append_ids(&uri, &other, &[200]).await;
    assert_eq!(run_code(&["merge", &uri, "--from", "other", "--into", "main"]).0, Some(0));
    append_ids(&uri, "main", &[10]).await;
    for branch in ["feature", "other"] {
        let (code, _, err) = run_code(&["rebase", &uri, "--branch", branch, "--onto", "main"]);
        assert_eq!(code, Some(0), "{err}");
    }
    let (code, out, err) = run_code(&["branch", "list", &uri, "--all"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("retired physical branches (2)"), "{out}");
    let line_of = |physical: &str| out.lines().find(|l| l.contains(physical)).unwrap_or("").to_string();
    assert!(
        line_of(&feature).contains("retired (feature, now feature.") && line_of(&feature).ends_with("read by feature"),
        "{out}"
    );
    assert!(line_of(&other).contains("read by") && line_of(&other).contains("main"), "{out}");
    let v = one_json(&run_code(&["branch", "gc", &uri, "--dry-run", "--json"]).1);
    assert_eq!(v["reclaimed"], serde_json::json!([]), "everything retired is still read: {v}");

    let (code, _, err) = run_code(&["branch", "delete", &uri, "feature"]);
    assert_eq!(code, Some(0), "{err}");
    let v = one_json(&run_code(&["branch", "gc", &uri, "--dry-run", "--json"]).1);
    assert_eq!(v["reclaimed"][0]["physical"], feature.as_str(), "{v}");
    let before = lance::Dataset::open(&uri).await.expect("open").list_branches().await.expect("list");
    assert!(before.contains_key(&feature), "a dry run deletes nothing");
    let (code, out, err) = run_code(&["branch", "gc", &uri]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("reclaimed 1 retired physical branch(es), kept 1 still read"), "{out}");
    let after = lance::Dataset::open(&uri).await.expect("open").list_branches().await.expect("list");
    assert!(!after.contains_key(&feature) && after.contains_key(&other), "{after:?}");
    // Every branch still reads in full.
    assert_eq!(count_where(&uri, "main", "true").await, 12);
    let rebased = physical_of(&uri, "other").expect("other");
    assert_eq!(count_where(&uri, &rebased, "id = 200").await, 1);
    let (code, out, _) = run_code(&["branch", "gc", &uri]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("reclaimed 0"), "{out}");
}

/// Arrow IPC streams (`.arrows`) are read; the same malformed JSON line gets the same message from
/// `keyed` and `graph`; a file that only looks like Parquet is refused naming the format.
#[test]
fn inputs_read_arrow_streams_and_word_malformed_lines_the_same_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = lance_actions_commit::scenario::batch(&[10, 11]).expect("batch");
    let input = dir.path().join("rows.arrows");
    let file = std::fs::File::create(&input).expect("create");
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(file, &rows.schema()).expect("stream writer");
    writer.write(&rows).expect("write");
    writer.finish().expect("finish");
    let uri = dir.path().join("k").to_str().expect("utf-8").to_string();
    let (code, out, err) =
        run_code(&["keyed", "create", &uri, "--key", "id", "--input", input.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("2 row(s) at v1"), "{out}");

    let bad = jsonl(dir.path(), "bad.jsonl", &[r#"{"id": 12, "v": 1, "s": "a"}"#, r#"{"id": 13,"#]);
    let (code, _, keyed_err) = run_code(&["keyed", "insert", &uri, "--input", &bad]);
    assert_eq!(code, Some(1), "{keyed_err}");
    assert!(keyed_err.contains("bad.jsonl: line 2: not a JSON object"), "{keyed_err}");
    let root = dir.path().join("g").to_str().expect("utf-8").to_string();
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, r#"{"nodes": {"Person": {"properties": {"name": "string"}}}}"#).expect("write");
    assert_eq!(run_code(&["graph", "init", &root, "--schema", schema.to_str().expect("utf-8")]).0, Some(0));
    let (code, _, graph_err) = run_code(&["graph", "insert", &root, "--type", "Person", "--input", &bad]);
    assert_eq!(code, Some(1), "{graph_err}");
    assert_eq!(graph_err, keyed_err, "the same file, the same words");

    let fake = dir.path().join("fake.parquet");
    std::fs::write(&fake, b"PAR1").expect("write");
    let (code, out, _) = run_code(&["keyed", "insert", &uri, "--input", fake.to_str().expect("utf-8"), "--json"]);
    assert_eq!(code, Some(1));
    let v = one_json(&out);
    assert_eq!(v["error"]["kind"], "input", "{v}");
    assert!(
        v["error"]["message"].as_str().is_some_and(|m| m.contains("fake.parquet is not readable as Parquet")),
        "{v}"
    );
}

/// A keyed table created from JSON lines or from Parquet (snappy-compressed, as pandas and pyarrow
/// write it by default) has the file's columns in the file's order; rows are inserted from Parquet.
#[tokio::test]
async fn keyed_tables_are_created_and_written_from_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    // JSON lines first: the columns of the file's first record, in its order (not sorted by name).
    let rows = jsonl(
        dir.path(),
        "ordered.jsonl",
        &[r#"{"zeta": "a", "id": 1, "alpha": 2}"#, r#"{"id": 2, "zeta": "b", "beta": true, "alpha": 3}"#],
    );
    let ordered = dir.path().join("ordered").to_str().expect("utf-8").to_string();
    assert_eq!(run_code(&["keyed", "create", &ordered, "--key", "id", "--input", &rows]).0, Some(0));
    let ds = lance::Dataset::open(&ordered).await.expect("open");
    let columns: Vec<String> = ds.schema().fields.iter().map(|f| f.name.clone()).collect();
    assert_eq!(columns, ["zeta", "id", "alpha", "beta"], "the order the fields first appear in");

    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    let write = |name: &str, ids: &[i64]| {
        let rows = lance_actions_commit::scenario::batch(ids).expect("batch");
        let path = dir.path().join(name);
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).expect("create"), rows.schema(), Some(props))
                .expect("writer");
        writer.write(&rows).expect("write");
        writer.close().expect("close");
        path.to_str().expect("utf-8").to_string()
    };
    let first = write("rows.parquet", &[1, 2, 3]);
    // Parquet next: the file's columns in the file's order.
    let uri = dir.path().join("k").to_str().expect("utf-8").to_string();
    let (code, out, err) = run_code(&["keyed", "create", &uri, "--key", "id", "--input", &first]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("3 row(s) at v1"), "{out}");
    let ds = lance::Dataset::open(&uri).await.expect("open");
    let columns: Vec<String> = ds.schema().fields.iter().map(|f| f.name.clone()).collect();
    let expected: Vec<String> =
        lance_actions_commit::scenario::schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(columns, expected, "the file's column order");
    let more = write("more.bin", &[4, 5]);
    let (code, out, err) = run_code(&["keyed", "insert", &uri, "--input", &more]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("inserted 2"), "{out}");
    assert_eq!(count_rows(&uri).await, 5);
    let (code, _, err) = run_code(&["keyed", "insert", &uri, "--input", &more]);
    assert_eq!(code, Some(3), "the same keys again are a key conflict: {err}");
}

/// `branch delete --materialize`: main's fragments read from the merged branch are rewritten as
/// main's own files (the rows, a row deleted after the merge included, exactly as before), then
/// the branch is deleted with its files; main reads every row from its own directory.
#[tokio::test]
async fn a_merged_branch_is_materialized_onto_main_then_deleted_with_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100, 101, 102]).await;
    append_ids(&uri, &feature, &[200]).await;
    assert_eq!(run_code(&["merge", &uri, "--from", "feature", "--into", "main"]).0, Some(0));
    delete_where(&uri, "main", "id = 101").await;
    let (code, _, err) = run_code(&["branch", "delete", &uri, "feature"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("main still read(s) its data files") && err.contains("branch delete --materialize"), "{err}");
    let rows_before = scan_ids(&uri).await;
    assert_eq!(rows_before.len(), 13);

    let v = one_json(&run_code(&["branch", "delete", &uri, "feature", "--materialize", "--json"]).1);
    assert_eq!(v["op"], "delete", "{v}");
    let m = &v["materialized"][0];
    assert_eq!(
        (m["reader"].as_str(), m["fragments"].as_u64(), m["rows"].as_u64()),
        (Some("main"), Some(2), Some(3)),
        "{v}"
    );
    assert_eq!(m["pins_released"], 2, "{v}");
    assert_eq!(scan_ids(&uri).await, rows_before, "main reads the same rows");
    let main = open_branch(&uri, "main").await;
    let grafted = main.manifest().fragments.iter().flat_map(|f| f.files.iter()).filter(|f| f.base_id.is_some()).count();
    assert_eq!(grafted, 0, "main reads only its own files");
    assert!(!Path::new(&uri).join("tree").join(&feature).exists(), "the branch's files are gone");
    let v = one_json(&run_code(&["branch", "list", &uri, "--all", "--json"]).1);
    assert_eq!((v["branches"].clone(), v["retired"].clone()), (serde_json::json!([]), serde_json::json!([])), "{v}");
    assert_eq!(
        run_code(&["branch", "delete", &uri, "x", "--materialize", "--keep-files"]).0,
        Some(2),
        "one or the other"
    );
}

/// Every id of main, sorted, read by plain Lance (a full scan reads every file main references).
async fn scan_ids(uri: &str) -> Vec<i64> {
    use lance::deps::arrow_array::Int64Array;
    let ds = open_branch(uri, "main").await;
    let mut scanner = ds.scan();
    scanner.project(&["id"]).expect("project");
    let batch = scanner.try_into_batch().await.expect("scan");
    let mut ids: Vec<i64> = batch.column(0).as_any().downcast_ref::<Int64Array>().expect("ids").values().to_vec();
    ids.sort_unstable();
    ids
}

/// Deleting a merged branch: refused, naming what reads it and the way out; `--keep-files` then
/// deletes the name, keeps the files main reads (retired, listed by `branch list --all`, kept by
/// `branch gc`), and the name is free again.
#[tokio::test]
async fn a_merged_branch_is_deleted_by_name_keeping_the_files_main_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    append_ids(&uri, &feature, &[100]).await;
    assert_eq!(run_code(&["merge", &uri, "--from", "feature", "--into", "main"]).0, Some(0));
    let (code, _, err) = run_code(&["branch", "delete", &uri, "feature"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("main still read(s) its data files") && err.contains("branch delete --keep-files"), "{err}");

    let (code, out, err) = run_code(&["branch", "delete", &uri, "feature", "--keep-files"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("its files stay in physical branch {feature}")), "{out}");
    let v = one_json(&run_code(&["branch", "list", &uri, "--all", "--json"]).1);
    assert_eq!(v["branches"], serde_json::json!([]), "the name is gone: {v}");
    assert_eq!(v["retired"][0]["physical"], feature.as_str(), "{v}");
    assert_eq!(v["retired"][0]["successor"], serde_json::Value::Null, "{v}");
    assert_eq!(v["retired"][0]["readers"], serde_json::json!(["main"]), "{v}");
    let (code, out, _) = run_code(&["branch", "gc", &uri]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("reclaimed 0 retired physical branch(es), kept 1 still read"), "{out}");
    assert_eq!(count_where(&uri, "main", "id = 100").await, 1, "main still reads the merged row");
    // Nothing can be written through the old name, and the name is free for a new branch.
    let (code, _, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no branch named 'feature'"), "{err}");
    let again = cli_branch(&uri, "feature");
    assert_ne!(again, feature);
}

/// A row conflict on a keyed table names the row's key, not a fragment offset.
#[test]
fn a_row_conflict_on_a_keyed_table_names_the_row_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    cli_branch(&uri, "feature");
    let del = jsonl(dir.path(), "del.jsonl", &[r#"{"id": 2}"#]);
    assert_eq!(run_code(&["keyed", "delete", &uri, "--branch", "feature", "--input", &del]).0, Some(0));
    let upd = jsonl(dir.path(), "upd.jsonl", &[r#"{"id": 2, "name": "B"}"#]);
    assert_eq!(run_code(&["keyed", "update", &uri, "--input", &upd]).0, Some(0));
    let v = replay_json(&["merge", &uri, "--from", "feature", "--into", "main"], 3);
    let c = &v["conflicts"][0];
    assert_eq!(c["rule"], "RowsOverlap", "{v}");
    assert_eq!(c["keys"], serde_json::json!(["2"]), "{v}");
    assert_eq!(c["text"], "the row with key 2 deleted or rewritten on both feature (v2) and main (v2)", "{v}");
    assert!(!c["text"].as_str().unwrap_or("").contains("offset"), "{v}");
}

/// A write of more rows than one chunk holds lands as several commits, and the summary counts
/// commits, not attempts.
#[test]
fn a_multi_chunk_write_is_summarised_in_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let lines: Vec<String> = (1..=16_385).map(|i| format!(r#"{{"id": {i}, "name": "n"}}"#)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let input = jsonl(dir.path(), "many.jsonl", &lines);
    let (code, out, err) = run_code(&["keyed", "upsert", &uri, "--input", &input]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("inserted 16383, updated 2, deleted 0 row(s) at v4 in 3 commits\n"), "{out}");
    let one = jsonl(dir.path(), "one.jsonl", &[r#"{"id": 20000, "name": "n"}"#]);
    let (_, out, _) = run_code(&["keyed", "insert", &uri, "--input", &one]);
    assert!(out.ends_with("at v5 in 1 commit\n"), "{out}");
}

/// On a terminal a replay shows a spinner on stderr while it runs, then a bar with counts that
/// stays in its last state ("3/3 commits"); with `--json`, or piped, nothing but the result is
/// printed. The terminal is a real pseudo-terminal from `script` (util-linux, on every Debian).
#[tokio::test]
async fn a_progress_bar_with_counts_shows_on_a_terminal_only_and_never_with_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_replay_table(dir.path()).await;
    let feature = cli_branch(&uri, "feature");
    for i in 0..3 {
        append_ids(&uri, &feature, &[100 + i]).await;
    }
    let on_a_terminal = |args: &str| {
        let command = format!("{} {args}", env!("CARGO_BIN_EXE_lance-actions"));
        let out = Command::new("script").args(["-qec", &command, "/dev/null"]).output().expect("script (util-linux)");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let shown = on_a_terminal(&format!("merge {uri} --from feature --into main --dry-run"));
    assert!(shown.contains("merge feature into main (dry run) "), "the spinner: {shown:?}");
    assert!(shown.contains("fast-forward: merge feature into main"), "{shown:?}");
    let json = on_a_terminal(&format!("merge {uri} --from feature --into main --dry-run --json"));
    assert!(json.starts_with('{') && !json.contains("(dry run) ("), "{json:?}");
    let shown = on_a_terminal(&format!("merge {uri} --from feature --into main"));
    assert!(shown.contains("3/3 commits"), "the bar's last state: {shown:?}");
    assert!(
        shown.contains("3/3 commits (") && shown.contains("\r\nfast-forward: merge"),
        "the result on its own line: {shown:?}"
    );
    assert!(shown.contains("landed 3 commits: feature@v2 -> v"), "{shown:?}");
    assert_eq!(count_where(&uri, "main", "id >= 100").await, 3);
    // A keyed write split into chunks counts its chunks.
    let keyed = create_keyed(dir.path());
    let lines: Vec<String> = (10..8_205).map(|i| format!(r#"{{"id": {i}, "name": "n"}}"#)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let input = jsonl(dir.path(), "many.jsonl", &lines);
    let shown = on_a_terminal(&format!("keyed upsert {keyed} --input {input}"));
    assert!(shown.contains("2/2 chunks") && shown.contains("in 2 commits"), "{shown:?}");
    let (code, out, err) = run_code(&["merge", &uri, "--from", "feature", "--into", "main", "--dry-run"]);
    assert_eq!(code, Some(0));
    assert!(err.is_empty() && out.lines().count() == 1, "piped: the result only: {out:?} {err:?}");
}

/// Two rebases of the same branch at once: one wins, the other lost a race and exits 7 with the
/// branch's logical name (never exit 1 or a physical name), whichever point the race hit.
#[test]
fn concurrent_rebases_of_one_branch_end_in_0_or_7() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = create_keyed(dir.path());
    let physical = cli_branch(&uri, "feature");
    let on_feature = jsonl(dir.path(), "f.jsonl", &[r#"{"id": 3, "name": "f"}"#]);
    assert_eq!(run_code(&["keyed", "insert", &uri, "--branch", "feature", "--input", &on_feature]).0, Some(0));
    let mut lost = 0;
    for round in 0..6 {
        let row = format!(r#"{{"id": {}, "name": "m"}}"#, 100 + round);
        let on_main = jsonl(dir.path(), "m.jsonl", &[&row]);
        assert_eq!(run_code(&["keyed", "insert", &uri, "--input", &on_main]).0, Some(0));
        let spawn = || {
            bin()
                .args(["rebase", &uri, "--branch", "feature", "--onto", "main", "--json"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        };
        let (a, b) = (spawn(), spawn());
        let mut won = 0;
        for child in [a, b] {
            let out = child.wait_with_output().expect("wait");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            match out.status.code() {
                Some(0) => won += 1,
                Some(7) => {
                    lost += 1;
                    let v = one_json(&text);
                    assert_eq!(v["error"]["kind"], "lost_race", "{v}");
                    let message = v["error"]["message"].as_str().unwrap_or("");
                    assert!(message.contains("'feature'") && !message.contains("feature."), "{v}");
                }
                other => panic!("round {round}: exit {other:?}: {text}"),
            }
        }
        assert!(won >= 1, "round {round}: one rebase wins");
    }
    assert_ne!(physical_of(&uri, "feature"), Some(physical), "the branch was rebased");
    eprintln!("lost races: {lost} of 6 rounds");
}

/// Two merges of one branch at once: every commit of the branch is written once, by one of them;
/// the other reports it `adopted` (a concurrent replay had landed it) or skipped, never landed
/// twice, and main holds each row once.
#[tokio::test]
async fn concurrent_merges_write_each_commit_once_and_report_the_rest_adopted() {
    for round in 0..2 {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = create_replay_table(dir.path()).await;
        let feature = cli_branch(&uri, "feature");
        let mut versions = Vec::new();
        for i in 0..4 {
            versions.push(append_ids(&uri, &feature, &[100 + i]).await);
        }
        let spawn = || {
            bin()
                .args(["merge", &uri, "--from", "feature", "--into", "main", "--json"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        };
        let (a, b) = (spawn(), spawn());
        let mut written = Vec::new();
        let mut accounted = Vec::new();
        for child in [a, b] {
            let out = child.wait_with_output().expect("wait");
            assert_eq!(out.status.code(), Some(0), "round {round}: {}", String::from_utf8_lossy(&out.stdout));
            let v = one_json(&String::from_utf8_lossy(&out.stdout));
            for l in v["landed"].as_array().expect("landed") {
                let version = l["source_version"].as_u64().expect("version");
                accounted.push(version);
                if l["adopted"] == false {
                    written.push(version);
                }
            }
            accounted.extend(v["skipped"].as_array().expect("skipped").iter().filter_map(|s| s.as_u64()));
        }
        written.sort_unstable();
        assert_eq!(written, versions, "round {round}: each commit written exactly once");
        accounted.sort_unstable();
        accounted.dedup();
        assert_eq!(accounted, versions, "round {round}: the other merge adopted or skipped the rest");
        assert_eq!(count_where(&uri, "main", "id >= 100").await, 4, "round {round}: each row once");
    }
}
