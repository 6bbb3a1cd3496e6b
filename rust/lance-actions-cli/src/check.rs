//! `check`: would this staged transaction commit, and why? Ours next to Lance's.

use std::path::Path;
use std::sync::Arc;

use lance::dataset::transaction::Transaction;
use lance_actions::Verdict;
use lance_actions_commit::judge::{derive_affected_rows, judge};
use lance_table::format::pb;
use prost::Message;
use serde_json::json;

use crate::failure::verdict_exit_code;
use crate::{CliResult, Failure, Kind, first_line, open_branch, without_source_locations};

/// The staged transaction in Lance's encoding; anything else is refused naming the file.
fn read_txn(path: &Path) -> Result<Transaction, Failure> {
    let bytes = std::fs::read(path).map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    let pb = pb::Transaction::decode(bytes.as_slice())
        .map_err(|e| Failure::input(format!("{} is not a Lance transaction file: {e}", path.display())))?;
    Transaction::try_from(pb).map_err(|e| {
        Failure::input(format!("{} is not a valid Lance transaction: {}", path.display(), first_line(&e.to_string())))
    })
}

/// The version that committed `txn` already, if one did: Lance keeps the transaction's uuid with
/// the version it landed as, and only a version after its read version can hold it.
async fn committed_as(latest: &lance::Dataset, txn: &Transaction) -> Option<u64> {
    for v in txn.read_version + 1..=latest.manifest().version {
        if let Ok(Some(t)) = latest.read_transaction_by_version(v).await
            && t.uuid == txn.uuid
        {
            return Some(v);
        }
    }
    None
}

fn reason_json(v: &Verdict) -> serde_json::Value {
    v.reason().map(lance_actions_commit::json::reason).unwrap_or(serde_json::Value::Null)
}

pub async fn run(uri: &str, branch: Option<&str>, txn_path: &Path, as_json: bool) -> CliResult {
    let on = branch.unwrap_or("main");
    let latest = open_branch(uri, branch).await?;
    let txn = read_txn(txn_path)?;
    let head = latest.manifest().version;
    if txn.read_version > head {
        return Err(Failure::new(
            Kind::Other,
            format!(
                "the transaction was read at v{}, but {on} is at v{head}: it was staged on another branch \
                 or table (pass --branch NAME)",
                txn.read_version
            ),
        ));
    }
    if let Some(version) = committed_as(&latest, &txn).await {
        if as_json {
            let out = json!({"verdict": "committed", "committed_as": version, "txn": txn.uuid, "branch": on,
                             "read_version": txn.read_version, "latest_version": head});
            println!("{out}");
        } else {
            println!("transaction {} ({}) is already committed as {on} v{version}", txn.uuid, txn.operation);
        }
        return Ok(());
    }
    let at_read = Arc::new(latest.checkout_version(txn.read_version).await.map_err(|e| {
        Failure::new(
            Kind::Other,
            format!("read version v{} of {on} cannot be opened: {}", txn.read_version, first_line(&e.to_string())),
        )
    })?);
    let affected = derive_affected_rows(&at_read, &txn).await.map_err(|e| e.to_string())?;
    let j = judge(&latest, &txn, affected.as_ref()).await.map_err(|e| e.to_string())?;
    let v = &j.resolution.verdict;
    // Lance's reasons end with the source location they were raised at: not for users.
    let lance_text = without_source_locations(&j.lance.to_string());
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
            "lance_reason": lance_text,
            "branch": on,
            "read_version": j.read_version,
            "latest_version": j.latest_version,
        });
        println!("{out}");
    } else {
        println!(
            "transaction {} ({}) read at {on} v{}, latest v{}",
            txn.uuid, txn.operation, j.read_version, j.latest_version
        );
        for p in &j.resolution.peers {
            println!("  v{}: {} overlapping pair(s) -> {}", p.version, p.overlapping_pairs, p.verdict);
        }
        println!("ours:  {v}");
        println!("lance: {lance_text}");
    }
    // The verdict is the answer a script asks for: ok 0, retry 4, fail 5.
    match verdict_exit_code(v.label()) {
        0 => Ok(()),
        code => Err(Failure::Reported { code }),
    }
}
