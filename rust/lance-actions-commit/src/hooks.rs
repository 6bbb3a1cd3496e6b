//! Test hooks: code a test runs at a named point of an operation on one dataset, to put a
//! concurrent writer exactly where a race would put it. A point with no hook registered for it is
//! a map lookup and nothing else; production code never registers one.
//!
//! A hook is registered for a (point, dataset URI) pair and runs once: the operation it starts
//! can pass the same point again without running it a second time, and tests on other datasets
//! that pass the same point are not affected.
//!
//! Test machinery: without the `test-hooks` feature (enabled by the test suites' dev-dependency)
//! there is no `register`, and a point is an empty async function.

#[cfg(feature = "test-hooks")]
pub use enabled::{point, register};

/// Without the `test-hooks` feature no hook can be registered: a point does nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub async fn point(_point: &str, _uri: &str) {}

#[cfg(feature = "test-hooks")]
mod enabled {
    use std::collections::HashMap;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Mutex, OnceLock};

    type Hook = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

    fn registry() -> &'static Mutex<HashMap<(String, String), Hook>> {
        static HOOKS: OnceLock<Mutex<HashMap<(String, String), Hook>>> = OnceLock::new();
        HOOKS.get_or_init(|| Mutex::new(HashMap::new()))
    }

    /// Run `hook` the next time `point` is reached for the dataset at `uri`.
    pub fn register<F, Fut>(point: &str, uri: &str, hook: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let boxed: Hook = Box::new(move || Box::pin(hook()));
        if let Ok(mut hooks) = registry().lock() {
            hooks.insert((point.to_string(), key(uri)), boxed);
        }
    }

    /// The operation reached `point` on the dataset at `uri`: run the hook registered there, if any.
    pub async fn point(point: &str, uri: &str) {
        let hook = match registry().lock() {
            Ok(mut hooks) if !hooks.is_empty() => hooks.remove(&(point.to_string(), key(uri))),
            _ => None,
        };
        if let Some(hook) = hook {
            hook().await;
        }
    }

    /// URIs compared without scheme noise or trailing slashes.
    fn key(uri: &str) -> String {
        uri.trim_start_matches("file://").trim_end_matches('/').to_string()
    }
}
