//! `report.html`: one self-contained file (inline CSS, JS and SVG, the data as an
//! embedded JSON block) that explains a run without a network or any other program.
//!
//! Everything that can be said in words — the verdict, the counterexamples, the
//! faults — is rendered here in Rust, so the page reads correctly even with scripts
//! off and tests can assert on it. The timeline and the charts are drawn by the
//! inline script from the embedded data, because 100,000 ops as SVG elements would
//! make the page unusable.

use std::collections::HashMap;
use std::fmt::Write as _;

mod checks;
mod data;
mod findings;
mod index;
mod lin;
mod page;

use checks::*;
use data::*;
pub use index::render_index;
use lin::*;
pub use page::render_html;
use page::*;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::descriptor::{self, Descriptor};
use crate::{
    Expectation, FaultWindow, Hold, LinearizableCheck, Overlap, Report, StaleWrite, Timeline,
    Validity, WriteRef,
};

const REPORT_CSS: &str = include_str!("report.css");
const REPORT_JS: &str = include_str!("report.js");
const INDEX_JS: &str = include_str!("index.js");

/// Counterexamples listed in words per checker; the rest are still marked on the
/// timeline. Beyond this a page gets long without telling more.
const MAX_LISTED: usize = 100;

/// JavaScript numbers are doubles: integers beyond this lose digits (lease IDs do),
/// so the embedded data carries them as strings.
const JS_SAFE_INT: i128 = 9_007_199_254_740_991;

/// One run of a suite, as the index page lists it.
#[derive(Debug, Clone)]
pub struct SuiteEntry {
    pub scenario: String,
    pub passed: bool,
    /// Key counts, e.g. `fencing valid (0 stale accepted), mutex INVALID (8 overlaps)`.
    pub verdict_line: String,
    pub elapsed_s: f64,
    /// Link to the run's `report.html`, relative to the index page.
    pub report_html: String,
    pub seed: u64,
    /// The lock service ("etcd", "zookeeper") and the version that ran.
    pub service: String,
    pub version: String,
}

/// Writes `dir/report.html`.
pub fn write_html(dir: &Path, report: &Report, timeline: &Timeline) -> io::Result<PathBuf> {
    let path = dir.join("report.html");
    std::fs::write(&path, render_html(report, timeline))?;
    Ok(path)
}

/// Writes `dir/index.html` for a suite of runs.
pub fn write_index(dir: &Path, entries: &[SuiteEntry]) -> io::Result<PathBuf> {
    let path = dir.join("index.html");
    std::fs::write(&path, render_index(entries))?;
    Ok(path)
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Makes JSON text safe inside `<script type="application/json">`. Escaping every
/// `<` (not only `</`) also defuses `<!--`, which switches the HTML tokenizer into
/// an escaped state where a later `</script>` no longer ends the block. The
/// replacements are JSON escapes, so `JSON.parse` returns the original strings.
pub fn script_safe_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            _ => out.push(c),
        }
    }
    out
}

/// Seconds since the run's origin, for words.
struct Clock {
    origin: u64,
}

impl Clock {
    fn rel_us(&self, ns: u64) -> i64 {
        ((ns as i128 - self.origin as i128) / 1000) as i64
    }

    fn secs(&self, ns: u64) -> f64 {
        (ns as i128 - self.origin as i128) as f64 / 1e9
    }

    /// `12.310 s`: milliseconds matter when two writes race.
    fn at(&self, ns: u64) -> String {
        format!("{:.3} s", self.secs(ns))
    }

    /// `9.80–13.10 s`, or `from 9.80 s until the run ended`.
    fn span(&self, start: u64, end: Option<u64>) -> String {
        match end {
            Some(e) => format!("{:.2}–{:.2} s", self.secs(start), self.secs(e)),
            None => format!("from {:.2} s until the run ended", self.secs(start)),
        }
    }
}

fn duration_words(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn opt_i64(v: Option<i64>) -> String {
    v.map_or_else(|| "?".to_string(), |x| x.to_string())
}

fn validity_class(v: Validity) -> &'static str {
    match v {
        Validity::Valid => "valid",
        Validity::Invalid => "invalid",
        Validity::Unknown => "unknown",
    }
}

/// Lane index per worker id: `Timeline::workers` first, in order, then any worker
/// that appears only in the data (so nothing is silently dropped).
struct Lanes {
    ids: Vec<u32>,
    index: HashMap<u32, usize>,
}

