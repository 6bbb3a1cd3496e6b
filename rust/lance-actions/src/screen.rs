//! The driver's screen: a summary of each action's masks, computed once per transaction, that rules
//! most (our action, peer) pairs out before any path is compared or any rebase runs.
//!
//! The exact test is [`ManifestPath::overlaps`] over every (our path, their written path) pair, then
//! the action's `rebase` on the overlapping peer actions. The screen answers "skip" only when that
//! exact route is known to end in Ok without touching our payload, so it never changes a verdict
//! (`design/commit.md`, "The screen"):
//!
//! * **Classes.** Every path falls in one class (a bit). For each of our paths the screen records
//!   every class of written path it *could* overlap (its reach, following the criterion rules of
//!   `overlaps`); for each peer action, the classes it writes. Disjoint bit sets mean no path pair can
//!   overlap.
//! * **Fragment ids.** When the only shared classes are concrete fragment paths, a 64-bit sketch of
//!   fragment ids (id mod 64) on each side tells fragments apart: `overlaps` requires equal ids.
//! * **Commuting inserts.** Two inserts that declare no keys commute on what both write (values,
//!   the fragment list, the id counters): `AddFragments::rebase` answers Ok for every such overlap
//!   and changes nothing. That is the one pair the screen decides from action kinds.

use crate::action::{Action, AnyAction};
use crate::path::{FragmentScope, ManifestPath, Mask};

/// A set of path classes, one bit each.
type Classes = u32;

const TABLE: Classes = 1 << 0;
const TABLE_DATA: Classes = 1 << 1;
const FRAGMENT_SET: Classes = 1 << 2;
/// Fragment paths naming its existence or data (whole, existence, data files).
const FRAGMENT_DATA: Classes = 1 << 3;
/// Fragment paths naming its other parts (deletion vector, row ids, version metadata, overlays).
const FRAGMENT_META: Classes = 1 << 4;
const FRAGMENTS_COVERING_FIELD: Classes = 1 << 5;
const FIELD_VALUES: Classes = 1 << 6;
const FRAGMENT_ID_COUNTER: Classes = 1 << 7;
const ROW_ID_COUNTER: Classes = 1 << 8;
const FIELD: Classes = 1 << 9;
const FIELDS_OUTSIDE: Classes = 1 << 10;
const UNENFORCED_KEY: Classes = 1 << 11;
const INDEX: Classes = 1 << 12;
const INDEX_NAME: Classes = 1 << 13;
const INDICES_COVERING_FIELD: Classes = 1 << 14;
const CONFIG_ENTRY: Classes = 1 << 15;
const CONFIG_MAP_WHOLE: Classes = 1 << 16;
const BASE: Classes = 1 << 17;
const MEMWAL_SHARD: Classes = 1 << 18;

const ALL: Classes = (1 << 19) - 1;
/// Classes of concrete fragment paths, where the id sketch applies.
const FRAGMENTS: Classes = FRAGMENT_DATA | FRAGMENT_META;
/// Every class `TableData` covers (`ManifestPath::is_table_data`).
const TABLE_DATA_CLASSES: Classes =
    TABLE_DATA | FRAGMENT_SET | FRAGMENTS | FRAGMENTS_COVERING_FIELD | FIELD_VALUES | FIELD | FIELDS_OUTSIDE;
/// What two key-less inserts both write, and commute on.
const INSERT_WRITES: Classes = FIELD_VALUES | FRAGMENT_SET | FRAGMENT_ID_COUNTER | ROW_ID_COUNTER;

fn fragment_class(scope: &FragmentScope) -> Classes {
    match scope {
        FragmentScope::Whole | FragmentScope::Existence | FragmentScope::DataFiles(_) => FRAGMENT_DATA,
        FragmentScope::DeletionVector
        | FragmentScope::RowIds
        | FragmentScope::VersionMeta
        | FragmentScope::Overlays => FRAGMENT_META,
    }
}

