//! Per-partition decisions: the witness path first (a verified order from
//! the log or the values), then the violation finder on what it could not
//! order, then the search on the residue, under the deadline.

use crate::check::{par_for, Counterexample, DecidedBy, OpView, Part, Proof, Validity};
use crate::counterexample::{counterexample, view};
use crate::model::SeqModel;
use crate::op::Op;
use crate::refute::{refute, Refutation};
use crate::search::{search, Limits, Outcome, Prepared};
use crate::witness::{linearize, Source};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One partition's verdict and how it was reached.
pub(crate) struct Decision {
    pub valid: Validity,
    pub visited: u64,
    pub ce: Option<Counterexample>,
    pub decided_by: DecidedBy,
    pub fallback: Option<String>,
}

impl Decision {
    pub(crate) fn undecided() -> Decision {
        Decision {
            valid: Validity::Unknown,
            visited: 0,
            ce: None,
            decided_by: DecidedBy::Undecided,
            fallback: None,
        }
    }

    fn proved() -> Decision {
        Decision {
            valid: Validity::NotLinearizable,
            decided_by: DecidedBy::Finder,
            ..Decision::undecided()
        }
    }
}

/// Configurations the counterexample search for an already proved
/// violation may visit after reaching its deepest prefix (see
/// `Limits::known_invalid`). Histories whose search needs fewer get the
/// same counterexample as from a full search.
const COUNTEREXAMPLE_PATIENCE: u64 = 50_000;

fn collect<T>(v: Vec<Mutex<Option<T>>>) -> Vec<Option<T>> {
    v.into_iter()
        .map(|m| m.into_inner().ok().flatten())
        .collect()
}

fn slots<T>(n: usize) -> Vec<Mutex<Option<T>>> {
    (0..n).map(|_| Mutex::new(None)).collect()
}

fn put<T>(slot: &Mutex<Option<T>>, v: T) {
    if let Ok(mut g) = slot.lock() {
        *g = Some(v);
    }
}

/// The violation finder on every partition (linear, and a violation it
/// proves needs no order), then the witness path on the others, then the
/// search on the partitions neither decided.
pub(crate) fn decide<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    log: Option<&[Option<u64>]>,
    deadline: Option<Instant>,
) -> Vec<Decision> {
    let refuted = refute_each(model, parts);
    if let Some(k) = refuted.iter().position(Option::is_some) {
        return explain_violation(model, ops, parts, k, &refuted, deadline, true)
            .into_iter()
            .map(|d| d.unwrap_or_else(Decision::undecided))
            .collect();
    }
    let ordered = slots::<Result<Source, String>>(parts.len());
    par_for(parts.len(), |k| {
        let part = &parts[k];
        let plog: Option<Vec<Option<u64>>> =
            log.map(|l| part.ops.iter().map(|o| l[o.orig]).collect());
        let r =
            linearize(model, &part.ops, &part.values, plog.as_deref(), deadline).map(|l| l.source);
        put(&ordered[k], r);
    });
    let ordered = collect(ordered);
    let mut out: Vec<Decision> = Vec::with_capacity(parts.len());
    let mut rest = Vec::new();
    for (k, r) in ordered.into_iter().enumerate() {
        match r {
            Some(Ok(source)) => out.push(Decision {
                valid: Validity::Linearizable,
                decided_by: match source {
                    Source::Log => DecidedBy::Log,
                    Source::Values => DecidedBy::Witness,
                },
                ..Decision::undecided()
            }),
            other => {
                let why = match other {
                    Some(Err(e)) => e,
                    _ => "internal error: the witness path did not finish".into(),
                };
                rest.push(k);
                out.push(Decision {
                    fallback: Some(why),
                    ..Decision::undecided()
                });
            }
        }
    }
    let decided = search_all(model, ops, parts, &rest, deadline);
    for (k, d) in decided.into_iter().enumerate() {
        if let Some(mut d) = d {
            d.fallback = out[k].fallback.take();
            out[k] = d;
        }
    }
    out
}

