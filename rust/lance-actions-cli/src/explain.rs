//! `explain`: each version's operation, its actions and their masks. `log`: the same history,
//! newest first, with writer, verdict history and provenance. Both read main or a named branch,
//! as lines or as one JSON object.

use lance::dataset::transaction::Transaction;
use lance_actions::{Action, AnyAction, Mask};

use lance_actions_commit::history::actions_of;
use serde_json::{Value, json};

use crate::{CliResult, Failure, Kind, first_line, open_branch};

/// The transaction of version `v`, or why it cannot be shown.
async fn transaction_of(ds: &lance::Dataset, v: u64) -> Result<Transaction, String> {
    match ds.read_transaction_by_version(v).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err("no transaction recorded (cleaned up)".into()),
        Err(e) => Err(format!("transaction unreadable: {}", first_line(&e.to_string()))),
    }
}

fn mask_paths(mask: &Mask) -> Vec<String> {
    mask.iter().map(|p| p.to_string()).collect()
}

/// A mask as the lines show it: its paths, or "-" when it is empty.
fn render_paths(paths: &Value) -> String {
    let paths: Vec<&str> = paths.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if paths.is_empty() { "-".into() } else { paths.join(", ") }
}

fn render_action(i: usize, a: &Value) -> String {
    format!(
        "  {i}. {}\n       reads:  {}\n       writes: {}\n",
        a["summary"].as_str().unwrap_or(""),
        render_paths(&a["reads"]),
        render_paths(&a["writes"])
    )
}

fn action_json(a: &AnyAction) -> Value {
    json!({"summary": a.summary(), "reads": mask_paths(&a.reads()), "writes": mask_paths(&a.writes())})
}

/// Were the actions recorded by our commit, or lifted from Lance's operation?
fn encoded(txn: &Transaction) -> bool {
    txn.transaction_properties.as_ref().is_some_and(|p| p.contains_key(lance_actions::codec::PROPERTY_KEY))
}

/// The branch as the output names it.
fn branch_label(branch: Option<&str>) -> &str {
    branch.unwrap_or("main")
}

pub async fn run(uri: &str, branch: Option<&str>, version: Option<u64>, as_json: bool) -> CliResult {
    let ds = open_branch(uri, branch).await?;
    let latest = ds.manifest().version;
    let versions: Vec<u64> = match version {
        Some(v) if v == 0 || v > latest => {
            let on = branch_label(branch);
            return Err(Failure::new(Kind::Other, format!("version {v} of {on} does not exist (latest is v{latest})")));
        }
        Some(v) => vec![v],
        None => (1..=latest).collect(),
    };
    let mut entries = Vec::new();
    for v in versions {
        let entry = explain_version(&ds, v).await;
        if as_json {
            entries.push(entry);
        } else {
            print!("{}", render_explained(v, &entry));
        }
    }
    if as_json {
        println!("{}", json!({"uri": uri, "branch": branch_label(branch), "versions": entries}));
    }
    Ok(())
}

/// One version as data: operation, read version, where the actions came from, the actions.
async fn explain_version(ds: &lance::Dataset, v: u64) -> Value {
    let txn = match transaction_of(ds, v).await {
        Ok(t) => t,
        Err(why) => return json!({"version": v, "error": why}),
    };
    let source = if encoded(&txn) { "encoded" } else { "lifted" };
    let head = json!({"version": v, "operation": txn.operation.to_string(), "read_version": txn.read_version, "source": source});
    match actions_of(&txn) {
        Ok(actions) => {
            let mut entry = head;
            // The shards are shown as Lance's debug form: there is no user-facing name for them.
            let shards: Vec<String> = actions.context.compacted_sstables.iter().map(|s| format!("{s:?}")).collect();
            entry["memwal_shards"] = json!(shards);
            entry["actions"] = Value::Array(actions.actions.iter().map(action_json).collect());
            entry
        }
        Err(e) => {
            let mut entry = head;
            entry["error"] = json!(format!("its action list cannot be read: {e}"));
            entry
        }
    }
}

