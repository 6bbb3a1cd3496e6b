//! The three-way keyed merge of graph branches.
//!
//! 1. Merge base: the common ancestor of the two heads over the graph lineage (a merge commit has
//!    two parents) with the least total distance, ties to the newest.
//! 2. `AlreadyUpToDate` when the source adds nothing; `FastForward` when the target has not moved
//!    since the base (the target's head becomes the source's commit: every table by reference).
//! 3. Otherwise, per type: nothing when the source did not move the table; the source's table by
//!    reference when the target did not; else the row truth table over the ids the source touched
//!    since the base (found from the fragment lists, `delta.rs`), read in bounded chunks.
//! 4. Row conflicts and constraint violations of the merged candidate are reported together; with
//!    any, nothing is written. Otherwise the tables land and one manifest commit publishes them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::conflict::{Conflict, ConflictKind};
use crate::delta::{SideDelta, side_delta, side_delta_over};
use crate::error::{Error, GraphOp, Moved, Result};
use crate::graph::Graph;
use crate::manifest::{self, GraphCommit, ManifestView};
use crate::schema::TypeDef;
use crate::table::{self, TableWrite};
use crate::validate::{ChangeSet, TypeChange, validate};
use crate::value::Row;
use lance_actions_commit::progress::Progress;
use lance_actions_commit::retry::RetryPolicy;

/// What to do with a row conflict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Report it (the default).
    #[default]
    Fail,
    /// Keep the target's row.
    Ours,
    /// Take the source's row.
    Theirs,
}

#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    pub dry_run: bool,
    /// Merge an id updated on both sides property by property.
    pub cells: bool,
    pub strategy: Strategy,
    /// Told after each type is examined ("types examined") and each table lands ("tables written").
    pub progress: Progress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    AlreadyUpToDate,
    FastForward,
    Merged,
    Conflicted,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::AlreadyUpToDate => "already_up_to_date",
            Outcome::FastForward => "fast_forward",
            Outcome::Merged => "merged",
            Outcome::Conflicted => "conflicted",
        }
    }
}

/// What a merge did (or, on a dry run, would do).
#[derive(Debug, Clone)]
pub struct MergeReport {
    pub outcome: Outcome,
    pub conflicts: Vec<Conflict>,
    pub base: String,
    /// The target's new head (unchanged on a dry run, a conflict or already-up-to-date).
    pub commit: Option<String>,
    /// Per type: ids the source touched since the base (read and compared), ids written.
    pub examined: BTreeMap<String, usize>,
    pub written: BTreeMap<String, usize>,
    /// Types whose table the target took from the source by reference.
    pub adopted: Vec<String>,
    pub attempts: usize,
    /// Wall time of each phase of the last attempt, in order: `detect` (the deltas and the truth
    /// table), `validate`, `land` (the table commits), `publish` (the manifest commit).
    pub phases: Vec<(&'static str, std::time::Duration)>,
}

/// The common ancestor of two commits with the least total distance (ties: the newest).
pub fn merge_base(view: &ManifestView, a: &str, b: &str) -> Option<String> {
    let da = distances(view, a);
    let db = distances(view, b);
    da.iter()
        .filter_map(|(id, x)| db.get(id).map(|y| (id, x + y)))
        .min_by(|(i1, d1), (i2, d2)| {
            let seq = |id: &str| view.commits.get(id).map(|c| c.seq).unwrap_or(0);
            d1.cmp(d2).then(seq(i2).cmp(&seq(i1)))
        })
        .map(|(id, _)| id.clone())
}

/// Shortest distance from `from` to each ancestor (itself included), over both parents.
fn distances(view: &ManifestView, from: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let mut frontier = vec![from.to_string()];
    let mut d = 0;
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for id in frontier {
            if out.contains_key(&id) {
                continue;
            }
            out.insert(id.clone(), d);
            if let Some(c) = view.commits.get(&id) {
                next.extend(c.parents.iter().cloned());
            }
        }
        frontier = next;
        d += 1;
    }
    out
}

/// One id's fate under the truth table.
#[derive(Debug, PartialEq)]
pub enum Decision {
    KeepTarget,
    /// Write this row onto the target (`None`: delete the id).
    Take(Option<Row>),
    Conflict(ConflictKind, String),
}

/// The row truth table (and, with `cells`, the property-wise merge of a both-updated id).
pub fn decide(t: &TypeDef, b: Option<&Row>, s: Option<&Row>, tg: Option<&Row>, opts: &MergeOptions) -> Decision {
    if s == b || s == tg {
        return Decision::KeepTarget;
    }
    if tg == b {
        return Decision::Take(s.cloned());
    }
    let (kind, message) = match (b, s, tg) {
        (None, _, _) => (ConflictKind::DivergentInsert, "inserted on both branches with different values".to_string()),
        (Some(_), None, Some(_)) => {
            (ConflictKind::DeleteVsUpdate, "deleted on the source, updated on the target".into())
        }
        (Some(_), Some(_), None) => {
            (ConflictKind::DeleteVsUpdate, "updated on the source, deleted on the target".into())
        }
        (Some(b), Some(s), Some(tg)) => {
            if opts.cells {
                match merge_cells(t, b, s, tg) {
                    Ok(row) if &row == tg => return Decision::KeepTarget,
                    Ok(row) => return Decision::Take(Some(row)),
                    Err(props) => (
                        ConflictKind::DivergentUpdate,
                        format!("both branches changed {} differently", props.join(", ")),
                    ),
                }
            } else {
                (ConflictKind::DivergentUpdate, "updated differently on both branches".into())
            }
        }
        // s == b == None was handled above (source unchanged).
        (Some(_), None, None) => return Decision::KeepTarget,
    };
    match opts.strategy {
        Strategy::Fail => Decision::Conflict(kind, message),
        Strategy::Ours => Decision::KeepTarget,
        Strategy::Theirs => Decision::Take(s.cloned()),
    }
}

