//! The CLI on S3 with `--storage-option` alone: the `AWS_*` variables this binary set for itself
//! are removed from the CLI's environment, so only the options can lead it to the server.

use std::path::PathBuf;
use std::process::{Command, Output};

use lance::Dataset;

use crate::Ctx;
use crate::support::scan;

/// `target/<profile>/lance-actions`, next to this test binary's `deps/` directory.
fn cli() -> PathBuf {
    let exe = std::env::current_exe().expect("this test binary");
    let bin = exe.parent().and_then(|deps| deps.parent()).map(|dir| dir.join("lance-actions"));
    match bin {
        Some(path) if path.exists() => path,
        _ => panic!("the lance-actions binary is not built next to this test: cargo build -p lance-actions-cli"),
    }
}

fn run(cx: &Ctx<'_>, args: &[&str]) -> Output {
    let mut command = Command::new(cli());
    for (key, _) in cx.s3.env() {
        command.env_remove(key);
    }
    command.arg("--storage-option").arg(format!("aws_endpoint={}", cx.s3.endpoint));
    for option in
        ["aws_access_key_id=testing", "aws_secret_access_key=testing", "aws_region=us-east-1", "allow_http=true"]
    {
        command.args(["--storage-option", option]);
    }
    command.args(args).output().expect("run the CLI")
}

pub async fn the_cli_reaches_s3_through_storage_options_alone(cx: &Ctx<'_>) {
    let uri = cx.uri("cli");
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("first.jsonl");
    std::fs::write(&first, "{\"id\": 1, \"v\": 10}\n{\"id\": 2, \"v\": 20}\n").expect("input");
    let second = dir.path().join("second.jsonl");
    std::fs::write(&second, "{\"id\": 2, \"v\": 99}\n").expect("input");
    let third = dir.path().join("third.jsonl");
    std::fs::write(&third, "{\"id\": 3, \"v\": 30}\n").expect("input");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();

    let out = run(cx, &["keyed", "create", &uri, "--key", "id", "--input", &path(&first)]);
    assert!(out.status.success(), "create on S3: {}", String::from_utf8_lossy(&out.stderr));
    let out = run(cx, &["keyed", "insert", &uri, "--input", &path(&second), "--json"]);
    assert_eq!(out.status.code(), Some(3), "a present key is a conflict: {}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains('2'), "the conflict names key 2");
    let out = run(cx, &["keyed", "insert", &uri, "--input", &path(&third)]);
    assert!(out.status.success(), "insert on S3: {}", String::from_utf8_lossy(&out.stderr));
    let out = run(cx, &["log", &uri, "--json"]);
    assert!(out.status.success(), "log on S3: {}", String::from_utf8_lossy(&out.stderr));
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).expect("log --json is JSON");
    assert!(log.to_string().contains("lance-actions"), "the log shows our commits: {log}");
    let ds = Dataset::open(&uri).await.expect("open");
    let (found, total) = scan(&ds).await;
    assert_eq!(total, 3);
    assert_eq!(found.into_iter().collect::<Vec<_>>(), [(1, 10), (2, 20), (3, 30)]);
}
