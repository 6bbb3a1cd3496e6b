//! The primitive: replay commits of a source history onto a target branch, as actions through the
//! same driver as any other commit.
//!
//! A [`Session`] holds what both sides did since their merge base. Each source commit is bound to
//! the target ([`crate::remap`]), judged once per attempt by the pure driver against the target's
//! own commits since the merge base (what the source never saw) up to the head it was bound on, and,
//! when it commutes, written at exactly the version after that head: a writer landing meanwhile
//! ends the attempt, and the next one binds and judges on the new head. One retry policy bounds
//! the attempts. A dry run stops before the first write and simulates the rest on the model's
//! table state.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use lance::Dataset;
use lance_actions::actions::add_bases::AddBases;
use lance_actions::{Action, ActionTxn, AnyAction, Inputs, OperationKind, Peer, TableState, Verdict};
use lance_actions::{Reason, Resolution, Rule, resolve};
use lance_actions_commit::deletions::DeletionFacts;
use lance_actions_commit::history::actions_of;
use lance_actions_commit::judge::{deleted_rows, table_state};
use lance_actions_commit::presence::key_columns;
use lance_actions_commit::{CommitError, DatasetActionsExt};
use lance_table::format::BasePath;
use roaring::RoaringBitmap;

use crate::error::{Error, Interference, LanceContext, Refusal, Result};
use crate::graft::Graft;
use crate::keycheck::{KeyState, Probe, inserts_rows, probe};
use crate::lineage::{Chain, Commit, Lineage, Point, chain_name, commits, open_chain, open_version};
use crate::provenance::{self, known_transactions, new_fragment_ids, origins};
use crate::remap::{FragmentMap, RemapCx, is_graft_only, remap};
use lance_actions_commit::branch_names::retirement;
use lance_actions_commit::hooks;
use lance_actions_commit::progress::Progress;
use lance_actions_commit::retry::{Exhausted, RetryPolicy};

/// A source commit ready to replay: its actions with the rows each deletion-vector change deleted.
#[derive(Debug, Clone)]
pub struct SourceCommit {
    pub chain: Chain,
    pub version: u64,
    pub actions: ActionTxn,
    /// Fragment ids this commit created on its chain, ascending.
    pub new_ids: Vec<u64>,
    /// The original commits this one stands for (itself, the commit it was replayed from, or the
    /// range of a squash).
    pub origins: Vec<String>,
}

impl SourceCommit {
    /// The typed refusal to replay this commit, with the reason.
    pub(crate) fn not_replayable(&self, why: impl Into<Refusal>) -> Error {
        Error::NotReplayable { branch: chain_name(&self.chain).into(), version: self.version, why: why.into() }
    }
}

/// Why a replayed commit does not commute with what the target did since the merge base.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub source_branch: String,
    pub source_version: u64,
    /// The replayed action that conflicts, the target's commit it conflicts with and the path.
    pub reason: Reason,
    /// True for Retry (the same work may go through once re-planned), false for Fail.
    pub retryable: bool,
    /// For `KeysPresent`: the keys the replay would insert that the target already holds.
    pub keys: Vec<String>,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@v{}: {}", self.source_branch, self.source_version, self.reason)
    }
}

/// One replayed commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub source_version: u64,
    /// The target version it landed at (in a dry run, the version it would land at).
    pub target_version: u64,
    /// Another replay of the same commit (a concurrent merge) had landed it already: this
    /// operation took that commit as its own and wrote nothing for it.
    pub adopted: bool,
}

/// What a plan would land, or what an execution landed, and the conflicts that stopped it: the one
/// result of planning and of executing (an error aside).
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// Bases the target gains (plan only).
    pub bases: Vec<BasePath>,
    pub landed: Vec<Landed>,
    /// Source versions that converged: the target already had their every change, nothing written.
    pub converged: Vec<u64>,
    /// Why the replay does not commute, when it does not. A plan keeps judging the commits after a
    /// conflicting one (until one depends on a commit left out); an execution stops at the first.
    pub conflicts: Vec<Conflict>,
}