/// The class of a path, as a written path.
fn class_of(path: &ManifestPath) -> Classes {
    use ManifestPath::*;
    match path {
        Table => TABLE,
        TableData => TABLE_DATA,
        FragmentSet => FRAGMENT_SET,
        Fragment { scope, .. } => fragment_class(scope),
        FragmentsCoveringField { .. } => FRAGMENTS_COVERING_FIELD,
        FieldValues { .. } => FIELD_VALUES,
        FragmentIdCounter => FRAGMENT_ID_COUNTER,
        RowIdCounter => ROW_ID_COUNTER,
        Field { .. } => FIELD,
        FieldsOutside { .. } => FIELDS_OUTSIDE,
        UnenforcedKey(_) => UNENFORCED_KEY,
        Index { .. } => INDEX,
        IndexName(_) => INDEX_NAME,
        IndicesCoveringField { .. } => INDICES_COVERING_FIELD,
        ConfigEntry { .. } => CONFIG_ENTRY,
        ConfigMapWhole(_) => CONFIG_MAP_WHOLE,
        Base(_) => BASE,
        MemWalShard(_) => MEMWAL_SHARD,
    }
}

/// Every class of written path that `ours` could overlap: a superset of what `overlaps` accepts.
fn reach_of(ours: &ManifestPath) -> Classes {
    use ManifestPath::*;
    let specific = match ours {
        Table => return ALL,
        TableData => return TABLE | TABLE_DATA_CLASSES,
        // A write of a fragment's existence or of the whole fragment touches every scope; our
        // existence is touched by nothing else; data scopes also meet a field-data criterion.
        Fragment { scope: FragmentScope::Whole, .. } => FRAGMENTS | FRAGMENTS_COVERING_FIELD,
        Fragment { scope: FragmentScope::Existence | FragmentScope::DataFiles(_), .. } => {
            FRAGMENT_DATA | FRAGMENTS_COVERING_FIELD
        }
        Fragment { .. } => FRAGMENTS,
        FragmentsCoveringField { .. } => FRAGMENT_DATA | FRAGMENTS_COVERING_FIELD,
        Field { .. } | FieldsOutside { .. } => FIELD | FIELDS_OUTSIDE,
        Index { .. } | IndicesCoveringField { .. } => INDEX | INDICES_COVERING_FIELD,
        ConfigEntry { .. } | ConfigMapWhole(_) => CONFIG_ENTRY | CONFIG_MAP_WHOLE,
        other => class_of(other),
    };
    let table_data = if class_of(ours) & TABLE_DATA_CLASSES != 0 { TABLE_DATA } else { 0 };
    specific | table_data | TABLE
}

/// The id sketch bit of a fragment id.
fn id_bit(id: u64) -> u64 {
    1 << (id % 64)
}

/// Can two key-less inserts' overlap be decided from their kinds? (See the module docs.)
fn is_keyless_insert(action: &AnyAction) -> bool {
    matches!(action, AnyAction::AddFragments(a) if a.keys.is_none())
}

/// One of our actions, summarised from its reads and writes.
#[derive(Debug, Clone, Default)]
pub struct OurScreen {
    /// Every class of written path one of our paths could overlap.
    reach: Classes,
    /// Ids of our concrete fragment paths; `None` when a path of ours reaches fragments by criterion
    /// (then ids cannot tell fragments apart).
    fragment_ids: Option<u64>,
    keyless_insert: bool,
}

impl OurScreen {
    /// Summarise one of our actions; `mask` is its reads and writes.
    pub fn of(action: &AnyAction, mask: &Mask) -> Self {
        let mut reach = 0;
        let mut ids = 0u64;
        let mut concrete = true;
        for path in mask.iter() {
            let r = reach_of(path);
            reach |= r;
            match path {
                ManifestPath::Fragment { id, .. } => ids |= id_bit(*id),
                _ if r & FRAGMENTS != 0 => concrete = false,
                _ => {}
            }
        }
        Self { reach, fragment_ids: concrete.then_some(ids), keyless_insert: is_keyless_insert(action) }
    }
}

impl OurScreen {
    /// The summary of our whole transaction: a peer this rules out ([`rules_out`]) is ruled out for
    /// every one of our actions, because each rule only gets harder to pass for a part. The union
    /// reaches every class a part reaches, names every fragment a part names (and none, by
    /// criterion, if any part reaches fragments by criterion), and is a key-less insert only when
    /// every part is.
    pub fn union(actions: &[OurScreen]) -> Self {
        let mut all = OurScreen { reach: 0, fragment_ids: Some(0), keyless_insert: !actions.is_empty() };
        for a in actions {
            all.reach |= a.reach;
            all.fragment_ids = match (all.fragment_ids, a.fragment_ids) {
                (Some(ids), Some(more)) => Some(ids | more),
                _ => None,
            };
            all.keyless_insert &= a.keyless_insert;
        }
        all
    }
}

