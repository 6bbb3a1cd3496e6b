//! Cherry-pick, merge, fast-forward, rebase and squash: sequences of the replay primitive.
//! Every operation plans first (the pure driver on the model's table state) and writes nothing when
//! the plan conflicts; `dry_run` stops after the plan.

use lance::Dataset;

use crate::compose::compose;
use crate::error::{Error, Interference, LanceContext, Result};
use crate::lineage::{Chain, Lineage, chain_name, open_chain};
use crate::names::{Branches, Pins, Retirement, physical_name, unpin};
use crate::replay::{Conflict, Landed, Session};
use lance_actions_commit::branch_names::retirement;
use lance_actions_commit::hooks;
use lance_actions_commit::progress::Progress;
use lance_actions_commit::retry::RetryPolicy;

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Plan and report, write nothing.
    pub dry_run: bool,
    /// Attempts per replayed commit when writers keep landing on the target (and per rewrite when
    /// writers keep landing on the branch being rewritten), with the backoff between them: the
    /// project's one retry policy, by default [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Told after each source commit is planned ("commits planned") and replayed ("commits").
    pub progress: Progress,
}

/// What an operation did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing to replay: the target already has every source commit.
    AlreadyUpToDate {
        skipped: Vec<u64>,
    },
    /// The target had no commits of its own since the fork: the source's commits replayed as they are.
    FastForward {
        landed: Vec<Landed>,
        skipped: Vec<u64>,
    },
    /// Both sides had commits; the source's commuted with the target's and were replayed.
    Merged {
        landed: Vec<Landed>,
        skipped: Vec<u64>,
    },
    CherryPicked {
        landed: Vec<Landed>,
        skipped: Vec<u64>,
    },
    /// The branch now designates `new_physical`, built from the onto-branch's tip.
    Rebased {
        old_physical: String,
        new_physical: String,
        landed: Vec<Landed>,
    },
    /// The branch now designates `new_physical`, with the range replayed as one commit.
    Squashed {
        old_physical: String,
        new_physical: String,
        landed: Vec<Landed>,
    },
    /// A replayed commit does not commute with the target. `landed` is empty unless a writer that
    /// landed on the target during the operation created the conflict part way through.
    Conflicted {
        conflicts: Vec<Conflict>,
        landed: Vec<Landed>,
    },
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::AlreadyUpToDate { .. } => "already-up-to-date",
            Outcome::FastForward { .. } => "fast-forward",
            Outcome::Merged { .. } => "merged",
            Outcome::CherryPicked { .. } => "cherry-picked",
            Outcome::Rebased { .. } => "rebased",
            Outcome::Squashed { .. } => "squashed",
            Outcome::Conflicted { .. } => "conflicted",
        }
    }
}

enum Run {
    /// What landed, and the source versions that converged (already on the target: skipped).
    Done(Vec<Landed>, Vec<u64>),
    Conflicted(Vec<Conflict>, Vec<Landed>),
}

/// Plan, then (unless dry) execute.
async fn run(session: &mut Session, options: &ReplayOptions) -> Result<Run> {
    let planned = session.plan(&options.progress).await?;
    if !planned.is_clean() {
        return Ok(Run::Conflicted(planned.conflicts, Vec::new()));
    }
    if options.dry_run {
        return Ok(Run::Done(planned.landed, planned.converged));
    }
    // A convergent commit writes nothing, not even the bases its replay would have needed.
    session.pending.retain(|s| !planned.converged.contains(&s.version));
    let done = session.execute(&options.retry, &options.progress).await?;
    Ok(match done.is_clean() {
        true => Run::Done(done.landed, with_converged(planned.converged, done.converged)),
        false => Run::Conflicted(done.conflicts, done.landed),
    })
}

/// Skipped versions: those the target already had, then those that converged, in version order.
fn with_converged(mut skipped: Vec<u64>, converged: Vec<u64>) -> Vec<u64> {
    skipped.extend(converged);
    skipped.sort_unstable();
    skipped
}

impl Branches {
    async fn target_for_write(&self, logical: &str, options: &ReplayOptions) -> Result<Chain> {
        if options.dry_run { self.resolve(logical).await } else { self.adopt(logical).await }
    }

