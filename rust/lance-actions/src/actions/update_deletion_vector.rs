//! UpdateDeletionVector: a fragment gets a new deletion vector (rows deleted, or moved out by an
//! update). Lowers to an entry of `Delete.updated_fragments` or `Update.updated_fragments`.
//!
//! Two writers deleting disjoint rows of one fragment commute: the rebase proves the rows disjoint
//! (from the declared affected rows, or from the deletion files read by the commit layer) and marks
//! the vector for union, which the commit layer performs by writing the merged deletion file.

use super::add_overlay::overlay_rows;
use super::life_prelude::*;
use crate::codec::{self, proto};
use crate::error::Result;
use lance_table::format::Fragment;
use roaring::RoaringBitmap;

use crate::action::{Action, ActionKind, AnyAction, PeerAction, RebaseCx, RebaseFacts, fold_verdicts, invalid};
use crate::context::TxnContext;
use crate::driver::Peer;
use crate::path::{FragmentScope, ManifestPath, Mask};
use crate::state::TableState;
use crate::verdict::{Reason, Rule, Verdict};

#[derive(Debug, Clone, PartialEq)]
pub struct UpdateDeletionVector {
    /// The fragment after the change (its `deletion_file` names the new vector).
    pub fragment: Fragment,
    /// Row offsets this transaction deleted in the fragment, when the writer knows them.
    pub affected_rows: Option<RoaringBitmap>,
    /// Set by rebase: the committed head changed this fragment's vector too, on disjoint rows, so the
    /// commit must write the union of the head's vector and `affected_rows`.
    pub merge_with_head: bool,
}

impl UpdateDeletionVector {
    pub fn new(fragment: Fragment, affected_rows: Option<RoaringBitmap>) -> Self {
        Self { fragment, affected_rows, merge_with_head: false }
    }

    /// Rows a post-image deleted relative to the base fragment, from declared rows or deletion files
    /// (`None` when the files needed were not read).
    pub fn rows_deleted(
        declared: Option<&RoaringBitmap>,
        post: &Fragment,
        base: Option<&Fragment>,
        facts: &dyn RebaseFacts,
    ) -> Option<RoaringBitmap> {
        if let Some(rows) = declared {
            return Some(rows.clone());
        }
        let after = facts.deleted_rows(post)?;
        let before = match base {
            Some(b) => facts.deleted_rows(b)?,
            None => RoaringBitmap::new(),
        };
        Some(after - before)
    }

    /// Is a committed vector's row check left to a later peer's? Yes for a pure delete's vector,
    /// read from its file, when the next vector of the same fragment among the peers of this
    /// resolution is a pure delete's read from its file too, built on this one's version or later
    /// (`design/commit.md`, "Only the newest deletion vector"):
    /// * Built on it, the next vector holds this one's deletions (Lance's rebase, or ours, writes a
    ///   vector a writer changed as the head's with its rows added), so checking ours against the
    ///   last of a run of such deletes, less the base's vector, checks ours against the run. A row
    ///   a vector deleted and a later one does not is live at the head, where deleting it is what
    ///   running ours again would do.
    /// * Only runs of pure deletes are passed over: a row an update moved out must stay told apart
    ///   (delete vs update diverge, see [`Self::deletions_converge`]), and the run's last writer,
    ///   which takes the blame for the run's rows, is a pure delete too, so a replay's convergence
    ///   is granted exactly as writer by writer.
    /// * Declared rows hold only their writer's deletions, not the fragment's: never passed over,
    ///   nor relied on. A peer whose build is not known (a what-if, never committed) supersedes
    ///   nothing.
    ///
    /// The commit layer reads no file for a superseded vector.
    pub fn superseded(peers: &[Peer], version: u64, shell: OperationKind, theirs: &UpdateDeletionVector) -> bool {
        let pure = |shell: OperationKind, u: &UpdateDeletionVector| {
            shell == OperationKind::Delete && u.affected_rows.is_none()
        };
        if !pure(shell, theirs) {
            return false;
        }
        let id = theirs.fragment.id;
        let next = peers.iter().filter(|p| p.version > version).find_map(|p| {
            p.txn.actions.iter().find_map(|a| match a {
                AnyAction::UpdateDeletionVector(u) if u.fragment.id == id => Some((p, u)),
                _ => None,
            })
        });
        next.is_some_and(|(p, u)| pure(p.txn.context.shell, u) && p.built_on.is_some_and(|b| b >= version))
    }