impl Plan {
    /// Every commit commutes with the target (or converged).
    pub fn is_clean(&self) -> bool {
        self.conflicts.is_empty()
    }
}

/// A replay's verdict on the target, its key probe included.
enum StepVerdict {
    Go(Option<Probe>),
    Converged,
    Conflicts(Vec<Conflict>),
}

/// How replaying one commit ended.
enum Step {
    Landed(Landed),
    /// The target already had its every change: nothing written.
    Converged,
    Conflicted(Vec<Conflict>),
}

/// How one attempt at replaying a commit ended, when it did not end the step.
enum Attempt {
    Done(Step),
    /// The target moved (a writer landed, bases were added, another replay won): try again, for
    /// this reason.
    Again(Interference),
}

/// The target's commits already turned into peers, by chain and version: a committed version never
/// changes, so an attempt decodes (and reads the deletion vectors of) only the commits that landed
/// since the previous attempt or step (the session keeps one, [`Session::peer_cache`]).
#[derive(Default)]
struct PeerCache {
    /// `None`: the commit is no peer (one of this source's replays, or bookkeeping).
    decoded: HashMap<(Chain, u64), Option<Peer>>,
    /// Deletion vectors by their one identity (`deletions::DeletionKey`), each read through the
    /// chain its file belongs to.
    facts: DeletionFacts,
}

/// Both sides of a replay since their merge base.
pub struct Session {
    root: Dataset,
    pub source: Chain,
    pub target: Chain,
    pub base: Point,
    base_state: TableState,
    base_dataset: Arc<Dataset>,
    /// Source commits not yet in the target, oldest first.
    pub pending: Vec<SourceCommit>,
    /// Source versions skipped because the target already has them (or they only grafted bases).
    pub skipped: Vec<u64>,
    fragments: FragmentMap,
    source_known: BTreeSet<String>,
    operation: String,
    target_root: String,
    /// The target's commits already judged as peers, kept for the whole session: whether a commit
    /// is one of this source's replays depends only on its origins and the source's history, both
    /// fixed when the session opens, and a committed version never changes. Each step decodes only
    /// the commits that landed since the previous one: a run replaying K commits onto a target with
    /// T commits of its own decodes each of the T + K once, not T for every step (the plan before
    /// the run reads the T once more, `Session::plan`).
    peer_cache: PeerCache,
}

impl Session {
    /// Read both histories since the merge base. `only` restricts the source commits to these
    /// versions of the source branch (cherry-pick).
    pub async fn open(
        root: &Dataset,
        source: &Chain,
        target: &Chain,
        only: Option<&[u64]>,
        operation: &str,
    ) -> Result<Self> {
        let source_lineage = Lineage::of(root, source, None).await?;
        let target_lineage = Lineage::of(root, target, None).await?;
        Self::between(root, source, &source_lineage, target, &target_lineage, only, operation).await
    }

