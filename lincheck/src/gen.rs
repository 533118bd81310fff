//! Seeded history generator for tests and benchmarks.
//!
//! A simulated linearizable store: `clients` closed-loop clients issue ops
//! over `keys` keys; each op's latency is heavy-tailed (Pareto, capped) and
//! its effect happens at a random instant inside its interval, so the output
//! is linearizable by construction. Optionally some ops time out (no return,
//! and they take effect or not at random) and one stale read can be injected.

use crate::model::Model;
use crate::op::{Op, OpKind};
use serde_json::{json, Value};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, BufWriter, Write};
use std::path::Path;

#[derive(Clone, Debug)]
pub struct GenConfig {
    pub model: Model,
    pub ops: usize,
    pub clients: usize,
    pub keys: usize,
    pub seed: u64,
    /// Fraction of ops that never return (`return_ns: null`, `unknown: true`).
    pub timeout_rate: f64,
    /// Fraction of completed ops whose result is unknown (`unknown: true`).
    pub unknown_rate: f64,
    /// Fraction of reads (the rest are writes, and cas for kv).
    pub read_ratio: f64,
    /// Fraction of cas among non-reads (kv only).
    pub cas_ratio: f64,
    /// Median-ish latency in ns; the tail goes up to `max_latency_factor` times it.
    pub base_latency_ns: u64,
    pub max_latency_factor: f64,
    /// Inject one stale read of an overwritten value.
    pub inject_violation: bool,
}

impl GenConfig {
    pub fn new(model: Model, ops: usize, clients: usize, keys: usize, seed: u64) -> GenConfig {
        GenConfig {
            model,
            ops,
            clients: clients.max(1),
            keys: keys.max(1),
            seed,
            timeout_rate: 0.0,
            unknown_rate: 0.0,
            read_ratio: 0.5,
            cas_ratio: 0.3,
            base_latency_ns: 1_000,
            max_latency_factor: 100.0,
            inject_violation: false,
        }
    }
}

/// A generated history; `injected` is the index of the corrupted read.
#[derive(Clone, Debug)]
pub struct Generated {
    pub ops: Vec<Op>,
    pub injected: Option<usize>,
}

/// Small deterministic PRNG (splitmix64) so the crate needs no `rand`.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Cas,
}

struct Draft {
    client: usize,
    key: usize,
    kind: Kind,
    call: u64,
    ret: Option<u64>,
    /// When the op takes effect, if it does.
    lin: Option<u64>,
    unknown: bool,
}

