//! The table as the action model sees it: a pure, cheap summary of a Lance manifest and its indices,
//! against which actions validate and to which they apply.

use std::collections::HashMap;

use lance_core::datatypes::Schema;
use lance_table::format::{BasePath, Fragment, IndexMetadata, Manifest};

mod fragments;
pub use fragments::Fragments;

/// The working state a transaction is validated and applied against.
#[derive(Debug, Clone)]
pub struct TableState {
    /// The version this state describes.
    pub version: u64,
    /// By id; shares the manifest's list and holds only what the transaction changed.
    pub fragments: Fragments,
    /// Highest fragment id ever allocated; the next new fragment gets `max_fragment_id + 1`, or 0
    /// while `no_fragment_id_yet` (Lance's first fragment is 0).
    pub max_fragment_id: u64,
    /// No fragment id was ever allocated (Lance's `max_fragment_id()` is `None`).
    pub no_fragment_id_yet: bool,
    pub schema: Schema,
    pub indices: Vec<IndexMetadata>,
    pub config: HashMap<String, String>,
    pub table_metadata: HashMap<String, String>,
    pub bases: HashMap<u32, BasePath>,
    /// Set when an earlier action of the transaction replaced the table (an overwrite): every row
    /// now present is one this transaction writes, so no committed key can collide with them.
    pub replaced_by_txn: bool,
}

impl TableState {
    /// Summarise a manifest and the indices recorded with it.
    pub fn from_manifest(manifest: &Manifest, indices: &[IndexMetadata]) -> Self {
        Self {
            version: manifest.version,
            fragments: Fragments::shared(manifest.fragments.clone()),
            // Lance's own reading: the stored high-water mark, or the highest id present.
            max_fragment_id: manifest.max_fragment_id().unwrap_or(0),
            no_fragment_id_yet: manifest.max_fragment_id().is_none(),
            schema: manifest.schema.clone(),
            indices: indices.to_vec(),
            config: manifest.config.clone(),
            table_metadata: manifest.table_metadata.clone(),
            bases: manifest.base_paths.clone(),
            replaced_by_txn: false,
        }
    }

    /// An empty table with the given schema (version 0), for tests and the matrix generator.
    pub fn empty(schema: Schema) -> Self {
        Self {
            version: 0,
            fragments: Fragments::default(),
            max_fragment_id: 0,
            // Tests and the matrix number fragments from 1.
            no_fragment_id_yet: false,
            schema,
            indices: Vec::new(),
            config: HashMap::new(),
            table_metadata: HashMap::new(),
            bases: HashMap::new(),
            replaced_by_txn: false,
        }
    }

    pub fn fragment(&self, id: u64) -> Option<&Fragment> {
        self.fragments.get(&id)
    }

    pub fn has_field(&self, id: i32) -> bool {
        self.schema.field_by_id(id).is_some()
    }

    pub fn index_by_uuid(&self, uuid: &uuid::Uuid) -> Option<&IndexMetadata> {
        self.indices.iter().find(|i| &i.uuid == uuid)
    }

    /// Allocate the next fragment id, as Lance does for fragments committed with id 0.
    pub fn allocate_fragment_id(&mut self) -> u64 {
        if self.no_fragment_id_yet {
            self.no_fragment_id_yet = false;
            self.max_fragment_id = 0;
        } else {
            self.max_fragment_id += 1;
        }
        let id = self.max_fragment_id;
        // Positive and negative space: a fresh id is above every id the table holds, so it is none
        // of them (the replay's fragment map pairs ids by this order).
        debug_assert!(
            self.fragments.last_id().is_none_or(|held| held < id),
            "fragment id {id} allocated at or below an id the table holds"
        );
        id
    }

    /// Reserve `count` ids as Lance does (the next `count` ids from the high-water mark).
    pub fn reserve_fragment_ids(&mut self, count: u64) {
        if count == 0 {
            return;
        }
        if self.no_fragment_id_yet {
            self.no_fragment_id_yet = false;
            self.max_fragment_id = count - 1;
        } else {
            self.max_fragment_id += count;
        }
    }

    /// The highest fragment id allocated so far, `None` when none ever was.
    pub fn max_allocated_fragment_id(&self) -> Option<u64> {
        (!self.no_fragment_id_yet).then_some(self.max_fragment_id)
    }
}
