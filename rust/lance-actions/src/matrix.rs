//! The emergent conflict matrix: derived from masks and rebases, never written by hand.
//!
//! A fixed set of sample operations (two or more variants per Lance operation kind, aimed at the same
//! or at different fragments, rows, names, keys, fields and shards) is built on a synthetic table and
//! lifted to actions. Every ordered pair is then judged by the pure driver; a cell summarises the
//! verdicts of all its sample pairs with Lance's legend (O, R, F, c = O or R, f = O or F, x = mixed).
//! The finer action x action matrix records, for every pair of action kinds that met in the samples,
//! whether their masks overlapped and what the single-action rebase answered.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_schema::{DataType, Field as ArrowField, Schema as ArrowSchema};
use lance_core::datatypes::Schema;
use lance_table::format::key_existence::KeyExistenceFilter;
use lance_table::format::{DataFile, DeletionFile, DeletionFileType, Fragment, IndexMetadata};
use lance_table::transaction::{Operation, UpdateMode};
use uuid::Uuid;

use crate::action::{Action, ActionKind, AnyAction, IndexEdits, NoFacts, PeerAction, RebaseCx};
use crate::actions::add_fragments::AddFragments;
use crate::actions::opaque::Opaque;
use crate::context::{OperationKind, TxnContext};
use crate::driver::{Inputs, Peer, resolve};
use crate::keys::{InsertedKeys, KeyHashSet};
use crate::samples::{index_on, manifest_edits, row_moving_update};
use crate::state::TableState;
use crate::translate::lift;
use crate::txn::ActionTxn;
use crate::verdict::Verdict;

const FRAGMENTS: u64 = 4;

/// One sample: an operation kind, a variant name, and its action transaction.
pub struct Sample {
    pub kind: OperationKind,
    pub variant: &'static str,
    pub txn: ActionTxn,
}

fn sample_schema() -> Schema {
    let arrow = ArrowSchema::new(vec![
        ArrowField::new("id", DataType::Int64, false),
        ArrowField::new("v", DataType::Int64, true),
        ArrowField::new("s", DataType::Utf8, true),
    ]);
    // A constant of this module, not input: a failure is a programming error the tests catch.
    Schema::try_from(&arrow).expect("the sample schema is a valid Lance schema")
}

fn data_file(path: &str, fields: Vec<i32>) -> DataFile {
    let columns = (0..fields.len() as i32).collect();
    DataFile::new_legacy_from_fields(path, fields, None).with_columns(columns)
}

trait WithColumns {
    fn with_columns(self, columns: Vec<i32>) -> Self;
}

impl WithColumns for DataFile {
    fn with_columns(mut self, columns: Vec<i32>) -> Self {
        self.column_indices = Arc::from(columns);
        self
    }
}

fn fragment(id: u64) -> Fragment {
    let mut f = Fragment::new(id);
    f.files = vec![data_file(&format!("f{id}.lance"), vec![0, 1, 2])];
    f.physical_rows = Some(8);
    f
}

fn with_deletions(id: u64) -> Fragment {
    let mut f = fragment(id);
    f.deletion_file = Some(DeletionFile {
        read_version: 1,
        id: 7,
        file_type: DeletionFileType::Array,
        num_deleted_rows: Some(2),
        base_id: None,
    });
    f
}

fn index(name: &str, field: i32, uuid: u128) -> IndexMetadata {
    index_on(Uuid::from_u128(uuid), name, field, 1, (0..FRAGMENTS as u32).collect())
}

/// The synthetic table the samples are read against.
pub fn sample_state() -> TableState {
    let mut state = TableState::empty(sample_schema());
    state.version = 1;
    for id in 0..FRAGMENTS {
        state.fragments.insert(id, fragment(id));
    }
    state.max_fragment_id = FRAGMENTS - 1;
    state.indices = vec![index("id_idx", 0, 1)];
    state.config.insert("k1".into(), "a".into());
    state
}

fn lifted(kind: OperationKind, variant: &'static str, op: Operation) -> Sample {
    Sample { kind, variant, txn: lift(&op) }
}

/// A delete of `rows` in fragment `id`, with its affected rows declared.
fn delete_rows(variant: &'static str, id: u64, rows: &[u32]) -> Sample {
    let mut s = lifted(
        OperationKind::Delete,
        variant,
        Operation::Delete {
            updated_fragments: vec![with_deletions(id)],
            deleted_fragment_ids: vec![],
            predicate: String::new(),
        },
    );
    declare_rows(&mut s.txn, rows);
    s
}