impl Lanes {
    fn new(report: &Report, tl: &Timeline) -> Lanes {
        let mut lanes = Lanes {
            ids: Vec::new(),
            index: HashMap::new(),
        };
        for &w in &tl.workers {
            lanes.add(w);
        }
        for w in tl
            .ops
            .iter()
            .map(|o| o.worker)
            .chain(tl.holds.iter().map(|h| h.worker))
            .chain(tl.notices.iter().map(|n| n.worker))
        {
            lanes.add(w);
        }
        for v in &report.checks.fencing.violations {
            for w in [&v.stale.worker, &v.newer.worker] {
                if let Ok(w) = w.parse() {
                    lanes.add(w);
                }
            }
        }
        lanes
    }

    fn add(&mut self, w: u32) {
        if !self.index.contains_key(&w) {
            self.index.insert(w, self.ids.len());
            self.ids.push(w);
        }
    }

    fn of(&self, w: u32) -> Option<usize> {
        self.index.get(&w).copied()
    }

    fn of_str(&self, w: &str) -> Option<usize> {
        w.parse().ok().and_then(|w| self.of(w))
    }
}

/// Replaces integers JavaScript cannot hold exactly by their decimal strings.
fn js_safe(v: &Value) -> Value {
    match v {
        Value::Number(n) => {
            let big = n
                .as_i64()
                .map(|x| (x as i128).abs() > JS_SAFE_INT)
                .or_else(|| n.as_u64().map(|x| x as i128 > JS_SAFE_INT))
                .unwrap_or(false);
            if big {
                Value::String(n.to_string())
            } else {
                v.clone()
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(js_safe).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), js_safe(v))).collect()),
        _ => v.clone(),
    }
}

/// A session id (etcd lease ID, ZooKeeper session id) as etcdctl and zkCli print it.
pub fn hex_id(id: i64) -> String {
    format!("0x{:x}", id as u64)
}

fn push_int(out: &mut String, x: Option<i128>) {
    match x {
        None => out.push_str("null"),
        Some(x) if x.abs() > JS_SAFE_INT => {
            let _ = write!(out, "\"{x}\"");
        }
        Some(x) => {
            let _ = write!(out, "{x}");
        }
    }
}

/// A growing table of distinct strings, so 100,000 ops carry small indices instead
/// of repeating keys and error messages.
#[derive(Default)]
struct Interner {
    list: Vec<String>,
    index: HashMap<String, usize>,
}

impl Interner {
    fn with(init: &[&str]) -> Interner {
        let mut i = Interner::default();
        for s in init {
            i.get(s);
        }
        i
    }

    fn get(&mut self, s: &str) -> usize {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }

    fn json(&self) -> String {
        serde_json::to_string(&self.list).unwrap_or_else(|_| "[]".into())
    }
}

/// Columns of numbers written straight into JSON text: building a `Value` per op
/// would cost far more memory and time at 100,000 ops.
struct Columns {
    names: Vec<&'static str>,
    cols: Vec<String>,
}

impl Columns {
    fn new(names: &[&'static str]) -> Columns {
        Columns {
            names: names.to_vec(),
            cols: names.iter().map(|_| String::from("[")).collect(),
        }
    }

    fn push(&mut self, col: usize, x: Option<i128>) {
        let c = &mut self.cols[col];
        if c.len() > 1 {
            c.push(',');
        }
        push_int(c, x);
    }

    fn finish(self) -> String {
        let mut out = String::from("{");
        for (i, (name, mut col)) in self.names.iter().zip(self.cols).enumerate() {
            if i > 0 {
                out.push(',');
            }
            col.push(']');
            let _ = write!(out, "\"{name}\":{col}");
        }
        out.push('}');
        out
    }
}

/// Which checker an expectation belongs to, to repeat it in that checker's
/// section: the descriptor that lists it ("" for a run statistic).
fn expectation_checker(name: &str) -> &'static str {
    descriptor::judged_by(name).map_or("", |d| d.name)
}

struct Ctx<'a> {
    report: &'a Report,
    clock: Clock,
    lanes: Lanes,
    faults: HashMap<u32, &'a FaultWindow>,
}

