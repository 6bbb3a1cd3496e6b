//! `lance-actions bench`: the side-by-side benchmarks on a caller's uri prefix, at small sizes.

use std::process::Command;

fn bench(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lance-actions")).arg("bench").args(args).output().expect("run");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("one JSON object expected ({e}): {stdout}"))
}

#[test]
fn bench_commit_json_reports_both_ways_and_their_ratio_and_removes_its_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().to_str().expect("utf-8");
    let (code, out, err) =
        bench(&["commit", prefix, "--writers", "2", "--ops", "3", "--workload", "delete-rows", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v = json(&out);
    assert_eq!(v["workload"], "delete-rows");
    assert_eq!(v["writers"], 2);
    let ours = v["ours"]["commits_per_s"].as_f64().expect("ours commits/s");
    let lance = v["lance"]["commits_per_s"].as_f64().expect("lance commits/s");
    assert!(ours > 0.0 && lance > 0.0, "{v}");
    // Disjoint rows of one fragment: our loop merges the deletion vectors instead of sending the
    // writer back.
    assert_eq!(v["ours"]["reexecutions_per_commit"].as_f64(), Some(0.0), "{v}");
    assert!(v["lance"]["reexecutions_per_commit"].as_f64().is_some(), "{v}");
    assert_eq!(v["lance"]["way"], "lance+affected_rows", "deletes are compared with Lance given the rows");
    for way in ["ours", "lance"] {
        let lost = v[way]["lost_puts_per_commit"].as_f64();
        assert!(lost.is_some_and(|l| l >= 0.0), "{way} reports its lost manifest puts: {v}");
        // A rate while every writer writes, and the last writer finished no earlier than the first.
        let all_writing = v[way]["all_writing_per_s"].as_f64();
        assert!(all_writing.is_some_and(|r| r > 0.0), "{way} reports its rate while all write: {v}");
        let spread = v[way]["finish_spread"].as_f64();
        assert!(spread.is_some_and(|s| s >= 1.0), "{way} reports its writers' finish spread: {v}");
        let call = v[way]["commit_call_us"].as_f64();
        assert!(call.is_some_and(|c| c > 0.0), "{way} reports its commit call's time: {v}");
    }
    // Ours splits its commit call: Lance's commit path, our own time and the waits, within the call.
    let part = |key: &str| v["ours"][key].as_f64();
    let call = part("commit_call_us").unwrap_or(0.0);
    let (in_lance, own, waited) = (part("in_lance_us"), part("own_us"), part("waited_us"));
    assert!(in_lance.is_some_and(|l| l > 0.0) && own.is_some_and(|o| o > 0.0), "{v}");
    let parts = in_lance.unwrap_or(0.0) + own.unwrap_or(0.0) + waited.unwrap_or(-1.0);
    assert!(waited.is_some_and(|w| w >= 0.0) && parts <= call, "the parts lie within the call: {v}");
    assert!(["in_lance_us", "own_us", "waited_us"].iter().all(|k| v["lance"][*k].is_null()), "{v}");
    assert!(v["ours"]["open_and_stage_us"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    let ratio = v["ratio"].as_f64().expect("ratio");
    assert!((ratio - ours / lance).abs() < 1e-9, "ratio is ours / lance: {v}");
    // The default two rounds, paired: a median ratio, and no interval (6 rounds are needed).
    let by_round = &v["ratio_by_round"];
    assert_eq!(by_round["rounds"], 2, "{v}");
    assert!(by_round["median"].as_f64().is_some_and(|m| m > 0.0), "{v}");
    assert!(by_round["low"].is_null() && by_round["high"].is_null(), "two rounds claim no interval: {v}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read prefix").collect();
    assert!(left.is_empty(), "the bench's tables are removed: {left:?}");
}

#[test]
fn bench_commit_prints_both_figures_and_the_ratio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().to_str().expect("utf-8");
    let (code, out, err) = bench(&["commit", prefix, "--writers", "1", "--ops", "2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("workload append, 1 writer(s) x 2 commit(s)"), "{out}");
    assert!(out.contains("lance ") && out.contains("ours ") && out.contains("ratio (ours / lance):"), "{out}");
    assert!(out.contains("retries/commit"), "our retries are shown: {out}");
    // One writer has nobody to lose a manifest put to, either way.
    assert_eq!(out.matches(", 0.00 lost puts/commit").count(), 2, "{out}");
    assert_eq!(out.matches(" us a commit call").count(), 2, "both ways' commit call times: {out}");
    assert!(out.contains(" in Lance's commit path, ") && out.contains(" waiting)"), "ours is split: {out}");
    assert_eq!(out.matches(" while all write, finish spread ").count(), 2, "{out}");
    assert!(out.contains("round by round: median ") && out.contains("too few for an interval"), "{out}");
}

#[test]
fn bench_check_json_times_every_pair_on_both_sides() {
    let (code, out, err) = bench(&["check", "--fragments", "10", "--millis", "5", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v = json(&out);
    let rows = v["check"].as_array().expect("check rows");
    let shapes: Vec<&str> = rows.iter().filter_map(|r| r["shape"].as_str()).collect();
    assert_eq!(
        shapes,
        [
            "append vs append",
            "update vs update, disjoint fragments",
            "update vs update, shared fragment",
            "create-index vs update"
        ]
    );
    for r in rows {
        assert_eq!(r["fragments"], 10);
        let (ours, lance) = (r["ours_ns"].as_f64().expect("ours"), r["lance_ns"].as_f64().expect("lance"));
        assert!(ours > 0.0 && lance > 0.0, "{r}");
        assert!((r["ratio"].as_f64().expect("ratio") - ours / lance).abs() < 1e-9, "{r}");
    }
}

#[test]
fn bench_refuses_zero_writers_zero_or_too_many_repeats_and_too_many_disjoint_deletes_as_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().to_str().expect("utf-8");
    let (code, out, _) = bench(&["commit", prefix, "--writers", "0", "--json"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(json(&out)["error"]["message"].as_str().is_some_and(|m| m.contains("--writers (0)")), "{out}");
    let (code, out, _) = bench(&["commit", prefix, "--repeats", "0", "--json"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(json(&out)["error"]["message"].as_str().is_some_and(|m| m.contains("--repeats (0)")), "{out}");
    let (code, out, _) = bench(&["commit", prefix, "--repeats", "18446744073709551615", "--json"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(json(&out)["error"]["message"].as_str().is_some_and(|m| m.contains("at most 25")), "{out}");
    let (code, _, err) = bench(&["commit", prefix, "--writers", "9223372036854775807"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at most 1000"), "{err}");
    let (code, _, err) = bench(&["commit", prefix, "--ops", "65", "--workload", "delete-disjoint"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at most 64 ops"), "{err}");
}

#[test]
fn bench_commit_runs_on_tables_of_many_fragments_and_bounds_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().to_str().expect("utf-8");
    let (code, out, err) = bench(&[
        "commit",
        prefix,
        "--writers",
        "2",
        "--ops",
        "2",
        "--repeats",
        "1",
        "--extra-fragments",
        "40",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v = json(&out);
    assert_eq!(v["extra_fragments"], 40, "{v}");
    assert!(v["ours"]["commits_per_s"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    assert!(v["lance"]["commits_per_s"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read prefix").collect();
    assert!(left.is_empty(), "the bench's tables are removed: {left:?}");

    let (code, out, err) = bench(&["commit", prefix, "--extra-fragments", "100001"]);
    assert_eq!(code, Some(2), "a usage error: {out}{err}");
    assert!(err.contains("--extra-fragments (100001) is at most 100000"), "{err}");
    assert!(std::fs::read_dir(dir.path()).expect("read prefix").next().is_none(), "nothing was written");
}
