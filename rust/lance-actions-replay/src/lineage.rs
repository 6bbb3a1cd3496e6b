//! Where a branch's history comes from: its chain of Lance branches back to main, the merge base of
//! two branches, and the commits each made since it.
//!
//! A Lance branch is a shallow clone: its own version chain starts at the version it was cloned
//! from (that version's manifest is the clone itself), and its history before that is its parent's.
//! A branch's *lineage* is the list of (chain, last version of that chain in its history), from
//! main down to the branch.

use std::collections::HashMap;

use lance::Dataset;
use lance::dataset::transaction::Transaction;
use lance_actions_commit::history::committed_since;

use crate::error::{LanceContext, Result};

/// A physical Lance branch: `None` is main.
pub type Chain = Option<String>;

pub fn chain_name(chain: &Chain) -> &str {
    chain.as_deref().unwrap_or("main")
}

/// Open the latest version of a chain.
pub async fn open_chain(root: &Dataset, chain: &Chain) -> Result<Dataset> {
    root.checkout_branch(chain_name(chain)).await.lance(format!("opening branch '{}'", chain_name(chain)))
}

/// Open one version of a chain.
pub async fn open_version(root: &Dataset, chain: &Chain, version: u64) -> Result<Dataset> {
    let latest = open_chain(root, chain).await?;
    if latest.manifest().version == version {
        return Ok(latest);
    }
    latest.checkout_version(version).await.lance(format!("opening version {version} of '{}'", chain_name(chain)))
}

/// A point in history: a version of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    pub chain: Chain,
    pub version: u64,
}

/// A run of commits on one chain: versions `(from, to]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub chain: Chain,
    pub from: u64,
    pub to: u64,
}

/// The chains of a branch's history, main first, each with its last version in that history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage(pub Vec<Point>);

impl Lineage {
    /// The lineage of `chain` at its latest version (or `at`, when given).
    pub async fn of(root: &Dataset, chain: &Chain, at: Option<u64>) -> Result<Self> {
        let branches = root.list_branches().await.lance("listing branches")?;
        let parents: HashMap<String, (Chain, u64)> =
            branches.into_iter().map(|(name, c)| (name, (c.parent_branch, c.parent_version))).collect();
        let head = match at {
            Some(v) => v,
            None => open_chain(root, chain).await?.manifest().version,
        };
        let mut points = vec![Point { chain: chain.clone(), version: head }];
        let mut current = chain.clone();
        // Bounded by the number of branches: a cycle in Lance's refs cannot loop us forever.
        for _ in 0..=parents.len() {
            let Some(name) = current.clone() else { break };
            let Some((parent, version)) = parents.get(&name).cloned() else { break };
            let parent = parent.filter(|p| p != "main");
            points.push(Point { chain: parent.clone(), version });
            current = parent;
        }
        points.reverse();
        Ok(Lineage(points))
    }

    pub fn head(&self) -> &Point {
        // A lineage always has at least the branch itself.
        &self.0[self.0.len() - 1]
    }

    /// The last point both histories share.
    pub fn merge_base(&self, other: &Lineage) -> Point {
        let mut base = Point { chain: None, version: 0 };
        for (i, (a, b)) in self.0.iter().zip(other.0.iter()).enumerate() {
            if a.chain != b.chain {
                break;
            }
            base = Point { chain: a.chain.clone(), version: a.version.min(b.version) };
            let next_same = matches!((self.0.get(i + 1), other.0.get(i + 1)), (Some(x), Some(y)) if x.chain == y.chain);
            if a.version != b.version || !next_same {
                break;
            }
        }
        base
    }

    /// The segments of this history after `base` (which must be a point of it), oldest first.
    pub fn segments_since(&self, base: &Point) -> Vec<Segment> {
        let Some(start) = self.0.iter().position(|p| p.chain == base.chain) else { return Vec::new() };
        let mut out = Vec::new();
        let mut from = base.version;
        for (i, p) in self.0.iter().enumerate().skip(start) {
            if i > start {
                // A child chain starts at the version it was cloned from: that manifest is the clone.
                from = self.0[i - 1].version;
            }
            if p.version > from {
                out.push(Segment { chain: p.chain.clone(), from, to: p.version });
            }
        }
        out
    }
}

/// One commit of a history, read from its chain.
#[derive(Debug, Clone)]
pub struct Commit {
    pub chain: Chain,
    pub version: u64,
    pub txn: Transaction,
}

/// Every commit of `segments`, oldest first.
pub async fn commits(root: &Dataset, segments: &[Segment]) -> Result<Vec<Commit>> {
    let mut out = Vec::new();
    for s in segments {
        let end = open_version(root, &s.chain, s.to).await?;
        for (version, txn) in committed_since(&end, s.from).await? {
            out.push(Commit { chain: s.chain.clone(), version, txn });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lineage(points: &[(Option<&str>, u64)]) -> Lineage {
        Lineage(points.iter().map(|(c, v)| Point { chain: c.map(String::from), version: *v }).collect())
    }

    #[test]
    fn merge_base_of_a_branch_and_its_parent_is_the_fork() {
        let feature = lineage(&[(None, 2), (Some("f"), 5)]);
        let main = lineage(&[(None, 7)]);
        assert_eq!(feature.merge_base(&main), Point { chain: None, version: 2 });
        assert_eq!(main.merge_base(&feature), Point { chain: None, version: 2 });
        assert_eq!(
            feature.segments_since(&feature.merge_base(&main)),
            vec![Segment { chain: Some("f".into()), from: 2, to: 5 }]
        );
        assert_eq!(
            main.segments_since(&Point { chain: None, version: 2 }),
            vec![Segment { chain: None, from: 2, to: 7 }]
        );
    }

    #[test]
    fn nested_and_sibling_branches() {
        let child = lineage(&[(None, 2), (Some("f"), 4), (Some("c"), 9)]);
        let feature = lineage(&[(None, 2), (Some("f"), 6)]);
        let other = lineage(&[(None, 3), (Some("o"), 8)]);
        assert_eq!(child.merge_base(&feature), Point { chain: Some("f".into()), version: 4 });
        assert_eq!(child.merge_base(&other), Point { chain: None, version: 2 });
        assert_eq!(
            child.segments_since(&Point { chain: None, version: 2 }),
            vec![
                Segment { chain: Some("f".into()), from: 2, to: 4 },
                Segment { chain: Some("c".into()), from: 4, to: 9 }
            ]
        );
        assert_eq!(
            other.segments_since(&Point { chain: None, version: 2 }),
            vec![Segment { chain: None, from: 2, to: 3 }, Segment { chain: Some("o".into()), from: 3, to: 8 }]
        );
    }
}
