//! `check`: would this staged transaction commit, and why? Ours next to Lance's.

use std::path::Path;
use std::sync::Arc;

use lance::dataset::transaction::Transaction;
use lance_actions::Verdict;
use lance_actions_commit::judge::{derive_affected_rows, judge};
use lance_table::format::pb;
use prost::Message;
use serde_json::json;

use crate::{CliResult, first_line, open};

fn read_txn(path: &Path) -> Result<Transaction, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let pb = pb::Transaction::decode(bytes.as_slice())
        .map_err(|e| format!("{} is not a Lance transaction file: {e}", path.display()))?;
    Transaction::try_from(pb)
        .map_err(|e| format!("{} is not a valid Lance transaction: {}", path.display(), first_line(&e.to_string())))
}

fn reason_json(v: &Verdict) -> serde_json::Value {
    match v.reason() {
        None => serde_json::Value::Null,
        Some(r) => json!({
            "rule": format!("{:?}", r.rule),
            "action": format!("{:?}", r.ours),
            "peer_version": r.peer_version,
            "peer_action": r.peer_action.map(|a| format!("{a:?}")),
            "path": r.path.as_ref().map(|p| p.to_string()),
            "detail": r.detail,
            "text": r.to_string(),
        }),
    }
}

pub async fn run(uri: &str, txn_path: &Path, as_json: bool) -> CliResult {
    let latest = open(uri).await?;
    let txn = read_txn(txn_path)?;
    let at_read =
        Arc::new(latest.checkout_version(txn.read_version).await.map_err(|e| {
            format!("read version {} cannot be opened: {}", txn.read_version, first_line(&e.to_string()))
        })?);
    let affected = derive_affected_rows(&at_read, &txn).await.map_err(|e| e.to_string())?;
    let j = judge(&latest, &txn, affected.as_ref()).await.map_err(|e| e.to_string())?;
    let v = &j.resolution.verdict;
    if as_json {
        let peers: Vec<_> = j
            .resolution
            .peers
            .iter()
            .map(|p| json!({"version": p.version, "overlapping_pairs": p.overlapping_pairs, "verdict": p.verdict.label(), "reason": reason_json(&p.verdict)}))
            .collect();
        let out = json!({
            "verdict": v.label(),
            "reason": reason_json(v),
            "peers": peers,
            "lance_verdict": j.lance.label(),
            "lance_reason": j.lance.to_string(),
            "read_version": j.read_version,
            "latest_version": j.latest_version,
        });
        println!("{out}");
    } else {
        println!(
            "transaction {} ({}) read at v{}, latest v{}",
            txn.uuid, txn.operation, j.read_version, j.latest_version
        );
        for p in &j.resolution.peers {
            println!("  v{}: {} overlapping pair(s) -> {}", p.version, p.overlapping_pairs, p.verdict);
        }
        println!("ours:  {v}");
        println!("lance: {}", j.lance);
    }
    Ok(())
}
