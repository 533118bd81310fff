//! Violation finder: a polynomial proof that a partition is NOT
//! linearizable, for histories in which values have a single producer.
//!
//! This is the necessary half of Gibbons & Korach's read-mapping conditions
//! ("Testing shared memories", 1997), generalised from read/write registers
//! to any model that provides the value hints of [`SeqModel`] (cas, fenced
//! writes, never-returned ops). Valid histories never need it: the search
//! goes straight through them. An invalid one, though, the search must prove
//! by exhausting every alternative before the violation, which is
//! exponential in the number of concurrent ops. When the conditions below
//! fail, the verdict is proved without that search.
//!
//! Take a value `v` that exactly one op `W` can produce (or that only the
//! initial state holds, `W` then being a virtual op at time -inf). The hint
//! contract says the state's value becomes `v` only by linearizing `W`, and
//! an op that needs `v` (a read of `v`, a successful `cas(v, _)`) succeeds
//! only while the value is `v`. So in any linearization:
//!
//! 1. every op that needs `v` comes after `W` (and is not `W` itself);
//! 2. once another value `u` is installed after `W`, `v` never comes back,
//!    so `W` and the ops needing `v` (the *cluster* of `v`) form a run that
//!    no op installing another value interrupts.
//!
//! A cluster's run, on the time axis, starts at or before the earliest
//! return in the cluster (`lo`) and ends at or after the latest call (`hi`).
//! The conditions checked below: (1) the first point above; (2) an op that
//! fails where the value is `v` ([`SeqModel::value_excluded`], a cas
//! expecting `v` that failed) cannot lie strictly inside `(lo, hi)`; and
//! (3) two clusters whose producers certainly take effect must run one after
//! the other, which is impossible when `hi_u > lo_v` and `hi_v > lo_u`: the
//! *overlap* (a stale read: the cluster of the value read spans, from the
//! write's return to the read's call, a later write).
//!
//! Producers that certainly take effect: the producer of a value some
//! completed op needs (nothing else can install it), and a completed op for
//! which the model says [`SeqModel::definitely_produces`]. Values with
//! several producers are left out, and so are fenced tokens. The
//! conditions are therefore only necessary: when none fails, the search
//! decides (for read/write registers with distinct values they are also
//! sufficient, by Gibbons & Korach, which a property test checks).

use crate::model::SeqModel;
use crate::search::Prepared;

/// Why the partition cannot be linearizable (op numbers are indices into
/// the partition's ops, values are interned ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refutation {
    /// `reader` needs `value`, which no op produces and the state does not
    /// start with.
    NeverProduced { reader: u32, value: u32 },
    /// `reader` returned before the only producer of `value` was called (or
    /// is that producer itself).
    NeededBeforeProduced {
        reader: u32,
        producer: u32,
        value: u32,
    },
    /// `op` needs the state not to hold `value` (a failed cas), but real
    /// time puts it entirely inside the run of `value`'s cluster. `ops`:
    /// the cluster's producer and the ops that set its earliest return and
    /// latest call, and `op`, in call order.
    HeldThroughout { op: u32, value: u32, ops: Vec<u32> },
    /// The clusters of two values would have to interleave. `ops` are the
    /// producers and the ops that set the clusters' earliest return and
    /// latest call, in call order.
    Overlap { values: [u32; 2], ops: Vec<u32> },
}

impl Refutation {
    /// The ops the proof rests on, in call order.
    pub(crate) fn ops(&self) -> Vec<u32> {
        match self {
            Refutation::NeverProduced { reader, .. } => vec![*reader],
            Refutation::NeededBeforeProduced {
                reader, producer, ..
            } => {
                let mut v = vec![*reader];
                if *producer != INITIAL && producer != reader {
                    v.push(*producer);
                }
                v.sort_unstable();
                v
            }
            Refutation::HeldThroughout { ops, .. } | Refutation::Overlap { ops, .. } => ops.clone(),
        }
    }

