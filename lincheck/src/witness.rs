//! Witness path: build a linearization from what a fenced history carries
//! (the resource's own log order, or unique written values and tokens),
//! then verify it step by step in O(n log n).
//!
//! The order is only a candidate: `verify` replays it against the model and
//! checks real time, so a history is called linearizable here only with a
//! linearization in hand. Whatever the construction gets wrong (repeated
//! values, a hint that does not hold, a history that is not linearizable)
//! ends in `Err(reason)`, and the caller falls back to the violation finder
//! and the search.
//!
//! Construction from values (Gibbons & Korach's clusters, as in `refute.rs`):
//! a value `v` with one producer `W` and the completed ops that need it form
//! a run that nothing else interrupts. A successful cas from `u` to `v` ends
//! the run of `u` and starts the run of `v`, so runs chain. Each chain of
//! runs spans, on the time axis, from the earliest return to the latest call
//! of its ops: if that is a forward interval, the chain must cover it (and
//! such chains cannot overlap); if not, the chain fits at one instant, taken
//! as its latest call unless that falls inside a forward chain, then at that
//! chain's end. Chains are sorted by the bound their producer installs (the
//! fenced token, which only grows) and then by that time; inside a run, the
//! producer, the ops that need the value in call order, and the op that
//! replaces it. Ops that change nothing (failed cas, rejected fenced writes)
//! go into the latest gap real time allows where the model accepts them.
//! Never-returned ops are placed only when a value they write is needed.
//!
//! With a log, the ops in it are taken in log order and the completed ops
//! missing from it are inserted the same way.

use crate::model::{Interner, SeqModel};
use crate::search::{search, Limits, Outcome, Prepared};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// How the order was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Log,
    Values,
}

/// A verified linearization (op indices into the partition, in order; the
/// never-returned ops left out did not take effect) and the state after it.
pub(crate) struct Linearization<S> {
    pub order: Vec<u32>,
    pub state: S,
    pub source: Source,
}

const NONE: u32 = u32::MAX;
/// The virtual producer of the initial value.
const INIT: u32 = u32::MAX - 1;
/// Gaps tried per inserted op before giving up on it.
const GAP_TRIES: usize = 32;

/// An op as text in a reason: its index in the checked slice.
fn name<I>(ops: &[Prepared<I>], i: u32) -> String {
    format!("op #{}", ops[i as usize].orig)
}

/// Builds and verifies a linearization of one partition (`ops` in call
/// order, values interned below `nvalues`). `log[i]` is op `i`'s place in
/// the resource's log, if any. `Err` says why no order could be built.
pub(crate) fn linearize<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    values: &Interner,
    log: Option<&[Option<u64>]>,
    deadline: Option<Instant>,
) -> Result<Linearization<M::State>, String> {
    let nvalues = values.len();
    let ctx = Ctx {
        model,
        ops,
        values,
        deadline,
    };
    let mut why_not_log = None;
    if let Some(log) = log.filter(|l| l.iter().any(Option::is_some)) {
        match plan_log(ops, log).and_then(|p| finish_widening(&ctx, &p)) {
            Ok((order, state)) => {
                return Ok(Linearization {
                    order,
                    state,
                    source: Source::Log,
                })
            }
            Err(e) => why_not_log = Some(e),
        }
    }
    match plan_values(model, ops, nvalues).and_then(|p| finish_widening(&ctx, &p)) {
        Ok((order, state)) => Ok(Linearization {
            order,
            state,
            source: Source::Values,
        }),
        Err(e) => Err(match why_not_log {
            Some(l) => format!("log order: {l}; values: {e}"),
            None => e,
        }),
    }
}

/// The state-changing ops in order, and the ops to insert where they fit.
struct Plan {
    skeleton: Vec<u32>,
    inserts: Vec<u32>,
}

