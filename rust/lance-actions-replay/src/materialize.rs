//! Materializing a merged branch onto the branches that read it, so that it can be deleted.
//!
//! A replay grafts the source's data files into the target (a base path into the source's
//! directory): no bytes are copied, and the source cannot be deleted while the target reads them.
//! Materializing rewrites the target's fragments that read through such a base as new files of
//! the target's own (a Lance compaction of exactly those fragments: their live rows, in order),
//! then releases the graft pins the target holds for replays that landed. The base path stays in
//! the target's manifest (Lance adds bases, it does not remove them), read by nothing.
//!
//! Older versions of the target still name the source's files: once the source is deleted they
//! can no longer be read, as after a cleanup of old versions.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use lance::Dataset;
use lance::dataset::index::DatasetIndexRemapperOptions;
use lance::dataset::optimize::{CompactionOptions, CompactionPlan, TaskData, commit_compaction};
use lance::index::DatasetIndexExt;
use lance_table::format::Fragment;

use crate::error::{Error, LanceContext, Result};
use crate::graft::normalise;
use crate::lineage::{Chain, Lineage, Point, chain_name, commits, open_chain};
use crate::names::Branches;
use crate::provenance::{SOURCE_BRANCH, SOURCE_VERSION};
use crate::replay::{graft_tag, hex};

/// The transaction property naming the physical branch a materialization copied files from.
pub const MATERIALIZED_FROM: &str = "lance-actions.materialized-from";

/// What materializing did on one branch that read the source's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialized {
    /// The reading branch, by physical name ("main" for main).
    pub reader: String,
    /// Fragments rewritten as the reader's own files.
    pub fragments: usize,
    /// The rows they hold.
    pub rows: u64,
    /// The reader's version after the rewrite (its head, when there was nothing to rewrite).
    pub version: u64,
    /// Graft pins released: one per landed replay of a source commit.
    pub pins_released: usize,
    /// Indexes of the reader whose files are still the source's (built on the source and
    /// replayed): they keep it read until rebuilt on the reader.
    pub indexes_left: Vec<String>,
}

impl Branches {
    /// Rewrite onto every live branch that reads `logical`'s data files the fragments it reads
    /// from there, and release the graft pins it holds for landed replays of `logical`, so that
    /// `delete` finds no reader left. A Lance child branch of `logical`, a retired branch that
    /// reads it, an index replayed from it, or a replay landing meanwhile still read it:
    /// `delete` then names them.
    pub async fn materialize(&self, logical: &str) -> Result<Vec<Materialized>> {
        let root = self.root().await?;
        let Some(physical) = Self::resolve_in(&root, logical).await? else {
            return Err(Error::Main { what: "materialized".into() });
        };
        let location = normalise(&open_chain(&root, &Some(physical.clone())).await?.branch_location().uri);
        let branches = root.list_branches().await.lance("listing branches")?;
        let readers: Vec<Chain> =
            std::iter::once(None).chain(branches.into_keys().filter(|n| *n != physical).map(Some)).collect();
        let mut out = Vec::new();
        for chain in readers {
            let ds = open_chain(&root, &chain).await?;
            // A retired branch takes no write; it is reclaimed by `gc` once nothing reads it.
            if lance_actions::retired::retired_into(&ds.manifest().config).is_some() {
                continue;
            }
            let bases = bases_at(&ds, &location);
            if bases.is_empty() {
                continue;
            }
            out.push(materialize_on(&root, &chain, ds, &bases, &physical).await?);
        }
        Ok(out)
    }
}

/// Rewrite `ds`'s fragments that read through `bases`, then release the pins of landed replays.
async fn materialize_on(
    root: &Dataset,
    chain: &Chain,
    ds: Dataset,
    bases: &HashSet<u32>,
    source: &str,
) -> Result<Materialized> {
    let reader = chain_name(chain).to_string();
    let fragments: Vec<Fragment> =
        ds.manifest().fragments.iter().filter(|f| reads_through(f, bases)).cloned().collect();
    let rows = live_rows(&fragments);
    let (version, indexes_left) = if fragments.is_empty() {
        (ds.manifest().version, grafted_indexes(&ds, bases).await?)
    } else {
        let rewritten = rewrite_as_own_files(ds, fragments.clone(), source, &reader).await?;
        let left = grafted_indexes(&rewritten, bases).await?;
        (rewritten.manifest().version, left)
    };
    let pins_released = release_landed_pins(root, chain, source, version).await?;
    Ok(Materialized { reader, fragments: fragments.len(), rows, version, pins_released, indexes_left })
}

