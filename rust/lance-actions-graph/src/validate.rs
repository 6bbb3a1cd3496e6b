//! Constraint validation of a candidate graph: a committed snapshot plus a change set (the rows a
//! write or a merge would upsert and the ids it would delete), shared by writes and merges.
//!
//! Every check reads only what the change set names: its rows, and filtered probes of the
//! snapshot by id, by unique value, or by edge endpoint (in bounded `IN` chunks).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lance::Dataset;

use crate::conflict::{Conflict, ConflictKind};
use crate::error::Result;
use crate::schema::{GraphSchema, TypeDef};
use crate::table::{in_filters, read_ids, scan_filter};
use crate::value::{Row, Value, quote, row_id};

/// What a write or merge would do to one type.
#[derive(Debug, Default, Clone)]
pub struct TypeChange {
    pub upserts: BTreeMap<String, Row>,
    pub deletes: BTreeSet<String>,
}

impl TypeChange {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty()
    }

    fn touches(&self, id: &str) -> bool {
        self.upserts.contains_key(id) || self.deletes.contains(id)
    }
}

/// Changes by type name.
pub type ChangeSet = BTreeMap<String, TypeChange>;

/// The committed state the changes apply to: each type's table at its recorded version.
pub struct Snapshot {
    pub tables: HashMap<String, Dataset>,
}

impl Snapshot {
    fn table(&self, t: &TypeDef) -> Result<&Dataset> {
        self.tables.get(&t.name).ok_or_else(|| crate::error::Error::Corrupt {
            detail: format!("the graph version has no table for {}", t.key()),
        })
    }
}