pub fn generate(cfg: &GenConfig) -> Generated {
    let mut rng = Rng::new(cfg.seed);
    let base = cfg.base_latency_ns.max(1) as f64;
    let cap = cfg.max_latency_factor.max(1.0);
    let latency = |rng: &mut Rng| -> u64 {
        // Pareto(alpha = 1.5): most ops near `base`, a few up to `cap` times it.
        let x = (1.0 - rng.f64()).powf(-1.0 / 1.5).min(cap);
        (base * x) as u64 + 1
    };

    // Clients advance in global time order (earliest next call first).
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..cfg.clients)
        .map(|c| Reverse((rng.below(cfg.base_latency_ns + 1), c)))
        .collect();
    let mut drafts: Vec<Draft> = Vec::with_capacity(cfg.ops);
    while drafts.len() < cfg.ops {
        let Some(Reverse((t, c))) = heap.pop() else {
            break;
        };
        let key = rng.below(cfg.keys as u64) as usize;
        let kind = if rng.chance(cfg.read_ratio) {
            Kind::Read
        } else if cfg.model == Model::Kv && rng.chance(cfg.cas_ratio) {
            Kind::Cas
        } else {
            Kind::Write
        };
        let call = t;
        let lat = latency(&mut rng);
        let (ret, lin, unknown, next_t) = if rng.chance(cfg.timeout_rate) {
            // The client gives up; the op may still land, possibly late.
            let give_up = call + 20 * cfg.base_latency_ns.max(1);
            let lin = rng
                .chance(0.5)
                .then(|| call + rng.below(40 * cfg.base_latency_ns.max(1)));
            (None, lin, true, give_up)
        } else {
            let ret = call + lat;
            let lin = call + rng.below(lat + 1);
            let unknown = rng.chance(cfg.unknown_rate);
            (Some(ret), Some(lin), unknown, ret)
        };
        drafts.push(Draft {
            client: c,
            key,
            kind,
            call,
            ret,
            lin,
            unknown,
        });
        let think = rng.below(cfg.base_latency_ns / 2 + 1);
        heap.push(Reverse((next_t + think, c)));
    }

    // Apply effects in linearization order to compute outputs.
    let mut order: Vec<usize> = (0..drafts.len())
        .filter(|&i| drafts[i].lin.is_some())
        .collect();
    order.sort_by_key(|&i| (drafts[i].lin, i));
    let n = drafts.len();
    let mut args: Vec<Value> = vec![Value::Null; n];
    let mut outs: Vec<Value> = vec![Value::Null; n];
    let mut value: Vec<Value> = vec![Value::Null; cfg.keys];
    // Recent values per key feed cas guesses that sometimes miss.
    let mut prev_value: Vec<Value> = vec![Value::Null; cfg.keys];
    let mut max_token: Vec<Option<i64>> = vec![None; cfg.keys];
    let mut client_token: Vec<i64> = (1..=cfg.clients as i64).collect();
    let mut next_token: i64 = cfg.clients as i64 + 1;
    let mut next_value: u64 = 1;
    let mut took_effect = vec![false; n];
    for &i in &order {
        let d = &drafts[i];
        let k = d.key;
        match (cfg.model, d.kind) {
            (_, Kind::Read) => outs[i] = value[k].clone(),
            (Model::Kv, Kind::Write) => {
                let v = json!(next_value);
                next_value += 1;
                args[i] = v.clone();
                prev_value[k] = std::mem::replace(&mut value[k], v);
                took_effect[i] = true;
            }
            (Model::Kv, Kind::Cas) => {
                let expected = if rng.chance(0.6) {
                    value[k].clone()
                } else {
                    prev_value[k].clone()
                };
                let new = json!(next_value);
                next_value += 1;
                args[i] = json!([expected, new]);
                let ok = expected == value[k];
                if ok {
                    prev_value[k] = std::mem::replace(&mut value[k], new);
                    took_effect[i] = true;
                }
                outs[i] = json!(ok);
            }
            (Model::Fenced, _) => {
                // Mostly-growing tokens: a client sometimes takes a fresh
                // lease; clients on old leases get rejected.
                let c = d.client;
                if rng.chance(0.05) {
                    client_token[c] = next_token;
                    next_token += 1;
                }
                let token = client_token[c];
                let v = json!(next_value);
                next_value += 1;
                args[i] = json!([v, token]);
                let ok = max_token[k].is_none_or(|m| token >= m);
                if ok {
                    value[k] = v;
                    max_token[k] = Some(token);
                    took_effect[i] = true;
                }
                outs[i] = json!(ok);
            }
        }
    }
    // Ops that never took effect still need well-formed args.
    for (i, d) in drafts.iter().enumerate() {
        if d.lin.is_none() && d.kind != Kind::Read {
            let v = json!(next_value);
            next_value += 1;
            args[i] = match (cfg.model, d.kind) {
                (Model::Kv, Kind::Write) => v,
                (Model::Kv, _) => json!([Value::Null, v]),
                (Model::Fenced, _) => json!([v, client_token[d.client]]),
            };
        }
    }

    let mut ops: Vec<Op> = drafts
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let kind = match d.kind {
                Kind::Read => OpKind::Read,
                Kind::Write => OpKind::Write,
                Kind::Cas => OpKind::Cas,
            };
            let out = if d.ret.is_none() || d.unknown {
                Value::Null
            } else {
                match (cfg.model, d.kind) {
                    (Model::Kv, Kind::Write) => Value::Null,
                    _ => outs[i].clone(),
                }
            };
            Op {
                client: d.client as u64,
                call_ns: d.call,
                return_ns: d.ret,
                key: format!("k{}", d.key),
                op: kind,
                arg: std::mem::take(&mut args[i]),
                out,
                unknown: d.unknown,
            }
        })
        .collect();

    let injected = if cfg.inject_violation {
        inject(&mut ops, &drafts, &took_effect, &mut rng)
    } else {
        None
    };
    Generated { ops, injected }
}

/// Makes one read return a value that was definitely overwritten before the
/// read started: w1 returns before w2 is called, w2 returns before the read
/// is called, both certainly took effect, and values are unique.
fn inject(ops: &mut [Op], drafts: &[Draft], took_effect: &[bool], rng: &mut Rng) -> Option<usize> {
    let n = ops.len();
    let definite = |i: usize| took_effect[i] && drafts[i].ret.is_some() && !drafts[i].unknown;
    for _ in 0..2000 {
        // Prefer the middle of the history so both sides have context.
        let r = n / 4 + rng.below((n / 2).max(1) as u64) as usize;
        if r >= n {
            continue;
        }
        let d = &drafts[r];
        if d.kind != Kind::Read || d.ret.is_none() || d.unknown {
            continue;
        }
        let key = d.key;
        let w2 = (0..n)
            .filter(|&j| drafts[j].key == key && definite(j))
            .filter(|&j| drafts[j].ret.is_some_and(|rt| rt < d.call))
            .max_by_key(|&j| drafts[j].ret);
        let Some(w2) = w2 else { continue };
        let w1 = (0..n)
            .filter(|&j| drafts[j].key == key && definite(j))
            .filter(|&j| drafts[j].ret.is_some_and(|rt| rt < drafts[w2].call))
            .max_by_key(|&j| drafts[j].ret);
        let Some(w1) = w1 else { continue };
        let stale = match &ops[w1].arg {
            Value::Array(a) if ops[w1].op == OpKind::Cas => a.get(1).cloned(),
            Value::Array(a) => a.first().cloned(),
            v => Some(v.clone()),
        };
        let Some(stale) = stale else { continue };
        ops[r].out = stale;
        return Some(r);
    }
    None
}

/// Writes ops as JSON lines.
pub fn write_jsonl_to<W: Write>(w: W, ops: &[Op]) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, w);
    for op in ops {
        serde_json::to_writer(&mut w, op)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Writes ops as JSON lines to a file.
pub fn write_jsonl(path: &Path, ops: &[Op]) -> io::Result<()> {
    write_jsonl_to(std::fs::File::create(path)?, ops)
}
