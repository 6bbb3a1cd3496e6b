//! Reading what was committed: each version's transaction as actions.
//!
//! A commit made through this project carries its exact action list in the transaction properties
//! (`lance-actions.v1`); it is decoded fail-closed (a corrupt or newer encoding is an error, never a
//! fallback to re-lifting). Any other commit (Lance's own writers, pylance) is lifted from its
//! `Operation`.

use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance_actions::{ActionTxn, Peer, codec, lift};
use lance_core::datatypes::Schema;

use crate::error::{Error, LanceContext, Result};

/// The action transaction a committed Lance transaction carries (checked against the operation it
/// rides on), or its lifted operation.
pub fn actions_of(txn: &Transaction) -> Result<ActionTxn, lance_actions::Error> {
    match encoded_list(txn) {
        Some(encoded) => codec::decode_for_operation(encoded, &txn.operation),
        None => Ok(lift(&txn.operation)),
    }
}

/// The encoded action list a transaction carries, if it carries one (a commit made through this
/// project).
pub fn encoded_list(txn: &Transaction) -> Option<&str> {
    txn.transaction_properties.as_ref()?.get(codec::PROPERTY_KEY).map(String::as_str)
}

/// A committed peer as the driver may trust it. The rows a peer declares it deleted are dropped:
/// rebase then reads them from the peer's deletion files, which are what the table holds. (A peer's
/// declared rows were not necessarily checked against its files when it committed: older builds
/// and foreign writers copying our encoding did not.)
fn trusted(mut txn: ActionTxn) -> ActionTxn {
    for action in txn.actions.iter_mut() {
        if let lance_actions::AnyAction::UpdateDeletionVector(u) = action {
            u.affected_rows = None;
        }
    }
    txn
}

/// The transactions committed in `(read_version, latest]` on `latest`'s branch, oldest first.
pub async fn committed_since(latest: &Dataset, read_version: u64) -> Result<Vec<(u64, Transaction)>> {
    committed_between(latest, read_version, latest.manifest().version).await
}

/// The transactions committed in `(after, head]` on `handle`'s branch, oldest first. `handle` may
/// stand at any version of the branch: a version past it is read from the session's cache when
/// Lance has just read it, so a judge that knows the head's number need not look the head up.
pub async fn committed_between(handle: &Dataset, after: u64, head: u64) -> Result<Vec<(u64, Transaction)>> {
    let shared = committed_between_shared(handle, after, head).await?;
    Ok(shared.into_iter().map(|(version, txn)| (version, Arc::unwrap_or_clone(txn))).collect())
}

/// [`committed_between`], each transaction shared with the session's cache rather than copied out
/// of it (the commit loop reads them inside the window before a manifest put).
pub async fn committed_between_shared(handle: &Dataset, after: u64, head: u64) -> Result<Vec<(u64, Arc<Transaction>)>> {
    if after > head {
        return Err(Error::ReadVersionAhead { read_version: after, latest: head });
    }
    let mut out = Vec::with_capacity((head - after) as usize);
    for version in after + 1..=head {
        let txn = transaction_of(handle, version)
            .await
            .lance(format!("reading the transaction of version {version}"))?
            .ok_or(Error::MissingTransaction { version })?;
        out.push((version, txn));
    }
    Ok(out)
}

/// One version's transaction: from the session's cache when Lance has just read it (Lance's commit
/// caches every transaction its pre-write listing loads, and every one it commits), else through
/// that version's own handle, where `read_transaction_by_version` reads storage each time.
pub(crate) async fn transaction_of(handle: &Dataset, version: u64) -> lance::Result<Option<Arc<Transaction>>> {
    if version == handle.manifest().version {
        return Ok(handle.read_transaction().await?.map(Arc::new));
    }
    if let Some(cached) = cached_transaction_shared(handle, version).await {
        return Ok(Some(cached));
    }
    Ok(handle.checkout_version(version).await?.read_transaction().await?.map(Arc::new))
}

/// The entry under which Lance 14.0.2 caches a version's transaction in a dataset's metadata cache
/// (`lance::session::caches::TransactionKey`, a crate-private type): the same value type, schema
/// and key fields, so a probe through Lance's public cache reaches Lance's own entry. A layout that
/// drifts only makes the probe miss (then the version is checked out, as before);
/// the commit tests (`at_write.rs`) fail on that drift.
struct LanceTransactionKey {
    version: u64,
}

impl lance_core::cache::CacheKey for LanceTransactionKey {
    type ValueType = Transaction;

    fn key(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(format!("txn/{}", self.version))
    }

    fn type_name() -> &'static str {
        "Transaction"
    }

    fn schema() -> lance_core::cache::CacheKeySchema {
        lance_core::cache::CacheKeySchema::new("lance.dataset.transaction-key", 1)
    }

    fn write_key(&self, builder: &mut lance_core::cache::KeyBuilder) {
        builder.write_u64(self.version);
    }
}

/// Version `version`'s transaction on `dataset`'s branch, if the session's cache holds it. A
/// version's transaction never changes once committed, so the cached one is the one on storage;
/// Lance's own listing trusts the same entry. Saves the version lookup (a HEAD request on an
/// object store) that checking the version out would cost.
pub async fn cached_transaction(dataset: &Dataset, version: u64) -> Option<Transaction> {
    cached_transaction_shared(dataset, version).await.map(Arc::unwrap_or_clone)
}

/// [`cached_transaction`], shared with the cache.
pub async fn cached_transaction_shared(dataset: &Dataset, version: u64) -> Option<Arc<Transaction>> {
    // `Session::file_metadata_cache` is the cache Lance scopes per dataset uri
    // (`GlobalMetadataCache::for_dataset`), and `with_key_prefix` is that scoping.
    let cache = dataset.session().file_metadata_cache().with_key_prefix(dataset.uri());
    cache.get_with_key(&LanceTransactionKey { version }).await
}

/// Committed transactions as driver peers. `schema` is the read version's: a rewritten field's
/// descendants in it are rewritten with it (a packed struct), so each peer's coverage
/// invalidation names them too (model bug 15, `tests/upstream/README.md`). The read version's
/// schema, not the head's, keeps a peer decoded once valid for every attempt of a commit.
pub fn peers_of(committed: &[(u64, Transaction)], schema: &Schema) -> Result<Vec<Peer>> {
    peers_decoded_by(committed.iter().map(|(v, t)| (*v, t)), schema, |_, txn| actions_of(txn))
}

/// [`peers_of`] for transactions read from the history of the table at `uri`: lists this process
/// already decoded or committed are not decoded again ([`crate::known`]).
pub fn committed_peers(uri: &str, committed: &[(u64, Arc<Transaction>)], schema: &Schema) -> Result<Vec<Peer>> {
    peers_decoded_by(committed.iter().map(|(v, t)| (*v, &**t)), schema, |version, txn| {
        crate::known::actions_of_committed(uri, version, txn)
    })
}

fn peers_decoded_by<'a>(
    committed: impl Iterator<Item = (u64, &'a Transaction)>,
    schema: &Schema,
    decode: impl Fn(u64, &Transaction) -> Result<ActionTxn, lance_actions::Error>,
) -> Result<Vec<Peer>> {
    committed
        .map(|(version, txn)| {
            let mut actions = decode(version, txn).map_err(|source| Error::PeerActions { version, source })?;
            actions.fill_nested_fields(schema);
            Ok(Peer::new(version, trusted(actions)).built_on(txn.read_version))
        })
        .collect()
}
