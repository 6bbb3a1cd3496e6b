//! Cost of judging one committed peer: our per-peer step (`judge_peer`, both sides prepared), our
//! whole `resolve_in_place` (and with the peer lifted on every call) against Lance's
//! `TransactionRebase::check_txn` for the same pair, on manifests of 10, 1,000 and 10,000
//! fragments, in one run. Reported as ns per (peer x transaction) and as ratios. The workload is
//! `lance_actions_commit::bench::check`, which `lance-actions bench check` also runs.
//!
//! Run: `cargo bench -p lance-actions-benches --bench rebase` (add `-- --quick` for 10 and 1K only).

use std::time::Duration;

use lance_actions_commit::bench::check;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[10, 1_000] } else { &[10, 1_000, 10_000] };
    let target = Duration::from_millis(if quick { 100 } else { 300 });
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path().to_str().expect("utf-8 temp dir");
    println!(
        "| shape | fragments | ours per peer (ns) | ours resolve (ns) | ours lift+resolve (ns) | Lance check_txn (ns) | per peer / Lance | resolve / Lance | lift+resolve / Lance |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let ds = check::table(dir, n).await.expect("table");
        for shape in check::shapes(&ds).expect("shapes") {
            let t = check::measure(&ds, &shape, target).await.expect("measure");
            let l = t.lance_ns;
            println!(
                "| {} | {n} | {:.0} | {:.0} | {:.0} | {l:.0} | {:.2}x | {:.2}x | {:.2}x |",
                shape.name,
                t.ours_peer_ns,
                t.ours_resolve_ns,
                t.ours_lift_resolve_ns,
                t.ours_peer_ns / l,
                t.ours_resolve_ns / l,
                t.ours_lift_resolve_ns / l
            );
        }
    }
}
