//! Concurrent keyed writers, threads and OS processes, in seeded randomized rounds. Set `LA_SEED`
//! to replay a run and `LA_ROUNDS` to run more rounds.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use lance_actions_keyed::{Error, KeyedTable, RetryPolicy, WriteOptions};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::support::*;

fn seed() -> u64 {
    std::env::var("LA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(23)
}

fn rounds() -> usize {
    std::env::var("LA_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10)
}

/// What one strict insert came to.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Landed { writer: i64, ids: Vec<i64> },
    Conflict { writer: i64, ids: Vec<i64>, named: Vec<i64> },
}

/// Random batch of 2-5 keys from `pool`.
fn pick(rng: &mut StdRng, pool: &[i64]) -> Vec<i64> {
    let n = rng.random_range(2..=5);
    let mut ids: Vec<i64> = pool.choose_multiple(rng, n).copied().collect();
    ids.sort();
    ids
}

async fn strict_insert(uri: &str, writer: i64, ids: Vec<i64>) -> Outcome {
    let mut table = KeyedTable::open(uri).await.expect("open keyed");
    match table.insert(vec![rows(&ids, writer)]).await {
        Ok(_) => Outcome::Landed { writer, ids },
        Err(Error::KeyConflict { keys, .. }) => {
            let named = keys.first.iter().map(|k| k.parse().expect("int key")).collect();
            Outcome::Conflict { writer, ids, named }
        }
        Err(other) => panic!("writer {writer}: unexpected error {other}"),
    }
}

/// Exactly one winner per key; every conflict named keys that really are taken by someone else;
/// every landed row is its writer's; no duplicates.
async fn verify_strict(uri: &str, base: &BTreeSet<i64>, outcomes: &[Outcome]) -> (usize, usize) {
    let scan = scan(&latest(uri).await).await;
    assert!(duplicated(&scan).is_empty(), "duplicate keys: {:?}", duplicated(&scan));
    let mut owner: BTreeMap<i64, i64> = BTreeMap::new();
    let (mut landed, mut conflicts) = (0, 0);
    for o in outcomes {
        if let Outcome::Landed { writer, ids } = o {
            landed += 1;
            for id in ids {
                assert!(!base.contains(id), "key {id} was present before and inserted again");
                assert!(owner.insert(*id, *writer).is_none(), "key {id} has two winners");
            }
        }
    }
    for o in outcomes {
        if let Outcome::Conflict { writer, ids, named } = o {
            conflicts += 1;
            assert!(!named.is_empty());
            for id in named {
                assert!(ids.contains(id), "writer {writer} was told about key {id} it did not write");
                assert!(base.contains(id) || owner.contains_key(id), "key {id} named in a conflict is not taken");
            }
        }
    }
    let expected: BTreeSet<i64> = base.iter().copied().chain(owner.keys().copied()).collect();
    assert_eq!(scan.keys().copied().collect::<BTreeSet<_>>(), expected, "rows lost or invented");
    for (id, writer) in &owner {
        assert_eq!(scan[id].1, *writer, "key {id} holds another writer's row");
    }
    (landed, conflicts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_threads_strict_insert_overlapping_keys_one_winner_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    let base: BTreeSet<i64> = (0..10).collect();
    keyed_table(&uri, &base.iter().copied().collect::<Vec<_>>()).await;
    let mut rng = StdRng::seed_from_u64(seed());
    let (mut landed, mut conflicts) = (0, 0);
    let mut present = base.clone();
    for round in 0..rounds() {
        // A pool of 40 keys, 10 of them already present: batches overlap each other and the table.
        let pool: Vec<i64> = (0..40).map(|i| if i < 10 { i } else { 1_000 * (round as i64 + 1) + i }).collect();
        let batches: Vec<Vec<i64>> = (0..16).map(|_| pick(&mut rng, &pool)).collect();
        let tasks: Vec<_> = batches
            .into_iter()
            .enumerate()
            .map(|(w, ids)| tokio::spawn(strict_insert_owned(uri.clone(), w as i64, ids)))
            .collect();
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.expect("writer task"));
        }
        let (l, c) = verify_strict(&uri, &present, &outcomes).await;
        landed += l;
        conflicts += c;
        present = scan(&latest(&uri).await).await.keys().copied().collect();
    }
    eprintln!("seed {}: {} rounds x 16 writers: {landed} landed, {conflicts} key conflicts", seed(), rounds());
    assert!(landed > 0 && conflicts > 0, "the rounds must exercise both outcomes");
}