fn plan_log<I>(ops: &[Prepared<I>], log: &[Option<u64>]) -> Result<Plan, String> {
    let mut logged: Vec<(u64, u32)> = Vec::new();
    let mut inserts = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match log.get(i).copied().flatten() {
            Some(seq) => logged.push((seq, i as u32)),
            None if op.pending => {}
            None if op.read_only => inserts.push(i as u32),
            None => {
                return Err(format!(
                    "{} changes the state but is not in the log",
                    name(ops, i as u32)
                ))
            }
        }
    }
    logged.sort_unstable();
    if let Some(w) = logged.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!(
            "{} and {} have the same log position {}",
            name(ops, w[0].1),
            name(ops, w[1].1),
            w[0].0
        ));
    }
    Ok(Plan {
        skeleton: logged.into_iter().map(|(_, i)| i).collect(),
        inserts,
    })
}

/// What one pass over the ops learns about the values.
struct Values {
    /// Ops that can produce each value (the initial state counts as one).
    nprod: Vec<u32>,
    /// The last of them (`INIT` for the initial state).
    producer: Vec<u32>,
    /// Some op that takes effect needs the value (or replaces it).
    needed: Vec<bool>,
    /// The op that ends the value's run by replacing it, if any.
    term: Vec<u32>,
}

fn plan_values<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    nvalues: usize,
) -> Result<Plan, String> {
    let n = ops.len();
    let init = model
        .state_value(&model.init())
        .ok_or("the model gives no value hints")?;
    let fits = |v: u32| (v as usize) < nvalues;
    if !fits(init) {
        return Err("the initial value is not interned".into());
    }
    let need = |i: usize| {
        let op = &ops[i];
        (!op.pending)
            .then(|| model.value_needed(&op.input))
            .flatten()
    };
    let mut vals = Values {
        nprod: vec![0; nvalues],
        producer: vec![NONE; nvalues],
        needed: vec![false; nvalues],
        term: vec![NONE; nvalues],
    };
    vals.nprod[init as usize] = 1;
    vals.producer[init as usize] = INIT;
    // Completed state-changing ops take effect (or try to), except those
    // whose effect is uncertain (a fenced write with an unknown outcome):
    // unless their value is needed, they go where they change nothing.
    let flexible = |o: &Prepared<M::Input>| {
        !o.pending
            && !o.read_only
            && model.value_produced(&o.input).is_some()
            && !model.definitely_produces(&o.input)
            && model.value_consumed(&o.input).is_none()
    };
    let mut eff: Vec<bool> = ops
        .iter()
        .map(|o| !o.pending && !o.read_only && !flexible(o))
        .collect();
    for i in 0..n {
        let op = &ops[i];
        if let Some(v) = model.value_produced(&op.input) {
            if !fits(v) {
                return Err("a produced value is not interned".into());
            }
            vals.nprod[v as usize] += 1;
            vals.producer[v as usize] = i as u32;
        }
        if let Some(u) = need(i) {
            if !fits(u) {
                return Err("a needed value is not interned".into());
            }
            vals.needed[u as usize] = true;
            // A checked op that needs `u` and installs a value (a successful
            // cas) ends the run of `u`.
            if model.value_produced(&op.input).is_some() {
                set_term(&mut vals, u, i as u32, ops)?;
            }
        }
    }
    // Producers of needed values take effect, and so does whatever they
    // replace (a never-returned cas whose value is read consumed its
    // expected value).
    let mut work: Vec<u32> = (0..nvalues as u32)
        .filter(|&v| vals.needed[v as usize])
        .collect();
    while let Some(v) = work.pop() {
        let k = vals.nprod[v as usize];
        if k != 1 {
            return Err(format!(
                "a value that takes effect ({}) has {k} producers",
                describe(v)
            ));
        }
        let p = vals.producer[v as usize];
        if p == INIT {
            continue;
        }
        eff[p as usize] = true;
        let op = &ops[p as usize];
        if need(p as usize).is_some() {
            continue; // its run was linked above
        }
        if let Some(u) = model.value_consumed(&op.input) {
            if !fits(u) {
                return Err("a consumed value is not interned".into());
            }
            set_term(&mut vals, u, p, ops)?;
            if !vals.needed[u as usize] {
                vals.needed[u as usize] = true;
                work.push(u);
            }
        }
    }
    let skeleton = chains(model, ops, &vals, &eff)?;
    let inserts = (0..n as u32)
        .filter(|&i| {
            let op = &ops[i as usize];
            let changes_nothing = op.read_only || (flexible(op) && !eff[i as usize]);
            !op.pending && changes_nothing && need(i as usize).is_none()
        })
        .collect();
    Ok(Plan { skeleton, inserts })
}

