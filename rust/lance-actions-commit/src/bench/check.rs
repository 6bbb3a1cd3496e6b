//! The cost of judging one committed peer: our driver's per-peer step against Lance's
//! `TransactionRebase::check_txn` for the same pair, on manifests of a given number of fragments.
//!
//! Both sides are prepared once per transaction outside the timing, as each loop does it: Lance's
//! `TransactionRebase::try_new`, our `Prepared::of` (masks and screen) plus the peer's decoding
//! (`Peer::new`). Also reported: our whole `resolve_in_place` against the one peer (preparation
//! included), and with the peer lifted from its Lance operation on every call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance::index::DatasetIndexExt;
use lance::io::commit::conflict_resolver::TransactionRebase;
use lance_actions::{Inputs, Peer, Prepared, RebaseFacts, TableState, judge_peer, lift, resolve_in_place};
use lance_select::RowAddrTreeMap;
use lance_table::format::{DeletionFile, DeletionFileType, Fragment};
use lance_table::transaction::UpdateMode;
use roaring::RoaringBitmap;

use super::{BenchError, BenchResult, lance_err, median_ns};
use crate::judge::attach_affected_rows;

/// Deleted rows known in memory, as the commit layer would have read them.
struct MemFacts(HashMap<(u64, u64), RoaringBitmap>);

impl RebaseFacts for MemFacts {
    fn deleted_rows(&self, f: &Fragment) -> Option<RoaringBitmap> {
        match &f.deletion_file {
            None => Some(RoaringBitmap::new()),
            Some(d) => self.0.get(&(f.id, d.id)).cloned(),
        }
    }
}

/// A table of `fragments` one-row fragments (`id`, `v`) under `dir`.
pub async fn table(dir: &str, fragments: usize) -> BenchResult<Arc<Dataset>> {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("v", DataType::Int64, true)]));
    let ids: Vec<i64> = (0..fragments as i64).collect();
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.clone())), Arc::new(Int64Array::from(ids))])
            .map_err(|e| BenchError::Setup { what: format!("building the check table's rows: {e}") })?;
    let params =
        WriteParams { mode: WriteMode::Create, max_rows_per_file: 1, max_rows_per_group: 1, ..Default::default() };
    let uri = format!("{}/t{fragments}", dir.trim_end_matches('/'));
    let ds = InsertBuilder::new(uri.as_str())
        .with_params(&params)
        .execute(vec![batch])
        .await
        .map_err(lance_err("creating the check table"))?;
    Ok(Arc::new(ds))
}

fn with_deletion(f: &Fragment, id: u64) -> Fragment {
    let mut f = f.clone();
    f.deletion_file = Some(DeletionFile {
        read_version: 1,
        id,
        file_type: DeletionFileType::Array,
        num_deleted_rows: Some(1),
        base_id: None,
    });
    f
}

fn fragment(ds: &Dataset, i: usize) -> BenchResult<&Fragment> {
    ds.manifest().fragments.get(i).ok_or_else(|| BenchError::Setup { what: format!("the table has no fragment {i}") })
}

