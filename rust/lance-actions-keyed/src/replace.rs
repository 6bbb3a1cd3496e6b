//! Replace rows at known places: a keyed write whose caller already knows where the rows it
//! replaces or deletes live (their row addresses at the handle's version), so nothing searches the
//! table for their keys. The graph merge lands this way: its change detection read each row's
//! address from the fragments the history touched.
//!
//! Nothing the caller says is trusted: every address is checked to hold a live row with the key the
//! caller gave (one take of the key columns), and every written key the caller did not locate is
//! probed to be absent; a mismatch is [`Error::RowsMoved`] and nothing is written. The commit is
//! one `Update` in Lance's row-rewrite shape (deletion vectors of the located fragments, the new
//! rows in new fragments) declaring every written key, so fencing holds as for an upsert.
//!
//! One attempt only: the addresses belong to the handle's version, so a commit that loses to a
//! concurrent writer cannot be re-planned here; it is [`Error::AddressesOutdated`], for the caller to
//! locate the rows again on a fresh read. A commit that only lost its puts (no writer judged
//! against it) is [`Error::Contention`]: the same addresses may be tried again.

use std::collections::{BTreeMap, HashSet};

use arrow_array::{Array, RecordBatch, UInt64Array};
use futures::{StreamExt, TryStreamExt};
use lance::dataset::transaction::{Operation, UpdateMode};
use lance_actions::lift;
use lance_actions_commit::{DatasetActionsExt, Interference};
use lance_core::ROW_ADDR;
use lance_select::RowAddrTreeMap;
use lance_table::format::Fragment;
use lance_table::format::key_existence::KeyValue;

use crate::Progress;
use crate::error::{Error, LanceContext, Result};
use crate::key::{KeySet, UniqueKeys, duplicates, sample};
use crate::probe::present_keys;
use crate::stage;
use crate::table::{KeyedTable, WriteOutcome, conform};
use crate::write::{Attempt, judge};

/// Deletion vectors read or written at once (one small object per fragment).
const CONCURRENT_FILES: usize = 16;

/// Rows of the table as the caller read them at the handle's version: their keys (rows holding at
/// least the key columns, in order) and, for each, the row address it is at.
#[derive(Debug, Clone)]
pub struct Located {
    pub keys: Vec<RecordBatch>,
    pub addresses: Vec<u64>,
}

impl KeyedTable {
    /// Write `rows` and delete the `located` rows, in one commit. A located key that `rows` also
    /// holds is an update (its row moves to a new fragment), one it does not is a delete, and a
    /// key of `rows` not located must be absent from the table (an insert). Refused, with nothing
    /// written, when an address does not hold its key live ([`Error::RowsMoved`]), when a key is
    /// located twice or written twice, when a key not located is present, and on a table with
    /// stable row ids (whose row ids are not addresses).
    pub async fn replace_at(&mut self, rows: Vec<RecordBatch>, located: Located) -> Result<WriteOutcome> {
        let rows = conform(&rows, &self.arrow_schema)?;
        let UniqueKeys { keys: written, exact: written_hashes } = self.unique_keys(&rows)?;
        let removed = self.key.keys_of_all(&located.keys)?;
        self.check_located(&removed, &located.addresses)?;
        self.verify_addresses(&removed, &located.addresses).await?;
        let removed_set: KeySet<'_> = removed.iter().collect();
        let inserted: Vec<KeyValue> = written.iter().filter(|k| !removed_set.contains(k)).cloned().collect();
        let present = present_keys(&self.dataset, &self.key, &inserted).await?;
        if !present.is_empty() {
            return Err(Error::RowsMoved {
                version: self.dataset.manifest().version,
                detail: format!("key(s) {} are present but were not located", sample(&present)),
            });
        }
        let updated = written.len() - inserted.len();
        let mut outcome = WriteOutcome {
            version: self.dataset.manifest().version,
            inserted: inserted.len() as u64,
            updated: updated as u64,
            deleted: (removed.len() - updated) as u64,
            attempts: 1,
            ..Default::default()
        };
        if rows.iter().all(|b| b.num_rows() == 0) && removed.is_empty() {
            return Ok(outcome);
        }
        let operation = self.stage_replacement(rows, &located.addresses).await?;
        let txn =
            self.with_declared_keys(lift(&operation), None, self.key.inserted_keys_of(&written, written_hashes)?)?;
        let commit = self
            .dataset
            .action_commit()
            .with_affected_rows(located.addresses.iter().collect::<RowAddrTreeMap>())
            .execute_actions(self.dataset.manifest().version, txn)
            .await;
        match judge(commit)? {
            Attempt::Landed(landed) => {
                self.record(*landed, &mut outcome);
                Ok(outcome)
            }
            // Every put lost, no writer judged against ours: the addresses still hold.
            Attempt::Again(last @ Interference::VersionTaken { .. }) => Err(Error::Contention { attempts: 1, last }),
            Attempt::Again(last) => Err(Error::AddressesOutdated { version: outcome.version, last }),
        }
    }