fn describe(v: u32) -> String {
    format!("value id {v}")
}

fn set_term<I>(vals: &mut Values, u: u32, x: u32, ops: &[Prepared<I>]) -> Result<(), String> {
    let t = &mut vals.term[u as usize];
    if *t != NONE && *t != x {
        return Err(format!(
            "{} and {} both replace the same value ({})",
            name(ops, *t),
            name(ops, x),
            describe(u)
        ));
    }
    *t = x;
    Ok(())
}

/// One chain of runs: its ops in order and where it sits in time.
struct Chain {
    ops: Vec<u32>,
    /// Sort key: bound, then 0 for the initial value's chain, then time.
    bound: i64,
    initial: bool,
    /// Earliest return and latest call of its ops (shifted by one so the
    /// initial value's producer can sit at 0).
    lo: u64,
    hi: u64,
    at: (u64, u64),
}

fn shifted(t: u64) -> u64 {
    t.saturating_add(1)
}

/// Builds the chains of runs.
struct Builder<'a, M: SeqModel> {
    model: &'a M,
    ops: &'a [Prepared<M::Input>],
    vals: &'a Values,
    /// The ops that need each value (checked, completed), other than the op
    /// that replaces it, in call order.
    members: Vec<Vec<u32>>,
    placed: Vec<bool>,
    started: Vec<bool>,
}

impl<M: SeqModel> Builder<'_, M> {
    /// The value whose run op `x` starts (it is the value's only producer).
    fn starts(&self, x: u32) -> Option<u32> {
        let v = self.model.value_produced(&self.ops[x as usize].input)?;
        (self.vals.needed[v as usize] && self.vals.producer[v as usize] == x).then_some(v)
    }

    fn add(&mut self, c: &mut Chain, i: u32) {
        let op = &self.ops[i as usize];
        self.placed[i as usize] = true;
        c.ops.push(i);
        c.lo = c.lo.min(if op.pending {
            u64::MAX
        } else {
            shifted(op.ret)
        });
        c.hi = c.hi.max(shifted(op.call));
    }

    /// The chain that starts with `head` (`INIT`: the initial value).
    fn chain(&mut self, head: u32, first_value: Option<u32>) -> Chain {
        let mut c = Chain {
            ops: Vec::new(),
            bound: i64::MIN,
            initial: head == INIT,
            lo: u64::MAX,
            hi: 0,
            at: (0, 0),
        };
        if head == INIT {
            c.lo = 0;
        } else {
            c.bound = self
                .model
                .bound_produced(&self.ops[head as usize].input)
                .unwrap_or(i64::MIN);
            self.add(&mut c, head);
        }
        let mut v = first_value;
        while let Some(val) = v {
            self.started[val as usize] = true;
            let members = std::mem::take(&mut self.members[val as usize]);
            for &m in &members {
                self.add(&mut c, m);
            }
            let t = self.vals.term[val as usize];
            v = None;
            if t != NONE {
                self.add(&mut c, t);
                v = self.starts(t).filter(|&w| !self.started[w as usize]);
            }
        }
        c
    }
}

