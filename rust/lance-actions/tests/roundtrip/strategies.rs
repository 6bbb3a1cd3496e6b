//! Proptest strategies for Lance 14.0.2 operations and the structures inside them.
//!
//! The shapes follow what Lance writers produce: new fragments carry no deletion file, existing
//! fragments may; data files are legacy v1 or v2.0/v2.1 with one column per field; overlay files
//! cover one bitmap per field (or a shared one); `Update` follows the three writer families
//! (delete-only / MemWAL with no mode, row rewrites, in-place column rewrites).
//!
//! Values that Lance's own protobuf conversion normalizes (`physical_rows: Some(0)`,
//! `num_deleted_rows: Some(0)`, `files: Some(vec![])`, `new_index_files: Some(vec![])`, unsorted
//! fragment overlays) are not generated here: Lance's transaction file loses them the same way, and
//! `lance_pb_normalizations_are_inherited` in the test file pins that behaviour down.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZero;
use std::sync::Arc;

use arrow_schema::{DataType, Field as ArrowField, Fields as ArrowFields, Schema as ArrowSchema};
use lance_core::datatypes::Schema;
use lance_file::version::ConcreteFileVersion;
use lance_table::format::key_existence::{FilterType, KeyExistenceFilter, KeyExistenceFilterBuilder, KeyValue};
use lance_table::format::overlay::{DataOverlayFile, OverlayCoverage, TOMBSTONE_FIELD_ID};
use lance_table::format::{
    BasePath, DataFile, DeletionFile, DeletionFileType, Fragment, IndexFile, IndexMetadata, RowDatasetVersionMeta,
    RowDatasetVersionSequence, RowIdMeta, pb,
};
use lance_table::rowids::{RowIdSequence, write_row_ids};
use lance_table::system_index::mem_wal::CompactedSsTable;
use lance_table::transaction::{
    DataOverlayGroup, DataReplacementGroup, Operation, RewriteGroup, RewrittenIndex, UpdateMap, UpdateMapEntry,
    UpdateMode, UpdatedFragmentOffsets,
};
use proptest::collection::{btree_map, btree_set, hash_map, hash_set, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::subsequence;
use roaring::RoaringBitmap;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Small building blocks
// ---------------------------------------------------------------------------------------------

pub fn arb_uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

fn arb_bitmap(max: u32, len: usize) -> impl Strategy<Value = RoaringBitmap> {
    prop_oneof![
        vec(0..max, 0..len).prop_map(|v| v.into_iter().collect::<RoaringBitmap>()),
        // A dense run, which Lance serializes as a run container.
        (0..max, 1..2000u32).prop_map(|(start, n)| (start..start + n).collect::<RoaringBitmap>()),
    ]
}

/// A string map with keys that cannot collide with Lance's reserved `lance-*:` / `ARROW:` keys.
fn arb_string_map() -> impl Strategy<Value = HashMap<String, String>> {
    hash_map("[a-z]{1,6}", "\\PC{0,10}", 0..3)
}

fn arb_update_map() -> impl Strategy<Value = UpdateMap> {
    (btree_map("[a-z]{1,6}", option::of("[ -~]{0,10}"), 0..4), any::<bool>()).prop_map(|(entries, replace)| UpdateMap {
        update_entries: entries.into_iter().map(|(key, value)| UpdateMapEntry { key, value }).collect(),
        replace,
    })
}

pub fn arb_any() -> impl Strategy<Value = prost_types::Any> {
    (
        prop::sample::select(vec![
            "/lance.index.pb.BTreeIndexDetails",
            "/lance.table.VectorIndexDetails",
            "/lance.index.pb.ZoneMapIndexDetails",
            "/lance.index.pb.InvertedIndexDetails",
        ]),
        vec(any::<u8>(), 0..16),
    )
        .prop_map(|(type_url, value)| prost_types::Any { type_url: type_url.to_string(), value })
}

pub fn arb_base_path() -> impl Strategy<Value = BasePath> {
    (1u32..64, option::of("[a-z]{1,6}"), any::<bool>(), "[a-z]{1,8}")
        .prop_map(|(id, name, is_root, dir)| BasePath::new(id, format!("s3://bucket/{dir}"), name, is_root))
}

pub fn arb_compacted_sstable() -> impl Strategy<Value = CompactedSsTable> {
    (arb_uuid(), any::<u64>()).prop_map(|(shard_id, generation)| CompactedSsTable { shard_id, generation })
}

/// Lance's bloom filter (what its merge-insert writer builds) or an exact hash set.
pub fn arb_key_filter() -> impl Strategy<Value = KeyExistenceFilter> {
    let field_ids = btree_set(0i32..6, 1..3).prop_map(|s| s.into_iter().collect::<Vec<_>>());
    prop_oneof![
        (field_ids.clone(), vec(any::<i64>(), 0..12), vec("[a-z]{1,8}", 0..6)).prop_map(|(fids, ints, strings)| {
            let mut builder = KeyExistenceFilterBuilder::new(fids);
            for k in ints {
                builder.insert(KeyValue::Int64(k)).expect("insert");
            }
            for s in strings {
                builder.insert(KeyValue::Composite(vec![KeyValue::String(s), KeyValue::UInt64(7)])).expect("insert");
            }
            builder.build()
        }),
        (field_ids, hash_set(any::<u64>(), 0..12))
            .prop_map(|(field_ids, hashes)| { KeyExistenceFilter { field_ids, filter: FilterType::ExactSet(hashes) } }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Data files, deletion files, fragments
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum FileFormat {
    Legacy,
    V2_0,
    V2_1,
}

pub fn arb_data_file() -> impl Strategy<Value = DataFile> {
    (
        "[a-f0-9]{8}",
        btree_set(0i32..12, 1..4),
        prop_oneof![Just(FileFormat::Legacy), Just(FileFormat::V2_0), Just(FileFormat::V2_1)],
        option::of(1u64..(1 << 40)),
        option::of(0u32..4),
        any::<bool>(),
    )
        .prop_map(|(stem, fields, format, size, base_id, tombstone_first)| {
            let path = format!("{stem}.lance");
            let mut fields: Vec<i32> = fields.into_iter().collect();
            let size = size.and_then(NonZero::new);
            match format {
                FileFormat::Legacy => DataFile::new(path, fields, vec![], ConcreteFileVersion::V1, size, base_id),
                FileFormat::V2_0 | FileFormat::V2_1 => {
                    let mut column_indices: Vec<i32> = (0..fields.len() as i32).collect();
                    // A column rewrite tombstones the old column in place.
                    if tombstone_first && fields.len() > 1 {
                        fields[0] = TOMBSTONE_FIELD_ID;
                        column_indices[0] = -1;
                    }
                    let version = if matches!(format, FileFormat::V2_0) {
                        ConcreteFileVersion::V2_0
                    } else {
                        ConcreteFileVersion::V2_1
                    };
                    DataFile::new(path, fields, column_indices, version, size, base_id)
                }
            }
        })
}

pub fn arb_deletion_file() -> impl Strategy<Value = DeletionFile> {
    (1u64..1000, any::<u64>(), any::<bool>(), option::of(1usize..500), option::of(0u32..4)).prop_map(
        |(read_version, id, bitmap, num_deleted_rows, base_id)| DeletionFile {
            read_version,
            id,
            file_type: if bitmap { DeletionFileType::Bitmap } else { DeletionFileType::Array },
            num_deleted_rows,
            base_id,
        },
    )
}

/// An overlay file with one coverage bitmap per field it carries, or one shared bitmap.
pub fn arb_overlay_file() -> impl Strategy<Value = DataOverlayFile> {
    (arb_data_file(), arb_bitmap(4096, 20), any::<bool>(), 0u64..50).prop_map(
        |(data_file, offsets, per_field, committed_version)| {
            let coverage = if per_field {
                OverlayCoverage::sparse(
                    (0..data_file.fields.len())
                        .map(|i| offsets.iter().filter(|o| (*o as usize + i).is_multiple_of(2)).collect())
                        .collect(),
                )
            } else {
                OverlayCoverage::dense(offsets)
            };
            DataOverlayFile { data_file, coverage, committed_version }
        },
    )
}

#[derive(Debug, Clone, Copy)]
enum Lineage {
    None,
    RowIds,
    RowIdsAndVersions,
}

fn arb_fragment_body() -> impl Strategy<Value = Fragment> {
    (
        vec(arb_data_file(), 1..3),
        vec(arb_overlay_file(), 0..2),
        option::of(1usize..5000),
        prop_oneof![Just(Lineage::None), Just(Lineage::RowIds), Just(Lineage::RowIdsAndVersions)],
        0u64..(1 << 32),
        1u64..100,
    )
        .prop_map(|(files, mut overlays, physical_rows, lineage, row_id_start, version)| {
            // Lance stores (and loads) a fragment's overlays newest-last.
            overlays.sort_by_key(|o| o.committed_version);
            let rows = physical_rows.unwrap_or(16) as u64;
            let mut fragment = Fragment::new(0);
            fragment.files = files;
            fragment.overlays = overlays;
            fragment.physical_rows = physical_rows;
            if !matches!(lineage, Lineage::None) {
                let ids = RowIdSequence::from(row_id_start..row_id_start + rows);
                fragment.row_id_meta = Some(RowIdMeta::Inline(write_row_ids(&ids).into()));
            }
            if matches!(lineage, Lineage::RowIdsAndVersions) {
                let versions = RowDatasetVersionSequence::from_uniform_row_count(rows, version);
                let meta = RowDatasetVersionMeta::from_sequence(&versions).expect("inline versions");
                fragment.created_at_version_meta = Some(meta.clone());
                fragment.last_updated_at_version_meta = Some(meta);
            }
            fragment
        })
}

/// A fragment already in the table: a real id, maybe a deletion file.
pub fn arb_existing_fragment() -> impl Strategy<Value = Fragment> {
    (0u64..64, arb_fragment_body(), option::of(arb_deletion_file())).prop_map(|(id, mut f, deletion_file)| {
        f.id = id;
        f.deletion_file = deletion_file;
        f
    })
}

/// An existing fragment whose deletion vector was just written (a delete's post-image).
pub fn arb_deleted_from_fragment() -> impl Strategy<Value = Fragment> {
    (0u64..64, arb_fragment_body(), arb_deletion_file()).prop_map(|(id, mut f, deletion_file)| {
        f.id = id;
        f.deletion_file = Some(deletion_file);
        f
    })
}

/// A newly written fragment: id 0 (assigned at commit) or a reserved id, never a deletion file.
pub fn arb_new_fragment() -> impl Strategy<Value = Fragment> {
    (prop_oneof![3 => Just(0u64), 1 => 64u64..128], arb_fragment_body()).prop_map(|(id, mut f)| {
        f.id = id;
        f
    })
}

// ---------------------------------------------------------------------------------------------
// Schemas and indices
// ---------------------------------------------------------------------------------------------

fn arrow_field_pool() -> Vec<ArrowField> {
    let item = |t: DataType| Arc::new(ArrowField::new("item", t, true));
    vec![
        ArrowField::new("id", DataType::Int64, false),
        ArrowField::new("name", DataType::Utf8, true),
        ArrowField::new("score", DataType::Float64, true),
        ArrowField::new("flag", DataType::Boolean, true),
        ArrowField::new("vec", DataType::FixedSizeList(item(DataType::Float32), 4), true),
        ArrowField::new("tags", DataType::List(item(DataType::Utf8)), true),
        ArrowField::new(
            "s",
            DataType::Struct(ArrowFields::from(vec![
                ArrowField::new("a", DataType::Int32, false),
                ArrowField::new("b", DataType::LargeUtf8, true),
            ])),
            true,
        ),
    ]
}

/// A small Lance schema (ids assigned by Lance) with schema metadata and per-field metadata.
pub fn arb_schema() -> impl Strategy<Value = Schema> {
    let pool_len = arrow_field_pool().len();
    (
        subsequence((0..pool_len).collect::<Vec<_>>(), 1..=pool_len),
        vec(arb_string_map(), pool_len),
        arb_string_map(),
        any::<bool>(),
    )
        .prop_map(|(picks, field_meta, schema_meta, child_meta)| {
            let pool = arrow_field_pool();
            let fields: Vec<ArrowField> =
                picks.iter().map(|&i| pool[i].clone().with_metadata(field_meta[i].clone())).collect();
            let arrow = ArrowSchema::new(fields).with_metadata(schema_meta);
            let mut schema = Schema::try_from(&arrow).expect("a valid arrow schema");
            // Metadata on a nested field too (Lance stores it per flattened field).
            if child_meta && let Some(child) = schema.fields.iter_mut().find_map(|f| f.children.first_mut()) {
                child.metadata.insert("child".into(), "meta".into());
            }
            schema
        })
}

fn arb_index_file() -> impl Strategy<Value = IndexFile> {
    ("[a-z]{1,8}", any::<u64>()).prop_map(|(p, size_bytes)| IndexFile { path: format!("{p}.idx"), size_bytes })
}

pub fn arb_index() -> impl Strategy<Value = IndexMetadata> {
    (
        (arb_uuid(), vec(0i32..10, 1..4), any::<bool>(), "[a-z_]{1,10}", 0u64..1000),
        (option::of(arb_bitmap(200, 20)), option::of(arb_any()), 0i32..3),
        (option::of(1u64..2_000_000_000_000), option::of(0u32..4), option::of(vec(arb_index_file(), 1..3))),
    )
        .prop_map(
            |(
                (uuid, fields, covering, name, dataset_version),
                (fragment_bitmap, details, index_version),
                (created_ms, base_id, files),
            )| {
                let covering_fields = match fields.as_slice() {
                    [.., last] if covering && fields.len() > 1 => vec![*last],
                    _ => vec![],
                };
                let index = IndexMetadata {
                    uuid,
                    fields,
                    covering_fields,
                    name,
                    dataset_version,
                    fragment_bitmap,
                    index_details: details.map(Arc::new),
                    index_version,
                    created_at: None,
                    base_id,
                    files,
                };
                match created_ms {
                    None => index,
                    // `created_at` is a chrono timestamp at millisecond precision; go through Lance's
                    // own message to set one without a chrono dependency.
                    Some(ms) => {
                        let mut p = pb::IndexMetadata::from(&index);
                        p.created_at = Some(ms);
                        IndexMetadata::try_from(p).expect("valid index metadata")
                    }
                }
            },
        )
}

fn arb_frag_reuse_index() -> impl Strategy<Value = IndexMetadata> {
    arb_index().prop_map(|mut i| {
        i.name = "__lance_frag_reuse".into();
        i.fields = vec![];
        i.covering_fields = vec![];
        i
    })
}

fn arb_rewritten_index() -> impl Strategy<Value = RewrittenIndex> {
    (arb_uuid(), arb_uuid(), arb_any(), 0u32..3, option::of(vec(arb_index_file(), 1..3))).prop_map(
        |(old_id, new_id, new_index_details, new_index_version, new_index_files)| RewrittenIndex {
            old_id,
            new_id,
            new_index_details,
            new_index_version,
            new_index_files,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

fn arb_append() -> impl Strategy<Value = Operation> {
    vec(arb_new_fragment(), 0..4).prop_map(|fragments| Operation::Append { fragments })
}

fn arb_delete() -> impl Strategy<Value = Operation> {
    (vec(arb_deleted_from_fragment(), 0..3), btree_set(0u64..64, 0..3), "[a-z]{1,5} (=|<|>) [0-9]{1,3}").prop_map(
        |(updated_fragments, deleted, predicate)| Operation::Delete {
            updated_fragments,
            deleted_fragment_ids: deleted.into_iter().collect(),
            predicate,
        },
    )
}

fn arb_overwrite() -> impl Strategy<Value = Operation> {
    (
        vec(arb_new_fragment(), 0..3),
        arb_schema(),
        option::of(hash_map("[a-z.]{1,8}", "[ -~]{0,8}", 0..3)),
        option::of(vec(arb_base_path(), 0..3)),
    )
        .prop_map(|(fragments, schema, config_upsert_values, initial_bases)| Operation::Overwrite {
            fragments,
            schema,
            config_upsert_values,
            initial_bases,
        })
}

fn arb_create_index() -> impl Strategy<Value = Operation> {
    (vec(arb_index(), 0..3), vec(arb_index(), 0..3))
        .prop_map(|(new_indices, removed_indices)| Operation::CreateIndex { new_indices, removed_indices })
}

fn arb_rewrite(with_frag_reuse: bool) -> impl Strategy<Value = Operation> {
    let frag_reuse = if with_frag_reuse { option::of(arb_frag_reuse_index()).boxed() } else { Just(None).boxed() };
    let group = (vec(arb_existing_fragment(), 1..3), vec(arb_new_fragment(), 1..3))
        .prop_map(|(old_fragments, new_fragments)| RewriteGroup { old_fragments, new_fragments });
    (vec(group, 0..3), vec(arb_rewritten_index(), 0..2), frag_reuse).prop_map(
        |(groups, rewritten_indices, frag_reuse_index)| Operation::Rewrite {
            groups,
            rewritten_indices,
            frag_reuse_index,
        },
    )
}

fn arb_data_replacement() -> impl Strategy<Value = Operation> {
    vec((0u64..64, arb_data_file()), 0..3).prop_map(|groups| Operation::DataReplacement {
        replacements: groups.into_iter().map(|(id, file)| DataReplacementGroup(id, file)).collect(),
    })
}

fn arb_data_overlay() -> impl Strategy<Value = Operation> {
    let group = (0u64..64, vec(arb_overlay_file(), 1..3))
        .prop_map(|(fragment_id, overlays)| DataOverlayGroup { fragment_id, overlays });
    vec(group, 0..3).prop_map(|groups| Operation::DataOverlay { groups })
}

fn arb_merge() -> impl Strategy<Value = Operation> {
    (vec(arb_existing_fragment(), 0..3), vec(arb_new_fragment(), 0..2), arb_schema(), any::<bool>()).prop_map(
        |(mut fragments, new, schema, preserves_nullability)| {
            fragments.extend(new);
            Operation::Merge { fragments, schema, preserves_nullability }
        },
    )
}

fn arb_project() -> impl Strategy<Value = Operation> {
    (arb_schema(), any::<bool>())
        .prop_map(|(schema, preserves_nullability)| Operation::Project { schema, preserves_nullability })
}

/// The three `Update` families Lance 14 writers produce, plus column rewrites that name no
/// column-rewrite mode: as Lance reads them back from an older transaction file (mode defaulted to
/// `RewriteRows`), or as built in memory with no mode. Both round-trip, but lift models their
/// updated fragments as deletion-vector changes, not column rewrites: a modelling gap in the
/// masks, not a round-trip failure.
#[derive(Debug, Clone, Copy)]
enum UpdateFamily {
    /// Delete-only merge-insert, or a MemWAL flush: no mode.
    NoMode,
    /// `update` / upsert merge-insert: rows deleted in place and rewritten in new fragments.
    RewriteRows,
    /// In-place merge-insert: columns rewritten inside the updated fragments.
    RewriteColumns,
    /// A pre-`update_mode` column rewrite, as Lance 14 decodes it.
    LegacyColumnRewrite,
    /// The same built in memory without a mode (Lance's `Update` does not require one).
    UnmodedColumnRewrite,
}

fn arb_update() -> impl Strategy<Value = Operation> {
    (
        prop_oneof![
            Just(UpdateFamily::NoMode),
            Just(UpdateFamily::RewriteRows),
            Just(UpdateFamily::RewriteColumns),
            Just(UpdateFamily::LegacyColumnRewrite),
            Just(UpdateFamily::UnmodedColumnRewrite),
        ],
        (btree_set(0u64..64, 0..3), vec(arb_existing_fragment(), 0..3), vec(arb_new_fragment(), 0..3)),
        (btree_set(0u32..10, 1..3), vec(arb_compacted_sstable(), 0..3), btree_set(0u32..10, 0..5)),
        (option::of(arb_key_filter()), any::<bool>(), arb_bitmap(1000, 10)),
    )
        .prop_map(
            |(family, (removed, updated, new), (fields, compacted, preserving), (filter, with_offsets, offsets))| {
                let fields: Vec<u32> = fields.into_iter().collect();
                let preserving: Vec<u32> = preserving.into_iter().collect();
                let offsets_of = |frags: &[Fragment]| {
                    UpdatedFragmentOffsets(frags.iter().map(|f| (f.id, offsets.clone())).collect::<HashMap<_, _>>())
                };
                let (removed, fields_modified, preserving, mode, offsets) = match family {
                    UpdateFamily::NoMode => (removed, vec![], preserving, None, None),
                    UpdateFamily::RewriteRows => (removed, vec![], preserving, Some(UpdateMode::RewriteRows), None),
                    UpdateFamily::RewriteColumns => (
                        BTreeSet::new(),
                        fields,
                        vec![],
                        Some(UpdateMode::RewriteColumns),
                        with_offsets.then(|| offsets_of(&updated)),
                    ),
                    UpdateFamily::LegacyColumnRewrite => {
                        (BTreeSet::new(), fields, vec![], Some(UpdateMode::RewriteRows), None)
                    }
                    UpdateFamily::UnmodedColumnRewrite => (BTreeSet::new(), fields, vec![], None, None),
                };
                Operation::Update {
                    removed_fragment_ids: removed.into_iter().collect(),
                    updated_fragments: updated,
                    new_fragments: new,
                    fields_modified,
                    compacted_sstables: compacted,
                    fields_for_preserving_frag_bitmap: preserving,
                    update_mode: mode,
                    inserted_rows_filter: filter,
                    updated_fragment_offsets: offsets,
                }
            },
        )
}

fn arb_update_config() -> impl Strategy<Value = Operation> {
    (
        option::of(arb_update_map()),
        option::of(arb_update_map()),
        option::of(arb_update_map()),
        hash_map(0i32..10, arb_update_map(), 0..4),
    )
        .prop_map(|(config_updates, table_metadata_updates, schema_metadata_updates, field_metadata_updates)| {
            Operation::UpdateConfig {
                config_updates,
                table_metadata_updates,
                schema_metadata_updates,
                field_metadata_updates,
            }
        })
}

fn arb_clone() -> impl Strategy<Value = Operation> {
    (any::<bool>(), option::of("[a-z]{1,6}"), any::<u64>(), "[a-z/]{1,12}", option::of("[a-z]{1,6}")).prop_map(
        |(is_shallow, ref_name, ref_version, ref_path, branch_name)| Operation::Clone {
            is_shallow,
            ref_name,
            ref_version,
            ref_path: format!("s3://bucket/{ref_path}"),
            branch_name,
        },
    )
}

/// Every Lance 14.0.2 operation except `Unknown` (which only lance-table can construct).
/// `with_frag_reuse` lets `Rewrite.frag_reuse_index` be `Some`; Lance never serializes it.
pub fn arb_operation_with(with_frag_reuse: bool) -> BoxedStrategy<Operation> {
    prop_oneof![
        arb_append().boxed(),
        arb_delete().boxed(),
        arb_overwrite().boxed(),
        arb_create_index().boxed(),
        arb_rewrite(with_frag_reuse).boxed(),
        arb_data_replacement().boxed(),
        arb_data_overlay().boxed(),
        arb_merge().boxed(),
        any::<u64>().prop_map(|version| Operation::Restore { version }).boxed(),
        any::<u32>().prop_map(|num_fragments| Operation::ReserveFragments { num_fragments }).boxed(),
        // Update has the most shapes; weigh it up.
        arb_update().boxed(),
        arb_update().boxed(),
        arb_project().boxed(),
        arb_update_config().boxed(),
        vec(arb_compacted_sstable(), 0..3)
            .prop_map(|compacted_sstables| Operation::UpdateMemWalState { compacted_sstables })
            .boxed(),
        arb_clone().boxed(),
        vec(arb_base_path(), 0..3).prop_map(|new_bases| Operation::UpdateBases { new_bases }).boxed(),
    ]
    .boxed()
}

/// Any operation, `Rewrite.frag_reuse_index` included.
pub fn arb_operation() -> BoxedStrategy<Operation> {
    arb_operation_with(true)
}

/// Operations as Lance serializes them: `Rewrite.frag_reuse_index` is always `None`.
pub fn arb_serializable_operation() -> BoxedStrategy<Operation> {
    arb_operation_with(false)
}
