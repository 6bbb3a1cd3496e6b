//! One tokio runtime for the whole module, and the one way Python calls reach it: with the GIL
//! released (other Python threads and processes' writers keep running while a commit waits on
//! IO), and with any panic caught here, so that none crosses into the interpreter.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    let built = RUNTIME
        .get_or_init(|| tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string()));
    built.as_ref().map_err(|e| PyRuntimeError::new_err(format!("cannot start the async runtime: {e}")))
}

/// Run `work` to completion on the module's runtime with the GIL released. The future's own
/// result (a Rust error type) is returned as is; a panic becomes a `RuntimeError`.
pub fn block_on<F, T>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: Future<Output = T> + Send,
    T: Send,
{
    let rt = runtime()?;
    let outcome = py.detach(|| std::panic::catch_unwind(AssertUnwindSafe(|| rt.block_on(work))));
    outcome.map_err(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown cause");
        PyRuntimeError::new_err(format!("internal error in lance_actions (a bug; nothing more was written): {what}"))
    })
}
