//! The pure driver: judge our action transaction against the transactions committed since our read.
//!
//! For each committed peer, in commit order: screen every one of our actions' reads and writes
//! against every peer action's writes (cheap, no rebase when nothing overlaps); call `rebase` only
//! with the overlapping peer actions; check the transaction-level MemWAL context; keep the worst
//! verdict, stopping at the first Fail. Then, when a head state is supplied, validate and apply our
//! actions against it in order, so each sees the effects of the ones before it.
//!
//! Baseline resets are handled here (`design/action-model.md`, the driver, item 3): in a
//! transaction that replaces the table (overwrite, restore), the fresh fragments and schema cannot
//! conflict with anything the peers did to the old table, so only the reset itself and the named
//! coordinates it also writes (config keys, bases) are rebased.

use crate::action::{Action, ActionKind, AnyAction, IndexEdits, PeerAction, RebaseCx, RebaseFacts};
use crate::context::TxnContext;
use crate::path::{ManifestPath, Mask};
use crate::screen::{self, OurScreen, PeerScreen};
use crate::state::TableState;
use crate::txn::ActionTxn;
use crate::verdict::{Reason, Rule, Verdict};

/// A transaction committed after our read version, with its write masks and their screen computed
/// once (a peer is judged against every attempt of every concurrent writer; its masks never change).
#[derive(Debug, Clone)]
pub struct Peer {
    pub version: u64,
    pub txn: ActionTxn,
    /// The version the committed transaction was built on (its read version as committed), when
    /// known. Lance records the head its commit built on; a peer that was never committed (a
    /// what-if) or whose history is not at hand has none.
    pub built_on: Option<u64>,
    writes: Vec<Mask>,
    index_edits: IndexEdits,
    screens: Vec<PeerScreen>,
    whole: PeerScreen,
}

impl Peer {
    pub fn new(version: u64, txn: ActionTxn) -> Self {
        let writes: Vec<Mask> = txn.actions.iter().map(Action::writes).collect();
        let index_edits = IndexEdits::of(&txn.actions);
        let (screens, whole) = screen::peer_screens(&txn.actions, &writes);
        Self { version, txn, built_on: None, writes, index_edits, screens, whole }
    }

    /// This peer, known to have been built on version `read_version`.
    pub fn built_on(mut self, read_version: u64) -> Self {
        self.built_on = Some(read_version);
        self
    }
}

/// What the driver computes once about our transaction before judging any peer: each action's
/// reads and writes, their screen, what the transaction does to indices, whether it resets the
/// baseline. All are coordinates a rebase never changes (a rebase adjusts payloads only), so one
/// `Prepared` serves every peer and every attempt of a commit, as long as the transaction is the
/// one it was prepared from or a rebase of it.
#[derive(Debug, Clone)]
pub struct Prepared {
    masks: Vec<Mask>,
    screens: Vec<OurScreen>,
    /// The union of `screens`: one test against a peer's whole screen rules it out for all of them.
    whole: OurScreen,
    /// Our context can meet no peer context (no MemWAL progress, no replay claims) and the
    /// transaction does not reset the baseline: then a peer the screen rules out is Ok outright.
    plain: bool,
    index_edits: IndexEdits,
    resets: bool,
}

impl Prepared {
    pub fn of(txn: &ActionTxn) -> Self {
        let masks: Vec<Mask> = txn.actions.iter().map(screen::mask_of).collect();
        let screens = screen::our_screens(&txn.actions, &masks);
        let whole = OurScreen::union(&screens);
        let resets = txn.resets_baseline();
        let plain = !resets && txn.context.compacted_sstables.is_empty() && txn.context.replay_origins.is_empty();
        Self { masks, screens, whole, plain, index_edits: IndexEdits::of(&txn.actions), resets }
    }

    /// Does the screen alone settle `peer` as Ok, before any rebase runs or the head is read? The
    /// first test [`judge_peer`] takes: with a plain context the context rules and the MemWAL-reset
    /// rule cannot fire, and no action of ours meets the peer.
    pub fn rules_out(&self, peer: &Peer) -> bool {
        self.plain && !peer.txn.is_opaque() && screen::rules_out(&self.whole, &peer.whole)
    }

    /// Was this prepared from `txn` (or a rebase of it)? Only coordinates are compared.
    fn fits(&self, txn: &ActionTxn) -> bool {
        self.masks.len() == txn.actions.len() && self.resets == txn.resets_baseline()
    }
}

/// What the driver decided about one peer.
#[derive(Debug, Clone)]
pub struct PeerCheck {
    pub version: u64,
    /// How many (our action, written path of a peer action) overlaps were rebased; overlaps the
    /// screen settles (two key-less inserts) are not counted.
    pub overlapping_pairs: usize,
    pub verdict: Verdict,
}

