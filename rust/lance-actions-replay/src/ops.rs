//! Cherry-pick, merge, fast-forward, rebase and squash: sequences of the replay primitive.
//! Every operation plans first (the pure driver on the model's table state) and writes nothing when
//! the plan conflicts; `dry_run` stops after the plan.

use lance::Dataset;

use crate::compose::compose;
use crate::error::{Error, LanceContext, Result};
use crate::lineage::{Chain, Lineage, chain_name, open_chain};
use crate::names::{Branches, Pins, physical_name, unpin};
use crate::replay::{Conflict, Landed, Session};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Plan and report, write nothing.
    pub dry_run: bool,
    /// Attempts per replayed commit when writers keep landing on the target.
    pub max_attempts: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self { dry_run: false, max_attempts: 8 }
    }
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
    let planned = match session.plan().await? {
        Err(conflicts) => return Ok(Run::Conflicted(conflicts, Vec::new())),
        Ok(plan) => plan,
    };
    if options.dry_run {
        return Ok(Run::Done(planned.landed, planned.converged));
    }
    // A convergent commit writes nothing, not even the bases its replay would have needed.
    session.pending.retain(|s| !planned.converged.contains(&s.version));
    Ok(match session.execute(options.max_attempts).await? {
        Ok(done) => Run::Done(done.landed, with_converged(planned.converged, done.converged)),
        Err((done, conflicts)) => Run::Conflicted(conflicts, done.landed),
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
        let mut root = self.root().await?;
        if options.dry_run {
            let mut session = Session::open(&root, &Some(old.clone()), &onto_chain, None, "rebase").await?;
            return Ok(match run(&mut session, options).await? {
                Run::Done(landed, _) => {
                    Outcome::Rebased { old_physical: old.clone(), new_physical: String::new(), landed }
                }
                Run::Conflicted(conflicts, landed) => Outcome::Conflicted { conflicts, landed },
            });
        }
        let expected = self.mapped(branch).await?;
        let tip = open_chain(&root, &onto_chain).await?.manifest().version;
        let fresh = physical_name(branch);
        root.create_branch(&fresh, (chain_name(&onto_chain), tip), None)
            .await
            .lance(format!("creating the rebased branch for '{branch}'"))?;
        let built = self.replay_onto_fresh(&root, &Some(old.clone()), &fresh, None, options, "rebase").await;
        self.finish_rewrite(&root, branch, expected.as_deref(), &fresh, built, |landed| Outcome::Rebased {
            old_physical: old.clone(),
            new_physical: fresh.clone(),
            landed,
        })
        .await
    }

    /// Rewrite `branch` so that its commits `from..=to` become one commit: a fresh physical branch
    /// from the version before `from`, the composed range, then the commits after `to`.
    pub async fn squash(&self, branch: &str, from: u64, to: u64, options: &ReplayOptions) -> Result<Outcome> {
        let old = self.resolve(branch).await?.ok_or_else(|| Error::Main { what: "squashed".into() })?;
        let mut root = self.root().await?;
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
        let expected = self.mapped(branch).await?;
        let fresh = physical_name(branch);
        root.create_branch(&fresh, (old.as_str(), from - 1), None)
            .await
            .lance(format!("creating the squashed branch for '{branch}'"))?;
        let built = self.replay_onto_fresh(&root, &chain, &fresh, Some((from, to)), options, "squash").await;
        self.finish_rewrite(&root, branch, expected.as_deref(), &fresh, built, |landed| Outcome::Squashed {
            old_physical: old.clone(),
            new_physical: fresh.clone(),
            landed,
        })
        .await
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
            .map(|(i, s)| Landed { source_version: s.version, target_version: base + 1 + i as u64 })
            .collect())
    }

    async fn replay_onto_fresh(
        &self,
        root: &Dataset,
        source: &Chain,
        fresh: &str,
        squash: Option<(u64, u64)>,
        options: &ReplayOptions,
        operation: &str,
    ) -> Result<Run> {
        let target = Some(fresh.to_string());
        let mut session = Session::open(root, source, &target, None, operation).await?;
        if let Some((from, to)) = squash {
            squash_pending(&mut session, from, to, source)?;
        }
        run(&mut session, options).await
    }

    /// Swap the name to the fresh branch if the replay went through; otherwise (or when another
    /// writer changed the name meanwhile) delete the fresh branch and its pins. `expected` is the
    /// name's mapping when the operation read it (`None` for an adopted, unmapped branch).
    async fn finish_rewrite(
        &self,
        root: &Dataset,
        branch: &str,
        expected: Option<&str>,
        fresh: &str,
        built: Result<Run>,
        done: impl FnOnce(Vec<Landed>) -> Outcome,
    ) -> Result<Outcome> {
        let result = match built {
            Ok(Run::Done(landed, _)) => match self.swap(branch, expected, Some(fresh)).await {
                Ok(()) => return Ok(done(landed)),
                Err(e) => Err(e),
            },
            Ok(Run::Conflicted(conflicts, _)) => Ok(Outcome::Conflicted { conflicts, landed: Vec::new() }),
            Err(e) => Err(e),
        };
        // Best effort: a fresh branch left behind is unreferenced and never mapped.
        let _ = unpin(root, fresh, Pins::Both).await;
        let _ = root.clone().force_delete_branch(fresh).await;
        result
    }

    /// The physical branch `logical` is mapped to, if it is mapped (not merely adopted).
    async fn mapped(&self, logical: &str) -> Result<Option<String>> {
        let root = self.root().await?;
        let key = format!("{}{logical}", crate::names::NAME_PREFIX);
        Ok(root.manifest().config.get(&key).cloned())
    }
}

/// Replace the pending commits `from..=to` of `chain` with their composition.
fn squash_pending(session: &mut Session, from: u64, to: u64, chain: &Chain) -> Result<()> {
    let in_range = |v: u64| (from..=to).contains(&v);
    let range: Vec<_> = session.pending.iter().filter(|s| s.chain == *chain && in_range(s.version)).cloned().collect();
    let composed =
        compose(&range).map_err(|why| Error::NotReplayable { branch: chain_name(chain).into(), version: to, why })?;
    let mut rest: Vec<_> =
        session.pending.iter().filter(|s| !(s.chain == *chain && in_range(s.version))).cloned().collect();
    let at = rest.iter().position(|s| s.version > to).unwrap_or(rest.len());
    rest.insert(at, composed);
    session.pending = rest;
    Ok(())
}
