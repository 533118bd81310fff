//! The checker agrees with a brute-force checker on small random histories.
//! Case count: PROPTEST_CASES (default 256), e.g.
//! `PROPTEST_CASES=10000 cargo test --release -p fencecheck-lincheck --test proptest_bruteforce`.

mod common;

use lincheck::gen::Rng;
use lincheck::{check, Model, Op, OpKind, Validity};
use proptest::prelude::*;
use serde_json::{json, Value};

thread_local! {
    static UNIQUE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Values come from a tiny set (lots of coincidences) or, in some histories,
/// are mostly unique (exercises the dead-value cut and the symmetry between
/// never-returned writes of values nobody else mentions).
fn small_value(rng: &mut Rng) -> Value {
    if UNIQUE.with(|u| u.get()) && rng.chance(0.8) {
        return json!(100 + rng.below(1_000_000));
    }
    match rng.below(4) {
        0 => Value::Null,
        1 => json!(1),
        2 => json!(2),
        _ => json!("x"),
    }
}

/// Random history of `n` ops. Usually (70 %) the outputs come from a real
/// linearization (then possibly one is corrupted), otherwise they are random,
/// so both verdicts are well represented.
fn history(model: Model, seed: u64, n: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    UNIQUE.with(|u| u.set(rng.chance(0.5)));
    let keys = 1 + rng.below(2) as usize;
    let simulate = rng.chance(0.7);
    let mut ops = Vec::with_capacity(n);
    let mut lins = Vec::with_capacity(n);
    for _ in 0..n {
        let call = rng.below(20);
        let dur = rng.below(12);
        let pending = rng.chance(0.2);
        let unknown = pending || rng.chance(0.1);
        let kind = match (model, rng.below(3)) {
            (_, 0) => OpKind::Read,
            (Model::Kv, 1) => OpKind::Cas,
            _ => OpKind::Write,
        };
        let arg = match (model, &kind) {
            (_, OpKind::Read) => Value::Null,
            (Model::Kv, OpKind::Write) => small_value(&mut rng),
            (Model::Kv, _) => json!([small_value(&mut rng), small_value(&mut rng)]),
            (Model::Fenced, _) => json!([small_value(&mut rng), rng.below(4)]),
        };
        let out = match kind {
            OpKind::Read => small_value(&mut rng),
            OpKind::Write if model == Model::Kv => Value::Null,
            _ => json!(rng.chance(0.5)),
        };
        let lin = if pending && rng.chance(0.5) {
            None
        } else {
            Some(call * 2 + rng.below(dur * 2 + 1))
        };
        lins.push(lin);
        ops.push(Op {
            client: rng.below(4),
            call_ns: call * 2,
            return_ns: (!pending).then_some(call * 2 + dur * 2),
            key: format!("k{}", rng.below(keys as u64)),
            op: kind,
            arg,
            out,
            unknown,
        });
    }
    if simulate {
        let mut order: Vec<usize> = (0..n).filter(|&i| lins[i].is_some()).collect();
        order.sort_by_key(|&i| lins[i]);
        let mut value = std::collections::HashMap::<String, (Value, Option<u64>)>::new();
        for i in order {
            let op = &mut ops[i];
            let st = value.entry(op.key.clone()).or_insert((Value::Null, None));
            common::place(model, st, op);
        }
        if n > 0 && rng.chance(0.5) {
            let i = rng.below(n as u64) as usize;
            if ops[i].op == OpKind::Read {
                ops[i].out = small_value(&mut rng);
            } else if ops[i].out.is_boolean() {
                ops[i].out = json!(rng.chance(0.5));
            }
        }
    }
    ops
}

fn agree(model: Model, seed: u64, n: usize) -> Result<(), TestCaseError> {
    let ops = history(model, seed, n);
    let expected = common::brute_force(model, &ops);
    let got = check(&ops, model, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let want = if expected {
        Validity::Linearizable
    } else {
        Validity::NotLinearizable
    };
    prop_assert_eq!(
        got.valid,
        want,
        "history: {}",
        serde_json::to_string(&ops).unwrap_or_default()
    );
    if !expected {
        prop_assert!(got.counterexample.is_some());
    }
    Ok(())
}

proptest! {
    #[test]
    fn kv_matches_brute_force(seed in any::<u64>(), n in 0usize..=8) {
        agree(Model::Kv, seed, n)?;
    }

    #[test]
    fn fenced_matches_brute_force(seed in any::<u64>(), n in 0usize..=8) {
        agree(Model::Fenced, seed, n)?;
    }
}

/// Not a property: guards against the generator drifting to one verdict.
#[test]
fn random_histories_have_both_verdicts() {
    for model in [Model::Kv, Model::Fenced] {
        let (mut yes, mut no) = (0, 0);
        for seed in 0..400 {
            if common::brute_force(model, &history(model, seed, 6)) {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(
            yes > 60 && no > 60,
            "{model:?}: {yes} linearizable, {no} not"
        );
    }
}
