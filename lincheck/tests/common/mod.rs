//! Brute-force reference checker, independent of the crate's interning and
//! search: tries every order consistent with real time, with each
//! never-returned op either placed somewhere after its call or left out.

#![allow(dead_code)]

use lincheck::{Model, Op, OpKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
struct St {
    value: Value,
    max_token: Option<i64>,
}

fn step(model: Model, s: &St, op: &Op) -> Option<St> {
    let checked = op.return_ns.is_some() && !op.unknown;
    match (model, &op.op) {
        (_, OpKind::Read) => (!checked || op.out == s.value).then(|| s.clone()),
        (Model::Kv, OpKind::Write) => Some(St {
            value: op.arg.clone(),
            max_token: None,
        }),
        (Model::Kv, OpKind::Cas) => {
            let a = op.arg.as_array()?;
            let ok = a[0] == s.value;
            if checked && op.out.as_bool() != Some(ok) {
                return None;
            }
            Some(if ok {
                St {
                    value: a[1].clone(),
                    max_token: None,
                }
            } else {
                s.clone()
            })
        }
        (Model::Fenced, OpKind::Write) => {
            let a = op.arg.as_array()?;
            let t = a[1].as_i64()?;
            let accept = s.max_token.is_none_or(|m| t >= m);
            if checked && op.out.as_bool() != Some(accept) {
                return None;
            }
            Some(if accept {
                St {
                    value: a[0].clone(),
                    max_token: Some(t),
                }
            } else {
                s.clone()
            })
        }
        _ => None,
    }
}

pub fn brute_force(model: Model, ops: &[Op]) -> bool {
    let mut placed = vec![false; ops.len()];
    let mut states: BTreeMap<String, St> = BTreeMap::new();
    dfs(model, ops, &mut placed, &mut states)
}

fn dfs(model: Model, ops: &[Op], placed: &mut [bool], states: &mut BTreeMap<String, St>) -> bool {
    if ops
        .iter()
        .zip(placed.iter())
        .all(|(o, &p)| p || o.return_ns.is_none())
    {
        return true;
    }
    for x in 0..ops.len() {
        if placed[x] {
            continue;
        }
        // x may go next only if no unplaced op returned before x was called.
        let blocked = ops
            .iter()
            .enumerate()
            .any(|(y, o)| y != x && !placed[y] && o.return_ns.is_some_and(|r| r < ops[x].call_ns));
        if blocked {
            continue;
        }
        let cur = states.get(&ops[x].key).cloned().unwrap_or(St {
            value: Value::Null,
            max_token: None,
        });
        if let Some(next) = step(model, &cur, &ops[x]) {
            placed[x] = true;
            states.insert(ops[x].key.clone(), next);
            let ok = dfs(model, ops, placed, states);
            states.insert(ops[x].key.clone(), cur);
            placed[x] = false;
            if ok {
                return true;
            }
        }
    }
    false
}

/// One key's state while outputs are simulated: (value, max token).
pub type KeyState = (Value, Option<u64>);

/// Places `op` next in a real linearization: applies it to its key's state as
/// the model does and writes its output. A kv cas compares against the
/// expected value already in `arg[0]` (the caller's guess).
pub fn place(model: Model, st: &mut KeyState, op: &mut Op) {
    match (model, &op.op) {
        (_, OpKind::Read) => op.out = st.0.clone(),
        (Model::Kv, OpKind::Write) => st.0 = op.arg.clone(),
        (Model::Kv, _) => {
            let ok = op.arg[0] == st.0;
            if ok {
                st.0 = op.arg[1].clone();
            }
            op.out = json!(ok);
        }
        (Model::Fenced, _) => {
            let t = op.arg[1].as_u64().unwrap_or(0);
            let ok = st.1.is_none_or(|m| t >= m);
            if ok {
                *st = (op.arg[0].clone(), Some(t));
            }
            op.out = json!(ok);
        }
    }
}

/// Whether `op` is a kv cas (its expected value is the caller's to choose).
pub fn is_kv_cas(model: Model, op: &Op) -> bool {
    model == Model::Kv && !matches!(op.op, OpKind::Read | OpKind::Write)
}
