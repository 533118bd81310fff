//! Wing & Gong / Lowe just-in-time linearization search over one partition.
//!
//! Configuration representation: ops are numbered in call order and `p` is
//! the first returned op not yet linearized. The linearized returned ops are
//! then "all before `p`" plus a bitset of those in `(p, max]`, relative to
//! `p`. JIT linearization only linearizes ops that overlap the first
//! unlinearized returned op, so that bitset spans the window of concurrent
//! ops rather than the whole history (Porcupine keeps a bitset over the whole
//! partition per configuration, which is quadratic in the history length).
//! Never-returned ops that were linearized are kept apart as a hash-consed
//! set id (see `Memo`). The memo hash is a Zobrist hash of the linearized
//! returned ops (xor of per-op words, O(1) per step) mixed with the state's
//! hash; entries are compared exactly on hash match.
//!
//! Reductions on top of the plain search, each argued where it is applied:
//! greedy read-only ops, dead-value and monotone-bound cuts (`Pruner`,
//! `Bounds`), dominance between sets of linearized never-returned ops
//! (`Memo`), and "a never-returned op must be followed by an op that depends
//! on it".

mod memo;
mod prune;

use crate::model::{Interner, SeqModel};
use memo::{DSets, Memo};
use prune::{Bits, Bounds, Pruner};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One op of a partition, ready for the search.
#[derive(Clone, Debug)]
pub(crate) struct Prepared<I> {
    pub input: I,
    pub call: u64,
    /// `u64::MAX` for pending ops.
    pub ret: u64,
    pub pending: bool,
    pub read_only: bool,
    /// Index of the op in the caller's slice.
    pub orig: usize,
}

pub(crate) enum Outcome<S> {
    /// Linearizable; `order` is the linearization found (indices into the
    /// partition; never-returned ops left out did not take effect).
    Ok {
        order: Vec<u32>,
    },
    /// `best` is the deepest linearization reached (indices into the
    /// partition, in linearization order) and `state` the state after it.
    Illegal {
        best: Vec<u32>,
        state: S,
    },
    Unknown,
    /// Only with [`Limits::known_invalid`]: the search stopped before
    /// exhausting the alternatives; `best` and `state` as for `Illegal`.
    GaveUp {
        best: Vec<u32>,
        state: S,
    },
}

/// When the search stops early.
pub(crate) struct Limits<'a> {
    pub deadline: Option<Instant>,
    /// Set when another partition failed.
    pub cancel: &'a AtomicBool,
    /// The partition is already proved not linearizable (`refute.rs`) and
    /// the search only looks for a long linearizable prefix for the
    /// counterexample. The depth-first search dives to near the violation
    /// first; what follows is the exhaustive part, which can take
    /// exponential time and rarely gets much deeper. So it stops once it
    /// has visited this many configurations since it reached the deepest
    /// prefix so far (or at the deadline or on cancel), returning `GaveUp`
    /// with that prefix.
    pub known_invalid: Option<u64>,
    /// Give up (`Unknown`) past this many configurations: the witness path
    /// searches small blocks this way and prefers falling back to running
    /// into an exponential corner.
    pub max_configs: Option<u64>,
}

pub(crate) struct SearchStats {
    pub visited: u64,
}

const NIL: u32 = u32::MAX;
/// Ops per partition that u32 node and op indices can address.
pub(crate) const MAX_PARTITION: usize = (u32::MAX / 2 - 2) as usize;

#[inline]
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[inline]
fn zobrist(i: u32) -> u64 {
    splitmix(u64::from(i) ^ 0x5851_F42D_4C95_7F2D)
}

fn state_hash<S: Hash>(s: &S) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    s.hash(&mut h);
    h.finish()
}

struct Frame<S> {
    op: u32,
    prev_state: S,
    prev_p: u32,
    prev_hi1: u32,
    prev_d: u32,
    /// Scan pass the op was found in (0: wanted never-returned ops,
    /// 1: returned ops, 2: other never-returned ops) and that pass's bound.
    pass: u8,
    limit: u64,
    forced: bool,
}

struct Links {
    next: Vec<u32>,
    prev: Vec<u32>,
}

