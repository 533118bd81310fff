//! The witness path (a linearization built from the log or the values, then
//! verified) against the brute-force checker and against the finder and
//! search alone: every verdict must agree, and a partition the witness path
//! decides must be linearizable. Histories: up to 8 ops over 1-2 keys, both
//! models, written values distinct (sometimes repeated or `null` written
//! back), cas and fenced tokens 0-3, never-returned ops (20 %, half of them
//! take effect) and unknown outcomes (10 %), outputs from a real
//! linearization, then 0-2 of them corrupted. Half the cases also pass the
//! log (the simulation's own order of the ops that took effect). Case
//! count: PROPTEST_CASES (default 256).

mod common;

use lincheck::gen::{generate, GenConfig, Rng};
use lincheck::{
    check_with_options, CheckOptions, DecidedBy, FencedModel, KvModel, Model, Op, OpKind, Validity,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A history, and the log position of each op that took effect.
fn history(model: Model, seed: u64, n: usize, repeats: bool) -> (Vec<Op>, Vec<Option<u64>>) {
    let mut rng = Rng::new(seed);
    let keys = 1 + rng.below(2);
    let mut next = 0u64;
    let mut written: Vec<Value> = Vec::new();
    let mut value = |rng: &mut Rng| {
        if repeats && rng.chance(0.25) && !written.is_empty() {
            if rng.chance(0.3) {
                return Value::Null;
            }
            return written[rng.below(written.len() as u64) as usize].clone();
        }
        next += 1;
        written.push(json!(next));
        json!(next)
    };
    let mut ops = Vec::with_capacity(n);
    let mut lins = Vec::with_capacity(n);
    for _ in 0..n {
        let call = rng.below(20) * 2;
        let dur = rng.below(12) * 2;
        let pending = rng.chance(0.2);
        let kind = match (model, rng.below(3)) {
            (_, 0) => OpKind::Read,
            (Model::Kv, 1) => OpKind::Cas,
            _ => OpKind::Write,
        };
        let arg = match (model, &kind) {
            (_, OpKind::Read) => Value::Null,
            (Model::Kv, OpKind::Write) => value(&mut rng),
            (Model::Kv, _) => json!([Value::Null, value(&mut rng)]),
            (Model::Fenced, _) => json!([value(&mut rng), rng.below(4)]),
        };
        let lin = (!pending || rng.chance(0.5)).then(|| call + rng.below(dur + 1));
        lins.push(lin);
        ops.push(Op {
            client: rng.below(4),
            call_ns: call,
            return_ns: (!pending).then_some(call + dur),
            key: format!("k{}", rng.below(keys)),
            op: kind,
            arg,
            out: Value::Null,
            unknown: pending || rng.chance(0.1),
        });
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| lins[i].is_some()).collect();
    order.sort_by_key(|&i| (lins[i], i));
    let mut log = vec![None; n];
    let mut state = std::collections::HashMap::<String, (Value, Option<u64>)>::new();
    for (seq, &i) in order.iter().enumerate() {
        log[i] = Some(seq as u64);
        let guess = if rng.chance(0.6) {
            None
        } else {
            Some(json!(rng.below(next + 2)))
        };
        let op = &mut ops[i];
        let st = state.entry(op.key.clone()).or_insert((Value::Null, None));
        if common::is_kv_cas(model, op) {
            op.arg[0] = guess.unwrap_or_else(|| st.0.clone());
        }
        common::place(model, st, op);
    }
    for _ in 0..rng.below(3) {
        let i = rng.below(n.max(1) as u64) as usize;
        if let Some(op) = ops.get_mut(i) {
            if op.op == OpKind::Read {
                op.out = json!(rng.below(next + 2));
            } else if op.out.is_boolean() {
                op.out = json!(rng.chance(0.5));
            }
        }
    }
    (ops, log)
}

fn run(model: Model, ops: &[Op], opts: &CheckOptions) -> lincheck::CheckResult {
    match model {
        Model::Kv => check_with_options(ops, &KvModel, opts),
        Model::Fenced => check_with_options(ops, &FencedModel, opts),
    }
    .expect("generated input is well-formed")
}

fn agree(
    model: Model,
    seed: u64,
    n: usize,
    repeats: bool,
    with_log: bool,
) -> Result<(), TestCaseError> {
    let (ops, log) = history(model, seed, n, repeats);
    let want = if common::brute_force(model, &ops) {
        Validity::Linearizable
    } else {
        Validity::NotLinearizable
    };
    let shown = || serde_json::to_string(&ops).unwrap_or_default();
    let fast = run(
        model,
        &ops,
        &CheckOptions {
            log: with_log.then_some(&log[..]),
            ..CheckOptions::default()
        },
    );
    let alone = run(
        model,
        &ops,
        &CheckOptions {
            witnesses: false,
            ..CheckOptions::default()
        },
    );
    prop_assert_eq!(fast.valid, want, "witness path, history: {}", shown());
    prop_assert_eq!(alone.valid, want, "search alone, history: {}", shown());
    for p in &fast.partitions {
        if matches!(p.decided_by, DecidedBy::Witness | DecidedBy::Log) {
            prop_assert_eq!(p.valid, Validity::Linearizable, "history: {}", shown());
        }
    }
    if want == Validity::NotLinearizable {
        prop_assert!(fast.counterexample.is_some());
    }
    Ok(())
}

proptest! {
    #[test]
    fn kv_witness_path_matches_brute_force(seed in any::<u64>(), n in 0usize..=8, repeats in any::<bool>(), log in any::<bool>()) {
        agree(Model::Kv, seed, n, repeats, log)?;
    }

    #[test]
    fn fenced_witness_path_matches_brute_force(seed in any::<u64>(), n in 0usize..=8, repeats in any::<bool>(), log in any::<bool>()) {
        agree(Model::Fenced, seed, n, repeats, log)?;
    }
}

/// Not a property: the small histories above reach the witness path with
/// and without the log, so the agreement is not vacuous.
#[test]
fn small_histories_reach_the_witness_path() {
    for model in [Model::Kv, Model::Fenced] {
        let (mut by_values, mut by_log) = (0, 0);
        for seed in 0..400 {
            let (ops, log) = history(model, seed, 7, false);
            let decided = |r: &lincheck::CheckResult, path: DecidedBy| {
                r.partitions.iter().filter(|p| p.decided_by == path).count()
            };
            by_values += decided(
                &run(model, &ops, &CheckOptions::default()),
                DecidedBy::Witness,
            );
            let opts = CheckOptions {
                log: Some(&log),
                ..CheckOptions::default()
            };
            by_log += decided(&run(model, &ops, &opts), DecidedBy::Log);
        }
        assert!(
            by_values > 100 && by_log > 100,
            "{model:?}: {by_values} partitions ordered by values, {by_log} by the log"
        );
    }
}

/// Generated histories of a few thousand ops, every shape of the bench
/// (and unknown outcomes): the witness path and the search alone give the
/// same verdict, and the witness path decides the valid ones itself.
#[test]
fn generated_histories_agree_with_the_search_alone() {
    let shapes = [
        (1000, 16, 0.0),
        (10, 16, 0.0),
        (1, 16, 0.0),
        (1, 64, 0.0),
        (10, 16, 0.01),
        (1, 16, 0.01),
        (1, 16, 0.05),
    ];
    for model in [Model::Kv, Model::Fenced] {
        for &(keys, clients, rate) in &shapes {
            for inject in [false, true] {
                for seed in 1..3 {
                    let mut cfg = GenConfig::new(model, 3000, clients, keys, seed);
                    cfg.inject_violation = inject;
                    cfg.timeout_rate = rate;
                    cfg.unknown_rate = rate;
                    let g = generate(&cfg);
                    let what = format!("{model:?} keys={keys} clients={clients} rate={rate} inject={inject} seed={seed}");
                    let fast = run(model, &g.ops, &CheckOptions::default());
                    let alone = run(
                        model,
                        &g.ops,
                        &CheckOptions {
                            witnesses: false,
                            ..CheckOptions::default()
                        },
                    );
                    assert_eq!(fast.valid, alone.valid, "{what}");
                    let want = if g.injected.is_some() {
                        Validity::NotLinearizable
                    } else {
                        Validity::Linearizable
                    };
                    assert_eq!(fast.valid, want, "{what}");
                    if want == Validity::Linearizable {
                        let searched: Vec<_> = fast
                            .partitions
                            .iter()
                            .filter(|p| p.decided_by != DecidedBy::Witness)
                            .map(|p| (p.key.clone(), p.fallback.clone()))
                            .collect();
                        assert!(searched.is_empty(), "{what}: fell back: {searched:?}");
                    }
                }
            }
        }
    }
}
