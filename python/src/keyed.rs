//! Keyed tables (`KeyedTable`) and key migration: the keyed crate's writes with Arrow tables in.

use std::sync::Mutex;

use arrow_array::ffi_stream::ArrowArrayStreamReader;
use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_pyarrow::FromPyArrow;
use lance_actions_keyed::{KeyedTable, MigrationReport, WriteOutcome, migrate::BranchStep};
use lance_table::format::Fragment;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{Value, json};

use crate::errors::keyed_error;
use crate::history::report_json;
use crate::runtime::block_on;

/// Every batch of an Arrow stream (anything with `__arrow_c_stream__`: a `pyarrow.Table`, a
/// `RecordBatchReader`, a polars frame).
pub fn batches_of(data: &Bound<'_, PyAny>) -> PyResult<Vec<RecordBatch>> {
    let reader = ArrowArrayStreamReader::from_pyarrow_bound(data)?;
    let schema = reader.schema();
    let mut batches: Vec<RecordBatch> =
        reader.collect::<Result<_, _>>().map_err(|e| PyValueError::new_err(format!("reading the rows given: {e}")))?;
    // An empty stream still defines a schema (a create of an empty table needs it).
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    Ok(batches)
}

fn outcome_json(o: &WriteOutcome) -> String {
    json!({
        "version": o.version,
        "inserted": o.inserted,
        "updated": o.updated,
        "deleted": o.deleted,
        "attempts": o.attempts,
        "commits": o.commits.iter().map(report_json).collect::<Vec<_>>(),
    })
    .to_string()
}

/// A keyed table opened for writes. Each write runs on a copy of the handle and stores it back
/// when done, so no lock is held while the GIL is released.
#[pyclass(module = "lance_actions._native")]
pub struct NativeKeyedTable {
    table: Mutex<KeyedTable>,
}

/// One write and what it writes.
enum Write {
    Insert(Vec<RecordBatch>),
    Upsert(Vec<RecordBatch>),
    Update(Vec<RecordBatch>),
    Delete(Vec<RecordBatch>),
    /// A strict insert of fragments staged by other processes (`write_fragments`, lance-ray).
    InsertFragments(Vec<Fragment>),
}

impl NativeKeyedTable {
    fn current(&self) -> PyResult<KeyedTable> {
        self.table
            .lock()
            .map(|t| t.clone())
            .map_err(|_| PyRuntimeError::new_err("the table handle is poisoned by an earlier failure"))
    }

    fn write(&self, py: Python<'_>, how: Write) -> PyResult<String> {
        let mut table = self.current()?;
        let work = async move {
            let result = match how {
                Write::Insert(batches) => table.insert(batches).await,
                Write::Upsert(batches) => table.upsert(batches).await,
                Write::Update(batches) => table.update(batches).await,
                Write::Delete(batches) => table.delete(batches).await,
                Write::InsertFragments(fragments) => table.insert_fragments(fragments).await,
            };
            // Refresh even after an error: a later write should start from what is there now.
            let _ = table.refresh().await;
            (result, table)
        };
        let (result, table) = block_on(py, work)?;
        if let Ok(mut slot) = self.table.lock() {
            *slot = table;
        }
        result.map(|o| outcome_json(&o)).map_err(|e| keyed_error(py, e))
    }
}

#[pymethods]
impl NativeKeyedTable {
    #[staticmethod]
    fn create(py: Python<'_>, uri: String, data: &Bound<'_, PyAny>, key: Vec<String>) -> PyResult<Self> {
        let batches = batches_of(data)?;
        let work = async move {
            let names: Vec<&str> = key.iter().map(String::as_str).collect();
            KeyedTable::create(&uri, batches, &names).await
        };
        let table = block_on(py, work)?.map_err(|e| keyed_error(py, e))?;
        Ok(Self { table: Mutex::new(table) })
    }

    #[staticmethod]
    #[pyo3(signature = (uri, branch=None))]
    fn open(py: Python<'_>, uri: String, branch: Option<String>) -> PyResult<Self> {
        let work = async move {
            match branch.as_deref() {
                None | Some("main") => KeyedTable::open(&uri).await,
                Some(b) => KeyedTable::open_branch(&uri, b).await,
            }
        };
        let table = block_on(py, work)?.map_err(|e| keyed_error(py, e))?;
        Ok(Self { table: Mutex::new(table) })
    }

    fn insert(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        self.write(py, Write::Insert(batches_of(data)?))
    }

    fn upsert(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        self.write(py, Write::Upsert(batches_of(data)?))
    }

    fn update(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        self.write(py, Write::Update(batches_of(data)?))
    }

    fn delete(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<String> {
        self.write(py, Write::Delete(batches_of(keys)?))
    }

    /// Strict insert of staged fragments, each given as `FragmentMetadata.to_json()`.
    fn insert_fragments(&self, py: Python<'_>, fragments: Vec<String>) -> PyResult<String> {
        let fragments = fragments
            .iter()
            .enumerate()
            .map(|(i, json)| {
                Fragment::from_json(json)
                    .map_err(|e| PyValueError::new_err(format!("staged fragment {i} is not a Lance fragment: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.write(py, Write::InsertFragments(fragments))
    }

    /// The key column names, in key order.
    fn key(&self) -> PyResult<Vec<String>> {
        Ok(self.current()?.key().names.clone())
    }

    /// The version of the table this handle last saw.
    fn version(&self) -> PyResult<u64> {
        Ok(self.current()?.dataset().manifest().version)
    }

    fn uri(&self) -> PyResult<String> {
        Ok(self.current()?.dataset().uri().to_string())
    }
}

fn migration_json(r: &MigrationReport) -> String {
    let branches: Vec<Value> = r
        .branches
        .iter()
        .map(|b| {
            let (step, version) = match b.step {
                BranchStep::AlreadyKeyed => ("already_keyed", None),
                BranchStep::Installed { version } => ("installed", Some(version)),
            };
            json!({"branch": b.branch, "rows": b.rows, "step": step, "version": version})
        })
        .collect();
    json!({"key": r.key, "branches": branches, "stamped": r.stamped}).to_string()
}

#[pyfunction]
pub fn migrate(py: Python<'_>, uri: String, key: Vec<String>) -> PyResult<String> {
    let work = async move {
        let names: Vec<&str> = key.iter().map(String::as_str).collect();
        lance_actions_keyed::migrate(&uri, &names).await
    };
    let report = block_on(py, work)?.map_err(|e| keyed_error(py, e))?;
    Ok(migration_json(&report))
}
