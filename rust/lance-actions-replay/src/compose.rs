//! Squash: the composition of a range of commits as one commit. What composes and how is each
//! action's own ([`lance_actions::ActionLife::squash_into`]); this feeds the range's commits in
//! order and keeps their provenance (`design/replay.md`, section 4).

use lance_actions::{Squash, SquashRefusal};

use crate::replay::SourceCommit;

/// One commit whose actions are the composition of `range` (oldest first, all on one chain).
pub fn compose(range: &[SourceCommit]) -> Result<SourceCommit, SquashRefusal> {
    let Some(last) = range.last() else {
        return Err(SquashRefusal::EmptyRange);
    };
    debug_assert!(range.iter().all(|c| c.chain == last.chain), "a squash range lies on one chain");
    debug_assert!(range.windows(2).all(|w| w[0].version < w[1].version), "a squash range is oldest first");
    let mut squash = Squash::default();
    for commit in range {
        squash.commit(commit.version, &commit.new_ids, &commit.actions.actions)?;
    }
    let squashed = squash.finish()?;
    Ok(SourceCommit {
        chain: last.chain.clone(),
        version: last.version,
        actions: squashed.txn,
        new_ids: squashed.new_ids,
        origins: range.iter().flat_map(|c| c.origins.iter().cloned()).collect(),
    })
}
