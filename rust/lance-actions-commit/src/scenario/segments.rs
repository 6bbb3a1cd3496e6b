//! The conformance suite's table whose index has two segments under one name: the shape of model
//! bug 2, which the other tables cannot hold (`tests/upstream/README.md`, "Left open").
//!
//! The sample table (`create_sample`, `id_idx` over fragments 0..4) gets a fifth fragment (ids
//! 32..40), then Lance's `optimize_indices` in append mode (`OptimizeOptions::append`, no merge)
//! indexes it as a delta segment: `id_idx` is then a base segment over fragments 0..4 and a delta
//! over fragment 4. Its samples touch that index: an append, a delete under each segment, a
//! rewrite of the indexed column under the delta, a rebuild of both segments into one, a
//! replacement of the delta alone, a drop of the base alone, and deferred compactions of a
//! fragment under each segment. Sample names carry the prefix `segments/`.

use std::sync::Arc;

use lance::Dataset;
use lance::dataset::transaction::Operation;
use lance::dataset::{InsertBuilder, WriteMode};
use lance::index::DatasetIndexExt;
use lance_actions::OperationKind;
use lance_index::optimize::OptimizeOptions;
use lance_table::format::IndexMetadata;

use super::reuse::{create_index, indices, lance_commit, named, shape_error, v0_compaction};
use super::{
    FRAGMENTS, ID_INDEX, ROWS_PER_FRAGMENT, Staged, batch, column_rewrite, index_on, provide_sample_files,
    stage_append, stage_delete, staged, write_params,
};
use crate::error::{LanceContext, Result};

/// Fragment ids reserved after the delta's fragment, for the compactions' destinations.
const RESERVED: u32 = 8;
/// The fragment the delta segment covers (the fifth, appended after the index was built).
const DELTA_FRAGMENT: u64 = FRAGMENTS as u64;

/// The two-segment table at `uri` (see the module docs), with `RESERVED` ids reserved. Fails if
/// Lance's optimize did not leave exactly two segments under `id_idx`.
pub async fn create_two_segments(uri: &str) -> Result<Arc<Dataset>> {
    let ds = super::create_sample(uri).await?;
    let start = ROWS_PER_FRAGMENT * FRAGMENTS;
    let ids: Vec<i64> = (start..start + ROWS_PER_FRAGMENT).collect();
    let mut ds = InsertBuilder::new(ds)
        .with_params(&write_params(WriteMode::Append))
        .execute(vec![batch(&ids)?])
        .await
        .lance("appending the delta segment's rows")?;
    ds.optimize_indices(&OptimizeOptions::append()).await.lance("indexing the appended rows as a delta segment")?;
    let ds = Arc::new(ds);
    let segments = id_segments(&ds).await?;
    if segments.len() != 2 {
        let why = format!("optimize left {} segments under {ID_INDEX}, not 2", segments.len());
        return Err(shape_error("building the two-segment table", why));
    }
    lance_commit(&ds, Operation::ReserveFragments { num_fragments: RESERVED }, "reserving ids").await
}

/// `id_idx`'s segments, the base (the one covering fragment 0) first.
async fn id_segments(ds: &Dataset) -> Result<Vec<IndexMetadata>> {
    let mut segments: Vec<IndexMetadata> = indices(ds).await?.into_iter().filter(|i| i.name == ID_INDEX).collect();
    segments.sort_by_key(|i| !i.fragment_bitmap.as_ref().is_some_and(|b| b.contains(0)));
    Ok(segments)
}

/// Every sample of the two-segment table, staged at its latest version.
pub async fn stage_two_segments(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    provide_sample_files(ds);
    let what = "staging the two-segment samples";
    let [base, delta] = <[IndexMetadata; 2]>::try_from(id_segments(ds).await?)
        .map_err(|s| shape_error(what, format!("{} segments under {ID_INDEX}", s.len())))?;
    let delta_position = ds.manifest().fragments.iter().position(|f| f.id == DELTA_FRAGMENT);
    let delta_position = delta_position.ok_or_else(|| shape_error(what, "no delta fragment"))?;
    let mut delta_replacement = index_on(ds, ID_INDEX, 0);
    delta_replacement.fragment_bitmap = Some([DELTA_FRAGMENT as u32].into_iter().collect());
    let v = ds.manifest().version;
    let first = DELTA_FRAGMENT + 1;
    let kind = OperationKind::Rewrite;
    let samples = vec![
        stage_append(ds, "new-keys", &[100, 101]).await?,
        stage_delete(ds, "frag0-rows01", "id IN (0, 1)").await?,
        stage_delete(ds, "frag4-rows01", "id IN (32, 33)").await?,
        column_rewrite(ds, delta_position, 0)?,
        create_index(ds, "rebuild-id", vec![index_on(ds, ID_INDEX, 0)], vec![base.clone(), delta.clone()]),
        create_index(ds, "replace-delta", vec![delta_replacement], vec![delta]),
        create_index(ds, "drop-base", vec![], vec![base]),
        staged(kind, "deferred-frag0", v, v0_compaction(ds, 0, first).await?),
        staged(kind, "deferred-frag4", v, v0_compaction(ds, DELTA_FRAGMENT, first + 1).await?),
    ];
    Ok(samples.into_iter().map(|s| named("segments", s)).collect())
}