    pub(crate) async fn between(
        root: &Dataset,
        source: &Chain,
        source_lineage: &Lineage,
        target: &Chain,
        target_lineage: &Lineage,
        only: Option<&[u64]>,
        operation: &str,
    ) -> Result<Self> {
        let base = source_lineage.merge_base(target_lineage);
        let base_dataset = Arc::new(open_version(root, &base.chain, base.version).await?);
        let base_state = table_state(&base_dataset).await?;
        let source_history = commits(root, &source_lineage.segments_since(&base)).await?;
        let target_history = commits(root, &target_lineage.segments_since(&base)).await?;
        if let Some(versions) = only {
            for v in versions {
                if !source_history.iter().any(|c| c.chain == *source && c.version == *v) {
                    return Err(Error::NotInHistory {
                        branch: chain_name(source).into(),
                        version: *v,
                        target: chain_name(target).into(),
                    });
                }
            }
        }
        let target_known = known_transactions(&target_history);
        let target_root = open_chain(root, target).await?.branch_location().uri;
        let source_known = known_transactions(&source_history);
        let mut session = Session {
            root: root.clone(),
            source: source.clone(),
            target: target.clone(),
            base,
            fragments: FragmentMap::new(base_state.max_allocated_fragment_id()),
            base_state,
            base_dataset,
            pending: Vec::new(),
            skipped: Vec::new(),
            source_known,
            operation: operation.to_string(),
            target_root,
            peer_cache: PeerCache::default(),
        };
        let mut all = Vec::new();
        for c in &source_history {
            all.push(session.source_commit(c).await?);
        }
        session.map_already_replayed(&all, &target_history).await?;
        for s in all {
            let wanted = only.is_none_or(|v| s.chain == *source && v.contains(&s.version));
            let known = s.origins.iter().filter(|o| target_known.contains(*o)).count();
            if known > 0 && known < s.origins.len() {
                return Err(s.not_replayable(Refusal::PartlyOnTarget { commits: s.origins.len(), known }));
            }
            // Branch bookkeeping (grafted bases, names in a legacy config, retirements) is never
            // replayed as data.
            if known > 0 || is_bookkeeping(&s.actions) {
                if wanted {
                    session.skipped.push(s.version);
                }
            } else if wanted {
                session.pending.push(s);
            }
        }
        Ok(session)
    }

    /// A source commit with its deletion-vector changes' rows filled in from the source's vectors.
    async fn source_commit(&self, c: &Commit) -> Result<SourceCommit> {
        let mut actions = actions_of(&c.txn).map_err(|source| Error::Model { source })?;
        self.fill_deleted_rows(c, &mut actions).await?;
        Ok(SourceCommit {
            chain: c.chain.clone(),
            version: c.version,
            new_ids: new_fragment_ids(&self.root, &c.chain, c.version).await?,
            origins: origins(&c.txn),
            actions,
        })
    }

    /// Give each deletion-vector change of commit `c` the rows that commit deleted: its vector minus
    /// the vector at the version before. Without them a commit's rows would be read as everything
    /// deleted since the merge base, and a later commit would be blamed for an earlier one's rows.
    /// Rows the commit's encoded action list declares are replaced, never trusted: an older build
    /// or a foreign writer copying our encoding may declare fewer rows than its deletion file
    /// deletes, and the replay (whose commit merges with the head's vector without re-checking
    /// declared rows) would then bring those rows back on the target.
    async fn fill_deleted_rows(&self, c: &Commit, actions: &mut ActionTxn) -> Result<()> {
        let changes_vectors = actions.actions.iter().any(|a| matches!(a, AnyAction::UpdateDeletionVector(_)));
        if !changes_vectors {
            return Ok(());
        }
        let after = Arc::new(open_version(&self.root, &c.chain, c.version).await?);
        let before =
            Arc::new(after.checkout_version(c.version - 1).await.lance(format!("opening version {}", c.version - 1))?);
        for action in actions.actions.iter_mut() {
            let AnyAction::UpdateDeletionVector(u) = action else { continue };
            let now = deleted_rows(&after, &u.fragment).await?;
            let was = match before.manifest().fragments.iter().find(|f| f.id == u.fragment.id) {
                Some(f) => deleted_rows(&before, f).await?,
                None => RoaringBitmap::new(),
            };
            u.affected_rows = Some(now - was);
        }
        Ok(())
    }

    /// Fragments of source commits the target already has (replayed earlier, or replayed from
    /// the target in the first place) map to the target's ids.
    async fn map_already_replayed(&mut self, source: &[SourceCommit], target_history: &[Commit]) -> Result<()> {
        for t in target_history {
            let theirs = origins(&t.txn);
            let twin = source.iter().find(|s| s.origins == theirs);
            if let Some(s) = twin
                && !s.new_ids.is_empty()
            {
                let target_new = new_fragment_ids(&self.root, &t.chain, t.version).await?;
                self.fragments.record(&s.new_ids, &target_new).map_err(|m| s.not_replayable(m))?;
            }
        }
        Ok(())
    }

