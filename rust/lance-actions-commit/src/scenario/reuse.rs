//! The conformance suite's tables with a fragment-reuse history: shapes the ported upstream tests
//! exercise and the first sample table cannot hold (`tests/upstream/README.md`, "Left open").
//!
//! * A **tagged** table: the sample table (`create_sample`) with reserved fragment ids and a tagged
//!   fragment-reuse entry, recorded by a deferred compaction of fragment 0 (one ordered-compaction
//!   transition, built with Lance's public `frag_reuse_entry_appending`). Its samples are tagged
//!   rewrites (disjoint, overlapping, one along the recorded lineage), stable-partition rewrites
//!   (`scenario::partition`: of fragment 1, of fragments 2 and 3), replacements of the reuse
//!   entry (alone, and mixed with a new index) and index builds over the rewritten fragments,
//!   beside an append, a delete and a column rewrite.
//! * A **stable-row-id** table: the sample table's rows written with stable row ids, with
//!   reserved ids. Its samples are deferred compactions carrying a v0 reuse entry (the rows keep
//!   their row ids) and index builds in the row-id domain, beside an append and a delete.
//!
//! Every destination id is reserved before the read version (Lance's assembly checks a
//! transition's destinations against the id high-water mark). Sample names carry the table's
//! prefix (`tagged/`, `stable/`), so one deviations list serves every table.

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::transaction::{Operation, RewriteGroup, TransactionBuilder};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::index::DatasetIndexExt;
use lance_actions::OperationKind;
use lance_index::IndexType;
use lance_index::frag_reuse::FRAG_REUSE_INDEX_NAME;
use lance_index::scalar::ScalarIndexParams;
use lance_table::format::pb::fragment_reuse_index_details::{
    Content, FragmentDigest, Group, InlineContent, OrderedCompaction, Transition, Version, transition,
};
use lance_table::format::{Fragment, IndexMetadata};
use roaring::{RoaringBitmap, RoaringTreemap};
use uuid::Uuid;

use super::partition::stable_partition;
use super::{
    FRAGMENTS, ID_INDEX, ROWS_PER_FRAGMENT, Staged, batch, column_rewrite, create_sample, index_on,
    provide_sample_files, stage_append, stage_delete, staged, write_params,
};
use crate::error::{Error, LanceContext, Result};

/// Fragment ids reserved on both tables; destinations are numbered from `FRAGMENTS`.
const RESERVED: u32 = 16;

/// A sample shape Lance's own data does not allow (a missing fragment, a staged write of another kind).
pub(super) fn shape_error(what: &str, why: impl Into<String>) -> Error {
    Error::Lance { what: what.into(), source: lance::Error::invalid_input(why.into()) }
}

/// Commit `op`, read at `ds`'s version, with Lance's own commit.
pub(super) async fn lance_commit(ds: &Arc<Dataset>, op: Operation, what: &str) -> Result<Arc<Dataset>> {
    let txn = TransactionBuilder::new(ds.manifest().version, op).build();
    Ok(Arc::new(CommitBuilder::new(ds.clone()).execute(txn).await.lance(what)?))
}

pub(super) fn fragment(ds: &Dataset, id: u64) -> Result<Fragment> {
    ds.manifest()
        .fragments
        .iter()
        .find(|f| f.id == id)
        .cloned()
        .ok_or_else(|| shape_error("building a reuse sample", format!("the table has no fragment {id}")))
}

/// Fragment `source`'s rows copied by Lance's writer into one staged fragment numbered `dest`.
async fn copy_of(ds: &Arc<Dataset>, source: &Fragment, dest: u64) -> Result<Fragment> {
    let what = "copying a fragment for a compaction sample";
    let mut scan = ds.scan();
    scan.with_fragments(vec![source.clone()]);
    let rows: Vec<_> = scan.try_into_stream().await.lance(what)?.try_collect().await.lance(what)?;
    let mut copy = stage_one_fragment(ds, rows, dest, what).await?;
    // A compaction keeps a stable row id with its row.
    copy.row_id_meta = source.row_id_meta.clone();
    Ok(copy)
}