    /// Replay the given versions of `from` onto `onto`, in order.
    pub async fn cherry_pick(
        &self,
        from: &str,
        versions: &[u64],
        onto: &str,
        options: &ReplayOptions,
    ) -> Result<Outcome> {
        let source = self.resolve(from).await?;
        let target = self.target_for_write(onto, options).await?;
        let root = self.root().await?;
        let mut versions = versions.to_vec();
        versions.sort_unstable();
        let mut session = Session::open(&root, &source, &target, Some(&versions), "cherry-pick").await?;
        let skipped = session.skipped.clone();
        if session.pending.is_empty() {
            return Ok(Outcome::AlreadyUpToDate { skipped });
        }
        Ok(match run(&mut session, options).await? {
            Run::Done(landed, converged) => {
                Outcome::CherryPicked { landed, skipped: with_converged(skipped, converged) }
            }
            Run::Conflicted(conflicts, landed) => Outcome::Conflicted { conflicts, landed },
        })
    }

    /// Replay every commit of `from` since it forked from `into`.
    pub async fn merge(&self, from: &str, into: &str, options: &ReplayOptions) -> Result<Outcome> {
        self.merge_inner(from, into, options, false).await
    }

    /// Like merge, but only when `into` has no commits of its own since the fork.
    pub async fn fast_forward(&self, from: &str, into: &str, options: &ReplayOptions) -> Result<Outcome> {
        self.merge_inner(from, into, options, true).await
    }

    async fn merge_inner(&self, from: &str, into: &str, options: &ReplayOptions, ff_only: bool) -> Result<Outcome> {
        let source = self.resolve(from).await?;
        let target = self.target_for_write(into, options).await?;
        let root = self.root().await?;
        let mut session = Session::open(&root, &source, &target, None, "merge").await?;
        let skipped = session.skipped.clone();
        let own = session.target_own_commits().await?;
        if session.pending.is_empty() {
            return Ok(Outcome::AlreadyUpToDate { skipped });
        }
        if ff_only && own > 0 {
            return Err(Error::NotFastForward { from: from.into(), target: into.into(), commits: own });
        }
        Ok(match run(&mut session, options).await? {
            Run::Done(landed, converged) if own == 0 => {
                Outcome::FastForward { landed, skipped: with_converged(skipped, converged) }
            }
            Run::Done(landed, converged) => Outcome::Merged { landed, skipped: with_converged(skipped, converged) },
            Run::Conflicted(conflicts, landed) => Outcome::Conflicted { conflicts, landed },
        })
    }

    /// Replay `branch`'s commits since it forked from `onto` on a fresh physical branch made from
    /// `onto`'s tip, then swap the name to it. Nothing changes for `branch` if anything conflicts.
    pub async fn rebase(&self, branch: &str, onto: &str, options: &ReplayOptions) -> Result<Outcome> {
        let old = self.resolve(branch).await?.ok_or_else(|| Error::Main { what: "rebased".into() })?;
        let onto_chain = self.resolve(onto).await?;
        let root = self.root().await?;
        if options.dry_run {
            let mut session = Session::open(&root, &Some(old.clone()), &onto_chain, None, "rebase").await?;
            return Ok(match run(&mut session, options).await? {
                Run::Done(landed, _) => {
                    Outcome::Rebased { old_physical: old.clone(), new_physical: String::new(), landed }
                }
                Run::Conflicted(conflicts, landed) => Outcome::Conflicted { conflicts, landed },
            });
        }
        self.rewrite(branch, options, Rewrite::Rebase { onto: onto_chain }).await
    }

    /// Rewrite `branch` so that its commits `from..=to` become one commit: a fresh physical branch
    /// from the version before `from`, the composed range, then the commits after `to`.
    pub async fn squash(&self, branch: &str, from: u64, to: u64, options: &ReplayOptions) -> Result<Outcome> {
        let old = self.resolve(branch).await?.ok_or_else(|| Error::Main { what: "squashed".into() })?;
        let root = self.root().await?;
        let chain = Some(old.clone());
        let lineage = Lineage::of(&root, &chain, None).await?;
        let start = lineage.0.iter().rev().nth(1).map(|p| p.version).unwrap_or(0);
        if from <= start || to < from || to > lineage.head().version {
            return Err(Error::NotInHistory { branch: branch.into(), version: from, target: branch.into() });
        }
        if options.dry_run {
            let probe = self.squash_plan(&root, &chain, &lineage, from, to).await?;
            return Ok(Outcome::Squashed { old_physical: old, new_physical: String::new(), landed: probe });
        }
        self.rewrite(branch, options, Rewrite::Squash { from, to }).await
    }