/// The driver's answer: the verdict, our rebased transaction, and what was checked.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub verdict: Verdict,
    pub txn: ActionTxn,
    pub peers: Vec<PeerCheck>,
}

/// Inputs of one resolution.
pub struct Inputs<'a> {
    /// The table at our read version.
    pub base: &'a TableState,
    /// The table at the latest version, when known: our actions are validated against it.
    pub head: Option<&'a TableState>,
    pub peers: &'a [Peer],
    pub facts: &'a dyn RebaseFacts,
}

/// Is this action rebased when its transaction resets the baseline?
fn judged_under_reset(kind: ActionKind) -> bool {
    matches!(kind, ActionKind::ResetTable | ActionKind::Restore | ActionKind::UpdateConfig | ActionKind::AddBases)
}

/// Judge `ours` against `inputs.peers`; the rebased transaction is returned in the resolution.
pub fn resolve(ours: &ActionTxn, inputs: &Inputs<'_>) -> Resolution {
    let mut txn = ours.clone();
    let (verdict, peers) = resolve_in_place(&mut txn, inputs);
    Resolution { verdict, txn, peers }
}

/// Judge `txn` against `inputs.peers`, rebasing it in place (no copy of the transaction).
pub fn resolve_in_place(txn: &mut ActionTxn, inputs: &Inputs<'_>) -> (Verdict, Vec<PeerCheck>) {
    let prepared = Prepared::of(txn);
    resolve_prepared(txn, &prepared, inputs)
}

/// [`resolve_in_place`] with no peer: nothing is rebased, so nothing needs preparing (a commit loop
/// whose head did not move skips [`Prepared::of`], about 4 us of a one-writer append's own time,
/// `design/benchmarks.md`). Our actions are still checked against the head: the retirement rule,
/// then each action's validation.
pub fn resolve_without_peers(txn: &ActionTxn, inputs: &Inputs<'_>) -> Verdict {
    debug_assert!(inputs.peers.is_empty(), "peers are judged by resolve_prepared");
    let head = inputs.head.unwrap_or(inputs.base);
    if let Some(verdict) = crate::retired::verdict(txn, head, 0, None) {
        return verdict;
    }
    match inputs.head {
        Some(head) => validate_and_apply(txn, head),
        None => Verdict::Ok,
    }
}

/// [`resolve_in_place`] with our side prepared once by the caller (a commit loop's attempts share
/// it).
pub fn resolve_prepared(txn: &mut ActionTxn, prepared: &Prepared, inputs: &Inputs<'_>) -> (Verdict, Vec<PeerCheck>) {
    debug_assert!(prepared.fits(txn), "prepared from another transaction");
    // The peers are distinct commits, judged in commit order; a rebase's answer for one may rely on
    // having seen the ones before it.
    debug_assert!(inputs.peers.windows(2).all(|w| w[0].version < w[1].version), "peers in commit order");
    let mut peers = Vec::with_capacity(inputs.peers.len());
    // A retired branch takes no write, and a retirement takes no peer (crate::retired).
    let head = inputs.head.unwrap_or(inputs.base);
    let first_peer = inputs.peers.first().map(|p| p.version);
    if let Some(verdict) = crate::retired::verdict(txn, head, inputs.peers.len(), first_peer) {
        return (verdict, peers);
    }
    let mut verdict = Verdict::Ok;
    if let (true, Some(first)) = (txn.is_opaque(), inputs.peers.first()) {
        verdict = opaque_verdict(first.version);
    }
    for peer in inputs.peers {
        if matches!(verdict, Verdict::Fail(_)) {
            break;
        }
        if peer.txn.is_opaque() {
            verdict = opaque_peer_verdict(peer.version);
            peers.push(PeerCheck { version: peer.version, overlapping_pairs: 0, verdict: verdict.clone() });
            break;
        }
        let check = judge_peer(txn, prepared, inputs, peer);
        verdict = verdict.worst(check.verdict.clone());
        peers.push(check);
    }
    // The screen ran on masks computed before the rebases: a rebase adjusts payloads, never the
    // paths an action reads or writes.
    debug_assert!(
        txn.actions.iter().zip(&prepared.masks).all(|(a, m)| {
            let mut now = a.reads();
            now.extend(a.writes());
            now == *m
        }),
        "a rebase changed an action's masks"
    );
    if verdict.is_ok()
        && let Some(head) = inputs.head
    {
        verdict = validate_and_apply(txn, head);
    }
    (verdict, peers)
}

