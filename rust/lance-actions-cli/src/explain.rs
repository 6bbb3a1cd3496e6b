//! `explain`: each version's operation, its actions and their masks.

use lance_actions::{Action, AnyAction, Mask};
use lance_actions_commit::history::actions_of;

use crate::{CliResult, first_line, open};

/// The transaction of version `v`, or why it cannot be shown.
async fn transaction_of(ds: &lance::Dataset, v: u64) -> Result<lance::dataset::transaction::Transaction, String> {
    match ds.read_transaction_by_version(v).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err("no transaction recorded (cleaned up)".into()),
        Err(e) => Err(format!("transaction unreadable: {}", first_line(&e.to_string()))),
    }
}

fn render_mask(mask: &Mask) -> String {
    if mask.is_empty() {
        return "-".into();
    }
    mask.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
}

fn render_action(i: usize, a: &AnyAction) -> String {
    format!(
        "  {i}. {}\n       reads:  {}\n       writes: {}\n",
        a.summary(),
        render_mask(&a.reads()),
        render_mask(&a.writes())
    )
}

pub async fn run(uri: &str, version: Option<u64>) -> CliResult {
    let ds = open(uri).await?;
    let latest = ds.manifest().version;
    let versions: Vec<u64> = match version {
        Some(v) if v == 0 || v > latest => return Err(format!("version {v} does not exist (latest is {latest})")),
        Some(v) => vec![v],
        None => (1..=latest).collect(),
    };
    for v in versions {
        let txn = match transaction_of(&ds, v).await {
            Ok(t) => t,
            Err(why) => {
                println!("v{v}: {why}");
                continue;
            }
        };
        let from_properties =
            txn.transaction_properties.as_ref().is_some_and(|p| p.contains_key(lance_actions::codec::PROPERTY_KEY));
        let source = if from_properties { "encoded actions" } else { "lifted from the operation" };
        match actions_of(&txn) {
            Ok(actions) => {
                println!("v{v}: {} (read v{}, {source})", txn.operation, txn.read_version);
                if !actions.context.compacted_sstables.is_empty() {
                    println!("  context: MemWAL shards {:?}", actions.context.compacted_sstables);
                }
                for (i, a) in actions.actions.iter().enumerate() {
                    print!("{}", render_action(i + 1, a));
                }
            }
            Err(e) => println!("v{v}: {} — its action list cannot be read: {e}", txn.operation),
        }
    }
    Ok(())
}

/// `log`: one entry per version, newest first: who wrote it, its actions, how it got there.
pub async fn log(uri: &str) -> CliResult {
    let ds = open(uri).await?;
    let latest = ds.manifest().version;
    for v in (1..=latest).rev() {
        let txn = match transaction_of(&ds, v).await {
            Ok(t) => t,
            Err(why) => {
                println!("v{v}  ({why})");
                continue;
            }
        };
        let props = txn.transaction_properties.clone().unwrap_or_default();
        let writer = if props.contains_key(lance_actions::codec::PROPERTY_KEY) { "lance-actions" } else { "lance" };
        println!("v{v}  {}  read v{}  txn {}  written by {writer}", txn.operation, txn.read_version, txn.uuid);
        match actions_of(&txn) {
            Ok(actions) => {
                for a in &actions.actions {
                    println!("    {}", a.summary());
                }
            }
            Err(e) => println!("    actions unreadable: {e}"),
        }
        if let Some(history) = props.get(lance_actions_commit::commit::HISTORY_KEY) {
            for line in history.lines() {
                println!("    attempt: {line}");
            }
        }
        let mut other: Vec<_> = props
            .iter()
            .filter(|(k, _)| {
                k.as_str() != lance_actions::codec::PROPERTY_KEY
                    && k.as_str() != lance_actions_commit::commit::HISTORY_KEY
            })
            .collect();
        other.sort();
        for (k, val) in other {
            println!("    {k} = {val}");
        }
    }
    Ok(())
}