/// The finder and the search alone (the witness path off).
/// The violation finder on every partition, in parallel.
fn refute_each<M: SeqModel>(model: &M, parts: &[Part<M::Input>]) -> Vec<Option<Refutation>> {
    let refuted = slots::<Refutation>(parts.len());
    par_for(parts.len(), |k| {
        if let Some(r) = refute(model, &parts[k].ops, parts[k].values.len()) {
            put(&refuted[k], r);
        }
    });
    collect(refuted)
}

pub(crate) fn decide_by_search<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    deadline: Option<Instant>,
) -> Vec<Decision> {
    let refuted = refute_each(model, parts);
    let all: Vec<usize> = (0..parts.len()).collect();
    let decided = match refuted.iter().position(Option::is_some) {
        Some(k) => explain_violation(model, ops, parts, k, &refuted, deadline, false),
        None => search_all(model, ops, parts, &all, deadline),
    };
    decided
        .into_iter()
        .map(|d| d.unwrap_or_else(Decision::undecided))
        .collect()
}

/// Searches the partitions in `which`, biggest first so a long one does
/// not start last, stopping at the first violation. `None` for the others.
fn search_all<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    which: &[usize],
    deadline: Option<Instant>,
) -> Vec<Option<Decision>> {
    let mut order: Vec<usize> = which.to_vec();
    order.sort_by_key(|&k| std::cmp::Reverse(parts[k].ops.len()));
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        deadline,
        cancel: &cancel,
        known_invalid: None,
        max_configs: None,
    };
    let results = slots::<Decision>(parts.len());
    par_for(order.len(), |j| {
        let k = order[j];
        let part = &parts[k];
        if cancel.load(Ordering::Relaxed) {
            put(&results[k], Decision::undecided());
            return;
        }
        let (outcome, stats) = search(model, &part.ops, &part.values, model.init(), &limits);
        let (valid, ce) = match outcome {
            Outcome::Ok { .. } => (Validity::Linearizable, None),
            Outcome::Unknown => (Validity::Unknown, None),
            Outcome::Illegal { best, state } | Outcome::GaveUp { best, state } => {
                cancel.store(true, Ordering::Relaxed);
                let ce = counterexample(model, ops, part, &best, &state);
                (Validity::NotLinearizable, Some(ce))
            }
        };
        let path = if valid == Validity::Unknown && cancel.load(Ordering::Relaxed) {
            DecidedBy::Undecided
        } else {
            DecidedBy::Search
        };
        put(
            &results[k],
            Decision {
                valid,
                visited: stats.visited,
                ce,
                decided_by: path,
                fallback: None,
            },
        );
    });
    collect(results)
}

