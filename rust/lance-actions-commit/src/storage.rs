//! Where tables live, and the options that reach them: local paths and object stores (`s3://...`).
//!
//! Lance reads an object store's endpoint, credentials and client settings from the standard
//! environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, ...) and from storage options given when a dataset is opened or written, the
//! keys pylance's `storage_options` takes; explicit options win over the environment. Every layer
//! opens datasets by uri (a keyed table, a branch catalog, a graph and each of its tables), so the
//! options are registered once per uri prefix ([`configure`]: a bucket, a table root, or `""` for
//! everything) and every open and create in every layer applies the longest matching prefix
//! ([`open`], [`write_params`]). A dataset opened from another (a version, a branch) inherits the
//! options it was opened with, as in Lance.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::{WriteMode, WriteParams};
use lance_io::object_store::{ObjectStoreParams, StorageOptionsAccessor};
use snafu::Snafu;

/// More prefixes than any process needs: a bound keeps a caller that registers per call in a loop
/// from growing the registry without end.
pub const MAX_PREFIXES: usize = 1024;

#[derive(Debug, Snafu)]
pub enum StorageError {
    #[snafu(display("storage option {given:?} is not KEY=VALUE (for example aws_endpoint=http://localhost:9000)"))]
    NotKeyValue { given: String },
    #[snafu(display("too many storage option prefixes configured (at most {MAX_PREFIXES})"))]
    TooManyPrefixes,
}

/// Prefix -> options, longest prefix first.
static REGISTRY: RwLock<Vec<(String, HashMap<String, String>)>> = RwLock::new(Vec::new());

/// Use `options` for every table whose uri starts with `prefix` (`""`: every table). Options for a
/// prefix already configured replace the earlier ones.
pub fn configure(prefix: &str, options: HashMap<String, String>) -> Result<(), StorageError> {
    let mut registry = REGISTRY.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(slot) = registry.iter_mut().find(|(p, _)| p == prefix) {
        slot.1 = options;
        return Ok(());
    }
    if registry.len() >= MAX_PREFIXES {
        return Err(StorageError::TooManyPrefixes);
    }
    registry.push((prefix.to_string(), options));
    registry.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
    debug_assert!(registry.windows(2).all(|w| w[0].0.len() >= w[1].0.len()), "longest prefix first");
    Ok(())
}

/// `KEY=VALUE` pairs (the CLI's `--storage-option`) as options.
pub fn parse_pairs<S: AsRef<str>>(pairs: &[S]) -> Result<HashMap<String, String>, StorageError> {
    pairs
        .iter()
        .map(|p| {
            let p = p.as_ref();
            match p.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
                _ => Err(StorageError::NotKeyValue { given: p.to_string() }),
            }
        })
        .collect()
}

/// The options configured for `uri` (the longest matching prefix), if any.
pub fn options_for(uri: &str) -> Option<HashMap<String, String>> {
    let registry = REGISTRY.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    registry.iter().find(|(p, _)| uri.starts_with(p.as_str())).map(|(_, o)| o.clone())
}

/// Open the latest version of the dataset at `uri` with its configured options.
pub async fn open(uri: &str) -> lance::Result<Dataset> {
    let builder = DatasetBuilder::from_uri(uri);
    match options_for(uri) {
        Some(options) => builder.with_storage_options(options).load().await,
        None => builder.load().await,
    }
}

/// Write parameters in `mode` that reach `uri` with its configured options.
pub fn write_params(uri: &str, mode: WriteMode) -> WriteParams {
    WriteParams { mode, store_params: store_params(uri), ..Default::default() }
}

/// The object-store parameters for `uri`, when options are configured for it.
pub fn store_params(uri: &str) -> Option<ObjectStoreParams> {
    options_for(uri).map(|options| ObjectStoreParams {
        storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(options))),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_other_uris_get_none() {
        configure("s3://unit-a/", HashMap::from([("k".into(), "bucket".into())])).expect("configure");
        configure("s3://unit-a/t1", HashMap::from([("k".into(), "table".into())])).expect("configure");
        assert_eq!(options_for("s3://unit-a/t1/x").and_then(|o| o.get("k").cloned()).as_deref(), Some("table"));
        assert_eq!(options_for("s3://unit-a/t2").and_then(|o| o.get("k").cloned()).as_deref(), Some("bucket"));
        assert_eq!(options_for("s3://unit-b/t1"), None);
        configure("s3://unit-a/", HashMap::from([("k".into(), "replaced".into())])).expect("configure");
        assert_eq!(options_for("s3://unit-a/t2").and_then(|o| o.get("k").cloned()).as_deref(), Some("replaced"));
        assert!(write_params("s3://unit-a/t2", WriteMode::Create).store_params.is_some());
        assert!(write_params("/local/t", WriteMode::Create).store_params.is_none());
    }

    #[test]
    fn pairs_parse_and_a_pair_without_equals_is_refused_by_name() {
        let parsed = parse_pairs(&["aws_endpoint=http://h:1", "allow_http=true", "empty="]).expect("pairs");
        assert_eq!(parsed["aws_endpoint"], "http://h:1");
        assert_eq!(parsed["empty"], "");
        let err = parse_pairs(&["region"]).expect_err("no =");
        assert!(err.to_string().contains("\"region\" is not KEY=VALUE"), "{err}");
        assert!(parse_pairs(&["=v"]).is_err());
    }
}