    /// Build the rewritten branch on a fresh physical branch from the old one's head as read now,
    /// then retire the old one at exactly that head (the compare-and-swap) and point the name at
    /// the fresh one. A write that landed on the old branch meanwhile makes the rewrite start over
    /// from the new head (so it is carried over), as often as `options.retry` allows.
    async fn rewrite(&self, branch: &str, options: &ReplayOptions, how: Rewrite) -> Result<Outcome> {
        let mut attempts = options.retry.attempts();
        while attempts.next().await.is_some() {
            let mut root = self.root().await?;
            let old = Self::resolve_in(&root, branch).await?.ok_or_else(|| Error::Main { what: how.verb().into() })?;
            let expected = self.mapped(branch).await?;
            let old_chain = Some(old.clone());
            let read_head = open_chain(&root, &old_chain).await?.manifest().version;
            let fresh = physical_name(branch);
            let (from_chain, from_version) = match &how {
                Rewrite::Rebase { onto } => (onto.clone(), open_chain(&root, onto).await?.manifest().version),
                Rewrite::Squash { from, .. } => (old_chain.clone(), from - 1),
            };
            root.create_branch(&fresh, (chain_name(&from_chain), from_version), None)
                .await
                .lance(format!("creating the rewritten branch for '{branch}'"))?;
            let squash = match how {
                Rewrite::Squash { from, to } => Some((from, to)),
                Rewrite::Rebase { .. } => None,
            };
            let built = self.replay_onto_fresh(&root, &old_chain, read_head, &fresh, squash, options, how.verb()).await;
            let landed = match built {
                Ok(Run::Done(landed, _)) => landed,
                Ok(Run::Conflicted(conflicts, _)) => {
                    discard(&root, &fresh).await;
                    return Ok(Outcome::Conflicted { conflicts, landed: Vec::new() });
                }
                Err(e) => {
                    discard(&root, &fresh).await;
                    return Err(lost_the_name(e, &old, branch));
                }
            };
            hooks::point("rewrite:before-swap", self.uri()).await;
            let retired = self.retire(&root, &old, read_head, &fresh).await;
            match settle_retirement(&root, &old, &fresh, retired).await {
                Ok(Retirement::Done) => {}
                Ok(Retirement::Moved) => {
                    discard(&root, &fresh).await;
                    continue;
                }
                Ok(Retirement::Raced) => {
                    discard(&root, &fresh).await;
                    return Err(Error::NameRace { name: branch.to_string() });
                }
                Err(Unsettled::DidNotLand(e)) => {
                    discard(&root, &fresh).await;
                    return Err(e);
                }
                // The old branch may name the fresh one: keep it (an unused branch costs files only).
                Err(Unsettled::Unknown(e)) => return Err(e),
            }
            // The retirement decided it; the catalog entry follows (the name already resolves to
            // the fresh branch through the retirement if this step is interrupted).
            self.swap(branch, expected.as_deref(), Some(&fresh)).await?;
            return Ok(how.outcome(old, fresh, landed));
        }
        Err(Error::Contention {
            branch: branch.to_string(),
            attempts: attempts.made(),
            last: Interference::BranchMoved { operation: how.verb() },
        })
    }

    /// What a squash would land: one commit for the range, one per later commit.
    async fn squash_plan(
        &self,
        root: &Dataset,
        chain: &Chain,
        lineage: &Lineage,
        from: u64,
        to: u64,
    ) -> Result<Vec<Landed>> {
        let before_range = Lineage::of(root, chain, Some(from - 1)).await?;
        let mut session = Session::between(root, chain, lineage, chain, &before_range, None, "squash").await?;
        squash_pending(&mut session, from, to, chain)?;
        let base = from - 1;
        Ok(session
            .pending
            .iter()
            .enumerate()
            .map(|(i, s)| Landed { source_version: s.version, target_version: base + 1 + i as u64, adopted: false })
            .collect())
    }

    #[allow(clippy::too_many_arguments)]
    async fn replay_onto_fresh(
        &self,
        root: &Dataset,
        source: &Chain,
        read_head: u64,
        fresh: &str,
        squash: Option<(u64, u64)>,
        options: &ReplayOptions,
        operation: &str,
    ) -> Result<Run> {
        let target = Some(fresh.to_string());
        // The source exactly as read: the retirement later checks that nothing landed after it.
        let source_lineage = Lineage::of(root, source, Some(read_head)).await?;
        let target_lineage = Lineage::of(root, &target, None).await?;
        let mut session =
            Session::between(root, source, &source_lineage, &target, &target_lineage, None, operation).await?;
        if let Some((from, to)) = squash {
            squash_pending(&mut session, from, to, source)?;
        }
        run(&mut session, options).await
    }
}