/// Property-wise three-way merge; the properties both sides changed differently on failure.
fn merge_cells(t: &TypeDef, b: &Row, s: &Row, tg: &Row) -> std::result::Result<Row, Vec<String>> {
    let mut out = Vec::with_capacity(b.len());
    let mut clashes = Vec::new();
    for (i, c) in t.columns.iter().enumerate() {
        let v = if s[i] == b[i] || s[i] == tg[i] {
            tg[i].clone()
        } else if tg[i] == b[i] {
            s[i].clone()
        } else {
            clashes.push(c.name.clone());
            tg[i].clone()
        };
        out.push(v);
    }
    if clashes.is_empty() { Ok(out) } else { Err(clashes) }
}

/// A staged three-way result: per type, what to do to the target.
struct Staged {
    conflicts: Vec<Conflict>,
    changes: ChangeSet,
    /// Types taken from the source by reference.
    adopted: Vec<String>,
    examined: BTreeMap<String, usize>,
    /// Per type: where the target holds each id the merge rewrites or deletes (row addresses).
    located: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Graph {
    /// Merge graph branch `source` into `target`.
    pub async fn merge(&self, source: &str, target: &str, opts: &MergeOptions) -> Result<MergeReport> {
        if source == target {
            return Err(Error::SameBranch { name: source.to_string() });
        }
        let mut attempts = RetryPolicy::default().attempts();
        let mut last = Moved::Branch;
        while let Some(attempt) = attempts.next().await {
            let view = self.view().await?;
            let s_head = view.head(source)?.clone();
            let t_head = view.head(target)?.clone();
            let base_id = merge_base(&view, &s_head.id, &t_head.id)
                .ok_or_else(|| Error::NoCommonAncestor { source_branch: source.into(), target: target.into() })?;
            let mut report = MergeReport {
                outcome: Outcome::AlreadyUpToDate,
                conflicts: vec![],
                base: base_id.clone(),
                commit: None,
                examined: BTreeMap::new(),
                written: BTreeMap::new(),
                adopted: vec![],
                attempts: attempt,
                phases: vec![],
            };
            if s_head.id == t_head.id || base_id == s_head.id {
                return Ok(report);
            }
            if base_id == t_head.id {
                report.outcome = Outcome::FastForward;
                report.adopted = self.schema().types.keys().cloned().collect();
                if opts.dry_run {
                    return Ok(report);
                }
                // The target's head becomes the source's commit: no table is touched.
                match manifest::publish(self.root(), target, Some(&t_head.id), &s_head, false).await {
                    Ok(()) => {
                        report.commit = Some(s_head.id.clone());
                        return Ok(report);
                    }
                    Err(manifest::Publish::Moved) => {
                        last = Moved::Branch;
                        continue;
                    }
                    Err(manifest::Publish::Failed(e)) => return Err(e),
                }
            }
            let base = view.commit(&base_id)?.clone();
            let staged = self.stage(&base, &s_head, &t_head, opts, &mut report.phases).await?;
            report.examined = staged.examined.clone();
            report.adopted = staged.adopted.clone();
            if !staged.conflicts.is_empty() {
                report.outcome = Outcome::Conflicted;
                report.conflicts = staged.conflicts;
                return Ok(report);
            }
            report.outcome = Outcome::Merged;
            let writes = writes_of(&staged.changes, &staged.adopted, &staged.located);
            report.written = writes.iter().map(|(t, w)| (t.clone(), w.upserts.len() + w.deletes.len())).collect();
            if opts.dry_run {
                return Ok(report);
            }
            let clock = std::time::Instant::now();
            let landed = self.land(&t_head, target, &writes, &opts.progress).await?;
            report.phases.push(("land", clock.elapsed()));
            let mut tables = match landed {
                Ok(tables) => tables,
                Err(moved) => {
                    last = moved;
                    continue;
                }
            };
            for name in &staged.adopted {
                tables.insert(name.clone(), s_head.tables[name].clone());
            }
            let commit = GraphCommit::new(target, vec![t_head.id.clone(), s_head.id.clone()], tables);
            let clock = std::time::Instant::now();
            let published = self.publish(target, &t_head.id, &commit).await?;
            report.phases.push(("publish", clock.elapsed()));
            if published {
                report.commit = Some(commit.id);
                return Ok(report);
            }
            last = Moved::Branch;
        }
        Err(Error::Contention { branch: target.into(), what: GraphOp::Merge, attempts: attempts.made(), last })
    }

    /// Classify every type and validate the merged candidate.
    async fn stage(
        &self,
        base: &GraphCommit,
        s: &GraphCommit,
        tg: &GraphCommit,
        opts: &MergeOptions,
        phases: &mut Vec<(&'static str, std::time::Duration)>,
    ) -> Result<Staged> {
        let clock = std::time::Instant::now();
        let mut staged = Staged {
            conflicts: vec![],
            changes: ChangeSet::new(),
            adopted: vec![],
            examined: BTreeMap::new(),
            located: BTreeMap::new(),
        };
        let target_snap = self.snapshot(tg).await?;
        let total = self.schema().types.len();
        for (i, t) in self.schema().types.values().enumerate() {
            opts.progress.tell("types examined", i, total);
            let (rb, rs, rt) = (self.table_ref(base, t)?, self.table_ref(s, t)?, self.table_ref(tg, t)?);
            if same_state(rs, rb) || same_state(rs, rt) {
                continue;
            }
            let table_root = table::open_root(self.root(), t).await?;
            let (base_ds, source_ds) =
                futures::try_join!(table::checkout(&table_root, t, rb), table::checkout(&table_root, t, rs))?;
            let target_unchanged = same_state(rt, rb);
            let sd = side_delta(t, &base_ds, &source_ds).await?;
            // The target's rows for these ids: what it added, and which of the base rows the
            // source touched it removed (its own delta, over the source's ids only).
            let td = match target_unchanged {
                true => SideDelta::default(),
                false => side_delta_over(t, &base_ds, &target_snap.tables[&t.name], &sd).await?,
            };
            let ids = sd.ids();
            staged.examined.insert(t.name.clone(), ids.len());
            let change = self.classify(t, &ids, &sd, &td, opts, &mut staged.conflicts);
            if target_unchanged {
                // Taken by reference: nothing lands on the target's table, so nothing to locate.
                staged.adopted.push(t.name.clone());
            } else {
                let located: BTreeMap<String, u64> = change
                    .upserts
                    .keys()
                    .chain(&change.deletes)
                    .filter_map(|id| target_address(id, &sd, &td).map(|a| (id.clone(), a)))
                    .collect();
                staged.located.insert(t.name.clone(), located);
            }
            if !change.is_empty() {
                staged.changes.insert(t.name.clone(), change);
            }
        }
        opts.progress.tell("types examined", total, total);
        phases.push(("detect", clock.elapsed()));
        let clock = std::time::Instant::now();
        staged.conflicts.extend(validate(self.schema(), &target_snap, &staged.changes).await?);
        phases.push(("validate", clock.elapsed()));
        staged.conflicts.sort();
        staged.conflicts.dedup();
        Ok(staged)
    }

    fn classify(
        &self,
        t: &TypeDef,
        ids: &BTreeSet<String>,
        source: &SideDelta,
        target: &SideDelta,
        opts: &MergeOptions,
        conflicts: &mut Vec<Conflict>,
    ) -> TypeChange {
        let mut change = TypeChange::default();
        for id in ids {
            let b = source.base_row(id);
            let (s, tg) = (source.row_after(id, b), target.row_after(id, b));
            match decide(t, b, s, tg, opts) {
                Decision::KeepTarget => {}
                Decision::Take(Some(row)) => {
                    change.upserts.insert(id.clone(), row);
                }
                Decision::Take(None) => {
                    change.deletes.insert(id.clone());
                }
                Decision::Conflict(kind, message) => {
                    conflicts.push(Conflict { type_key: t.key(), id: id.clone(), kind, message })
                }
            }
        }
        change
    }
}

/// Two refs designate the same rows (the same Lance branch and version).
fn same_state(a: &manifest::TableRef, b: &manifest::TableRef) -> bool {
    a.branch == b.branch && a.version == b.version
}

/// Where the target holds `id` at its version, when it does: its own added row's address; none
/// when the target removed it; else (the target did not touch it) the base row's address, which
/// the source's delta read, in a fragment the target still holds unchanged at that row.
fn target_address(id: &str, source: &SideDelta, target: &SideDelta) -> Option<u64> {
    if let Some(at) = target.added_at.get(id) {
        return Some(*at);
    }
    if target.removed.contains_key(id) {
        return None;
    }
    source.removed_at.get(id).copied()
}

/// Table writes for the types the merge changes on the target (adopted types take a reference).
/// Each lands as one `replace_at` at the addresses the change detection found.
fn writes_of(
    changes: &ChangeSet,
    adopted: &[String],
    located: &BTreeMap<String, BTreeMap<String, u64>>,
) -> BTreeMap<String, TableWrite> {
    changes
        .iter()
        .filter(|(name, _)| !adopted.contains(name))
        .map(|(name, c)| {
            let w = TableWrite {
                inserts: vec![],
                upserts: c.upserts.values().cloned().collect(),
                deletes: c.deletes.iter().cloned().collect(),
                located: Some(located.get(name).cloned().unwrap_or_default()),
            };
            (name.clone(), w)
        })
        .collect()
}
