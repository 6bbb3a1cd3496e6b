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

/// Provenance properties for a commit replayed from `source` at `version`, standing for the
/// original commits `origins` (one, or the range of a squash).
pub fn properties(source: &Chain, version: u64, origins: &[String], operation: &str) -> HashMap<String, String> {
    HashMap::from([
        (SOURCE_BRANCH.to_string(), chain_name(source).to_string()),
        (SOURCE_VERSION.to_string(), version.to_string()),
        (SOURCE_TXN.to_string(), origins.first().cloned().unwrap_or_default()),
        (SOURCE_TXNS.to_string(), origins.join(",")),
        (REPLAY_OP.to_string(), operation.to_string()),
    ])
}

/// The source commits' original transaction uuids (comma separated): more than one for a squash.
pub const SOURCE_TXNS: &str = "lance-actions.replay.source-txns";

/// The original commits a commit stands for: the transactions it was replayed from (followed back
/// to the first commit, whatever number of hops), or itself when it is not a replay.
pub fn origins(txn: &Transaction) -> Vec<String> {
    let props = txn.transaction_properties.as_deref();
    if let Some(list) = props.and_then(|p| p.get(SOURCE_TXNS)) {
        return list.split(',').filter(|s| !s.is_empty()).map(String::from).collect();
    }
    match props.and_then(|p| p.get(SOURCE_TXN)) {
        Some(one) => vec![one.clone()],
        None => vec![txn.uuid.clone()],
    }
}

/// The original commits a history holds. A source commit whose origins are all in here is already
/// in the target, however many replays apart.
pub fn known_transactions(history: &[Commit]) -> BTreeSet<String> {
    history.iter().flat_map(|c| origins(&c.txn)).collect()
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
