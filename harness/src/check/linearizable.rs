//! `linearizable`: does the client-observed storage history fit a fenced register?
//!
//! Every worker's read and write on the storage becomes one operation (invoke →
//! completion) for the `lincheck` crate's search. The model is the storage's own
//! rule for the run's fencing mode — [`StorageModel`] — so a storage that answers
//! anything its rule could not have produced, in any order consistent with real
//! time, is caught here. Writes whose outcome the client never learned, and reads
//! that failed (they may still have reached the storage and registered a token), may
//! or may not have taken effect.
//!
//! Where the run has the storage's own log (`storage.jsonl`), each op's place in
//! it (matched by the request's client and id) goes to the checker as the log
//! order: the checker builds its linearization from that order first and accepts
//! it only if it verifies against real time and the model, so the log guides the
//! check but never decides it — a log that contradicts what the clients saw makes
//! it fall back to the values and the search.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fencecheck_reports::{LinearizableCheck, Validity};
use fencecheck_storage::LogRecord;
use lincheck::{CheckOptions, FencedState, Interner, Op, OpKind, SeqModel};
use serde_json::{json, Value};

use super::Recorded;
use crate::record::history::{Event, EventType, Process, F};
use crate::scenario::Fencing;

/// How long the search may take before the verdict is `unknown`.
pub const BUDGET: Duration = Duration::from_secs(60);

/// The storage's sequential specification, per fencing mode.
///
/// - `monotonic`: a write is accepted iff its token is >= the largest token seen
///   (then it becomes the largest); a read carrying a newer token raises it.
/// - `exact`: the first write fixes the token; later writes must carry exactly it.
/// - `off`: every write is accepted.
pub struct StorageModel {
    pub fencing: Fencing,
}

#[derive(Clone, Debug)]
pub enum Input {
    Read {
        token: Option<i64>,
        out: u32,
        checked: bool,
    },
    Write {
        value: u32,
        token: Option<i64>,
        out: Option<bool>,
    },
}

impl SeqModel for StorageModel {
    type State = FencedState;
    type Input = Input;

    fn name(&self) -> &str {
        match self.fencing {
            Fencing::Monotonic | Fencing::CheckThenWrite => "fenced-monotonic",
            Fencing::Exact => "fenced-exact",
            Fencing::Off => "register",
        }
    }

    fn init(&self) -> FencedState {
        FencedState {
            value: Interner::NULL,
            max_token: None,
        }
    }

