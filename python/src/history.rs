//! `commit`, `judge`, `explain`, `log` and `matrix`: a pylance-staged transaction through the
//! action driver, and a dataset's history as actions. Results are JSON text for the Python side.

use std::sync::Arc;

use arrow_pyarrow::PyArrowType;
use arrow_schema::Schema as ArrowSchema;
use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance_actions::driver::PeerCheck;
use lance_actions::{Action, AnyAction, Mask};
use lance_actions_commit::history::actions_of;
use lance_actions_commit::judge::derive_affected_rows;
use lance_actions_commit::{CommitReport, DatasetActionsExt};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Value, json};

use crate::errors::{commit_error, lance_error, layer_error, reason_json, user_message, verdict_json};
use crate::runtime::block_on;
use crate::txn::{StagedSchema, transaction};

/// Why a call failed before any Python exception was chosen: the work runs with the GIL
/// released, and the exception is built once the GIL is held again.
enum Failure {
    Input(String),
    Commit(lance_actions_commit::CommitError),
    Layer(lance_actions_commit::Error),
    Lance(String, lance::Error),
}

impl Failure {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Input(message) => PyValueError::new_err(message),
            Failure::Commit(e) => commit_error(py, e),
            Failure::Layer(e) => layer_error(e),
            Failure::Lance(what, e) => lance_error(user_message(&format!("{what}: {e}")), &e),
        }
    }
}

async fn open_latest(uri: &str) -> Result<Arc<Dataset>, Failure> {
    lance_actions_commit::storage::open(uri)
        .await
        .map(Arc::new)
        .map_err(|e| Failure::Lance(format!("{uri} cannot be opened as a Lance dataset"), e))
}

/// The staged transaction, its dataset at the latest version and at the read version, and the
/// rows its deletion files delete (what pylance's Python `Transaction` cannot carry).
struct Staged {
    txn: Transaction,
    latest: Arc<Dataset>,
    affected: Option<lance_select::RowAddrTreeMap>,
}

async fn stage(uri: &str, txn: Transaction) -> Result<Staged, Failure> {
    let latest = open_latest(uri).await?;
    let head = latest.manifest().version;
    if txn.read_version > head {
        return Err(Failure::Input(format!(
            "the transaction was staged on version {} but {uri} is only at version {head}",
            txn.read_version
        )));
    }
    let at_read = if txn.read_version == head {
        latest.clone()
    } else {
        let version = txn.read_version;
        Arc::new(
            latest
                .checkout_version(version)
                .await
                .map_err(|e| Failure::Lance(format!("opening version {version} of {uri}"), e))?,
        )
    };
    // A transaction staged on version 0 creates the table: no rows of it existed before.
    let affected = if txn.read_version == 0 {
        None
    } else {
        derive_affected_rows(&at_read, &txn).await.map_err(Failure::Layer)?
    };
    Ok(Staged { txn, latest, affected })
}

fn staged_schema(schema: Option<PyArrowType<ArrowSchema>>, field_ids: Option<Vec<i32>>) -> Option<StagedSchema> {
    schema.map(|s| StagedSchema { arrow: s.0, field_ids })
}

/// Commit a converted pylance transaction through the driver; the report as JSON.
#[pyfunction]
#[pyo3(signature = (uri, txn_json, schema=None, field_ids=None, max_attempts=None))]
pub fn commit(
    py: Python<'_>,
    uri: String,
    txn_json: String,
    schema: Option<PyArrowType<ArrowSchema>>,
    field_ids: Option<Vec<i32>>,
    max_attempts: Option<usize>,
) -> PyResult<String> {
    let txn = transaction(&txn_json, staged_schema(schema, field_ids)).map_err(PyValueError::new_err)?;
    let work = async move {
        let staged = stage(&uri, txn).await?;
        let mut builder = staged.latest.action_commit();
        if let Some(rows) = staged.affected {
            builder = builder.with_affected_rows(rows);
        }
        if let Some(n) = max_attempts {
            builder = builder.with_max_attempts(n);
        }
        builder.execute(staged.txn).await.map(|(_, report)| report).map_err(Failure::Commit)
    };
    let report = block_on(py, work)?.map_err(|f| f.into_py(py))?;
    Ok(report_json(&report).to_string())
}

