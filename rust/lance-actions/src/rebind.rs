//! Re-binding an action committed on one branch to another branch, for replay.
//!
//! A replayed action keeps what it means (these rows deleted, these files added) but not its
//! coordinates: fragment ids created on the source after the fork have other ids on the target, and
//! data files named relative to the source's root are reached on the target through a grafted
//! base. Each action module says how its own payload is re-bound ([`crate::ActionLife::rebind`]),
//! or refuses with a typed [`RebindRefusal`] that says why in the user's terms; the replay layer
//! supplies the coordinates through [`Rebinder`] (it owns the IO: lineage, base paths). The
//! reasoning is in `design/replay.md` (re-binding).

use lance_table::format::{DataFile, Fragment, IndexMetadata};
use snafu::Snafu;

use crate::action::ActionKind;
use crate::state::TableState;

/// Why an action committed on a source branch cannot be replayed onto a target. Each variant is a
/// refusal before anything is written.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum RebindRefusal {
    /// The action touches a fragment that a source commit created and that commit is not (yet)
    /// replayed onto the target, so the fragment has no id there.
    #[snafu(display(
        "it touches fragment {fragment}, created by a source commit that is not replayed onto the target"
    ))]
    UnreplayedFragment { fragment: u64 },

    /// A file names a base path id the source branch's manifest does not define.
    #[snafu(display("it references base path {base}, which branch '{branch}' does not define"))]
    UndefinedBase { base: u32, branch: String },

    /// A deletion-vector change whose deleted rows are unknown cannot be merged with the target's.
    #[snafu(display("the rows deleted in fragment {fragment} are not known"))]
    RowsUnknown { fragment: u64 },

    /// A column merge restates every fragment of the table; the target has other fragments.
    #[snafu(display("a column merge restates every fragment, and the target's fragments differ"))]
    FragmentsDiffer,

    /// A compaction that remapped indexes refers to index files by the source's fragment ids.
    #[snafu(display("a compaction that remapped indexes refers to index files by the source's ids"))]
    IndexRemapped,

    /// A fragment written by compaction carries a deletion file (named after a source fragment id).
    #[snafu(display("a compacted fragment carries a deletion file"))]
    CompactedWithDeletions,

    /// An index addresses rows as (fragment id, offset); a covered fragment has another id on the
    /// target.
    #[snafu(display(
        "index '{index}' addresses rows of fragment {fragment}, which is fragment {target} on the target; \
         rebuild the index there instead"
    ))]
    IndexOnMovedFragment { index: String, fragment: u64, target: u64 },

    /// The action replaces the table's baseline (an overwrite, a restore, a clone): replaying it
    /// would discard what the target did since the fork.
    #[snafu(display(
        "{action:?} is not replayable between branches: it replaces the table, which would discard the target's own commits"
    ))]
    ReplacesTable { action: ActionKind },

    /// The action belongs to the source branch's own bookkeeping (its base paths, its fragment-id
    /// reservations); a replay grafts bases and binds ids on the target itself.
    #[snafu(display(
        "{action:?} is not replayable between branches: it is the source branch's own bookkeeping, which replay redoes on the target"
    ))]
    SourceBookkeeping { action: ActionKind },

    /// The action names row offsets or generations of the source that replay cannot yet translate.
    #[snafu(display("{action:?} is not replayable between branches: {why}"))]
    NotTranslatable { action: ActionKind, why: &'static str },

    /// The committed operation is not understood by this build.
    #[snafu(display("an operation this build does not understand ({description}) is not replayable between branches"))]
    NotUnderstood { description: String },
}

/// The target's coordinates for what a source commit names. Implemented by the replay layer from
/// the fork point, the fragment ids earlier replays were given, the target's head and its bases.
pub trait Rebinder {
    /// The target's id for source fragment `source`: the same id for a fragment that existed at the
    /// fork, the id its replay was given for one a source commit created.
    fn fragment_id(&mut self, source: u64) -> Result<u64, RebindRefusal>;

    /// The target's fragment for a source fragment: the head's own (its deletion file is the
    /// target's), or the source's under the mapped id when the head no longer has it (the driver
    /// then reports what removed it).
    fn head_fragment(&mut self, source: &Fragment) -> Result<Fragment, RebindRefusal>;

    /// The ids of every fragment at the target's head, ascending.
    fn head_fragment_ids(&self) -> Vec<u64>;

    /// A data file with its base re-bound so the target reads the source's file in place.
    fn data_file(&mut self, file: &DataFile) -> Result<DataFile, RebindRefusal>;

    /// An index with its base re-bound so the target reads the source's index files in place.
    fn index(&mut self, index: &IndexMetadata) -> Result<IndexMetadata, RebindRefusal>;
}

/// What [`Rebinder::head_fragment`] returns for a source fragment mapped to `id`: the head's own
/// fragment `id`, or the source's under `id` when the head no longer has it.
pub fn head_fragment_or_source(head: &TableState, source: &Fragment, id: u64) -> Fragment {
    head.fragment(id).cloned().unwrap_or_else(|| Fragment { id, ..source.clone() })
}

/// A fragment's data files re-bound; its id and deletion file are the caller's to set.
pub fn fragment_files(cx: &mut dyn Rebinder, fragment: &Fragment) -> Result<Fragment, RebindRefusal> {
    let mut out = fragment.clone();
    out.files = fragment.files.iter().map(|f| cx.data_file(f)).collect::<Result<_, _>>()?;
    Ok(out)
}

/// A new fragment (added or written by compaction): files re-bound, id left unbound (0) for the
/// target to assign at apply time.
pub fn new_fragment(cx: &mut dyn Rebinder, fragment: &Fragment) -> Result<Fragment, RebindRefusal> {
    let mut out = fragment_files(cx, fragment)?;
    out.id = 0;
    Ok(out)
}

/// A source post-image of an existing fragment restated on the target: the source's (re-bound)
/// files under the target's id, keeping the target's deletion file (deletions are re-derived, never
/// copied: a deletion file's name embeds its fragment's id).
pub fn restated_fragment(cx: &mut dyn Rebinder, fragment: &Fragment) -> Result<Fragment, RebindRefusal> {
    let head = cx.head_fragment(fragment)?;
    let mut post = fragment_files(cx, fragment)?;
    post.id = head.id;
    post.deletion_file = head.deletion_file;
    Ok(post)
}

/// Fragment ids mapped to the target.
pub fn fragment_ids(cx: &mut dyn Rebinder, ids: &[u64]) -> Result<Vec<u64>, RebindRefusal> {
    ids.iter().map(|id| cx.fragment_id(*id)).collect()
}
