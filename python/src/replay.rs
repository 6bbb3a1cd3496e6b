//! Branches by logical name, and replaying commits between them: create, list, delete, merge,
//! fast-forward, cherry-pick, rebase, squash. A conflicted (non-dry) replay raises
//! `MergeConflict`; a dry run returns the conflicts as data.

use lance_actions_replay::{Branches, Conflict, Landed, Outcome, ReplayOptions};
use pyo3::prelude::*;
use serde_json::{Value, json};

use crate::errors::{merge_conflict, reason_json, replay_error};
use crate::runtime::block_on;

fn options(dry_run: bool) -> ReplayOptions {
    ReplayOptions { dry_run, ..ReplayOptions::default() }
}

fn landed_json(landed: &[Landed]) -> Value {
    landed
        .iter()
        .map(|l| json!({"source_version": l.source_version, "target_version": l.target_version, "adopted": l.adopted}))
        .collect()
}

fn conflict_json(c: &Conflict) -> Value {
    let mut v = reason_json(&c.reason);
    v["source_branch"] = Value::from(c.source_branch.clone());
    v["source_version"] = Value::from(c.source_version);
    v["retryable"] = Value::from(c.retryable);
    v["keys"] = Value::from(c.keys.clone());
    v["text"] = Value::from(c.to_string());
    v
}

/// The parts every outcome is reported with (absent ones empty).
#[derive(Default)]
struct Parts<'a> {
    landed: &'a [Landed],
    skipped: &'a [u64],
    conflicts: Vec<Value>,
    old_physical: Option<&'a str>,
    new_physical: Option<&'a str>,
}

fn parts(o: &Outcome) -> Parts<'_> {
    match o {
        Outcome::AlreadyUpToDate { skipped } => Parts { skipped, ..Parts::default() },
        Outcome::FastForward { landed, skipped }
        | Outcome::Merged { landed, skipped }
        | Outcome::CherryPicked { landed, skipped } => Parts { landed, skipped, ..Parts::default() },
        Outcome::Rebased { old_physical, new_physical, landed }
        | Outcome::Squashed { old_physical, new_physical, landed } => Parts {
            landed,
            old_physical: Some(old_physical),
            // A dry run names no fresh branch yet (empty): reported as none.
            new_physical: Some(new_physical.as_str()).filter(|n| !n.is_empty()),
            ..Parts::default()
        },
        Outcome::Conflicted { conflicts, landed } => {
            Parts { landed, conflicts: conflicts.iter().map(conflict_json).collect(), ..Parts::default() }
        }
    }
}

/// `{"outcome", "landed", "skipped", "conflicts", "old_physical", "new_physical"}`.
fn outcome_json(o: &Outcome) -> Value {
    let p = parts(o);
    json!({
        "outcome": o.name(),
        "landed": landed_json(p.landed),
        "skipped": p.skipped,
        "conflicts": p.conflicts,
        "old_physical": p.old_physical,
        "new_physical": p.new_physical,
    })
}

/// Run a replay and hand back its outcome, or `MergeConflict` when a real run conflicted.
fn replay<F>(py: Python<'_>, dry_run: bool, work: F) -> PyResult<String>
where
    F: std::future::Future<Output = lance_actions_replay::Result<Outcome>> + Send,
{
    let outcome = block_on(py, work)?.map_err(|e| replay_error(py, e))?;
    let data = outcome_json(&outcome);
    if matches!(outcome, Outcome::Conflicted { .. }) && !dry_run {
        return Err(merge_conflict(py, data));
    }
    Ok(data.to_string())
}

#[pyfunction]
#[pyo3(signature = (uri, name, from_, version=None))]
pub fn branch_create(
    py: Python<'_>,
    uri: String,
    name: String,
    from_: String,
    version: Option<u64>,
) -> PyResult<String> {
    let work = async move { Branches::new(&uri).create(&name, &from_, version).await };
    block_on(py, work)?.map_err(|e| replay_error(py, e))
}

/// `[(logical, physical)]`.
#[pyfunction]
pub fn branch_list(py: Python<'_>, uri: String) -> PyResult<Vec<(String, String)>> {
    let work = async move { Branches::new(&uri).list().await };
    block_on(py, work)?.map_err(|e| replay_error(py, e))
}

#[pyfunction]
pub fn branch_delete(py: Python<'_>, uri: String, name: String) -> PyResult<()> {
    let work = async move { Branches::new(&uri).delete(&name).await };
    block_on(py, work)?.map_err(|e| replay_error(py, e))
}

#[pyfunction]
#[pyo3(signature = (uri, from_, into, dry_run=false, fast_forward_only=false))]
pub fn merge(
    py: Python<'_>,
    uri: String,
    from_: String,
    into: String,
    dry_run: bool,
    fast_forward_only: bool,
) -> PyResult<String> {
    let work = async move {
        let branches = Branches::new(&uri);
        if fast_forward_only {
            branches.fast_forward(&from_, &into, &options(dry_run)).await
        } else {
            branches.merge(&from_, &into, &options(dry_run)).await
        }
    };
    replay(py, dry_run, work)
}

#[pyfunction]
#[pyo3(signature = (uri, from_, versions, onto, dry_run=false))]
pub fn cherry_pick(
    py: Python<'_>,
    uri: String,
    from_: String,
    versions: Vec<u64>,
    onto: String,
    dry_run: bool,
) -> PyResult<String> {
    let work = async move { Branches::new(&uri).cherry_pick(&from_, &versions, &onto, &options(dry_run)).await };
    replay(py, dry_run, work)
}

#[pyfunction]
#[pyo3(signature = (uri, branch, onto, dry_run=false))]
pub fn rebase(py: Python<'_>, uri: String, branch: String, onto: String, dry_run: bool) -> PyResult<String> {
    let work = async move { Branches::new(&uri).rebase(&branch, &onto, &options(dry_run)).await };
    replay(py, dry_run, work)
}

#[pyfunction]
#[pyo3(signature = (uri, branch, from_version, to_version, dry_run=false))]
pub fn squash(
    py: Python<'_>,
    uri: String,
    branch: String,
    from_version: u64,
    to_version: u64,
    dry_run: bool,
) -> PyResult<String> {
    let work = async move { Branches::new(&uri).squash(&branch, from_version, to_version, &options(dry_run)).await };
    replay(py, dry_run, work)
}
