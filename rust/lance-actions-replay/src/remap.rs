//! Re-binding a source commit's actions to the target: fragment ids, base ids, deletion vectors.
//!
//! - Fragments that existed at the merge base have the same id on both sides; fragments the source
//!   created later map to the ids their replays were given on the target ([`FragmentMap`]).
//! - New fragments are added with unbound ids (bound at apply); their files are grafted.
//! - A deletion-vector change carries the rows the source commit deleted and is merged with the
//!   target's vector at commit time: the deletion file is re-derived under the target's root for
//!   the target's fragment id, never pointed at a file whose name embeds another fragment's id.
//! - Operations that cannot be replayed are refused with the reason, before anything is written.

use std::collections::HashMap;

use lance_actions::actions::add_fragments::AddFragments;
use lance_actions::actions::add_index::AddIndex;
use lance_actions::actions::invalidate_index_coverage::InvalidateIndexCoverage;
use lance_actions::actions::merge_columns::MergeColumns;
use lance_actions::actions::remove_fragments::RemoveFragments;
use lance_actions::actions::replace_fragment_columns::{ColumnTarget, ReplaceFragmentColumns};
use lance_actions::actions::rewrite_fragments::RewriteFragments;
use lance_actions::actions::update_deletion_vector::UpdateDeletionVector;
use lance_actions::{Action, ActionTxn, AnyAction, TableState};
use lance_table::format::Fragment;
use lance_table::transaction::UpdatedFragmentOffsets;

use crate::graft::Graft;

/// Source fragment id -> target fragment id.
#[derive(Debug, Clone, Default)]
pub struct FragmentMap {
    /// Ids up to this one existed at the merge base: the same on both sides. `None`: the merge
    /// base never had a fragment, so every fragment is one a source commit created.
    pub fork_max: Option<u64>,
    pub created: HashMap<u64, u64>,
}

impl FragmentMap {
    pub fn new(fork_max: Option<u64>) -> Self {
        Self { fork_max, created: HashMap::new() }
    }

    pub fn target(&self, source: u64) -> Result<u64, String> {
        if self.fork_max.is_some_and(|max| source <= max) {
            return Ok(source);
        }
        self.created.get(&source).copied().ok_or_else(|| {
            format!("it touches fragment {source}, created by a source commit that is not replayed onto the target")
        })
    }

    /// Record that the source's new fragments (ascending ids) became these target ids (ascending).
    pub fn record(&mut self, source_new: &[u64], target_new: &[u64]) -> Result<(), String> {
        if source_new.len() != target_new.len() {
            return Err(format!(
                "the replay created {} fragment(s) where the source created {}",
                target_new.len(),
                source_new.len()
            ));
        }
        self.created.extend(source_new.iter().copied().zip(target_new.iter().copied()));
        Ok(())
    }
}

/// What remapping needs from the target.
pub struct RemapCx<'a> {
    pub graft: &'a mut Graft,
    pub fragments: &'a FragmentMap,
    /// The target's state the replay will be committed on.
    pub head: &'a TableState,
}

impl RemapCx<'_> {
    /// The target's fragment for a source id: the head's own object (so its deletion file is the
    /// target's), or the source's with the mapped id when the head no longer has it (the driver
    /// then reports what removed it).
    fn head_fragment(&self, source: &Fragment) -> Result<Fragment, String> {
        let id = self.fragments.target(source.id)?;
        Ok(self.head.fragment(id).cloned().unwrap_or_else(|| {
            let mut f = source.clone();
            f.id = id;
            f
        }))
    }
}

/// The source commit's actions, bound to the target. `Err` says why the commit cannot be replayed.
pub fn remap(source: &ActionTxn, cx: &mut RemapCx<'_>) -> Result<ActionTxn, String> {
    let mut context = source.context.clone();
    context.assigned_fragment_ids.clear();
    if let Some(UpdatedFragmentOffsets(offsets)) = &source.context.updated_fragment_offsets {
        let mut mapped = HashMap::new();
        for (id, rows) in offsets {
            mapped.insert(cx.fragments.target(*id)?, rows.clone());
        }
        context.updated_fragment_offsets = Some(UpdatedFragmentOffsets(mapped));
    }
    let mut actions = Vec::with_capacity(source.actions.len());
    for action in &source.actions {
        actions.push(remap_action(action, cx)?);
    }
    Ok(ActionTxn { context, actions })
}