fn declare_rows(txn: &mut ActionTxn, rows: &[u32]) {
    for a in txn.actions.iter_mut() {
        if let AnyAction::UpdateDeletionVector(u) = a {
            u.affected_rows = Some(rows.iter().copied().collect());
        }
    }
}

/// A keyed upsert moving `row` of fragment `id` and inserting keys `new_keys` (exact key hashes).
fn upsert(variant: &'static str, id: u64, row: u32, new_keys: &[u64]) -> Sample {
    let op = row_moving_update(vec![], vec![with_deletions(id)], vec![fragment(0)]);
    let mut s = lifted(OperationKind::Update, variant, op);
    declare_rows(&mut s.txn, &[row]);
    for a in s.txn.actions.iter_mut() {
        if let AnyAction::AddFragments(AddFragments { keys, .. }) = a {
            *keys = Some(InsertedKeys {
                lance_filter: None::<KeyExistenceFilter>,
                exact: Some(KeyHashSet::from_hashes(vec![0], new_keys.iter().copied())),
            });
        }
    }
    s
}

fn row_update(variant: &'static str, id: u64, row: u32) -> Sample {
    let mut s = upsert(variant, id, row, &[]);
    for a in s.txn.actions.iter_mut() {
        if let AnyAction::AddFragments(add) = a {
            add.keys = None;
        }
    }
    s
}

/// Every sample, in a fixed order.
pub fn samples() -> Vec<Sample> {
    use OperationKind as K;
    let schema = sample_schema();
    let overwrite = |config: Option<HashMap<String, String>>| Operation::Overwrite {
        fragments: vec![fragment(0)],
        schema: schema.clone(),
        config_upsert_values: config,
        initial_bases: None,
    };
    let create_index = |new: Vec<IndexMetadata>, removed: Vec<IndexMetadata>| Operation::CreateIndex {
        new_indices: new,
        removed_indices: removed,
    };
    let rewrite_columns = Operation::Update {
        removed_fragment_ids: vec![],
        updated_fragments: vec![fragment(3)],
        new_fragments: vec![],
        fields_modified: vec![1],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(UpdateMode::RewriteColumns),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    let mut out = vec![
        lifted(K::Append, "new-keys", Operation::Append { fragments: vec![fragment(0)] }),
        delete_rows("frag0-rows01", 0, &[0, 1]),
        delete_rows("frag0-rows45", 0, &[4, 5]),
        delete_rows("frag1-rows01", 1, &[0, 1]),
        lifted(
            K::Delete,
            "frag0-all",
            Operation::Delete { updated_fragments: vec![], deleted_fragment_ids: vec![0], predicate: String::new() },
        ),
        lifted(K::Overwrite, "plain", overwrite(None)),
        lifted(K::Overwrite, "config-k1", overwrite(Some(HashMap::from([("k1".into(), "ow".into())])))),
        lifted(K::CreateIndex, "new-v", create_index(vec![index("v_idx", 1, 2)], vec![])),
        lifted(K::CreateIndex, "new-s", create_index(vec![index("s_idx", 2, 3)], vec![])),
        lifted(K::CreateIndex, "replace-id", create_index(vec![index("id_idx", 0, 4)], vec![index("id_idx", 0, 1)])),
        lifted(K::CreateIndex, "drop-id", create_index(vec![], vec![index("id_idx", 0, 1)])),
        upsert("upsert-0-new200", 0, 0, &[200]),
        upsert("upsert-9-new200", 1, 1, &[200]),
        upsert("upsert-10-new300", 1, 2, &[300]),
        row_update("move-row2", 0, 2),
        lifted(K::Update, "rewrite-columns-v", rewrite_columns),
        row_update("move-row12", 1, 4),
    ];
    let fragments: Vec<Fragment> = (0..FRAGMENTS).map(fragment).collect();
    out.extend(manifest_edits(&fragments, &schema, 1).into_iter().map(|(kind, variant, op)| lifted(kind, variant, op)));
    out.push(Sample {
        kind: K::Unknown,
        variant: "future",
        txn: ActionTxn::new(K::Unknown, vec![Opaque { description: "unknown".into() }.into()]),
    });
    out
}

/// Lance's legend for a set of verdict labels.
fn code(labels: &BTreeSet<&'static str>) -> &'static str {
    let (ok, retry, fail) = (labels.contains("ok"), labels.contains("retry"), labels.contains("fail"));
    match (ok, retry, fail) {
        (true, false, false) => "O",
        (false, true, false) => "R",
        (false, false, true) => "F",
        (true, true, false) => "c",
        (true, false, true) => "f",
        (false, false, false) => ".",
        _ => "x",
    }
}

/// The 17 x 17 operation matrix: rows = ours (committing), columns = committed peer.
pub fn operation_matrix() -> BTreeMap<(OperationKind, OperationKind), &'static str> {
    let base = sample_state();
    let samples = samples();
    let mut cells: BTreeMap<(OperationKind, OperationKind), BTreeSet<&'static str>> = BTreeMap::new();
    for ours in &samples {
        for theirs in &samples {
            let peers = [Peer::new(2, theirs.txn.clone())];
            let r = resolve(&ours.txn, &Inputs { base: &base, head: None, peers: &peers, facts: &NoFacts });
            cells.entry((ours.kind, theirs.kind)).or_default().insert(r.verdict.label());
        }
    }
    cells.into_iter().map(|(k, v)| (k, code(&v))).collect()
}

/// The action x action matrix: "." when the masks never overlapped in the samples, else the code of
/// the single-action rebase verdicts.
pub fn action_matrix() -> BTreeMap<(ActionKind, ActionKind), &'static str> {
    let base = sample_state();
    let samples = samples();
    let mut cells: BTreeMap<(ActionKind, ActionKind), BTreeSet<&'static str>> = BTreeMap::new();
    for ours in &samples {
        for theirs in &samples {
            for a in &ours.txn.actions {
                for b in &theirs.txn.actions {
                    let entry = cells.entry((a.kind(), b.kind())).or_default();
                    if let Some(v) = single_rebase(&base, &ours.txn.context, a, &theirs.txn.context, b) {
                        entry.insert(v.label());
                    }
                }
            }
        }
    }
    cells.into_iter().map(|(k, v)| (k, code(&v))).collect()
}

