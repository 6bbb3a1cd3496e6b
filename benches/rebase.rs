//! Cost of judging one committed peer: our screen + rebase (`resolve`, and `lift` of the peer plus
//! `resolve`) against Lance's `TransactionRebase::check_txn` for the same pair, on manifests of 10,
//! 1,000 and 10,000 fragments, in one run. Reported as ns per (peer x transaction) and as ratios.
//!
//! Run: `cargo bench -p lance-actions-benches --bench rebase` (add `-- --quick` for 10 and 1K only).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance::io::commit::conflict_resolver::TransactionRebase;
use lance_actions::{Inputs, Peer, RebaseFacts, TableState, lift, resolve_in_place};
use lance_actions_benches::median_ns;
use lance_select::RowAddrTreeMap;
use lance_table::format::{DeletionFile, DeletionFileType, Fragment};
use lance_table::transaction::UpdateMode;
use roaring::RoaringBitmap;

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

async fn dataset(dir: &std::path::Path, fragments: usize) -> Arc<Dataset> {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("v", DataType::Int64, true)]));
    let ids: Vec<i64> = (0..fragments as i64).collect();
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.clone())), Arc::new(Int64Array::from(ids))])
            .expect("batch");
    let params =
        WriteParams { mode: WriteMode::Create, max_rows_per_file: 1, max_rows_per_group: 1, ..Default::default() };
    let uri = dir.join(format!("t{fragments}"));
    Arc::new(
        InsertBuilder::new(uri.to_str().expect("utf-8"))
            .with_params(&params)
            .execute(vec![batch])
            .await
            .expect("create"),
    )
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

fn update(ds: &Dataset, fragment: usize, deletion_id: u64, fields_modified: Vec<u32>) -> Transaction {
    let frag = &ds.manifest().fragments[fragment];
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
    TransactionBuilder::new(ds.manifest().version, op).build()
}

fn append(ds: &Dataset) -> Transaction {
    let mut f = ds.manifest().fragments[0].clone();
    f.id = 0;
    TransactionBuilder::new(ds.manifest().version, Operation::Append { fragments: vec![f] }).build()
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

struct Shape {
    name: &'static str,
    ours: Transaction,
    ours_rows: Option<RowAddrTreeMap>,
    peer: Transaction,
}

fn shapes(ds: &Dataset) -> Vec<Shape> {
    let rows = |frag: u32, row: u32| {
        let mut m = RowAddrTreeMap::default();
        m.insert_bitmap(frag, RoaringBitmap::from_iter([row]));
        Some(m)
    };
    vec![
        Shape { name: "append vs append", ours: append(ds), ours_rows: None, peer: append(ds) },
        Shape {
            name: "update vs update, disjoint fragments",
            ours: update(ds, 0, 11, vec![]),
            ours_rows: rows(0, 0),
            peer: update(ds, 1, 12, vec![]),
        },
        Shape {
            name: "update vs update, shared fragment",
            ours: update(ds, 0, 11, vec![]),
            ours_rows: rows(0, 0),
            peer: update(ds, 0, 12, vec![]),
        },
        Shape {
            name: "create-index vs update",
            ours: create_index(ds),
            ours_rows: None,
            peer: update(ds, 0, 12, vec![1]),
        },
    ]
}

async fn measure(ds: &Arc<Dataset>, shape: &Shape, target: Duration) -> (f64, f64, f64) {
    let indices = lance::index::DatasetIndexExt::load_indices(ds.as_ref()).await.expect("indices");
    let base = TableState::from_manifest(ds.manifest(), &indices);
    let mut ours = lift(&shape.ours.operation);
    lance_actions_commit::judge::attach_affected_rows(&mut ours, shape.ours_rows.as_ref());
    // The peer deleted a different row of the shared fragment: its facts are in memory.
    let facts = MemFacts(HashMap::from([
        ((0, 12), RoaringBitmap::from_iter([1u32])),
        ((1, 12), RoaringBitmap::from_iter([1u32])),
    ]));
    let v = ds.manifest().version + 1;
    let peers = [Peer::new(v, lift(&shape.peer.operation))];
    // Rebase adjusts payloads idempotently, so re-judging the same transaction in place is the
    // steady-state cost of one (peer x transaction) check.
    let resolve_ns = median_ns(
        || {
            std::hint::black_box(resolve_in_place(
                &mut ours,
                &Inputs { base: &base, head: None, peers: &peers, facts: &facts },
            ));
        },
        target,
    );
    let lift_resolve_ns = median_ns(
        || {
            let peers = [Peer::new(v, lift(&shape.peer.operation))];
            std::hint::black_box(resolve_in_place(
                &mut ours,
                &Inputs { base: &base, head: None, peers: &peers, facts: &facts },
            ));
        },
        target,
    );
    let mut rebase =
        TransactionRebase::try_new(ds, shape.ours.clone(), shape.ours_rows.as_ref()).await.expect("try_new");
    let lance_ns = median_ns(
        || {
            let _ = std::hint::black_box(rebase.check_txn(&shape.peer, v));
        },
        target,
    );
    (resolve_ns, lift_resolve_ns, lance_ns)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[10, 1_000] } else { &[10, 1_000, 10_000] };
    let target = Duration::from_millis(if quick { 100 } else { 300 });
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "| shape | fragments | ours resolve (ns) | ours lift+resolve (ns) | Lance check_txn (ns) | resolve / Lance | lift+resolve / Lance |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in sizes {
        let ds = dataset(dir.path(), n).await;
        for shape in shapes(&ds) {
            let (r, lr, l) = measure(&ds, &shape, target).await;
            println!("| {} | {n} | {r:.0} | {lr:.0} | {l:.0} | {:.2}x | {:.2}x |", shape.name, r / l, lr / l);
        }
    }
}
