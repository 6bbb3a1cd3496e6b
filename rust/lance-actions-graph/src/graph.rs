//! The graph: init / open, branches, constraint-checked writes, scans and the log.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::error::{Error, GraphOp, Moved, Result};
use crate::manifest::{self, GraphCommit, ManifestView, Publish, TableRef};
use crate::schema::{GraphSchema, TypeDef};
use crate::table::{self, Landed, TableWrite};
use crate::validate::{ChangeSet, Snapshot, validate};
use crate::value::{Row, row_id};
use lance_actions_commit::location::absolute_uri;
use lance_actions_commit::progress::Progress;
use lance_actions_commit::retry::RetryPolicy;

/// A graph rooted at a directory.
#[derive(Debug, Clone)]
pub struct Graph {
    root: String,
    schema: GraphSchema,
}

/// One type's part of a write.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Strict insert: every id must be new.
    Insert {
        type_name: String,
        rows: Vec<Row>,
    },
    Upsert {
        type_name: String,
        rows: Vec<Row>,
    },
    Delete {
        type_name: String,
        ids: Vec<String>,
    },
}

impl WriteOp {
    fn type_name(&self) -> &str {
        match self {
            WriteOp::Insert { type_name, .. }
            | WriteOp::Upsert { type_name, .. }
            | WriteOp::Delete { type_name, .. } => type_name,
        }
    }
}

/// A published write.
#[derive(Debug, Clone)]
pub struct WriteReport {
    pub commit: String,
    pub attempts: usize,
}

