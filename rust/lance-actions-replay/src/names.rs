//! Logical branch names decoupled from directories (Lance #7185).
//!
//! A logical name maps to a physical Lance branch whose directory carries a unique suffix
//! (`feature.3f9a0c1d` under `tree/`). The mapping lives in the name catalog
//! (`lance_actions_commit::branch_names`): put-if-absent snapshots under the table root, never a
//! version of main, so branch bookkeeping is no part of the table's history and is never replayed.
//! A rewrite (rebase, squash) or a delete first retires the old physical branch with a commit on
//! that branch at exactly the head it read (`lance_actions::retired`): that commit is the
//! compare-and-swap, and the name follows it even before the catalog is updated.
//! A Lance branch created by plain Lance or pylance has no mapping: its own name is its physical
//! name, and the mapping adopts it the first time this project writes through the name.

use std::collections::BTreeMap;
use std::sync::Arc;

use lance::Dataset;
use lance_actions::actions::update_config::UpdateConfig;
use lance_actions::path::ConfigMap;
use lance_actions::retired::RETIRED_KEY;
use lance_actions::{ActionTxn, OperationKind, Rule};
use lance_actions_commit::branch_names::{self, NameCatalog, TOMBSTONE, retirement};
use lance_actions_commit::retry::RetryPolicy;
use lance_actions_commit::{CommitError, DatasetActionsExt, hooks};
use lance_table::transaction::{UpdateMap, UpdateMapEntry};
use rand::Rng;

use crate::error::{Error, Interference, LanceContext, Result};
use crate::graft::normalise;
use crate::lineage::{Chain, chain_name, open_chain, open_version};

/// Config key prefix of the name mapping in datasets written before the catalog (read only).
pub const NAME_PREFIX: &str = branch_names::LEGACY_NAME_PREFIX;

/// The branches of one dataset, by logical name.
#[derive(Clone)]
pub struct Branches {
    uri: String,
}

/// How a retirement commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Retirement {
    Done,
    /// A write landed on the branch after the version the caller read: re-plan.
    Moved,
    /// Another rewrite or delete retired the branch first.
    Raced,
}