    /// The target's own commits since the merge base (what the source never saw), as peers, with
    /// the row facts their deletion vectors need.
    async fn target_peers(&self) -> Result<(Vec<Peer>, DeletionFacts)> {
        let mut cache = PeerCache::default();
        let peers = self.peers_from(self.target_history().await?, &mut cache).await?;
        Ok((peers, cache.facts))
    }

    /// [`Self::target_peers`] from a history already read, decoding only what `cache` lacks.
    async fn peers_from(&self, history: Vec<Commit>, cache: &mut PeerCache) -> Result<Vec<Peer>> {
        let mut peers = Vec::new();
        for c in history {
            let key = (c.chain.clone(), c.version);
            if !cache.decoded.contains_key(&key) {
                let peer = self.peer_of(c, &mut cache.facts).await?;
                cache.decoded.insert(key.clone(), peer);
            }
            if let Some(Some(peer)) = cache.decoded.get(&key) {
                peers.push(peer.clone());
            }
        }
        debug_assert!(peers.windows(2).all(|w| w[0].version < w[1].version), "peers in commit order");
        Ok(peers)
    }

    /// One target commit as a peer (with the deletion vectors its rebase may compare loaded into
    /// `facts`), or `None` when it is one of this source's replays or bookkeeping.
    async fn peer_of(&self, c: Commit, facts: &mut DeletionFacts) -> Result<Option<Peer>> {
        // Every pending step stands for commits of the source's history (`between`), so its origins
        // are known here: whether a commit is ours never changes while the session lasts.
        let ours = origins(&c.txn).iter().any(|o| self.source_known.contains(o));
        if ours {
            return Ok(None);
        }
        let mut txn = actions_of(&c.txn).map_err(|source| Error::Model { source })?;
        if is_bookkeeping(&txn) {
            return Ok(None);
        }
        self.fill_deleted_rows(&c, &mut txn).await?;
        // A rewritten packed struct rewrites its children too (see `history::peers_of`).
        txn.fill_nested_fields(&self.base_state.schema);
        let at = Arc::new(open_version(&self.root, &c.chain, c.version).await?);
        for a in &txn.actions {
            if let AnyAction::UpdateDeletionVector(u) = a {
                facts.rows_of(&at, &u.fragment).await?;
                if let Some(b) = self.base_state.fragment(u.fragment.id) {
                    facts.rows_of(&self.base_dataset, b).await?;
                }
            }
        }
        Ok(Some(Peer::new(c.version, txn)))
    }

    /// The target's commits since the merge base, read now.
    async fn target_history(&self) -> Result<Vec<Commit>> {
        let lineage = Lineage::of(&self.root, &self.target, None).await?;
        commits(&self.root, &lineage.segments_since(&self.base)).await
    }

    /// Bind one source commit to `head`: the bases it needs and its actions. A refusal is typed.
    fn bind(
        &self,
        step: &SourceCommit,
        head: &TableState,
        source_ds: &Dataset,
        fragments: &FragmentMap,
    ) -> Result<(Vec<BasePath>, ActionTxn)> {
        let mut graft = Graft::new(
            &self.target_root,
            &head.bases,
            &source_ds.branch_location().uri,
            chain_name(&step.chain),
            &source_ds.manifest().base_paths,
        );
        let mut cx = RemapCx { graft: &mut graft, fragments, head };
        let mut txn = remap(&step.actions, &mut cx).map_err(|why| step.not_replayable(why))?;
        debug_assert!(step.origins.iter().all(|o| !o.is_empty()), "a replay claims the commits it stands for");
        // Claimed in the transaction: a concurrent replay of the same commit conflicts with it.
        txn.context.replay_origins = step.origins.clone();
        Ok((graft.new_bases, txn))
    }

