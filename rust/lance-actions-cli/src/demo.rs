//! `demo`: a small dataset, two writers racing in four scenarios, both verdicts side by side.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance_actions_commit::judge::{self, judge};
use lance_actions_commit::scenario::{Staged, create_sample, stage_append, stage_delete, stage_upsert};

use serde_json::{Value, json};

use crate::{CliResult, Failure, Kind, without_source_locations};

type Stager = fn(Arc<Dataset>) -> futures_like::Boxed;

mod futures_like {
    use std::future::Future;
    use std::pin::Pin;

    use lance_actions_commit::scenario::Staged;

    pub type Boxed = Pin<Box<dyn Future<Output = lance_actions_commit::Result<Staged>>>>;
}

struct Scenario {
    title: &'static str,
    first: Stager,
    second: Stager,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            title: "two deletes in one fragment, disjoint rows (compatible: deletion vectors union)",
            first: |ds| Box::pin(async move { stage_delete(&ds, "frag0-rows45", "id IN (4, 5)").await }),
            second: |ds| Box::pin(async move { stage_delete(&ds, "frag0-rows01", "id IN (0, 1)").await }),
        },
        Scenario {
            title: "two appends (compatible: fragment ids are bound at commit)",
            first: |ds| Box::pin(async move { stage_append(&ds, "a", &[100]).await }),
            second: |ds| Box::pin(async move { stage_append(&ds, "b", &[101]).await }),
        },
        Scenario {
            title: "two deletes of the same rows (conflicting: rows overlap)",
            first: |ds| Box::pin(async move { stage_delete(&ds, "frag0-rows01", "id IN (0, 1)").await }),
            second: |ds| Box::pin(async move { stage_delete(&ds, "frag0-row1", "id = 1").await }),
        },
        Scenario {
            title: "two keyed upserts inserting key 200 (conflicting: inserted keys intersect)",
            first: |ds| Box::pin(async move { stage_upsert(&ds, "0-new200", &[0, 200]).await }),
            second: |ds| Box::pin(async move { stage_upsert(&ds, "9-new200", &[9, 200]).await }),
        },
    ]
}

/// What one scenario showed: kept as data so the lines and `--json` say the same.
fn scenario_json(
    n: usize,
    s: &Scenario,
    table: &str,
    first: &Staged,
    second: &Staged,
    committed: u64,
    j: &judge::Judgement,
) -> Value {
    json!({
        "scenario": n,
        "title": s.title,
        "table": table,
        "committed": {"version": committed, "transaction": first.name},
        "staged": {"read_version": j.read_version, "transaction": second.name},
        "ours": j.resolution.verdict.label(),
        "ours_text": j.resolution.verdict.to_string(),
        "lance": j.lance.label(),
        // Lance's reasons end with the source location they were raised at: not for users.
        "lance_text": without_source_locations(&j.lance.to_string()),
    })
}

fn print_scenario(v: &Value) {
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    println!("{}. {}", v["scenario"], text("title"));
    println!("   table: {}", text("table"));
    println!("   committed v{}: {}", v["committed"]["version"], v["committed"]["transaction"].as_str().unwrap_or(""));
    println!("   staged at v{}: {}", v["staged"]["read_version"], v["staged"]["transaction"].as_str().unwrap_or(""));
    println!("   ours:  {}", text("ours_text"));
    println!("   lance: {}", text("lance_text"));
}

async fn run_one(dir: &Path, n: usize, s: &Scenario) -> Result<Value, Failure> {
    let uri = table_path(dir, &format!("scenario-{n}"))?;
    let ds = create_sample(&uri).await.map_err(|e| e.to_string())?;
    let first: Staged = (s.first)(ds.clone()).await.map_err(|e| e.to_string())?;
    let second: Staged = (s.second)(ds.clone()).await.map_err(|e| e.to_string())?;
    let mut commit = CommitBuilder::new(ds.clone());
    if let Some(rows) = &first.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    let latest = Arc::new(commit.execute(first.txn.clone()).await.map_err(|e| e.to_string())?);
    let j = judge(&latest, &second.txn, second.affected_rows.as_ref()).await.map_err(|e| e.to_string())?;
    Ok(scenario_json(n, s, &uri, &first, &second, latest.manifest().version, &j))
}