fn opaque_verdict(peer_version: u64) -> Verdict {
    Verdict::Fail(Reason {
        rule: Rule::Opaque,
        ours: ActionKind::Opaque,
        peer_version: Some(peer_version),
        peer_action: None,
        path: Some(ManifestPath::Table),
        detail: "an operation this build does not understand cannot be rebased".into(),
    })
}

/// A committed operation we do not understand may have touched anything (fail closed).
fn opaque_peer_verdict(peer_version: u64) -> Verdict {
    Verdict::Fail(Reason {
        rule: Rule::Opaque,
        ours: ActionKind::TxnContext,
        peer_version: Some(peer_version),
        peer_action: Some(ActionKind::Opaque),
        path: Some(ManifestPath::Table),
        detail: "a committed operation this build does not understand may have touched anything".into(),
    })
}

/// Screen and rebase all of our actions against one committed (understood) peer: the per-peer step
/// of [`resolve_prepared`]. `overlapping_pairs` counts the pairs that reached a rebase; pairs the
/// screen rules out (`crate::screen`) are not counted.
pub fn judge_peer(txn: &mut ActionTxn, prepared: &Prepared, inputs: &Inputs<'_>, peer: &Peer) -> PeerCheck {
    debug_assert!(!peer.txn.is_opaque(), "an opaque peer is decided before any action is judged");
    // The common pair (two inserts, writes to different fragments) is decided by one test of the
    // two whole screens, as Lance's `check_txn` decides it by one match.
    if prepared.rules_out(peer) {
        debug_assert!(
            exact_route_agrees(txn, prepared, inputs, peer),
            "the whole-transaction screen skipped a peer that matters"
        );
        return PeerCheck { version: peer.version, overlapping_pairs: 0, verdict: Verdict::Ok };
    }
    judge_peer_by_action(txn, prepared, inputs, peer)
}

/// The whole-transaction screen's promise, checked the slow way (debug builds only): judging the
/// peer action by action, on a copy, answers Ok, rebases no pair and leaves our actions as they were.
fn exact_route_agrees(txn: &ActionTxn, prepared: &Prepared, inputs: &Inputs<'_>, peer: &Peer) -> bool {
    let mut copy = txn.clone();
    let check = judge_peer_by_action(&mut copy, prepared, inputs, peer);
    check.verdict.is_ok() && check.overlapping_pairs == 0 && copy == *txn
}

/// [`judge_peer`] action by action: the context rules, then each of our actions screened against
/// the peer's actions and rebased on the ones it overlaps.
fn judge_peer_by_action(txn: &mut ActionTxn, prepared: &Prepared, inputs: &Inputs<'_>, peer: &Peer) -> PeerCheck {
    let mut verdict = txn.context.rebase(peer.version, &peer.txn.context).worst(memwal_vs_reset(txn, peer));
    let cx = RebaseCx {
        base: inputs.base,
        ours: &txn.context,
        index_edits: &prepared.index_edits,
        facts: inputs.facts,
        head: inputs.head,
        peers: inputs.peers,
    };
    let mut overlapping_pairs = 0;
    for ((action, ours_mask), ours_screen) in txn.actions.iter_mut().zip(&prepared.masks).zip(&prepared.screens) {
        if prepared.resets && !judged_under_reset(action.kind()) {
            continue;
        }
        if screen::rules_out(ours_screen, &peer.whole) {
            debug_assert!(screened_pair_is_ok(action, ours_mask, &cx, peer), "the screen skipped a pair that matters");
            continue;
        }
        // A peer action the screen rules out is skipped before any path is compared: it overlaps
        // nothing, or is a key-less insert meeting ours, whose overlaps rebase to Ok unchanged.
        let overlaps =
            overlapping_peer_actions(ours_mask, peer, cx.ours.shell, |theirs| !screen::rules_out(ours_screen, theirs));
        debug_assert!(
            screened_peer_actions_are_ok(action, ours_mask, ours_screen, &cx, peer),
            "the screen skipped a peer action that matters"
        );
        if overlaps.is_empty() {
            continue;
        }
        overlapping_pairs += overlaps.len();
        verdict = verdict.worst(action.rebase(&cx, &overlaps));
        if matches!(verdict, Verdict::Fail(_)) {
            break;
        }
    }
    PeerCheck { version: peer.version, overlapping_pairs, verdict }
}

/// The screen's promise, checked the slow way (debug builds only): the exact route on a copy of
/// the action either finds no overlap or answers Ok and leaves the action as it was.
fn screened_pair_is_ok(action: &AnyAction, mask: &Mask, cx: &RebaseCx<'_>, peer: &Peer) -> bool {
    let overlaps = overlapping_peer_actions(mask, peer, cx.ours.shell, |_| true);
    if overlaps.is_empty() {
        return true;
    }
    let mut copy = action.clone();
    copy.rebase(cx, &overlaps).is_ok() && copy == *action
}

