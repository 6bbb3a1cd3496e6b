//! Rust errors as the Python exceptions of `lance_actions.errors`, each with a one-line message in
//! the caller's terms (branch, key, version) and the structured attributes the classes document.

use lance_actions::{Reason, Verdict};
use lance_actions_commit::CommitError;
use lance_actions_keyed::ConflictCause;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Value, json};

/// The module that defines the exception classes (pure Python, so users can catch them without
/// knowing about the native module).
const ERRORS_MODULE: &str = "lance_actions.errors";

/// A message for users: Lance appends the source locations an error was raised at
/// (`…, /root/.cargo/registry/…/file.rs:335:56`); they are dropped, as is everything after the
/// first line.
pub fn user_message(text: &str) -> String {
    let first_line = text.lines().next().unwrap_or(text);
    first_line.split(", ").filter(|part| !is_source_location(part)).collect::<Vec<_>>().join(", ")
}

/// `some/path/file.rs:LINE:COLUMN`.
fn is_source_location(part: &str) -> bool {
    let part = part.trim();
    let Some(at) = part.rfind(".rs:") else { return false };
    let numbers: Vec<&str> = part[at + 4..].split(':').collect();
    numbers.len() == 2 && numbers.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Why a layer's last attempt ran again, as its error carries it (replay's interference, a graph's
/// moved branch or table): the parts Python's `Retry.last` shows.
pub trait LastCause: std::fmt::Display {
    fn kind(&self) -> &'static str;
    fn reason(&self) -> Option<&Reason>;
    fn is_key_race(&self) -> bool;

    fn to_json(&self) -> Value {
        lance_actions_commit::json::interference_parts(
            self.kind(),
            &self.to_string(),
            self.reason(),
            self.is_key_race(),
        )
    }
}

impl LastCause for lance_actions_replay::Interference {
    fn kind(&self) -> &'static str {
        lance_actions_replay::Interference::kind(self)
    }
    fn reason(&self) -> Option<&Reason> {
        lance_actions_replay::Interference::reason(self)
    }
    fn is_key_race(&self) -> bool {
        lance_actions_replay::Interference::is_key_race(self)
    }
}

impl LastCause for lance_actions_graph::Moved {
    fn kind(&self) -> &'static str {
        lance_actions_graph::Moved::kind(self)
    }
    fn reason(&self) -> Option<&Reason> {
        lance_actions_graph::Moved::reason(self)
    }
    fn is_key_race(&self) -> bool {
        lance_actions_graph::Moved::is_key_race(self)
    }
}

/// `Retry` for a write that gave up after `attempts`, with why its last attempt ran again (`last`,
/// as `lance_actions_commit::json::interference_parts` builds it).
pub fn gave_up(py: Python<'_>, message: String, attempts: usize, last: Value) -> PyErr {
    raise(
        py,
        "Retry",
        message.clone(),
        json!({"reason": message, "rule": "Contention", "attempts": attempts, "last": last}),
    )
}

