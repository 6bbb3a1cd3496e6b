//! Structure-aware fuzzing of the fail-closed decoder, on stable, inside the suite.
//!
//! The cargo-fuzz target (`fuzz/`) needs a nightly toolchain; this runs the same checks over
//! mutations of real encoded transactions (every Lance operation kind, lifted and encoded), at
//! least 100,000 inputs per run (`LA_FUZZ_INPUTS`), from a seed (`LA_FUZZ_SEED`, default 9) so a
//! failure replays. Mutations work on the bytes (bit flips, cuts, splices, inserted bytes, an
//! appended unknown field) and on the message (format version, action count, context, shells,
//! actions dropped, duplicated or swapped between transactions).
//!
//! Checks, for every input: decoding never panics; a decoded transaction re-encodes and decodes
//! to itself; lowering it answers an operation or a typed error, and lifting that operation does
//! not panic; an input carrying a field this build does not know never decodes. Any input that
//! fails is written to `tests/roundtrip/fuzz_regressions/` (kept in the repository) and every
//! file there is replayed first on every run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::Instant;

use lance_actions::codec::{decode, encode, proto};
use lance_actions::{ActionTxn, lift, lower};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::strategies::arb_serializable_operation;

const DEFAULT_INPUTS: usize = 100_000;
const DEFAULT_SEED: u64 = 9;
/// Seed encodings larger than this (a 32 KiB bloom filter) are left out to keep a run fast.
const MAX_SEED_BYTES: usize = 4096;

fn regressions_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/roundtrip/fuzz_regressions")
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Real encoded transactions: Lance operations of every kind, lifted and encoded.
fn seeds(seed: u64) -> Vec<Vec<u8>> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = arb_serializable_operation();
    let mut out = Vec::new();
    while out.len() < 64 {
        let Ok(tree) = strategy.new_tree(&mut runner) else { continue };
        let bytes = encode(&lift(&tree.current()));
        if bytes.len() <= MAX_SEED_BYTES {
            out.push(bytes);
        }
    }
    out
}

/// What one input was made to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Anything at all: must not panic and must round-trip if it decodes.
    Any,
    /// A valid encoding with a field this build does not know appended: must not decode.
    UnknownField,
}

fn mutate_bytes(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    if input.is_empty() {
        input.push(rng.random());
        return;
    }
    let at = rng.random_range(0..input.len());
    match rng.random_range(0..7) {
        0 => input[at] ^= 1 << rng.random_range(0..8),
        1 => input[at] = rng.random(),
        2 => input.insert(at, rng.random()),
        3 => {
            let end = (at + rng.random_range(1..16)).min(input.len());
            input.drain(at..end);
        }
        4 => input.truncate(at),
        5 => {
            // Splice a piece of another real encoding in.
            let other = &seeds[rng.random_range(0..seeds.len())];
            let from = rng.random_range(0..other.len());
            let to = (from + rng.random_range(1..64)).min(other.len());
            input.splice(at..at, other[from..to].iter().copied());
        }
        _ => {
            let end = (at + rng.random_range(1..16)).min(input.len());
            let piece: Vec<u8> = input[at..end].to_vec();
            input.splice(end..end, piece);
        }
    }
}

fn mutate_message(rng: &mut StdRng, list: &mut proto::ActionList, seeds: &[Vec<u8>]) {
    let other = proto::ActionList::decode(seeds[rng.random_range(0..seeds.len())].as_slice()).unwrap_or_default();
    match rng.random_range(0..9) {
        0 => list.format_version = [0, 1, 2, rng.random()][rng.random_range(0..4)],
        1 => {
            list.action_count = [None, Some(0), list.action_count.map(|c| c.wrapping_add(1)), Some(rng.random())]
                [rng.random_range(0..4)]
        }
        2 => list.context = None,
        3 => {
            if let Some(cx) = list.context.as_mut() {
                cx.shell = rng.random_range(-2..24);
            }
        }
        4 if !list.actions.is_empty() => {
            let i = rng.random_range(0..list.actions.len());
            list.actions.remove(i);
        }
        5 if !list.actions.is_empty() => {
            let i = rng.random_range(0..list.actions.len());
            list.actions.push(list.actions[i].clone());
        }
        6 if !other.actions.is_empty() => {
            let a = other.actions[rng.random_range(0..other.actions.len())].clone();
            match list.actions.is_empty() {
                true => list.actions.push(a),
                false => {
                    let i = rng.random_range(0..list.actions.len());
                    list.actions[i] = a;
                }
            }
        }
        7 => list.context = other.context,
        _ => list.actions.reverse(),
    }
}