/// Delete the rows matching `predicate` through the driver, staged with Lance's `DeleteBuilder` on
/// the latest version (`stage_delete`): the commit takes the rows as Lance reported them, so
/// concurrent deletes of disjoint rows, even of one fragment, all land. `{"deleted", "report"}` as
/// JSON; `report` is null when no row matched (nothing is committed).
#[pyfunction]
#[pyo3(signature = (uri, predicate, max_attempts=None))]
pub fn delete(py: Python<'_>, uri: String, predicate: String, max_attempts: Option<usize>) -> PyResult<String> {
    let work = async move {
        let latest = open_latest(&uri).await?;
        let staged = lance_actions_commit::stage_delete(&latest, &predicate).await.map_err(Failure::Commit)?;
        let deleted = staged.num_deleted_rows();
        if deleted == 0 {
            return Ok((0, None));
        }
        let mut builder = latest.action_commit();
        if let Some(n) = max_attempts {
            builder = builder.with_max_attempts(n);
        }
        let (_, report) = builder.execute_delete(staged).await.map_err(Failure::Commit)?;
        Ok((deleted, Some(report)))
    };
    let (deleted, report) = block_on(py, work)?.map_err(|f: Failure| f.into_py(py))?;
    Ok(json!({"deleted": deleted, "report": report.as_ref().map(report_json)}).to_string())
}

/// Each peer's check as data.
fn peers_json(peers: &[PeerCheck]) -> Vec<Value> {
    peers
        .iter()
        .map(|p| json!({"version": p.version, "overlapping_pairs": p.overlapping_pairs, "verdict": verdict_json(&p.verdict)}))
        .collect()
}

/// The commit report as data: the version landed and, per attempt, the head checked (and whether a
/// listing of ours found it), every peer's verdict, the writers judged at the manifest write
/// (`at_write`, `design/commit.md`, "Judged at the write"), the outcome of the manifest write and
/// the time inside Lance's commit path; for the whole commit, its time split three ways
/// (`design/commit.md`, "Reports").
pub fn report_json(report: &CommitReport) -> Value {
    let attempts: Vec<Value> = report
        .attempts
        .iter()
        .map(|a| {
            let at_write = a.at_write.as_ref().map(|w| {
                json!({"head": w.head, "verdict": w.verdict.label(), "reason": w.verdict.reason().map(reason_json), "peers": peers_json(&w.peers)})
            });
            json!({
                "head": a.head,
                "listed": a.listed,
                "verdict": a.verdict.label(),
                "reason": a.verdict.reason().map(reason_json),
                "peers": peers_json(&a.peers),
                "at_write": at_write,
                "write": a.write.as_ref().map(|w| format!("{w:?}")),
                "checking_seconds": a.checking.as_secs_f64(),
                "in_lance_seconds": a.in_lance.as_secs_f64(),
            })
        })
        .collect();
    json!({
        "version": report.version,
        "read_version": report.read_version,
        "attempts": attempts,
        "elapsed_seconds": report.elapsed.as_secs_f64(),
        "waited_seconds": report.waited.as_secs_f64(),
        "in_lance_seconds": report.in_lance().as_secs_f64(),
        "own_seconds": report.own_time().as_secs_f64(),
    })
}

/// Judge a converted pylance transaction with our driver and with Lance's resolver; nothing is
/// written.
#[pyfunction]
#[pyo3(signature = (uri, txn_json, schema=None, field_ids=None))]
pub fn judge(
    py: Python<'_>,
    uri: String,
    txn_json: String,
    schema: Option<PyArrowType<ArrowSchema>>,
    field_ids: Option<Vec<i32>>,
) -> PyResult<String> {
    let txn = transaction(&txn_json, staged_schema(schema, field_ids)).map_err(PyValueError::new_err)?;
    let work = async move {
        let staged = stage(&uri, txn).await?;
        lance_actions_commit::judge(&staged.latest, &staged.txn, staged.affected.as_ref()).await.map_err(Failure::Layer)
    };
    let j = block_on(py, work)?.map_err(|f| f.into_py(py))?;
    let v = &j.resolution.verdict;
    let peers = peers_json(&j.resolution.peers);
    Ok(json!({
        "verdict": v.label(),
        "reason": v.reason().map(reason_json),
        "peers": peers,
        "lance_verdict": j.lance.label(),
        "lance_reason": j.lance.to_string(),
        "read_version": j.read_version,
        "latest_version": j.latest_version,
    })
    .to_string())
}

fn mask_json(mask: &Mask) -> Value {
    Value::from(mask.iter().map(|p| p.to_string()).collect::<Vec<_>>())
}

fn action_json(a: &AnyAction) -> Value {
    json!({"kind": format!("{:?}", a.kind()), "summary": a.summary(), "reads": mask_json(&a.reads()), "writes": mask_json(&a.writes())})
}

/// The transaction of version `v`, or why there is none to show.
async fn transaction_of(ds: &Dataset, v: u64) -> Result<Transaction, String> {
    match ds.read_transaction_by_version(v).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err("no transaction recorded (cleaned up)".into()),
        Err(e) => Err(format!("transaction unreadable: {}", user_message(&e.to_string()))),
    }
}