fn remap_action(action: &AnyAction, cx: &mut RemapCx<'_>) -> Result<AnyAction, String> {
    Ok(match action {
        AnyAction::AddFragments(a) => {
            let fragments = a
                .fragments
                .iter()
                .map(|f| {
                    let mut g = cx.graft.fragment_files(f)?;
                    g.id = 0;
                    Ok(g)
                })
                .collect::<Result<_, String>>()?;
            AddFragments { fragments, keys: a.keys.clone() }.into()
        }
        AnyAction::RemoveFragments(r) => {
            RemoveFragments { ids: r.ids.iter().map(|id| cx.fragments.target(*id)).collect::<Result<_, _>>()? }.into()
        }
        AnyAction::UpdateDeletionVector(u) => {
            let rows = u
                .affected_rows
                .clone()
                .ok_or_else(|| format!("the rows deleted in fragment {} are not known", u.fragment.id))?;
            let mut udv = UpdateDeletionVector::new(cx.head_fragment(&u.fragment)?, Some(rows));
            // Written at commit time: the target's vector for its fragment, unioned with ours.
            udv.merge_with_head = true;
            udv.into()
        }
        AnyAction::InvalidateIndexCoverage(i) => InvalidateIndexCoverage {
            fragments: i.fragments.iter().map(|id| cx.fragments.target(*id)).collect::<Result<_, _>>()?,
            fields: i.fields.clone(),
        }
        .into(),
        AnyAction::ReplaceFragmentColumns(r) => ReplaceFragmentColumns {
            target: match &r.target {
                ColumnTarget::File { fragment_id, file } => ColumnTarget::File {
                    fragment_id: cx.fragments.target(*fragment_id)?,
                    file: cx.graft.data_file(file)?,
                },
                ColumnTarget::Rewritten { fragment, fields } => {
                    let head = cx.head_fragment(fragment)?;
                    let mut post = cx.graft.fragment_files(fragment)?;
                    post.id = head.id;
                    post.deletion_file = head.deletion_file.clone();
                    ColumnTarget::Rewritten { fragment: post, fields: fields.clone() }
                }
            },
        }
        .into(),
        AnyAction::MergeColumns(m) => {
            let fragments = m
                .fragments
                .iter()
                .map(|f| {
                    let head = cx.head_fragment(f)?;
                    let mut post = cx.graft.fragment_files(f)?;
                    post.id = head.id;
                    post.deletion_file = head.deletion_file.clone();
                    Ok(post)
                })
                .collect::<Result<Vec<_>, String>>()?;
            let mut theirs: Vec<u64> = fragments.iter().map(|f| f.id).collect();
            let mut ours: Vec<u64> = cx.head.fragments.keys().copied().collect();
            theirs.sort_unstable();
            ours.sort_unstable();
            if theirs != ours {
                return Err("a column merge restates every fragment, and the target's fragments differ".into());
            }
            MergeColumns { fragments }.into()
        }
        AnyAction::RewriteFragments(r) => {
            if !r.rewritten_indices.is_empty() || r.frag_reuse_index.is_some() {
                return Err("a compaction that remapped indexes refers to index files by the source's ids".into());
            }
            let mut groups = r.groups.clone();
            for g in &mut groups {
                g.old_fragments = g.old_fragments.iter().map(|f| cx.head_fragment(f)).collect::<Result<_, _>>()?;
                g.new_fragments = g
                    .new_fragments
                    .iter()
                    .map(|f| {
                        if f.deletion_file.is_some() {
                            return Err("a compacted fragment carries a deletion file".to_string());
                        }
                        let mut n = cx.graft.fragment_files(f)?;
                        n.id = 0;
                        Ok(n)
                    })
                    .collect::<Result<_, _>>()?;
            }
            RewriteFragments { groups, rewritten_indices: Vec::new(), frag_reuse_index: None }.into()
        }
        AnyAction::AddIndex(a) => {
            let index = cx.graft.index(&a.index)?;
            // The index's files address rows as (fragment id, offset): it can only be read where
            // every fragment it covers kept its id.
            if let Some(bitmap) = &a.index.fragment_bitmap {
                for id in bitmap {
                    let target = cx.fragments.target(u64::from(id))?;
                    if target != u64::from(id) {
                        return Err(format!(
                            "index '{}' addresses rows of fragment {id}, which is fragment {target} on the target; \
                             rebuild the index there instead",
                            a.index.name
                        ));
                    }
                }
            }
            AddIndex { index }.into()
        }
        AnyAction::RemoveIndex(_) | AnyAction::UpdateConfig(_) | AnyAction::ChangeSchema(_) => action.clone(),
        other => return Err(format!("{:?} is not replayable between branches", other.kind())),
    })
}

/// Commits that change nothing a target could take: the grafts of earlier replays (bases the
/// target gains by its own graft when needed) and fragment-id reservations (ids of the source's id
/// space; a replayed fragment gets its id on the target when it lands).
pub fn is_graft_only(txn: &ActionTxn) -> bool {
    !txn.actions.is_empty()
        && txn.actions.iter().all(|a| matches!(a, AnyAction::AddBases(_) | AnyAction::ReserveFragmentIds(_)))
}
