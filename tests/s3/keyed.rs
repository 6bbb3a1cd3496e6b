//! Keyed fencing on S3: 8 OS processes race strict inserts over one shared pool of keys into one
//! keyed table in the bucket. Each key must have exactly one winner, every conflict must name keys
//! another writer really holds, and pylance, reading the same bucket, must see one row per key
//! with the winner's value.

use std::collections::{BTreeMap, BTreeSet};

use lance_actions_keyed::{Error, KeyedTable};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::Ctx;
use crate::support::{pylance, rows, run_children};

const PROCESSES: i64 = 8;
const INSERTS_PER_PROCESS: usize = 6;
/// Small enough that the processes collide often: 8 x 6 inserts of 2-4 keys each from 40 keys.
const POOL: std::ops::Range<i64> = 1_000..1_040;

pub async fn eight_processes_racing_strict_inserts_on_s3_leave_one_row_per_key(cx: &Ctx<'_>) {
    let uri = cx.uri("keyed");
    KeyedTable::create(&uri, vec![rows(&[(0, -1)])], &["id"]).await.expect("create a keyed table on S3");
    let dir = tempfile::tempdir().expect("tempdir for reports");
    let argv = (0..PROCESSES)
        .map(|w| vec![dir.path().join(format!("k{w}")).display().to_string(), uri.clone(), w.to_string()])
        .collect();
    let reports = run_children("keyed-inserter", argv);
    let mut winner: BTreeMap<i64, i64> = BTreeMap::new();
    let mut named_taken = Vec::new();
    let (mut landed, mut conflicts) = (0, 0);
    for (w, report) in reports.iter().enumerate() {
        for line in report.lines() {
            let (kind, keys) = line.split_once(' ').expect("a report line");
            let keys: Vec<i64> = keys.split(',').filter(|s| !s.is_empty()).map(|k| k.parse().expect("key")).collect();
            match kind {
                "landed" => {
                    landed += 1;
                    for k in keys {
                        let before = winner.insert(k, w as i64);
                        assert!(before.is_none(), "key {k} landed for writers {before:?} and {w}");
                    }
                }
                "conflict" => {
                    conflicts += 1;
                    named_taken.extend(keys.into_iter().map(|k| (k, w as i64)));
                }
                other => panic!("unknown report line kind {other}"),
            }
        }
    }
    assert!(
        landed > 0 && conflicts > 0,
        "the race never both landed and conflicted: {landed} landed, {conflicts} conflicts"
    );
    for (k, w) in &named_taken {
        let owner = winner.get(k).unwrap_or_else(|| panic!("writer {w} was refused key {k}, which nobody holds"));
        assert_ne!(owner, w, "writer {w} was refused its own key {k}");
    }
    // The audit: pylance reads the bucket through its own client.
    let audit = pylance(
        "import json, sys, lance\n\
         t = lance.dataset(sys.argv[1]).to_table(columns=['id', 'v']).to_pydict()\n\
         print(json.dumps({'ids': t['id'], 'v': t['v']}))",
        &[&uri],
    );
    let ids: Vec<i64> = serde_json::from_value(audit["ids"].clone()).expect("ids");
    let vs: Vec<i64> = serde_json::from_value(audit["v"].clone()).expect("values");
    let distinct: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "pylance sees duplicate keys on S3");
    let seen: BTreeMap<i64, i64> = ids.into_iter().zip(vs).filter(|(k, _)| *k != 0).collect();
    assert_eq!(seen, winner, "pylance's rows differ from the winners the writers reported");
    println!("    S3, 8 processes: {landed} inserts landed, {conflicts} refused with KeyConflict, {} keys", seen.len());
}

/// Child entry point: `<report> <uri> <writer>`; strict inserts of 2-4 keys drawn from the pool,
/// each row's value the writer's id. One line per insert: `landed K,K` or `conflict K,K` (the keys
/// the conflict named).
pub async fn child(args: &[String]) -> String {
    let (uri, w) = (&args[1], args[2].parse::<i64>().expect("writer id"));
    let mut rng = StdRng::seed_from_u64(0x5eed ^ w as u64);
    let mut mine: BTreeSet<i64> = BTreeSet::new();
    let mut out = String::new();
    for _ in 0..INSERTS_PER_PROCESS {
        // Never a key this writer already holds: a refusal must always name another writer's key.
        let pool: Vec<i64> = POOL.filter(|k| !mine.contains(k)).collect();
        let n = rng.random_range(2..=4);
        let mut keys: Vec<i64> = pool.choose_multiple(&mut rng, n).copied().collect();
        keys.sort_unstable();
        let batch: Vec<(i64, i64)> = keys.iter().map(|k| (*k, w)).collect();
        let list = |ks: &[i64]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
        match insert_until_decided(uri, &batch).await {
            Ok(_) => {
                out.push_str(&format!("landed {}\n", list(&keys)));
                mine.extend(&keys);
            }
            Err(Error::KeyConflict { keys: named, .. }) => {
                let named: Vec<i64> = named.first.iter().map(|k| k.parse().expect("an int key")).collect();
                assert!(!named.is_empty(), "a KeyConflict that names no key");
                out.push_str(&format!("conflict {}\n", list(&named)));
            }
            Err(e) => panic!("writer {w}: unexpected error on S3: {e}"),
        }
    }
    out
}

/// A strict insert, run again while it loses to contention (the one retryable error): its result is
/// then a landing or a key conflict.
async fn insert_until_decided(uri: &str, batch: &[(i64, i64)]) -> Result<(), Error> {
    let mut last = None;
    for _ in 0..5 {
        let mut table = KeyedTable::open(uri).await.expect("open the keyed table on S3");
        match table.insert(vec![rows(batch)]).await {
            Err(e) if e.is_retryable() => last = Some(e),
            other => return other.map(|_| ()),
        }
    }
    Err(last.expect("five contended attempts"))
}
