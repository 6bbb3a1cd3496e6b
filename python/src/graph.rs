//! Keyed graphs (`Graph`): init/open, graph branches, constraint-checked writes, scans as Arrow
//! tables, and the three-way keyed merge (conflicts as data; `MergeConflict` on a real run).

use arrow_pyarrow::IntoPyArrow;
use lance_actions_graph::{Graph, MergeOptions, Outcome, Strategy, WriteReport, rows_from_batch, rows_to_batch};
use pyo3::exceptions::{PyFileExistsError, PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{Value, json};

use crate::errors::{LastCause, commit_error, gave_up, keyed_error, lance_error, merge_conflict_with, user_message};
use crate::keyed::batches_of;
use crate::runtime::block_on;

fn graph_error(py: Python<'_>, e: lance_actions_graph::Error) -> PyErr {
    use lance_actions_graph::Error as E;
    let message = user_message(&e.to_string());
    match e {
        E::NotAGraph { .. } => PyFileNotFoundError::new_err(message),
        E::GraphExists { .. } => PyFileExistsError::new_err(message),
        E::Violations { conflicts } => {
            let data: Vec<Value> = conflicts.iter().map(|c| c.to_json()).collect();
            merge_conflict_with(py, message, json!({"conflicts": data, "landed": []}))
        }
        E::Keyed { source } => keyed_error(py, source),
        E::Commit { source } => commit_error(py, source),
        E::Lance { source, .. } => lance_error(message, &source),
        E::Contention { attempts, last, .. } => gave_up(py, message, attempts, last.to_json()),
        E::Corrupt { .. } | E::Io { .. } | E::Arrow { .. } => PyRuntimeError::new_err(message),
        // Schema, unknown types, bad rows, branch names, ids already present: the caller's input.
        _ => PyValueError::new_err(message),
    }
}

fn write_json(r: &WriteReport) -> String {
    json!({"commit": r.commit, "attempts": r.attempts}).to_string()
}

#[pyclass(module = "lance_actions._native")]
pub struct NativeGraph {
    graph: Graph,
}

impl NativeGraph {
    fn rows(&self, type_name: &str, data: &Bound<'_, PyAny>) -> PyResult<Vec<lance_actions_graph::Row>> {
        let py = data.py();
        let t = self.graph.schema().get(type_name).map_err(|e| graph_error(py, e))?;
        let mut rows = Vec::new();
        for batch in batches_of(data)? {
            rows.extend(rows_from_batch(t, &batch).map_err(|e| graph_error(py, e))?);
        }
        Ok(rows)
    }
}

#[pymethods]
impl NativeGraph {
    #[staticmethod]
    fn init(py: Python<'_>, root: String, schema: String) -> PyResult<Self> {
        let graph = block_on(py, async move { Graph::init(&root, &schema).await })?.map_err(|e| graph_error(py, e))?;
        Ok(Self { graph })
    }

    #[staticmethod]
    fn open(py: Python<'_>, root: String) -> PyResult<Self> {
        let graph = block_on(py, async move { Graph::open(&root).await })?.map_err(|e| graph_error(py, e))?;
        Ok(Self { graph })
    }

    fn root(&self) -> String {
        self.graph.root().to_string()
    }

    fn types(&self) -> Vec<String> {
        self.graph.schema().types.keys().cloned().collect()
    }

    fn branch(&self, py: Python<'_>, name: String, from_: String) -> PyResult<()> {
        let g = self.graph.clone();
        block_on(py, async move { g.branch(&name, &from_).await })?.map_err(|e| graph_error(py, e))
    }

    fn branches(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let g = self.graph.clone();
        block_on(py, async move { g.branches().await })?.map_err(|e| graph_error(py, e))
    }

    fn insert(&self, py: Python<'_>, branch: String, type_name: String, data: &Bound<'_, PyAny>) -> PyResult<String> {
        let rows = self.rows(&type_name, data)?;
        let g = self.graph.clone();
        let r =
            block_on(py, async move { g.insert(&branch, &type_name, rows).await })?.map_err(|e| graph_error(py, e))?;
        Ok(write_json(&r))
    }

    fn upsert(&self, py: Python<'_>, branch: String, type_name: String, data: &Bound<'_, PyAny>) -> PyResult<String> {
        let rows = self.rows(&type_name, data)?;
        let g = self.graph.clone();
        let r =
            block_on(py, async move { g.upsert(&branch, &type_name, rows).await })?.map_err(|e| graph_error(py, e))?;
        Ok(write_json(&r))
    }

    fn delete(&self, py: Python<'_>, branch: String, type_name: String, ids: Vec<String>) -> PyResult<String> {
        let g = self.graph.clone();
        let r =
            block_on(py, async move { g.delete(&branch, &type_name, ids).await })?.map_err(|e| graph_error(py, e))?;
        Ok(write_json(&r))
    }

    /// Every row of a type on a branch, ordered by id, as a `pyarrow.Table`.
    fn scan<'py>(&self, py: Python<'py>, branch: String, type_name: String) -> PyResult<Bound<'py, PyAny>> {
        let g = self.graph.clone();
        let t = self.graph.schema().get(&type_name).map_err(|e| graph_error(py, e))?.clone();
        let rows = block_on(py, async move { g.scan(&branch, &type_name).await })?.map_err(|e| graph_error(py, e))?;
        let batch = rows_to_batch(&t, &rows).map_err(|e| graph_error(py, e))?;
        let table = arrow_pyarrow::Table::try_new(vec![batch.clone()], batch.schema())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        table.into_pyarrow(py)
    }

    #[pyo3(signature = (source, into, dry_run=false, cells=false, strategy="fail"))]
    fn merge(
        &self,
        py: Python<'_>,
        source: String,
        into: String,
        dry_run: bool,
        cells: bool,
        strategy: &str,
    ) -> PyResult<String> {
        let strategy = match strategy {
            "fail" => Strategy::Fail,
            "ours" => Strategy::Ours,
            "theirs" => Strategy::Theirs,
            other => {
                return Err(PyValueError::new_err(format!(
                    "strategy must be 'fail', 'ours' or 'theirs', not '{other}'"
                )));
            }
        };
        let g = self.graph.clone();
        let opts = MergeOptions { dry_run, cells, strategy, ..Default::default() };
        let r = block_on(py, async move { g.merge(&source, &into, &opts).await })?.map_err(|e| graph_error(py, e))?;
        let data = json!({
            "outcome": r.outcome.label(),
            "conflicts": r.conflicts.iter().map(|c| c.to_json()).collect::<Vec<_>>(),
            "base": r.base,
            "commit": r.commit,
            "examined": r.examined,
            "written": r.written,
            "adopted": r.adopted,
            "attempts": r.attempts,
            "landed": [],
        });
        if r.outcome == Outcome::Conflicted && !dry_run {
            return Err(merge_conflict_with(
                py,
                user_message(&lance_actions_graph::conflict::summary(&r.conflicts)),
                data,
            ));
        }
        Ok(data.to_string())
    }
}