impl Links {
    #[inline]
    fn unlink(&mut self, x: u32) {
        if x == NIL {
            return;
        }
        let n = self.next[x as usize];
        let p = self.prev[x as usize];
        self.next[p as usize] = n;
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }
    #[inline]
    fn insert_after(&mut self, x: u32, y: u32) {
        let n = self.next[x as usize];
        self.prev[y as usize] = x;
        self.next[y as usize] = n;
        if n != NIL {
            self.prev[n as usize] = y;
        }
        self.next[x as usize] = y;
    }
    #[inline]
    fn relink(&mut self, x: u32) {
        if x == NIL {
            return;
        }
        let n = self.next[x as usize];
        let p = self.prev[x as usize];
        self.next[p as usize] = x;
        if n != NIL {
            self.prev[n as usize] = x;
        }
    }
}

/// Time of the earliest return among remaining returned ops: only ops
/// called by then may be linearized next.
fn first_return<I>(
    links: &Links,
    head_c: u32,
    node_is_call: &[bool],
    node_op: &[u32],
    ops: &[Prepared<I>],
) -> u64 {
    let mut k = links.next[head_c as usize];
    while k != NIL {
        if !node_is_call[k as usize] {
            return ops[node_op[k as usize] as usize].ret;
        }
        k = links.next[k as usize];
    }
    u64::MAX
}