/// One peer action, summarised from its writes.
#[derive(Debug, Clone, Default)]
pub struct PeerScreen {
    writes: Classes,
    /// Ids of the fragments it writes concretely.
    fragment_ids: u64,
    keyless_insert: bool,
}

impl PeerScreen {
    /// Summarise one peer action; `written` is its writes.
    pub fn of(action: &AnyAction, written: &Mask) -> Self {
        let mut writes = 0;
        let mut ids = 0u64;
        for path in written.iter() {
            writes |= class_of(path);
            if let ManifestPath::Fragment { id, .. } = path {
                ids |= id_bit(*id);
            }
        }
        Self { writes, fragment_ids: ids, keyless_insert: is_keyless_insert(action) }
    }

    /// The summary of a whole peer transaction: the union of its actions' summaries, for a first
    /// test against all of them at once.
    pub fn union(actions: &[PeerScreen]) -> Self {
        let mut all = PeerScreen { keyless_insert: !actions.is_empty(), ..Default::default() };
        for a in actions {
            all.writes |= a.writes;
            all.fragment_ids |= a.fragment_ids;
            all.keyless_insert &= a.keyless_insert;
        }
        all
    }
}

/// Can no path of `ours` overlap a path `theirs` wrote, or, where they overlap, is the rebase known
/// to answer Ok and change nothing? `true` means the exact route may be skipped.
pub fn rules_out(ours: &OurScreen, theirs: &PeerScreen) -> bool {
    let shared = ours.reach & theirs.writes;
    if shared == 0 {
        return true;
    }
    if shared & !FRAGMENTS == 0
        && let Some(ids) = ours.fragment_ids
        && ids & theirs.fragment_ids == 0
    {
        return true;
    }
    ours.keyless_insert && theirs.keyless_insert && shared & !INSERT_WRITES == 0
}

/// Is every action of the peer ruled out for our action? Tries the whole peer first.
pub fn rules_out_peer(ours: &OurScreen, whole: &PeerScreen, actions: &[PeerScreen]) -> bool {
    rules_out(ours, whole) || actions.iter().all(|a| rules_out(ours, a))
}

/// The summaries of a peer transaction's actions, and of the whole.
pub fn peer_screens(actions: &[AnyAction], writes: &[Mask]) -> (Vec<PeerScreen>, PeerScreen) {
    let each: Vec<PeerScreen> = actions.iter().zip(writes).map(|(a, w)| PeerScreen::of(a, w)).collect();
    let whole = PeerScreen::union(&each);
    (each, whole)
}

/// The summaries of our actions (their reads and writes in `masks`).
pub fn our_screens(actions: &[AnyAction], masks: &[Mask]) -> Vec<OurScreen> {
    actions.iter().zip(masks).map(|(a, m)| OurScreen::of(a, m)).collect()
}