/// `rows` staged (not committed) by Lance's writer as one fragment numbered `id`; an error names
/// `what` if the writer staged anything else.
pub(super) async fn stage_one_fragment(
    ds: &Arc<Dataset>,
    rows: Vec<RecordBatch>,
    id: u64,
    what: &str,
) -> Result<Fragment> {
    let staged = InsertBuilder::new(ds.clone())
        .with_params(&write_params(WriteMode::Append))
        .execute_uncommitted(rows)
        .await
        .lance(what)?;
    let Operation::Append { fragments } = staged.operation else {
        return Err(shape_error(what, "the staged write is not an append"));
    };
    let [mut fragment] = <[Fragment; 1]>::try_from(fragments)
        .map_err(|f| shape_error(what, format!("the staged write spans {} fragments", f.len())))?;
    fragment.id = id;
    Ok(fragment)
}

pub(super) fn digest(f: &Fragment) -> FragmentDigest {
    FragmentDigest {
        id: f.id,
        physical_rows: f.physical_rows.unwrap_or_default() as u64,
        num_deleted_rows: f.deletion_file.as_ref().and_then(|d| d.num_deleted_rows).unwrap_or(0) as u64,
    }
}

/// Every row address of `source`, serialised as Lance's reuse records store them.
fn row_addrs(source: &Fragment) -> Result<Vec<u8>> {
    let mut addrs = RoaringTreemap::new();
    addrs.extend((0..source.physical_rows.unwrap_or_default() as u64).map(|offset| (source.id << 32) + offset));
    let mut bytes = Vec::new();
    addrs.serialize_into(&mut bytes).map_err(|e| shape_error("serialising row addresses", e.to_string()))?;
    Ok(bytes)
}

/// A deferred compaction of fragment `source` into `dest` on a tagged table (or one being tagged):
/// one ordered-compaction transition, the entry built at `ds`'s version.
async fn tagged_compaction(ds: &Arc<Dataset>, source: u64, dest: u64) -> Result<Operation> {
    let old = fragment(ds, source)?;
    let new = copy_of(ds, &old, dest).await?;
    let transition = Transition {
        sources: vec![digest(&old)],
        destinations: vec![digest(&new)],
        mapping: Some(transition::Mapping::OrderedCompaction(OrderedCompaction {
            changed_row_addrs: row_addrs(&old)?,
        })),
    };
    let entry = lance::index::frag_reuse::frag_reuse_entry_appending(ds, vec![transition])
        .await
        .lance("building a tagged fragment-reuse entry")?;
    Ok(rewrite(vec![old], vec![new], Some(entry)))
}

/// One rewrite group of `old` into `new`, with `entry` (the reuse entry it installs, if any).
pub(super) fn rewrite(old: Vec<Fragment>, new: Vec<Fragment>, entry: Option<IndexMetadata>) -> Operation {
    Operation::Rewrite {
        groups: vec![RewriteGroup { old_fragments: old, new_fragments: new }],
        rewritten_indices: vec![],
        frag_reuse_index: entry,
    }
}

/// A deferred compaction of fragment `source` into `dest` on an untagged table: the v0 entry
/// Lance's compaction installs (one legacy version, inline), as the public protobuf types build it.
pub(super) async fn v0_compaction(ds: &Arc<Dataset>, source: u64, dest: u64) -> Result<Operation> {
    let old = fragment(ds, source)?;
    let new = copy_of(ds, &old, dest).await?;
    let version = ds.manifest().version;
    let group = Group {
        changed_row_addrs: row_addrs(&old)?,
        old_fragments: vec![digest(&old)],
        new_fragments: vec![digest(&new)],
    };
    let versions = vec![Version { dataset_version: version, groups: vec![group] }];
    let entry = v0_entry(versions, RoaringBitmap::from_iter([dest as u32]), version);
    Ok(rewrite(vec![old], vec![new], Some(entry)))
}

