//! `matrix --format json`: both generated matrices in one object, so a script gets what the
//! markdown shows (operations and actions), not only the first half.

use std::collections::BTreeMap;
use std::fmt::Debug;

use lance_actions::ActionKind;
use lance_actions::OperationKind;
use serde_json::{Map, Value, json};

/// `{"legend": ..., "operations": {ours: {committed: code}}, "actions": {ours: {committed: code}}}`.
/// Every row has every column; "." marks a pair the samples never met.
pub fn matrix_json() -> Value {
    let operations = nested(&OperationKind::ALL, &lance_actions::matrix::operation_matrix());
    let actions = nested(ActionKind::ALL, &lance_actions::matrix::action_matrix());
    json!({
        "legend": {
            "O": "commits (commutes or rebased)", "R": "retry", "F": "fail", "c": "O or R by condition",
            "f": "O or F by condition", "x": "any mix", ".": "no sample pair met",
        },
        "rows": "the committing transaction (ours)",
        "columns": "the transaction committed before it",
        "operations": operations,
        "actions": actions,
    })
}

/// A square table as `{row: {column: code}}`, rows and columns named as the markdown names them.
fn nested<K: Copy + Ord + Debug>(kinds: &[K], cells: &BTreeMap<(K, K), &'static str>) -> Value {
    let mut rows = Map::new();
    for row in kinds {
        let columns: Map<String, Value> = kinds
            .iter()
            .map(|col| (format!("{col:?}"), Value::from(cells.get(&(*row, *col)).copied().unwrap_or("."))))
            .collect();
        rows.insert(format!("{row:?}"), Value::Object(columns));
    }
    Value::Object(rows)
}
