//! Merge conflicts and constraint violations, reported as data.

/// The seven kinds OmniGraph reports, with the same wire labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictKind {
    DivergentInsert,
    DivergentUpdate,
    DeleteVsUpdate,
    OrphanEdge,
    UniqueViolation,
    CardinalityViolation,
    ValueConstraintViolation,
}

impl ConflictKind {
    pub fn label(self) -> &'static str {
        match self {
            ConflictKind::DivergentInsert => "divergent_insert",
            ConflictKind::DivergentUpdate => "divergent_update",
            ConflictKind::DeleteVsUpdate => "delete_vs_update",
            ConflictKind::OrphanEdge => "orphan_edge",
            ConflictKind::UniqueViolation => "unique_violation",
            ConflictKind::CardinalityViolation => "cardinality_violation",
            ConflictKind::ValueConstraintViolation => "value_constraint_violation",
        }
    }

    /// Row conflicts (from the truth table), as opposed to constraint violations.
    pub fn is_row_conflict(self) -> bool {
        matches!(self, ConflictKind::DivergentInsert | ConflictKind::DivergentUpdate | ConflictKind::DeleteVsUpdate)
    }
}

/// One conflict: which type, which id, what kind, and a message a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// `node:Person` or `edge:Knows`.
    pub type_key: String,
    pub id: String,
    pub kind: ConflictKind,
    pub message: String,
}

impl Conflict {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"type": self.type_key, "id": self.id, "kind": self.kind.label(), "message": self.message})
    }
}

/// The first few conflicts on one line.
pub fn summary(conflicts: &[Conflict]) -> String {
    let mut parts: Vec<String> = conflicts
        .iter()
        .take(3)
        .map(|c| format!("{} {} {}: {}", c.kind.label(), c.type_key, c.id, c.message))
        .collect();
    if conflicts.len() > 3 {
        parts.push(format!("and {} more", conflicts.len() - 3));
    }
    parts.join("; ")
}
