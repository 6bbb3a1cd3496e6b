//! Logical branch names: the catalog that maps them to physical Lance branches, and resolution.
//!
//! The catalog is not table history. It is a sequence of small files under the table root,
//! `_lance_actions/names/<seq>.names`, each the whole mapping (`name<TAB>physical` per line; an
//! empty physical name is a deleted name). A change writes the next sequence number with
//! put-if-absent (a conditional put on object storage, a no-replace rename on a local disk), so two
//! writers changing the mapping from the same snapshot cannot both win: a compare-and-swap that
//! never commits a version of main. Lance ignores the directory (it is none of `data/`, `_versions/`,
//! `_transactions/`, `_deletions/`, `_indices/`, `tree/`, `_refs/`), and `cleanup_old_versions`
//! only lists those.
//!
//! A mapping is followed through retirements (`lance_actions::retired`): a rewrite retires the old
//! physical branch in the same compare-and-swap that checks its head, and the name follows the
//! retirement to its successor even before the catalog is updated.
//!
//! Datasets written before the catalog kept the mapping in main's config
//! (`lance-actions.branch.<name>`); with no catalog file yet, that is read instead.
//!
//! This module only reads; `lance-actions-replay` changes names through [`NameCatalog::put`].

use std::collections::BTreeMap;

use lance::Dataset;
use lance_actions::retired::retired_into;
use lance_io::object_store::ObjectStore;
use object_store::path::Path;
use snafu::Snafu;

/// Config key prefix of the mapping in datasets written before the catalog.
pub const LEGACY_NAME_PREFIX: &str = "lance-actions.branch.";
/// The mapped value of a deleted name (so a Lance branch of the same name does not come back).
pub const TOMBSTONE: &str = "";
/// How many retirements a name is followed through before giving up (a cycle cannot loop us).
const MAX_HOPS: usize = 64;

#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum BranchError {
    #[snafu(display("no branch named '{name}'; known branches: {}", known.join(", ")))]
    NoSuchBranch { name: String, known: Vec<String> },

    #[snafu(display(
        "'{name}' is the physical branch behind '{logical}'; use the branch name '{logical}' (or ask for the physical branch explicitly)"
    ))]
    PhysicalName { name: String, logical: String },

    #[snafu(display("physical branch '{branch}' was retired: the branch now lives in '{successor}'; write there"))]
    Retired { branch: String, successor: String },

    #[snafu(display("physical branch '{branch}' was deleted"))]
    Deleted { branch: String },

    #[snafu(display("the branch name catalog {what}: {message}"))]
    Catalog { what: String, message: String },

    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },
}

pub type Result<T, E = BranchError> = std::result::Result<T, E>;

fn lance(what: impl Into<String>) -> impl FnOnce(lance::Error) -> BranchError {
    let what = what.into();
    move |source| BranchError::Lance { what, source }
}

/// One snapshot of the mapping: its sequence number (0: no catalog file yet) and the names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub seq: u64,
    pub map: BTreeMap<String, String>,
}

/// The name catalog of one dataset.
pub struct NameCatalog {
    store: std::sync::Arc<ObjectStore>,
    dir: Path,
}

impl NameCatalog {
    /// The catalog under the root of `main` (any version of main: the catalog is not versioned with it).
    pub async fn of(main: &Dataset) -> Result<Self> {
        let store = main.object_store(None).await.map_err(lance("opening the object store"))?;
        let dir = main.branch_location().path.clone().join("_lance_actions").join("names");
        Ok(Self { store, dir })
    }

    fn file(&self, seq: u64) -> Path {
        self.dir.clone().join(format!("{seq:020}.names"))
    }

    /// The newest snapshot; the legacy config mapping of `main` when there is none yet.
    pub async fn read(&self, main: &Dataset) -> Result<Names> {
        let listed = self.store.read_dir(self.dir.clone()).await.unwrap_or_default();
        let newest = listed.iter().filter_map(|f| f.strip_suffix(".names").and_then(|n| n.parse::<u64>().ok())).max();
        let Some(seq) = newest else {
            return Ok(Names { seq: 0, map: legacy_mapping(main) });
        };
        let bytes = self.store.read_one_all(&self.file(seq)).await.map_err(|e| BranchError::Catalog {
            what: format!("snapshot {seq} cannot be read"),
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| BranchError::Catalog { what: format!("snapshot {seq}"), message: "not UTF-8".into() })?;
        let mut map = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (name, physical) = line.split_once('\t').ok_or_else(|| BranchError::Catalog {
                what: format!("snapshot {seq}"),
                message: format!("malformed line {line:?}"),
            })?;
            map.insert(name.to_string(), physical.to_string());
        }
        Ok(Names { seq, map })
    }

    /// Write `map` as the snapshot after `read` (compare-and-swap). `Ok(false)`: another writer
    /// wrote that snapshot first; re-read and decide again.
    pub async fn put(&self, read: &Names, map: &BTreeMap<String, String>) -> Result<bool> {
        let text: String = map.iter().map(|(n, p)| format!("{n}\t{p}\n")).collect();
        match self.store.put_if_absent(&self.file(read.seq + 1), text.into_bytes().into()).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(BranchError::Catalog { what: "cannot be written".into(), message: e.to_string() }),
        }
    }
}

