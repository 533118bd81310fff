//! Counterexamples: the longest linearizable prefix the search found and
//! the ops that cannot come next.

use crate::check::{Counterexample, OpView, Part};
use crate::model::SeqModel;
use crate::op::Op;
use crate::search::Prepared;
use rustc_hash::FxHashMap;
use serde_json::Value;

pub(crate) fn view(ops: &[Op], index: usize, state_after: Option<Value>) -> OpView {
    let op = &ops[index];
    OpView {
        index,
        client: op.client,
        call_ns: op.call_ns,
        return_ns: op.return_ns,
        op: op.op.as_str().to_string(),
        arg: op.arg.clone(),
        out: op.out.clone(),
        unknown: op.unknown,
        state_after,
    }
}

pub(crate) fn counterexample<M: SeqModel>(
    model: &M,
    ops: &[Op],
    part: &Part<M::Input>,
    best: &[u32],
    end_state: &M::State,
) -> Counterexample {
    let mut state = model.init();
    let mut linearized = Vec::with_capacity(best.len());
    let mut placed = vec![false; part.ops.len()];
    for &i in best {
        let p = &part.ops[i as usize];
        placed[i as usize] = true;
        if let Some(s) = model.step(&state, &p.input) {
            state = s;
        }
        linearized.push(view(
            ops,
            p.orig,
            Some(model.describe_state(&state, &part.values)),
        ));
    }
    debug_assert!(state == *end_state);
    // Candidates: unplaced ops called before the earliest pending deadline.
    let first_ret = part
        .ops
        .iter()
        .zip(&placed)
        .filter(|(p, &d)| !d && !p.pending)
        .map(|(p, _)| p.ret)
        .min()
        .unwrap_or(u64::MAX);
    let candidates: Vec<&Prepared<M::Input>> = part
        .ops
        .iter()
        .zip(&placed)
        .filter(|(p, &d)| !d && p.call <= first_ret)
        .map(|(p, _)| p)
        .collect();
    // Candidates the model rejects outright, plus remaining ops that some
    // fitting candidate would doom (a needed value that could no longer
    // appear, or a token bound already passed): the search cuts those
    // branches early, so the stale read itself may lie beyond the prefix.
    let mut picked = vec![false; part.ops.len()];
    let mut prod: FxHashMap<u32, u32> = FxHashMap::default();
    for (k, p) in part.ops.iter().enumerate() {
        if placed[k] {
            continue;
        }
        if let Some(v) = model.value_produced(&p.input) {
            *prod.entry(v).or_default() += 1;
        }
    }
    // Ops doomed whichever fitting returned candidate goes next.
    let mut doomed_by_all: Option<Vec<bool>> = None;
    for (k, p) in part.ops.iter().enumerate() {
        if placed[k] || p.call > first_ret {
            continue;
        }
        let Some(ns) = model.step(end_state, &p.input) else {
            picked[k] = true;
            continue;
        };
        if p.pending {
            continue;
        }
        let cur = model.state_value(&ns);
        let bound = model.state_bound(&ns);
        let own_prod = model.value_produced(&p.input);
        let mut doomed = vec![false; part.ops.len()];
        for (j, o) in part.ops.iter().enumerate() {
            if placed[j] || j == k || o.pending {
                continue;
            }
            if let Some(v) = model.value_needed(&o.input) {
                let producers = prod.get(&v).copied().unwrap_or(0) - u32::from(own_prod == Some(v));
                if producers == 0 && cur != Some(v) {
                    doomed[j] = true;
                }
            }
            if let (Some(b), Some(nb)) = (bound, model.bound_needed(&o.input)) {
                if b > nb {
                    doomed[j] = true;
                }
            }
        }
        doomed_by_all = Some(match doomed_by_all {
            None => doomed,
            Some(prev) => prev.iter().zip(&doomed).map(|(a, b)| *a && *b).collect(),
        });
    }
    if let Some(d) = doomed_by_all {
        for (x, y) in picked.iter_mut().zip(d) {
            *x |= y;
        }
    }
    let mut unplaceable: Vec<OpView> = part
        .ops
        .iter()
        .zip(&picked)
        .filter(|(_, &x)| x)
        .map(|(p, _)| view(ops, p.orig, None))
        .collect();
    if unplaceable.is_empty() {
        unplaceable = candidates.iter().map(|p| view(ops, p.orig, None)).collect();
    }
    Counterexample {
        key: part.key.clone(),
        linearized,
        state: model.describe_state(end_state, &part.values),
        unplaceable,
        proof: None,
    }
}
