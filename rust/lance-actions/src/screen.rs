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
//!   and changes nothing. That is the one pair the screen decides from action kinds. Each side
//!   records which classes it reaches (or writes) through actions that are *not* such inserts, so
//!   that a summary of several actions can still tell that every pair meeting in those classes is
//!   a pair of inserts.
//!
//! One rule serves a single action and a whole transaction on either side: the shared classes must
//! be fragment classes with disjoint ids, or insert classes that only key-less inserts reach on our
//! side and write on theirs. For any pair of parts, the classes they share are among the wholes'
//! shared classes, their ids among the wholes' ids, and a part that is not an insert contributes
//! to the wholes' non-insert classes: so what the wholes rule out, every pair of parts rules out
//! (tested below). Two updates of different fragments (each a deletion vector and an insert) are
//! then ruled out by one test, as Lance's `check_txn` rules them out by one match.

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
    /// The part of `reach` reached by actions that are not key-less inserts.
    non_insert_reach: Classes,
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
        let non_insert_reach = if is_keyless_insert(action) { 0 } else { reach };
        Self { reach, fragment_ids: concrete.then_some(ids), non_insert_reach }
    }
}

impl OurScreen {
    /// The summary of our whole transaction: a peer this rules out ([`rules_out`]) is ruled out for
    /// every one of our actions (see the module docs). The union reaches every class a part
    /// reaches, names every fragment a part names (and none, by criterion, if any part reaches
    /// fragments by criterion), and reaches through non-inserts every class a non-insert part
    /// reaches.
    pub fn union(actions: &[OurScreen]) -> Self {
        let mut all = OurScreen { reach: 0, fragment_ids: Some(0), non_insert_reach: 0 };
        for a in actions {
            all.reach |= a.reach;
            all.fragment_ids = match (all.fragment_ids, a.fragment_ids) {
                (Some(ids), Some(more)) => Some(ids | more),
                _ => None,
            };
            all.non_insert_reach |= a.non_insert_reach;
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
    /// The part of `writes` written by actions that are not key-less inserts.
    non_insert_writes: Classes,
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
        let non_insert_writes = if is_keyless_insert(action) { 0 } else { writes };
        Self { writes, fragment_ids: ids, non_insert_writes }
    }

    /// The summary of a whole peer transaction: the union of its actions' summaries, for a first
    /// test against all of them at once.
    pub fn union(actions: &[PeerScreen]) -> Self {
        let mut all = PeerScreen::default();
        for a in actions {
            all.writes |= a.writes;
            all.fragment_ids |= a.fragment_ids;
            all.non_insert_writes |= a.non_insert_writes;
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
    shared_fragments_are_disjoint(ours, theirs, shared & FRAGMENTS)
        && shared_rest_is_between_inserts(ours, theirs, shared & !FRAGMENTS)
}

/// Do the fragment classes both sides meet in (`shared`) name different fragments on each side?
fn shared_fragments_are_disjoint(ours: &OurScreen, theirs: &PeerScreen, shared: Classes) -> bool {
    shared == 0 || ours.fragment_ids.is_some_and(|ids| ids & theirs.fragment_ids == 0)
}

/// Are the other classes both sides meet in (`shared`) insert classes that, on each side, only
/// key-less inserts reach (ours) or write (theirs)? Then every pair meeting there commutes.
fn shared_rest_is_between_inserts(ours: &OurScreen, theirs: &PeerScreen, shared: Classes) -> bool {
    shared & !INSERT_WRITES == 0
        && ours.non_insert_reach & theirs.writes & shared == 0
        && ours.reach & theirs.non_insert_writes & shared == 0
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

    /// The same on both sides at once: what our union rules out of a peer's union, every pair of
    /// parts rules out, over pairs of our paths against pairs of written paths, each part an
    /// insert or not (the driver's whole-transaction test compares two unions).
    #[test]
    fn what_two_unions_rule_out_every_pair_of_parts_rules_out() {
        let paths = all_paths();
        let opaque = AnyAction::from(crate::actions::opaque::Opaque { description: String::new() });
        let insert = AnyAction::from(crate::actions::add_fragments::AddFragments { fragments: vec![], keys: None });
        let kinds = [(&opaque, &opaque), (&insert, &insert), (&insert, &opaque), (&opaque, &insert)];
        let (mut checked, mut refused) = (0, 0);
        for (i, a) in paths.iter().enumerate().step_by(4) {
            for b in paths.iter().skip(i).step_by(7) {
                for (x, y) in kinds {
                    let ours = [OurScreen::of(x, &Mask(vec![a.clone()])), OurScreen::of(y, &Mask(vec![b.clone()]))];
                    let our_whole = OurScreen::union(&ours);
                    for (j, c) in paths.iter().enumerate().step_by(3) {
                        for d in paths.iter().skip(j).step_by(5) {
                            for (u, v) in kinds {
                                let theirs = [
                                    PeerScreen::of(u, &Mask(vec![c.clone()])),
                                    PeerScreen::of(v, &Mask(vec![d.clone()])),
                                ];
                                if !rules_out(&our_whole, &PeerScreen::union(&theirs)) {
                                    refused += 1;
                                    continue;
                                }
                                checked += 1;
                                for p in &ours {
                                    for t in &theirs {
                                        assert!(
                                            rules_out(p, t),
                                            "the unions of ({a}, {b}) and ({c}, {d}) rule out, a pair of parts does not"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1_000 && refused > 1_000, "ruled out {checked}, refused {refused}: the test proves little");
    }

    /// Two updates of different fragments (a deletion vector and a key-less insert each) are ruled
    /// out by one test of the two wholes; of the same fragment, or with a keyed insert, they are not.
    #[test]
    fn two_updates_of_different_fragments_are_ruled_out_as_wholes() {
        use crate::actions::add_fragments::AddFragments;
        use crate::actions::update_deletion_vector::UpdateDeletionVector;
        use lance_table::format::{DataFile, Fragment};
        let with_data = |id: u64| {
            let mut f = Fragment::new(id);
            f.files = vec![DataFile::new_legacy_from_fields(format!("f{id}.lance"), vec![0, 1], None)];
            f
        };
        let update = |id: u64, keyed: bool| -> Vec<AnyAction> {
            let keys = keyed.then_some(crate::keys::InsertedKeys { lance_filter: None, exact: None });
            vec![
                UpdateDeletionVector::new(with_data(id), None).into(),
                AddFragments { fragments: vec![with_data(0)], keys }.into(),
            ]
        };
        let ours_of = |actions: &[AnyAction]| {
            let masks: Vec<Mask> = actions.iter().map(mask_of).collect();
            OurScreen::union(&our_screens(actions, &masks))
        };
        let peer_of = |actions: &[AnyAction]| {
            let writes: Vec<Mask> = actions.iter().map(|a| a.writes()).collect();
            peer_screens(actions, &writes).1
        };
        assert!(rules_out(&ours_of(&update(0, false)), &peer_of(&update(1, false))), "different fragments");
        assert!(!rules_out(&ours_of(&update(0, false)), &peer_of(&update(0, false))), "one fragment: exact route");
        assert!(!rules_out(&ours_of(&update(0, true)), &peer_of(&update(1, false))), "a keyed insert: exact route");
        assert!(!rules_out(&ours_of(&update(0, false)), &peer_of(&update(1, true))), "a keyed peer: exact route");
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