/// The ids of `ds`'s bases at `location`.
fn bases_at(ds: &Dataset, location: &str) -> HashSet<u32> {
    ds.manifest().base_paths.values().filter(|b| normalise(&b.path) == location).map(|b| b.id).collect()
}

/// Whether a data file or the deletion file of `fragment` lives under one of `bases`.
pub(crate) fn reads_through(fragment: &Fragment, bases: &HashSet<u32>) -> bool {
    let under = |base: Option<u32>| base.is_some_and(|id| bases.contains(&id));
    fragment.files.iter().any(|f| under(f.base_id)) || fragment.deletion_file.as_ref().is_some_and(|d| under(d.base_id))
}

/// The names of `ds`'s indexes whose files live under one of `bases`.
pub(crate) async fn grafted_indexes(ds: &Dataset, bases: &HashSet<u32>) -> Result<Vec<String>> {
    let indexes = ds.load_indices().await.lance("reading the indexes")?;
    let names: BTreeSet<String> =
        indexes.iter().filter(|i| i.base_id.is_some_and(|id| bases.contains(&id))).map(|i| i.name.clone()).collect();
    Ok(names.into_iter().collect())
}

/// Rows of `fragments` not deleted (as their metadata counts them).
fn live_rows(fragments: &[Fragment]) -> u64 {
    let deleted = |f: &Fragment| f.deletion_file.as_ref().and_then(|d| d.num_deleted_rows).unwrap_or(0);
    fragments.iter().map(|f| f.physical_rows.unwrap_or(0).saturating_sub(deleted(f)) as u64).sum()
}

/// A compaction of exactly `fragments`, each into a fragment of its own so the table keeps its
/// order: Lance writes the live rows as new files under the table's own root and remaps the
/// indexes that cover them. Committed by Lance's compaction (a Rewrite), which Lance rebases over
/// concurrent writes that do not touch those fragments.
async fn rewrite_as_own_files(ds: Dataset, fragments: Vec<Fragment>, source: &str, reader: &str) -> Result<Dataset> {
    let properties = HashMap::from([(MATERIALIZED_FROM.to_string(), source.to_string())]);
    let mut options = CompactionOptions { transaction_properties: Some(Arc::new(properties)), ..Default::default() };
    options.validate().lance("checking the compaction options")?;
    let plan = CompactionPlan {
        tasks: fragments.into_iter().map(|f| TaskData { fragments: vec![f] }).collect(),
        read_version: ds.manifest().version,
        options: options.clone(),
    };
    let mut results = Vec::with_capacity(plan.num_tasks());
    for task in plan.compaction_tasks() {
        results.push(task.execute(&ds).await.lance(format!("rewriting the fragments '{reader}' reads"))?);
    }
    let mut ds = ds;
    commit_compaction(&mut ds, results, Arc::new(DatasetIndexRemapperOptions::default()), &options)
        .await
        .lance(format!("committing the rewrite on '{reader}'"))?;
    Ok(ds)
}

/// Delete the pins `chain` holds on versions of `source` whose replay landed on `chain` up to
/// `version`; the count deleted. A pin of a replay still under way (not in the history yet) stays,
/// so its files cannot be deleted under it.
async fn release_landed_pins(root: &Dataset, chain: &Chain, source: &str, version: u64) -> Result<usize> {
    let lineage = Lineage::of(root, chain, Some(version)).await?;
    let history = commits(root, &lineage.segments_since(&Point { chain: None, version: 0 })).await?;
    let landed: BTreeSet<u64> = history
        .iter()
        .filter_map(|c| c.txn.transaction_properties.as_deref())
        .filter(|p| p.get(SOURCE_BRANCH).map(String::as_str) == Some(source))
        .filter_map(|p| p.get(SOURCE_VERSION).and_then(|v| v.parse().ok()))
        .collect();
    let source_chain: Chain = Some(source.to_string());
    let prefix = format!("graft-{}-{}-v", hex(chain_name(chain)), hex(source));
    let tags = root.tags();
    let mut released = 0;
    for (name, _) in tags.list().await.lance("listing tags")? {
        let Some(pinned) = name.strip_prefix(&prefix).and_then(|v| v.parse::<u64>().ok()) else { continue };
        if landed.contains(&pinned) && name == graft_tag(chain, &source_chain, pinned) {
            tags.delete(&name).await.lance(format!("releasing pin {name}"))?;
            released += 1;
        }
    }
    Ok(released)
}