/// Groups the ops that take effect into chains of runs, places the chains
/// in time and returns them concatenated.
fn chains<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    vals: &Values,
    eff: &[bool],
) -> Result<Vec<u32>, String> {
    let n = ops.len();
    let nvalues = vals.needed.len();
    let need = |i: usize| {
        let op = &ops[i];
        (!op.pending)
            .then(|| model.value_needed(&op.input))
            .flatten()
    };
    let mut b = Builder {
        model,
        ops,
        vals,
        members: vec![Vec::new(); nvalues],
        placed: vec![false; n],
        started: vec![false; nvalues],
    };
    for i in 0..n {
        if let Some(u) = need(i) {
            if vals.term[u as usize] != i as u32 {
                b.members[u as usize].push(i as u32);
            }
        }
    }
    let mut out: Vec<Chain> = Vec::new();
    let init = model.state_value(&model.init()).unwrap_or(0);
    if vals.needed[init as usize] && vals.producer[init as usize] == INIT {
        out.push(b.chain(INIT, Some(init)));
    }
    for x in 0..n as u32 {
        let xi = x as usize;
        // Ops that need a value go with its run, and so do the ops that
        // replace one.
        if !eff[xi] || b.placed[xi] || need(xi).is_some() {
            continue;
        }
        let consumed = model.value_consumed(&ops[xi].input);
        if consumed.is_some_and(|u| vals.term[u as usize] == x) {
            continue;
        }
        let first = b.starts(x);
        out.push(b.chain(x, first));
    }
    if let Some(i) = (0..n).find(|&i| (eff[i] || need(i).is_some()) && !b.placed[i]) {
        return Err(format!(
            "{} belongs to a run that nothing starts (a cycle of cas, or a value needed or \
             replaced that is not written)",
            name(ops, i as u32)
        ));
    }
    place_in_time(&mut out);
    out.sort_by_key(|c| (c.bound, !c.initial, c.at, c.ops.first().copied()));
    Ok(out.into_iter().flat_map(|c| c.ops).collect())
}

/// Forward chains (earliest return before latest call) cover that interval;
/// the others sit at one instant: their latest call, or the end of the
/// forward chain that instant falls inside.
fn place_in_time(chains: &mut [Chain]) {
    let mut forward: Vec<(u64, u64)> = chains
        .iter()
        .filter(|c| c.lo < c.hi)
        .map(|c| (c.lo, c.hi))
        .collect();
    forward.sort_unstable();
    for c in chains.iter_mut() {
        if c.lo < c.hi {
            c.at = (c.lo, c.hi);
            continue;
        }
        let mut p = c.hi;
        let k = forward.partition_point(|f| f.0 < p);
        if let Some(&(_, end)) = k.checked_sub(1).map(|k| &forward[k]) {
            if p < end {
                p = end;
            }
        }
        c.at = (p, p);
    }
}

/// What `finish` works with.
struct Ctx<'a, M: SeqModel> {
    model: &'a M,
    ops: &'a [Prepared<M::Input>],
    values: &'a Interner,
    deadline: Option<Instant>,
}

/// Skeleton positions searched on each side of an op that fits no gap.
const BLOCK_MARGIN: usize = 48;
/// Configurations a block search may visit before the witness path gives
/// up on the partition (a valid block needs about one per op).
const BLOCK_CONFIGS: u64 = 200_000;

/// Never-returned ops called before a block that it may still place.
const PENDING_BEFORE: usize = 16;

/// Block widths tried: a block whose search ends in another state than the
/// witnesses (or finds no order) is retried wider, taking in the ops after
/// it that pin its end state.
const BLOCK_WIDENINGS: u32 = 4;

/// `finish` with blocks of growing width.
fn finish_widening<M: SeqModel>(ctx: &Ctx<M>, plan: &Plan) -> Result<(Vec<u32>, M::State), String> {
    let mut last = String::new();
    for w in 0..BLOCK_WIDENINGS {
        match finish(ctx, plan, BLOCK_MARGIN << (2 * w)) {
            Ok(r) => return Ok(r),
            Err(Fail::Widen(e)) => last = e,
            Err(Fail::Final(e)) => return Err(e),
        }
    }
    Err(last)
}

/// Why `finish` failed: for good, or in a searched block (a wider one may
/// succeed).
enum Fail {
    Final(String),
    Widen(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Final(s)
    }
}