    /// Refuse what is wrong on its face: a count mismatch, a key or address given twice, stable
    /// row ids.
    fn check_located(&self, removed: &[KeyValue], addresses: &[u64]) -> Result<()> {
        if removed.len() != addresses.len() {
            return Err(Error::Input {
                detail: format!("{} located key(s) but {} address(es)", removed.len(), addresses.len()),
            });
        }
        let twice = duplicates(removed);
        if !twice.is_empty() {
            return Err(Error::Input { detail: format!("key(s) {} are located more than once", sample(&twice)) });
        }
        if addresses.iter().collect::<HashSet<_>>().len() != addresses.len() {
            return Err(Error::Input { detail: "a row address is given more than once".into() });
        }
        if self.dataset.manifest().uses_stable_row_ids() {
            return Err(Error::Input {
                detail: "this table uses stable row ids, whose row ids are not row addresses; use upsert".into(),
            });
        }
        Ok(())
    }

    /// Every address holds a live row with its key, at the handle's version.
    async fn verify_addresses(&self, removed: &[KeyValue], addresses: &[u64]) -> Result<()> {
        if addresses.is_empty() {
            return Ok(());
        }
        let moved = |detail: String| Error::RowsMoved { version: self.dataset.manifest().version, detail };
        self.refuse_dead_addresses(addresses).await?;
        let batch = self
            .dataset
            .take_builder(addresses, self.dataset.schema().project(&self.key.names).lance("projecting the key")?)
            .lance("reading the located rows")?
            .with_row_address(true)
            .execute()
            .await
            .lance("reading the located rows")?;
        let at: &UInt64Array = batch
            .column_by_name(ROW_ADDR)
            .and_then(|c| c.as_any().downcast_ref())
            .ok_or_else(|| moved("the located rows came back without addresses".into()))?;
        let found: BTreeMap<u64, KeyValue> = at.values().iter().copied().zip(self.key.keys_of(&batch, 0)?).collect();
        for (key, address) in removed.iter().zip(addresses) {
            match found.get(address) {
                Some(k) if k == key => {}
                Some(k) => {
                    return Err(moved(format!(
                        "row address {address} holds key {}, not {}",
                        crate::key::display_key(k),
                        crate::key::display_key(key)
                    )));
                }
                None => {
                    return Err(moved(format!(
                        "no live row at address {address} (key {})",
                        crate::key::display_key(key)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every address names a fragment of this version, within its rows, and a row its deletion
    /// vector does not hold. (Lance's take refuses deleted rows with an error, not a gap.)
    async fn refuse_dead_addresses(&self, addresses: &[u64]) -> Result<()> {
        let version = self.dataset.manifest().version;
        let moved = |detail: String| Error::RowsMoved { version, detail };
        let mut reads = Vec::new();
        for (id, offsets) in by_fragment(addresses) {
            let Some(file) = self.dataset.get_fragment(id as usize) else {
                let first = (id << 32) | offsets[0] as u64;
                return Err(moved(format!("fragment {id} of row address {first} is not in this version")));
            };
            reads.push(async move {
                let rows = file.metadata().physical_rows.unwrap_or(0);
                let deleted = file.get_deletion_vector().await.lance("reading a deletion vector")?;
                let dead = offsets
                    .iter()
                    .find(|o| (**o as usize) >= rows || deleted.as_ref().is_some_and(|dv| dv.contains(**o)));
                Ok::<_, Error>(dead.map(|o| (id << 32) | *o as u64))
            });
        }
        let dead: Vec<Option<u64>> = futures::stream::iter(reads).buffered(CONCURRENT_FILES).try_collect().await?;
        match dead.into_iter().flatten().next() {
            Some(a) => Err(moved(format!("no live row at address {a} (fragment {}, row {})", a >> 32, a as u32))),
            None => Ok(()),
        }
    }

    /// The new fragments of `rows` and the located fragments' new deletion vectors, as Lance's
    /// own row-rewrite `Update` (the shape its merge-insert stages).
    async fn stage_replacement(&self, rows: Vec<RecordBatch>, addresses: &[u64]) -> Result<Operation> {
        // One pass of Lance's writer, as for a strict insert (`write.rs`): the replacement is one commit.
        let new_fragments = stage::new_fragments(&self.dataset, rows, &Progress::default()).await?;
        let writes: Vec<_> = by_fragment(addresses)
            .into_iter()
            .map(|(id, offsets)| async move {
                Ok::<_, Error>((id, stage::delete_offsets(&self.dataset, id, offsets).await?))
            })
            .collect();
        let written: Vec<(u64, Option<Fragment>)> =
            futures::stream::iter(writes).buffered(CONCURRENT_FILES).try_collect().await?;
        let mut updated_fragments: Vec<Fragment> = Vec::new();
        let mut removed_fragment_ids = Vec::new();
        for (id, fragment) in written {
            match fragment {
                Some(fragment) => updated_fragments.push(fragment),
                None => removed_fragment_ids.push(id),
            }
        }
        let every_field = self.dataset.schema().fields_pre_order().map(|f| f.id as u32).collect();
        Ok(Operation::Update {
            removed_fragment_ids,
            updated_fragments,
            new_fragments,
            fields_modified: vec![],
            compacted_sstables: vec![],
            fields_for_preserving_frag_bitmap: every_field,
            update_mode: Some(UpdateMode::RewriteRows),
            inserted_rows_filter: None,
            updated_fragment_offsets: None,
        })
    }
}

/// Row offsets grouped by fragment id.
fn by_fragment(addresses: &[u64]) -> BTreeMap<u64, Vec<u32>> {
    let mut out: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for a in addresses {
        out.entry(a >> 32).or_default().push(*a as u32);
    }
    out
}