    fn conflict(&self, step: &SourceCommit, verdict: Verdict) -> Option<Conflict> {
        let (reason, retryable) = match verdict {
            Verdict::Ok => return None,
            Verdict::Retry(r) => (r, true),
            Verdict::Fail(r) => (r, false),
        };
        Some(Conflict {
            source_branch: chain_name(&step.chain).into(),
            source_version: step.version,
            reason,
            retryable,
            keys: Vec::new(),
        })
    }

    /// Every conflict the driver found: one per target commit that does not commute with the
    /// replay (the driver stops at a Fail), or the verdict on the head when no peer conflicts.
    fn conflicts(&self, step: &SourceCommit, r: &Resolution) -> Vec<Conflict> {
        let mut out: Vec<Conflict> = r.peers.iter().filter_map(|p| self.conflict(step, p.verdict.clone())).collect();
        if out.is_empty() {
            out.extend(self.conflict(step, r.verdict.clone()));
        }
        out
    }

    /// The driver's conflicts plus the keys the target already holds, unless the replay converges
    /// (changes nothing the target does not already have): then `Converged`.
    #[allow(clippy::too_many_arguments)]
    async fn judge_step(
        &self,
        step: &SourceCommit,
        r: &Resolution,
        key: Option<&[String]>,
        target: &Arc<Dataset>,
        head: &TableState,
        source_ds: &Dataset,
        before: &KeyState,
    ) -> Result<StepVerdict> {
        let mut found = self.conflicts(step, r);
        let probed = match key {
            Some(key) if inserts_rows(&r.txn) => Some(probe(key, target, source_ds, step, &r.txn, before).await?),
            _ => None,
        };
        let keys_present = probed.as_ref().is_some_and(|p| !p.present.is_empty());
        if found.is_empty() && !keys_present {
            return Ok(StepVerdict::Go(probed));
        }
        if let Some(p) = &probed
            && p.converges(&r.txn, target, head, before).await?
        {
            return Ok(StepVerdict::Converged);
        }
        if let Some(p) = probed.filter(|p| !p.present.is_empty()) {
            found.push(Conflict {
                source_branch: chain_name(&step.chain).into(),
                source_version: step.version,
                reason: p.reason(chain_name(&self.target), target.manifest().version),
                retryable: false,
                keys: p.present_keys(),
            });
        }
        Ok(StepVerdict::Conflicts(found))
    }

    /// Judge every pending commit in order on the model's table state, writing nothing. Returns
    /// the plan with every conflict found: a conflicting commit is left out and the later ones are
    /// still judged, until one depends on a commit left out.
    pub async fn plan(&self, progress: &Progress) -> Result<Plan> {
        let target = Arc::new(open_chain(&self.root, &self.target).await?);
        let key = key_columns(&target);
        let mut head = table_state(&target).await?;
        let (peers, facts) = self.target_peers().await?;
        let mut fragments = self.fragments.clone();
        let mut keys = KeyState::default();
        let mut plan = Plan::default();
        let mut version = head.version;
        let total = self.pending.len();
        for (i, step) in self.pending.iter().enumerate() {
            progress.tell("commits planned", i, total);
            let source_ds = open_version(&self.root, &step.chain, step.version).await?;
            let (new_bases, txn) = match self.bind(step, &head, &source_ds, &fragments) {
                Ok(bound) => bound,
                // It needs a commit left out for its conflicts: what was found is the answer.
                Err(_) if !plan.is_clean() => break,
                Err(e) => return Err(e),
            };
            if !new_bases.is_empty() {
                apply(
                    &mut head,
                    &ActionTxn::new(OperationKind::UpdateBases, vec![AddBases { bases: new_bases.clone() }.into()]),
                );
                plan.bases.extend(new_bases);
                version += 1;
            }
            let r = resolve(&txn, &Inputs { base: &self.base_state, head: Some(&head), peers: &peers, facts: &facts });
            let probed = match self.judge_step(step, &r, key.as_deref(), &target, &head, &source_ds, &keys).await? {
                StepVerdict::Go(probed) => probed,
                StepVerdict::Converged => {
                    plan.converged.push(step.version);
                    continue;
                }
                StepVerdict::Conflicts(found) => {
                    plan.conflicts.extend(found);
                    continue;
                }
            };
            let assigned = apply(&mut head, &r.txn);
            fragments.record(&step.new_ids, &assigned).map_err(|m| step.not_replayable(m))?;
            keys.hide(&r.txn);
            if let Some(p) = probed {
                keys.insert(p.inserted, &step.new_ids, &assigned);
            }
            version += 1;
            plan.landed.push(Landed { source_version: step.version, target_version: version, adopted: false });
        }
        Ok(plan)
    }