/// Replays the skeleton, inserts the other ops where they fit, searches
/// the blocks around the ops that fit nowhere (the residue the witnesses
/// do not order), and verifies the whole order (real time, model steps,
/// every completed op once).
fn finish<M: SeqModel>(
    ctx: &Ctx<M>,
    plan: &Plan,
    margin: usize,
) -> Result<(Vec<u32>, M::State), Fail> {
    let (model, ops) = (ctx.model, ctx.ops);
    let sk = &plan.skeleton;
    let mut states = Vec::with_capacity(sk.len() + 1);
    states.push(model.init());
    for (k, &i) in sk.iter().enumerate() {
        if k & 0xFFFF == 0 && ctx.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Fail::Final("time budget ran out while ordering".into()));
        }
        let s = model
            .step(&states[k], &ops[i as usize].input)
            .ok_or_else(|| format!("the model rejects {} at its witnessed place", name(ops, i)))?;
        states.push(s);
    }
    // Gap g lies before skeleton[g]; an op fits there in real time iff no
    // op before it was called after it returned (prefix max of calls) and
    // no op after it returned before it was called (suffix min of returns).
    let m = sk.len();
    let mut pmc = vec![0u64; m + 1];
    for g in 0..m {
        pmc[g + 1] = pmc[g].max(ops[sk[g] as usize].call);
    }
    let mut smr = vec![u64::MAX; m + 1];
    for g in (0..m).rev() {
        smr[g] = smr[g + 1].min(ops[sk[g] as usize].ret);
    }
    let mut placed: Vec<(u32, u64, u32)> = Vec::with_capacity(plan.inserts.len());
    // Blocks [a, b) of the skeleton to search, with the ops that fit nowhere.
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut stuck: Vec<(usize, u32)> = Vec::new();
    // Inserts come in call order; one must not go before an earlier insert
    // that returned before it was called: `floor` is the latest gap taken
    // by those (a min-heap by return time yields them).
    let mut returned: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        Default::default();
    let mut floor = 0usize;
    for &y in &plan.inserts {
        let op = &ops[y as usize];
        while let Some(&std::cmp::Reverse((r, g))) = returned.peek() {
            if r >= op.call {
                break;
            }
            floor = floor.max(g);
            returned.pop();
        }
        let hi = pmc.partition_point(|&c| c <= op.ret);
        let lo = smr.partition_point(|&r| r < op.call);
        if hi == 0 || lo > hi - 1 {
            return Err(format!("real time leaves no place for {}", name(ops, y)).into());
        }
        let hi = hi - 1;
        if floor > hi {
            blocks.push((lo.saturating_sub(margin), (hi + margin).min(m)));
            stuck.push((lo, y));
            returned.push(std::cmp::Reverse((op.ret, hi)));
            continue;
        }
        let lo = lo.max(floor);
        let tries = std::iter::once(hi)
            .chain(std::iter::once(lo))
            .chain((lo..hi).rev().take(GAP_TRIES));
        match tries.into_iter().find(|&g| {
            model
                .step(&states[g], &op.input)
                .is_some_and(|ns| ns == states[g])
        }) {
            Some(g) => {
                placed.push((g as u32, op.call, y));
                returned.push(std::cmp::Reverse((op.ret, g)));
            }
            None => {
                // Searched with the skeleton around it; later ops that it
                // precedes in real time go no earlier than its last gap.
                blocks.push((lo.saturating_sub(margin), (hi + margin).min(m)));
                stuck.push((lo, y));
                returned.push(std::cmp::Reverse((op.ret, hi)));
            }
        }
    }
    let had_blocks = !blocks.is_empty();
    placed.sort_unstable();
    stuck.sort_unstable();
    let mut in_skeleton = vec![false; ops.len()];
    for &x in sk {
        in_skeleton[x as usize] = true;
    }
    let left_out: Vec<u32> = (0..ops.len() as u32)
        .filter(|&i| ops[i as usize].pending && !in_skeleton[i as usize])
        .collect();
    let layout = Layout {
        sk,
        pmc: &pmc,
        states: &states,
        placed: &placed,
        stuck: &stuck,
        left_out: &left_out,
    };
    let starts = search_blocks(ctx, &layout, blocks, margin).map_err(Fail::Widen)?;
    drop(states);
    // Inserts inside a searched block are in its order already.
    let mut spans: Vec<(usize, usize)> = starts.iter().map(|(&a, &(b, _))| (a, b)).collect();
    spans.sort_unstable();
    for p in placed.iter_mut() {
        let g = p.0 as usize;
        let k = spans.partition_point(|&(a, _)| a < g);
        if k.checked_sub(1).is_some_and(|k| g < spans[k].1) {
            p.0 = u32::MAX;
        }
    }
    placed.sort_unstable();
    let mut order = Vec::with_capacity(m + placed.len());
    let mut it = placed.into_iter().peekable();
    let mut g = 0;
    // Up to g == m: a block may start at the gap after the last op.
    while g <= m {
        while let Some(&(pg, _, y)) = it.peek() {
            if pg as usize > g {
                break;
            }
            order.push(y);
            it.next();
        }
        if let Some((b, border)) = starts.get(&g) {
            order.extend_from_slice(border);
            g = (*b).max(g + 1);
            continue;
        }
        if g < m {
            order.push(sk[g]);
        }
        g += 1;
    }
    order.extend(it.filter(|p| p.0 != u32::MAX).map(|(_, _, y)| y));
    let state = verify(model, ops, &order).map_err(|e| {
        if had_blocks {
            Fail::Widen(e)
        } else {
            Fail::Final(e)
        }
    })?;
    Ok((order, state))
}

