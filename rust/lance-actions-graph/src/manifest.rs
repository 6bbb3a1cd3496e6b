//! The graph manifest: a tiny Lance dataset (`<root>/_graph.lance`) whose config holds, per graph
//! branch, the id of its head graph commit, and per graph commit its parents and the exact
//! (Lance branch, version) of every type's table.
//!
//! Publishing is one `UpdateConfig` action committed through the driver, writing the branch's head
//! key and the new commit's key. Two publishers of the same branch both write its head key, so the
//! driver refuses the second (a compare-and-swap); publishers of different branches do not meet.
//! Graph commits are immutable once written; readers open each table at the recorded version, so a
//! reader sees all tables of one graph version or none.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use lance::Dataset;
use lance::dataset::WriteMode;
use lance_actions::actions::update_config::UpdateConfig;
use lance_actions::path::ConfigMap;
use lance_actions::{ActionTxn, OperationKind};
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_table::transaction::{UpdateMap, UpdateMapEntry};
use serde_json::{Value as Json, json};

use crate::error::{Context, Error, Result};

pub const MANIFEST_DIR: &str = "_graph.lance";
const BRANCH_PREFIX: &str = "graph.branch.";
const COMMIT_PREFIX: &str = "graph.commit.";
const SCHEMA_KEY: &str = "graph.schema";

/// Where one type's rows are, exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    /// The Lance branch of the type's table (`main` for the table's own main).
    pub branch: String,
    pub version: u64,
    /// The graph branch that may append to this Lance branch; any other graph branch forks it.
    pub owner: String,
}

/// One graph version.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphCommit {
    pub id: String,
    /// One parent for a write, two for a merge (target first), none for the first commit.
    pub parents: Vec<String>,
    /// The graph branch it was published on.
    pub branch: String,
    /// The manifest version it was published at: orders the log and breaks merge-base ties.
    pub seq: u64,
    pub tables: BTreeMap<String, TableRef>,
}

impl GraphCommit {
    /// A new commit on `branch` with these parents (its sequence number is set when it is
    /// published).
    pub fn new(branch: &str, parents: Vec<String>, tables: BTreeMap<String, TableRef>) -> Self {
        GraphCommit { id: new_id(), parents, branch: branch.to_string(), seq: 0, tables }
    }

    pub fn to_json(&self) -> Json {
        let tables: serde_json::Map<String, Json> = self
            .tables
            .iter()
            .map(|(t, r)| (t.clone(), json!({"branch": r.branch, "version": r.version, "owner": r.owner})))
            .collect();
        json!({"id": self.id, "parents": self.parents, "branch": self.branch, "seq": self.seq, "tables": tables})
    }

    fn from_json(text: &str) -> Result<GraphCommit> {
        let corrupt = |why: &str| Error::Corrupt { detail: format!("a graph commit {why}") };
        let json: Json = serde_json::from_str(text).map_err(|_| corrupt("is not JSON"))?;
        let str_of = |v: &Json, k: &str| v.get(k).and_then(Json::as_str).map(String::from);
        let id = str_of(&json, "id").ok_or_else(|| corrupt("has no id"))?;
        let branch = str_of(&json, "branch").ok_or_else(|| corrupt("has no branch"))?;
        let seq = json.get("seq").and_then(Json::as_u64).ok_or_else(|| corrupt("has no seq"))?;
        let parents = json
            .get("parents")
            .and_then(Json::as_array)
            .map(|a| a.iter().filter_map(|p| p.as_str().map(String::from)).collect())
            .ok_or_else(|| corrupt("has no parents"))?;
        let mut tables = BTreeMap::new();
        for (name, r) in json.get("tables").and_then(Json::as_object).ok_or_else(|| corrupt("has no tables"))? {
            let table = TableRef {
                branch: str_of(r, "branch").ok_or_else(|| corrupt("has a table without a branch"))?,
                version: r
                    .get("version")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| corrupt("has a table without a version"))?,
                owner: str_of(r, "owner").ok_or_else(|| corrupt("has a table without an owner"))?,
            };
            tables.insert(name.clone(), table);
        }
        Ok(GraphCommit { id, parents, branch, seq, tables })
    }
}

/// One read of the graph manifest: every branch head and every commit.
#[derive(Debug, Clone)]
pub struct ManifestView {
    pub dataset: Arc<Dataset>,
    pub heads: BTreeMap<String, String>,
    pub commits: HashMap<String, GraphCommit>,
    pub schema_text: String,
}

impl ManifestView {
    pub fn version(&self) -> u64 {
        self.dataset.manifest().version
    }

    pub fn head(&self, branch: &str) -> Result<&GraphCommit> {
        let id = self.heads.get(branch).ok_or_else(|| Error::NoSuchBranch { name: branch.to_string() })?;
        self.commit(id)
    }