    /// The proof in words; `value` renders an interned value.
    pub(crate) fn explain(&self, value: &dyn Fn(u32) -> String) -> String {
        match self {
            Refutation::NeverProduced { value: v, .. } => format!(
                "an op needs the value {}, which no op writes and the key does not start with",
                value(*v)
            ),
            Refutation::NeededBeforeProduced { value: v, .. } => format!(
                "an op needs the value {}, whose only writer had not been called when it returned (or is the op itself)",
                value(*v)
            ),
            Refutation::HeldThroughout { value: v, .. } => format!(
                "an op failed because the value was not {} (e.g. a cas expecting it), but the \
                 value's single writer and the ops that read it hold the value throughout that \
                 op's interval",
                value(*v)
            ),
            Refutation::Overlap { values: [a, b], .. } => format!(
                "the values {} and {} each have a single writer, and a value's writer and the ops \
                 that need it must run without another write in between; real time makes these \
                 two runs overlap (e.g. a read returned a value that a write completed before \
                 the read started had overwritten)",
                value(*a),
                value(*b)
            ),
        }
    }
}

/// The virtual producer of the initial value.
const INITIAL: u32 = u32::MAX;

/// Time of the virtual initial producer: before every op, whose times are
/// shifted up by one (see `shifted`).
const MINUS_INF: u64 = 0;

/// An op's time on the finder's axis, one above the history's so that
/// `MINUS_INF` comes first; a never-returned op's `u64::MAX` stays +inf.
fn shifted(t: u64) -> u64 {
    t.saturating_add(1)
}

/// Earliest return and latest call among some ops, and the ops that have
/// them (`INITIAL` while empty).
#[derive(Clone, Copy, Debug)]
struct Span {
    lo: u64,
    hi: u64,
    lo_op: u32,
    hi_op: u32,
}

impl Span {
    const EMPTY: Span = Span {
        lo: u64::MAX,
        hi: 0,
        lo_op: INITIAL,
        hi_op: INITIAL,
    };

    fn add(&mut self, op: u32, call: u64, ret: u64) {
        if ret <= self.lo {
            self.lo = ret;
            self.lo_op = op;
        }
        if call >= self.hi {
            self.hi = call;
            self.hi_op = op;
        }
    }

    fn is_empty(&self) -> bool {
        self.lo_op == INITIAL
    }
}

/// What one pass over the ops learns about a value (kept small: there is
/// one per distinct value, up to one per op).
#[derive(Clone, Copy, Debug)]
struct ValueInfo {
    /// The completed ops that need it.
    readers: Span,
    /// Ops that can produce it (1 for the initial value, plus its writers).
    producers: u32,
    /// The last of them (`INITIAL` for the initial state).
    producer: u32,
    /// Some op both needs and produces it (e.g. `cas(v, v)`).
    needed_by_producer: bool,
}

impl ValueInfo {
    const NEW: ValueInfo = ValueInfo {
        readers: Span::EMPTY,
        producers: 0,
        producer: INITIAL,
        needed_by_producer: false,
    };
}

/// A value's cluster: its single producer and the ops that need it.
#[derive(Clone, Copy, Debug)]
struct Cluster {
    /// `lo`: earliest return, `hi`: latest call in the cluster.
    span: Span,
    producer: u32,
    value: u32,
}

impl Cluster {
    /// True if the run of this cluster must cover the span `(lo, hi)`.
    fn is_forward(&self) -> bool {
        self.span.lo < self.span.hi
    }

    /// Neither cluster can run entirely before the other.
    fn overlaps(&self, other: &Cluster) -> bool {
        self.span.hi > other.span.lo && other.span.hi > self.span.lo
    }

    /// The producer and the ops that set `lo` and `hi`.
    fn ops(&self) -> [u32; 3] {
        [self.producer, self.span.lo_op, self.span.hi_op]
    }
}

