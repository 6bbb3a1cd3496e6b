//! Workloads measured side by side with plain Lance, shared by the cargo benches (`benches/`) and
//! the CLI's `lance-actions bench` command, so both measure the same thing on the same data.
//!
//! * [`commit`]: commit throughput of N concurrent writers through our commit loop and through
//!   Lance's `CommitBuilder`, with re-executions (a Retry handed back to the writer, which re-reads
//!   and re-stages) and our loop's retries (attempts after the first) per commit.
//! * [`check`]: the cost of judging one committed peer, ours against Lance's
//!   `TransactionRebase::check_txn` for the same pair.
//! * [`lost_puts`]: manifest puts lost to another writer, counted the same way for both.
//! * [`stats`]: a median ratio with its 95% interval, so a report says whether a difference
//!   is more than the spread between runs.
//!
//! Compiled with the `bench` feature only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use snafu::Snafu;

pub mod check;
pub mod commit;
pub mod lost_puts;
pub mod stats;

/// Why a benchmark run could not complete.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum BenchError {
    #[snafu(display("{source}"))]
    Layer { source: crate::Error },
    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },
    /// A commit that the workload makes disjoint was refused (not a Retry): the table at the uri is
    /// not what the workload created, or a verdict is wrong.
    #[snafu(display("our commit of writer {writer} failed: {source}"))]
    Ours { writer: i64, source: Box<crate::CommitError> },
    #[snafu(display("{what}"))]
    Setup { what: String },
}

impl From<crate::Error> for BenchError {
    fn from(source: crate::Error) -> Self {
        BenchError::Layer { source }
    }
}

pub type BenchResult<T> = std::result::Result<T, BenchError>;

pub(crate) fn lance_err(what: &str) -> impl FnOnce(lance::Error) -> BenchError + '_ {
    move |source| BenchError::Lance { what: what.into(), source }
}

/// Median nanoseconds per call of `f`, over 11 batches each sized to take about `target / 10`.
pub fn median_ns(mut f: impl FnMut(), target: Duration) -> f64 {
    let mut per_batch = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..per_batch {
            f();
        }
        if t.elapsed() >= target / 10 || per_batch >= 1 << 24 {
            break;
        }
        per_batch *= 2;
    }
    let mut samples: Vec<f64> = (0..11)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / per_batch as f64
        })
        .collect();
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// Remove everything under `uri` (the tables a bench run created under its own directory), on any
/// store the library can open.
pub async fn remove_tables(uri: &str) -> BenchResult<()> {
    let params = crate::storage::store_params(uri).unwrap_or_default();
    let registry = Arc::new(lance_io::object_store::ObjectStoreRegistry::default());
    let (store, path) = lance_io::object_store::ObjectStore::from_uri_and_params(registry, uri, &params)
        .await
        .map_err(lance_err("opening the bench directory"))?;
    store.remove_dir_all(path).await.map_err(lance_err("removing the bench tables"))
}