fn legacy_mapping(main: &Dataset) -> BTreeMap<String, String> {
    main.manifest()
        .config
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(LEGACY_NAME_PREFIX).map(|n| (n.to_string(), v.clone())))
        .collect()
}

/// Is `physical` a name made for `logical` (`<logical>.<8 hex digits>`)?
pub fn is_incarnation_of(physical: &str, logical: &str) -> bool {
    physical
        .strip_prefix(logical)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|suffix| suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The retirement recorded at the head of a physical branch, if any (`Some("")`: deleted).
pub async fn retirement(main: &Dataset, physical: &str) -> Result<Option<String>> {
    let head = main.checkout_branch(physical).await.map_err(lance(format!("opening branch '{physical}'")))?;
    Ok(retired_into(&head.manifest().config).map(String::from))
}

/// Follow a physical branch through its retirements to the live one.
async fn follow(main: &Dataset, name: &str, physical: &str) -> Result<String> {
    let mut current = physical.to_string();
    for _ in 0..MAX_HOPS {
        match retirement(main, &current).await? {
            None => return Ok(current),
            Some(s) if s == TOMBSTONE => {
                return Err(BranchError::NoSuchBranch { name: name.into(), known: known(main).await? });
            }
            Some(successor) => current = successor,
        }
    }
    Err(BranchError::Catalog { what: format!("entry of '{name}'"), message: "retirements form a cycle".into() })
}

/// Every logical name with the physical branch it designates now: mapped names (followed through
/// retirements), then Lance branches that are nobody's physical branch (named as themselves).
pub async fn list(main: &Dataset) -> Result<Vec<(String, String)>> {
    let names = NameCatalog::of(main).await?.read(main).await?;
    let mut out = BTreeMap::new();
    for (logical, physical) in &names.map {
        if physical == TOMBSTONE {
            continue;
        }
        if let Ok(live) = follow(main, logical, physical).await {
            out.insert(logical.clone(), live);
        }
    }
    for name in main.list_branches().await.map_err(lance("listing branches"))?.into_keys() {
        if logical_of(&names, &name).is_none() && !names.map.contains_key(&name) && !out.values().any(|p| *p == name) {
            let retired = retirement(main, &name).await?.is_some();
            if !retired {
                out.insert(name.clone(), name);
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// The logical names a user can use, `main` first.
pub async fn known(main: &Dataset) -> Result<Vec<String>> {
    let names = NameCatalog::of(main).await?.read(main).await?;
    let mut out = vec!["main".to_string()];
    out.extend(names.map.iter().filter(|(_, p)| p.as_str() != TOMBSTONE).map(|(n, _)| n.clone()));
    for name in main.list_branches().await.map_err(lance("listing branches"))?.into_keys() {
        if logical_of(&names, &name).is_none() && !names.map.contains_key(&name) {
            out.push(name);
        }
    }
    out.sort_by_key(|n| (n != "main", n.clone()));
    out.dedup();
    Ok(out)
}

/// The logical name `physical` is (or was) the physical branch of, if any.
fn logical_of(names: &Names, physical: &str) -> Option<String> {
    names
        .map
        .iter()
        .find(|(logical, p)| p.as_str() == physical || is_incarnation_of(physical, logical))
        .map(|(logical, _)| logical.clone())
}

/// The physical branch a logical name designates (`None` is main). A physical name of a mapped
/// branch is refused (it is not a name the user created); a plain Lance branch nobody maps is its
/// own name.
pub async fn resolve(main: &Dataset, name: &str) -> Result<Option<String>> {
    if name == "main" {
        return Ok(None);
    }
    let names = NameCatalog::of(main).await?.read(main).await?;
    match names.map.get(name).map(String::as_str) {
        // A deleted name: a Lance branch of the same name is an earlier incarnation, not it.
        Some(TOMBSTONE) => return Err(BranchError::NoSuchBranch { name: name.into(), known: known(main).await? }),
        Some(physical) => return follow(main, name, physical).await.map(Some),
        None => {}
    }
    let lance_branches = main.list_branches().await.map_err(lance("listing branches"))?;
    if !lance_branches.contains_key(name) {
        return Err(BranchError::NoSuchBranch { name: name.into(), known: known(main).await? });
    }
    if let Some(logical) = logical_of(&names, name) {
        return Err(BranchError::PhysicalName { name: name.into(), logical });
    }
    match retirement(main, name).await? {
        None => Ok(Some(name.to_string())),
        Some(s) if s == TOMBSTONE => Err(BranchError::Deleted { branch: name.into() }),
        Some(successor) => Err(BranchError::Retired { branch: name.into(), successor }),
    }
}

/// A physical branch the user asked for by its physical name: it must exist and not be retired.
pub async fn resolve_physical(main: &Dataset, physical: &str) -> Result<Option<String>> {
    if physical == "main" {
        return Ok(None);
    }
    let lance_branches = main.list_branches().await.map_err(lance("listing branches"))?;
    if !lance_branches.contains_key(physical) {
        return Err(BranchError::NoSuchBranch { name: physical.into(), known: lance_branches.into_keys().collect() });
    }
    match retirement(main, physical).await? {
        None => Ok(Some(physical.to_string())),
        Some(s) if s == TOMBSTONE => Err(BranchError::Deleted { branch: physical.into() }),
        Some(successor) => Err(BranchError::Retired { branch: physical.into(), successor }),
    }
}
