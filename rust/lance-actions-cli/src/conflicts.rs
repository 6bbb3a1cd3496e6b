//! Replay conflicts in the user's terms: keys instead of key hashes, logical branch names instead
//! of physical ones, versions as "branch (vN)", and what would resolve the conflict.

use std::collections::{BTreeMap, HashSet};

use std::sync::Arc;

use lance_actions::{ManifestPath, Rule};
use lance_actions_commit::judge::deleted_rows;
use lance_actions_commit::presence::{key_columns, key_rows};
use lance_actions_replay::lineage::{Chain, open_version};
use lance_actions_replay::provenance::new_fragment_ids;
use lance_actions_replay::{Branches, Conflict};
use roaring::RoaringBitmap;

/// A conflict as the output shows it.
pub struct Told {
    /// One sentence: what collided, on which branches and versions.
    pub message: String,
    /// The user keys involved, when the conflict is about keys and they could be read.
    pub keys: Vec<String>,
}

/// Physical branch -> logical name, to name branches as the user knows them.
pub type LogicalNames = BTreeMap<String, String>;

pub fn display_branch<'a>(physical: &'a str, logical: &'a LogicalNames) -> &'a str {
    logical.get(physical).map(String::as_str).unwrap_or(physical)
}

/// Describe `c`, a conflict of a replay onto the logical branch `target`.
pub async fn tell(b: &Branches, c: &Conflict, target: &str, logical: &LogicalNames) -> Told {
    let source = format!("{} (v{})", display_branch(&c.source_branch, logical), c.source_version);
    let theirs = match c.reason.peer_version {
        Some(v) => format!("{target} (v{v})"),
        None => target.to_string(),
    };
    match c.reason.rule {
        Rule::KeysPresent if !c.keys.is_empty() => Told {
            message: format!("{} inserted on {source} already on {theirs}", keys_phrase(&c.keys)),
            keys: c.keys.clone(),
        },
        Rule::KeysIntersect => match shared_keys(b, c, target).await {
            Some(keys) if !keys.is_empty() => {
                Told { message: format!("{} inserted on both {source} and {theirs}", keys_phrase(&keys)), keys }
            }
            _ => Told { message: generic(c, &source, &theirs, logical), keys: Vec::new() },
        },
        Rule::RowsOverlap => match overlapping_row_keys(b, c, target).await {
            Some(keys) if !keys.is_empty() => Told {
                message: format!("{} deleted or rewritten on both {source} and {theirs}", row_keys_phrase(&keys)),
                keys,
            },
            _ => Told { message: generic(c, &source, &theirs, logical), keys: Vec::new() },
        },
        _ => Told { message: generic(c, &source, &theirs, logical), keys: Vec::new() },
    }
}

/// "the row with key 2", "the rows with keys 2, 3".
fn row_keys_phrase(keys: &[String]) -> String {
    let rows = if keys.len() == 1 { "the row with" } else { "the rows with" };
    format!("{rows} {}", keys_phrase(keys))
}

/// "key 50", "keys 50, 51, 52", "keys 1, 2, 3, 4, 5 and 7 more".
fn keys_phrase(keys: &[String]) -> String {
    const SHOWN: usize = 5;
    let shown: Vec<&str> = keys.iter().take(SHOWN).map(String::as_str).collect();
    let more = if keys.len() > SHOWN { format!(" and {} more", keys.len() - SHOWN) } else { String::new() };
    let word = if keys.len() == 1 { "key" } else { "keys" };
    format!("{word} {}{more}", shown.join(", "))
}

/// What the rule means, in a few words a user can act on.
fn rule_phrase(rule: &Rule) -> &'static str {
    match rule {
        Rule::RowsOverlap => "the same rows were deleted or rewritten on both",
        Rule::RowsUnknown => "rows changed on both, and which rows cannot be told apart",
        Rule::FragmentGone => "a fragment it changes was removed or rewritten",
        Rule::DataFilesChanged => "the data files of a fragment it changes were changed",
        Rule::KeysIntersect => "both inserted the same keys",
        Rule::KeysUnverifiable => "one side inserted keys it did not declare",
        Rule::SchemaChanged => "the schema changed under it",
        Rule::IndexClash => "both wrote the same index",
        Rule::ConfigClash => "both wrote the same config key",
        Rule::BaselineReplaced => "the table was overwritten or restored",
        Rule::KeysPresent => "keys it inserts are already there",
        Rule::BranchRetired => "the branch was rebased, squashed or deleted meanwhile",
        _ => "the changes do not commute",
    }
}

/// Any other conflict: both sides, their actions, the rule in words, the path.
fn generic(c: &Conflict, source: &str, theirs: &str, logical: &LogicalNames) -> String {
    let r = &c.reason;
    let theirs_action = r.peer_action.map(|a| format!(" {a:?}")).unwrap_or_default();
    let mut out =
        format!("{source} {:?} conflicts with {theirs}{theirs_action}: {} ({:?}", r.ours, rule_phrase(&r.rule), r.rule);
    if let Some(p) = &r.path {
        out.push_str(&format!(" on {p}"));
    }
    out.push(')');
    if !r.detail.is_empty() && !matches!(r.rule, Rule::KeysIntersect) {
        out.push_str(&format!("; {}", with_logical_names(&r.detail, logical)));
    }
    out
}

