//! Table classes (`design/fencing.md` §1): a table is declared keyed or keyless append-only in its manifest
//! config, never by a flag on a write call. On a keyed table the action model itself refuses what
//! would break the key guarantee, for every writer that commits through the driver:
//!
//! - an insert of rows (`AddFragments`) that does not declare its keys over exactly the primary key
//!   (`design/fencing.md` §1: no keyed Append);
//! - a schema change or overwrite that drops, replaces or moves the primary key (`design/fencing.md` §1);
//! - a config update that removes or changes the declared class or key (roll-forward only, `design/fencing.md` §1).

use std::collections::{BTreeMap, HashMap};

use lance_core::datatypes::Schema;

/// Config key holding the table class: [`KEYED`] or [`KEYLESS_APPEND_ONLY`].
pub const TABLE_CLASS_KEY: &str = "lance-actions.table-class";
/// Config key holding the declared key: field names in key order, comma separated.
pub const KEY_NAMES_KEY: &str = "lance-actions.key";
/// Config key of the fencing format stamp, written last on main by creation or migration.
pub const FENCING_FORMAT_KEY: &str = "lance-actions.fencing-format";
/// The fencing format this code writes and understands.
pub const FENCING_FORMAT: &str = "1";

pub const KEYED: &str = "keyed";
pub const KEYLESS_APPEND_ONLY: &str = "keyless-append-only";

/// Config keys whose value may never change once the table is keyed.
pub const FROZEN_KEYS: [&str; 3] = [TABLE_CLASS_KEY, KEY_NAMES_KEY, FENCING_FORMAT_KEY];

/// The declared class of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableClass {
    /// No class declared: a plain Lance table, no key guarantee.
    Undeclared,
    /// Keyed on these field names (in key order).
    Keyed { key: Vec<String> },
    /// Declared keyless and append-only: plain appends allowed, no key guarantee.
    KeylessAppendOnly,
    /// A class this code does not know: treated as keyed-and-unknown, so every write is refused.
    Unknown(String),
}

impl TableClass {
    pub fn of(config: &HashMap<String, String>) -> Self {
        match config.get(TABLE_CLASS_KEY).map(String::as_str) {
            None => TableClass::Undeclared,
            Some(KEYED) => TableClass::Keyed { key: parse_key_names(config.get(KEY_NAMES_KEY)) },
            Some(KEYLESS_APPEND_ONLY) => TableClass::KeylessAppendOnly,
            Some(other) => TableClass::Unknown(other.to_string()),
        }
    }

    pub fn is_keyed(&self) -> bool {
        matches!(self, TableClass::Keyed { .. } | TableClass::Unknown(_))
    }
}

/// Field names from the comma-separated config value; empty names are dropped.
pub fn parse_key_names(value: Option<&String>) -> Vec<String> {
    value.map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()).unwrap_or_default()
}

/// The schema's unenforced primary key as (field ids, field names), in key order.
pub fn primary_key_of(schema: &Schema) -> (Vec<i32>, Vec<String>) {
    let fields = schema.unenforced_primary_key();
    (fields.iter().map(|f| f.id).collect(), fields.iter().map(|f| f.name.clone()).collect())
}

/// Does `schema` carry exactly the declared key as its primary key, each field non-nullable?
/// `Err` says what is wrong, in words a user can act on.
pub fn check_primary_key(schema: &Schema, declared: &[String]) -> Result<(), String> {
    let (_, names) = primary_key_of(schema);
    if names != declared {
        return Err(format!(
            "the schema's unenforced primary key is {names:?}, the table is declared keyed on {declared:?}"
        ));
    }
    match schema.unenforced_primary_key().iter().find(|f| f.nullable) {
        Some(f) => Err(format!("primary key field '{}' is nullable", f.name)),
        None => Ok(()),
    }
}

/// What one version of a table declares about its class: the frozen config entries it holds and
/// its schema's primary key. A restore must not change it (`design/fencing.md` §1: roll-forward only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassStamp {
    pub entries: BTreeMap<String, String>,
    pub primary_key: Vec<String>,
}

impl ClassStamp {
    pub fn of(config: &HashMap<String, String>, schema: &Schema) -> Self {
        let entries = FROZEN_KEYS.iter().filter_map(|k| config.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
        Self { entries, primary_key: primary_key_of(schema).1 }
    }

    pub fn class(&self) -> TableClass {
        let config: HashMap<String, String> = self.entries.clone().into_iter().collect();
        TableClass::of(&config)
    }

    /// Does this version declare a class at all (keyed, keyless or one we do not know)?
    pub fn declares_class(&self) -> bool {
        self.class() != TableClass::Undeclared
    }
}

impl std::fmt::Display for ClassStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.class() {
            TableClass::Undeclared => write!(f, "no table class")?,
            TableClass::Keyed { key } => write!(f, "keyed on {key:?}")?,
            TableClass::KeylessAppendOnly => write!(f, "keyless append-only")?,
            TableClass::Unknown(c) => write!(f, "unknown class '{c}'")?,
        }
        match self.entries.get(FENCING_FORMAT_KEY) {
            Some(stamp) => write!(f, ", fencing stamp {stamp}")?,
            None => write!(f, ", no fencing stamp")?,
        }
        write!(f, ", primary key {:?}", self.primary_key)
    }
}

/// The field ids whose values no in-place rewrite may touch: the primary key of a table declared
/// keyed (or of a class this version does not know, which fences everything). Empty otherwise.
pub fn fenced_key_fields(config: &HashMap<String, String>, schema: &Schema) -> Vec<i32> {
    match TableClass::of(config) {
        TableClass::Keyed { key } => {
            let mut ids = primary_key_of(schema).0;
            ids.extend(key.iter().filter_map(|name| schema.field(name).map(|f| f.id)));
            ids.sort_unstable();
            ids.dedup();
            ids
        }
        TableClass::Unknown(_) => primary_key_of(schema).0,
        TableClass::Undeclared | TableClass::KeylessAppendOnly => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_is_read_from_config() {
        let mut config = HashMap::new();
        assert_eq!(TableClass::of(&config), TableClass::Undeclared);
        config.insert(TABLE_CLASS_KEY.to_string(), KEYED.to_string());
        config.insert(KEY_NAMES_KEY.to_string(), "tenant, id".to_string());
        assert_eq!(TableClass::of(&config), TableClass::Keyed { key: vec!["tenant".into(), "id".into()] });
        config.insert(TABLE_CLASS_KEY.to_string(), "graph-v9".to_string());
        assert!(TableClass::of(&config).is_keyed(), "an unknown class must fence, not open up");
    }
}
