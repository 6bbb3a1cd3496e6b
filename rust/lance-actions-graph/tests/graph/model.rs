//! Property test: random histories on two branches from a random base. The merged graph equals a
//! model three-way merge of the three states, or the merge reports exactly the conflicts the model
//! predicts (and writes nothing).

use std::collections::BTreeMap;

use lance_actions_graph::{ConflictKind, Graph, MergeOptions, Outcome, WriteOp};
use proptest::prelude::*;

use crate::common::{graph, names, person};

const IDS: usize = 6;

#[derive(Debug, Clone, Copy)]
enum Act {
    Keep,
    Set(u8),
    Delete,
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![3 => Just(Act::Keep), 2 => (0u8..3).prop_map(Act::Set), 1 => Just(Act::Delete)]
}

type State = BTreeMap<String, String>;

fn value(v: u8) -> String {
    ["a", "b", "c"][v as usize].to_string()
}

fn after(state: &State, acts: &[Act]) -> State {
    let mut out = state.clone();
    for (i, a) in acts.iter().enumerate() {
        let id = format!("p{i}");
        match a {
            Act::Keep => {}
            Act::Set(v) => {
                out.insert(id, value(*v));
            }
            Act::Delete => {
                out.remove(&id);
            }
        }
    }
    out
}

/// The model: per id, OmniGraph's truth table.
fn model(b: &State, s: &State, t: &State) -> Result<State, Vec<(String, ConflictKind)>> {
    let mut out = State::new();
    let mut conflicts = Vec::new();
    for i in 0..IDS {
        let id = format!("p{i}");
        let (bv, sv, tv) = (b.get(&id), s.get(&id), t.get(&id));
        let keep = if sv == bv || sv == tv {
            tv
        } else if tv == bv {
            sv
        } else {
            let kind = match (bv, sv, tv) {
                (None, _, _) => ConflictKind::DivergentInsert,
                (_, None, _) | (_, _, None) => ConflictKind::DeleteVsUpdate,
                _ => ConflictKind::DivergentUpdate,
            };
            conflicts.push((id.clone(), kind));
            None
        };
        if let Some(v) = keep {
            out.insert(id, v.clone());
        }
    }
    if conflicts.is_empty() { Ok(out) } else { Err(conflicts) }
}

async fn write_acts(g: &Graph, branch: &str, state: &State, acts: &[Act]) {
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for (i, a) in acts.iter().enumerate() {
        let id = format!("p{i}");
        match a {
            Act::Keep => {}
            Act::Set(v) => upserts.push(person(g, &id, &value(*v))),
            Act::Delete if state.contains_key(&id) => deletes.push(id),
            Act::Delete => {}
        }
    }
    let mut ops = Vec::new();
    if !upserts.is_empty() {
        ops.push(WriteOp::Upsert { type_name: "Person".into(), rows: upserts });
    }
    if !deletes.is_empty() {
        ops.push(WriteOp::Delete { type_name: "Person".into(), ids: deletes });
    }
    if !ops.is_empty() {
        g.write(branch, ops).await.expect("write");
    }
}

async fn run(base: Vec<Option<u8>>, s_acts: Vec<Act>, t_acts: Vec<Act>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph(&dir).await;
    let rows: Vec<_> =
        base.iter().enumerate().filter_map(|(i, v)| v.map(|v| person(&g, &format!("p{i}"), &value(v)))).collect();
    if !rows.is_empty() {
        g.insert("main", "Person", rows).await.expect("base");
    }
    let b = names(&g, "main").await;
    g.branch("feature", "main").await.expect("branch");
    write_acts(&g, "feature", &b, &s_acts).await;
    write_acts(&g, "main", &b, &t_acts).await;
    let (s, t) = (after(&b, &s_acts), after(&b, &t_acts));
    assert_eq!(names(&g, "feature").await, s);
    assert_eq!(names(&g, "main").await, t);
    let r = g.merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    match model(&b, &s, &t) {
        Ok(expected) => {
            assert_ne!(r.outcome, Outcome::Conflicted, "{:?}", r.conflicts);
            assert_eq!(names(&g, "main").await, expected, "b={b:?} s={s:?} t={t:?}");
        }
        Err(expected) => {
            assert_eq!(r.outcome, Outcome::Conflicted);
            let got: Vec<(String, ConflictKind)> = r.conflicts.iter().map(|c| (c.id.clone(), c.kind)).collect();
            assert_eq!(got, expected, "b={b:?} s={s:?} t={t:?}");
            assert_eq!(names(&g, "main").await, t, "a conflicted merge wrote");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn merged_graph_equals_the_model_three_way_merge(
        base in proptest::collection::vec(proptest::option::of(0u8..3), IDS),
        s in proptest::collection::vec(act(), IDS),
        t in proptest::collection::vec(act(), IDS),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(run(base, s, t));
    }
}