    fn prepare(&self, op: &Op, checked: bool, values: &mut Interner) -> Result<Input, String> {
        let token = |v: &Value| -> Result<Option<i64>, String> {
            match v {
                Value::Null => Ok(None),
                v => v
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| format!("token: expected an integer or null, got {v}")),
            }
        };
        match op.op {
            OpKind::Read => Ok(Input::Read {
                token: token(&op.arg)?,
                out: if checked {
                    values.intern(&op.out)?
                } else {
                    Interner::NULL
                },
                checked,
            }),
            OpKind::Write => {
                let pair =
                    op.arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                        format!("write arg: expected [value, token], got {}", op.arg)
                    })?;
                Ok(Input::Write {
                    value: values.intern(&pair[0])?,
                    token: token(&pair[1])?,
                    out: if checked { op.out.as_bool() } else { None },
                })
            }
            ref other => Err(format!("the storage has no operation {other:?}")),
        }
    }

    fn step(&self, s: &FencedState, input: &Input) -> Option<FencedState> {
        match *input {
            Input::Read {
                token,
                out,
                checked,
            } => {
                if checked && out != s.value {
                    return None;
                }
                let mut next = *s;
                if let (Fencing::Monotonic, Some(t)) = (self.fencing, token) {
                    if s.max_token.is_none_or(|m| t > m) {
                        next.max_token = Some(t);
                    }
                }
                Some(next)
            }
            Input::Write { value, token, out } => {
                let accept = match (self.fencing, s.max_token, token) {
                    (Fencing::Off, _, _) => true,
                    (Fencing::Monotonic, Some(m), Some(t)) => t >= m,
                    (Fencing::Monotonic | Fencing::CheckThenWrite, _, _) => true,
                    (Fencing::Exact, None, _) => true,
                    (Fencing::Exact, Some(m), t) => t == Some(m),
                };
                match out {
                    Some(o) if o != accept => None,
                    _ if accept => Some(FencedState {
                        value,
                        max_token: match self.fencing {
                            Fencing::Off => s.max_token.max(token),
                            _ => token,
                        },
                    }),
                    _ => Some(*s),
                }
            }
        }
    }

    fn read_only(&self, input: &Input) -> bool {
        // A read with a token may raise the max in monotonic mode.
        matches!(input, Input::Read { token, .. } if token.is_none() || self.fencing != Fencing::Monotonic)
    }

    fn is_noop(&self, input: &Input) -> bool {
        matches!(input, Input::Read { checked: false, .. }) && self.read_only(input)
    }

    fn describe_state(&self, s: &FencedState, values: &Interner) -> Value {
        json!({ "value": values.value(s.value), "max_token": s.max_token })
    }

    // The value hints, so the checker's pruning and its violation finder (which
    // proves a stale read without searching) work on fencecheck's own runs too.
    // The value part of the state changes only through an accepted write, which
    // installs its own value; a completed read succeeds only where the value is
    // what it returned — in every fencing mode.

    fn value_needed(&self, input: &Input) -> Option<u32> {
        match *input {
            Input::Read {
                out, checked: true, ..
            } => Some(out),
            _ => None,
        }
    }

    fn value_produced(&self, input: &Input) -> Option<u32> {
        match *input {
            Input::Write {
                value,
                out: None | Some(true),
                ..
            } => Some(value),
            _ => None,
        }
    }

    fn state_value(&self, s: &FencedState) -> Option<u32> {
        Some(s.value)
    }

    fn definitely_produces(&self, input: &Input) -> bool {
        matches!(
            input,
            Input::Write {
                out: Some(true),
                ..
            }
        )
    }
}

/// Storage operations as the clients saw them, in the lincheck format.
pub fn operations(events: &[Event]) -> Vec<Op> {
    requests(events).into_iter().map(|(op, _)| op).collect()
}

/// The storage request an op sent, as the storage log names it
/// (`request.client`, `request.request_id`).
type RequestId = (String, u64);

/// [`operations`], each with the request it sent (`None` when the history does
/// not say: final reads, events written before request ids were recorded).
fn requests(events: &[Event]) -> Vec<(Op, Option<RequestId>)> {
    let mut open: HashMap<(Process, F), &Event> = HashMap::new();
    let mut ops = Vec::new();
    let client = |p: &Process| match p {
        Process::Worker(w) => u64::from(*w),
        Process::Named(_) => 1_000_000,
    };
    // A worker names itself in its requests by its id (`worker::Worker::request`).
    let request = |inv: &Event| match (&inv.process, inv.request_id) {
        (Process::Worker(w), Some(id)) => Some((w.to_string(), id)),
        _ => None,
    };
    for e in events {
        let f = match e.f {
            F::Read | F::Write | F::FinalRead => e.f,
            _ => continue,
        };
        if e.kind == EventType::Invoke {
            open.insert((e.process.clone(), f), e);
            continue;
        }
        let Some(inv) = open.remove(&(e.process.clone(), f)) else {
            continue;
        };
        let key = inv.key.clone().unwrap_or_default();
        let token = inv.token.map(Value::from).unwrap_or(Value::Null);
        let op = match (f, e.kind) {
            (F::Read | F::FinalRead, EventType::Ok) => Op {
                client: client(&e.process),
                call_ns: inv.time_ns,
                return_ns: Some(e.time_ns),
                key,
                op: OpKind::Read,
                arg: token,
                out: e.value.map(Value::from).unwrap_or(Value::Null),
                unknown: false,
            },
            // A failed read may have reached the storage (and registered its token).
            (F::Read | F::FinalRead, _) => Op {
                client: client(&e.process),
                call_ns: inv.time_ns,
                return_ns: None,
                key,
                op: OpKind::Read,
                arg: token,
                out: Value::Null,
                unknown: true,
            },
            (_, kind) => Op {
                client: client(&e.process),
                call_ns: inv.time_ns,
                return_ns: (kind != EventType::Info).then_some(e.time_ns),
                key,
                op: OpKind::Write,
                arg: json!([inv.value, token]),
                out: match kind {
                    EventType::Ok => Value::Bool(true),
                    EventType::Fail => Value::Bool(false),
                    _ => Value::Null,
                },
                unknown: kind == EventType::Info,
            },
        };
        ops.push((op, request(inv)));
    }
    // Invoked and never completed: may or may not have happened.
    for ((p, f), inv) in open {
        let token = inv.token.map(Value::from).unwrap_or(Value::Null);
        let op = Op {
            client: client(&p),
            call_ns: inv.time_ns,
            return_ns: None,
            key: inv.key.clone().unwrap_or_default(),
            op: if f == F::Write {
                OpKind::Write
            } else {
                OpKind::Read
            },
            arg: if f == F::Write {
                json!([inv.value, token])
            } else {
                token
            },
            out: Value::Null,
            unknown: true,
        };
        ops.push((op, request(inv)));
    }
    ops.sort_by_key(|(o, _)| o.call_ns);
    ops
}