async fn strict_insert_owned(uri: String, writer: i64, ids: Vec<i64>) -> Outcome {
    strict_insert(&uri, writer, ids).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_threads_with_disjoint_keys_all_land_with_no_false_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[0]).await;
    for round in 0..rounds() as i64 {
        let tasks: Vec<_> = (0..16i64)
            .map(|w| {
                let ids: Vec<i64> = (0..50).map(|i| 100_000 * (round + 1) + w * 1_000 + i).collect();
                tokio::spawn(strict_insert_owned(uri.clone(), w, ids))
            })
            .collect();
        for t in tasks {
            let outcome = t.await.expect("writer task");
            assert!(matches!(outcome, Outcome::Landed { .. }), "false conflict: {outcome:?}");
        }
    }
    let scan = scan(&latest(&uri).await).await;
    assert_eq!(scan.len(), 1 + rounds() * 16 * 50);
    assert!(duplicated(&scan).is_empty());
}

/// Entry point of a child process: strict inserts from a shared seeded pool, logged to a file.
/// Ignored, so the runner never counts it as a test of its own; the parent runs it by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of four_processes_strict_insert_overlapping_keys_one_winner_per_key"]
async fn process_writer_child() {
    let (Ok(uri), Ok(w), Ok(out)) =
        (std::env::var("LA_KEYED_URI"), std::env::var("LA_KEYED_WRITER"), std::env::var("LA_KEYED_OUT"))
    else {
        panic!("run by four_processes_strict_insert_overlapping_keys_one_winner_per_key, which sets LA_KEYED_*");
    };
    let w: i64 = w.parse().expect("writer id");
    let mut rng = StdRng::seed_from_u64(seed() ^ ((w as u64 + 1) * 0x9e37_79b9));
    let pool: Vec<i64> = (0..60).collect();
    let mut f = std::fs::File::create(out).expect("log file");
    for _ in 0..8 {
        let ids = pick(&mut rng, &pool);
        let line = match strict_insert(&uri, w, ids).await {
            Outcome::Landed { ids, .. } => format!("landed {}", join(&ids)),
            Outcome::Conflict { ids, named, .. } => format!("conflict {} {}", join(&ids), join(&named)),
        };
        writeln!(f, "{line}").expect("write log");
    }
}