/// Every violation the candidate would have, in a stable order.
pub async fn validate(schema: &GraphSchema, snap: &Snapshot, changes: &ChangeSet) -> Result<Vec<Conflict>> {
    let mut out = Vec::new();
    let empty = TypeChange::default();
    for (name, change) in changes {
        let t = schema.get(name)?;
        values(t, change, &mut out);
        unique(t, snap, change, &mut out).await?;
        if let Some((src, dst)) = &t.endpoints {
            let src_change = changes.get(src).unwrap_or(&empty);
            let dst_change = changes.get(dst).unwrap_or(&empty);
            endpoints_exist(schema, t, snap, change, [(1, src, src_change), (2, dst, dst_change)], &mut out).await?;
            cardinality(t, snap, change, &mut out).await?;
        }
        if !t.is_edge() && !change.deletes.is_empty() {
            edges_to_deleted(schema, t, snap, change, changes, &mut out).await?;
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn violation(t: &TypeDef, id: &str, kind: ConflictKind, message: String) -> Conflict {
    Conflict { type_key: t.key(), id: id.to_string(), kind, message }
}

/// `range` and `enum` on every upserted row.
fn values(t: &TypeDef, change: &TypeChange, out: &mut Vec<Conflict>) {
    for (id, row) in &change.upserts {
        for (c, v) in t.columns.iter().zip(row) {
            let number = match v {
                Value::Int(i) => Some(*i as f64),
                Value::Float(f) => Some(*f),
                _ => None,
            };
            if let (Some((lo, hi)), Some(x)) = (c.range, number)
                && !(lo..=hi).contains(&x)
            {
                let message = format!("{}.{} = {x} is outside [{lo}, {hi}]", t.name, c.name);
                out.push(violation(t, id, ConflictKind::ValueConstraintViolation, message));
            }
            if let (Some(allowed), Value::Str(s)) = (&c.allowed, v)
                && !allowed.contains(s)
            {
                let message = format!("{}.{} = '{s}' is not one of {allowed:?}", t.name, c.name);
                out.push(violation(t, id, ConflictKind::ValueConstraintViolation, message));
            }
        }
    }
}

/// A `unique` value held by two ids: both in the change set, or one in it and one committed.
async fn unique(t: &TypeDef, snap: &Snapshot, change: &TypeChange, out: &mut Vec<Conflict>) -> Result<()> {
    for (i, c) in t.columns.iter().enumerate().filter(|(_, c)| c.unique) {
        let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, row) in &change.upserts {
            if let Some(lit) = row[i].literal() {
                holders.entry(lit).or_default().push(id.clone());
            }
        }
        if holders.is_empty() {
            continue;
        }
        let literals: Vec<String> = holders.keys().cloned().collect();
        for filter in in_filters(&c.name, &literals) {
            for row in scan_filter(snap.table(t)?, t, Some(&filter)).await? {
                let holder = row_id(&row).to_string();
                if change.touches(&holder) {
                    continue;
                }
                if let Some(ids) = row[i].literal().and_then(|lit| holders.get_mut(&lit)) {
                    ids.push(holder);
                }
            }
        }
        for (lit, ids) in holders.into_iter().filter(|(_, ids)| ids.len() > 1) {
            let shown = ids.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(" and ");
            for id in ids.iter().filter(|id| change.upserts.contains_key(*id)) {
                let message = format!("unique {}.{}: value {lit} held by {shown}", t.name, c.name);
                out.push(violation(t, id, ConflictKind::UniqueViolation, message));
            }
        }
    }
    Ok(())
}

/// Every upserted edge's src and dst exist in the candidate graph.
async fn endpoints_exist(
    schema: &GraphSchema,
    t: &TypeDef,
    snap: &Snapshot,
    change: &TypeChange,
    ends: [(usize, &String, &TypeChange); 2],
    out: &mut Vec<Conflict>,
) -> Result<()> {
    for (col, node_type, node_change) in ends {
        let nt = schema.get(node_type)?;
        let mut probe: BTreeSet<String> = BTreeSet::new();
        for row in change.upserts.values() {
            let end = row[col].as_str().unwrap_or("");
            if !node_change.upserts.contains_key(end) && !node_change.deletes.contains(end) {
                probe.insert(end.to_string());
            }
        }
        let present = if probe.is_empty() { HashMap::new() } else { read_ids(snap.table(nt)?, nt, &probe).await? };
        for (id, row) in &change.upserts {
            let end = row[col].as_str().unwrap_or("");
            let exists = node_change.upserts.contains_key(end)
                || (!node_change.deletes.contains(end) && present.contains_key(end));
            if !exists {
                let which = if col == 1 { "src" } else { "dst" };
                let message = format!("edge {id}: {which} '{end}' ({node_type}) does not exist");
                out.push(violation(t, id, ConflictKind::OrphanEdge, message));
            }
        }
    }
    Ok(())
}

/// Committed edges that point at a node the change set deletes, and that the change set neither
/// deletes nor rewrites.
async fn edges_to_deleted(
    schema: &GraphSchema,
    node: &TypeDef,
    snap: &Snapshot,
    change: &TypeChange,
    changes: &ChangeSet,
    out: &mut Vec<Conflict>,
) -> Result<()> {
    let literals: Vec<String> = change.deletes.iter().map(|id| quote(id)).collect();
    for et in schema.edges_touching(&node.name) {
        let Some((src, dst)) = &et.endpoints else { continue };
        let edge_change = changes.get(&et.name);
        for (col, name, end_type) in [(1usize, "src", src), (2, "dst", dst)] {
            if end_type != &node.name {
                continue;
            }
            for filter in in_filters(name, &literals) {
                for row in scan_filter(snap.table(et)?, et, Some(&filter)).await? {
                    let id = row_id(&row);
                    if edge_change.is_some_and(|c| c.touches(id)) {
                        continue;
                    }
                    let end = row[col].as_str().unwrap_or("");
                    let message = format!("edge {id}: {name} '{end}' ({}) is deleted", node.name);
                    out.push(violation(et, id, ConflictKind::OrphanEdge, message));
                }
            }
        }
    }
    Ok(())
}

/// `max_out` per src node over committed edges plus the change set.
async fn cardinality(t: &TypeDef, snap: &Snapshot, change: &TypeChange, out: &mut Vec<Conflict>) -> Result<()> {
    let Some(max) = t.max_out else { return Ok(()) };
    let mut count: BTreeMap<String, u64> = BTreeMap::new();
    for row in change.upserts.values() {
        *count.entry(row[1].as_str().unwrap_or("").to_string()).or_default() += 1;
    }
    let literals: Vec<String> = count.keys().map(|s| quote(s)).collect();
    for filter in in_filters("src", &literals) {
        for row in scan_filter(snap.table(t)?, t, Some(&filter)).await? {
            if !change.touches(row_id(&row)) {
                *count.entry(row[1].as_str().unwrap_or("").to_string()).or_default() += 1;
            }
        }
    }
    let (src_type, _) = t.endpoints.clone().unwrap_or_default();
    for (src, n) in count.into_iter().filter(|(_, n)| *n > max) {
        let message = format!("{src_type} '{src}' would have {n} {} edges; max_out is {max}", t.name);
        out.push(violation(t, &src, ConflictKind::CardinalityViolation, message));
    }
    Ok(())
}
