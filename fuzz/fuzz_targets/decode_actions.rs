//! Fuzz the fail-closed action decoder: any input decodes to an error or to a transaction that
//! survives re-encoding unchanged, and nothing on the way panics.

#![no_main]

use lance_actions::codec::{decode, encode};
use lance_actions::{ActionTxn, AnyAction, lift, lower};
use libfuzzer_sys::fuzz_target;

/// Schema-level metadata, which `PartialEq for Schema` does not compare.
fn schema_metadata(txn: &ActionTxn) -> Vec<Vec<(String, String)>> {
    txn.actions
        .iter()
        .filter_map(|a| match a {
            AnyAction::ChangeSchema(c) => Some(&c.schema),
            AnyAction::ResetTable(r) => Some(&r.schema),
            _ => None,
        })
        .map(|s| {
            let mut entries: Vec<_> = s.metadata.clone().into_iter().collect();
            entries.sort();
            entries
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(txn) = decode(data) else {
        return;
    };
    let again =
        decode(&encode(&txn)).expect("a decoded transaction re-encodes into a decodable one");
    // A corrupt bloom filter can carry a NaN probability, which is unequal to itself.
    #[allow(clippy::eq_op)]
    let reflexive = txn == txn;
    if reflexive {
        assert_eq!(
            again, txn,
            "decode -> encode -> decode changed the transaction"
        );
    }
    assert_eq!(
        schema_metadata(&again),
        schema_metadata(&txn),
        "schema metadata changed"
    );
    // Lowering answers an operation or a typed error, never a panic; lifting its answer is total.
    if let Ok(op) = lower(&txn) {
        let _ = lift(&op);
    }
});
