//! `linearizable`: does the client-observed storage history fit a fenced register?
//!
//! Every worker's read and write on the storage becomes one operation (invoke →
//! completion) for the `lincheck` crate's search. The model is the storage's own
//! rule for the run's fencing mode — [`StorageModel`] — so a storage that answers
//! anything its rule could not have produced, in any order consistent with real
//! time, is caught here. Writes whose outcome the client never learned, and reads
//! that failed (they may still have reached the storage and registered a token), may
//! or may not have taken effect.

use std::time::{Duration, Instant};

use fencecheck_reports::{LinearizableCheck, Validity};
use lincheck::{FencedState, Interner, Op, OpKind, SeqModel};
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
    use std::collections::HashMap;
    let mut open: HashMap<(Process, F), &Event> = HashMap::new();
    let mut ops = Vec::new();
    let client = |p: &Process| match p {
        Process::Worker(w) => u64::from(*w),
        Process::Named(_) => 1_000_000,
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
        ops.push(op);
    }
    // Invoked and never completed: may or may not have happened.
    for ((p, f), inv) in open {
        let token = inv.token.map(Value::from).unwrap_or(Value::Null);
        ops.push(Op {
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
        });
    }
    ops.sort_by_key(|o| o.call_ns);
    ops
}

pub fn check(rec: &Recorded, fencing: Fencing) -> LinearizableCheck {
    let ops = operations(&rec.events);
    // check-then-write is held to the rule it means to enforce.
    let model = StorageModel {
        fencing: fencing.intended(),
    };
    let started = Instant::now();
    let res = lincheck::check_with(&ops, &model, Some(BUDGET));
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
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
            detail: serde_json::to_value(&r).unwrap_or(Value::Null),
        },
        Err(e) => LinearizableCheck {
            valid: Validity::Unknown,
            model: model.name().to_string(),
            operations: ops.len() as u64,
            elapsed_ms,
            detail: json!({ "error": format!("operation {}: {}", e.index, e.message) }),
        },
    }
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
}