/// Append field 99 (a varint): a field no version of the format has.
fn with_unknown_field(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.extend_from_slice(&[0x98, 0x06]);
    bytes.push(rng.random_range(0..0x80));
    bytes
}

fn make_input(rng: &mut StdRng, seeds: &[Vec<u8>]) -> (Vec<u8>, Shape) {
    let seed = &seeds[rng.random_range(0..seeds.len())];
    if rng.random_ratio(1, 10) {
        return (with_unknown_field(rng, seed.clone()), Shape::UnknownField);
    }
    let mut input = if rng.random_bool(0.5) {
        let mut list = proto::ActionList::decode(seed.as_slice()).unwrap_or_default();
        for _ in 0..rng.random_range(1..3) {
            mutate_message(rng, &mut list, seeds);
        }
        list.encode_to_vec()
    } else {
        seed.clone()
    };
    for _ in 0..rng.random_range(0..4) {
        mutate_bytes(rng, &mut input, seeds);
    }
    (input, Shape::Any)
}

/// Run the checks on one input; `Err` describes the failure.
fn check(input: &[u8], shape: Shape) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| check_inner(input, shape)));
    match outcome {
        Ok(result) => result,
        Err(panic) => Err(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

fn check_inner(input: &[u8], shape: Shape) -> Result<(), String> {
    let Ok(txn) = decode(input) else { return Ok(()) };
    if shape == Shape::UnknownField {
        return Err("an encoding with an unknown field decoded".into());
    }
    let again: ActionTxn = decode(&encode(&txn)).map_err(|e| format!("re-encoded transaction does not decode: {e}"))?;
    // A corrupt bloom filter can carry a NaN probability, which is unequal to itself.
    #[allow(clippy::eq_op)]
    let reflexive = txn == txn;
    if reflexive && again != txn {
        return Err("decode -> encode -> decode changed the transaction".into());
    }
    // (Bytes may differ: maps are encoded in hash order. Their length may not.)
    if encode(&again).len() != encode(&txn).len() {
        return Err("the re-encoding changed length".into());
    }
    if let Ok(op) = lower(&txn) {
        let _ = lift(&op);
    }
    Ok(())
}

fn keep(input: &[u8]) -> PathBuf {
    let dir = regressions_dir();
    let _ = std::fs::create_dir_all(&dir);
    let name = format!("{:016x}.bin", xxhash_rust::xxh64::xxh64(input, 0));
    let path = dir.join(name);
    let _ = std::fs::write(&path, input);
    path
}

/// Inputs that failed once, replayed on every run (file name `*.unknown.bin`: must not decode).
fn regressions() -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(regressions_dir()) else { return Vec::new() };
    let mut out: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    out.sort();
    out
}

#[test]
fn the_decoder_survives_mutations_of_real_encoded_transactions() {
    let inputs = env_or("LA_FUZZ_INPUTS", DEFAULT_INPUTS);
    let seed = env_or("LA_FUZZ_SEED", DEFAULT_SEED);
    let started = Instant::now();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    for (path, bytes) in regressions() {
        let shape = if path.to_string_lossy().ends_with(".unknown.bin") { Shape::UnknownField } else { Shape::Any };
        if let Err(why) = check(&bytes, shape) {
            failures.push(format!("regression {}: {why}", path.display()));
        }
    }
    let seeds = seeds(seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut decoded, mut unknown, mut run) = (0usize, 0usize, 0usize);
    for i in 0..inputs {
        run += 1;
        let (input, shape) = make_input(&mut rng, &seeds);
        unknown += usize::from(shape == Shape::UnknownField);
        decoded += usize::from(decode(&input).is_ok());
        if let Err(why) = check(&input, shape) {
            let kept = keep(&input);
            failures.push(format!("input {i} (seed {seed}): {why}; kept as {}", kept.display()));
            if failures.len() >= 10 {
                break;
            }
        }
    }
    std::panic::set_hook(quiet);
    println!(
        "fuzz: {run} inputs from {} seeds (seed {seed}) in {:.1?}: {decoded} decoded, {unknown} with an unknown field",
        seeds.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "decoder failures:\n{}", failures.join("\n"));
    assert!(decoded > inputs / 100, "mutations too destructive to exercise the decoder: {decoded} decoded");
}

#[test]
fn an_unknown_field_anywhere_in_the_list_is_refused() {
    let seeds = seeds(DEFAULT_SEED);
    let mut rng = StdRng::seed_from_u64(1);
    for seed in &seeds {
        assert!(decode(seed).is_ok(), "a real encoding decodes");
        assert!(decode(&with_unknown_field(&mut rng, seed.clone())).is_err(), "an unknown field is refused");
    }
}