    /// Replay every pending commit for real, one commit each (plus one commit adding the bases the
    /// first replay from a location needs); a convergent one is skipped (`Plan::converged`). Stops
    /// at the first conflicting commit (`Plan::conflicts`); what landed before it stays (each replay
    /// is atomic, the sequence is not).
    pub async fn execute(&mut self, retry: &RetryPolicy, progress: &Progress) -> Result<Plan> {
        let mut done = Plan::default();
        debug_assert!(
            self.pending.iter().all(|s| s.origins.iter().all(|o| self.source_known.contains(o))),
            "a pending step stands for commits of the source's history"
        );
        let pending = std::mem::take(&mut self.pending);
        for (i, step) in pending.iter().enumerate() {
            // What is left when the run stops early: this step and the ones after it.
            let stop = |session: &mut Self| session.pending = pending[i..].to_vec();
            match self.execute_step(step, retry).await {
                Ok(Step::Landed(l)) => done.landed.push(l),
                Ok(Step::Converged) => done.converged.push(step.version),
                Ok(Step::Conflicted(found)) => {
                    stop(self);
                    done.conflicts = found;
                    return Ok(done);
                }
                Err(e) => {
                    stop(self);
                    return Err(e);
                }
            }
            progress.tell("commits", i + 1, pending.len());
        }
        Ok(done)
    }

    /// Replay one commit. The source version is pinned before anything can land (so a cleanup of
    /// the source between the pin and the commit keeps the files the commit will graft), and the
    /// pin is released again only when no replay of this commit is on the target.
    async fn execute_step(&mut self, step: &SourceCommit, retry: &RetryPolicy) -> Result<Step> {
        let pinned = self.pin(step).await?;
        let result = self.pinned_step(step, retry).await;
        if pinned && !matches!(result, Ok(Step::Landed(_))) && self.certainly_not_landed(step).await {
            // Best effort: a pin left behind keeps files, it never loses them.
            let _ = self.root.tags().delete(&graft_tag(&self.target, &step.chain, step.version)).await;
        }
        result
    }

    /// Whether the target's history, read now, holds no commit replaying `step`. A failed step may
    /// still have landed (the re-pin, the bookkeeping after the commit, or the commit's answer
    /// failed), and a concurrent replay of the same version may have landed relying on our pin:
    /// either way the target grafts the source version and the pin must stay. A history that
    /// cannot be read is not certainty: the pin stays (it keeps files, never loses them).
    async fn certainly_not_landed(&self, step: &SourceCommit) -> bool {
        match self.target_history().await {
            Ok(history) => !history.iter().any(|c| origins(&c.txn) == step.origins),
            Err(_) => false,
        }
    }

    /// The attempts at one pinned commit, under the one retry policy: each attempt reads the head,
    /// adopts a replay of the same commit that already landed, adds the bases the replay needs (and
    /// ends there), or binds, judges and writes.
    async fn pinned_step(&mut self, step: &SourceCommit, retry: &RetryPolicy) -> Result<Step> {
        // A delete of the source retires it before it looks for pins: either it sees ours, or we
        // see its retirement here and stop before grafting files it is about to delete.
        if let Some(physical) = &step.chain
            && let Some(successor) = retirement(&self.root, physical).await?
        {
            return Err(match successor.as_str() {
                "" => Error::BranchDeleted { branch: physical.clone() },
                _ => Error::Retired { branch: physical.clone(), successor },
            });
        }
        let source_ds = open_version(&self.root, &step.chain, step.version).await?;
        // Lent to the attempts and given back however they end.
        let mut cache = std::mem::take(&mut self.peer_cache);
        let result = self.attempts_at(step, &source_ds, &mut cache, retry).await;
        self.peer_cache = cache;
        result
    }