/// An instance of `lance_actions.errors.<class>` built from `message` and keyword attributes.
fn raise(py: Python<'_>, class: &str, message: String, attrs: Value) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import(ERRORS_MODULE)?.getattr(class)?;
        let kwargs = PyDict::new(py);
        if let Value::Object(map) = &attrs {
            let json = py.import("json")?;
            for (key, value) in map {
                kwargs.set_item(key, json.call_method1("loads", (value.to_string(),))?)?;
            }
        }
        Ok(PyErr::from_value(cls.call((message.clone(),), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| PyRuntimeError::new_err(format!("{message} (and {class} could not be raised: {e})")))
}

/// The verdict reason as data: `{text, rule, action, peer_version, peer_action, path, detail}`.
pub fn reason_json(reason: &Reason) -> Value {
    lance_actions_commit::json::reason(reason)
}

/// A verdict as data: `{"verdict": "ok"|"retry"|"fail", "reason": {...} | null}`.
pub fn verdict_json(verdict: &Verdict) -> Value {
    json!({ "verdict": verdict.label(), "reason": verdict.reason().map(reason_json) })
}

/// The attributes `Retry` and `Fail` carry.
fn conflict_attrs(reason: &Reason, report: Value) -> Value {
    json!({
        "reason": reason.to_string(),
        "rule": format!("{:?}", reason.rule),
        "peer_version": reason.peer_version,
        "path": reason.path.as_ref().map(|p| p.to_string()),
        "report": report,
    })
}

pub fn commit_error(py: Python<'_>, e: CommitError) -> PyErr {
    let message = user_message(&e.to_string());
    match e {
        CommitError::Retry { reason, report } => {
            raise(py, "Retry", message, conflict_attrs(&reason, crate::history::report_json(&report)))
        }
        CommitError::Fail { reason, report } => {
            raise(py, "Fail", message, conflict_attrs(&reason, crate::history::report_json(&report)))
        }
        CommitError::RetriesExhausted { attempts, report } => raise(
            py,
            "Retry",
            message,
            json!({"reason": format!("other writers kept landing first ({attempts} attempts)"),
                   "rule": "Contention", "attempts": attempts,
                   "last": lance_actions_commit::json::interference(
                       &lance_actions_commit::Interference::VersionTaken { attempts }),
                   "report": crate::history::report_json(&report)}),
        ),
        CommitError::CommitStatusUnknown { uuid, .. } => {
            raise(py, "CommitStatusUnknown", message, json!({ "uuid": uuid }))
        }
        CommitError::ReservedProperty { .. } | CommitError::StagedElsewhere { .. } => PyValueError::new_err(message),
        CommitError::Layer { source } => layer_error(source),
        CommitError::CommitHandler { .. } | CommitError::Lower { .. } => PyRuntimeError::new_err(message),
    }
}

/// Errors of the commit layer's reads: a missing dataset or version is the caller's input.
pub fn layer_error(e: lance_actions_commit::Error) -> PyErr {
    use lance_actions_commit::Error as E;
    let message = user_message(&e.to_string());
    match &e {
        E::Open { source, .. } | E::Lance { source, .. } => lance_error(message, source),
        E::ReadVersionAhead { .. } | E::Model { .. } => PyValueError::new_err(message),
        E::MissingTransaction { .. } | E::PeerActions { .. } => PyRuntimeError::new_err(message),
    }
}

/// A Lance error under a message that already says what was being done.
pub fn lance_error(message: String, source: &lance::Error) -> PyErr {
    match source {
        lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. } => PyFileNotFoundError::new_err(message),
        lance::Error::InvalidInput { .. }
        | lance::Error::InvalidRef { .. }
        | lance::Error::RefNotFound { .. }
        | lance::Error::VersionNotFound { .. } => PyValueError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

fn cause_name(cause: ConflictCause) -> &'static str {
    match cause {
        ConflictCause::AlreadyPresent => "already_present",
        ConflictCause::DuplicateInBatch => "duplicate_in_batch",
        ConflictCause::InsertedConcurrently => "inserted_concurrently",
    }
}

pub fn keyed_error(py: Python<'_>, e: lance_actions_keyed::Error) -> PyErr {
    use lance_actions_keyed::Error as E;
    let message = user_message(&e.to_string());
    match e {
        E::KeyConflict { keys, cause } => raise(
            py,
            "KeyConflict",
            message,
            json!({"keys": keys.first, "count": keys.count, "cause": cause_name(cause)}),
        ),
        E::KeysNotFound { keys } => {
            raise(py, "KeysNotFound", message, json!({"keys": keys.first, "count": keys.count}))
        }
        E::TableExists { .. } => pyo3::exceptions::PyFileExistsError::new_err(message),
        E::Contention { attempts, last } => {
            gave_up(py, message, attempts, lance_actions_commit::json::interference(&last))
        }
        E::AddressesOutdated { last, .. } => raise(
            py,
            "Retry",
            message.clone(),
            json!({"reason": message, "rule": "AddressesOutdated", "attempts": 1,
                   "last": lance_actions_commit::json::interference(&last)}),
        ),
        E::SchemaChanged { .. } => {
            raise(py, "Retry", message.clone(), json!({"reason": message, "rule": "SchemaChanged"}))
        }
        E::PartlyWritten { .. } => PyRuntimeError::new_err(message),
        E::Commit { source } => commit_error(py, source),
        E::Layer { source } => layer_error(source),
        E::Lance { source, .. } => lance_error(message, &source),
        E::Branch { .. } => PyValueError::new_err(message),
        E::Model { .. } => PyRuntimeError::new_err(message),
        // Everything else is about the rows or the table the caller named.
        _ => PyValueError::new_err(message),
    }
}

pub fn replay_error(py: Python<'_>, e: lance_actions_replay::Error) -> PyErr {
    use lance_actions_replay::Error as E;
    let message = user_message(&e.to_string());
    match e {
        E::Commit { source } => commit_error(py, source),
        E::Layer { source } => layer_error(source),
        E::Lance { source, .. } => lance_error(message, &source),
        E::Contention { attempts, last, .. } => gave_up(py, message, attempts, last.to_json()),
        E::NameRace { .. } => raise(py, "Retry", message.clone(), json!({"reason": message, "rule": "Contention"})),
        E::Model { .. } | E::Names { .. } => PyRuntimeError::new_err(message),
        // Unknown or existing branch names, versions outside a history, a non-fast-forward, a
        // branch still in use: all about what the caller asked for.
        _ => PyValueError::new_err(message),
    }
}

/// Raise `MergeConflict` for a replay that stopped at a conflict.
pub fn merge_conflict(py: Python<'_>, outcome: Value) -> PyErr {
    let count = outcome["conflicts"].as_array().map(Vec::len).unwrap_or(0);
    let first = outcome["conflicts"][0]["text"].as_str().unwrap_or("").to_string();
    let message = format!("{count} conflict(s), nothing of them was written: {first}");
    merge_conflict_with(py, message, outcome)
}

/// `MergeConflict` with `message`, carrying `data["conflicts"]` and `data["landed"]`.
pub fn merge_conflict_with(py: Python<'_>, message: String, data: Value) -> PyErr {
    raise(py, "MergeConflict", message, json!({"conflicts": data["conflicts"], "landed": data["landed"]}))
}