/// Op numbers in call order, without duplicates or the virtual producer.
fn proof_ops(ops: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = ops.into_iter().filter(|&o| o != INITIAL).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn overlap(a: &Cluster, b: &Cluster) -> Refutation {
    Refutation::Overlap {
        values: [a.value, b.value],
        ops: proof_ops(a.ops().into_iter().chain(b.ops())),
    }
}

/// Looks for a proof that `ops` (one partition, in call order, values
/// interned below `nvalues`) is not linearizable. `None` means no proof was
/// found, not that the partition is linearizable.
pub(crate) fn refute<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    nvalues: usize,
) -> Option<Refutation> {
    let initial = model.state_value(&model.init())?;
    if initial as usize >= nvalues {
        return None;
    }

    // One pass over the ops: who can produce each value (the initial state
    // counts as a producer), and the span of the completed ops needing it.
    let mut values = vec![ValueInfo::NEW; nvalues];
    values[initial as usize].producers = 1;
    // Completed ops that need the state not to hold some value.
    let mut excluders: Vec<(u32, u32)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let produced = model.value_produced(&op.input);
        if let Some(v) = produced {
            let info = values.get_mut(v as usize)?;
            info.producers += 1;
            info.producer = i as u32;
        }
        if op.pending {
            continue;
        }
        if let Some(v) = model.value_needed(&op.input) {
            let info = values.get_mut(v as usize)?;
            info.readers
                .add(i as u32, shifted(op.call), shifted(op.ret));
            info.needed_by_producer |= produced == Some(v);
        }
        if let Some(v) = model.value_excluded(&op.input) {
            excluders.push((i as u32, v));
        }
    }

    // Condition 1, and the clusters whose producer certainly takes effect.
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    for (v, info) in values.iter().enumerate() {
        let value = v as u32;
        let needed = !info.readers.is_empty();
        if needed && info.producers == 0 {
            return Some(Refutation::NeverProduced {
                reader: info.readers.lo_op,
                value,
            });
        }
        if info.producers != 1 {
            continue;
        }
        let w = info.producer;
        let mut c = Cluster {
            span: info.readers,
            producer: w,
            value,
        };
        if w == INITIAL {
            if !needed {
                continue;
            }
            c.span.add(INITIAL, MINUS_INF, MINUS_INF);
        } else {
            let op = &ops[w as usize];
            let (call, ret) = (shifted(op.call), shifted(op.ret));
            // `c.span.lo` is the earliest return among the ops needing `v`.
            if info.needed_by_producer || (needed && c.span.lo < call) {
                let reader = if info.needed_by_producer {
                    w
                } else {
                    c.span.lo_op
                };
                return Some(Refutation::NeededBeforeProduced {
                    reader,
                    producer: w,
                    value,
                });
            }
            let certain = needed || (!op.pending && model.definitely_produces(&op.input));
            if !certain {
                continue;
            }
            // A never-returned op's `ret` is u64::MAX: it may take effect
            // at any time after its call.
            c.span.add(w, call, ret);
        }
        if c.is_forward() {
            forward.push(c);
        } else {
            backward.push(c);
        }
    }
    drop(values);

    // Condition 3. Forward clusters must be pairwise disjoint: sorted by
    // `lo`, each must start at or after the furthest `hi` so far.
    // Value ids follow the input order, so this is nearly sorted already,
    // which the stable sort's run detection makes cheap.
    forward.sort_by_key(|c| c.span.lo);
    let mut reach: Option<&Cluster> = None;
    for c in &forward {
        if let Some(r) = reach {
            if r.overlaps(c) {
                return Some(overlap(r, c));
            }
        }
        if reach.is_none_or(|r| c.span.hi > r.span.hi) {
            reach = Some(c);
        }
    }
    // Now they are disjoint, so sorted by `hi` too: of those starting
    // before a given time, only the last can reach past it.
    let last_starting_before = |t: u64| {
        let k = forward.partition_point(|f| f.span.lo < t);
        k.checked_sub(1).map(|k| &forward[k])
    };
    // Two backward clusters never overlap (that would need
    // hi_u > lo_v >= hi_v > lo_u >= hi_u); a backward one can only overlap
    // the last forward one that starts before its `hi`.
    for b in &backward {
        if let Some(f) = last_starting_before(b.span.hi) {
            if f.overlaps(b) {
                return Some(overlap(f, b));
            }
        }
    }

    // Condition 2: between its producer and the last op needing it, a
    // value is held, so an op that fails where the value is `v` cannot lie
    // strictly inside the span of `v`'s forward cluster, which can only be
    // the last one starting before the op's call.
    for &(i, v) in &excluders {
        let op = &ops[i as usize];
        let (call, ret) = (shifted(op.call), shifted(op.ret));
        let Some(c) = last_starting_before(call) else {
            continue;
        };
        if c.value == v && ret < c.span.hi {
            return Some(Refutation::HeldThroughout {
                op: i,
                value: v,
                ops: proof_ops(c.ops().into_iter().chain([i])),
            });
        }
    }
    None
}