    fn rebase_against_vector(
        &mut self,
        cx: &RebaseCx<'_>,
        peer: &PeerAction<'_>,
        theirs: &UpdateDeletionVector,
    ) -> Verdict {
        const K: ActionKind = ActionKind::UpdateDeletionVector;
        if theirs.fragment.files != self.fragment.files {
            return peer.retry(K, Rule::DataFilesChanged, "the committed change also rewrote data files");
        }
        let base = cx.base.fragment(self.fragment.id);
        let ours = Self::rows_deleted(self.affected_rows.as_ref(), &self.fragment, base, cx.facts);
        if Self::superseded(cx.peers, peer.version, peer.context.shell, theirs) {
            // Checked against the next vector, which holds these deletions too; ours must still be
            // known, for the union to carry them.
            let Some(ours) = ours else {
                return peer.retry(K, Rule::RowsUnknown, "the rows we delete are unknown");
            };
            self.affected_rows = Some(ours);
            self.merge_with_head = true;
            return Verdict::Ok;
        }
        let committed = Self::rows_deleted(theirs.affected_rows.as_ref(), &theirs.fragment, base, cx.facts);
        let (Some(ours), Some(committed)) = (ours, committed) else {
            return peer.retry(K, Rule::RowsUnknown, "deleted rows of one side are unknown");
        };
        let shared = &ours & &committed;
        if !shared.is_empty() && !Self::deletions_converge(cx, peer) {
            return peer.retry(
                K,
                Rule::RowsOverlap,
                format!("{} row(s) changed by both, first offset {}", shared.len(), shared.min().unwrap_or(0)),
            );
        }
        // Convergent rows are already deleted at the head: only the rest is ours to delete.
        self.affected_rows = Some(ours - shared);
        self.merge_with_head = true;
        Verdict::Ok
    }

    /// The same rows deleted on both sides converge (OmniGraph's merge truth table: both-deleted is a
    /// no-op) when both are pure deletes and ours is a replay: it re-applies a decision made on
    /// another branch, so nothing depends on it deleting the rows itself. A live writer keeps the
    /// Retry: it re-reads and reports what it really deleted. A row deleted on one side and moved
    /// out by an update on the other is a real divergence (delete vs update) and stays a conflict.
    fn deletions_converge(cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> bool {
        !cx.ours.replay_origins.is_empty()
            && cx.ours.shell == OperationKind::Delete
            && peer.context.shell == OperationKind::Delete
    }

    fn rebase_one(&mut self, cx: &RebaseCx<'_>, peer: &PeerAction<'_>) -> Verdict {
        const K: ActionKind = ActionKind::UpdateDeletionVector;
        if let Some(v) = peer.baseline_verdict(K) {
            return v;
        }
        match (peer.action, peer.their_path) {
            (AnyAction::UpdateDeletionVector(theirs), _) => self.rebase_against_vector(cx, peer, theirs),
            // An overlay only matters when we move rows out: its values would stay behind.
            (AnyAction::AddOverlay(_), _) if !cx.ours.moves_rows() => Verdict::Ok,
            (_, ManifestPath::Fragment { scope: FragmentScope::Existence, .. }) => {
                peer.retry(K, Rule::FragmentGone, "the committed transaction removed or rewrote the fragment")
            }
            (AnyAction::AddOverlay(o), _) => {
                let base = cx.base.fragment(self.fragment.id);
                match Self::rows_deleted(self.affected_rows.as_ref(), &self.fragment, base, cx.facts) {
                    None => peer.retry(K, Rule::RowsUnknown, "rows we move may carry the committed overlay's values"),
                    Some(moved) if (&moved & &overlay_rows(&o.group)).is_empty() => Verdict::Ok,
                    Some(_) => peer.retry(K, Rule::RowsOverlap, "rows we move carry the committed overlay's values"),
                }
            }
            _ => peer.retry(K, Rule::DataFilesChanged, "the committed transaction changed the fragment"),
        }
    }
}

impl Action for UpdateDeletionVector {
    fn kind(&self) -> ActionKind {
        ActionKind::UpdateDeletionVector
    }