/// A v0 fragment-reuse entry holding `versions` inline, with `bitmap` (the versions' new
/// fragments), stamped `stamp`: the public protobuf form of what Lance's crate-private
/// `build_frag_reuse_index_metadata` builds for an entry under the inline limit.
pub fn v0_entry(versions: Vec<Version>, bitmap: RoaringBitmap, stamp: u64) -> IndexMetadata {
    use lance_table::format::pb::FragmentReuseIndexDetails as Details;
    use prost::Message;
    let details =
        Details { content: Some(Content::Inline(InlineContent { legacy_versions: versions, transitions: vec![] })) };
    IndexMetadata {
        uuid: Uuid::new_v4(),
        name: FRAG_REUSE_INDEX_NAME.to_string(),
        fields: vec![],
        covering_fields: vec![],
        dataset_version: stamp,
        fragment_bitmap: Some(bitmap),
        index_details: Some(Arc::new(prost_types::Any {
            type_url: "/lance.table.FragmentReuseIndexDetails".into(),
            value: details.encode_to_vec(),
        })),
        index_version: 0,
        created_at: None,
        base_id: None,
        files: None,
    }
}

pub(super) fn named(table: &str, mut s: Staged) -> Staged {
    s.name = format!("{table}/{}", s.name);
    s
}

pub(super) fn create_index(
    ds: &Dataset,
    variant: &str,
    new_indices: Vec<IndexMetadata>,
    removed: Vec<IndexMetadata>,
) -> Staged {
    let op = Operation::CreateIndex { new_indices, removed_indices: removed };
    staged(OperationKind::CreateIndex, variant, ds.manifest().version, op)
}

/// `v_idx` over `fragments` only.
fn v_index_over(ds: &Dataset, fragments: &[u32]) -> IndexMetadata {
    let mut index = index_on(ds, "v_idx", 1);
    index.fragment_bitmap = Some(fragments.iter().copied().collect());
    index
}

pub(super) async fn indices(ds: &Dataset) -> Result<Vec<IndexMetadata>> {
    Ok(ds.load_indices().await.lance("loading indices")?.iter().cloned().collect())
}

/// The tagged table at `uri`: the sample table, `RESERVED` ids reserved, fragment 0 compacted into
/// fragment 4 with a tagged entry (fragments 1, 2, 3, 4), then `id_idx` rebuilt over those, so no
/// index needs the recorded transition any more and a trim of it is a real one.
pub async fn create_tagged(uri: &str) -> Result<Arc<Dataset>> {
    let ds = create_sample(uri).await?;
    let ds = lance_commit(&ds, Operation::ReserveFragments { num_fragments: RESERVED }, "reserving ids").await?;
    let tag = tagged_compaction(&ds, 0, FRAGMENTS as u64).await?;
    let mut ds = (*lance_commit(&ds, tag, "tagging the table").await?).clone();
    ds.create_index(&["id"], IndexType::BTree, Some(ID_INDEX.into()), &ScalarIndexParams::default(), true)
        .await
        .lance("rebuilding the tagged table's index")?;
    Ok(Arc::new(ds))
}