fn single_rebase(
    base: &TableState,
    ours_cx: &TxnContext,
    a: &AnyAction,
    their_cx: &TxnContext,
    b: &AnyAction,
) -> Option<Verdict> {
    let mut mask = a.reads();
    mask.extend(a.writes());
    let written = b.writes();
    // One action alone: its transaction's index edits are its own.
    let their_edits = IndexEdits::of(std::slice::from_ref(b));
    let our_edits = IndexEdits::of(std::slice::from_ref(a));
    let peers: Vec<PeerAction<'_>> = written
        .iter()
        .filter_map(|their_path| {
            let our_path = mask.iter().find(|p| p.overlaps(their_path))?;
            Some(PeerAction {
                version: 2,
                action: b,
                context: their_cx,
                index_edits: &their_edits,
                our_path,
                their_path,
                our_shell: ours_cx.shell,
            })
        })
        .collect();
    if peers.is_empty() {
        return None;
    }
    let cx = RebaseCx { base, ours: ours_cx, index_edits: &our_edits, facts: &NoFacts, head: None, peers: &[] };
    Some(a.clone().rebase(&cx, &peers))
}

/// Render both matrices as the markdown of design/conflict-matrix.md.
pub fn render_markdown() -> String {
    let ops = operation_matrix();
    let mut out = String::from(
        "# Conflict matrix (generated)\n\n\
         Generated by `lance-actions matrix` from the action masks and rebases; do not edit by hand\n\
         (a test fails when this file differs from what the code generates).\n\n\
         Legend: O commits (commutes or rebased), R retry, F fail, c = O or R by condition,\n\
         f = O or F, x = any mix, . = no sample pair met. Rows: the committing transaction;\n\
         columns: the transaction committed before it.\n\n## Operations (17 x 17)\n\n| ours \\ committed |",
    );
    for k in OperationKind::ALL {
        out.push_str(&format!(" {} |", k.code()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(OperationKind::ALL.len()));
    out.push('\n');
    for row in OperationKind::ALL {
        out.push_str(&format!("| {row} |"));
        for col in OperationKind::ALL {
            out.push_str(&format!(" {} |", ops.get(&(row, col)).copied().unwrap_or(".")));
        }
        out.push('\n');
    }
    let actions = action_matrix();
    let kinds: Vec<ActionKind> = ActionKind::ALL.to_vec();
    out.push_str("\n## Actions\n\nRows: our action; columns: the committed action. `.` = masks never overlapped in the samples.\n\n| ours \\ committed |");
    for (i, _) in kinds.iter().enumerate() {
        out.push_str(&format!(" {} |", i + 1));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(kinds.len()));
    out.push('\n');
    for (i, row) in kinds.iter().enumerate() {
        out.push_str(&format!("| {} {:?} |", i + 1, row));
        for col in &kinds {
            out.push_str(&format!(" {} |", actions.get(&(*row, *col)).copied().unwrap_or(".")));
        }
        out.push('\n');
    }
    out
}

/// Render the operation matrix as JSON: `{"Append": {"Append": "O", ...}, ...}`.
pub fn render_json() -> String {
    let ops = operation_matrix();
    let rows: Vec<String> = OperationKind::ALL
        .iter()
        .map(|row| {
            let cells: Vec<String> = OperationKind::ALL
                .iter()
                .map(|col| format!("\"{col}\":\"{}\"", ops.get(&(*row, *col)).copied().unwrap_or(".")))
                .collect();
            format!("\"{row}\":{{{}}}", cells.join(","))
        })
        .collect();
    format!("{{{}}}", rows.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_matrix_is_what_the_code_generates() {
        let committed = include_str!("../../../design/conflict-matrix.md");
        assert!(
            committed == render_markdown(),
            "design/conflict-matrix.md is stale: regenerate it with `lance-actions matrix > design/conflict-matrix.md`"
        );
    }

    #[test]
    fn every_operation_kind_has_a_sample_and_every_cell_is_filled() {
        let kinds: BTreeSet<OperationKind> = samples().iter().map(|s| s.kind).collect();
        assert_eq!(kinds.len(), 17);
        let m = operation_matrix();
        assert_eq!(m.len(), 17 * 17);
        assert!(m.values().all(|c| *c != "."));
    }

    #[test]
    fn opaque_row_fails_everywhere_and_overwrite_wins_over_appends() {
        let m = operation_matrix();
        for k in OperationKind::ALL {
            assert_eq!(m[&(OperationKind::Unknown, k)], "F");
        }
        assert_eq!(m[&(OperationKind::Overwrite, OperationKind::Append)], "O");
        assert_eq!(m[&(OperationKind::Append, OperationKind::Overwrite)], "F");
    }

    /// What `resolve_without_peers` must answer: every action validated on the state the ones
    /// before it leave, written the plain way (a copy of the head, every action applied).
    fn validated_on_a_copy(txn: &ActionTxn, head: &TableState) -> Verdict {
        let mut state = head.clone();
        let mut context = txn.context.clone();
        for action in &txn.actions {
            if let Err(reason) = action.validate(&state) {
                return Verdict::Fail(reason);
            }
            action.apply(&mut state, &mut context);
        }
        Verdict::Ok
    }

    /// Every sample alone and every ordered pair of samples as one transaction, judged with no
    /// peer: the path that prepares nothing and copies no state gives the full driver's verdict
    /// and the plain validation's. A pair whose second action is valid only before the first is
    /// applied (a delete of rows in a fragment the first removed) must fail on both paths, so the
    /// copy skipped for the first action is shown not to matter.
    #[test]
    fn judging_without_peers_prepares_nothing_and_agrees_with_the_driver() {
        let base = sample_state();
        let inputs = Inputs { base: &base, head: Some(&base), peers: &[], facts: &NoFacts };
        let samples = samples();
        let mut txns: Vec<ActionTxn> = samples.iter().map(|s| s.txn.clone()).collect();
        for a in &samples {
            for b in &samples {
                let mut pair = a.txn.clone();
                pair.actions.extend(b.txn.actions.iter().cloned());
                txns.push(pair);
            }
        }
        let (mut ok, mut failed_only_after_the_first) = (0, 0);
        for txn in &txns {
            let lazy = crate::driver::resolve_without_peers(txn, &inputs);
            let (full, checks) = crate::driver::resolve_in_place(&mut txn.clone(), &inputs);
            assert!(checks.is_empty());
            assert_eq!(lazy, full, "{txn:?}");
            assert_eq!(lazy, validated_on_a_copy(txn, &base), "{txn:?}");
            ok += usize::from(lazy.is_ok());
            let later_valid_alone = txn.actions.iter().skip(1).all(|a| a.validate(&base).is_ok());
            let first_valid = txn.actions.first().is_some_and(|a| a.validate(&base).is_ok());
            failed_only_after_the_first += usize::from(first_valid && later_valid_alone && !lazy.is_ok());
        }
        assert!(ok > 0, "some transaction is valid on the sample table");
        assert!(failed_only_after_the_first > 0, "some pair fails only once its first action is applied");
    }
}