fn join(ids: &[i64]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

fn split(s: &str) -> Vec<i64> {
    s.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_strict_insert_overlapping_keys_one_winner_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[1_000_000]).await;
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..4)
        .map(|w| {
            let out = dir.path().join(format!("writer{w}.log"));
            let child = std::process::Command::new(&exe)
                .args(["--ignored", "--exact", "concurrency::process_writer_child", "--test-threads", "1"])
                .env("LA_KEYED_URI", &uri)
                .env("LA_KEYED_WRITER", w.to_string())
                .env("LA_KEYED_OUT", &out)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn writer process");
            (w, child, out)
        })
        .collect();
    let mut outcomes = Vec::new();
    for (w, child, out) in children {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "writer process {w} failed");
        assert_child_ran(&output.stdout, "concurrency::process_writer_child");
        for line in std::fs::read_to_string(out).expect("writer log").lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            outcomes.push(match parts.as_slice() {
                ["landed", ids] => Outcome::Landed { writer: w, ids: split(ids) },
                ["conflict", ids, named] => Outcome::Conflict { writer: w, ids: split(ids), named: split(named) },
                _ => panic!("bad log line {line:?}"),
            });
        }
    }
    assert_eq!(outcomes.len(), 32);
    let (landed, conflicts) = verify_strict(&uri, &BTreeSet::from([1_000_000]), &outcomes).await;
    eprintln!("4 processes x 8 inserts: {landed} landed, {conflicts} key conflicts");
    assert!(landed > 0 && conflicts > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_upserts_converge_last_writer_wins_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = temp_uri(&dir, "t");
    keyed_table(&uri, &[0, 1, 2, 3, 4]).await;
    let tasks: Vec<_> = (0..8i64)
        .map(|w| {
            let uri = uri.clone();
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed() + w as u64);
                let pool: Vec<i64> = (0..20).collect();
                let (mut log, mut gave_up) = (Vec::new(), Vec::new());
                for seq in 0..5i64 {
                    let ids = pick(&mut rng, &pool);
                    let v = w * 1_000 + seq;
                    let options =
                        WriteOptions { retry: RetryPolicy::new(32, Duration::from_millis(5)), ..Default::default() };
                    let mut table = KeyedTable::open(&uri).await.expect("open").with_options(options);
                    match table.upsert(vec![rows(&ids, v)]).await {
                        Ok(out) => log.push((out.version, ids, v)),
                        // Bounded retries may run out under contention: a retryable refusal
                        // that must have written nothing (checked below).
                        Err(e) if e.is_retryable() => gave_up.push((ids, v)),
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
                (log, gave_up)
            })
        })
        .collect();
    let (mut landed, mut gave_up) = (Vec::new(), Vec::new());
    for t in tasks {
        let (l, g) = t.await.expect("writer");
        landed.extend(l);
        gave_up.extend(g);
    }
    eprintln!("8 writers x 5 upserts: {} landed, {} gave up after 32 attempts", landed.len(), gave_up.len());
    assert!(landed.len() >= 30, "most upserts must land");
    let versions: BTreeSet<u64> = landed.iter().map(|(v, _, _)| *v).collect();
    assert_eq!(versions.len(), landed.len(), "each upsert is its own commit");
    let mut expected: BTreeMap<i64, i64> = (0..5).map(|k| (k, 0)).collect();
    landed.sort();
    for (_, ids, v) in &landed {
        for id in ids {
            expected.insert(*id, *v);
        }
    }
    let scan = scan(&latest(&uri).await).await;
    assert!(duplicated(&scan).is_empty());
    let got: BTreeMap<i64, i64> = scan.iter().map(|(k, (_, v))| (*k, *v)).collect();
    assert_eq!(got, expected, "the last upsert (by commit version) of each key wins");
    let written: BTreeSet<i64> = got.values().copied().collect();
    for (_, v) in &gave_up {
        assert!(!written.contains(v), "an upsert reported as failed left its value {v}");
    }
}

/// Two creates of one path started together: both see it absent, one commits version 1, the other
/// fails. The loser must remove only what it wrote itself: the winner's table and rows survive.
#[test]
fn a_losing_concurrent_create_leaves_the_winners_table() {
    for round in 0..8 {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = temp_uri(&dir, "t");
        let start = Arc::new(std::sync::Barrier::new(2));
        let writers: Vec<_> = [1_i64, 2]
            .into_iter()
            .map(|writer| {
                let (uri, start) = (uri.clone(), start.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    start.wait();
                    let ids: Vec<i64> = (0..200).map(|i| i * 10 + writer).collect();
                    let created = rt.block_on(KeyedTable::create(&uri, vec![rows(&ids, writer)], &["id"]));
                    (writer, created.is_ok())
                })
            })
            .collect();
        let outcomes: Vec<(i64, bool)> = writers.into_iter().map(|w| w.join().expect("writer thread")).collect();
        let winners: Vec<i64> = outcomes.iter().filter(|(_, ok)| *ok).map(|(w, _)| *w).collect();
        assert_eq!(winners.len(), 1, "round {round}: exactly one create lands: {outcomes:?}");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let seen = rt.block_on(async {
            let table = KeyedTable::open(&uri).await.unwrap_or_else(|e| panic!("round {round}: winner's table: {e}"));
            scan(table.dataset()).await
        });
        assert_eq!(seen.len(), 200, "round {round}: every row of the winner survives");
        assert!(seen.values().all(|(n, v)| *n == 1 && *v == winners[0]), "round {round}: only the winner's rows");
    }
}
