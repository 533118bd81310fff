//! The violation finder (the fast path that proves a violation without the
//! search) against the brute-force checker, on histories shaped to reach it:
//! written values distinct (or distinct but for a few repeats, or with
//! `null` written back), reads of stale, future and never-written values,
//! never-returned and unknown-result ops, cas and fenced writes.
//!
//! Three properties per model and case: `check` agrees with brute force; a
//! violation the finder proves is real (soundness, independent of the
//! search); and for plain read/write registers with distinct values the
//! finder finds every violation (Gibbons & Korach's completeness, which
//! confirms the conditions are the right ones). Case count: PROPTEST_CASES
//! (default 256), e.g.
//! `PROPTEST_CASES=100000 cargo test --release -p fencecheck-lincheck --test proptest_fastpath`.

mod common;

use lincheck::gen::Rng;
use lincheck::{check, violation_proved, Model, Op, OpKind, Validity};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Values {
    /// Every written value is fresh.
    Distinct,
    /// Mostly fresh; some writes repeat an earlier value or write `null`
    /// (the initial value), so the finder must leave those values out.
    Repeats,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ops {
    /// Reads and writes only (cas too for kv / fenced writes for fenced).
    All,
    /// kv reads and writes only: the class where the finder is complete.
    ReadWrite,
}

struct Gen {
    rng: Rng,
    values: Values,
    next: u64,
    written: Vec<Value>,
}

impl Gen {
    /// A value for a write: fresh, or (with repeats) an earlier one or null.
    fn write_value(&mut self) -> Value {
        if self.values == Values::Repeats && self.rng.chance(0.25) {
            if self.written.is_empty() || self.rng.chance(0.3) {
                return Value::Null;
            }
            let k = self.rng.below(self.written.len() as u64) as usize;
            return self.written[k].clone();
        }
        self.next += 1;
        let v = json!(self.next);
        self.written.push(v.clone());
        v
    }

    /// Some value the history mentions (or null, or one nobody writes).
    fn any_value(&mut self) -> Value {
        match self.rng.below(8) {
            0 => Value::Null,
            1 => json!(999),
            _ if self.written.is_empty() => Value::Null,
            _ => {
                let k = self.rng.below(self.written.len() as u64) as usize;
                self.written[k].clone()
            }
        }
    }
}

/// A history of `n` ops whose outputs come from a real linearization
/// (effects at random instants inside the intervals; never-returned ops take
/// effect half the time), then usually corrupted: a read returns another
/// value (often an overwritten one), a cas or fenced write flips its
/// outcome, or (rarely) every output is random.
fn history(model: Model, ops_kind: Ops, values: Values, seed: u64, n: usize) -> Vec<Op> {
    let mut g = Gen {
        rng: Rng::new(seed),
        values,
        next: 0,
        written: Vec::new(),
    };
    let keys = 1 + g.rng.below(2);
    let mut ops = Vec::with_capacity(n);
    let mut lins = Vec::with_capacity(n);
    for _ in 0..n {
        let call = g.rng.below(20);
        let dur = g.rng.below(12);
        let pending = g.rng.chance(0.2);
        let unknown = pending || g.rng.chance(0.1);
        let kind = match (model, ops_kind, g.rng.below(3)) {
            (_, _, 0) => OpKind::Read,
            (Model::Kv, Ops::All, 1) => OpKind::Cas,
            _ => OpKind::Write,
        };
        let arg = match (model, &kind) {
            (_, OpKind::Read) => Value::Null,
            (Model::Kv, OpKind::Write) => g.write_value(),
            // The expected value is chosen during the simulation.
            (Model::Kv, _) => json!([Value::Null, g.write_value()]),
            (Model::Fenced, _) => json!([g.write_value(), g.rng.below(4)]),
        };
        let lin = if pending && g.rng.chance(0.5) {
            None
        } else {
            Some(call * 2 + g.rng.below(dur * 2 + 1))
        };
        lins.push(lin);
        ops.push(Op {
            client: g.rng.below(4),
            call_ns: call * 2,
            return_ns: (!pending).then_some(call * 2 + dur * 2),
            key: format!("k{}", g.rng.below(keys)),
            op: kind,
            arg,
            out: Value::Null,
            unknown,
        });
    }
    simulate(model, &mut g, &mut ops, &lins);
    corrupt(&mut g, &mut ops);
    ops
}

/// Fills in outputs (and cas expected values) from the order of `lins`.
fn simulate(model: Model, g: &mut Gen, ops: &mut [Op], lins: &[Option<u64>]) {
    let mut order: Vec<usize> = (0..ops.len()).filter(|&i| lins[i].is_some()).collect();
    order.sort_by_key(|&i| lins[i]);
    let mut state = std::collections::HashMap::<String, (Value, Option<u64>)>::new();
    for i in order {
        let guess = g.any_value();
        let fresh_guess = g.rng.chance(0.6);
        let op = &mut ops[i];
        let st = state.entry(op.key.clone()).or_insert((Value::Null, None));
        if common::is_kv_cas(model, op) {
            op.arg[0] = if fresh_guess { st.0.clone() } else { guess };
        }
        common::place(model, st, op);
    }
    for (i, op) in ops.iter_mut().enumerate() {
        if lins[i].is_none() && op.op == OpKind::Cas {
            op.arg[0] = g.any_value();
        }
    }
}

fn corrupt(g: &mut Gen, ops: &mut [Op]) {
    let n = ops.len();
    if n == 0 {
        return;
    }
    if g.rng.chance(0.1) {
        for op in ops.iter_mut() {
            if op.op == OpKind::Read {
                op.out = g.any_value();
            } else if op.out.is_boolean() {
                op.out = json!(g.rng.chance(0.5));
            }
        }
        return;
    }
    let corruptions = if g.rng.chance(0.25) {
        0
    } else {
        1 + g.rng.below(2)
    };
    // Only reads and ops with a boolean outcome have an output to corrupt.
    let targets: Vec<usize> = (0..n)
        .filter(|&i| ops[i].op == OpKind::Read || ops[i].out.is_boolean())
        .collect();
    if targets.is_empty() {
        return;
    }
    for _ in 0..corruptions {
        let i = targets[g.rng.below(targets.len() as u64) as usize];
        if ops[i].op == OpKind::Read {
            ops[i].out = g.any_value();
        } else {
            ops[i].out = json!(g.rng.chance(0.5));
        }
    }
}

fn brute(model: Model, ops: &[Op]) -> Validity {
    if common::brute_force(model, ops) {
        Validity::Linearizable
    } else {
        Validity::NotLinearizable
    }
}

fn agree(
    model: Model,
    ops_kind: Ops,
    values: Values,
    seed: u64,
    n: usize,
) -> Result<(), TestCaseError> {
    let ops = history(model, ops_kind, values, seed, n);
    let want = brute(model, &ops);
    let shown = || serde_json::to_string(&ops).unwrap_or_default();
    let got = check(&ops, model, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(got.valid, want, "check, history: {}", shown());
    if want == Validity::NotLinearizable {
        prop_assert!(got.counterexample.is_some());
    }
    let proved = violation_proved(&ops, model).map_err(|e| TestCaseError::fail(e.to_string()))?;
    if proved {
        prop_assert_eq!(
            want,
            Validity::NotLinearizable,
            "finder, history: {}",
            shown()
        );
    }
    if ops_kind == Ops::ReadWrite && values == Values::Distinct {
        prop_assert_eq!(
            proved,
            want == Validity::NotLinearizable,
            "finder incomplete for distinct-value read/write, history: {}",
            shown()
        );
    }
    Ok(())
}

fn values_of(b: bool) -> Values {
    if b {
        Values::Repeats
    } else {
        Values::Distinct
    }
}

proptest! {
    #[test]
    fn kv_fast_path_matches_brute_force(seed in any::<u64>(), n in 0usize..=8, repeats in any::<bool>(), rw in any::<bool>()) {
        let ops_kind = if rw { Ops::ReadWrite } else { Ops::All };
        agree(Model::Kv, ops_kind, values_of(repeats), seed, n)?;
    }

    #[test]
    fn fenced_fast_path_matches_brute_force(seed in any::<u64>(), n in 0usize..=8, repeats in any::<bool>()) {
        agree(Model::Fenced, Ops::All, values_of(repeats), seed, n)?;
    }
}

/// Not a property: the histories above do reach the finder, with both
/// verdicts, and it proves a good share of the violations.
#[test]
fn fast_path_histories_reach_the_finder() {
    for (model, ops_kind) in [
        (Model::Kv, Ops::All),
        (Model::Kv, Ops::ReadWrite),
        (Model::Fenced, Ops::All),
    ] {
        for values in [Values::Distinct, Values::Repeats] {
            let (mut valid, mut invalid, mut proved) = (0, 0, 0);
            for seed in 0..600 {
                let ops = history(model, ops_kind, values, seed, 7);
                if common::brute_force(model, &ops) {
                    valid += 1;
                } else {
                    invalid += 1;
                }
                if violation_proved(&ops, model).expect("well-formed") {
                    proved += 1;
                }
            }
            eprintln!("{model:?} {ops_kind:?} {values:?}: {valid} valid, {invalid} invalid, {proved} proved");
            assert!(
                valid > 100 && invalid > 100 && proved > invalid / 2,
                "{model:?} {ops_kind:?} {values:?}: {valid} valid, {invalid} invalid, {proved} proved"
            );
        }
    }
}
