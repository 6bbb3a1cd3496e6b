//! Logical branch names decoupled from directories (Lance #7185).
//!
//! A logical name maps to a physical Lance branch whose directory carries a unique suffix
//! (`feature.3f9a0c1d` under `tree/`). The mapping lives in main's config
//! (`lance-actions.branch.<name>`) and changes only through the commit driver: two writers changing
//! the same name both write that config key, so the second is refused (a compare-and-swap).
//! A Lance branch created by plain Lance or pylance has no mapping: its own name is its physical
//! name, and the mapping adopts it the first time this project writes through the name.

use std::collections::BTreeMap;
use std::sync::Arc;

use lance::Dataset;
use lance_actions::actions::update_config::UpdateConfig;
use lance_actions::path::ConfigMap;
use lance_actions::{ActionTxn, OperationKind};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_table::transaction::{UpdateMap, UpdateMapEntry};
use rand::Rng;

use crate::error::{Error, LanceContext, Result};
use crate::graft::normalise;
use crate::lineage::{Chain, chain_name, open_chain};

/// Config key prefix of the name mapping, on main.
pub const NAME_PREFIX: &str = "lance-actions.branch.";
/// The mapped value of a deleted name (so a Lance branch of the same name does not come back).
const TOMBSTONE: &str = "";

/// The branches of one dataset, by logical name.
#[derive(Clone)]
pub struct Branches {
    uri: String,
}

impl Branches {
    pub fn new(uri: &str) -> Self {
        Self { uri: uri.to_string() }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Main at its latest version: the root every branch is opened from.
    pub async fn root(&self) -> Result<Dataset> {
        Dataset::open(&self.uri).await.lance(format!("opening {}", self.uri))
    }

    fn mapping_of(root: &Dataset) -> BTreeMap<String, String> {
        root.manifest()
            .config
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(NAME_PREFIX).map(|n| (n.to_string(), v.clone())))
            .collect()
    }

    /// The physical branch a logical name designates (`None` is main).
    pub async fn resolve(&self, logical: &str) -> Result<Chain> {
        let root = self.root().await?;
        Self::resolve_in(&root, logical).await
    }

    pub(crate) async fn resolve_in(root: &Dataset, logical: &str) -> Result<Chain> {
        if logical == "main" {
            return Ok(None);
        }
        match Self::mapping_of(root).get(logical).map(String::as_str) {
            // A deleted name: a Lance branch of the same name is an earlier incarnation, not it.
            Some(TOMBSTONE) => return Err(Error::NoSuchBranch { name: logical.to_string() }),
            Some(physical) => return Ok(Some(physical.to_string())),
            None => {}
        }
        let lance_branches = root.list_branches().await.lance("listing branches")?;
        if lance_branches.contains_key(logical) {
            return Ok(Some(logical.to_string()));
        }
        Err(Error::NoSuchBranch { name: logical.to_string() })
    }

    /// Every logical name with its physical branch: mapped names, then Lance branches nobody maps
    /// to (adopted under their own name).
    pub async fn list(&self) -> Result<Vec<(String, String)>> {
        let root = self.root().await?;
        let mapping = Self::mapping_of(&root);
        let mut out: BTreeMap<String, String> = mapping.clone();
        out.retain(|_, physical| physical != TOMBSTONE);
        let mapped: Vec<&String> = mapping.values().collect();
        for name in root.list_branches().await.lance("listing branches")?.into_keys() {
            // An earlier incarnation of a mapped name (kept because a rebased branch reads it).
            let retired = mapping.keys().any(|logical| is_incarnation_of(&name, logical));
            if !mapped.contains(&&name) && !mapping.contains_key(&name) && !retired {
                out.insert(name.clone(), name);
            }
        }
        Ok(out.into_iter().collect())
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
        let current = Self::mapping_of(&root).get(logical).cloned();
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
        if logical != "main" && !Self::mapping_of(&root).contains_key(logical) {
            match self.swap(logical, None, chain.as_deref()).await {
                // Someone else adopted it first: the name now maps where we found it.
                Ok(()) | Err(Error::NameRace { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(chain)
    }

    /// Compare-and-swap the physical branch of `logical`: from `expected` (`None`: unmapped) to
    /// `new` (`None`: remove the name).
    pub(crate) async fn swap(&self, logical: &str, expected: Option<&str>, new: Option<&str>) -> Result<()> {
        let root = Arc::new(self.root().await?);
        let current = Self::mapping_of(&root).get(logical).cloned();
        if current.as_deref() != expected {
            return Err(Error::NameRace { name: logical.to_string() });
        }
        let entry = UpdateMapEntry { key: format!("{NAME_PREFIX}{logical}"), value: new.map(String::from) };
        let update =
            UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: vec![entry], replace: false } };
        let txn = ActionTxn::new(OperationKind::UpdateConfig, vec![update.into()]);
        match root.action_commit().execute_actions(root.manifest().version, txn).await {
            Ok(_) => Ok(()),
            // Another writer changed the same name since we read it.
            Err(CommitError::Fail { .. } | CommitError::Retry { .. }) => {
                Err(Error::NameRace { name: logical.to_string() })
            }
            Err(source) => Err(Error::Commit { source }),
        }
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
            let reads_it = ds.manifest().base_paths.values().any(|b| normalise(&b.path) == location);
            let name = chain_name(&chain).to_string();
            if reads_it && !out.contains(&name) {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Delete a logical branch. Refused while another branch reads its files. Otherwise the name
    /// is retired first (so nothing new can reach the branch), then the pins on its versions are
    /// released, the physical branch deleted, and last the pins it held on other branches.
    pub async fn delete(&self, logical: &str) -> Result<()> {
        let mut root = self.root().await?;
        let Some(physical) = Self::resolve_in(&root, logical).await? else {
            return Err(Error::Main { what: "deleted".into() });
        };
        let dependants = self.dependants(&physical).await?;
        if !dependants.is_empty() {
            return Err(Error::InUse { name: logical.to_string(), dependants });
        }
        let current = Self::mapping_of(&root).get(logical).cloned();
        self.swap(logical, current.as_deref(), Some(TOMBSTONE)).await?;
        unpin(&root, &physical, Pins::OnIt).await?;
        match root.delete_branch(&physical).await {
            Ok(()) => {}
            // Already gone (an earlier delete stopped after this step): nothing left to delete.
            Err(e) if e.to_string().contains("not found") || e.to_string().contains("Not found") => {}
            Err(source) => return Err(Error::Lance { what: format!("deleting branch '{logical}'"), source }),
        }
        unpin(&root, &physical, Pins::HeldByIt).await
    }
}

/// Which graft pins of a branch to release.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pins {
    /// Tags pinning the branch's own versions for the targets that read them.
    OnIt,
    /// Tags pinning other branches' versions for this branch as the target.
    HeldByIt,
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
            Pins::OnIt => on_it,
            Pins::HeldByIt => held,
            Pins::Both => on_it || held,
        };
        if release {
            tags.delete(&name).await.lance(format!("releasing pin {name}"))?;
        }
    }
    Ok(())
}

/// Is `physical` a name [`physical_name`] made for `logical`?
fn is_incarnation_of(physical: &str, logical: &str) -> bool {
    physical
        .strip_prefix(logical)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|suffix| suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()))
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