    fn reads(&self) -> Mask {
        let id = self.fragment.id;
        Mask::new()
            .with(ManifestPath::fragment(id, FragmentScope::Existence))
            .with(ManifestPath::fragment(id, FragmentScope::DataFiles(None)))
            .with(ManifestPath::fragment(id, FragmentScope::Overlays))
    }

    fn writes(&self) -> Mask {
        Mask::new().with(ManifestPath::fragment(self.fragment.id, FragmentScope::DeletionVector))
    }

    fn validate(&self, state: &TableState) -> Result<(), Reason> {
        match state.fragment(self.fragment.id) {
            None => {
                Err(invalid(ActionKind::UpdateDeletionVector, format!("fragment {} does not exist", self.fragment.id)))
            }
            Some(_) => Ok(()),
        }
    }

    fn rebase(&mut self, cx: &RebaseCx<'_>, peers: &[PeerAction<'_>]) -> Verdict {
        fold_verdicts(peers, |p| self.rebase_one(cx, p))
    }

    fn apply(&self, state: &mut TableState, _txn: &mut TxnContext) {
        if let Some(f) = state.fragments.get_mut(&self.fragment.id) {
            f.deletion_file = self.fragment.deletion_file.clone();
        }
    }
}

impl UpdateDeletionVector {
    pub(crate) fn encode(&self) -> proto::UpdateDeletionVector {
        proto::UpdateDeletionVector {
            fragment: codec::fragment_bytes(&self.fragment),
            affected_rows: self.affected_rows.as_ref().map(codec::bitmap_bytes),
        }
    }

    pub(crate) fn decode(p: proto::UpdateDeletionVector) -> Result<Self> {
        let affected_rows = p.affected_rows.map(|b| codec::bitmap_from(&b, "affected rows")).transpose()?;
        Ok(Self::new(codec::fragment_from(&p.fragment)?, affected_rows))
    }
}

impl ActionLife for UpdateDeletionVector {
    fn lower_into(&self, slots: &mut Lowering, _shell: OperationKind) -> Result<()> {
        slots.updated.push(self.fragment.clone());
        Ok(())
    }

    /// The rows the source commit deleted, on the target's fragment: the commit writes the target's
    /// vector unioned with them, re-derived under the target's root for the target's fragment id,
    /// never pointed at a source file whose name embeds another fragment's id.
    fn rebind(&self, cx: &mut dyn Rebinder) -> Result<AnyAction, RebindRefusal> {
        let rows = self.affected_rows.clone().ok_or(RebindRefusal::RowsUnknown { fragment: self.fragment.id })?;
        let mut rebound = UpdateDeletionVector::new(cx.head_fragment(&self.fragment)?, Some(rows));
        rebound.merge_with_head = true;
        Ok(rebound.into())
    }

    /// Deletions in one fragment are unioned over the range. A deletion in a fragment the range
    /// added cannot be one commit: Lance adds fragments without deletion files.
    fn squash_into(&self, squash: &mut Squash) -> Result<(), SquashRefusal> {
        let id = self.fragment.id;
        if squash.added.contains_key(&id) {
            return Err(SquashRefusal::DeletesAddedFragment { version: squash.version, fragment: id });
        }
        let rows = self.affected_rows.clone().unwrap_or_default();
        let entry = squash.deleted.entry(id).or_insert_with(|| (self.fragment.clone(), RoaringBitmap::new()));
        entry.1 |= rows;
        Ok(())
    }