fn update(ds: &Dataset, i: usize, deletion_id: u64, fields_modified: Vec<u32>) -> BenchResult<Transaction> {
    let frag = fragment(ds, i)?;
    let mut new = frag.clone();
    new.id = 0;
    let op = Operation::Update {
        removed_fragment_ids: vec![],
        updated_fragments: vec![with_deletion(frag, deletion_id)],
        new_fragments: vec![new],
        fields_modified,
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(UpdateMode::RewriteRows),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    Ok(TransactionBuilder::new(ds.manifest().version, op).build())
}

fn append(ds: &Dataset) -> BenchResult<Transaction> {
    let mut f = fragment(ds, 0)?.clone();
    f.id = 0;
    Ok(TransactionBuilder::new(ds.manifest().version, Operation::Append { fragments: vec![f] }).build())
}

fn create_index(ds: &Dataset) -> Transaction {
    let fragments = ds.manifest().fragments.iter().map(|f| f.id as u32).collect();
    let index = lance_actions::samples::index_on(uuid::Uuid::new_v4(), "v_idx", 1, ds.manifest().version, fragments);
    TransactionBuilder::new(
        ds.manifest().version,
        Operation::CreateIndex { new_indices: vec![index], removed_indices: vec![] },
    )
    .build()
}

/// One (our transaction, committed peer) pair.
pub struct Shape {
    pub name: &'static str,
    ours: Transaction,
    ours_rows: Option<RowAddrTreeMap>,
    peer: Transaction,
}

/// The pairs measured: two appends, two updates of different fragments, two updates of one
/// fragment (row-level rebase), an index creation against an update of the indexed field.
pub fn shapes(ds: &Dataset) -> BenchResult<Vec<Shape>> {
    let rows = |frag: u32, row: u32| {
        let mut m = RowAddrTreeMap::default();
        m.insert_bitmap(frag, RoaringBitmap::from_iter([row]));
        Some(m)
    };
    Ok(vec![
        Shape { name: "append vs append", ours: append(ds)?, ours_rows: None, peer: append(ds)? },
        Shape {
            name: "update vs update, disjoint fragments",
            ours: update(ds, 0, 11, vec![])?,
            ours_rows: rows(0, 0),
            peer: update(ds, 1, 12, vec![])?,
        },
        Shape {
            name: "update vs update, shared fragment",
            ours: update(ds, 0, 11, vec![])?,
            ours_rows: rows(0, 0),
            peer: update(ds, 0, 12, vec![])?,
        },
        Shape {
            name: "create-index vs update",
            ours: create_index(ds),
            ours_rows: None,
            peer: update(ds, 0, 12, vec![1])?,
        },
    ])
}

/// Median ns per judgement of one pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckTimes {
    /// Our per-peer step (`judge_peer`), both sides prepared.
    pub ours_peer_ns: f64,
    /// Our whole `resolve_in_place` against the one peer (our preparation included).
    pub ours_resolve_ns: f64,
    /// As `ours_resolve_ns`, with the peer lifted and prepared on every call.
    pub ours_lift_resolve_ns: f64,
    /// Lance's `check_txn`, its `TransactionRebase` built once.
    pub lance_ns: f64,
}

/// Time one shape on `ds`, each figure over about `target`.
pub async fn measure(ds: &Arc<Dataset>, shape: &Shape, target: Duration) -> BenchResult<CheckTimes> {
    let indices = ds.load_indices().await.map_err(lance_err("loading indices"))?;
    let base = TableState::from_manifest(ds.manifest(), &indices);
    let mut ours = lift(&shape.ours.operation);
    attach_affected_rows(&mut ours, shape.ours_rows.as_ref());
    // The peer deleted a different row of the shared fragment: its facts are in memory.
    let facts = MemFacts(HashMap::from([
        ((0, 12), RoaringBitmap::from_iter([1u32])),
        ((1, 12), RoaringBitmap::from_iter([1u32])),
    ]));
    let v = ds.manifest().version + 1;
    let peers = [Peer::new(v, lift(&shape.peer.operation))];
    let inputs = Inputs { base: &base, head: None, peers: &peers, facts: &facts };
    let prepared = Prepared::of(&ours);
    // Rebase adjusts payloads idempotently, so re-judging the same transaction in place is the
    // steady-state cost of one (peer x transaction) check.
    let ours_peer_ns = median_ns(
        || {
            std::hint::black_box(judge_peer(&mut ours, &prepared, &inputs, &peers[0]));
        },
        target,
    );
    let ours_resolve_ns = median_ns(
        || {
            std::hint::black_box(resolve_in_place(&mut ours, &inputs));
        },
        target,
    );
    let ours_lift_resolve_ns = median_ns(
        || {
            let peers = [Peer::new(v, lift(&shape.peer.operation))];
            std::hint::black_box(resolve_in_place(
                &mut ours,
                &Inputs { base: &base, head: None, peers: &peers, facts: &facts },
            ));
        },
        target,
    );
    let mut rebase = TransactionRebase::try_new(ds, shape.ours.clone(), shape.ours_rows.as_ref())
        .await
        .map_err(lance_err("preparing Lance's rebase"))?;
    let lance_ns = median_ns(
        || {
            let _ = std::hint::black_box(rebase.check_txn(&shape.peer, v));
        },
        target,
    );
    Ok(CheckTimes { ours_peer_ns, ours_resolve_ns, ours_lift_resolve_ns, lance_ns })
}
