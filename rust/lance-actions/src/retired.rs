//! Retired branches. A rewrite (rebase, squash) or a delete retires a physical branch by committing
//! the config key [`RETIRED_KEY`] on it, holding the physical branch that replaces it (empty for a
//! delete). Two rules make that commit a compare-and-swap on the branch's head, for every writer
//! that commits through the driver:
//!
//! - a retirement is judged against no peer at all: any commit that landed after the version the
//!   rewrite read is one the rewrite did not carry over, so the retirement must be re-planned
//!   (Retry), never rebased over it;
//! - nothing but lifting a retirement commits on a retired head (Fail, naming the successor):
//!   a writer that read the branch before it was retired cannot land on it afterwards.

use crate::action::{ActionKind, AnyAction};
use crate::path::{ConfigMap, ManifestPath};
use crate::state::TableState;
use crate::txn::ActionTxn;
use crate::verdict::{Reason, Rule, Verdict};

/// The config key that retires a physical branch; its value is the successor ("" when deleted).
pub const RETIRED_KEY: &str = "lance-actions.retired-into";

/// The successor of a retired branch (`Some("")` when it was deleted), from its head's config.
pub fn retired_into(config: &std::collections::HashMap<String, String>) -> Option<&str> {
    config.get(RETIRED_KEY).map(String::as_str)
}

/// What a transaction does to the retirement key: `Some(Some(successor))` sets it, `Some(None)`
/// lifts it, `None` leaves it alone. Only a transaction whose actions all touch that key counts.
fn retirement_change(txn: &ActionTxn) -> Option<Option<&str>> {
    let mut change = None;
    for action in &txn.actions {
        let AnyAction::UpdateConfig(u) = action else { return None };
        if u.map != ConfigMap::Config || u.update.replace {
            return None;
        }
        for entry in &u.update.update_entries {
            if entry.key != RETIRED_KEY {
                return None;
            }
            change = Some(entry.value.as_deref());
        }
    }
    change
}

/// Does this transaction set or lift a retirement (bookkeeping, not table content)?
pub fn is_retirement(txn: &ActionTxn) -> bool {
    retirement_change(txn).is_some()
}

/// The verdict of the retirement rules, when they decide: `head` is the table the transaction
/// would land on, `peers` how many commits landed after its read version.
pub fn verdict(txn: &ActionTxn, head: &TableState, peers: usize, first_peer: Option<u64>) -> Option<Verdict> {
    let change = retirement_change(txn);
    if let Some(successor) = retired_into(&head.config) {
        // Lifting a retirement (a refused delete undoing its first step) is the only way back.
        if matches!(change, Some(None)) {
            return None;
        }
        let detail = match successor {
            "" => "the branch was deleted".to_string(),
            s => format!("the branch was retired into physical branch '{s}'; write to that one"),
        };
        return Some(refusal(Rule::BranchRetired, first_peer, detail, Verdict::Fail));
    }
    if matches!(change, Some(Some(_))) && peers > 0 {
        let detail = format!("{peers} commit(s) landed on the branch after the version the retirement read");
        return Some(refusal(Rule::BranchRetired, first_peer, detail, Verdict::Retry));
    }
    None
}

fn refusal(rule: Rule, peer_version: Option<u64>, detail: String, make: fn(Reason) -> Verdict) -> Verdict {
    make(Reason {
        rule,
        ours: ActionKind::UpdateConfig,
        peer_version,
        peer_action: None,
        path: Some(ManifestPath::Table),
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoFacts;
    use crate::actions::update_config::UpdateConfig;
    use crate::context::OperationKind;
    use crate::driver::{Inputs, Peer, resolve};
    use lance_table::transaction::{UpdateMap, UpdateMapEntry};

    fn config(key: &str, value: Option<&str>) -> ActionTxn {
        let entry = UpdateMapEntry { key: key.into(), value: value.map(String::from) };
        let update =
            UpdateConfig { map: ConfigMap::Config, update: UpdateMap { update_entries: vec![entry], replace: false } };
        ActionTxn::new(OperationKind::UpdateConfig, vec![update.into()])
    }

    fn state(retired: Option<&str>) -> TableState {
        let mut s = TableState::empty(lance_core::datatypes::Schema { fields: vec![], metadata: Default::default() });
        if let Some(r) = retired {
            s.config.insert(RETIRED_KEY.into(), r.into());
        }
        s
    }

    #[test]
    fn a_retirement_takes_no_peer_and_a_retired_head_takes_no_write() {
        let base = state(None);
        let retire = config(RETIRED_KEY, Some("feature.0000abcd"));
        let unrelated = Peer::new(2, config("other", Some("x")));
        // Alone: it commits. After any peer (even one touching another key): Retry, never rebased.
        let alone = resolve(&retire, &Inputs { base: &base, head: None, peers: &[], facts: &NoFacts });
        assert!(alone.verdict.is_ok(), "{:?}", alone.verdict);
        let moved = resolve(&retire, &Inputs { base: &base, head: None, peers: &[unrelated], facts: &NoFacts });
        assert!(matches!(&moved.verdict, Verdict::Retry(r) if r.rule == Rule::BranchRetired), "{:?}", moved.verdict);
        // On a retired head: a write fails naming the successor; lifting the retirement is allowed.
        let head = state(Some("feature.0000abcd"));
        let write = config("other", Some("y"));
        let refused = resolve(&write, &Inputs { base: &base, head: Some(&head), peers: &[], facts: &NoFacts });
        match &refused.verdict {
            Verdict::Fail(r) => {
                assert!(r.rule == Rule::BranchRetired && r.detail.contains("feature.0000abcd"), "{r:?}")
            }
            other => panic!("{other:?}"),
        }
        let lift = config(RETIRED_KEY, None);
        assert!(
            resolve(&lift, &Inputs { base: &head, head: Some(&head), peers: &[], facts: &NoFacts }).verdict.is_ok()
        );
        let again = resolve(&retire, &Inputs { base: &head, head: Some(&head), peers: &[], facts: &NoFacts });
        assert!(matches!(again.verdict, Verdict::Fail(_)), "a second retirement loses");
    }
}