    async fn attempts_at(
        &mut self,
        step: &SourceCommit,
        source_ds: &Dataset,
        cache: &mut PeerCache,
        retry: &RetryPolicy,
    ) -> Result<Step> {
        let mut attempts = retry.attempts();
        attempts.first();
        loop {
            match self.attempt_step(step, source_ds, cache).await? {
                Attempt::Done(done) => return Ok(done),
                Attempt::Again(why) => {
                    if let Err(Exhausted { attempts: made, last }) = attempts.next_or(why).await {
                        return Err(Error::Contention {
                            branch: chain_name(&self.target).into(),
                            attempts: made,
                            last,
                        });
                    }
                }
            }
        }
    }

    /// One attempt: one read of the target, one judgement, at most one write.
    async fn attempt_step(
        &mut self,
        step: &SourceCommit,
        source_ds: &Dataset,
        cache: &mut PeerCache,
    ) -> Result<Attempt> {
        // Read the head first, then look for a replay of the same commit: one that landed up to
        // this head is adopted; one that lands after it makes our write at `head + 1` lose.
        let target = Arc::new(open_chain(&self.root, &self.target).await?);
        let head = table_state(&target).await?;
        let history = self.target_history().await?;
        if let Some(done) = history.iter().find(|c| origins(&c.txn) == step.origins) {
            let mut adopted = self.record_landed(step, &done.chain, done.version).await?;
            adopted.adopted = true;
            return Ok(Attempt::Done(Step::Landed(adopted)));
        }
        let (bases, txn) = self.bind(step, &head, source_ds, &self.fragments)?;
        if !bases.is_empty() {
            // The bases land first, as a commit of their own (Lance's append and update cannot
            // carry bases); the next attempt binds on the head that has them.
            self.add_bases(&target, bases).await?;
            return Ok(Attempt::Again(Interference::BasesAdded));
        }
        let peers = self.peers_from(history, cache).await?;
        let r =
            resolve(&txn, &Inputs { base: &self.base_state, head: Some(&head), peers: &peers, facts: &cache.facts });
        // The key probe at this head; the write lands at the next version or not at all.
        let key = key_columns(&target);
        let none = KeyState::default();
        match self.judge_step(step, &r, key.as_deref(), &target, &head, source_ds, &none).await? {
            StepVerdict::Go(_) => {}
            StepVerdict::Converged => return Ok(Attempt::Done(Step::Converged)),
            StepVerdict::Conflicts(found) => return Ok(Attempt::Done(Step::Conflicted(found))),
        }
        let props = provenance::properties(&step.chain, step.version, &step.origins, &self.operation);
        hooks::point("replay:before-commit", self.root.uri()).await;
        let commit = target.action_commit().with_properties(props).judged_up_to_read_version();
        match commit.execute_actions(head.version, r.txn).await {
            Ok((_, report)) => {
                hooks::point("replay:after-commit", self.root.uri()).await;
                // Pinned already; again in case a concurrent replay of the same version that
                // created the pin failed and released it meanwhile.
                self.pin(step).await?;
                let landed = self.record_landed(step, &self.target.clone(), report.version).await?;
                Ok(Attempt::Done(Step::Landed(landed)))
            }
            // Another replay of the same commit landed first: the next attempt adopts it.
            Err(CommitError::Fail { reason, .. }) if reason.rule == Rule::AlreadyReplayed => {
                Ok(Attempt::Again(Interference::ReplayedConcurrently { reason: Box::new(reason) }))
            }
            // A writer landed on the target after the head we judged (judge again on the new
            // head), or took the version after it at the manifest write.
            Err(source) => match lance_actions_commit::Interference::of(&source) {
                Some(why) => Ok(Attempt::Again(Interference::Commit(why))),
                None => Err(Error::Commit { source }),
            },
        }
    }