/// The skeleton, its replayed states and the inserts' gaps, for the blocks.
struct Layout<'a, S> {
    sk: &'a [u32],
    pmc: &'a [u64],
    states: &'a [S],
    /// `(gap, call, op)`, sorted.
    placed: &'a [(u32, u64, u32)],
    /// `(first gap, op)` of the ops that fit no gap, sorted.
    stuck: &'a [(usize, u32)],
    /// Never-returned ops left out of the skeleton, in call order.
    left_out: &'a [u32],
}

/// The ops of block [a, b): skeleton [a, b), inserts in gaps (a, b), the
/// ops that fit nowhere whose first gap is in it, and the never-returned
/// ops left out that were called while they ran (and a few just before:
/// a failed cas can be the only sign that one took effect).
fn block_ops<M: SeqModel>(ctx: &Ctx<M>, l: &Layout<M::State>, a: usize, b: usize) -> Vec<u32> {
    let mut mb: Vec<u32> = l.sk[a..b].to_vec();
    let from = l.placed.partition_point(|p| (p.0 as usize) <= a);
    let to = l.placed.partition_point(|p| (p.0 as usize) < b);
    mb.extend(l.placed[from..to.max(from)].iter().map(|p| p.2));
    let from = l.stuck.partition_point(|p| p.0 < a);
    // The gap after the last op belongs to the last block.
    let to = if b == l.sk.len() {
        l.stuck.len()
    } else {
        l.stuck.partition_point(|p| p.0 < b)
    };
    mb.extend(l.stuck[from..to.max(from)].iter().map(|p| p.1));
    let ops = ctx.ops;
    let tmin = mb.iter().map(|&i| ops[i as usize].call).min().unwrap_or(0);
    let tmax = mb
        .iter()
        .map(|&i| &ops[i as usize])
        .map(|o| if o.pending { o.call } else { o.ret })
        .max()
        .unwrap_or(0);
    let from = l.left_out.partition_point(|&i| ops[i as usize].call < tmin);
    let to = l
        .left_out
        .partition_point(|&i| ops[i as usize].call <= tmax);
    mb.extend_from_slice(&l.left_out[from.saturating_sub(PENDING_BEFORE)..to.max(from)]);
    mb.sort_unstable_by_key(|&i| (ops[i as usize].call, i));
    mb
}

/// Searches block [a, b) from the state before it. Never-returned ops of
/// the skeleton took effect (something after them needs what they wrote):
/// the search must place them, by the time the skeleton did (after every op
/// called before them there), or it could put them last.
fn search_block<M: SeqModel>(
    ctx: &Ctx<M>,
    l: &Layout<M::State>,
    a: usize,
    b: usize,
) -> Option<Vec<u32>> {
    let idx = block_ops(ctx, l, a, b);
    let forced: std::collections::HashMap<u32, u64> = (a..b)
        .filter(|&g| ctx.ops[l.sk[g] as usize].pending)
        .map(|g| (l.sk[g], l.pmc[g + 1]))
        .collect();
    let block: Vec<Prepared<M::Input>> = idx
        .iter()
        .map(|&i| {
            let mut p = ctx.ops[i as usize].clone();
            if let Some(&by) = forced.get(&i) {
                p.pending = false;
                p.ret = by.max(p.call);
            }
            p
        })
        .collect();
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        deadline: ctx.deadline,
        cancel: &cancel,
        known_invalid: None,
        max_configs: Some(BLOCK_CONFIGS),
    };
    match search(ctx.model, &block, ctx.values, l.states[a].clone(), &limits).0 {
        Outcome::Ok { order } => Some(order.iter().map(|&j| idx[j as usize]).collect()),
        _ => None,
    }
}

