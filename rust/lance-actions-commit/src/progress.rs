//! How long work tells its caller how far along it is: after each unit (a replayed commit, a
//! committed chunk, a migrated branch, a merged type), with the number of units in all. The
//! libraries call it; a command line draws a bar from it, a library caller may ignore it.

use std::fmt;
use std::sync::Arc;

/// One report: `done` of `total` units of `what` (`"commits"`, `"chunks"`, `"branches"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick<'a> {
    pub what: &'a str,
    pub done: u64,
    pub total: u64,
}

type Report = dyn Fn(Tick<'_>) + Send + Sync;

/// Where reports go; the default sends them nowhere. Cheap to clone (one shared callback).
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<Report>>);

impl Progress {
    /// Reports go to `report`, called on the task doing the work: it should return quickly.
    pub fn new(report: impl Fn(Tick<'_>) + Send + Sync + 'static) -> Self {
        Progress(Some(Arc::new(report)))
    }

    /// `done` of `total` units of `what` are finished.
    pub fn tell(&self, what: &str, done: usize, total: usize) {
        if let Some(report) = &self.0 {
            report(Tick { what, done: done as u64, total: total as u64 });
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Progress(reported)" } else { "Progress(none)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn reports_reach_the_callback_in_order_and_the_default_drops_them() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let p = Progress::new(move |t| sink.lock().expect("lock").push((t.what.to_string(), t.done, t.total)));
        p.tell("commits", 1, 3);
        p.clone().tell("commits", 2, 3);
        Progress::default().tell("commits", 3, 3);
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen, vec![("commits".to_string(), 1, 3), ("commits".to_string(), 2, 3)]);
        assert_eq!(format!("{:?}", Progress::default()), "Progress(none)");
    }
}