impl Ctx<'_> {
    fn victims(f: &FaultWindow) -> Vec<u32> {
        f.detail
            .get("victims")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.get("worker").and_then(Value::as_u64))
                    .map(|w| w as u32)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// "worker 3 was paused 9.80–13.10 s (fault 1)".
    fn fault_words(&self, f: &FaultWindow) -> String {
        let victims = Self::victims(f);
        let who = match victims.len() {
            0 => String::new(),
            1 => format!("worker {}", victims[0]),
            _ => format!(
                "workers {}",
                victims
                    .iter()
                    .map(|w| w.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let plural = victims.len() > 1;
        let mut s = match (f.kind.as_str(), who.is_empty()) {
            ("pause", false) => format!(
                "{who} {} paused {}",
                if plural { "were" } else { "was" },
                self.clock.span(f.start_ns, f.end_ns)
            ),
            ("revoke-lease", false) => format!(
                "{who}'s lease{} {} revoked at {}",
                if plural { "s" } else { "" },
                if plural { "were" } else { "was" },
                self.clock.at(f.start_ns)
            ),
            (kind, false) => format!("{kind} on {who}, {}", self.clock.span(f.start_ns, f.end_ns)),
            (kind, true) => format!(
                "{kind} on {}, {}",
                f.target,
                self.clock.span(f.start_ns, f.end_ns)
            ),
        };
        let _ = write!(s, " (fault {})", f.id);
        if f.outcome != "ok" {
            let _ = write!(s, ", which could not be applied ({})", f.outcome);
        }
        s
    }

    fn faults_clause(&self, ids: &[u32]) -> String {
        let words: Vec<String> = ids
            .iter()
            .map(|id| match self.faults.get(id) {
                Some(f) => self.fault_words(f),
                None => format!("fault {id} (not in the record)"),
            })
            .collect();
        words.join(" and ")
    }

    fn write_words(&self, w: &WriteRef) -> String {
        format!(
            "worker {}'s write with revision {} was {} at {}",
            w.worker,
            opt_i64(w.revision),
            if w.verdict == "accepted" {
                "accepted".to_string()
            } else {
                format!("answered {}", w.verdict)
            },
            self.clock.at(w.time_ns)
        )
    }

    fn stale_words(&self, v: &StaleWrite) -> String {
        let mut s = format!(
            "Worker {} wrote {} with revision {} at {}, after {}",
            v.stale.worker,
            v.stale.key,
            opt_i64(v.stale.revision),
            self.clock.at(v.stale.time_ns),
            self.write_words(&v.newer),
        );
        if !v.faults.is_empty() {
            let _ = write!(s, ", while {}", self.faults_clause(&v.faults));
        }
        let _ = write!(
            s,
            ". The storage accepted it (token {}, value {})",
            opt_i64(v.stale.token),
            opt_i64(v.stale.value)
        );
        if let Some(acq) = v.stale_acquired_ns {
            let _ = write!(
                s,
                "; worker {}'s grant dates from {}",
                v.stale.worker,
                self.clock.at(acq)
            );
        }
        s.push('.');
        s
    }

    fn hold_words(&self, h: &Hold) -> String {
        format!(
            "worker {} (revision {}, acquired at {}, {} at {})",
            h.worker,
            opt_i64(h.revision),
            self.clock.at(h.start_ns),
            if h.released {
                "released"
            } else {
                "never released, hold ends"
            },
            self.clock.at(h.end_ns)
        )
    }

    fn overlap_words(&self, o: &Overlap) -> String {
        let mut s = format!(
            "{} and {} both held {} for {}, {}",
            capitalize(&self.hold_words(&o.a)),
            self.hold_words(&o.b),
            o.a.key,
            duration_words(o.end_ns.saturating_sub(o.start_ns)),
            self.clock.span(o.start_ns, Some(o.end_ns)),
        );
        if !o.faults.is_empty() {
            let _ = write!(s, ", while {}", self.faults_clause(&o.faults));
        }
        s.push('.');
        s
    }

    fn fresh_words(&self, w: &WriteRef) -> String {
        format!(
            "Worker {}'s write to {} with revision {} (token {}) was answered {} at {}, \
             though no newer grant had written: the storage refused the legitimate holder.",
            w.worker,
            w.key,
            opt_i64(w.revision),
            opt_i64(w.token),
            w.verdict,
            self.clock.at(w.time_ns)
        )
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Renders the whole page.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_safe_json_round_trips() {
        let s = serde_json::to_string(&serde_json::json!({"</script><!--x": "a&b\u{2028}"}))
            .expect("json");
        let safe = script_safe_json(&s);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: Value = serde_json::from_str(&safe).expect("parse");
        assert_eq!(back["</script><!--x"], "a&b\u{2028}");
    }

    #[test]
    fn big_integers_become_strings() {
        let v = js_safe(&serde_json::json!({"lease": 7550463076871340294u64, "rev": 7}));
        assert_eq!(v["lease"], "7550463076871340294");
        assert_eq!(v["rev"], 7);
    }

    #[test]
    fn expectations_map_to_checkers() {
        assert_eq!(expectation_checker("fencing_violations"), "fencing");
        assert_eq!(expectation_checker("stale_rejected"), "fencing");
        assert_eq!(expectation_checker("mutex_overlaps"), "mutex");
        assert_eq!(expectation_checker("fresh_rejected"), "fencing");
        assert_eq!(expectation_checker("lost_updates"), "counter");
        assert_eq!(expectation_checker("linearizable"), "linearizable");
        assert_eq!(expectation_checker("exclusion_violations"), "exclusion");
        assert_eq!(expectation_checker("token_repeats"), "token");
        assert_eq!(expectation_checker("keepalive_lost"), "");
    }
}
