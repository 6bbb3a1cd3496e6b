//! Manifest paths: the coordinates an action reads or writes.
//!
//! A path is either *concrete* (it names one thing: fragment 3's deletion vector, index `u`,
//! config key `k`) or a *criterion* (it names every thing that satisfies a predicate: "every index
//! covering field 7"). Concrete paths overlap by equality with scope overlap; a criterion overlaps a
//! concrete path when the concrete path satisfies it. Concrete paths carry the attributes criteria
//! test (an index path carries its fields), so overlap needs no manifest.

use std::fmt;

use uuid::Uuid;

/// Which part of a fragment a path names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FragmentScope {
    /// Every part of the fragment.
    Whole,
    /// That the fragment exists. Removing a fragment writes it; writing it touches every other scope.
    Existence,
    /// The data files holding one field (`Some`) or every field (`None`).
    DataFiles(Option<i32>),
    DeletionVector,
    RowIds,
    VersionMeta,
    Overlays,
}

/// Which part of a schema field a path names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldScope {
    /// Its type and existence. Writing it touches the name and nullability too.
    Definition,
    Name,
    Nullability,
}

/// Which part of an index a path names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexScope {
    Whole,
    /// The fragment bitmap: which fragments the index covers.
    Coverage,
    Files,
}

/// A key-value map of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConfigMap {
    Config,
    TableMetadata,
    SchemaMetadata,
    FieldMetadata(i32),
}

/// How a base path is identified; two bases collide on any of the three.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BaseKey {
    Id(u32),
    Name(String),
    Path(String),
}

/// The unenforced key kinds Lance records in field metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyKind {
    Primary,
    Clustering,
}

/// One coordinate of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ManifestPath {
    /// The whole table. Written by actions that replace the baseline (overwrite, restore) and by
    /// opaque actions; overlaps every path.
    Table,
    /// Criterion: the table's rows and schema (every fragment, the fragment set, every field's
    /// values and definition). Claimed by a standalone MemWAL state update.
    TableData,
    /// Membership of the fragment list: written by anything that adds or removes a fragment.
    FragmentSet,
    Fragment {
        id: u64,
        scope: FragmentScope,
    },
    /// Criterion: the data of `field` in every fragment (an index trained over it reads this).
    FragmentsCoveringField {
        field: i32,
    },
    /// The values of `field` anywhere in the table: written by every action that supplies values,
    /// read by a schema change that proved a nullability claim by scanning them.
    FieldValues {
        field: i32,
    },
    FragmentIdCounter,
    RowIdCounter,
    Field {
        id: i32,
        scope: FieldScope,
    },
    /// Criterion: every field whose id is not in `kept` (what a schema post-image drops).
    FieldsOutside {
        kept: Vec<i32>,
    },
    UnenforcedKey(KeyKind),
    Index {
        uuid: Uuid,
        fields: Vec<i32>,
        scope: IndexScope,
    },
    IndexName(String),
    /// Criterion: every index covering `field`.
    IndicesCoveringField {
        field: i32,
        scope: IndexScope,
    },
    ConfigEntry {
        map: ConfigMap,
        key: String,
    },
    /// A whole map, written by a `replace` update.
    ConfigMapWhole(ConfigMap),
    Base(BaseKey),
    MemWalShard(Uuid),
}

impl ManifestPath {
    pub fn fragment(id: u64, scope: FragmentScope) -> Self {
        Self::Fragment { id, scope }
    }

    pub fn field(id: i32, scope: FieldScope) -> Self {
        Self::Field { id, scope }
    }