/// The per-peer-action screen's promise, checked the slow way (debug builds only): the overlaps
/// of the peer actions it skipped, rebased on a copy of the action, answer Ok and leave it as it
/// was (every action folds its rebase over the overlaps one by one, so those entries cannot change
/// what the others decide).
fn screened_peer_actions_are_ok(
    action: &AnyAction,
    mask: &Mask,
    screen: &OurScreen,
    cx: &RebaseCx<'_>,
    peer: &Peer,
) -> bool {
    let skipped = overlapping_peer_actions(mask, peer, cx.ours.shell, |theirs| screen::rules_out(screen, theirs));
    if skipped.is_empty() {
        return true;
    }
    let mut copy = action.clone();
    copy.rebase(cx, &skipped).is_ok() && copy == *action
}

/// MemWAL progress records which SSTables were compacted into *this* base table. A baseline
/// replacement (overwrite, restore) on either side makes the record describe a table that is gone.
fn memwal_vs_reset(ours: &ActionTxn, peer: &Peer) -> Verdict {
    let ours_progress = !ours.context.compacted_sstables.is_empty();
    let peer_progress = !peer.txn.context.compacted_sstables.is_empty();
    if (ours_progress && peer.txn.resets_baseline()) || (peer_progress && ours.resets_baseline()) {
        return Verdict::Fail(Reason {
            rule: Rule::MemWalGeneration,
            ours: ActionKind::TxnContext,
            peer_version: Some(peer.version),
            peer_action: None,
            path: Some(ManifestPath::Table),
            detail: "MemWAL compaction progress and a table replacement cannot both hold".into(),
        });
    }
    Verdict::Ok
}

/// The overlaps of one of our actions with one peer: rarely more than four, so kept on the stack
/// (judging a peer is on every commit's path, and Lance's own check allocates nothing there).
type Overlaps<'a> = smallvec::SmallVec<[PeerAction<'a>; 4]>;

/// Every (peer action, path it wrote) that one of our paths overlaps, each with the first of our
/// paths that overlaps it. One entry per written path, so a rebase sees every way the peer touched
/// us and its answer never depends on which overlap a scan happened to meet first. Only the peer
/// actions whose screen `compared` accepts are compared at all.
fn overlapping_peer_actions<'a>(
    ours: &'a Mask,
    peer: &'a Peer,
    our_shell: crate::context::OperationKind,
    compared: impl Fn(&PeerScreen) -> bool,
) -> Overlaps<'a> {
    let mut out = Overlaps::new();
    for ((action, written), their_screen) in peer.txn.actions.iter().zip(&peer.writes).zip(&peer.screens) {
        if !compared(their_screen) {
            continue;
        }
        for their_path in written.iter() {
            if let Some(our_path) = ours.iter().find(|p| p.overlaps(their_path)) {
                out.push(PeerAction {
                    version: peer.version,
                    action,
                    context: &peer.txn.context,
                    index_edits: &peer.index_edits,
                    our_path,
                    their_path,
                    our_shell,
                });
            }
        }
    }
    out
}

/// Validate each action against the head state with the effects of the actions before it applied.
/// A failure after a clean screen means the writer built an action the table cannot take.
fn validate_and_apply(txn: &ActionTxn, head: &TableState) -> Verdict {
    // Each action is validated on the state the ones before it leave. The first is validated on
    // the head itself and the last is not applied (nothing reads the state after it), so a
    // transaction of one action copies nothing: the copy (schema, indices, config) was most of
    // this check's time for a one-action append.
    let mut applied: Option<(TableState, TxnContext)> = None;
    let last = txn.actions.len().saturating_sub(1);
    for (i, action) in txn.actions.iter().enumerate() {
        let state = applied.as_ref().map_or(head, |(state, _)| state);
        if let Err(reason) = action.validate(state) {
            return Verdict::Fail(reason);
        }
        if i < last {
            let (state, context) = applied.get_or_insert_with(|| (head.clone(), txn.context.clone()));
            action.apply(state, context);
        }
    }
    Verdict::Ok
}

/// Convenience: the overlap of two single actions, directional (ours vs what theirs wrote).
pub fn action_overlap(ours: &AnyAction, theirs: &AnyAction) -> Option<(ManifestPath, ManifestPath)> {
    let mut mask = ours.reads();
    mask.extend(ours.writes());
    let written = theirs.writes();
    mask.first_overlap(&written).map(|(a, b)| (a.clone(), b.clone()))
}