/// Where the skeleton after a searched block first fails from the block's
/// end state (`None`: it fits, up to where the states agree again).
fn diverges<M: SeqModel>(
    ctx: &Ctx<M>,
    l: &Layout<M::State>,
    a: usize,
    b: usize,
    order: &[u32],
) -> Option<usize> {
    let mut st = l.states[a].clone();
    for &i in order {
        st = ctx.model.step(&st, &ctx.ops[i as usize].input)?;
    }
    for c in b..l.sk.len() {
        if st == l.states[c] {
            return None;
        }
        match ctx.model.step(&st, &ctx.ops[l.sk[c] as usize].input) {
            Some(x) => st = x,
            None => return Some(c),
        }
    }
    None
}

/// Merges the blocks around the ops that fit no gap and searches each from
/// the state before it, widening a block to the right while the skeleton
/// after it does not fit its end state. Returns, per block start, its end
/// and its order; the inserts taken into a block get gap `u32::MAX` so they
/// are not placed again.
fn search_blocks<M: SeqModel>(
    ctx: &Ctx<M>,
    l: &Layout<M::State>,
    blocks: Vec<(usize, usize)>,
    margin: usize,
) -> Result<std::collections::HashMap<usize, (usize, Vec<u32>)>, String> {
    let mut out = std::collections::HashMap::new();
    let mut blocks = blocks;
    blocks.sort_unstable();
    let m = l.sk.len();
    let mut k = 0;
    while k < blocks.len() {
        let (a, mut b) = blocks[k];
        let mut done = None;
        for _ in 0..BLOCK_WIDENINGS {
            while k + 1 < blocks.len() && blocks[k + 1].0 <= b {
                b = b.max(blocks[k + 1].1);
                blocks.remove(k + 1);
            }
            let Some(order) = search_block(ctx, l, a, b) else {
                return Err(format!(
                    "the search found no order for the ops around {} that the witnesses leave open",
                    name(ctx.ops, l.sk.get(a).copied().unwrap_or(0))
                ));
            };
            match diverges(ctx, l, a, b, &order) {
                None => {
                    done = Some(order);
                    break;
                }
                Some(c) => b = (c + margin).min(m),
            }
        }
        let order = done.ok_or_else(|| {
            format!(
                "the ops after the searched block around {} do not fit its end state",
                name(ctx.ops, l.sk.get(a).copied().unwrap_or(0))
            )
        })?;
        out.insert(a, (b, order));
        blocks[k] = (a, b);
        k += 1;
    }
    Ok(out)
}

/// Checks that `order` is a linearization: every completed op exactly once
/// (never-returned ops at most once), no op placed before one that returned
/// before it was called, and every step accepted by the model. Returns the
/// final state.
pub(crate) fn verify<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    order: &[u32],
) -> Result<M::State, String> {
    let mut seen = vec![false; ops.len()];
    for &i in order {
        let s = seen.get_mut(i as usize).ok_or("an op index out of range")?;
        if *s {
            return Err(format!("{} placed twice", name(ops, i)));
        }
        *s = true;
    }
    if let Some(i) = (0..ops.len()).find(|&i| !ops[i].pending && !seen[i]) {
        return Err(format!("{} was not placed", name(ops, i as u32)));
    }
    let mut min_ret = u64::MAX;
    let mut min_op = NONE;
    for &i in order.iter().rev() {
        let op = &ops[i as usize];
        if op.call > min_ret {
            return Err(format!(
                "{} returned before {} was called, but the witnessed order puts it after",
                name(ops, min_op),
                name(ops, i)
            ));
        }
        if op.ret < min_ret {
            min_ret = op.ret;
            min_op = i;
        }
    }
    let mut state = model.init();
    for &i in order {
        state = model
            .step(&state, &ops[i as usize].input)
            .ok_or_else(|| format!("the model rejects {} at its witnessed place", name(ops, i)))?;
    }
    Ok(state)
}
