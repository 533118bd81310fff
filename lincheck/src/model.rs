//! Sequential specifications the history is checked against.

use crate::op::{Op, OpKind};
use rustc_hash::FxHashMap;
use serde_json::Value;
use std::fmt::Debug;
use std::hash::Hash;

/// Maps JSON scalars to small integers so that model states are cheap to
/// copy, compare and hash. Id 0 is always `null` (the initial register value).
#[derive(Debug)]
pub struct Interner {
    scalars: FxHashMap<(u8, u64), u32>,
    strings: FxHashMap<Box<str>, u32>,
    values: Vec<Value>,
    /// How many times each value was interned (ops mentioning it).
    refs: Vec<u32>,
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}

impl Interner {
    pub const NULL: u32 = 0;

    pub fn new() -> Interner {
        let mut scalars = FxHashMap::default();
        scalars.insert((0, 0), 0);
        Interner {
            scalars,
            strings: FxHashMap::default(),
            values: vec![Value::Null],
            refs: vec![1],
        }
    }

    /// Interns a JSON scalar. Numbers are compared as serde_json does: `7`
    /// and `7.0` are different values.
    pub fn intern(&mut self, v: &Value) -> Result<u32, String> {
        let key = match v {
            Value::Null => (0, 0),
            Value::Bool(b) => (1, *b as u64),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    (2, u)
                } else if let Some(i) = n.as_i64() {
                    (3, i as u64)
                } else {
                    // Normalise -0.0 so that it equals 0.0 as JSON readers expect.
                    let f = n.as_f64().unwrap_or(0.0);
                    let f = if f == 0.0 { 0.0 } else { f };
                    (4, f.to_bits())
                }
            }
            Value::String(s) => {
                if let Some(&id) = self.strings.get(s.as_str()) {
                    self.refs[id as usize] += 1;
                    return Ok(id);
                }
                let id = self.next_id()?;
                self.strings.insert(s.as_str().into(), id);
                self.values.push(v.clone());
                self.refs.push(1);
                return Ok(id);
            }
            Value::Array(_) | Value::Object(_) => {
                return Err(format!("expected a JSON scalar value, got {v}"));
            }
        };
        if let Some(&id) = self.scalars.get(&key) {
            self.refs[id as usize] += 1;
            return Ok(id);
        }
        let id = self.next_id()?;
        self.scalars.insert(key, id);
        self.values.push(v.clone());
        self.refs.push(1);
        Ok(id)
    }

    fn next_id(&self) -> Result<u32, String> {
        u32::try_from(self.values.len()).map_err(|_| "too many distinct values".to_string())
    }

    /// The JSON value behind an id.
    pub fn value(&self, id: u32) -> &Value {
        self.values.get(id as usize).unwrap_or(&Value::Null)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True if exactly one op mentions the value (and it is not the
    /// initial `null`): nothing else can tell it apart from another such value.
    pub fn is_fresh(&self, id: u32) -> bool {
        id != Self::NULL && self.refs.get(id as usize) == Some(&1)
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A sequential specification. Implement it to check another kind of object;
/// the checker partitions by `Op::key` and checks each key against a fresh
/// `init()` state.
///
/// `prepare` turns an op into a compact `Input` (interning values, validating
/// the shape of `arg`/`out`); `step` is the transition relation. When
/// `checked` is false the op's `out` must be ignored and `step` must accept
/// any outcome the specification allows.
pub trait SeqModel: Sync {
    type State: Clone + Eq + Hash + Send + Sync + Debug;
    type Input: Clone + Send + Sync + Debug;

    fn name(&self) -> &str;
    fn init(&self) -> Self::State;
    fn prepare(&self, op: &Op, checked: bool, values: &mut Interner)
        -> Result<Self::Input, String>;
    /// The state after `input` if it can be linearized in `state` with its
    /// recorded output, `None` otherwise.
    fn step(&self, state: &Self::State, input: &Self::Input) -> Option<Self::State>;
    /// True if `step`, whenever it succeeds, returns the state unchanged in
    /// every state. The search linearizes such ops greedily (a partial-order
    /// reduction), so a wrong `true` makes the checker unsound.
    fn read_only(&self, input: &Self::Input) -> bool;
    /// True if the op can neither fail nor change the state (e.g. a read with
    /// an unchecked result); such ops are removed before the search.
    fn is_noop(&self, input: &Self::Input) -> bool;
    fn describe_state(&self, state: &Self::State, values: &Interner) -> Value;

    /// Optional pruning hint: the interned value the state must hold for
    /// this (completed, checked) op to succeed, e.g. what a read returned.
    ///
    /// Contract for the three hints: `state_value` changes only through ops
    /// whose `value_produced` is the new value, and an op with
    /// `value_needed == Some(v)` succeeds only where `state_value == Some(v)`.
    /// The search then cuts any configuration in which a needed value is not
    /// current and no remaining op can produce it. Return `None` to opt out.
    fn value_needed(&self, _input: &Self::Input) -> Option<u32> {
        None
    }
    /// Optional hint for the violation finder: the value the state must
    /// NOT hold for this (completed, checked) op to succeed, e.g. the
    /// expected value of a cas that failed. Contract: an op with
    /// `value_excluded == Some(v)` fails wherever `state_value == Some(v)`.
    fn value_excluded(&self, _input: &Self::Input) -> Option<u32> {
        None
    }
    /// Optional pruning hint: the value this op installs if it takes effect.
    fn value_produced(&self, _input: &Self::Input) -> Option<u32> {
        None
    }
    /// Optional pruning hint: the value part of a state.
    fn state_value(&self, _state: &Self::State) -> Option<u32> {
        None
    }
    /// Optional hint for the violation finder (`refute.rs`): true if
    /// linearizing this op, whenever its `step` succeeds, makes `state_value`
    /// equal to its `value_produced` (a plain write, a cas known to have
    /// succeeded, a fenced write known to have been accepted). A wrong `true`
    /// makes the checker report violations that are not there.
    fn definitely_produces(&self, _input: &Self::Input) -> bool {
        false
    }
    /// Optional pruning hint for a monotone part of the state: this
    /// (completed) op succeeds only where `state_bound <= bound`. Contract:
    /// `state_bound` never decreases along any step.
    fn bound_needed(&self, _input: &Self::Input) -> Option<i64> {
        None
    }
    /// Optional pruning hint: the monotone part of a state (`None` = lowest).
    fn state_bound(&self, _state: &Self::State) -> Option<i64> {
        None
    }
    /// Optional hint for the witness path (`witness.rs`): the value this op
    /// replaces whenever it installs its `value_produced` (a cas's expected
    /// value, also when its outcome is unknown). The witness path chains the
    /// run of that value to the run of the produced one. Used only to build a
    /// candidate order that is then verified step by step, so a wrong answer
    /// costs a fallback to the search, never a wrong verdict.
    fn value_consumed(&self, _input: &Self::Input) -> Option<u32> {
        None
    }
    /// Optional hint for the witness path: the `state_bound` after this op
    /// takes effect (a fenced write's token). The witness path orders the
    /// runs of values by it first, as a monotone bound forces. Like
    /// `value_consumed`, only a guide for a verified order.
    fn bound_produced(&self, _input: &Self::Input) -> Option<i64> {
        None
    }
    /// Optional symmetry hint: never-returned ops with equal keys must behave
    /// identically except for the value they produce (`value_produced`).
    /// When those values are fresh (mentioned by no other op) such ops are
    /// interchangeable, and the search places them only in call order.
    fn shape_key(&self, _input: &Self::Input) -> Option<u64> {
        None
    }
}

fn expect_scalar(values: &mut Interner, v: &Value, what: &str) -> Result<u32, String> {
    values.intern(v).map_err(|e| format!("{what}: {e}"))
}

fn expect_bool(v: &Value, what: &str) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("{what}: expected true or false, got {v}"))
}

/// Per-key register with read, write and compare-and-set.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvModel;

#[derive(Clone, Debug)]
pub enum KvInput {
    Read {
        out: u32,
        checked: bool,
    },
    Write {
        value: u32,
    },
    Cas {
        expected: u32,
        new: u32,
        out: Option<bool>,
    },
}

impl SeqModel for KvModel {
    type State = u32;
    type Input = KvInput;

    fn name(&self) -> &str {
        "kv"
    }

    fn init(&self) -> u32 {
        Interner::NULL
    }

    fn prepare(&self, op: &Op, checked: bool, values: &mut Interner) -> Result<KvInput, String> {
        match op.op {
            OpKind::Read => Ok(KvInput::Read {
                out: if checked {
                    expect_scalar(values, &op.out, "read out")?
                } else {
                    Interner::NULL
                },
                checked,
            }),
            OpKind::Write => Ok(KvInput::Write {
                value: expect_scalar(values, &op.arg, "write arg")?,
            }),
            OpKind::Cas => {
                let pair =
                    op.arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                        format!("cas arg: expected [expected, new], got {}", op.arg)
                    })?;
                let expected = expect_scalar(values, &pair[0], "cas expected")?;
                let new = expect_scalar(values, &pair[1], "cas new")?;
                let out = if checked {
                    Some(expect_bool(&op.out, "cas out")?)
                } else {
                    None
                };
                Ok(KvInput::Cas { expected, new, out })
            }
            OpKind::Other(ref name) => Err(format!(
                "model kv has no operation {name:?} (expected read, write or cas)"
            )),
        }
    }

    fn step(&self, &s: &u32, input: &KvInput) -> Option<u32> {
        match *input {
            KvInput::Read { out, checked } => (!checked || out == s).then_some(s),
            KvInput::Write { value } => Some(value),
            KvInput::Cas { expected, new, out } => {
                let ok = s == expected;
                match out {
                    Some(o) if o != ok => None,
                    _ => Some(if ok { new } else { s }),
                }
            }
        }
    }

    fn read_only(&self, input: &KvInput) -> bool {
        matches!(
            input,
            KvInput::Read { .. }
                | KvInput::Cas {
                    out: Some(false),
                    ..
                }
        )
    }

    fn is_noop(&self, input: &KvInput) -> bool {
        matches!(input, KvInput::Read { checked: false, .. })
    }

    fn describe_state(&self, &s: &u32, values: &Interner) -> Value {
        values.value(s).clone()
    }

    fn value_needed(&self, input: &KvInput) -> Option<u32> {
        match *input {
            KvInput::Read { out, checked: true } => Some(out),
            KvInput::Cas {
                expected,
                out: Some(true),
                ..
            } => Some(expected),
            _ => None,
        }
    }

    fn value_excluded(&self, input: &KvInput) -> Option<u32> {
        match *input {
            KvInput::Cas {
                expected,
                out: Some(false),
                ..
            } => Some(expected),
            _ => None,
        }
    }

    fn value_produced(&self, input: &KvInput) -> Option<u32> {
        match *input {
            KvInput::Write { value } => Some(value),
            KvInput::Cas {
                new,
                out: None | Some(true),
                ..
            } => Some(new),
            _ => None,
        }
    }

    fn state_value(&self, &s: &u32) -> Option<u32> {
        Some(s)
    }

    fn definitely_produces(&self, input: &KvInput) -> bool {
        matches!(
            input,
            KvInput::Write { .. }
                | KvInput::Cas {
                    out: Some(true),
                    ..
                }
        )
    }

    fn value_consumed(&self, input: &KvInput) -> Option<u32> {
        match *input {
            KvInput::Cas {
                expected,
                out: None | Some(true),
                ..
            } => Some(expected),
            _ => None,
        }
    }

    fn shape_key(&self, input: &KvInput) -> Option<u64> {
        match *input {
            KvInput::Write { .. } => Some(0),
            KvInput::Cas {
                expected,
                out: None,
                ..
            } => Some((1 << 32) | u64::from(expected)),
            _ => None,
        }
    }
}