/// Which rewrite of a branch.
enum Rewrite {
    Rebase { onto: Chain },
    Squash { from: u64, to: u64 },
}

impl Rewrite {
    fn verb(&self) -> &'static str {
        match self {
            Rewrite::Rebase { .. } => "rebase",
            Rewrite::Squash { .. } => "squash",
        }
    }

    fn outcome(&self, old_physical: String, new_physical: String, landed: Vec<Landed>) -> Outcome {
        match self {
            Rewrite::Rebase { .. } => Outcome::Rebased { old_physical, new_physical, landed },
            Rewrite::Squash { .. } => Outcome::Squashed { old_physical, new_physical, landed },
        }
    }
}

/// Why a retirement did not settle into `Done`: the old branch is certainly not retired into the
/// fresh one, or that could not be read.
enum Unsettled {
    DidNotLand(Error),
    Unknown(Error),
}

/// Whatever `retire` answered, the old branch's head decides: retired into `fresh` means our
/// retirement landed (only this rewrite knows the fresh name), even when the answer was an error
/// or a peer's retirement (a lost answer read back as a peer). Discarding the fresh branch then
/// would leave the old branch naming a deleted successor.
async fn settle_retirement(
    root: &Dataset,
    old: &str,
    fresh: &str,
    retired: Result<Retirement>,
) -> std::result::Result<Retirement, Unsettled> {
    if matches!(retired, Ok(Retirement::Done)) {
        return Ok(Retirement::Done);
    }
    match retirement(root, old).await {
        Ok(Some(successor)) if successor == fresh => Ok(Retirement::Done),
        Ok(_) => retired.map_err(Unsettled::DidNotLand),
        Err(read) => Err(Unsettled::Unknown(retired.err().unwrap_or_else(|| read.into()))),
    }
}

/// Remove a fresh branch a rewrite will not use, and its pins. Best effort: a fresh branch left
/// behind is unreferenced and never mapped.
async fn discard(root: &Dataset, fresh: &str) {
    let _ = unpin(root, fresh, Pins::Both).await;
    let _ = root.clone().force_delete_branch(fresh).await;
}

/// A rewrite's replay stopped because the branch's old physical branch was retired or deleted under
/// it: another rewrite or a delete of the same branch won the race. The user named the branch, so
/// that is the error they get, not the physical names ([`Error::NameRace`]); anything else stands.
fn lost_the_name(e: Error, old: &str, branch: &str) -> Error {
    match e {
        Error::Retired { branch: physical, .. } | Error::BranchDeleted { branch: physical } if physical == old => {
            Error::NameRace { name: branch.to_string() }
        }
        other => other,
    }
}

/// Replace the pending commits `from..=to` of `chain` with their composition.
fn squash_pending(session: &mut Session, from: u64, to: u64, chain: &Chain) -> Result<()> {
    let in_range = |v: u64| (from..=to).contains(&v);
    let range: Vec<_> = session.pending.iter().filter(|s| s.chain == *chain && in_range(s.version)).cloned().collect();
    let composed = compose(&range).map_err(|e| Error::NotReplayable {
        branch: chain_name(chain).into(),
        version: to,
        why: e.into(),
    })?;
    let mut rest: Vec<_> =
        session.pending.iter().filter(|s| !(s.chain == *chain && in_range(s.version))).cloned().collect();
    let at = rest.iter().position(|s| s.version > to).unwrap_or(rest.len());
    rest.insert(at, composed);
    session.pending = rest;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_branch_retired_or_deleted_under_a_rewrite_is_a_race_for_its_name() {
        let retired = Error::Retired { branch: "feature.a1".into(), successor: "feature.b2".into() };
        assert!(
            matches!(lost_the_name(retired, "feature.a1", "feature"), Error::NameRace { name } if name == "feature")
        );
        let deleted = Error::BranchDeleted { branch: "feature.a1".into() };
        assert!(
            matches!(lost_the_name(deleted, "feature.a1", "feature"), Error::NameRace { name } if name == "feature")
        );
    }

    #[test]
    fn another_branch_retired_or_another_error_is_left_as_it_is() {
        let other = Error::Retired { branch: "base.c3".into(), successor: "base.d4".into() };
        assert!(
            matches!(lost_the_name(other, "feature.a1", "feature"), Error::Retired { branch, .. } if branch == "base.c3")
        );
        let main = Error::Main { what: "rebased".into() };
        assert!(matches!(lost_the_name(main, "feature.a1", "feature"), Error::Main { .. }));
    }
}
