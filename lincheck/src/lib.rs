//! Linearizability checker for fencecheck histories.
//!
//! Per key: a violation finder (`refute.rs`), then a linearization built
//! from the history's witnesses and verified step by step (`witness.rs`),
//! then, for what that cannot order, Wing & Gong's search with Lowe's
//! just-in-time linearization, memoised configurations and
//! P-compositionality (one partition per key, checked in parallel,
//! stopping at the first violation). A configuration is stored as
//! "every returned op before call-order position `p` is linearized" plus a
//! bitset of the linearized ops in the concurrency window after `p` and the
//! id of the (usually empty) set of linearized never-returned ops, hashed
//! incrementally; see `search.rs` and the crate README.
//!
//! # Public API
//!
//! * [`Op`] (plain data, one history record) and [`OpKind`].
//! * [`Model`] (`Kv`, `Fenced`; `"kv".parse()`), and the [`SeqModel`] trait
//!   with [`KvModel`] and [`FencedModel`] for adding models (e.g. a fenced
//!   "exact equality" variant: copy `FencedModel`, change `step`). The
//!   pruning and symmetry hints of `SeqModel` default to off; a model that
//!   implements them must keep their documented contracts.
//! * [`parse_jsonl`]`(path) -> Result<Vec<Op>, ParseError>`
//!   ([`ParseError`] has `line`, `message`, `Display`);
//!   [`parse_jsonl_with_lines`] and [`parse_jsonl_bytes`] also give each op's line;
//!   [`parse_history`] and [`parse_history_bytes`] also each op's optional
//!   `log` field, its place in the resource's log ([`History`]).
//! * [`check`]`(ops, Model, Option<Duration>) -> Result<CheckResult, InputError>`
//!   and [`check_with`] for a custom [`SeqModel`]. The `Err` is an op the model
//!   cannot interpret (bad `arg`/`out` shape, unknown op name).
//!   [`check_with_options`] takes [`CheckOptions`]: the time budget, the
//!   witness path on or off, and the resource's own log order if any.
//!   Each [`PartitionResult`] says which path decided it ([`DecidedBy`]:
//!   log, witness, finder, search) and why the witness path fell back.
//! * [`CheckResult`] (serde `Serialize`): `valid` (`true`/`false`/`"unknown"`),
//!   per-partition [`PartitionResult`]s and an optional [`Counterexample`].
//! * [`command`]`(path, model_name, timeout) -> i32`: the CLI body; prints
//!   parse time, check time and the verdict (with counterexample) to stdout,
//!   errors to stderr; exit code 0 linearizable, 1 not, 2 bad input (unknown
//!   model, unreadable file, malformed line), 3 unknown (timeout).
//!   [`render`] formats a [`CheckResult`] the same way.
//! * [`gen`]: seeded history generator ([`gen::generate`], [`gen::write_jsonl`]).
//!
//! # Semantics
//!
//! Op `a` precedes op `b` in real time iff `a.return_ns < b.call_ns` (equal
//! timestamps count as concurrent). Ops with `return_ns: None` may be
//! linearized anywhere after their call, or never. Ops with `unknown: true`
//! have their `out` ignored but still take effect if linearized. JSON values
//! are compared as serde_json compares them (`7` and `7.0` differ).

mod check;
mod cli;
mod counterexample;
mod decide;
pub mod gen;
mod model;
mod op;
mod parse;
mod refute;
mod search;
mod witness;

pub use check::{
    check, check_with, check_with_options, violation_proved, CheckOptions, CheckResult,
    Counterexample, DecidedBy, InputError, OpView, PartitionResult, Proof, Validity,
};
pub use cli::{
    command, render, EXIT_BAD_INPUT, EXIT_LINEARIZABLE, EXIT_NOT_LINEARIZABLE, EXIT_UNKNOWN,
};
pub use model::{
    FencedInput, FencedModel, FencedState, Interner, KvInput, KvModel, Model, SeqModel,
};
pub use op::{Op, OpKind};
pub use parse::{
    parse_history, parse_history_bytes, parse_jsonl, parse_jsonl_bytes, parse_jsonl_with_lines,
    History, ParseError,
};
