//! Base-path grafting: make the target resolve the source's data files in place.
//!
//! A data file (or deletion file, or index) names the base it lives under with `base_id`; `None` is
//! the dataset's own root. Replayed onto another branch, `None` must become a base for the source
//! branch's root, and a base the source inherited (its parent's root, another graft) must become
//! the target's base for the same location, or `None` when that location is the target's own root.
//! One base per location: a location the target already has a base for is reused.

use std::collections::HashMap;

use lance_actions::RebindRefusal;
use lance_table::format::{BasePath, DataFile, IndexMetadata};

/// How a source's base ids map into a target, and which bases the target must gain.
#[derive(Debug, Clone)]
pub struct Graft {
    target_root: String,
    /// Target bases by normalised location, including the ones this graft adds.
    by_location: HashMap<String, u32>,
    taken: Vec<u32>,
    source_root: String,
    source_name: String,
    source_bases: HashMap<u32, BasePath>,
    /// Bases the target must gain (with explicit, non-zero ids).
    pub new_bases: Vec<BasePath>,
}

/// A location, compared without scheme noise or trailing slashes.
pub fn normalise(location: &str) -> String {
    location.trim_start_matches("file://").trim_end_matches('/').to_string()
}

impl Graft {
    pub fn new(
        target_root: &str,
        target_bases: &HashMap<u32, BasePath>,
        source_root: &str,
        source_name: &str,
        source_bases: &HashMap<u32, BasePath>,
    ) -> Self {
        Self {
            target_root: normalise(target_root),
            by_location: target_bases.values().map(|b| (normalise(&b.path), b.id)).collect(),
            taken: target_bases.keys().copied().collect(),
            source_root: source_root.to_string(),
            source_name: source_name.to_string(),
            source_bases: source_bases.clone(),
            new_bases: Vec::new(),
        }
    }

    /// The target base id for a source base id (`None` = the source's root). `Err` for a base id the
    /// source's manifest does not define: reusing the number would make the target read whatever
    /// location its own base of that id names.
    pub fn map_base(&mut self, source_base: Option<u32>) -> Result<Option<u32>, RebindRefusal> {
        let (location, name, is_root) = match source_base {
            None => (self.source_root.clone(), Some(format!("graft:{}", self.source_name)), true),
            // Lance refuses a second base without a name (an unnamed one clashes with the clone's
            // own unnamed base), so an inherited base gets one too, unique by its location.
            Some(id) => match self.source_bases.get(&id) {
                Some(b) => (b.path.clone(), Some(format!("graft:{}", normalise(&b.path))), b.is_dataset_root),
                None => return Err(RebindRefusal::UndefinedBase { base: id, branch: self.source_name.clone() }),
            },
        };
        let key = normalise(&location);
        if key == self.target_root {
            return Ok(None);
        }
        if let Some(id) = self.by_location.get(&key) {
            return Ok(Some(*id));
        }
        let id = (1..).find(|id| !self.taken.contains(id)).unwrap_or(u32::MAX);
        // Base id 0 is Lance's own root; a fresh id is never one the target already uses.
        debug_assert!(id != 0 && !self.taken.contains(&id), "a fresh base id is non-zero and unused");
        self.taken.push(id);
        self.by_location.insert(key, id);
        self.new_bases.push(BasePath { id, name, is_dataset_root: is_root, path: location });
        Ok(Some(id))
    }

    pub fn data_file(&mut self, file: &DataFile) -> Result<DataFile, RebindRefusal> {
        let mut out = file.clone();
        out.base_id = self.map_base(file.base_id)?;
        Ok(out)
    }

    pub fn index(&mut self, index: &IndexMetadata) -> Result<IndexMetadata, RebindRefusal> {
        let mut out = index.clone();
        out.base_id = self.map_base(index.base_id)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_map_to_one_base_each_and_the_targets_own_root_to_none() {
        let main_root = "/d/t";
        let feature_root = "/d/t/tree/feature";
        // The feature branch inherited main's files through base 0.
        let source_bases = HashMap::from([(0, BasePath::new(0, main_root.into(), Some("main".into()), true))]);
        let mut g = Graft::new(main_root, &HashMap::new(), feature_root, "feature", &source_bases);
        assert_eq!(g.map_base(Some(0)), Ok(None), "main's own files come home");
        let id = g.map_base(None).expect("mapped").expect("a base for the feature root");
        assert_eq!(g.map_base(None), Ok(Some(id)), "one base per location");
        assert_eq!(g.new_bases.len(), 1);
        assert_ne!(id, 0, "ids are never 0 (Lance reserves it)");
        let again = Graft::new(
            main_root,
            &HashMap::from([(id, g.new_bases[0].clone())]),
            &format!("file://{feature_root}/"),
            "feature",
            &source_bases,
        );
        let mut again = again;
        assert_eq!(again.map_base(None), Ok(Some(id)), "a later replay reuses the base");
        assert!(again.new_bases.is_empty());
    }

    /// A base id the source does not define is an error naming it, never the same number reused
    /// (the target's own base of that id may name another location).
    #[test]
    fn a_dangling_source_base_id_is_an_error() {
        let target_bases = HashMap::from([(3, BasePath::new(3, "/elsewhere".into(), Some("other".into()), true))]);
        let mut g = Graft::new("/d/t", &target_bases, "/d/t/tree/feature", "feature", &HashMap::new());
        let err = g.map_base(Some(3)).expect_err("dangling");
        assert_eq!(err, RebindRefusal::UndefinedBase { base: 3, branch: "feature".into() });
        assert!(err.to_string().contains("base path 3"), "{err}");
        assert!(g.new_bases.is_empty());
    }
}