/// `dir/name` as a URI, after removing what an earlier demo left there. Only a Lance table is
/// removed: anything else at that path is the user's, and the demo stops instead.
fn table_path(dir: &Path, name: &str) -> Result<String, Failure> {
    let path = dir.join(name);
    let uri = path.to_str().ok_or_else(|| Failure::input(format!("{} is not valid UTF-8", dir.display())))?.to_string();
    if path.exists() {
        if !path.join("_versions").is_dir() {
            return Err(Failure::new(
                Kind::Other,
                format!("{uri} exists and is not a table an earlier demo made; choose another --dir"),
            ));
        }
        std::fs::remove_dir_all(&path).map_err(|e| format!("cannot replace {uri}: {e}"))?;
    }
    Ok(uri)
}

pub async fn run(dir: Option<PathBuf>, as_json: bool) -> CliResult {
    let temp;
    let (dir, kept) = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            (d, true)
        }
        None => {
            temp = tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            (temp.path().to_path_buf(), false)
        }
    };
    if !as_json {
        let where_ =
            if kept { String::new() } else { " (temporary, removed at the end: keep the tables with --dir)".into() };
        println!("lance-actions demo: a 32-row table (4 fragments, index on id, PK id) in {}{where_}\n", dir.display());
    }
    let mut scenarios_out = Vec::new();
    for (i, s) in scenarios().iter().enumerate() {
        let v = run_one(&dir, i + 1, s).await?;
        if !as_json {
            print_scenario(&v);
        }
        scenarios_out.push(v);
    }
    let concurrent = concurrent_writers(&dir, as_json).await?;
    if as_json {
        let out = json!({"dir": dir.display().to_string(), "kept": kept, "scenarios": scenarios_out, "concurrent": concurrent});
        println!("{out}");
    }
    Ok(())
}

/// Four writers race through the authoritative commit loop: each deletes its own rows of one shared
/// fragment (disjoint rows, so every deletion-vector rebase succeeds) and appends a row.
async fn concurrent_writers(dir: &Path, as_json: bool) -> Result<Value, Failure> {
    use lance_actions_commit::DatasetActionsExt;
    let uri = table_path(dir, "concurrent")?;
    create_sample(&uri).await.map_err(|e| e.to_string())?;
    if !as_json {
        println!(
            "\n5. four writers committing concurrently through the driver (deletes of disjoint rows of fragment 0, appends)"
        );
        println!("   table: {uri}");
    }
    let mut tasks = Vec::new();
    for w in 0..4i64 {
        let uri = uri.clone();
        tasks.push(tokio::spawn(async move {
            let mut commits = Vec::new();
            for (k, step) in ["delete", "append"].iter().enumerate() {
                let ds = Arc::new(Dataset::open(&uri).await.map_err(|e| e.to_string())?);
                let staged = if *step == "delete" {
                    stage_delete(&ds, "w", &format!("id = {}", w * 2)).await
                } else {
                    stage_append(&ds, "w", &[500 + w * 10 + k as i64]).await
                }
                .map_err(|e| e.to_string())?;
                let mut commit = ds.action_commit();
                if let Some(rows) = staged.affected_rows {
                    commit = commit.with_affected_rows(rows);
                }
                let (_, report) = commit.execute(staged.txn).await.map_err(|e| e.to_string())?;
                commits.push(json!({
                    "writer": w, "step": step, "read_version": report.read_version, "version": report.version,
                    "attempts": report.attempts.len(), "peers_checked": report.peers_checked(),
                    "checking_time_us": report.checking_time().as_micros() as u64,
                }));
            }
            Ok::<_, String>(commits)
        }));
    }
    let mut commits = Vec::new();
    for t in tasks {
        commits.extend(t.await.map_err(|e| e.to_string())??);
    }
    let ds = Dataset::open(&uri).await.map_err(|e| e.to_string())?;
    let rows = ds.count_rows(None).await.map_err(|e| e.to_string())?;
    if !as_json {
        for c in &commits {
            println!(
                "   writer {} {:<6} read v{} -> landed v{} after {} attempt(s), {} peer(s) checked in {} µs",
                c["writer"],
                c["step"].as_str().unwrap_or(""),
                c["read_version"],
                c["version"],
                c["attempts"],
                c["peers_checked"],
                c["checking_time_us"]
            );
        }
        println!(
            "   final version v{}: {rows} rows (32 - 4 deleted + 4 appended = 32) after {} commits",
            ds.manifest().version,
            commits.len()
        );
    }
    Ok(json!({"table": uri, "commits": commits, "final_version": ds.manifest().version, "rows": rows}))
}
