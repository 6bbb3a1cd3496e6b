//! Key presence on replay. A replayed insert into a keyed table must find every key it inserts
//! absent on the target at the commit it lands on, or it is a `KeysPresent` conflict with the keys.
//!
//! The source proved its keys absent on the source (the keyed writer's preflight), never on the
//! target: a commit cherry-picked without the delete that preceded it, or a branch that deleted a
//! key the target still holds and then inserted it again, would duplicate the key. So each replay
//! probes the target at the head it binds on (its read version), net of the rows the replay itself
//! deletes and, in a plan, of what the replays planned before it delete and insert. Writers landing
//! after the read version are fenced by the driver's key sets (a committed insert of the same key is
//! `KeysIntersect`, an undeclared one `KeysUnverifiable`); the commit's Retry re-binds and probes
//! again, so the proof holds at the version the replay lands on.
//!
//! Convergent changes are no-ops (OmniGraph's merge truth table): a replay whose every inserted row
//! is already on the target with the same values, and whose every deleted row is already deleted
//! there, changes nothing and is skipped instead of reported as a conflict.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use lance::Dataset;
use lance_actions::{ActionKind, ActionTxn, AnyAction, Reason, Rule, TableState};
use lance_actions_commit::judge::deleted_rows;
use lance_actions_commit::presence::{KeyRow, key_rows, rows_with_keys};
use roaring::RoaringBitmap;

use crate::error::Result;
use crate::replay::SourceCommit;

/// Rows the target head still shows but that are gone where the replay lands (its own deletions,
/// and in a plan those of the replays planned before it), and the rows the planned replays insert.
#[derive(Debug, Default, Clone)]
pub(crate) struct KeyState {
    deleted: HashMap<u64, RoaringBitmap>,
    removed: HashSet<u64>,
    /// Rows inserted by planned replays, under the target fragment ids the model bound.
    planned: Vec<KeyRow>,
}

impl KeyState {
    /// The rows a bound transaction deletes.
    pub fn deleted_by(txn: &ActionTxn) -> Self {
        let mut state = Self::default();
        state.hide(txn);
        state
    }

    /// Record the deletions of a transaction that lands before the one being checked.
    pub fn hide(&mut self, txn: &ActionTxn) {
        for action in &txn.actions {
            match action {
                AnyAction::UpdateDeletionVector(u) => {
                    if let Some(rows) = &u.affected_rows {
                        *self.deleted.entry(u.fragment.id).or_default() |= rows;
                    }
                }
                AnyAction::RemoveFragments(r) => self.removed.extend(r.ids.iter().copied()),
                // A compaction moves rows to new fragments: they stay present (conservative).
                _ => {}
            }
        }
    }

    /// Record the rows a planned replay inserted: source fragment ids become the bound target ids.
    pub fn insert(&mut self, rows: Vec<KeyRow>, source_new: &[u64], target_new: &[u64]) {
        let ids: HashMap<u64, u64> = source_new.iter().copied().zip(target_new.iter().copied()).collect();
        for mut row in rows {
            if let Some(id) = ids.get(&row.fragment) {
                row.fragment = *id;
                self.planned.push(row);
            }
        }
    }

    pub fn hides(&self, row: &KeyRow) -> bool {
        self.removed.contains(&row.fragment) || self.deleted.get(&row.fragment).is_some_and(|d| d.contains(row.offset))
    }

    fn deleted_in(&self, fragment: u64) -> RoaringBitmap {
        self.deleted.get(&fragment).cloned().unwrap_or_default()
    }
}

/// What a replayed insert adds and which of its keys the target holds where it lands.
#[derive(Debug)]
pub(crate) struct Probe {
    /// The source rows the replay inserts (source fragment ids).
    pub inserted: Vec<KeyRow>,
    /// The target's live rows holding one of those keys.
    pub present: Vec<KeyRow>,
}

/// Does the bound transaction insert rows?
pub(crate) fn inserts_rows(txn: &ActionTxn) -> bool {
    txn.actions.iter().any(|a| matches!(a, AnyAction::AddFragments(f) if !f.fragments.is_empty()))
}

/// Probe the target head for the keys `step` inserts, net of `txn`'s own deletions and of `before`.
pub(crate) async fn probe(
    key: &[String],
    target: &Dataset,
    source: &Dataset,
    step: &SourceCommit,
    txn: &ActionTxn,
    before: &KeyState,
) -> Result<Probe> {
    let inserted = key_rows(source, key, Some(&step.new_ids)).await?;
    let hashes: HashSet<u64> = inserted.iter().map(|r| r.hash).collect();
    let own = KeyState::deleted_by(txn);
    let mut present = rows_with_keys(target, key, &hashes).await?;
    present.extend(before.planned.iter().filter(|r| hashes.contains(&r.hash)).cloned());
    present.retain(|r| !before.hides(r) && !own.hides(r));
    Ok(Probe { inserted, present })
}

impl Probe {
    /// The conflict naming the keys already on the target (sorted, each once).
    pub fn reason(&self, target: &str, head_version: u64) -> Reason {
        let keys = self.present_keys();
        let first: Vec<&str> = keys.iter().take(10).map(String::as_str).collect();
        Reason {
            rule: Rule::KeysPresent,
            ours: ActionKind::AddFragments,
            peer_version: Some(head_version),
            peer_action: None,
            path: None,
            detail: format!(
                "{} key(s) inserted by the replay are already on '{target}' at v{head_version}: {}{}",
                keys.len(),
                first.join(", "),
                if keys.len() > first.len() { ", ..." } else { "" }
            ),
        }
    }

    pub fn present_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.present.iter().map(|r| r.key.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Is the replay a no-op on the target: every row it inserts already there with the same
    /// values (exactly once), every row it deletes already deleted, nothing else changed?
    pub async fn converges(
        &self,
        txn: &ActionTxn,
        target: &Arc<Dataset>,
        head: &TableState,
        before: &KeyState,
    ) -> Result<bool> {
        if self.inserted.is_empty() {
            return Ok(false);
        }
        for row in &self.inserted {
            let mut same = self.present.iter().filter(|p| p.hash == row.hash);
            match (same.next(), same.next()) {
                (Some(theirs), None) if theirs.same_values(row) => {}
                _ => return Ok(false),
            }
        }
        for action in &txn.actions {
            let done = match action {
                AnyAction::AddFragments(_) | AnyAction::InvalidateIndexCoverage(_) => true,
                AnyAction::UpdateDeletionVector(u) => {
                    let Some(rows) = &u.affected_rows else { return Ok(false) };
                    let mut gone = before.deleted_in(u.fragment.id);
                    match target.manifest().fragments.iter().find(|f| f.id == u.fragment.id) {
                        Some(f) => gone |= deleted_rows(target, f).await?,
                        None if head.fragment(u.fragment.id).is_none() => return Ok(false),
                        None => {}
                    }
                    rows.is_subset(&gone)
                }
                AnyAction::RemoveFragments(r) => r.ids.iter().all(|id| head.fragment(*id).is_none()),
                _ => false,
            };
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