fn has_encoded_actions(txn: &Transaction) -> bool {
    txn.transaction_properties.as_ref().is_some_and(|p| p.contains_key(lance_actions::codec::PROPERTY_KEY))
}

/// One version as the CLI's `explain` shows it: operation, read version, where the actions come
/// from, and each action with its read and write masks.
async fn explain_version(ds: &Dataset, v: u64) -> Value {
    let txn = match transaction_of(ds, v).await {
        Ok(t) => t,
        Err(why) => return json!({"version": v, "error": why}),
    };
    let source = if has_encoded_actions(&txn) { "encoded" } else { "lifted" };
    match actions_of(&txn) {
        Ok(actions) => json!({
            "version": v,
            "operation": txn.operation.to_string(),
            "read_version": txn.read_version,
            "source": source,
            "actions": actions.actions.iter().map(action_json).collect::<Vec<_>>(),
        }),
        Err(e) => {
            json!({"version": v, "operation": txn.operation.to_string(), "error": format!("action list unreadable: {e}")})
        }
    }
}

#[pyfunction]
#[pyo3(signature = (uri, version=None))]
pub fn explain(py: Python<'_>, uri: String, version: Option<u64>) -> PyResult<String> {
    let work = async move {
        let ds = open_latest(&uri).await?;
        let latest = ds.manifest().version;
        let versions: Vec<u64> = match version {
            Some(v) if v == 0 || v > latest => {
                return Err(Failure::Input(format!("version {v} does not exist (latest is {latest})")));
            }
            Some(v) => vec![v],
            None => (1..=latest).collect(),
        };
        let mut out = Vec::new();
        for v in versions {
            out.push(explain_version(&ds, v).await);
        }
        Ok(Value::from(out))
    };
    Ok(block_on(py, work)?.map_err(|f| f.into_py(py))?.to_string())
}

/// One version as the CLI's `log` shows it: who wrote it, its actions, the verdict history of our
/// commits, and the other recorded properties (replay provenance, key fencing).
async fn log_version(ds: &Dataset, v: u64) -> Value {
    let txn = match transaction_of(ds, v).await {
        Ok(t) => t,
        Err(why) => return json!({"version": v, "error": why}),
    };
    let props = txn.transaction_properties.as_deref().cloned().unwrap_or_default();
    let history: Vec<&str> =
        props.get(lance_actions_commit::commit::HISTORY_KEY).map(|h| h.lines().collect()).unwrap_or_default();
    let other: serde_json::Map<String, Value> = props
        .iter()
        .filter(|(k, _)| {
            k.as_str() != lance_actions::codec::PROPERTY_KEY && k.as_str() != lance_actions_commit::commit::HISTORY_KEY
        })
        .map(|(k, val)| (k.clone(), Value::from(val.clone())))
        .collect();
    let actions: Value = match actions_of(&txn) {
        Ok(a) => a.actions.iter().map(|a| Value::from(a.summary())).collect(),
        Err(e) => Value::from(format!("actions unreadable: {e}")),
    };
    json!({
        "version": v,
        "operation": txn.operation.to_string(),
        "read_version": txn.read_version,
        "uuid": txn.uuid,
        "writer": if has_encoded_actions(&txn) { "lance-actions" } else { "lance" },
        "actions": actions,
        "attempts": history,
        "properties": other,
    })
}

#[pyfunction]
pub fn log(py: Python<'_>, uri: String) -> PyResult<String> {
    let work = async move {
        let ds = open_latest(&uri).await?;
        let mut out = Vec::new();
        for v in (1..=ds.manifest().version).rev() {
            out.push(log_version(&ds, v).await);
        }
        Ok::<_, Failure>(Value::from(out))
    };
    Ok(block_on(py, work)?.map_err(|f| f.into_py(py))?.to_string())
}

/// The generated conflict matrices: operation kind x operation kind and action x action, each
/// cell the verdict letter the CLI prints (`design/conflict-matrix.md` explains the letters).
#[pyfunction]
pub fn matrix() -> PyResult<String> {
    let operations: Value = serde_json::from_str(&lance_actions::matrix::render_json())
        .map_err(|e| PyValueError::new_err(format!("the operation matrix is not JSON: {e}")))?;
    let mut actions = serde_json::Map::new();
    for ((row, col), cell) in lance_actions::matrix::action_matrix() {
        let entry = actions.entry(format!("{row:?}")).or_insert_with(|| json!({}));
        entry[format!("{col:?}")] = Value::from(cell);
    }
    Ok(json!({"operations": operations, "actions": actions}).to_string())
}