    pub fn commit(&self, id: &str) -> Result<&GraphCommit> {
        self.commits.get(id).ok_or_else(|| Error::Corrupt { detail: format!("graph commit {id} is missing") })
    }
}

pub fn manifest_uri(root: &str) -> String {
    format!("{}/{MANIFEST_DIR}", root.trim_end_matches('/'))
}

/// Is there a graph manifest at `root`, on any store?
pub async fn exists(root: &str) -> Result<bool> {
    Ok(open(root).await?.is_some())
}

/// The manifest dataset at `root`, `None` when there is none. Found by opening it, on any store: a
/// path test would look on the local disk for an object store's root.
async fn open(root: &str) -> Result<Option<Dataset>> {
    match lance_actions_commit::storage::open(&manifest_uri(root)).await {
        Ok(dataset) => Ok(Some(dataset)),
        Err(lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err::<Option<Dataset>, _>(source).lance(format!("opening the graph manifest of {root}")),
    }
}

/// Create the manifest dataset (no rows; its config is the manifest) with the schema text.
pub async fn create(root: &str, schema_text: &str) -> Result<()> {
    let uri = manifest_uri(root);
    let schema = Arc::new(ArrowSchema::new(vec![Field::new("unused", DataType::Utf8, true)]));
    let empty = RecordBatch::new_empty(schema.clone());
    let reader = RecordBatchIterator::new(vec![Ok(empty)], schema);
    let params = lance_actions_commit::storage::write_params(&uri, WriteMode::Create);
    let ds = Dataset::write(reader, &uri, Some(params)).await.lance(format!("creating the graph manifest at {uri}"))?;
    let entry = UpdateMapEntry { key: SCHEMA_KEY.to_string(), value: Some(schema_text.to_string()) };
    commit_entries(&Arc::new(ds), vec![entry]).await.map_err(|e| match e {
        Publish::Moved => Error::GraphExists { root: root.to_string() },
        Publish::Failed(e) => e,
    })
}

pub async fn read(root: &str) -> Result<ManifestView> {
    let Some(dataset) = open(root).await? else {
        return Err(Error::NotAGraph { root: root.to_string() });
    };
    let dataset = Arc::new(dataset);
    let config = &dataset.manifest().config;
    let mut heads = BTreeMap::new();
    let mut commits = HashMap::new();
    for (key, value) in config {
        if let Some(branch) = key.strip_prefix(BRANCH_PREFIX) {
            heads.insert(branch.to_string(), value.clone());
        } else if let Some(id) = key.strip_prefix(COMMIT_PREFIX) {
            commits.insert(id.to_string(), GraphCommit::from_json(value)?);
        }
    }
    let schema_text = config
        .get(SCHEMA_KEY)
        .cloned()
        .ok_or_else(|| Error::Corrupt { detail: "the graph manifest holds no schema".into() })?;
    Ok(ManifestView { dataset, heads, commits, schema_text })
}

/// Why a publish did not land.
#[derive(Debug)]
pub enum Publish {
    /// The branch head is not what the caller read (another writer or merge published first).
    Moved,
    Failed(Error),
}

/// Compare-and-swap the head of `branch` from `expected` (`None`: the branch does not exist) to
/// `commit` (written in the same manifest commit when it is new).
pub async fn publish(
    root: &str,
    branch: &str,
    expected: Option<&str>,
    commit: &GraphCommit,
    new_commit: bool,
) -> Result<(), Publish> {
    let view = read(root).await.map_err(Publish::Failed)?;
    if view.heads.get(branch).map(String::as_str) != expected {
        return Err(Publish::Moved);
    }
    let mut entries = vec![UpdateMapEntry { key: format!("{BRANCH_PREFIX}{branch}"), value: Some(commit.id.clone()) }];
    if new_commit {
        let mut commit = commit.clone();
        commit.seq = view.version() + 1;
        entries.push(UpdateMapEntry {
            key: format!("{COMMIT_PREFIX}{}", commit.id),
            value: Some(commit.to_json().to_string()),
        });
    }
    commit_entries(&view.dataset, entries).await
}

async fn commit_entries(ds: &Arc<Dataset>, entries: Vec<UpdateMapEntry>) -> Result<(), Publish> {
    let update = UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: entries, replace: false } };
    let txn = ActionTxn::new(OperationKind::UpdateConfig, vec![update.into()]);
    match ds.action_commit().execute_actions(ds.manifest().version, txn).await {
        Ok(_) => Ok(()),
        // Another publisher wrote the same head key after our read: the swap lost.
        Err(CommitError::Fail { .. } | CommitError::Retry { .. } | CommitError::RetriesExhausted { .. }) => {
            Err(Publish::Moved)
        }
        Err(source) => Err(Publish::Failed(Error::Commit { source })),
    }
}

/// A fresh graph commit id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}