/// A library detail that quotes physical branch names (`'feature.3f9a0c1d'`), with logical ones.
pub fn with_logical_names(text: &str, logical: &LogicalNames) -> String {
    let mut out = text.to_string();
    for (physical, name) in logical {
        out = out.replace(&format!("'{physical}'"), &format!("'{name}'"));
    }
    out
}

/// The keys both the source commit and the target's conflicting commit inserted, read from the
/// fragments each commit created (`None` when the table is not keyed or they cannot be read: the
/// message then falls back to the rule). The model only compares key hashes; the keys themselves
/// are in the data.
async fn shared_keys(b: &Branches, c: &Conflict, target: &str) -> Option<Vec<String>> {
    let peer_version = c.reason.peer_version?;
    let root = b.root().await.ok()?;
    let source: Chain = (c.source_branch != "main").then(|| c.source_branch.clone());
    let target_chain = b.resolve(target).await.ok()?;
    let source_ds = open_version(&root, &source, c.source_version).await.ok()?;
    let key = key_columns(&source_ds)?;
    let target_ds = open_version(&root, &target_chain, peer_version).await.ok()?;
    let source_new = new_fragment_ids(&root, &source, c.source_version).await.ok()?;
    let target_new = new_fragment_ids(&root, &target_chain, peer_version).await.ok()?;
    let theirs: HashSet<u64> =
        key_rows(&target_ds, &key, Some(&target_new)).await.ok()?.into_iter().map(|r| r.hash).collect();
    let mut keys: Vec<String> = key_rows(&source_ds, &key, Some(&source_new))
        .await
        .ok()?
        .into_iter()
        .filter(|r| theirs.contains(&r.hash))
        .map(|r| r.key)
        .collect();
    keys.sort();
    keys.dedup();
    Some(keys)
}

/// The keys of the rows both commits deleted (a delete, or the delete half of an update) in the
/// fragment the conflict names, on a keyed table; `None` when that cannot be read. The model knows
/// row offsets only; the keys are read from the fragment as it was before the source deleted them.
async fn overlapping_row_keys(b: &Branches, c: &Conflict, target: &str) -> Option<Vec<String>> {
    let Some(ManifestPath::Fragment { id, .. }) = &c.reason.path else { return None };
    let peer_version = c.reason.peer_version?;
    let root = b.root().await.ok()?;
    let source: Chain = (c.source_branch != "main").then(|| c.source_branch.clone());
    let target_chain = b.resolve(target).await.ok()?;
    let ours = newly_deleted(&root, &source, c.source_version, *id).await?;
    let theirs = newly_deleted(&root, &target_chain, peer_version, *id).await?;
    let both = &ours & &theirs;
    if both.is_empty() {
        return None;
    }
    let before = open_version(&root, &source, c.source_version.checked_sub(1)?).await.ok()?;
    let key = key_columns(&before)?;
    let mut keys: Vec<String> = key_rows(&before, &key, Some(&[*id]))
        .await
        .ok()?
        .into_iter()
        .filter(|r| r.fragment == *id && both.contains(r.offset))
        .map(|r| r.key)
        .collect();
    keys.sort();
    keys.dedup();
    Some(keys)
}

/// The rows of fragment `id` that `version` of `chain` deleted (its deletion vector minus the
/// previous version's).
async fn newly_deleted(root: &lance::Dataset, chain: &Chain, version: u64, id: u64) -> Option<RoaringBitmap> {
    let deleted_at = |v: u64| async move {
        let ds = Arc::new(open_version(root, chain, v).await.ok()?);
        let fragment = ds.manifest().fragments.iter().find(|f| f.id == id)?.clone();
        deleted_rows(&ds, &fragment).await.ok()
    };
    let after = deleted_at(version).await?;
    let before = deleted_at(version.checked_sub(1)?).await?;
    Some(after - before)
}

/// What would resolve the conflicts of `operation` from `source` onto `target`. Running the same
/// replay again meets the same commits, so it never says "retry".
pub fn resolution(operation: &str, source: &str, target: &str) -> String {
    match operation {
        "rebase" => format!(
            "resolve on '{source}' (change or undo its conflicting commits so they commute with '{target}'), \
             then rebase again; --dry-run shows the outcome without writing"
        ),
        "squash" => "the range cannot be made one commit as it is; squash a smaller range".to_string(),
        _ => format!(
            "resolve on '{source}' (change or undo the conflicting commits, or rebase '{source}' onto \
             '{target}' and resolve there), then {operation} again; --dry-run shows the outcome without writing"
        ),
    }
}