/// Partitions in `refuted` are proved not linearizable; the first one, `k`,
/// gets a counterexample from a search that stops once it has its longest
/// prefix (the verdict does not depend on it). With `cut`, the ops called
/// before the proof's first op are ordered by the witness path first and the
/// search starts after them, so a violation deep in a long history costs a
/// search around the violation, not a dive through everything before it.
/// The partitions not proved invalid are left unchecked, as after any
/// violation.
fn explain_violation<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    k: usize,
    refuted: &[Option<Refutation>],
    deadline: Option<Instant>,
    cut: bool,
) -> Vec<Option<Decision>> {
    let mut results: Vec<Option<Decision>> = refuted
        .iter()
        .map(|r| r.as_ref().map(|_| Decision::proved()))
        .collect();
    let part = &parts[k];
    let Some(r) = &refuted[k] else {
        return results;
    };
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        deadline,
        cancel: &cancel,
        known_invalid: Some(COUNTEREXAMPLE_PATIENCE),
        max_configs: None,
    };
    let head = if cut {
        witness_prefix(model, part, r, deadline)
    } else {
        None
    };
    let (prefix, start, rest, rest_of) = match head {
        Some((prefix, state)) => {
            let mut in_prefix = vec![false; part.ops.len()];
            for &i in &prefix {
                in_prefix[i as usize] = true;
            }
            let rest_of: Vec<u32> = (0..part.ops.len() as u32)
                .filter(|&i| !in_prefix[i as usize])
                .collect();
            let rest: Vec<Prepared<M::Input>> = rest_of
                .iter()
                .map(|&i| part.ops[i as usize].clone())
                .collect();
            (prefix, state, Some(rest), rest_of)
        }
        None => (Vec::new(), model.init(), None, Vec::new()),
    };
    let searched = rest.as_deref().unwrap_or(&part.ops);
    let (outcome, stats) = search(model, searched, &part.values, start, &limits);
    let (best, state, disagree) = match outcome {
        Outcome::Illegal { best, state } | Outcome::GaveUp { best, state } => (best, state, false),
        Outcome::Ok { .. } | Outcome::Unknown => {
            // The finder's conditions are necessary for linearizability, so
            // an exhaustive search cannot succeed here; if it ever did, one
            // of the two has a bug. Keep the proved verdict and show where
            // the proof lies.
            debug_assert!(
                false,
                "search and violation finder disagree on {:?}",
                part.key
            );
            (Vec::new(), model.init(), true)
        }
    };
    let best: Vec<u32> = if disagree {
        Vec::new()
    } else if rest.is_some() {
        prefix
            .iter()
            .copied()
            .chain(best.iter().map(|&j| rest_of[j as usize]))
            .collect()
    } else {
        best
    };
    let mut ce = counterexample(model, ops, part, &best, &state);
    let proof_ops: Vec<OpView> = r
        .ops()
        .iter()
        .map(|&i| view(ops, part.ops[i as usize].orig, None))
        .collect();
    if disagree {
        ce.unplaceable = proof_ops.clone();
    }
    ce.proof = Some(Proof {
        reason: r.explain(&|v| part.values.value(v).to_string()),
        ops: proof_ops,
    });
    results[k] = Some(Decision {
        valid: Validity::NotLinearizable,
        visited: stats.visited,
        ce: Some(ce),
        decided_by: DecidedBy::Finder,
        fallback: None,
    });
    results
}

/// A verified linearization of the ops called before the proof's first op
/// (without the completed ops that need a value no op called by then
/// writes: they returned after that writer was called, so nothing before
/// the cut had to follow them) and the state after it; `None` if the
/// witness path cannot order them.
fn witness_prefix<M: SeqModel>(
    model: &M,
    part: &Part<M::Input>,
    r: &Refutation,
    deadline: Option<Instant>,
) -> Option<(Vec<u32>, M::State)> {
    let ops = &part.ops;
    let t0 = r.ops().iter().map(|&i| ops[i as usize].call).min()?;
    let nvalues = part.values.len();
    let mut written = vec![false; nvalues];
    if let Some(v) = model.state_value(&model.init()) {
        *written.get_mut(v as usize)? = true;
    }
    for op in ops.iter().take_while(|o| o.call < t0) {
        if let Some(v) = model.value_produced(&op.input) {
            *written.get_mut(v as usize)? = true;
        }
    }
    let keep: Vec<u32> = (0..ops.len() as u32)
        .take_while(|&i| ops[i as usize].call < t0)
        .filter(|&i| {
            let op = &ops[i as usize];
            op.pending
                || model
                    .value_needed(&op.input)
                    .is_none_or(|v| written.get(v as usize).copied().unwrap_or(false))
        })
        .collect();
    if keep.is_empty() {
        return None;
    }
    let sub: Vec<Prepared<M::Input>> = keep.iter().map(|&i| ops[i as usize].clone()).collect();
    let lin = linearize(model, &sub, &part.values, None, deadline).ok()?;
    let order = lin.order.iter().map(|&j| keep[j as usize]).collect();
    Some((order, lin.state))
}
