//! `demo`: a small dataset, two writers racing in four scenarios, both verdicts side by side.

use std::path::PathBuf;
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance_actions_commit::judge;
use lance_actions_commit::scenario::{Staged, create_sample, stage_append, stage_delete, stage_upsert};

use crate::CliResult;

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

async fn run_one(dir: &std::path::Path, n: usize, s: &Scenario) -> Result<(), String> {
    let uri = dir.join(format!("scenario-{n}"));
    let uri = uri.to_str().ok_or("the demo directory is not valid UTF-8")?;
    let ds = create_sample(uri).await.map_err(|e| e.to_string())?;
    let first: Staged = (s.first)(ds.clone()).await.map_err(|e| e.to_string())?;
    let second: Staged = (s.second)(ds.clone()).await.map_err(|e| e.to_string())?;
    let mut commit = CommitBuilder::new(ds.clone());
    if let Some(rows) = &first.affected_rows {
        commit = commit.with_affected_rows(rows.clone());
    }
    let latest = Arc::new(commit.execute(first.txn.clone()).await.map_err(|e| e.to_string())?);
    let j = judge(&latest, &second.txn, second.affected_rows.as_ref()).await.map_err(|e| e.to_string())?;
    println!("{n}. {}", s.title);
    println!("   committed v{}: {}", latest.manifest().version, first.name);
    println!("   staged at v{}: {}", j.read_version, second.name);
    println!("   ours:  {}", j.resolution.verdict);
    println!("   lance: {}", j.lance);
    Ok(())
}

pub async fn run(dir: Option<PathBuf>) -> CliResult {
    let temp;
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            d
        }
        None => {
            temp = tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            temp.path().to_path_buf()
        }
    };
    println!("lance-actions demo: a 32-row table (4 fragments, index on id, PK id) in {}\n", dir.display());
    for (i, s) in scenarios().iter().enumerate() {
        run_one(&dir, i + 1, s).await?;
    }
    concurrent_writers(&dir).await
}

/// Four writers race through the authoritative commit loop: each deletes its own rows of one shared
/// fragment (disjoint rows, so every deletion-vector rebase succeeds) and appends a row.
async fn concurrent_writers(dir: &std::path::Path) -> CliResult {
    use lance_actions_commit::DatasetActionsExt;
    let uri = dir.join("concurrent");
    let uri = uri.to_str().ok_or("the demo directory is not valid UTF-8")?.to_string();
    create_sample(&uri).await.map_err(|e| e.to_string())?;
    println!(
        "\n5. four writers committing concurrently through the driver (deletes of disjoint rows of fragment 0, appends)"
    );
    let mut tasks = Vec::new();
    for w in 0..4i64 {
        let uri = uri.clone();
        tasks.push(tokio::spawn(async move {
            let mut lines = Vec::new();
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
                let peers: usize = report.peers_checked();
                lines.push(format!(
                    "   writer {w} {step:<6} read v{} -> landed v{} after {} attempt(s), {peers} peer(s) checked in {:?}",
                    report.read_version,
                    report.version,
                    report.attempts.len(),
                    report.checking_time()
                ));
            }
            Ok::<_, String>(lines)
        }));
    }
    for t in tasks {
        for line in t.await.map_err(|e| e.to_string())?? {
            println!("{line}");
        }
    }
    let ds = Dataset::open(&uri).await.map_err(|e| e.to_string())?;
    let rows = ds.count_rows(None).await.map_err(|e| e.to_string())?;
    println!("   final version v{}: {rows} rows (32 - 4 deleted + 4 appended = 32)", ds.manifest().version);
    Ok(())
}
