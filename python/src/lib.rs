//! `lance_actions._native`: the Rust half of the `lance_actions` Python package.
//!
//! The Python package (`python/lance_actions`) owns the public names, the docstrings and the
//! exception classes; this module does the work on the Rust crates. Structured results cross the
//! boundary as JSON text (decoded on the Python side), tables as Arrow streams (the PyCapsule
//! interface), so neither side depends on the other's object layout.

mod errors;
mod graph;
mod history;
mod keyed;
mod replay;
mod runtime;
mod txn;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_storage, m)?)?;
    m.add_function(wrap_pyfunction!(history::commit, m)?)?;
    m.add_function(wrap_pyfunction!(history::delete, m)?)?;
    m.add_function(wrap_pyfunction!(history::judge, m)?)?;
    m.add_function(wrap_pyfunction!(history::explain, m)?)?;
    m.add_function(wrap_pyfunction!(history::log, m)?)?;
    m.add_function(wrap_pyfunction!(history::matrix, m)?)?;
    m.add_function(wrap_pyfunction!(keyed::migrate, m)?)?;
    m.add_class::<keyed::NativeKeyedTable>()?;
    m.add_class::<graph::NativeGraph>()?;
    m.add_function(wrap_pyfunction!(replay::branch_create, m)?)?;
    m.add_function(wrap_pyfunction!(replay::branch_list, m)?)?;
    m.add_function(wrap_pyfunction!(replay::branch_delete, m)?)?;
    m.add_function(wrap_pyfunction!(replay::merge, m)?)?;
    m.add_function(wrap_pyfunction!(replay::cherry_pick, m)?)?;
    m.add_function(wrap_pyfunction!(replay::rebase, m)?)?;
    m.add_function(wrap_pyfunction!(replay::squash, m)?)?;
    Ok(())
}

/// Storage options for every uri under `prefix` (`lance_actions.configure_storage`).
#[pyfunction]
fn configure_storage(prefix: String, options: std::collections::HashMap<String, String>) -> PyResult<()> {
    lance_actions_commit::storage::configure(&prefix, options)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