/// Each op's place in the storage log (its `seq`), matched by the request it
/// sent, with the same key and operation. `None` for an op the log does not hold
/// exactly once, or that shares its request id with another op (a retried request
/// the storage applied twice, a worker restarted with fresh ids): such a match
/// says nothing about where the op took effect. The positions are only a
/// candidate order for the checker, which verifies it.
fn log_positions(ops: &[(Op, Option<RequestId>)], storage: &[LogRecord]) -> Vec<Option<u64>> {
    let mut in_log: HashMap<(&str, u64), Option<&LogRecord>> = HashMap::new();
    for r in storage {
        in_log
            .entry((r.request.client.as_str(), r.request.request_id))
            .and_modify(|seen| *seen = None)
            .or_insert(Some(r));
    }
    let mut sent: HashMap<&RequestId, u32> = HashMap::new();
    for id in ops.iter().filter_map(|(_, id)| id.as_ref()) {
        *sent.entry(id).or_default() += 1;
    }
    ops.iter()
        .map(|(op, id)| {
            let id = id.as_ref().filter(|id| sent.get(id) == Some(&1))?;
            let r = (*in_log.get(&(id.0.as_str(), id.1))?)?;
            let same_kind = matches!(
                (r.request.op, &op.op),
                (fencecheck_storage::OpKind::Read, OpKind::Read)
                    | (fencecheck_storage::OpKind::Write, OpKind::Write)
            );
            (same_kind && r.request.key == op.key).then_some(r.seq)
        })
        .collect()
}

pub fn check(rec: &Recorded, fencing: Fencing) -> LinearizableCheck {
    let with_ids = requests(&rec.events);
    // Only fencecheck's own storages (built in, PostgreSQL) keep a log;
    // without one (`Recorded::storage` empty) the checker orders by the values
    // and tokens alone.
    let log = (!rec.storage.is_empty()).then(|| log_positions(&with_ids, &rec.storage));
    let ops: Vec<Op> = with_ids.into_iter().map(|(op, _)| op).collect();
    // check-then-write is held to the rule it means to enforce.
    let model = StorageModel {
        fencing: fencing.intended(),
    };
    let opts = CheckOptions {
        timeout: Some(BUDGET),
        log: log.as_deref(),
        ..CheckOptions::default()
    };
    let started = Instant::now();
    let res = lincheck::check_with_options(&ops, &model, &opts);
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    // Which order the checker was offered; each partition's `decided_by` and
    // `fallback` say whether it held.
    let log_order = log.as_ref().map(|l| {
        json!({
            "from": "storage.jsonl",
            "ops_in_log": l.iter().filter(|p| p.is_some()).count(),
        })
    });
    match res {
        Ok(r) => LinearizableCheck {
            valid: match r.valid {
                lincheck::Validity::Linearizable => Validity::Valid,
                lincheck::Validity::NotLinearizable => Validity::Invalid,
                lincheck::Validity::Unknown => Validity::Unknown,
            },
            model: model.name().to_string(),
            operations: ops.len() as u64,
            elapsed_ms,
            detail: with_log_order(serde_json::to_value(&r).unwrap_or(Value::Null), log_order),
        },
        Err(e) => LinearizableCheck {
            valid: Validity::Unknown,
            model: model.name().to_string(),
            operations: ops.len() as u64,
            elapsed_ms,
            detail: with_log_order(
                json!({ "error": format!("operation {}: {}", e.index, e.message) }),
                log_order,
            ),
        },
    }
}