/// Every sample of the tagged table, staged at its latest version.
pub async fn stage_tagged(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    provide_sample_files(ds);
    let first = FRAGMENTS as u64 + 1;
    let kind = OperationKind::Rewrite;
    let v = ds.manifest().version;
    let compaction = |source, dest, variant: &'static str| async move {
        Ok::<_, Error>(staged(kind, variant, v, tagged_compaction(ds, source, dest).await?))
    };
    let existing = indices(ds).await?;
    let entry = existing.iter().find(|i| i.name == FRAG_REUSE_INDEX_NAME).cloned();
    let entry = entry.ok_or_else(|| shape_error("staging the tagged samples", "the table has no reuse entry"))?;
    // A replacement with the same content under a new uuid (a trim that keeps every record).
    let replacement = IndexMetadata { uuid: Uuid::new_v4(), dataset_version: v, ..entry.clone() };
    let position_of_2 = ds.manifest().fragments.iter().position(|f| f.id == 2);
    let position_of_2 = position_of_2.ok_or_else(|| shape_error("staging the tagged samples", "no fragment 2"))?;
    let live: Vec<u32> = ds.manifest().fragments.iter().map(|f| f.id as u32).collect();
    let samples = vec![
        compaction(1, first, "tagged-frag1").await?,
        compaction(2, first + 1, "tagged-frag2").await?,
        compaction(1, first + 2, "tagged-frag1-again").await?,
        compaction(FRAGMENTS as u64, first + 3, "tagged-lineage-frag4").await?,
        staged(kind, "sp-frag1", v, stable_partition(ds, &[1], first + 4).await?),
        staged(kind, "sp-frag2-3", v, stable_partition(ds, &[2, 3], first + 6).await?),
        create_index(ds, "reuse-entry-trim", vec![], vec![entry.clone()]),
        create_index(ds, "reuse-entry-replace", vec![replacement], vec![entry.clone()]),
        create_index(ds, "reuse-entry-trim-with-v", vec![v_index_over(ds, &live)], vec![entry]),
        create_index(ds, "new-v", vec![v_index_over(ds, &live)], vec![]),
        create_index(ds, "new-v-frag2", vec![v_index_over(ds, &[2])], vec![]),
        stage_append(ds, "new-keys", &[100, 101]).await?,
        stage_delete(ds, "frag1-rows01", "id IN (8, 9)").await?,
        column_rewrite(ds, position_of_2, 1)?,
    ];
    Ok(samples.into_iter().map(|s| named("tagged", s)).collect())
}

/// The stable-row-id table at `uri`: the sample table's rows (4 fragments x 8) with stable row
/// ids, `id_idx`, `k1 = a`, `RESERVED` ids reserved.
pub async fn create_stable_row_ids(uri: &str) -> Result<Arc<Dataset>> {
    let ids: Vec<i64> = (0..ROWS_PER_FRAGMENT * FRAGMENTS).collect();
    let params = WriteParams { enable_stable_row_ids: true, ..write_params(WriteMode::Create) };
    let mut ds = InsertBuilder::new(uri)
        .with_params(&params)
        .execute(vec![batch(&ids)?])
        .await
        .lance("creating the stable-row-id table")?;
    ds.create_index(&["id"], IndexType::BTree, Some(ID_INDEX.into()), &ScalarIndexParams::default(), false)
        .await
        .lance("indexing the stable-row-id table")?;
    ds.update_config(vec![("k1", "a")]).await.lance("setting config")?;
    lance_commit(&Arc::new(ds), Operation::ReserveFragments { num_fragments: RESERVED }, "reserving ids").await
}

/// Every sample of the stable-row-id table, staged at its latest version.
pub async fn stage_stable_row_ids(ds: &Arc<Dataset>) -> Result<Vec<Staged>> {
    let first = FRAGMENTS as u64;
    let v = ds.manifest().version;
    let kind = OperationKind::Rewrite;
    let live: Vec<u32> = ds.manifest().fragments.iter().map(|f| f.id as u32).collect();
    let samples = vec![
        staged(kind, "deferred-frag0", v, v0_compaction(ds, 0, first).await?),
        staged(kind, "deferred-frag2", v, v0_compaction(ds, 2, first + 1).await?),
        create_index(ds, "new-v", vec![v_index_over(ds, &live)], vec![]),
        create_index(ds, "new-v-frag3", vec![v_index_over(ds, &[3])], vec![]),
        stage_append(ds, "new-keys", &[100, 101]).await?,
        stage_delete(ds, "frag1-rows01", "id IN (8, 9)").await?,
    ];
    Ok(samples.into_iter().map(|s| named("stable", s)).collect())
}
