//! What a replayed commit records about where it came from, and how a target's history is read back
//! to find what was already replayed and which target fragment each source fragment became.

use std::collections::{BTreeSet, HashMap};

use lance::Dataset;
use lance::dataset::transaction::Transaction;

use crate::error::Result;
use crate::lineage::{Chain, Commit, chain_name, open_version};

/// The source branch (physical) the commit was replayed from.
pub const SOURCE_BRANCH: &str = "lance-actions.replay.source-branch";
/// The source version.
pub const SOURCE_VERSION: &str = "lance-actions.replay.source-version";
/// The source commit's transaction uuid: what makes a replay recognisable anywhere.
pub const SOURCE_TXN: &str = "lance-actions.replay.source-txn";
/// The operation that replayed it (cherry-pick, merge, rebase, squash) and its id.
pub const REPLAY_OP: &str = "lance-actions.replay.operation";

/// Provenance properties for a commit replayed from `source` at `version`.
pub fn properties(source: &Chain, version: u64, source_txn: &str, operation: &str) -> HashMap<String, String> {
    HashMap::from([
        (SOURCE_BRANCH.to_string(), chain_name(source).to_string()),
        (SOURCE_VERSION.to_string(), version.to_string()),
        (SOURCE_TXN.to_string(), source_txn.to_string()),
        (REPLAY_OP.to_string(), operation.to_string()),
    ])
}

/// The source transaction a commit was replayed from, if it was.
pub fn replayed_from(txn: &Transaction) -> Option<&str> {
    txn.transaction_properties.as_ref()?.get(SOURCE_TXN).map(String::as_str)
}

/// The transaction uuids a history holds: its own commits' and those they were replayed from.
/// A source commit whose uuid is in here is already in the target.
pub fn known_transactions(history: &[Commit]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in history {
        out.insert(c.txn.uuid.clone());
        if let Some(from) = replayed_from(&c.txn) {
            out.insert(from.to_string());
        }
    }
    out
}

/// Fragment ids that appear in `version` of a chain and not in the version before, ascending: the
/// fragments a commit created (Lance binds new ids in order, so these pair up across a replay).
pub async fn new_fragment_ids(root: &Dataset, chain: &Chain, version: u64) -> Result<Vec<u64>> {
    let after = open_version(root, chain, version).await?;
    let before = after
        .checkout_version(version - 1)
        .await
        .map_err(|source| crate::Error::Lance { what: format!("opening version {}", version - 1), source })?;
    let old: BTreeSet<u64> = before.manifest().fragments.iter().map(|f| f.id).collect();
    let mut ids: Vec<u64> = after.manifest().fragments.iter().map(|f| f.id).filter(|id| !old.contains(id)).collect();
    ids.sort_unstable();
    Ok(ids)
}