    /// The step landed at `version` of `chain` (ours, or a concurrent replay of the same commit):
    /// record which target fragments its new fragments became.
    async fn record_landed(&mut self, step: &SourceCommit, chain: &Chain, version: u64) -> Result<Landed> {
        let target_new = new_fragment_ids(&self.root, chain, version).await?;
        self.fragments.record(&step.new_ids, &target_new).map_err(|m| step.not_replayable(m))?;
        Ok(Landed { source_version: step.version, target_version: version, adopted: false })
    }

    async fn add_bases(&self, target: &Arc<Dataset>, bases: Vec<BasePath>) -> Result<()> {
        let txn = ActionTxn::new(OperationKind::UpdateBases, vec![AddBases { bases }.into()]);
        match target.action_commit().execute_actions(target.manifest().version, txn).await {
            // A concurrent graft of the same location (a base clash): the next binding finds and
            // reuses it. A clash that persists is caught by the caller's bound on grafts.
            Ok(_) | Err(CommitError::Retry { .. }) => Ok(()),
            Err(CommitError::Fail { reason, .. }) if reason.rule == Rule::BaseClash => Ok(()),
            Err(source) => Err(Error::Commit { source }),
        }
    }

    /// Pin the source version the target now reads files from: a Lance tag keeps that version's
    /// files from `cleanup_old_versions` and the source branch from being deleted under the target.
    /// Returns whether this call created the pin (false: it was there already).
    async fn pin(&self, step: &SourceCommit) -> Result<bool> {
        let name = graft_tag(&self.target, &step.chain, step.version);
        let tags = self.root.tags();
        if tags.get(&name).await.is_ok() {
            return Ok(false);
        }
        match tags.create(&name, (chain_name(&step.chain), step.version)).await {
            Ok(()) => Ok(true),
            // A concurrent replay of the same version pinned it between our look and our create.
            Err(lance::Error::RefConflict { .. }) => Ok(false),
            Err(source) => Err(Error::Lance {
                what: format!("pinning version {} of '{}'", step.version, chain_name(&step.chain)),
                source,
            }),
        }
    }
}

/// The tag pinning a source version a target grafted: `graft-<target>-<source>-v<version>`, the
/// names hex-encoded (tag names allow neither '/' nor an unambiguous separator otherwise).
pub fn graft_tag(target: &Chain, source: &Chain, version: u64) -> String {
    format!("graft-{}-{}-v{version}", hex(chain_name(target)), hex(chain_name(source)))
}

pub(crate) fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Commits that change no table content: grafted bases and the branch-name mapping. They never
/// conflict with a replay and do not make a merge more than a fast-forward.
fn is_bookkeeping(txn: &ActionTxn) -> bool {
    is_graft_only(txn)
        || lance_actions::retired::is_retirement(txn)
        || (!txn.actions.is_empty()
            && txn.actions.iter().all(|a| match a {
                AnyAction::UpdateConfig(u) => {
                    u.map == lance_actions::path::ConfigMap::Config
                        && u.update.update_entries.iter().all(|e| e.key.starts_with(crate::names::NAME_PREFIX))
                }
                _ => false,
            }))
}

/// Apply a transaction to the model's state; returns the fragment ids it bound, ascending.
fn apply(state: &mut TableState, txn: &ActionTxn) -> Vec<u64> {
    let mut context = txn.context.clone();
    context.assigned_fragment_ids.clear();
    for action in &txn.actions {
        action.apply(state, &mut context);
    }
    state.version += 1;
    let mut ids = context.assigned_fragment_ids;
    ids.sort_unstable();
    ids
}

impl Session {
    /// How many commits of its own the target made since the merge base (not counting replays of
    /// the source's commits): zero means a merge is a fast-forward.
    pub async fn target_own_commits(&self) -> Result<usize> {
        Ok(self.target_peers().await?.0.len())
    }
}