    /// Does `self` (something the committing transaction reads or writes) overlap `written`
    /// (something a committed transaction wrote)? The test is directional: a committed write of a
    /// fragment's existence touches every scope we use, but our reading of its existence is not
    /// touched by a committed deletion-vector write.
    pub fn overlaps(&self, written: &ManifestPath) -> bool {
        use ManifestPath::*;
        match (self, written) {
            (Table, _) | (_, Table) => true,
            (TableData, other) | (other, TableData) => other.is_table_data(),
            (Fragment { id: a, scope: sa }, Fragment { id: b, scope: sb }) => a == b && fragment_scopes_overlap(sa, sb),
            (FragmentsCoveringField { field }, Fragment { scope, .. })
            | (Fragment { scope, .. }, FragmentsCoveringField { field }) => scope_holds_field_data(scope, *field),
            (FragmentsCoveringField { field: a }, FragmentsCoveringField { field: b }) => a == b,
            (Field { id: a, scope: sa }, Field { id: b, scope: sb }) => a == b && field_scopes_overlap(sa, sb),
            (FieldsOutside { kept }, Field { id, .. }) | (Field { id, .. }, FieldsOutside { kept }) => {
                !kept.contains(id)
            }
            // Two drops of unknown sets: conservatively overlapping.
            (FieldsOutside { .. }, FieldsOutside { .. }) => true,
            (Index { uuid: a, scope: sa, .. }, Index { uuid: b, scope: sb, .. }) => {
                a == b && index_scopes_overlap(sa, sb)
            }
            (IndicesCoveringField { field, scope: sc }, Index { fields, scope, .. })
            | (Index { fields, scope, .. }, IndicesCoveringField { field, scope: sc }) => {
                fields.contains(field) && index_scopes_overlap(sc, scope)
            }
            (IndicesCoveringField { field: a, scope: sa }, IndicesCoveringField { field: b, scope: sb }) => {
                a == b && index_scopes_overlap(sa, sb)
            }
            (ConfigEntry { map: a, .. }, ConfigMapWhole(b))
            | (ConfigMapWhole(a), ConfigEntry { map: b, .. })
            | (ConfigMapWhole(a), ConfigMapWhole(b)) => a == b,
            (a, b) => a == b,
        }
    }

    /// Is this path part of the table's rows or schema (what `TableData` covers)?
    fn is_table_data(&self) -> bool {
        use ManifestPath::*;
        matches!(
            self,
            TableData
                | FragmentSet
                | Fragment { .. }
                | FragmentsCoveringField { .. }
                | FieldValues { .. }
                | Field { .. }
                | FieldsOutside { .. }
        )
    }

    /// A short stable name of the path's kind, used by the matrix and by `explain`.
    pub fn kind_name(&self) -> &'static str {
        use ManifestPath::*;
        match self {
            Table => "table",
            TableData => "table-data*",
            FragmentSet => "fragment-set",
            Fragment { .. } => "fragment",
            FragmentsCoveringField { .. } => "fragments-covering-field*",
            FieldValues { .. } => "field-values",
            FragmentIdCounter => "fragment-id-counter",
            RowIdCounter => "row-id-counter",
            Field { .. } => "field",
            FieldsOutside { .. } => "fields-outside*",
            UnenforcedKey(_) => "unenforced-key",
            Index { .. } => "index",
            IndexName(_) => "index-name",
            IndicesCoveringField { .. } => "indices-covering-field*",
            ConfigEntry { .. } => "config-entry",
            ConfigMapWhole(_) => "config-map",
            Base(_) => "base",
            MemWalShard(_) => "memwal-shard",
        }
    }
}

fn fragment_scopes_overlap(ours: &FragmentScope, written: &FragmentScope) -> bool {
    use FragmentScope::*;
    match (ours, written) {
        (Whole, _) | (_, Whole) | (_, Existence) => true,
        (Existence, _) => false,
        (DataFiles(a), DataFiles(b)) => a.is_none() || b.is_none() || a == b,
        (a, b) => a == b,
    }
}

fn scope_holds_field_data(scope: &FragmentScope, field: i32) -> bool {
    match scope {
        FragmentScope::Whole | FragmentScope::Existence | FragmentScope::DataFiles(None) => true,
        FragmentScope::DataFiles(Some(f)) => *f == field,
        _ => false,
    }
}

fn field_scopes_overlap(ours: &FieldScope, written: &FieldScope) -> bool {
    matches!(written, FieldScope::Definition) || ours == written || matches!(ours, FieldScope::Definition)
}

fn index_scopes_overlap(a: &IndexScope, b: &IndexScope) -> bool {
    matches!(a, IndexScope::Whole) || matches!(b, IndexScope::Whole) || a == b
}