    fn describe(&self) -> String {
        match &self.affected_rows {
            Some(rows) => format!("fragment {}, {} row(s)", self.fragment.id, rows.len()),
            None => format!("fragment {}, rows from its deletion file", self.fragment.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::OperationKind;
    use crate::driver::{Inputs, Peer, resolve};
    use crate::txn::ActionTxn;
    use crate::{NoFacts, TableState};

    fn deletes(shell: OperationKind, rows: &[u32], replay: bool) -> ActionTxn {
        let udv = UpdateDeletionVector::new(Fragment::new(1), Some(rows.iter().copied().collect()));
        let mut txn = ActionTxn::new(shell, vec![udv.into()]);
        if replay {
            txn.context.replay_origins = vec!["an-original-commit".into()];
        }
        txn
    }

    /// Ours judged against `peers` on a table of fragment 1 alone: the verdict label and, when Ok,
    /// the rows left for ours to delete.
    fn verdict_and_rows(
        ours: &ActionTxn,
        peers: &[Peer],
        facts: &dyn RebaseFacts,
    ) -> (&'static str, Option<RoaringBitmap>) {
        let mut base =
            TableState::empty(lance_core::datatypes::Schema { fields: vec![], metadata: Default::default() });
        base.fragments.insert(1, Fragment::new(1));
        let r = resolve(ours, &Inputs { base: &base, head: None, peers, facts });
        let rows = match &r.txn.actions[0] {
            AnyAction::UpdateDeletionVector(u) => u.affected_rows.clone(),
            _ => None,
        };
        (r.verdict.label(), rows)
    }

    fn judge(ours: &ActionTxn, theirs: &ActionTxn) -> (&'static str, Option<RoaringBitmap>) {
        verdict_and_rows(ours, &[Peer::new(2, theirs.clone())], &NoFacts)
    }

    #[test]
    fn a_replayed_delete_of_rows_a_committed_delete_removed_converges() {
        let (verdict, rows) =
            judge(&deletes(OperationKind::Delete, &[4, 6], true), &deletes(OperationKind::Delete, &[4], false));
        assert_eq!(verdict, "ok");
        assert_eq!(rows, Some([6].into_iter().collect()), "only the rows not yet deleted are ours");
    }

    #[test]
    fn a_live_delete_and_delete_versus_update_still_conflict() {
        let live = judge(&deletes(OperationKind::Delete, &[4], false), &deletes(OperationKind::Delete, &[4], false));
        assert_eq!(live.0, "retry", "a live writer re-reads and reports what it really deleted");
        let vs_update =
            judge(&deletes(OperationKind::Delete, &[4], true), &deletes(OperationKind::Update, &[4], false));
        assert_eq!(vs_update.0, "retry", "delete vs update is a divergence");
        let update_vs =
            judge(&deletes(OperationKind::Update, &[4], true), &deletes(OperationKind::Delete, &[4], false));
        assert_eq!(update_vs.0, "retry", "update vs delete is a divergence");
    }

    /// Deletion files by id: the rows each deletes. A file not held is unknown (never read).
    struct Files(Vec<(u64, Vec<u32>)>);

    impl RebaseFacts for Files {
        fn deleted_rows(&self, fragment: &Fragment) -> Option<RoaringBitmap> {
            let Some(file) = &fragment.deletion_file else { return Some(RoaringBitmap::new()) };
            self.0.iter().find(|(id, _)| *id == file.id).map(|(_, rows)| rows.iter().copied().collect())
        }
    }

    /// A committed change of fragment 1 to deletion file `file`, its rows read from the file.
    fn vector(shell: OperationKind, file: u64) -> ActionTxn {
        let mut fragment = Fragment::new(1);
        fragment.deletion_file = Some(lance_table::format::DeletionFile {
            read_version: file,
            id: file,
            file_type: lance_table::format::DeletionFileType::Bitmap,
            num_deleted_rows: None,
            base_id: None,
        });
        ActionTxn::new(shell, vec![UpdateDeletionVector::new(fragment, None).into()])
    }

    /// Ours (declared rows, checked) judged against committed vectors of fragment 1, the i-th at
    /// version i + 2, with only `files` readable: the verdict label and the rows left ours.
    fn judge_chain(ours: &ActionTxn, chain: &[ActionTxn], files: Files) -> (&'static str, Option<RoaringBitmap>) {
        // Each committed on the one before it, as a committed history is.
        let peers: Vec<Peer> =
            chain.iter().enumerate().map(|(i, t)| Peer::new(i as u64 + 2, t.clone()).built_on(i as u64 + 1)).collect();
        verdict_and_rows(ours, &peers, &files)
    }

    #[test]
    fn a_pure_delete_followed_by_another_vector_of_its_fragment_is_judged_through_the_later_one() {
        let chain = [vector(OperationKind::Delete, 10), vector(OperationKind::Delete, 11)];
        // Only the newest file (which holds the earlier writer's row 2 and its own row 3) is read.
        let newest_only = || Files(vec![(11, vec![2, 3])]);
        let (verdict, rows) = judge_chain(&deletes(OperationKind::Delete, &[5], false), &chain, newest_only());
        assert_eq!((verdict, rows), ("ok", Some([5].into_iter().collect())), "disjoint rows: ours lands as is");
        let (verdict, _) = judge_chain(&deletes(OperationKind::Delete, &[2], false), &chain, newest_only());
        assert_eq!(verdict, "retry", "the earlier writer's row is found in the newest vector");
        let (verdict, rows) = judge_chain(&deletes(OperationKind::Delete, &[2, 5], true), &chain, newest_only());
        assert_eq!((verdict, rows), ("ok", Some([5].into_iter().collect())), "a replay converges on both deletes");
    }

    #[test]
    fn a_vector_that_is_newest_moved_by_an_update_or_declared_is_still_read() {
        let unknown_first = || Files(vec![(11, vec![2, 3])]);
        let ours = deletes(OperationKind::Delete, &[5], false);
        // The last vector of the fragment is read: nothing later holds its rows.
        let alone = [vector(OperationKind::Delete, 11), vector(OperationKind::Delete, 10)];
        assert_eq!(judge_chain(&ours, &alone, unknown_first()).0, "retry", "the newest vector must be read");
        // An update's vector is read though a later one exists: a row it moved out is not a deletion.
        let update_first = [vector(OperationKind::Update, 10), vector(OperationKind::Delete, 11)];
        assert_eq!(judge_chain(&ours, &update_first, unknown_first()).0, "retry", "the update's vector must be read");
        // A later vector with declared rows holds only its writer's rows, not the fragment's.
        let mut declared = vector(OperationKind::Delete, 11);
        if let AnyAction::UpdateDeletionVector(u) = &mut declared.actions[0] {
            u.affected_rows = Some([3].into_iter().collect());
        }
        let declared_last = [vector(OperationKind::Delete, 10), declared];
        assert_eq!(judge_chain(&ours, &declared_last, unknown_first()).0, "retry", "the earlier vector must be read");
        // An update between two deletes: the first is read (its next vector is the update's).
        let update_between =
            [vector(OperationKind::Delete, 12), vector(OperationKind::Update, 10), vector(OperationKind::Delete, 11)];
        assert_eq!(judge_chain(&ours, &update_between, unknown_first()).0, "retry", "the first delete must be read");
        // The rows each of these reads: with the file known, the same chains land.
        let every = || Files(vec![(10, vec![2]), (11, vec![2, 3]), (12, vec![])]);
        for chain in [&alone[..], &update_first[..], &declared_last[..], &update_between[..]] {
            assert_eq!(judge_chain(&ours, chain, every()).0, "ok", "with every file read, disjoint rows land");
        }
    }

    /// A later vector supersedes only when it was committed on the earlier one: vectors never
    /// committed (what-ifs) or built on an older version hold their own rows alone.
    #[test]
    fn a_vector_not_built_on_the_earlier_one_supersedes_nothing() {
        let ours = deletes(OperationKind::Delete, &[2], false);
        // Both staged on the base (version 1): the second file holds only its own row 3.
        let files = || Files(vec![(10, vec![2]), (11, vec![3])]);
        let (first, second) = (vector(OperationKind::Delete, 10), vector(OperationKind::Delete, 11));
        for peers in [
            vec![Peer::new(2, first.clone()), Peer::new(3, second.clone())],
            vec![Peer::new(2, first.clone()).built_on(1), Peer::new(3, second.clone()).built_on(1)],
        ] {
            let (verdict, _) = verdict_and_rows(&ours, &peers, &files());
            assert_eq!(verdict, "retry", "the first writer's row 2 is found in its own file");
        }
    }

    /// A replay converges on a run of deletes before an update of the fragment exactly as writer by
    /// writer; and a superseded vector never lets ours through with its own rows unknown.
    #[test]
    fn a_replay_converges_before_an_update_and_unknown_rows_of_ours_retry() {
        let chain = [vector(OperationKind::Delete, 10), vector(OperationKind::Update, 11)];
        let files = Files(vec![(10, vec![2]), (11, vec![2, 7])]);
        let (verdict, rows) = judge_chain(&deletes(OperationKind::Delete, &[2, 5], true), &chain, files);
        assert_eq!((verdict, rows), ("ok", Some([5].into_iter().collect())), "converged on the delete's row 2");
        // Ours with no declared rows and its own file unknown: a Retry, never a union without rows.
        let mut unknown_ours = vector(OperationKind::Delete, 20);
        unknown_ours.context.replay_origins.clear();
        let run = [vector(OperationKind::Delete, 10), vector(OperationKind::Delete, 11)];
        let (verdict, _) = judge_chain(&unknown_ours, &run, Files(vec![(11, vec![2, 3])]));
        assert_eq!(verdict, "retry", "our own rows unknown");
    }
}

#[cfg(test)]
pub(crate) mod case_tests {
    use super::*;
    use crate::txn::ActionTxn;

    use crate::actions::cases::{self, Case, case, fragment, rebound, rows, squashed, txn};

    fn delete(id: u64, offsets: &[u32]) -> ActionTxn {
        txn(OperationKind::Delete, vec![UpdateDeletionVector::new(fragment(id), Some(rows(offsets))).into()])
    }

    pub(crate) fn cases() -> Vec<Case> {
        let remove =
            txn(OperationKind::Delete, vec![crate::actions::remove_fragments::RemoveFragments { ids: vec![0] }.into()]);
        vec![
            case("delete_after_committed_delete_of_other_rows_commutes", delete(0, &[1]), delete(0, &[2]), "ok"),
            case("delete_after_committed_delete_of_same_rows_retries", delete(0, &[1]), delete(0, &[1]), "retry"),
            case("delete_after_committed_delete_in_other_fragment_commutes", delete(0, &[1]), delete(1, &[1]), "ok"),
            case("delete_after_committed_removal_of_its_fragment_retries", delete(0, &[1]), remove, "retry"),
        ]
    }

    #[test]
    fn rebind_takes_the_targets_fragment_and_merges_with_its_vector() {
        let Ok(AnyAction::UpdateDeletionVector(u)) = rebound(UpdateDeletionVector::new(fragment(1), Some(rows(&[3]))))
        else {
            panic!("a delete with known rows is replayable")
        };
        assert!(u.merge_with_head, "the target's own deletions are kept");
        assert_eq!(
            u.fragment.deletion_file,
            cases::Target::default().head.fragments.get(&1).expect("the sample head holds fragment 1").deletion_file
        );
        assert_eq!(u.affected_rows, Some(rows(&[3])));
        assert_eq!(
            rebound(UpdateDeletionVector::new(fragment(1), None)),
            Err(RebindRefusal::RowsUnknown { fragment: 1 })
        );
    }

    #[test]
    fn squash_unions_deletions_and_refuses_one_in_a_fragment_the_range_added() {
        let d = |offsets: &[u32]| AnyAction::from(UpdateDeletionVector::new(fragment(1), Some(rows(offsets))));
        let s = squashed(vec![(5, vec![], vec![d(&[1])]), (6, vec![], vec![d(&[2])])]).expect("composes");
        assert_eq!(s.txn.shell(), OperationKind::Delete);
        let AnyAction::UpdateDeletionVector(u) = &s.txn.actions[0] else { panic!("{:?}", s.txn.actions) };
        assert_eq!(u.affected_rows, Some(rows(&[1, 2])));
        let add = crate::actions::add_fragments::AddFragments { fragments: vec![fragment(0)], keys: None };
        let into_added = UpdateDeletionVector::new(fragment(4), Some(rows(&[0])));
        assert_eq!(
            squashed(vec![(5, vec![4], vec![add.into()]), (6, vec![], vec![into_added.into()])]),
            Err(SquashRefusal::DeletesAddedFragment { version: 6, fragment: 4 })
        );
        assert_eq!(d(&[1, 2]).describe(), "fragment 1, 2 row(s)");
    }
}