impl Branches {
    /// The branches of the dataset at `uri`. A local path is made absolute here, so that every
    /// location this project writes into a manifest (grafted bases, branch roots) is absolute and
    /// the table reads the same from any working directory.
    pub fn new(uri: &str) -> Self {
        Self { uri: absolute_uri(uri) }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Main at its latest version: the root every branch is opened from.
    pub async fn root(&self) -> Result<Dataset> {
        lance_actions_commit::storage::open(&self.uri).await.lance(format!("opening {}", self.uri))
    }

    /// The physical branch a logical name designates (`None` is main).
    pub async fn resolve(&self, logical: &str) -> Result<Chain> {
        let root = self.root().await?;
        Self::resolve_in(&root, logical).await
    }

    pub(crate) async fn resolve_in(root: &Dataset, logical: &str) -> Result<Chain> {
        Ok(branch_names::resolve(root, logical).await?)
    }

    /// Every logical name with its physical branch: mapped names, then Lance branches nobody maps
    /// to (adopted under their own name).
    pub async fn list(&self) -> Result<Vec<(String, String)>> {
        let root = self.root().await?;
        Ok(branch_names::list(&root).await?)
    }

    /// The catalog entry of `logical` (`None`: unmapped; `Some("")`: deleted).
    pub(crate) async fn mapped(&self, logical: &str) -> Result<Option<String>> {
        let root = self.root().await?;
        let names = NameCatalog::of(&root).await?.read(&root).await?;
        Ok(names.map.get(logical).cloned())
    }

    /// Create `logical` from `from` (at `version`, or its latest) under a fresh physical branch.
    pub async fn create(&self, logical: &str, from: &str, version: Option<u64>) -> Result<String> {
        check_name(logical)?;
        let mut root = self.root().await?;
        if Self::resolve_in(&root, logical).await.is_ok() {
            return Err(Error::BranchExists { name: logical.to_string() });
        }
        let source = Self::resolve_in(&root, from).await?;
        let version = match version {
            Some(v) => v,
            None => open_chain(&root, &source).await?.manifest().version,
        };
        let physical = physical_name(logical);
        root.create_branch(&physical, (chain_name(&source), version), None)
            .await
            .lance(format!("creating branch '{logical}'"))?;
        let current = self.mapped(logical).await?;
        if let Err(e) = self.swap(logical, current.as_deref(), Some(&physical)).await {
            let _ = root.force_delete_branch(&physical).await;
            return Err(match e {
                Error::NameRace { .. } => Error::BranchExists { name: logical.to_string() },
                other => other,
            });
        }
        Ok(physical)
    }

    /// Record the mapping of a Lance branch nobody maps yet under its own name.
    pub async fn adopt(&self, logical: &str) -> Result<Chain> {
        let root = self.root().await?;
        let chain = Self::resolve_in(&root, logical).await?;
        if logical != "main" && self.mapped(logical).await?.is_none() {
            match self.swap(logical, None, chain.as_deref()).await {
                // Someone else adopted it first: the name now maps where we found it.
                Ok(()) | Err(Error::NameRace { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(chain)
    }

    /// Compare-and-swap the catalog entry of `logical`: from `expected` (`None`: unmapped) to
    /// `new` (`None`: remove the entry). Changes to other names meanwhile are not a race.
    pub(crate) async fn swap(&self, logical: &str, expected: Option<&str>, new: Option<&str>) -> Result<()> {
        let root = self.root().await?;
        let catalog = NameCatalog::of(&root).await?;
        // Another name changing meanwhile fails the compare-and-swap; the project's one retry
        // policy spaces the rounds.
        let mut attempts = RetryPolicy::default().attempts();
        while attempts.next().await.is_some() {
            let names = catalog.read(&root).await?;
            if names.map.get(logical).map(String::as_str) != expected {
                return Err(Error::NameRace { name: logical.to_string() });
            }
            let mut map: BTreeMap<String, String> = names.map.clone();
            match new {
                Some(physical) => map.insert(logical.to_string(), physical.to_string()),
                None => map.remove(logical),
            };
            if catalog.put(&names, &map).await? {
                return Ok(());
            }
        }
        Err(Error::Contention {
            branch: logical.to_string(),
            attempts: attempts.made(),
            last: Interference::CatalogChanged,
        })
    }

    /// Retire `physical` into `successor` ("" for a delete) with a commit on it at exactly
    /// `read_head` + 1: the pure model refuses it if anything landed after `read_head`, and refuses
    /// every later write to the branch.
    pub(crate) async fn retire(
        &self,
        root: &Dataset,
        physical: &str,
        read_head: u64,
        successor: &str,
    ) -> Result<Retirement> {
        let at = Arc::new(open_version(root, &Some(physical.to_string()), read_head).await?);
        let txn = retirement_txn(Some(successor));
        match at.action_commit().execute_actions(read_head, txn).await {
            Ok(_) => Ok(Retirement::Done),
            Err(CommitError::Retry { reason, .. }) if reason.rule == Rule::BranchRetired => Ok(Retirement::Moved),
            Err(CommitError::Fail { reason, .. }) if reason.rule == Rule::BranchRetired => Ok(Retirement::Raced),
            Err(source) => Err(Error::Commit { source }),
        }
    }

    /// Lift the retirement of `physical` (a delete that found a reader after retiring it).
    async fn unretire(&self, root: &Dataset, physical: &str) -> Result<()> {
        let head = Arc::new(open_chain(root, &Some(physical.to_string())).await?);
        let version = head.manifest().version;
        head.action_commit()
            .execute_actions(version, retirement_txn(None))
            .await
            .map_err(|source| Error::Commit { source })?;
        Ok(())
    }

    /// Retire `physical` for a delete at whatever its head is, re-reading it when writes land.
    async fn retire_for_delete(&self, root: &Dataset, logical: &str, physical: &str) -> Result<()> {
        let mut attempts = RetryPolicy::default().attempts();
        while attempts.next().await.is_some() {
            let head = open_chain(root, &Some(physical.to_string())).await?.manifest().version;
            match self.retire(root, physical, head, TOMBSTONE).await? {
                Retirement::Done => return Ok(()),
                Retirement::Moved => continue,
                Retirement::Raced => return Err(Error::NameRace { name: logical.to_string() }),
            }
        }
        Err(Error::Contention {
            branch: logical.to_string(),
            attempts: attempts.made(),
            last: Interference::DeleteRaced,
        })
    }

    /// The branches that still read files of `physical`: through a grafted or inherited base path,
    /// or as Lance child branches.
    pub async fn dependants(&self, physical: &str) -> Result<Vec<String>> {
        let root = self.root().await?;
        let location = normalise(&open_chain(&root, &Some(physical.to_string())).await?.branch_location().uri);
        let branches = root.list_branches().await.lance("listing branches")?;
        let mut out = Vec::new();
        for (name, contents) in &branches {
            if name != physical && contents.parent_branch.as_deref() == Some(physical) {
                out.push(name.clone());
            }
        }
        let chains: Vec<Chain> =
            std::iter::once(None).chain(branches.keys().filter(|n| *n != physical).map(|n| Some(n.clone()))).collect();
        for chain in chains {
            let ds = open_chain(&root, &chain).await?;
            let reads_it = reads_files_at(&ds, &location).await?;
            let name = chain_name(&chain).to_string();
            if reads_it && !out.contains(&name) {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Delete a logical branch. Refused while another branch reads its files or holds a pin on it.
    /// The physical branch is retired first (so nothing new can reach it, and a replay that pinned
    /// it before sees the retirement and stops), then readers and pins are checked (one found:
    /// the retirement is lifted and the delete refused), then the name is retired in the catalog,
    /// the physical branch deleted, and last the pins it held on other branches released.
    pub async fn delete(&self, logical: &str) -> Result<()> {
        let mut root = self.root().await?;
        let Some(physical) = Self::resolve_in(&root, logical).await? else {
            return Err(Error::Main { what: "deleted".into() });
        };
        // Refused without writing anything when a reader is already there.
        let dependants = self.readers(&root, &physical).await?;
        if !dependants.is_empty() {
            return Err(Error::InUse { name: logical.to_string(), dependants });
        }
        self.retire_for_delete(&root, logical, &physical).await?;
        // Checked again after the retirement: a replay that pinned the branch in between is seen
        // here, or it sees the retirement and stops before its commit.
        let dependants = self.readers(&root, &physical).await?;
        if !dependants.is_empty() {
            self.unretire(&root, &physical).await?;
            return Err(Error::InUse { name: logical.to_string(), dependants });
        }
        hooks::point("delete:after-check", &self.uri).await;
        let current = self.mapped(logical).await?;
        self.swap(logical, current.as_deref(), Some(TOMBSTONE)).await?;
        match root.delete_branch(&physical).await {
            Ok(()) => {}
            // Already gone (an earlier delete stopped after this step): nothing left to delete.
            Err(e) if e.to_string().contains("not found") || e.to_string().contains("Not found") => {}
            Err(source) => return Err(Error::Lance { what: format!("deleting branch '{logical}'"), source }),
        }
        unpin(&root, &physical, Pins::HeldByIt).await
    }
}

/// Whether the head of `ds` reads files at `location`: a fragment's data or deletion file, or an
/// index, under a base there. A base nothing uses any more (its fragments were rewritten, as
/// `materialize` does) reads nothing: Lance cannot remove a base, only stop using it.
async fn reads_files_at(ds: &Dataset, location: &str) -> Result<bool> {
    let bases: std::collections::HashSet<u32> =
        ds.manifest().base_paths.values().filter(|b| normalise(&b.path) == location).map(|b| b.id).collect();
    if bases.is_empty() {
        return Ok(false);
    }
    if ds.manifest().fragments.iter().any(|f| crate::materialize::reads_through(f, &bases)) {
        return Ok(true);
    }
    Ok(!crate::materialize::grafted_indexes(ds, &bases).await?.is_empty())
}

/// A physical branch a rebase, squash or delete retired, kept because nothing reclaimed it yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredBranch {
    pub physical: String,
    /// The logical name it was an incarnation of, when its name says so.
    pub logical: Option<String>,
    /// The physical branch that replaced it (`None`: the name was deleted).
    pub successor: Option<String>,
    /// Branches still reading its data files or holding a graft pin on it: while any is left it
    /// cannot be reclaimed.
    pub readers: Vec<String>,
}

impl Branches {
    /// Every retired physical branch still in the table, by physical name.
    pub async fn retired(&self) -> Result<Vec<RetiredBranch>> {
        let root = self.root().await?;
        let names = NameCatalog::of(&root).await?.read(&root).await?;
        let mut out = Vec::new();
        for physical in root.list_branches().await.lance("listing branches")?.into_keys() {
            let Some(successor) = retirement(&root, &physical).await? else { continue };
            let logical = physical
                .rsplit_once('.')
                .map(|(name, _)| name.to_string())
                .filter(|name| branch_names::is_incarnation_of(&physical, name));
            let successor = (successor != TOMBSTONE).then_some(successor);
            let mut readers = self.readers(&root, &physical).await?;
            // A catalog entry not yet moved past it (a rewrite that stopped before its last step)
            // resolves through it: deleting it would break that name.
            for (name, _) in names.map.iter().filter(|(_, p)| **p == physical) {
                readers.push(format!("the name '{name}'"));
            }
            out.push(RetiredBranch { physical, logical, successor, readers });
        }
        Ok(out)
    }

    /// Delete every retired physical branch nothing reads (in a dry run, only say which), and
    /// release the graft pins each held; returns the branches reclaimed and those kept, with their
    /// readers. Sound against a concurrent replay for the reason `delete` is: the branch is already
    /// retired, so a replay that pins it after the readers are read sees the retirement and stops.
    pub async fn gc(&self, dry_run: bool) -> Result<(Vec<RetiredBranch>, Vec<RetiredBranch>)> {
        let mut root = self.root().await?;
        let (mut reclaimed, mut kept) = (Vec::new(), Vec::new());
        for branch in self.retired().await? {
            if !branch.readers.is_empty() {
                kept.push(branch);
                continue;
            }
            if !dry_run {
                match root.delete_branch(&branch.physical).await {
                    Ok(()) => {}
                    // Another gc or delete reclaimed it first.
                    Err(e) if e.to_string().contains("not found") || e.to_string().contains("Not found") => {}
                    Err(source) => {
                        return Err(Error::Lance { what: format!("deleting branch '{}'", branch.physical), source });
                    }
                }
                unpin(&root, &branch.physical, Pins::HeldByIt).await?;
            }
            reclaimed.push(branch);
        }
        Ok((reclaimed, kept))
    }
}

impl Branches {
    /// Delete the name `logical` but keep its physical branch, retired, while other branches read
    /// its files (a merge grafts them, it does not copy them): the way out when `delete` is refused.
    /// The retirement refuses every later write to it, and `gc` reclaims it once nothing reads it.
    /// Returns the physical branch kept.
    pub async fn delete_keeping_files(&self, logical: &str) -> Result<String> {
        let root = self.root().await?;
        let Some(physical) = Self::resolve_in(&root, logical).await? else {
            return Err(Error::Main { what: "deleted".into() });
        };
        self.retire_for_delete(&root, logical, &physical).await?;
        let current = self.mapped(logical).await?;
        self.swap(logical, current.as_deref(), Some(TOMBSTONE)).await?;
        Ok(physical)
    }
}

impl Branches {
    /// Branches reading `physical`'s files, and targets holding a graft pin on it, sorted.
    async fn readers(&self, root: &Dataset, physical: &str) -> Result<Vec<String>> {
        let mut out = self.dependants(physical).await?;
        for target in pinned_by(root, physical).await? {
            if !out.contains(&target) {
                out.push(target);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// The targets holding a graft pin on a version of `physical` (tag `graft-<target>-<source>-v<n>`).
async fn pinned_by(root: &Dataset, physical: &str) -> Result<Vec<String>> {
    let encoded = crate::replay::hex(physical);
    let mut out = Vec::new();
    for (name, _) in root.tags().list().await.lance("listing tags")? {
        let Some(rest) = name.strip_prefix("graft-") else { continue };
        let mut parts = rest.splitn(3, '-');
        let (target, source) = (parts.next(), parts.next());
        if source == Some(encoded.as_str())
            && let Some(target) = target.and_then(unhex)
            && !out.contains(&target)
        {
            out.push(target);
        }
    }
    Ok(out)
}

fn unhex(encoded: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..encoded.len())
        .step_by(2)
        .map(|i| encoded.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect();
    bytes.and_then(|b| String::from_utf8(b).ok())
}

/// The transaction that sets (`Some`) or lifts (`None`) a branch's retirement.
fn retirement_txn(successor: Option<&str>) -> ActionTxn {
    let entry = UpdateMapEntry { key: RETIRED_KEY.to_string(), value: successor.map(String::from) };
    let update =
        UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: vec![entry], replace: false } };
    ActionTxn::new(OperationKind::UpdateConfig, vec![update.into()])
}

pub use lance_actions_commit::location::absolute_uri;

/// Which graft pins of a branch to release.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pins {
    /// Tags pinning other branches' versions for this branch as the target.
    HeldByIt,
    /// Those and the tags pinning the branch's own versions (a fresh branch being discarded).
    Both,
}

/// Remove graft pins that involve `physical` (tag names: `graft-<target>-<source>-v<version>`).
pub(crate) async fn unpin(root: &Dataset, physical: &str, which: Pins) -> Result<()> {
    let tags = root.tags();
    let encoded = crate::replay::hex(physical);
    for (name, _) in tags.list().await.lance("listing tags")? {
        let Some(rest) = name.strip_prefix("graft-") else { continue };
        let mut parts = rest.splitn(3, '-');
        let (target, source) = (parts.next(), parts.next());
        let on_it = source == Some(encoded.as_str());
        let held = target == Some(encoded.as_str());
        let release = match which {
            Pins::HeldByIt => held,
            Pins::Both => on_it || held,
        };
        if release {
            tags.delete(&name).await.lance(format!("releasing pin {name}"))?;
        }
    }
    Ok(())
}

/// A fresh physical name for a logical one.
pub(crate) fn physical_name(logical: &str) -> String {
    format!("{logical}.{:08x}", rand::rng().random::<u32>())
}

fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidName { name: name.to_string(), why: why.to_string() });
    if name == "main" {
        return bad("'main' is the default branch");
    }
    if name.is_empty() || name.starts_with('/') || name.ends_with('/') || name.contains("//") || name.contains("..") {
        return bad("use non-empty segments separated by single '/'");
    }
    if !name.chars().all(|c| c.is_alphanumeric() || matches!(c, '/' | '-' | '_' | '.')) {
        return bad("only letters, digits, '.', '-', '_' and '/' are allowed");
    }
    Ok(())
}