impl Graph {
    /// Create a graph at `root` with the schema file's text: one empty keyed table per type, the
    /// manifest, and the first graph commit on `main`.
    pub async fn init(root: &str, schema_text: &str) -> Result<Graph> {
        // Lance records a branch's parent root as given: a relative root would only read from here.
        let root = &absolute_uri(root);
        let schema = GraphSchema::parse(schema_text)?;
        if manifest::exists(root).await? {
            return Err(Error::GraphExists { root: root.to_string() });
        }
        // A local root is a directory to make; an object store has none (an `s3://` root made
        // as a path would leave an `s3:` directory where the process runs).
        if let Some(dir) = lance_actions_commit::location::local_path(root) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io { what: format!("creating {root}"), source })?;
        }
        let mut tables = BTreeMap::new();
        for t in schema.types.values() {
            let version = table::create(root, t).await?;
            tables.insert(t.name.clone(), TableRef { branch: "main".into(), version, owner: "main".into() });
        }
        manifest::create(root, schema_text).await?;
        let commit = GraphCommit::new("main", vec![], tables);
        publish_first(root, &commit).await?;
        Ok(Graph { root: root.to_string(), schema })
    }

    pub async fn open(root: &str) -> Result<Graph> {
        let root = &absolute_uri(root);
        let view = manifest::read(root).await?;
        let schema = GraphSchema::parse(&view.schema_text)?;
        Ok(Graph { root: root.to_string(), schema })
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn schema(&self) -> &GraphSchema {
        &self.schema
    }

    pub async fn view(&self) -> Result<ManifestView> {
        manifest::read(&self.root).await
    }

    /// Create graph branch `name` at the current graph version of `from` (no table is touched:
    /// each type's Lance branch is created on the branch's first write to it).
    pub async fn branch(&self, name: &str, from: &str) -> Result<()> {
        check_name(name)?;
        let view = self.view().await?;
        if view.heads.contains_key(name) {
            return Err(Error::BranchExists { name: name.to_string() });
        }
        let head = view.head(from)?.clone();
        match manifest::publish(&self.root, name, None, &head, false).await {
            Ok(()) => Ok(()),
            Err(Publish::Moved) => Err(Error::BranchExists { name: name.to_string() }),
            Err(Publish::Failed(e)) => Err(e),
        }
    }

    /// Graph branches with their head commit ids.
    pub async fn branches(&self) -> Result<Vec<(String, String)>> {
        Ok(self.view().await?.heads.into_iter().collect())
    }

    pub async fn insert(&self, branch: &str, type_name: &str, rows: Vec<Row>) -> Result<WriteReport> {
        self.write(branch, vec![WriteOp::Insert { type_name: type_name.into(), rows }]).await
    }

    pub async fn upsert(&self, branch: &str, type_name: &str, rows: Vec<Row>) -> Result<WriteReport> {
        self.write(branch, vec![WriteOp::Upsert { type_name: type_name.into(), rows }]).await
    }

    pub async fn delete(&self, branch: &str, type_name: &str, ids: Vec<String>) -> Result<WriteReport> {
        self.write(branch, vec![WriteOp::Delete { type_name: type_name.into(), ids }]).await
    }

    /// One graph version from writes to any number of types: validated against the branch's
    /// current version, landed table by table, then published with one manifest commit.
    pub async fn write(&self, branch: &str, ops: Vec<WriteOp>) -> Result<WriteReport> {
        let plan = self.plan_write(&ops)?;
        let mut attempts = RetryPolicy::default().attempts();
        let mut last = Moved::Branch;
        while let Some(attempt) = attempts.next().await {
            let view = self.view().await?;
            let head = view.head(branch)?.clone();
            let snap = self.snapshot(&head).await?;
            let changes = self.check_write(&plan, &snap).await?;
            let conflicts = validate(&self.schema, &snap, &changes).await?;
            if !conflicts.is_empty() {
                return Err(Error::Violations { conflicts });
            }
            let writes: BTreeMap<String, TableWrite> = plan.iter().map(|(t, w)| (t.clone(), w.clone())).collect();
            let tables = match self.land(&head, branch, &writes, &Progress::default()).await? {
                Ok(tables) => tables,
                Err(moved) => {
                    last = moved;
                    continue;
                }
            };
            let commit = GraphCommit::new(branch, vec![head.id.clone()], tables);
            match self.publish(branch, &head.id, &commit).await? {
                true => return Ok(WriteReport { commit: commit.id, attempts: attempt }),
                false => last = Moved::Branch,
            }
        }
        Err(Error::Contention { branch: branch.into(), what: GraphOp::Write, attempts: attempts.made(), last })
    }

    /// Group the ops by type, refusing unknown types and an id named twice in one write.
    fn plan_write(&self, ops: &[WriteOp]) -> Result<BTreeMap<String, TableWrite>> {
        let mut plan: BTreeMap<String, TableWrite> = BTreeMap::new();
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for op in ops {
            let t = self.schema.get(op.type_name())?;
            let w = plan.entry(t.name.clone()).or_default();
            let ids = seen.entry(t.name.clone()).or_default();
            let mut note = |id: &str| -> Result<()> {
                if !ids.insert(id.to_string()) {
                    return Err(Error::Input {
                        detail: format!("id '{id}' of {} appears twice in one write", t.key()),
                    });
                }
                Ok(())
            };
            match op {
                WriteOp::Insert { rows, .. } => {
                    for r in rows {
                        check_row(t, r)?;
                        note(row_id(r))?;
                    }
                    w.inserts.extend(rows.iter().cloned());
                }
                WriteOp::Upsert { rows, .. } => {
                    for r in rows {
                        check_row(t, r)?;
                        note(row_id(r))?;
                    }
                    w.upserts.extend(rows.iter().cloned());
                }
                WriteOp::Delete { ids: del, .. } => {
                    for id in del {
                        note(id)?;
                    }
                    w.deletes.extend(del.iter().cloned());
                }
            }
        }
        Ok(plan)
    }

    /// The change set of a planned write against the snapshot; strict inserts of present ids refused.
    async fn check_write(&self, plan: &BTreeMap<String, TableWrite>, snap: &Snapshot) -> Result<ChangeSet> {
        let mut changes = ChangeSet::new();
        for (name, w) in plan {
            let t = self.schema.get(name)?;
            if !w.inserts.is_empty() {
                let ids: BTreeSet<String> = w.inserts.iter().map(|r| row_id(r).to_string()).collect();
                let present = table::read_ids(&snap.tables[name], t, &ids).await?;
                if !present.is_empty() {
                    let mut sample: Vec<&String> = present.keys().collect();
                    sample.sort();
                    let shown = sample.iter().take(5).map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
                    return Err(Error::AlreadyPresent { type_key: t.key(), count: present.len(), sample: shown });
                }
            }
            let change = changes.entry(name.clone()).or_default();
            for r in w.inserts.iter().chain(&w.upserts) {
                change.upserts.insert(row_id(r).to_string(), r.clone());
            }
            change.deletes.extend(w.deletes.iter().cloned());
        }
        Ok(changes)
    }

    /// Every type's table at the versions `commit` records.
    pub(crate) async fn snapshot(&self, commit: &GraphCommit) -> Result<Snapshot> {
        let mut tables = HashMap::new();
        for t in self.schema.types.values() {
            tables.insert(t.name.clone(), table::open_at(&self.root, t, self.table_ref(commit, t)?).await?);
        }
        Ok(Snapshot { tables })
    }

    pub(crate) fn table_ref<'a>(&self, commit: &'a GraphCommit, t: &TypeDef) -> Result<&'a TableRef> {
        commit.tables.get(&t.name).ok_or_else(|| Error::Corrupt {
            detail: format!("graph commit {} has no table for {}", commit.id, t.key()),
        })
    }

    /// Land each type's write; `Err(Moved)` when another writer interfered (the caller re-runs).
    pub(crate) async fn land(
        &self,
        head: &GraphCommit,
        branch: &str,
        writes: &BTreeMap<String, TableWrite>,
        progress: &Progress,
    ) -> Result<std::result::Result<BTreeMap<String, TableRef>, Moved>> {
        let mut tables = head.tables.clone();
        let total = writes.values().filter(|w| !w.is_empty()).count();
        for (i, (name, w)) in writes.iter().filter(|(_, w)| !w.is_empty()).enumerate() {
            progress.tell("tables written", i, total);
            let t = self.schema.get(name)?;
            match table::apply(&self.root, t, self.table_ref(head, t)?, branch, w).await? {
                Landed::At(r) => {
                    tables.insert(name.clone(), r);
                }
                Landed::Interfered(moved) => return Ok(Err(moved)),
            }
        }
        progress.tell("tables written", total, total);
        Ok(Ok(tables))
    }

    /// Publish `commit` as the new head of `branch` if its head is still `expected`.
    pub(crate) async fn publish(&self, branch: &str, expected: &str, commit: &GraphCommit) -> Result<bool> {
        // Tables have landed, the graph still shows the old version: a crash here loses nothing.
        lance_actions_commit::crash::point("graph-before-publish");
        // Where a test publishes another writer's version of the branch, to lose this publish.
        lance_actions_commit::hooks::point("graph:before-publish", &self.root).await;
        match manifest::publish(&self.root, branch, Some(expected), commit, true).await {
            Ok(()) => Ok(true),
            Err(Publish::Moved) => Ok(false),
            Err(Publish::Failed(e)) => Err(e),
        }
    }

    /// Build a BTree index on `id` in every type's table on `branch`, published as one graph
    /// version (maintenance: keyed writes and merges then take Lance's indexed paths).
    pub async fn index_keys(&self, branch: &str) -> Result<WriteReport> {
        let mut attempts = RetryPolicy::default().attempts();
        let mut last = Moved::Branch;
        'attempt: while let Some(attempt) = attempts.next().await {
            let head = self.view().await?.head(branch)?.clone();
            let mut tables = head.tables.clone();
            for t in self.schema.types.values() {
                match table::index_key(&self.root, t, self.table_ref(&head, t)?, branch).await? {
                    Landed::At(r) => {
                        tables.insert(t.name.clone(), r);
                    }
                    Landed::Interfered(moved) => {
                        last = moved;
                        continue 'attempt;
                    }
                }
            }
            let commit = GraphCommit::new(branch, vec![head.id.clone()], tables);
            if self.publish(branch, &head.id, &commit).await? {
                return Ok(WriteReport { commit: commit.id, attempts: attempt });
            }
            last = Moved::Branch;
        }
        Err(Error::Contention { branch: branch.into(), what: GraphOp::IndexBuild, attempts: attempts.made(), last })
    }

    /// Every row of a type on a branch, ordered by id.
    pub async fn scan(&self, branch: &str, type_name: &str) -> Result<Vec<Row>> {
        let t = self.schema.get(type_name)?;
        let view = self.view().await?;
        let head = view.head(branch)?;
        let ds = table::open_at(&self.root, t, self.table_ref(head, t)?).await?;
        table::scan_sorted(&ds, t).await
    }

    /// The graph versions reachable from a branch's head, newest first.
    pub async fn log(&self, branch: &str) -> Result<Vec<GraphCommit>> {
        let view = self.view().await?;
        let mut seen = BTreeSet::new();
        let mut stack = vec![view.head(branch)?.id.clone()];
        let mut out = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let c = view.commit(&id)?.clone();
            stack.extend(c.parents.iter().cloned());
            out.push(c);
        }
        out.sort_by_key(|c| std::cmp::Reverse(c.seq));
        Ok(out)
    }
}

/// A row handed to a write has the type's arity (rows built by the value module always do).
fn check_row(t: &TypeDef, r: &Row) -> Result<()> {
    let id_ok = matches!(r.first(), Some(crate::value::Value::Str(id)) if !id.is_empty());
    if r.len() != t.columns.len() || !id_ok {
        return Err(Error::Input {
            detail: format!("a {} row must have {} columns with a string id", t.key(), t.columns.len()),
        });
    }
    Ok(())
}

/// Publish a new graph's first version as `main`; another init that published first makes this
/// one's graph the existing one.
async fn publish_first(root: &str, commit: &GraphCommit) -> Result<()> {
    match manifest::publish(root, "main", None, commit, true).await {
        Ok(()) => Ok(()),
        Err(Publish::Moved) => Err(Error::GraphExists { root: root.to_string() }),
        Err(Publish::Failed(e)) => Err(e),
    }
}

/// Graph branch names become parts of Lance branch names: keep them plain.
fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidName { name: name.to_string(), why: why.to_string() });
    if name.is_empty() || name.len() > 64 {
        return bad("use 1 to 64 characters");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return bad("only letters, digits, '-' and '_' are allowed");
    }
    Ok(())
}
