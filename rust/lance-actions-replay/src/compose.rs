//! Squash: the composition of a range of commits as one commit.
//!
//! Composes appends, deletes and row updates (the actions `AddFragments`, `RemoveFragments`,
//! `UpdateDeletionVector`, `InvalidateIndexCoverage`): a fragment added in the range and removed
//! later in it never appears; deletions in one fragment are unioned. What one Lance operation
//! cannot carry is refused with the reason.

use std::collections::{BTreeMap, BTreeSet};

use lance_actions::actions::add_fragments::AddFragments;
use lance_actions::actions::invalidate_index_coverage::InvalidateIndexCoverage;
use lance_actions::actions::remove_fragments::RemoveFragments;
use lance_actions::actions::update_deletion_vector::UpdateDeletionVector;
use lance_actions::{Action, ActionTxn, AnyAction, OperationKind};
use lance_table::format::Fragment;
use lance_table::transaction::UpdateMode;
use roaring::RoaringBitmap;

use crate::replay::SourceCommit;

/// One commit whose actions are the composition of `range` (oldest first, all on one chain).
pub fn compose(range: &[SourceCommit]) -> Result<SourceCommit, String> {
    let Some(last) = range.last() else {
        return Err("the range is empty".into());
    };
    let mut added: BTreeMap<u64, Fragment> = BTreeMap::new();
    let mut removed: BTreeSet<u64> = BTreeSet::new();
    let mut deleted: BTreeMap<u64, (Fragment, RoaringBitmap)> = BTreeMap::new();
    let mut invalidated: (BTreeSet<u64>, Vec<u32>) = (BTreeSet::new(), Vec::new());
    let mut keyed = false;
    for commit in range {
        let mut new_ids = commit.new_ids.iter();
        for action in &commit.actions.actions {
            match action {
                AnyAction::AddFragments(a) => {
                    if a.keys.is_some() {
                        keyed = true;
                    }
                    for f in &a.fragments {
                        let id = new_ids.next().ok_or_else(|| {
                            format!("version {} added more fragments than it created", commit.version)
                        })?;
                        added.insert(*id, f.clone());
                    }
                }
                AnyAction::RemoveFragments(r) => {
                    for id in &r.ids {
                        if added.remove(id).is_none() {
                            removed.insert(*id);
                            deleted.remove(id);
                        }
                    }
                }
                AnyAction::UpdateDeletionVector(u) => {
                    if added.contains_key(&u.fragment.id) {
                        return Err(format!(
                            "version {} deletes rows of fragment {}, added within the range: one commit cannot add a \
                             fragment with deletions",
                            commit.version, u.fragment.id
                        ));
                    }
                    let rows = u.affected_rows.clone().unwrap_or_default();
                    let entry =
                        deleted.entry(u.fragment.id).or_insert_with(|| (u.fragment.clone(), RoaringBitmap::new()));
                    entry.1 |= rows;
                }
                AnyAction::InvalidateIndexCoverage(i) => {
                    invalidated.0.extend(i.fragments.iter().copied());
                    for f in &i.fields {
                        if !invalidated.1.contains(f) {
                            invalidated.1.push(*f);
                        }
                    }
                }
                other => return Err(format!("squash composes appends, deletes and updates, not {:?}", other.kind())),
            }
        }
    }
    if keyed
        && range.iter().filter(|c| c.actions.actions.iter().any(|a| matches!(a, AnyAction::AddFragments(_)))).count()
            > 1
    {
        return Err("squashing several keyed inserts would need one key filter for all of them".into());
    }
    let keys = range.iter().flat_map(|c| c.actions.actions.iter()).find_map(|a| match a {
        AnyAction::AddFragments(a) => a.keys.clone(),
        _ => None,
    });
    let mut actions: Vec<AnyAction> = Vec::new();
    for (_, (fragment, rows)) in deleted {
        actions.push(UpdateDeletionVector::new(fragment, Some(rows)).into());
    }
    if !removed.is_empty() {
        actions.push(RemoveFragments { ids: removed.into_iter().collect() }.into());
    }
    let new_ids: Vec<u64> = added.keys().copied().collect();
    let has_new = !added.is_empty();
    let has_changes = !actions.is_empty();
    if has_new {
        actions.push(AddFragments { fragments: added.into_values().collect(), keys }.into());
    }
    let shell = match (has_new, has_changes) {
        (true, false) if keys_absent(&actions) => OperationKind::Append,
        (false, _) => OperationKind::Delete,
        _ => OperationKind::Update,
    };
    if !invalidated.0.is_empty() {
        if shell != OperationKind::Update {
            return Err("an index-coverage change needs an update in the range".into());
        }
        actions.push(
            InvalidateIndexCoverage { fragments: invalidated.0.into_iter().collect(), fields: invalidated.1 }.into(),
        );
    }
    let mut txn = ActionTxn::new(shell, actions);
    if shell == OperationKind::Update {
        txn.context.update_mode = Some(UpdateMode::RewriteRows);
    }
    Ok(SourceCommit {
        chain: last.chain.clone(),
        version: last.version,
        actions: txn,
        new_ids,
        origins: range.iter().flat_map(|c| c.origins.iter().cloned()).collect(),
    })
}

fn keys_absent(actions: &[AnyAction]) -> bool {
    actions.iter().all(|a| !matches!(a, AnyAction::AddFragments(AddFragments { keys: Some(_), .. })))
}