/// Reads and writes of `action`, as one mask.
pub fn mask_of(action: &AnyAction) -> Mask {
    let mut m = action.reads();
    m.extend(action.writes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{ConfigMap, FieldScope, IndexScope};
    use uuid::Uuid;

    /// Every path shape the overlap rules distinguish, a few ids and fields each.
    fn all_paths() -> Vec<ManifestPath> {
        use ManifestPath::*;
        let scopes = [
            FragmentScope::Whole,
            FragmentScope::Existence,
            FragmentScope::DataFiles(None),
            FragmentScope::DataFiles(Some(1)),
            FragmentScope::DataFiles(Some(2)),
            FragmentScope::DeletionVector,
            FragmentScope::RowIds,
            FragmentScope::VersionMeta,
            FragmentScope::Overlays,
        ];
        let mut out = vec![Table, TableData, FragmentSet, FragmentIdCounter, RowIdCounter];
        for id in [0u64, 1, 64] {
            out.extend(scopes.iter().cloned().map(|scope| Fragment { id, scope }));
        }
        for field in [1, 2] {
            out.push(FragmentsCoveringField { field });
            out.push(FieldValues { field });
            for scope in [FieldScope::Definition, FieldScope::Name, FieldScope::Nullability] {
                out.push(Field { id: field, scope });
            }
            for scope in [IndexScope::Whole, IndexScope::Coverage, IndexScope::Files] {
                out.push(IndicesCoveringField { field, scope: scope.clone() });
                out.push(Index { uuid: Uuid::nil(), fields: vec![field], scope });
            }
        }
        out.push(FieldsOutside { kept: vec![1] });
        out.push(UnenforcedKey(crate::path::KeyKind::Primary));
        out.push(IndexName("a".into()));
        for map in [ConfigMap::Config, ConfigMap::TableMetadata] {
            out.push(ConfigEntry { map: map.clone(), key: "k".into() });
            out.push(ConfigMapWhole(map));
        }
        out.push(Base(crate::path::BaseKey::Id(1)));
        out.push(MemWalShard(Uuid::nil()));
        out
    }

    #[test]
    fn reach_covers_every_overlap_the_exact_test_accepts() {
        let paths = all_paths();
        for ours in &paths {
            for theirs in &paths {
                if ours.overlaps(theirs) {
                    assert_ne!(
                        reach_of(ours) & class_of(theirs),
                        0,
                        "{ours} overlaps {theirs} but the screen misses it"
                    );
                }
            }
        }
    }

    #[test]
    fn screen_rules_out_only_pairs_without_an_overlap() {
        let paths = all_paths();
        let opaque = AnyAction::from(crate::actions::opaque::Opaque { description: String::new() });
        for ours in &paths {
            let us = OurScreen::of(&opaque, &Mask(vec![ours.clone()]));
            for theirs in &paths {
                let them = PeerScreen::of(&opaque, &Mask(vec![theirs.clone()]));
                if ours.overlaps(theirs) {
                    assert!(!rules_out(&us, &them), "{ours} overlaps {theirs}: must not be ruled out");
                }
            }
        }
    }

    /// Whatever the union rules out, every part rules out (the driver's whole-transaction test
    /// relies on it), over pairs of our paths against every written path, with and without the
    /// key-less insert kind on each side.
    #[test]
    fn what_the_union_rules_out_every_part_rules_out() {
        let paths = all_paths();
        let opaque = AnyAction::from(crate::actions::opaque::Opaque { description: String::new() });
        let insert = AnyAction::from(crate::actions::add_fragments::AddFragments { fragments: vec![], keys: None });
        let mut checked = 0;
        for (i, a) in paths.iter().enumerate().step_by(3) {
            for b in paths.iter().skip(i).step_by(5) {
                for (x, y) in [(&opaque, &opaque), (&insert, &insert), (&insert, &opaque)] {
                    let parts = [OurScreen::of(x, &Mask(vec![a.clone()])), OurScreen::of(y, &Mask(vec![b.clone()]))];
                    let whole = OurScreen::union(&parts);
                    for theirs in &paths {
                        for kind in [&opaque, &insert] {
                            let them = PeerScreen::of(kind, &Mask(vec![theirs.clone()]));
                            if rules_out(&whole, &them) {
                                checked += 1;
                                assert!(
                                    parts.iter().all(|p| rules_out(p, &them)),
                                    "the union of {a} and {b} rules out {theirs}, a part does not"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 100, "the union ruled out only {checked} pairs: the test proves little");
    }

    #[test]
    fn fragment_ids_tell_disjoint_fragments_apart_but_not_a_criterion() {
        let opaque = AnyAction::from(crate::actions::opaque::Opaque { description: String::new() });
        let dv = |id| ManifestPath::fragment(id, FragmentScope::DeletionVector);
        let ours = OurScreen::of(&opaque, &Mask(vec![dv(0)]));
        assert!(rules_out(&ours, &PeerScreen::of(&opaque, &Mask(vec![dv(1)]))));
        assert!(!rules_out(&ours, &PeerScreen::of(&opaque, &Mask(vec![dv(64)]))), "same sketch bit: exact route");
        let criterion = OurScreen::of(&opaque, &Mask(vec![ManifestPath::FragmentsCoveringField { field: 1 }]));
        let data = ManifestPath::fragment(1, FragmentScope::DataFiles(None));
        assert!(!rules_out(&criterion, &PeerScreen::of(&opaque, &Mask(vec![data]))));
    }
}
