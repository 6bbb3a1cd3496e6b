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
    Ok(())
}
