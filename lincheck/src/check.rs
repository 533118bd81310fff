//! P-compositional driver: partition by key, check partitions in parallel,
//! stop at the first violation.

use crate::decide::Decision;
use crate::model::{FencedModel, Interner, KvModel, Model, SeqModel};
use crate::op::Op;
use crate::refute::refute;
use crate::search::{Prepared, MAX_PARTITION};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Which path decided a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// A linearization built from the resource's log order, verified.
    Log,
    /// A linearization built from unique values and tokens, verified.
    Witness,
    /// The violation finder proved it not linearizable.
    Finder,
    /// The search decided (or ran out of time: `valid` is then `unknown`).
    Search,
    /// Not checked: another partition failed first, or no time was left.
    Undecided,
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecidedBy::Log => "log",
            DecidedBy::Witness => "witness",
            DecidedBy::Finder => "finder",
            DecidedBy::Search => "search",
            DecidedBy::Undecided => "undecided",
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
    /// Which path decided.
    pub decided_by: DecidedBy,
    /// Why the witness path could not order the partition (it then fell
    /// back to the finder and the search); absent when it did, or was off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// How to check: the time budget, whether to try the witness path first,
/// and the resource's own order of applied operations when there is one.
#[derive(Clone, Copy, Debug)]
pub struct CheckOptions<'a> {
    /// Past it, undecided partitions are `unknown` (never `true`).
    pub timeout: Option<Duration>,
    /// Build and verify a linearization from the witnesses before any
    /// search (default). `false` runs the finder and the search alone.
    pub witnesses: bool,
    /// For each op of the checked slice, its position in the resource's
    /// log of applied operations (`None`: not in the log). Per key, the ops
    /// in the log are tried in log order first.
    pub log: Option<&'a [Option<u64>]>,
}

impl Default for CheckOptions<'_> {
    fn default() -> Self {
        CheckOptions {
            timeout: None,
            witnesses: true,
            log: None,
        }
    }
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
pub(crate) fn par_for(n: usize, f: impl Fn(usize) + Sync) {
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
    let opts = CheckOptions {
        timeout,
        ..CheckOptions::default()
    };
    check_with_options(ops, model, &opts)
}

/// Checks `ops` against any [`SeqModel`] with explicit [`CheckOptions`].
pub fn check_with_options<M: SeqModel>(
    ops: &[Op],
    model: &M,
    opts: &CheckOptions,
) -> Result<CheckResult, InputError> {
    let start = Instant::now();
    let deadline = opts.timeout.map(|t| start + t);
    if let Some(log) = opts.log {
        if log.len() != ops.len() {
            return Err(InputError {
                index: 0,
                message: format!(
                    "the log order has {} entries for {} ops",
                    log.len(),
                    ops.len()
                ),
            });
        }
    }

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
    // the partitions decides nothing.
    let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
    let results = if out_of_time {
        (0..parts.len()).map(|_| Decision::undecided()).collect()
    } else if opts.witnesses {
        crate::decide::decide(model, ops, &parts, opts.log, deadline)
    } else {
        crate::decide::decide_by_search(model, ops, &parts, deadline)
    };

    let mut partitions = Vec::with_capacity(parts.len());
    let mut counterexample = None;
    let mut any_unknown = false;
    let mut any_invalid = false;
    for (part, d) in parts.iter().zip(results) {
        match d.valid {
            Validity::Unknown => any_unknown = true,
            Validity::NotLinearizable => {
                any_invalid = true;
                if counterexample.is_none() {
                    counterexample = d.ce;
                }
            }
            Validity::Linearizable => {}
        }
        partitions.push(PartitionResult {
            key: part.key.clone(),
            ops: part.nops,
            valid: d.valid,
            visited: d.visited,
            decided_by: d.decided_by,
            fallback: d.fallback,
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
