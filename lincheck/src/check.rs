//! P-compositional driver: partition by key, check partitions in parallel,
//! stop at the first violation.

use crate::model::{FencedModel, Interner, KvModel, Model, SeqModel};
use crate::op::Op;
use crate::search::{search, Outcome, Prepared, MAX_PARTITION};
use rustc_hash::FxHashMap;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Verdict; serialises as `true`, `false` or `"unknown"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    Linearizable,
    NotLinearizable,
    /// The time budget ran out, or (for a partition) the check was cut short
    /// because another partition already failed.
    Unknown,
}

impl Serialize for Validity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Validity::Linearizable => s.serialize_bool(true),
            Validity::NotLinearizable => s.serialize_bool(false),
            Validity::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl fmt::Display for Validity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Validity::Linearizable => "linearizable",
            Validity::NotLinearizable => "NOT linearizable",
            Validity::Unknown => "unknown",
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PartitionResult {
    pub key: String,
    pub ops: usize,
    pub valid: Validity,
    /// Distinct configurations (linearized set + model state) visited.
    pub visited: u64,
}

/// An op as shown in a counterexample.
#[derive(Clone, Debug, Serialize)]
pub struct OpView {
    /// Index of the op in the checked slice (line number - 1 for a file
    /// without blank lines).
    pub index: usize,
    pub client: u64,
    pub call_ns: u64,
    pub return_ns: Option<u64>,
    pub op: String,
    pub arg: Value,
    pub out: Value,
    pub unknown: bool,
    /// Model state after this op (only in `Counterexample::linearized`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_after: Option<Value>,
}

/// Why a partition is not linearizable, in plain data for reports.
#[derive(Clone, Debug, Serialize)]
pub struct Counterexample {
    pub key: String,
    /// The longest linearizable prefix found, in linearization order.
    pub linearized: Vec<OpView>,
    /// Model state after that prefix.
    pub state: Value,
    /// Ops that could come next in real-time order but are inconsistent with
    /// `state`, and ops that placing a fitting candidate would make
    /// impossible (e.g. a read of a value the candidate overwrites for good).
    /// If there are none (the dead end is further on), all candidates.
    pub unplaceable: Vec<OpView>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    pub valid: Validity,
    pub model: String,
    pub ops: usize,
    pub partitions: Vec<PartitionResult>,
    pub counterexample: Option<Counterexample>,
    pub check_ms: f64,
}

/// An op the model cannot interpret (wrong arg shape, unknown op name, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// Index of the offending op in the checked slice.
    pub index: usize,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op #{}: {}", self.index, self.message)
    }
}

impl std::error::Error for InputError {}

/// Checks `ops` against a built-in model.
pub fn check(
    ops: &[Op],
    model: Model,
    timeout: Option<Duration>,
) -> Result<CheckResult, InputError> {
    match model {
        Model::Kv => check_with(ops, &KvModel, timeout),
        Model::Fenced => check_with(ops, &FencedModel, timeout),
    }
}

struct Part<I> {
    key: String,
    /// Index of the first op with this key.
    first: usize,
    nops: usize,
    ops: Vec<Prepared<I>>,
    values: Interner,
}

fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .max(1)
}

/// Runs `f` on every index in `0..n` over a few threads, biggest-first order
/// being the caller's job.
fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    let t = threads().min(n);
    if t <= 1 {
        (0..n).for_each(f);
        return;
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..t {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    break;
                }
                f(k);
            });
        }
    });
}

/// Checks `ops` against any [`SeqModel`].
pub fn check_with<M: SeqModel>(
    ops: &[Op],
    model: &M,
    timeout: Option<Duration>,
) -> Result<CheckResult, InputError> {
    let start = Instant::now();
    let deadline = timeout.map(|t| start + t);

    for (i, op) in ops.iter().enumerate() {
        if let Some(r) = op.return_ns {
            if r < op.call_ns {
                return Err(InputError {
                    index: i,
                    message: format!("return_ns {r} is before call_ns {}", op.call_ns),
                });
            }
        }
    }

    // Partition and prepare in one pass per thread: every thread streams
    // the whole slice in order and takes the keys that hash to it. Walking
    // each partition's ops instead (scattered over the slice) was dominated
    // by cache misses.
    let nthreads = threads();
    let shards: Vec<Result<Vec<Part<M::Input>>, InputError>> = if nthreads <= 1 {
        vec![prepare_shard(model, ops, 0, 1)]
    } else {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..nthreads)
                .map(|t| sc.spawn(move || prepare_shard(model, ops, t, nthreads)))
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(InputError {
                            index: 0,
                            message: "internal error: a worker thread panicked".into(),
                        })
                    })
                })
                .collect()
        })
    };
    let mut parts = Vec::new();
    let mut first_err: Option<InputError> = None;
    for r in shards {
        match r {
            Ok(ps) => parts.extend(ps),
            Err(e) => {
                if first_err.as_ref().is_none_or(|f| e.index < f.index) {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    // First-appearance order, so output does not depend on the thread count.
    parts.sort_by_key(|p| p.first);
    if let Some(p) = parts.iter().find(|p| p.ops.len() > MAX_PARTITION) {
        return Err(InputError {
            index: p.first,
            message: format!(
                "key {:?} has {} ops; at most {MAX_PARTITION} per key are supported",
                p.key,
                p.ops.len()
            ),
        });
    }

    // Biggest partitions first so a long one does not start last.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(parts[k].ops.len()));
    let cancel = AtomicBool::new(false);
    type Verdict = (Validity, u64, Option<Counterexample>);
    let results: Vec<Mutex<Option<Verdict>>> = (0..parts.len()).map(|_| Mutex::new(None)).collect();
    par_for(order.len(), |j| {
        let k = order[j];
        let part = &parts[k];
        if cancel.load(Ordering::Relaxed) {
            return;
        }
        let (outcome, stats) = search(model, &part.ops, &part.values, deadline, &cancel);
        let r = match outcome {
            Outcome::Ok => (Validity::Linearizable, stats.visited, None),
            Outcome::Unknown => (Validity::Unknown, stats.visited, None),
            Outcome::Illegal { best, state } => {
                cancel.store(true, Ordering::Relaxed);
                let ce = counterexample(model, ops, part, &best, &state);
                (Validity::NotLinearizable, stats.visited, Some(ce))
            }
        };
        if let Ok(mut g) = results[k].lock() {
            *g = Some(r);
        }
    });

    let mut partitions = Vec::with_capacity(parts.len());
    let mut counterexample = None;
    let mut any_unknown = false;
    for (part, r) in parts.iter().zip(results) {
        let (valid, visited, ce) =
            r.into_inner()
                .ok()
                .flatten()
                .unwrap_or((Validity::Unknown, 0, None));
        match valid {
            Validity::Unknown => any_unknown = true,
            Validity::NotLinearizable if counterexample.is_none() => counterexample = ce,
            _ => {}
        }
        partitions.push(PartitionResult {
            key: part.key.clone(),
            ops: part.nops,
            valid,
            visited,
        });
    }
    let valid = if counterexample.is_some() {
        Validity::NotLinearizable
    } else if any_unknown {
        Validity::Unknown
    } else {
        Validity::Linearizable
    };
    Ok(CheckResult {
        valid,
        model: model.name().to_string(),
        ops: ops.len(),
        partitions,
        counterexample,
        check_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

fn key_hash(k: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    k.hash(&mut h);
    // Fx leaves the low bits weak; the shard is taken from the high ones.
    h.finish()
}

/// Partitions and prepares the ops whose key hashes to `shard`.
fn prepare_shard<M: SeqModel>(
    model: &M,
    ops: &[Op],
    shard: usize,
    shards: usize,
) -> Result<Vec<Part<M::Input>>, InputError> {
    let mut table: hashbrown::HashTable<u32> = hashbrown::HashTable::new();
    let mut hashes: Vec<u64> = Vec::new();
    let mut parts: Vec<Part<M::Input>> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let h = key_hash(&op.key);
        if ((h >> 32) as usize) % shards != shard {
            continue;
        }
        let pid = match table.find(h, |&pid| parts[pid as usize].key == op.key) {
            Some(&pid) => pid as usize,
            None => {
                let pid = parts.len();
                parts.push(Part {
                    key: op.key.clone(),
                    first: i,
                    nops: 0,
                    ops: Vec::new(),
                    values: Interner::new(),
                });
                hashes.push(h);
                table.insert_unique(h, pid as u32, |&p| hashes[p as usize]);
                pid
            }
        };
        let part = &mut parts[pid];
        part.nops += 1;
        let input = model
            .prepare(op, op.is_checked(), &mut part.values)
            .map_err(|message| InputError { index: i, message })?;
        if model.is_noop(&input) {
            continue;
        }
        let read_only = model.read_only(&input);
        part.ops.push(Prepared {
            input,
            call: op.call_ns,
            ret: op.return_ns.unwrap_or(u64::MAX),
            pending: op.return_ns.is_none(),
            read_only,
            orig: i,
        });
    }
    for p in &mut parts {
        // Usually already in call order, which the stable sort detects.
        p.ops.sort_by_key(|o| (o.call, o.orig));
    }
    Ok(parts)
}

fn view(ops: &[Op], index: usize, state_after: Option<Value>) -> OpView {
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

fn counterexample<M: SeqModel>(
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
    }
}