/// Checks one partition from state `init`; `ops` must be sorted by call time.
pub(crate) fn search<M: SeqModel>(
    model: &M,
    ops: &[Prepared<M::Input>],
    values: &Interner,
    init: M::State,
    limits: &Limits,
) -> (Outcome<M::State>, SearchStats) {
    let n = ops.len();
    debug_assert!(n <= MAX_PARTITION);
    // Events of returned ops in time order; at equal timestamps calls come
    // first, so ops that touch at an instant count as concurrent. Calls of
    // never-returned ops go in a second list: many of them stay undecided
    // for the whole search, and walking past them on every scan of a single
    // list made the search quadratic.
    let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        if !op.pending {
            events.push((op.call, false, i as u32));
            events.push((op.ret, true, i as u32));
        }
    }
    events.sort_unstable();
    let m = events.len();
    let npend = n - m / 2;
    let total = m + npend;
    let head_c = total as u32;
    let head_p = head_c + 1;
    let mut node_op = vec![0u32; total];
    let mut node_is_call = vec![true; total];
    let mut call_node = vec![NIL; n];
    let mut ret_node = vec![NIL; n];
    for (k, &(_, is_ret, i)) in events.iter().enumerate() {
        node_op[k] = i;
        node_is_call[k] = !is_ret;
        if is_ret {
            ret_node[i as usize] = k as u32;
        } else {
            call_node[i as usize] = k as u32;
        }
    }
    drop(events);
    let mut next = vec![NIL; total + 2];
    let mut prev = vec![NIL; total + 2];
    for k in 0..m {
        next[k] = if k + 1 < m { (k + 1) as u32 } else { NIL };
        prev[k] = if k == 0 { head_c } else { (k - 1) as u32 };
    }
    next[head_c as usize] = if m > 0 { 0 } else { NIL };
    let nvalues = values.len();
    // Interchangeable never-returned ops (same shape, fresh values) are only
    // placed in call order: `sym_prev[i]` must be linearized before `i`.
    // By symmetry any linearization can be rewritten to use them that way,
    // and without it every such op is a separate choice at every step.
    let mut sym_prev = vec![NIL; n];
    let mut sym_next = vec![NIL; n];
    {
        let mut last: rustc_hash::FxHashMap<u64, u32> = Default::default();
        for (i, op) in ops.iter().enumerate() {
            if !op.pending {
                continue;
            }
            let (Some(k), Some(v)) = (model.shape_key(&op.input), model.value_produced(&op.input))
            else {
                continue;
            };
            if !values.is_fresh(v) {
                continue;
            }
            if let Some(prev) = last.insert(k, i as u32) {
                sym_prev[i] = prev;
                sym_next[prev as usize] = i as u32;
            }
        }
    }
    // Pending ops are already in call order; an interchangeable op joins
    // the list only once its predecessor in its class is placed.
    let mut k = m;
    let mut last = head_p;
    for (i, op) in ops.iter().enumerate() {
        if op.pending {
            node_op[k] = i as u32;
            call_node[i] = k as u32;
            if sym_prev[i] == NIL {
                prev[k] = last;
                next[last as usize] = k as u32;
                last = k as u32;
            }
            k += 1;
        }
    }
    let mut links = Links { next, prev };

    let mut plin = vec![false; n];
    // Earliest return among remaining returned ops at the current
    // configuration: never-returned ops called after it are not candidates.
    let mut limit: u64;

    let completed = ops.iter().filter(|o| !o.pending).count();
    let mut lin_completed = 0usize;
    let mut lin = Bits::new(n);
    // `done` = linearized or pending; its first zero is `p`.
    let mut done = Bits::new(n);
    for (i, op) in ops.iter().enumerate() {
        if op.pending {
            done.set(i as u32);
        }
    }
    let mut dsets = DSets::new();
    let mut d_id: u32 = 0;
    // Scan order at each configuration: pass 0 never-returned ops whose
    // value a remaining op needs (they most likely took effect), pass 1
    // returned ops, pass 2 the other never-returned ops. Trying the latter
    // last means configurations leaving them out tend to be visited first
    // and then dominate the ones that place them (see `Memo`).
    let mut pass: u8 = 0;
    // Guard bit so next_zero always terminates.
    done.clear(n as u32);
    let mut p = done.next_zero(0);
    let mut hi1: u32 = 0;
    let mut zob: u64 = 0;

    let mut state = init;

    let need_of = |op: &Prepared<M::Input>| {
        if op.pending {
            None
        } else {
            model.value_needed(&op.input)
        }
    };
    let mut pruner = Pruner {
        enabled: model.state_value(&state).is_some(),
        need: vec![0; nvalues],
        prod: vec![0; nvalues],
        dead: 0,
    };
    if pruner.enabled {
        for op in ops {
            let (nd, pr) = (need_of(op), model.value_produced(&op.input));
            if nd.is_some_and(|v| v as usize >= nvalues)
                || pr.is_some_and(|v| v as usize >= nvalues)
            {
                pruner.enabled = false;
                break;
            }
            if let Some(v) = nd {
                pruner.need[v as usize] += 1;
            }
            if let Some(v) = pr {
                pruner.prod[v as usize] += 1;
            }
        }
        let cur = model.state_value(&state);
        pruner.dead = (0..nvalues as u32)
            .filter(|&v| pruner.is_dead(v, cur))
            .count() as u32;
    }
    // Values already dead at the start (e.g. a read of a never-written
    // value) must not stop the search at once: the counterexample should
    // show how far the history does get.
    let dead_base = pruner.dead;

    let mut bounds = {
        let needs: Vec<Option<i64>> = ops
            .iter()
            .map(|op| {
                if op.pending {
                    None
                } else {
                    model.bound_needed(&op.input)
                }
            })
            .collect();
        let mut vals: Vec<i64> = needs.iter().flatten().copied().collect();
        vals.sort_unstable();
        vals.dedup();
        let mut cnt = vec![0u32; vals.len()];
        let mut nonzero = Bits::new(vals.len());
        let rank: Vec<u32> = needs
            .iter()
            .map(|nd| match nd {
                Some(b) => {
                    let r = vals.partition_point(|v| v < b);
                    cnt[r] += 1;
                    nonzero.set(r as u32);
                    r as u32
                }
                None => u32::MAX,
            })
            .collect();
        Bounds {
            rank,
            cnt,
            nonzero,
            minr: 0,
            vals,
        }
    };
    let bound_base = bounds.dead(model.state_bound(&state));

    let mut memo: Memo<M::State> = Memo::with_capacity(n + 16);
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut key: Vec<u32> = Vec::new();

    let mut best: Vec<u32> = Vec::new();
    let mut best_state = state.clone();
    // Configurations visited when `best` last grew.
    let mut visited_at_best = 0u64;
    let mut stable = 0usize;

    limit = first_return(&links, head_c, &node_is_call, &node_op, ops);
    let mut node = links.next[head_p as usize];
    let mut iter: u64 = 0;
    // Model steps taken: the deadline is polled every 1024 of them (and
    // every 4096 scan iterations), so the search stops within about a
    // millisecond of it however the time is spent.
    let mut steps: u64 = 0;

    macro_rules! stats {
        () => {
            SearchStats {
                visited: memo.len() as u64,
            }
        };
    }

    'outer: loop {
        iter += 1;
        if iter & 0xFFF == 0 || steps >= 0x400 {
            steps = 0;
            let out_of_patience = limits
                .known_invalid
                .is_some_and(|p| memo.len() as u64 > p + visited_at_best);
            let out_of_time = limits.cancel.load(Ordering::Relaxed)
                || limits.deadline.is_some_and(|d| Instant::now() >= d)
                || limits.max_configs.is_some_and(|m| memo.len() as u64 > m);
            if out_of_patience || out_of_time {
                let outcome = if limits.known_invalid.is_some() {
                    Outcome::GaveUp {
                        best,
                        state: best_state,
                    }
                } else {
                    Outcome::Unknown
                };
                return (outcome, stats!());
            }
        }
        if lin_completed == completed {
            let order = stack.iter().map(|f| f.op).collect();
            return (Outcome::Ok { order }, stats!());
        }
        let is_candidate = if pass == 1 {
            if node == NIL || !node_is_call[node as usize] {
                pass = 2;
                node = links.next[head_p as usize];
                continue 'outer;
            }
            true
        } else if node != NIL && ops[node_op[node as usize] as usize].call <= limit {
            let qi = node_op[node as usize] as usize;
            let q = &ops[qi];
            debug_assert!(sym_prev[qi] == NIL || plin[sym_prev[qi] as usize]);
            // Pass 0 tries never-returned ops whose value some remaining op
            // needs (they most likely took effect), pass 2 the rest, which
            // are rarely needed; the order only affects speed.
            let wanted = pruner.enabled
                && model
                    .value_produced(&q.input)
                    .is_some_and(|v| pruner.need[v as usize] > 0);
            if wanted != (pass == 0) {
                node = links.next[node as usize];
                continue 'outer;
            }
            true
        } else if pass == 0 {
            pass = 1;
            node = links.next[head_c as usize];
            continue 'outer;
        } else {
            false
        };
        if is_candidate {
            let i = node_op[node as usize];
            let op = &ops[i as usize];
            steps += 1;
            let stepped = model.step(&state, &op.input).filter(|ns| {
                // A never-returned op that changes nothing here can be left
                // out of the linearization instead, so placing it would only
                // duplicate configurations.
                if op.pending && *ns == state {
                    return false;
                }
                // Right after a never-returned op q, only ops that depend on
                // q may follow: any linearization can be rearranged so that
                // each such q is immediately followed by an op that neither
                // commutes with it nor overwrites its effect (move q later
                // past independent ops, drop it when absorbed or last).
                // This keeps q from being tried at every point of its
                // unbounded window.
                if let Some(f) = stack.last() {
                    let q = &ops[f.op as usize];
                    if q.pending {
                        let dependent = match model.step(&f.prev_state, &op.input) {
                            None => true,
                            Some(alt) if alt == *ns => false,
                            Some(alt) => model.step(&alt, &q.input).is_none_or(|xq| xq != *ns),
                        };
                        if !dependent {
                            return false;
                        }
                    }
                }
                let (from, to) = (model.state_value(&state), model.state_value(ns));
                let (nd, pr) = (need_of(op), model.value_produced(&op.input));
                pruner.apply(nd, pr, from, to, false);
                bounds.remove(i);
                if pruner.dead > dead_base || (!bound_base && bounds.dead(model.state_bound(ns))) {
                    pruner.apply(nd, pr, to, from, true);
                    bounds.restore(i);
                    false
                } else {
                    true
                }
            });
            if let Some(new_state) = stepped {
                // Tentatively linearize i and build the configuration key.
                let prev_p = p;
                let prev_hi1 = hi1;
                let prev_d = d_id;
                if op.pending {
                    d_id = dsets.add(d_id, i);
                } else {
                    lin.set(i);
                    zob ^= zobrist(i);
                    done.set(i);
                    if i == p {
                        p = done.next_zero(p + 1);
                    }
                    hi1 = hi1.max(i + 1);
                }
                key.clear();
                if hi1 > p + 1 {
                    let start = p + 1;
                    let len = hi1 - start;
                    let words = len.div_ceil(32);
                    for k in 0..words {
                        let mut v = lin.get32(start + 32 * k);
                        if k == words - 1 && !len.is_multiple_of(32) {
                            v &= (1u32 << (len % 32)) - 1;
                        }
                        key.push(v);
                    }
                }
                let h = splitmix(zob ^ state_hash(&new_state));
                // The configuration right after a never-returned op carries
                // the obligation above, so it is not memoised; its parent and
                // children are.
                if op.pending || memo.insert(h, &new_state, p, &key, d_id, &dsets) {
                    let prev_state = std::mem::replace(&mut state, new_state);
                    stack.push(Frame {
                        op: i,
                        prev_state,
                        prev_p,
                        prev_hi1,
                        prev_d,
                        pass,
                        limit,
                        forced: op.read_only,
                    });
                    if !op.pending {
                        lin_completed += 1;
                    } else {
                        plin[i as usize] = true;
                    }
                    links.unlink(call_node[i as usize]);
                    links.unlink(ret_node[i as usize]);
                    let y = sym_next[i as usize];
                    if y != NIL {
                        // Insert y's call node in call order after i's old place.
                        let mut x = links.prev[call_node[i as usize] as usize];
                        loop {
                            let nx = links.next[x as usize];
                            if nx == NIL || node_op[nx as usize] > y {
                                break;
                            }
                            x = nx;
                        }
                        links.insert_after(x, call_node[y as usize]);
                    }
                    if stack.len() > best.len() {
                        best.truncate(stable);
                        best.extend(stack[stable..].iter().map(|f| f.op));
                        stable = stack.len();
                        best_state = state.clone();
                        visited_at_best = memo.len() as u64;
                    }
                    limit = first_return(&links, head_c, &node_is_call, &node_op, ops);
                    node = links.next[head_p as usize];
                    pass = 0;
                    continue 'outer;
                }
                // Seen before: undo.
                pruner.apply(
                    need_of(op),
                    model.value_produced(&op.input),
                    model.state_value(&new_state),
                    model.state_value(&state),
                    true,
                );
                bounds.restore(i);
                if !op.pending {
                    lin.clear(i);
                    zob ^= zobrist(i);
                    done.clear(i);
                }
                d_id = prev_d;
                p = prev_p;
                hi1 = prev_hi1;
                if op.read_only {
                    // A read-only op that fits now could be moved first in
                    // any completion, so if that configuration already failed
                    // the current one fails too.
                    node = NIL;
                    pass = 2;
                    continue 'outer;
                }
            }
            node = links.next[node as usize];
            continue 'outer;
        }
        // Backtrack: no candidate left before the first return.
        loop {
            let Some(f) = stack.pop() else {
                return (
                    Outcome::Illegal {
                        best,
                        state: best_state,
                    },
                    stats!(),
                );
            };
            stable = stable.min(stack.len());
            let i = f.op;
            let op = &ops[i as usize];
            pruner.apply(
                need_of(op),
                model.value_produced(&op.input),
                model.state_value(&state),
                model.state_value(&f.prev_state),
                true,
            );
            bounds.restore(i);
            state = f.prev_state;
            if !op.pending {
                lin.clear(i);
                zob ^= zobrist(i);
                done.clear(i);
                lin_completed -= 1;
            }
            plin[i as usize] = false;
            d_id = f.prev_d;
            p = f.prev_p;
            hi1 = f.prev_hi1;
            if sym_next[i as usize] != NIL {
                links.unlink(call_node[sym_next[i as usize] as usize]);
            }
            links.relink(ret_node[i as usize]);
            links.relink(call_node[i as usize]);
            if !f.forced {
                node = links.next[call_node[i as usize] as usize];
                pass = f.pass;
                limit = f.limit;
                continue 'outer;
            }
        }
    }
}