/// Fencing storage: a write carries a token and is accepted iff the token is
/// at least the highest token accepted so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct FencedModel;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FencedState {
    pub value: u32,
    pub max_token: Option<i64>,
}

#[derive(Clone, Debug)]
pub enum FencedInput {
    Read {
        out: u32,
        checked: bool,
    },
    Write {
        value: u32,
        token: i64,
        out: Option<bool>,
    },
}

impl SeqModel for FencedModel {
    type State = FencedState;
    type Input = FencedInput;

    fn name(&self) -> &str {
        "fenced"
    }

    fn init(&self) -> FencedState {
        FencedState {
            value: Interner::NULL,
            max_token: None,
        }
    }

    fn prepare(
        &self,
        op: &Op,
        checked: bool,
        values: &mut Interner,
    ) -> Result<FencedInput, String> {
        match op.op {
            OpKind::Read => Ok(FencedInput::Read {
                out: if checked {
                    expect_scalar(values, &op.out, "read out")?
                } else {
                    Interner::NULL
                },
                checked,
            }),
            OpKind::Write => {
                let pair = op.arg.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                    format!("fenced write arg: expected [value, token], got {}", op.arg)
                })?;
                let value = expect_scalar(values, &pair[0], "write value")?;
                let token = pair[1].as_i64().ok_or_else(|| {
                    format!("fenced write token: expected an integer, got {}", pair[1])
                })?;
                let out = if checked {
                    Some(expect_bool(&op.out, "fenced write out")?)
                } else {
                    None
                };
                Ok(FencedInput::Write { value, token, out })
            }
            ref other => Err(format!(
                "model fenced has no operation {:?} (expected read or write)",
                other.as_str()
            )),
        }
    }

    fn step(&self, s: &FencedState, input: &FencedInput) -> Option<FencedState> {
        match *input {
            FencedInput::Read { out, checked } => (!checked || out == s.value).then_some(*s),
            FencedInput::Write { value, token, out } => {
                let accept = s.max_token.is_none_or(|m| token >= m);
                match out {
                    Some(o) if o != accept => None,
                    _ if accept => Some(FencedState {
                        value,
                        max_token: Some(token),
                    }),
                    _ => Some(*s),
                }
            }
        }
    }

    fn read_only(&self, input: &FencedInput) -> bool {
        matches!(
            input,
            FencedInput::Read { .. }
                | FencedInput::Write {
                    out: Some(false),
                    ..
                }
        )
    }

    fn is_noop(&self, input: &FencedInput) -> bool {
        matches!(input, FencedInput::Read { checked: false, .. })
    }

    fn describe_state(&self, s: &FencedState, values: &Interner) -> Value {
        serde_json::json!({
            "value": values.value(s.value),
            "max_token": s.max_token,
        })
    }

    fn value_needed(&self, input: &FencedInput) -> Option<u32> {
        match *input {
            FencedInput::Read { out, checked: true } => Some(out),
            _ => None,
        }
    }

    fn value_produced(&self, input: &FencedInput) -> Option<u32> {
        match *input {
            FencedInput::Write {
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

    fn definitely_produces(&self, input: &FencedInput) -> bool {
        matches!(
            input,
            FencedInput::Write {
                out: Some(true),
                ..
            }
        )
    }

    fn bound_needed(&self, input: &FencedInput) -> Option<i64> {
        match *input {
            FencedInput::Write {
                token,
                out: Some(true),
                ..
            } => Some(token),
            _ => None,
        }
    }

    fn state_bound(&self, s: &FencedState) -> Option<i64> {
        s.max_token
    }

    fn bound_produced(&self, input: &FencedInput) -> Option<i64> {
        match *input {
            FencedInput::Write {
                token,
                out: None | Some(true),
                ..
            } => Some(token),
            _ => None,
        }
    }

    fn shape_key(&self, input: &FencedInput) -> Option<u64> {
        match *input {
            FencedInput::Write {
                token, out: None, ..
            } => Some(token as u64),
            _ => None,
        }
    }
}

/// The built-in models, selectable by name (`kv`, `fenced`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Kv,
    Fenced,
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        match s {
            "kv" => Ok(Model::Kv),
            "fenced" => Ok(Model::Fenced),
            other => Err(format!("unknown model {other:?} (expected kv or fenced)")),
        }
    }
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Kv => "kv",
            Model::Fenced => "fenced",
        }
    }
}