/// The checker's result with `log_order` (`null`: no storage log) beside its
/// partitions.
fn with_log_order(mut detail: Value, log_order: Option<Value>) -> Value {
    if let Some(d) = detail.as_object_mut() {
        d.insert("log_order".into(), log_order.unwrap_or(Value::Null));
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: u64, call: u64, ret: Option<u64>, kind: OpKind, arg: Value, out: Value) -> Op {
        Op {
            client,
            call_ns: call,
            return_ns: ret,
            key: "k0".into(),
            op: kind,
            arg,
            out,
            unknown: false,
        }
    }

    fn verdict(fencing: Fencing, ops: &[Op]) -> lincheck::Validity {
        lincheck::check_with(ops, &StorageModel { fencing }, Some(Duration::from_secs(5)))
            .expect("input")
            .valid
    }

    #[test]
    fn read_registers_token_in_monotonic_mode() {
        // Holder 12 reads, then holder 10's write is refused: linearizable.
        let h = vec![
            op(1, 0, Some(1), OpKind::Write, json!([1, 10]), json!(true)),
            op(2, 2, Some(3), OpKind::Read, json!(12), json!(1)),
            op(1, 4, Some(5), OpKind::Write, json!([2, 10]), json!(false)),
        ];
        assert_eq!(
            verdict(Fencing::Monotonic, &h),
            lincheck::Validity::Linearizable
        );
        // A storage that accepted it would not fit the model.
        let mut bad = h.clone();
        bad[2].out = json!(true);
        assert_eq!(
            verdict(Fencing::Monotonic, &bad),
            lincheck::Validity::NotLinearizable
        );
        // With fencing off the same acceptance is fine.
        assert_eq!(
            verdict(Fencing::Off, &bad),
            lincheck::Validity::Linearizable
        );
    }

    #[test]
    fn exact_mode_refuses_a_different_token() {
        let h = vec![
            op(1, 0, Some(1), OpKind::Write, json!([1, 10]), json!(true)),
            op(2, 2, Some(3), OpKind::Write, json!([2, 12]), json!(false)),
            op(1, 4, Some(5), OpKind::Read, Value::Null, json!(1)),
        ];
        assert_eq!(
            verdict(Fencing::Exact, &h),
            lincheck::Validity::Linearizable
        );
        assert_eq!(
            verdict(Fencing::Monotonic, &h),
            lincheck::Validity::NotLinearizable
        );
    }

    #[test]
    fn history_events_become_operations() {
        let mut evs = Vec::new();
        let mut push = |t: u64, kind: EventType, f: F, value: Option<i64>| {
            let mut e = Event::new(Process::Worker(1), kind, f);
            e.time_ns = t;
            e.key = Some("k0".into());
            e.token = Some(7);
            e.value = value;
            evs.push(e);
        };
        push(1, EventType::Invoke, F::Read, None);
        push(2, EventType::Ok, F::Read, None);
        push(3, EventType::Invoke, F::Write, Some(1));
        push(4, EventType::Info, F::Write, Some(1));
        push(5, EventType::Invoke, F::Write, Some(2));
        let ops = operations(&evs);
        assert_eq!(ops.len(), 3);
        assert!(matches!(ops[0].op, OpKind::Read));
        assert_eq!(ops[0].return_ns, Some(2));
        assert_eq!(ops[0].arg, json!(7));
        assert_eq!((ops[1].return_ns, ops[1].unknown), (None, true));
        assert_eq!(ops[2].arg, json!([2, 7]));
        assert_eq!(ops[2].return_ns, None);
    }

    /// A recorded run, read without writing into the tracked fixture.
    fn fixture(name: &str) -> (Recorded, Fencing) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let files = crate::assess::event_files(&dir).expect("event files");
        let (events, _) = crate::record::history::merge(&files).expect("events");
        // A storage of the user's own (http) keeps no log.
        let log = dir.join(crate::record::rundir::STORAGE_LOG);
        let storage = if log.is_file() {
            crate::record::history::read_jsonl::<LogRecord>(&log)
                .expect("storage log")
                .0
        } else {
            Vec::new()
        };
        let scenario =
            crate::scenario::Scenario::load_recorded(&dir.join("scenario.toml")).expect("scenario");
        (Recorded::new(events, storage), scenario.storage.fencing)
    }

    /// Each partition's `(decided_by, fallback)` in the check's detail.
    fn paths(c: &LinearizableCheck) -> Vec<(String, Option<String>)> {
        c.detail["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .map(|p| {
                (
                    p["decided_by"].as_str().unwrap_or_default().to_string(),
                    p["fallback"].as_str().map(str::to_string),
                )
            })
            .collect()
    }

    #[test]
    fn storage_log_order_decides_where_the_values_do_not() {
        // Unfenced runs write the same value twice (two holders at once), so
        // the values alone cannot order them; the storage's log can.
        for name in ["jepsen-2020", "python-etcd3-with", "redis-no-fencing"] {
            let (mut rec, fencing) = fixture(name);
            let c = check(&rec, fencing);
            assert_eq!(c.valid, Validity::Valid, "{name}");
            assert!(c.operations > 0, "{name}");
            assert!(
                c.detail["log_order"]["ops_in_log"].as_u64() > Some(0),
                "{name}: {}",
                c.detail["log_order"]
            );
            assert!(
                paths(&c).iter().all(|(by, _)| by == "log"),
                "{name}: {:?}",
                paths(&c)
            );
            // Without the log the same history goes to the search.
            rec.storage.clear();
            let c = check(&rec, fencing);
            assert_eq!(c.valid, Validity::Valid, "{name}");
            assert_eq!(c.detail["log_order"], Value::Null, "{name}");
            assert!(
                paths(&c).iter().all(|(by, why)| by == "search"
                    && why.as_deref().is_some_and(|w| w.contains("producers"))),
                "{name}: {:?}",
                paths(&c)
            );
        }
    }

    /// Every recorded run the harness holds gets the same verdict from the
    /// default check (witness path, with the storage's log where there is one)
    /// as from the search alone.
    #[test]
    fn every_fixture_gets_the_same_verdict_with_and_without_the_witness_path() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(&root).expect("fixtures") {
            let dir = entry.expect("entry").path();
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if !dir.join("scenario.toml").is_file() {
                continue;
            }
            let (rec, fencing) = fixture(&name);
            let c = check(&rec, fencing);
            let ops: Vec<Op> = requests(&rec.events).into_iter().map(|(o, _)| o).collect();
            if ops.is_empty() {
                continue;
            }
            let model = StorageModel {
                fencing: fencing.intended(),
            };
            let alone = lincheck::check_with_options(
                &ops,
                &model,
                &CheckOptions {
                    witnesses: false,
                    timeout: Some(BUDGET),
                    ..CheckOptions::default()
                },
            )
            .expect("recorded ops are well-formed");
            let searched = match alone.valid {
                lincheck::Validity::Linearizable => Validity::Valid,
                lincheck::Validity::NotLinearizable => Validity::Invalid,
                lincheck::Validity::Unknown => Validity::Unknown,
            };
            assert_eq!(c.valid, searched, "{name}: {:?}", paths(&c));
            assert_ne!(c.valid, Validity::Unknown, "{name}");
            checked.push(name);
        }
        assert!(
            checked.len() >= 8,
            "only {checked:?} hold storage operations"
        );
    }

    #[test]
    fn fenced_run_is_decided_by_its_log() {
        let (rec, fencing) = fixture("etcd-pause");
        let c = check(&rec, fencing);
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!(c.model, "fenced-monotonic");
        assert_eq!(paths(&c), vec![("log".to_string(), None)]);
    }

    #[test]
    fn log_order_against_real_time_falls_back() {
        // Two accepted writes the clients saw in real-time order; the log
        // swaps them. Which writes are swapped matters little; that the
        // verdict does not follow the log does.
        let (mut rec, fencing) = fixture("redis-no-fencing");
        let ops = requests(&rec.events);
        let returned = |id: &(String, u64)| {
            ops.iter()
                .find(|(_, i)| i.as_ref() == Some(id))
                .and_then(|(o, _)| o.return_ns.map(|r| (o.call_ns, r)))
        };
        let writes: Vec<(usize, u64, u64)> = rec
            .storage
            .iter()
            .enumerate()
            .filter(|(_, r)| r.request.op == fencecheck_storage::OpKind::Write)
            .filter_map(|(i, r)| {
                let (call, ret) = returned(&(r.request.client.clone(), r.request.request_id))?;
                Some((i, call, ret))
            })
            .collect();
        let (a, b) = writes
            .iter()
            .flat_map(|a| writes.iter().map(move |b| (a, b)))
            .find(|(a, b)| a.2 < b.1)
            .map(|(a, b)| (a.0, b.0))
            .expect("two writes in real-time order");
        let (sa, sb) = (rec.storage[a].seq, rec.storage[b].seq);
        rec.storage[a].seq = sb;
        rec.storage[b].seq = sa;
        let c = check(&rec, fencing);
        assert_eq!(c.valid, Validity::Valid);
        let p = paths(&c);
        assert!(
            p.iter().all(|(by, why)| by == "search"
                && why.as_deref().is_some_and(|w| w.starts_with("log order:"))),
            "{p:?}"
        );
    }

    /// One worker's storage request: its events and its storage log record.
    fn request(
        worker: u32,
        id: u64,
        (call, ret): (u64, u64),
        write: Option<i64>,
        seq: u64,
    ) -> (Vec<Event>, LogRecord) {
        let f = if write.is_some() { F::Write } else { F::Read };
        let evs = [(call, EventType::Invoke), (ret, EventType::Ok)]
            .map(|(t, kind)| {
                let mut e = Event::new(Process::Worker(worker), kind, f);
                e.time_ns = t;
                e.key = Some("k0".into());
                e.request_id = Some(id);
                e.value = write.or(Some(1));
                e
            })
            .to_vec();
        let rec = LogRecord {
            seq,
            time_ns: call,
            request: fencecheck_storage::Request {
                op: if write.is_some() {
                    fencecheck_storage::OpKind::Write
                } else {
                    fencecheck_storage::OpKind::Read
                },
                key: "k0".into(),
                val: write,
                token: None,
                revision: None,
                lease: None,
                client: worker.to_string(),
                request_id: id,
            },
            verdict: if write.is_some() {
                fencecheck_storage::Verdict::Accepted
            } else {
                fencecheck_storage::Verdict::Ok
            },
            token_before: None,
            token_after: None,
            value_before: None,
            value_after: Some(1),
        };
        (evs, rec)
    }

    fn recorded(reqs: Vec<(Vec<Event>, LogRecord)>) -> Recorded {
        let mut events = Vec::new();
        let mut storage = Vec::new();
        for (e, r) in reqs {
            events.extend(e);
            storage.push(r);
        }
        events.sort_by_key(|e| e.time_ns);
        Recorded::new(events, storage)
    }

    #[test]
    fn log_is_matched_by_request_and_checked_against_real_time() {
        // Worker 1 writes 1, worker 2 then writes 1 again, worker 1 reads 1:
        // two producers of one value, so only the log orders it.
        let run = |seqs: [u64; 3]| {
            check(
                &recorded(vec![
                    request(1, 1, (0, 10), Some(1), seqs[0]),
                    request(2, 1, (20, 30), Some(1), seqs[1]),
                    request(1, 2, (40, 50), None, seqs[2]),
                ]),
                Fencing::Off,
            )
        };
        let c = run([1, 2, 3]);
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!(c.detail["log_order"]["ops_in_log"], json!(3));
        assert_eq!(paths(&c), vec![("log".to_string(), None)]);
        // The same requests logged against real time: the log is not believed.
        let c = run([2, 1, 3]);
        assert_eq!(c.valid, Validity::Valid);
        let p = paths(&c);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "search");
        assert!(
            p[0].1
                .as_deref()
                .is_some_and(|w| w.starts_with("log order:")),
            "{p:?}"
        );
        // Two requests at one log position are no order either.
        let c = run([1, 2, 2]);
        assert!(
            paths(&c)[0]
                .1
                .as_deref()
                .is_some_and(|w| w.contains("same log position")),
            "{:?}",
            paths(&c)
        );
    }
}