impl fmt::Display for ManifestPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ManifestPath::*;
        match self {
            Table => write!(f, "table"),
            TableData => write!(f, "table.data"),
            FragmentSet => write!(f, "fragments"),
            Fragment { id, scope } => write!(f, "fragment[{id}].{scope:?}"),
            FragmentsCoveringField { field } => write!(f, "fragments[*].data(field {field})"),
            FieldValues { field } => write!(f, "values(field {field})"),
            FragmentIdCounter => write!(f, "counter.fragment_id"),
            RowIdCounter => write!(f, "counter.row_id"),
            Field { id, scope } => write!(f, "schema.field[{id}].{scope:?}"),
            FieldsOutside { kept } => write!(f, "schema.fields[not in {kept:?}]"),
            UnenforcedKey(k) => write!(f, "schema.unenforced_key.{k:?}"),
            Index { uuid, scope, .. } => write!(f, "index[{uuid}].{scope:?}"),
            IndexName(n) => write!(f, "index_name[{n}]"),
            IndicesCoveringField { field, scope } => {
                write!(f, "indices[covering field {field}].{scope:?}")
            }
            ConfigEntry { map, key } => write!(f, "{map:?}[{key}]"),
            ConfigMapWhole(map) => write!(f, "{map:?}[*]"),
            Base(k) => write!(f, "base[{k:?}]"),
            MemWalShard(s) => write!(f, "memwal.shard[{s}]"),
        }
    }
}

/// A set of paths an action reads or writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mask(pub Vec<ManifestPath>);

impl Mask {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, path: ManifestPath) -> Self {
        self.0.push(path);
        self
    }

    pub fn push(&mut self, path: ManifestPath) {
        self.0.push(path);
    }

    pub fn extend(&mut self, other: Mask) {
        self.0.extend(other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ManifestPath> {
        self.0.iter()
    }

    /// The first pair `(ours, theirs)` where one of our paths overlaps a path the peer wrote.
    pub fn first_overlap<'a>(&'a self, written: &'a Mask) -> Option<(&'a ManifestPath, &'a ManifestPath)> {
        self.0.iter().find_map(|ours| written.0.iter().find(|w| ours.overlaps(w)).map(|w| (ours, w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_fragment_touches_every_scope_but_not_the_reverse() {
        let removed = ManifestPath::fragment(3, FragmentScope::Existence);
        let dv = ManifestPath::fragment(3, FragmentScope::DeletionVector);
        assert!(dv.overlaps(&removed));
        assert!(!removed.overlaps(&dv));
        assert!(!ManifestPath::fragment(4, FragmentScope::DeletionVector).overlaps(&removed));
    }

    #[test]
    fn criterion_index_path_matches_concrete_index_on_field() {
        let crit = ManifestPath::IndicesCoveringField { field: 7, scope: IndexScope::Coverage };
        let on7 = ManifestPath::Index { uuid: Uuid::nil(), fields: vec![7], scope: IndexScope::Whole };
        let on8 = ManifestPath::Index { uuid: Uuid::nil(), fields: vec![8], scope: IndexScope::Whole };
        assert!(crit.overlaps(&on7) && on7.overlaps(&crit));
        assert!(!crit.overlaps(&on8));
    }

    #[test]
    fn dropped_fields_criterion() {
        let dropped = ManifestPath::FieldsOutside { kept: vec![0, 1] };
        assert!(ManifestPath::field(2, FieldScope::Definition).overlaps(&dropped));
        assert!(!ManifestPath::field(1, FieldScope::Definition).overlaps(&dropped));
    }

    #[test]
    fn config_entry_vs_whole_map() {
        let k = ManifestPath::ConfigEntry { map: ConfigMap::Config, key: "a".into() };
        assert!(k.overlaps(&ManifestPath::ConfigMapWhole(ConfigMap::Config)));
        assert!(!k.overlaps(&ManifestPath::ConfigMapWhole(ConfigMap::TableMetadata)));
        assert!(!k.overlaps(&ManifestPath::ConfigEntry { map: ConfigMap::Config, key: "b".into() }));
    }
}
