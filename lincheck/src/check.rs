//! P-compositional driver: partition by key, check partitions in parallel,
//! stop at the first violation.

use crate::counterexample::{counterexample, view};
use crate::model::{FencedModel, Interner, KvModel, Model, SeqModel};
use crate::op::Op;
use crate::refute::{refute, Refutation};
use crate::search::{search, Limits, Outcome, Prepared, MAX_PARTITION};
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
    /// Set when the violation was proved without the search (see the
    /// README's algorithm section): the reason, and the ops it rests on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<Proof>,
}

/// A violation proved from the values alone.
#[derive(Clone, Debug, Serialize)]
pub struct Proof {
    pub reason: String,
    /// The ops the reason is about, in call order: e.g. the write of the
    /// value read, the stale read, and the write that completed in between.
    pub ops: Vec<OpView>,
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

pub(crate) struct Part<I> {
    pub key: String,
    /// Index of the first op with this key.
    pub first: usize,
    pub nops: usize,
    pub ops: Vec<Prepared<I>>,
    pub values: Interner,
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

    // The budget covers the whole check; one already spent on preparing
    // the partitions decides nothing (the search polls it only every few
    // thousand steps, the finder not at all).
    let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
    // The violation finder first, on every partition (linear time): a
    // violation it proves needs no exhaustive search.
    let refuted: Vec<Mutex<Option<Refutation>>> =
        (0..parts.len()).map(|_| Mutex::new(None)).collect();
    par_for(if out_of_time { 0 } else { parts.len() }, |k| {
        let r = refute(model, &parts[k].ops, parts[k].values.len());
        if let Ok(mut g) = refuted[k].lock() {
            *g = r;
        }
    });
    let refuted: Vec<Option<Refutation>> = refuted
        .into_iter()
        .map(|m| m.into_inner().ok().flatten())
        .collect();
    let results = match refuted.iter().position(Option::is_some) {
        _ if out_of_time => vec![None; parts.len()],
        Some(k) => explain_violation(model, ops, &parts, k, &refuted, deadline),
        None => search_all(model, ops, &parts, deadline),
    };

    let mut partitions = Vec::with_capacity(parts.len());
    let mut counterexample = None;
    let mut any_unknown = false;
    let mut any_invalid = false;
    for (part, r) in parts.iter().zip(results) {
        let (valid, visited, ce) = r.unwrap_or((Validity::Unknown, 0, None));
        match valid {
            Validity::Unknown => any_unknown = true,
            Validity::NotLinearizable => {
                any_invalid = true;
                if counterexample.is_none() {
                    counterexample = ce;
                }
            }
            Validity::Linearizable => {}
        }
        partitions.push(PartitionResult {
            key: part.key.clone(),
            ops: part.nops,
            valid,
            visited,
        });
    }
    let valid = if any_invalid {
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

/// True if the violation finder alone (no search) proves some partition
/// not linearizable. For tests that hold it against a brute-force checker;
/// [`check`] already uses it.
#[doc(hidden)]
pub fn violation_proved(ops: &[Op], model: Model) -> Result<bool, InputError> {
    fn any<M: SeqModel>(ops: &[Op], model: &M) -> Result<bool, InputError> {
        let parts = prepare_shard(model, ops, 0, 1)?;
        Ok(parts
            .iter()
            .any(|p| refute(model, &p.ops, p.values.len()).is_some()))
    }
    match model {
        Model::Kv => any(ops, &KvModel),
        Model::Fenced => any(ops, &FencedModel),
    }
}

/// A partition's verdict, configurations visited and counterexample;
/// `None` for a partition not checked because another one failed.
type Verdict = (Validity, u64, Option<Counterexample>);

/// Configurations the counterexample search for an already proved
/// violation may visit after reaching its deepest prefix (see
/// `Limits::known_invalid`). Histories whose search needs fewer get the
/// same counterexample as from a full search.
const COUNTEREXAMPLE_PATIENCE: u64 = 50_000;

/// No partition was proved invalid up front: search them all, biggest
/// first so a long one does not start last, stopping at the first violation.
fn search_all<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    deadline: Option<Instant>,
) -> Vec<Option<Verdict>> {
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(parts[k].ops.len()));
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        deadline,
        cancel: &cancel,
        known_invalid: None,
    };
    let results: Vec<Mutex<Option<Verdict>>> = (0..parts.len()).map(|_| Mutex::new(None)).collect();
    par_for(order.len(), |j| {
        let k = order[j];
        let part = &parts[k];
        if cancel.load(Ordering::Relaxed) {
            return;
        }
        let (outcome, stats) = search(model, &part.ops, &part.values, &limits);
        let r = match outcome {
            Outcome::Ok => (Validity::Linearizable, stats.visited, None),
            Outcome::Unknown => (Validity::Unknown, stats.visited, None),
            Outcome::Illegal { best, state } | Outcome::GaveUp { best, state } => {
                cancel.store(true, Ordering::Relaxed);
                let ce = counterexample(model, ops, part, &best, &state);
                (Validity::NotLinearizable, stats.visited, Some(ce))
            }
        };
        if let Ok(mut g) = results[k].lock() {
            *g = Some(r);
        }
    });
    results
        .into_iter()
        .map(|m| m.into_inner().ok().flatten())
        .collect()
}

/// Partitions in `refuted` are proved not linearizable; the first one, `k`,
/// gets a counterexample from a search that stops once it has its longest
/// prefix (the verdict does not depend on it). The partitions not proved
/// invalid are left unchecked, as after any violation.
fn explain_violation<M: SeqModel>(
    model: &M,
    ops: &[Op],
    parts: &[Part<M::Input>],
    k: usize,
    refuted: &[Option<Refutation>],
    deadline: Option<Instant>,
) -> Vec<Option<Verdict>> {
    let mut results: Vec<Option<Verdict>> = refuted
        .iter()
        .map(|r| r.as_ref().map(|_| (Validity::NotLinearizable, 0, None)))
        .collect();
    let part = &parts[k];
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        deadline,
        cancel: &cancel,
        known_invalid: Some(COUNTEREXAMPLE_PATIENCE),
    };
    let (outcome, stats) = search(model, &part.ops, &part.values, &limits);
    let (best, state, disagree) = match outcome {
        Outcome::Illegal { best, state } | Outcome::GaveUp { best, state } => (best, state, false),
        Outcome::Ok | Outcome::Unknown => {
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
    let mut ce = counterexample(model, ops, part, &best, &state);
    if let Some(r) = &refuted[k] {
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
    }
    results[k] = Some((Validity::NotLinearizable, stats.visited, Some(ce)));
    results
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
