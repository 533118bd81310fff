//! Body of `fencecheck lincheck FILE.jsonl [--model kv|fenced] [--timeout 60s]`.

use crate::check::{
    check_with_options, CheckOptions, CheckResult, DecidedBy, InputError, OpView, Validity,
};
use crate::model::{FencedModel, KvModel, Model};
use crate::op::Op;
use crate::parse::{parse_history, History};
use std::path::Path;
use std::time::{Duration, Instant};

pub const EXIT_LINEARIZABLE: i32 = 0;
pub const EXIT_NOT_LINEARIZABLE: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;
pub const EXIT_UNKNOWN: i32 = 3;

/// Parses, checks and prints a verdict. Returns the process exit code:
/// 0 linearizable, 1 not linearizable, 2 bad input, 3 unknown (timeout).
pub fn command(path: &Path, model: &str, timeout: Duration) -> i32 {
    let model: Model = match model.parse() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lincheck: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let t0 = Instant::now();
    let History { ops, lines, log } = match parse_history(path) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("lincheck: {}: {e}", path.display());
            return EXIT_BAD_INPUT;
        }
    };
    let parse_s = t0.elapsed().as_secs_f64();
    println!(
        "lincheck: {} ops from {} (model {}), parsed in {:.3} s",
        ops.len(),
        path.display(),
        model.name(),
        parse_s
    );
    let line_of = |i: usize| lines.get(i).copied().unwrap_or(0);
    let opts = CheckOptions {
        timeout: Some(timeout),
        log: log.as_deref(),
        ..CheckOptions::default()
    };
    let result = match check_model(&ops, model, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "lincheck: {}: line {}: {}",
                path.display(),
                line_of(e.index),
                e.message
            );
            return EXIT_BAD_INPUT;
        }
    };
    print!("{}", render(&result, &line_of));
    match result.valid {
        Validity::Linearizable => EXIT_LINEARIZABLE,
        Validity::NotLinearizable => EXIT_NOT_LINEARIZABLE,
        Validity::Unknown => EXIT_UNKNOWN,
    }
}

fn check_model(ops: &[Op], model: Model, opts: &CheckOptions) -> Result<CheckResult, InputError> {
    match model {
        Model::Kv => check_with_options(ops, &KvModel, opts),
        Model::Fenced => check_with_options(ops, &FencedModel, opts),
    }
}

fn fmt_op(v: &OpView, line_of: &dyn Fn(usize) -> u32) -> String {
    let ret = v
        .return_ns
        .map_or_else(|| "never".to_string(), |r| r.to_string());
    let out = if v.unknown || v.return_ns.is_none() {
        "?".to_string()
    } else {
        v.out.to_string()
    };
    let mut s = format!(
        "line {:>7}  client {:>3}  {}({}) -> {}  [{} .. {}]",
        line_of(v.index),
        v.client,
        v.op,
        v.arg,
        out,
        v.call_ns,
        ret
    );
    if let Some(st) = &v.state_after {
        s.push_str(&format!("  => {st}"));
    }
    s
}

/// Human-readable verdict (what `command` prints after the parse line).
pub fn render(r: &CheckResult, line_of: &dyn Fn(usize) -> u32) -> String {
    let visited: u64 = r.partitions.iter().map(|p| p.visited).sum();
    let mut s = format!(
        "checked in {:.3} s: {} partitions, {} configurations visited\nverdict: {}\n",
        r.check_ms / 1e3,
        r.partitions.len(),
        visited,
        r.valid
    );
    // Which path decided how many partitions, and why the first partition
    // the witness path could not order fell back.
    let mut paths: Vec<(DecidedBy, usize)> = Vec::new();
    for p in &r.partitions {
        match paths.iter_mut().find(|(q, _)| *q == p.decided_by) {
            Some((_, c)) => *c += 1,
            None => paths.push((p.decided_by, 1)),
        }
    }
    let paths: Vec<String> = paths.iter().map(|(p, c)| format!("{p} {c}")).collect();
    s.push_str(&format!("decided by: {}\n", paths.join(", ")));
    if let Some(p) = r.partitions.iter().find(|p| p.fallback.is_some()) {
        s.push_str(&format!(
            "  key {:?} fell back to the finder and search: {}\n",
            p.key,
            p.fallback.as_deref().unwrap_or_default()
        ));
    }
    if r.valid == Validity::Unknown {
        let undecided = r
            .partitions
            .iter()
            .filter(|p| p.valid == Validity::Unknown)
            .count();
        s.push_str(&format!(
            "  time budget ran out with {undecided} partition(s) undecided\n"
        ));
    }
    if let Some(ce) = &r.counterexample {
        s.push_str(&format!(
            "  key {:?}: longest linearizable prefix has {} ops",
            ce.key,
            ce.linearized.len()
        ));
        const TAIL: usize = 8;
        if ce.linearized.len() > TAIL {
            s.push_str(&format!(" (last {TAIL} shown)"));
        }
        s.push_str(":\n");
        let from = ce.linearized.len().saturating_sub(TAIL);
        for v in &ce.linearized[from..] {
            s.push_str(&format!("    {}\n", fmt_op(v, line_of)));
        }
        s.push_str(&format!(
            "  state then: {}\n  cannot be placed (rejected in this state, or ruled out by \
             whatever goes next):\n",
            ce.state
        ));
        for v in &ce.unplaceable {
            s.push_str(&format!("    {}\n", fmt_op(v, line_of)));
        }
        if let Some(p) = &ce.proof {
            s.push_str(&format!("  proved without the search: {}:\n", p.reason));
            for v in &p.ops {
                s.push_str(&format!("    {}\n", fmt_op(v, line_of)));
            }
        }
    }
    s
}
