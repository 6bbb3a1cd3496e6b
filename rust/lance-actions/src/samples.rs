//! Sample operations built directly from a table's fragments and schema, the way their Lance
//! writers build them. Shared by the generated conflict matrix (on a synthetic table) and the
//! conformance suite (on a real one), so both judge the same shapes under the same names.

use std::collections::HashMap;
use std::sync::Arc;

use lance_core::datatypes::Schema;
use lance_table::format::overlay::{DataOverlayFile, OverlayCoverage};
use lance_table::format::{BasePath, Fragment, IndexMetadata};
use lance_table::system_index::mem_wal::CompactedSsTable;
use lance_table::transaction::{
    DataOverlayGroup, DataReplacementGroup, Operation, RewriteGroup, UpdateMap, UpdateMapEntry,
};
use roaring::RoaringBitmap;
use uuid::Uuid;

use crate::context::OperationKind;

/// One sample operation: its kind, a stable variant name, and the operation.
pub type SampleOp = (OperationKind, &'static str, Operation);

/// Index metadata as an index builder stages it: a fresh index named `name` on `field`, trained at
/// `version` over `fragments`.
pub fn index_on(uuid: Uuid, name: &str, field: i32, version: u64, fragments: RoaringBitmap) -> IndexMetadata {
    IndexMetadata {
        uuid,
        fields: vec![field],
        name: name.into(),
        dataset_version: version,
        fragment_bitmap: Some(fragments),
        index_details: None,
        index_version: 0,
        created_at: None,
        base_id: None,
        files: None,
        covering_fields: Vec::new(),
    }
}

/// An update that moves rows (Lance's `UpdateBuilder` and merge-insert shape): rows deleted where
/// they were (`updated` carry the new deletion vectors, `removed` emptied), rewritten in `new`.
pub fn row_moving_update(removed: Vec<u64>, updated: Vec<Fragment>, new: Vec<Fragment>) -> Operation {
    Operation::Update {
        removed_fragment_ids: removed,
        updated_fragments: updated,
        new_fragments: new,
        fields_modified: vec![],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(lance_table::transaction::UpdateMode::RewriteRows),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    }
}

fn upsert_map(key: &str, value: &str) -> UpdateMap {
    UpdateMap { update_entries: vec![UpdateMapEntry { key: key.into(), value: Some(value.into()) }], replace: false }
}

fn update_config(
    config: Option<(&str, &str)>,
    table: Option<(&str, &str)>,
    schema: Option<(&str, &str)>,
    field: Option<(i32, &str)>,
) -> Operation {
    Operation::UpdateConfig {
        config_updates: config.map(|(k, v)| upsert_map(k, v)),
        table_metadata_updates: table.map(|(k, v)| upsert_map(k, v)),
        schema_metadata_updates: schema.map(|(k, v)| upsert_map(k, v)),
        field_metadata_updates: field.map(|(id, k)| HashMap::from([(id, upsert_map(k, "x"))])).unwrap_or_default(),
    }
}

/// Compaction, column replacement, overlays, merges, restore, reservations, projections, config,
/// MemWAL, clone and base operations against `fragments` (at least three, every one with a data
/// file holding every field) and `schema` (its last field is the one a projection drops), read at
/// `version`.
pub fn manifest_edits(fragments: &[Fragment], schema: &Schema, version: u64) -> Vec<SampleOp> {
    let frag = |i: usize| fragments[i].clone();
    let rewrite = |i: usize| {
        let mut new = frag(i);
        new.id = 0;
        Operation::Rewrite {
            groups: vec![RewriteGroup { old_fragments: vec![frag(i)], new_fragments: vec![new] }],
            rewritten_indices: vec![],
            frag_reuse_index: None,
        }
    };
    // A new file for the same columns (as null-column population writes); Lance refuses a
    // replacement that changes nothing.
    let replace = |i: usize| {
        let mut file = frag(i).files[0].clone();
        file.path = format!("replacement-{i}.lance");
        Operation::DataReplacement { replacements: vec![DataReplacementGroup(frag(i).id, file)] }
    };
    let overlay = |i: usize| {
        let mut file = frag(i).files[0].clone();
        file.path = format!("overlay-{i}.lance");
        file.fields = Arc::from(vec![1]);
        file.column_indices = Arc::from(vec![0]);
        let coverage = OverlayCoverage::dense(RoaringBitmap::from_iter([0u32, 1]));
        Operation::DataOverlay {
            groups: vec![DataOverlayGroup {
                fragment_id: frag(i).id,
                overlays: vec![DataOverlayFile { data_file: file, coverage, committed_version: 0 }],
            }],
        }
    };
    let merge = |preserves_nullability| Operation::Merge {
        fragments: fragments.to_vec(),
        schema: schema.clone(),
        preserves_nullability,
    };
    let memwal = |shard: u128, generation| Operation::UpdateMemWalState {
        compacted_sstables: vec![CompactedSsTable { shard_id: Uuid::from_u128(shard), generation }],
    };
    let base = |name: &str| Operation::UpdateBases {
        new_bases: vec![BasePath {
            id: 0,
            name: Some(name.into()),
            is_dataset_root: false,
            path: format!("/tmp/lance-actions-sample/{name}"),
        }],
    };
    let kept: Vec<&str> =
        schema.fields.iter().take(schema.fields.len().saturating_sub(1)).map(|f| f.name.as_str()).collect();
    let dropped = schema.project(&kept).unwrap_or_else(|_| schema.clone());
    use OperationKind as K;
    vec![
        (K::Rewrite, "frag0", rewrite(0)),
        (K::Rewrite, "frag2", rewrite(2)),
        (K::DataReplacement, "frag0", replace(0)),
        (K::DataReplacement, "frag2", replace(2)),
        (K::DataOverlay, "frag0-v", overlay(0)),
        (K::DataOverlay, "frag2-v", overlay(2)),
        (K::Merge, "preserving", merge(true)),
        (K::Merge, "nullability", merge(false)),
        (K::Restore, "base", Operation::Restore { version }),
        (K::ReserveFragments, "two", Operation::ReserveFragments { num_fragments: 2 }),
        (K::Project, "drop-s", Operation::Project { schema: dropped, preserves_nullability: true }),
        (K::Project, "nullability", Operation::Project { schema: schema.clone(), preserves_nullability: false }),
        (K::UpdateConfig, "config-k1", update_config(Some(("k1", "b")), None, None, None)),
        (K::UpdateConfig, "config-k2", update_config(Some(("k2", "b")), None, None, None)),
        (K::UpdateConfig, "table-t1", update_config(None, Some(("t1", "b")), None, None)),
        (K::UpdateConfig, "schema-m1", update_config(None, None, Some(("m1", "b")), None)),
        (K::UpdateConfig, "field1-f1", update_config(None, None, None, Some((1, "f1")))),
        (K::UpdateMemWalState, "shardA-gen1", memwal(1, 1)),
        (K::UpdateMemWalState, "shardA-gen2", memwal(1, 2)),
        (K::UpdateMemWalState, "shardB-gen1", memwal(2, 1)),
        (
            K::Clone,
            "branch",
            Operation::Clone {
                is_shallow: true,
                ref_name: None,
                ref_version: version,
                ref_path: "/tmp/lance-actions-sample/source".into(),
                branch_name: Some("b".into()),
            },
        ),
        (K::UpdateBases, "b1", base("b1")),
        (K::UpdateBases, "b2", base("b2")),
    ]
}