/// The human form of [`explain_version`], from the same data.
fn render_explained(v: u64, entry: &Value) -> String {
    let Some(operation) = entry["operation"].as_str() else {
        return format!("v{v}: {}\n", entry["error"].as_str().unwrap_or(""));
    };
    if let Some(why) = entry["error"].as_str() {
        return format!("v{v}: {operation} — {why}\n");
    }
    let source = if entry["source"] == "encoded" { "encoded actions" } else { "lifted from the operation" };
    let mut out = format!("v{v}: {operation} (read v{}, {source})\n", entry["read_version"]);
    if entry["memwal_shards"].as_array().is_some_and(|s| !s.is_empty()) {
        out.push_str(&format!("  context: MemWAL shards [{}]\n", render_paths(&entry["memwal_shards"])));
    }
    for (i, a) in entry["actions"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&render_action(i + 1, a));
    }
    out
}

/// `log`: one entry per version, newest first: who wrote it, its actions, how it got there.
pub async fn log(uri: &str, branch: Option<&str>, as_json: bool) -> CliResult {
    let ds = open_branch(uri, branch).await?;
    let latest = ds.manifest().version;
    let mut entries = Vec::new();
    for v in (1..=latest).rev() {
        let entry = log_entry(&ds, v).await;
        if as_json {
            entries.push(entry);
        } else {
            print!("{}", render_log_entry(v, &entry));
        }
    }
    if as_json {
        println!("{}", json!({"uri": uri, "branch": branch_label(branch), "versions": entries}));
    }
    Ok(())
}

/// One version of the log as data.
async fn log_entry(ds: &lance::Dataset, v: u64) -> Value {
    let txn = match transaction_of(ds, v).await {
        Ok(t) => t,
        Err(why) => return json!({"version": v, "error": why}),
    };
    let props = txn.transaction_properties.clone().unwrap_or_default();
    let writer = if encoded(&txn) { "lance-actions" } else { "lance" };
    let (actions, actions_error) = match actions_of(&txn) {
        Ok(a) => (a.actions.iter().map(|a| a.summary()).collect::<Vec<_>>(), None),
        Err(e) => (Vec::new(), Some(format!("actions unreadable: {e}"))),
    };
    let attempts: Vec<&str> =
        props.get(lance_actions_commit::commit::HISTORY_KEY).map(|h| h.lines().collect()).unwrap_or_default();
    let mut other: Vec<(&String, &String)> = props
        .iter()
        .filter(|(k, _)| {
            k.as_str() != lance_actions::codec::PROPERTY_KEY && k.as_str() != lance_actions_commit::commit::HISTORY_KEY
        })
        .collect();
    other.sort();
    let properties: serde_json::Map<String, Value> = other.into_iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    json!({
        "version": v, "operation": txn.operation.to_string(), "read_version": txn.read_version,
        "txn": txn.uuid, "writer": writer, "actions": actions, "actions_error": actions_error,
        "attempts": attempts, "properties": properties,
    })
}

/// The human form of [`log_entry`].
fn render_log_entry(v: u64, e: &Value) -> String {
    let Some(operation) = e["operation"].as_str() else {
        return format!("v{v}  ({})\n", e["error"].as_str().unwrap_or(""));
    };
    let text = |value: &Value| value.as_str().unwrap_or("").to_string();
    let mut out = format!(
        "v{v}  {operation}  read v{}  txn {}  written by {}\n",
        e["read_version"],
        text(&e["txn"]),
        text(&e["writer"])
    );
    let lines = |key: &str| e[key].as_array().cloned().unwrap_or_default();
    for a in lines("actions") {
        out.push_str(&format!("    {}\n", text(&a)));
    }
    if let Some(why) = e["actions_error"].as_str() {
        out.push_str(&format!("    {why}\n"));
    }
    for line in lines("attempts") {
        out.push_str(&format!("    attempt: {}\n", text(&line)));
    }
    if let Some(properties) = e["properties"].as_object() {
        for (k, val) in properties {
            out.push_str(&format!("    {k} = {}\n", text(val)));
        }
    }
    out
}
