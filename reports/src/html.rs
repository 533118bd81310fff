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

mod findings;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{
    Expectation, FaultWindow, Hold, LinearizableCheck, Overlap, Report, StaleWrite, Timeline,
    Validity, WriteRef,
};

const REPORT_CSS: &str = include_str!("html/report.css");
const REPORT_JS: &str = include_str!("html/report.js");
const INDEX_JS: &str = include_str!("html/index.js");

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

/// Which checker an expectation belongs to, to repeat it in that checker's section.
fn expectation_checker(name: &str) -> &'static str {
    let n = name.to_ascii_lowercase();
    if n.contains("linear") {
        "linearizable"
    } else if n.contains("mutex") || n.contains("overlap") {
        "mutex"
    } else if n.contains("lost") || n.contains("counter") || n.contains("increment") {
        "counter"
    } else if n.contains("fenc") || n.contains("stale") || n.contains("fresh") {
        "fencing"
    } else {
        ""
    }
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
pub fn render_html(report: &Report, timeline: &Timeline) -> String {
    let ctx = Ctx {
        report,
        clock: Clock {
            origin: report.run.time_origin_ns,
        },
        lanes: Lanes::new(report, timeline),
        faults: report.faults.iter().map(|f| (f.id, f)).collect(),
    };
    let run = &report.run;
    let mut h = String::with_capacity(64 * 1024 + timeline.ops.len() * 64);
    let title = format!("{} — {} — fencecheck", run.scenario, verdict_word(report));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
        escape(&title),
        REPORT_CSS
    );
    verdict_banner(&mut h, &ctx);
    h.push_str("<main>\n");
    nav(&mut h, report);
    run_facts(&mut h, &ctx);
    fencing_section(&mut h, &ctx);
    mutex_section(&mut h, &ctx);
    counter_section(&mut h, &ctx);
    if let Some(l) = &report.checks.linearizable {
        linearizable_section(&mut h, &ctx, l);
    }
    findings::findings_section(&mut h, &ctx);
    timeline_section(&mut h, &ctx);
    stats_section(&mut h, &ctx);
    how_to_read(&mut h);
    let _ = write!(
        h,
        "</main>\n<footer>fencecheck {} · report schema {} · run directory <code>{}</code></footer>\n",
        escape(&report.fencecheck_version),
        report.schema_version,
        escape(&run.run_dir)
    );
    h.push_str("<div id=\"tl-tip\" class=\"tip\" hidden></div>\n");
    h.push_str("<script type=\"application/json\" id=\"fc-data\">");
    h.push_str(&script_safe_json(&data_json(&ctx, timeline)));
    h.push_str("</script>\n<script>\n");
    h.push_str(REPORT_JS);
    h.push_str("</script>\n</body>\n</html>\n");
    h
}

/// PASS, FAIL, or INCOMPLETE for a run that never reached its end.
fn verdict_word(r: &Report) -> &'static str {
    if r.incomplete.is_some() {
        "INCOMPLETE"
    } else if r.passed {
        "PASS"
    } else {
        "FAIL"
    }
}

fn verdict_banner(h: &mut String, ctx: &Ctx) {
    let r = ctx.report;
    let unmet = r.expectations.iter().filter(|e| !e.met).count();
    let sub = if let Some(why) = &r.incomplete {
        why.clone()
    } else if r.passed {
        if r.expectations.is_empty() {
            "PASS: no expectation was set, and nothing the defaults check failed".to_string()
        } else {
            format!(
                "PASS: every expectation met ({} of {})",
                r.expectations.len(),
                r.expectations.len()
            )
        }
    } else if unmet > 0 {
        format!(
            "FAIL: {unmet} of {} expectations not met",
            r.expectations.len()
        )
    } else {
        "FAIL".to_string()
    };
    let word = verdict_word(r);
    let _ = write!(
        h,
        "<header id=\"verdict\" class=\"verdict {cls}\" data-passed=\"{passed}\">\n\
         <div class=\"verdict-word\">{word}</div>\n<div class=\"verdict-text\">\n\
         <h1>{scenario}</h1>\n<p class=\"desc\">{desc}</p>\n<p class=\"verdict-sub\">{sub} <a class=\"howto-link\" href=\"#howto\">how to read this report</a></p>\n",
        cls = if r.passed { "pass" } else { "fail" },
        passed = r.passed,
        scenario = escape(&r.run.scenario),
        desc = escape(&r.run.description),
        sub = escape(&sub),
    );
    h.push_str("</div>\n");
    expectations_table(h, &r.expectations, "expectations");
    h.push_str("</header>\n");
}

fn expectations_table(h: &mut String, exps: &[Expectation], id: &str) {
    if exps.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<table class=\"exp\" id=\"{id}\">\n<thead><tr><th>expectation</th><th>expected</th>\
         <th>actual</th><th></th></tr></thead>\n<tbody>\n"
    );
    for e in exps {
        let _ = writeln!(
            h,
            "<tr class=\"{cls}\" data-name=\"{name}\"><td><code>{name}</code></td><td>{exp}</td>\
             <td>{act}</td><td class=\"met\">{met}</td></tr>",
            cls = if e.met { "met" } else { "unmet" },
            name = escape(&e.name),
            exp = escape(&e.expected),
            act = escape(&e.actual),
            met = if e.met { "✓ met" } else { "✗ NOT MET" },
        );
    }
    h.push_str("</tbody></table>\n");
}

fn nav(h: &mut String, r: &Report) {
    h.push_str("<nav id=\"toc\"><a href=\"#run\">run</a>");
    for (id, name, v) in [
        ("check-fencing", "fencing", Some(r.checks.fencing.valid)),
        ("check-mutex", "mutex", Some(r.checks.mutex.valid)),
        ("check-counter", "counter", Some(r.checks.counter.valid)),
        (
            "check-linearizable",
            "linearizable",
            r.checks.linearizable.as_ref().map(|l| l.valid),
        ),
    ] {
        if let Some(v) = v {
            let _ = write!(
                h,
                "<a href=\"#{id}\" class=\"v-{}\">{name}</a>",
                validity_class(v)
            );
        }
    }
    h.push_str("<a href=\"#findings\">findings</a>");
    h.push_str("<a href=\"#timeline\">timeline</a><a href=\"#charts\">throughput &amp; latency</a><a href=\"#howto\">how to read</a></nav>\n");
}

fn run_facts(h: &mut String, ctx: &Ctx) {
    let run = &ctx.report.run;
    h.push_str("<section id=\"run\" class=\"card\">\n<h2>The run</h2>\n<dl class=\"facts\">\n");
    let fact = |h: &mut String, k: &str, v: String| {
        let _ = writeln!(h, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), v);
    };
    fact(h, "scenario", format!("<b>{}</b>", escape(&run.scenario)));
    fact(h, "seed", run.seed.to_string());
    fact(
        h,
        "backend",
        format!(
            "{} <span class=\"muted\">— {}</span>",
            escape(&run.backend),
            escape(&run.backend_reason)
        ),
    );
    let version = if run.service_version.is_empty() {
        &run.etcd_version
    } else {
        &run.service_version
    };
    fact(
        h,
        "lock service",
        format!(
            "<span id=\"service\">{}</span> {} · {} member{}",
            escape(&run.service),
            escape(version),
            run.etcd_members,
            if run.etcd_members == 1 { "" } else { "s" }
        ),
    );
    fact(
        h,
        "workload",
        format!(
            "{} workers · {} key{} · session TTL {} s",
            run.workers,
            run.keys,
            if run.keys == 1 { "" } else { "s" },
            run.ttl_s
        ),
    );
    fact(
        h,
        "storage",
        format!(
            "<span id=\"resource\">{}</span> · fencing <code>{}</code> · token <code>{}</code>",
            escape(&run.resource),
            escape(&run.fencing),
            escape(&run.token)
        ),
    );
    fact(
        h,
        "duration",
        format!(
            "{:.1} s · started {}",
            run.duration_s,
            escape(&run.started_at)
        ),
    );
    let st = &ctx.report.stats;
    fact(
        h,
        "activity",
        format!(
            "{} events · {} faults · {} keepalives lost",
            st.events,
            ctx.report.faults.len(),
            st.keepalive_lost
        ),
    );
    h.push_str("</dl>\n");
    let _ = writeln!(
        h,
        "<div class=\"repro\"><span>reproduce</span><pre id=\"repro-cmd\">{}</pre>\
         <button type=\"button\" class=\"copy\" data-copy=\"repro-cmd\">copy</button></div>",
        escape(&run.command)
    );
    if let Some(j) = &ctx.report.checks.judged_from {
        let _ = writeln!(
            h,
            "<div id=\"judged-from\" class=\"problems\"><h3>Judged from the {} \
             (no storage log): weaker than with one</h3><ul>",
            escape(&j.source.replace('-', " "))
        );
        for w in &j.weaker {
            let _ = writeln!(h, "<li>{}</li>", escape(w));
        }
        h.push_str("</ul></div>\n");
    }
    if !ctx.report.problems.is_empty() {
        h.push_str("<div id=\"problems\" class=\"problems\"><h3>Problems met while reading the record</h3><ul>\n");
        for p in &ctx.report.problems {
            let _ = writeln!(h, "<li>{}</li>", escape(p));
        }
        h.push_str("</ul></div>\n");
    }
    h.push_str("</section>\n");
}

/// The timeline's colours, shown under it and in the how-to box.
const LEGEND: &str = "<li><span class=\"sw hold\"></span>lock hold (acquire ok → release)</li>\n\
<li><span class=\"sw wait\"></span>waiting for the lock (acquire invoked)</li>\n\
<li><span class=\"sw o-ok\"></span>op ok</li>\n\
<li><span class=\"sw o-rej\"></span>write rejected as stale by the storage</li>\n\
<li><span class=\"sw o-fail\"></span>op failed</li>\n\
<li><span class=\"sw o-unk\"></span>outcome unknown (timed out / never completed)</li>\n\
<li><span class=\"sw stale\"></span>stale write accepted — a fencing violation (dashed line: the newer write it came after)</li>\n\
<li><span class=\"sw overlap\"></span>two holders at once (mutex overlap)</li>\n\
<li><span class=\"sw ka\"></span>keepalive lost</li>\n\
<li><span class=\"sw f-pause\"></span>pause fault window</li>\n\
<li><span class=\"sw f-revoke\"></span>lease revocation</li>\n\
<li><span class=\"sw unsafe\"></span>unsafe window (session ended at the service, holder still at work)</li>\n\
<li><span class=\"sw f-other\"></span>other fault</li>\n\
";

fn how_to_read(h: &mut String) {
    h.push_str(
        "<section id=\"howto\" class=\"card\">\n<details open>\n<summary><h2>How to read this report</h2></summary>\n\
<div class=\"howto-grid\">\n<div>\n\
<p>Workers contend for one etcd lock per key and, while they believe they hold it, do read-modify-write \
increments on the storage, sending a <b>fencing token</b> with each write. The nemesis injects faults \
(SIGSTOP pauses, lease revocation) so that a holder loses its lock without knowing.</p>\n\
<dl class=\"defs\">\n\
<dt>fencing</dt><dd>Was a write from an <em>older</em> lock grant accepted after a newer grant had written? \
Each such write is a violation. <i>Stale rejected</i> is fencing doing its job; <i>fresh rejected</i> means the \
storage refused the legitimate holder (a liveness failure).</dd>\n\
<dt>mutex</dt><dd>Did two workers believe they held the lock at once (from seeing <code>acquire ok</code> to \
invoking <code>release</code>)? Under pauses this is <em>expected</em>: a lease lock alone is not a mutex — \
that is why fencing exists.</dd>\n\
<dt>counter</dt><dd>Every accepted write is one increment, so the final value must equal the increments the \
storage accepted; <i>lost</i> counts the overwritten ones.</dd>\n\
<dt>linearizable</dt><dd>Does the client-observed storage history fit a fenced register? A counterexample \
lists the longest order that fits and the operations that cannot come next.</dd>\n\
<dt>verdict</dt><dd>PASS when every expectation of the scenario holds (a checker may be INVALID and the run \
still PASS, e.g. the negative-control scenarios expect violations).</dd>\n\
</dl>\n</div>\n<div>\n<h3>Timeline colours</h3>\n<ul class=\"legend\">\n",
    );
    h.push_str(LEGEND);
    h.push_str(
        "</ul>\n<p class=\"muted\">Zoomed out, each pixel column shows the worst outcome among its ops. Scroll to zoom, \
drag to pan, shift-drag to zoom into a range, hover for details. Times are seconds since the run started.</p>\n\
</div>\n</div>\n</details>\n</section>\n",
    );
}

fn check_header(h: &mut String, ctx: &Ctx, id: &str, name: &str, valid: Validity, question: &str) {
    let _ = write!(
        h,
        "<section id=\"check-{id}\" class=\"card check\" data-checker=\"{id}\" data-valid=\"{v}\">\n\
         <h2><span class=\"badge v-{cls}\">{vtext}</span> {name}</h2>\n<p class=\"question\">{q}</p>\n",
        v = match valid {
            Validity::Valid => "true",
            Validity::Invalid => "false",
            Validity::Unknown => "unknown",
        },
        cls = validity_class(valid),
        vtext = valid,
        q = escape(question),
    );
    let exps: Vec<Expectation> = ctx
        .report
        .expectations
        .iter()
        .filter(|e| expectation_checker(&e.name) == id)
        .cloned()
        .collect();
    if !exps.is_empty() {
        h.push_str("<div class=\"check-exp\"><span>expected by the scenario:</span> ");
        for e in &exps {
            let _ = write!(
                h,
                "<span class=\"pill {}\"><code>{}</code> {} — actual {} {}</span> ",
                if e.met { "met" } else { "unmet" },
                escape(&e.name),
                escape(&e.expected),
                escape(&e.actual),
                if e.met { "✓" } else { "✗" }
            );
        }
        h.push_str("</div>\n");
    }
}

fn tiles(h: &mut String, items: &[(&str, u64, &str)]) {
    h.push_str("<div class=\"tiles\">");
    for (label, n, class) in items {
        let _ = write!(
            h,
            "<div class=\"tile {class}\"><b>{n}</b><span>{}</span></div>",
            escape(label)
        );
    }
    h.push_str("</div>\n");
}

/// Items shown before a list folds the rest under "show N more".
const SHOWN_UNFOLDED: usize = 5;

/// Writes `<li>` items, folding all but the first few into a `<details>`.
fn folded_list(h: &mut String, list_id: &str, items: &[String]) {
    let _ = writeln!(h, "<ol class=\"cx\" id=\"{list_id}\">");
    for (i, it) in items.iter().enumerate() {
        if i == SHOWN_UNFOLDED {
            let _ = writeln!(
                h,
                "</ol>\n<details class=\"more\"><summary>show {} more</summary>\n<ol class=\"cx\" start=\"{}\">",
                items.len() - SHOWN_UNFOLDED,
                SHOWN_UNFOLDED + 1
            );
        }
        h.push_str(it);
        h.push('\n');
    }
    h.push_str("</ol>\n");
    if items.len() > SHOWN_UNFOLDED {
        h.push_str("</details>\n");
    }
}

fn goto_link(id: &str) -> String {
    format!("<a class=\"goto\" href=\"#show={id}\" data-goto=\"{id}\">show on timeline ↘</a>")
}

fn more_note(h: &mut String, total: usize) {
    if total > MAX_LISTED {
        let _ = writeln!(
            h,
            "<p class=\"muted\">… and {} more, all marked on the timeline.</p>",
            total - MAX_LISTED
        );
    }
}

fn fencing_section(h: &mut String, ctx: &Ctx) {
    let f = &ctx.report.checks.fencing;
    check_header(
        h,
        ctx,
        "fencing",
        "fencing",
        f.valid,
        "Was a write from an older lock grant accepted after a newer grant had written?",
    );
    let bad = |n: u64| if n > 0 { "bad" } else { "" };
    tiles(
        h,
        &[
            ("writes", f.writes, ""),
            ("accepted", f.accepted, ""),
            ("rejected", f.rejected, ""),
            (
                "stale accepted (violations)",
                f.stale_accepted,
                bad(f.stale_accepted),
            ),
            (
                "stale rejected (fencing at work)",
                f.stale_rejected,
                if f.stale_rejected > 0 { "good" } else { "" },
            ),
            (
                "fresh rejected (liveness)",
                f.fresh_rejected,
                bad(f.fresh_rejected),
            ),
            ("unjudged (no revision)", f.unjudged, ""),
        ],
    );
    if f.violations.is_empty() {
        h.push_str("<p class=\"ok-line\">No stale write was accepted.</p>\n");
    } else {
        let _ = writeln!(h, "<h3>Stale writes accepted ({})</h3>", f.violations.len());
        let items: Vec<String> = f
            .violations
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, v)| {
                let id = format!("fencing-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"violation\">{} {}</li>",
                    escape(&ctx.stale_words(v)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "fencing-violations", &items);
        more_note(h, f.violations.len());
    }
    if !f.fresh_rejected_examples.is_empty() {
        let _ = writeln!(
            h,
            "<h3>Legitimate holders refused ({} shown of {})</h3>",
            f.fresh_rejected_examples.len().min(MAX_LISTED),
            f.fresh_rejected
        );
        let items: Vec<String> = f
            .fresh_rejected_examples
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, w)| {
                let id = format!("fresh-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"fresh\">{} {}</li>",
                    escape(&ctx.fresh_words(w)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "fresh-rejected", &items);
    }
    h.push_str("</section>\n");
}

fn mutex_section(h: &mut String, ctx: &Ctx) {
    let m = &ctx.report.checks.mutex;
    check_header(
        h,
        ctx,
        "mutex",
        "mutex",
        m.valid,
        "Did two workers hold the lock at the same time (client-observed)?",
    );
    tiles(
        h,
        &[
            ("holds", m.holds, ""),
            (
                "overlapping holds",
                m.overlaps,
                if m.overlaps > 0 { "bad" } else { "" },
            ),
        ],
    );
    if m.examples.is_empty() {
        h.push_str("<p class=\"ok-line\">No two holds overlapped.</p>\n");
    } else {
        let _ = writeln!(
            h,
            "<h3>Overlapping holds ({} shown of {})</h3>",
            m.examples.len().min(MAX_LISTED),
            m.overlaps
        );
        let items: Vec<String> = m
            .examples
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, o)| {
                let id = format!("mutex-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"overlap\">{} {}</li>",
                    escape(&ctx.overlap_words(o)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "mutex-overlaps", &items);
    }
    h.push_str("</section>\n");
}

fn counter_section(h: &mut String, ctx: &Ctx) {
    let c = &ctx.report.checks.counter;
    check_header(
        h,
        ctx,
        "counter",
        "counter",
        c.valid,
        "Were acknowledged increments lost?",
    );
    tiles(
        h,
        &[
            ("acknowledged increments", c.acknowledged, ""),
            ("lost", c.lost, if c.lost > 0 { "bad" } else { "" }),
        ],
    );
    if !c.keys.is_empty() {
        h.push_str(
            "<table class=\"grid\" id=\"counter-keys\"><thead><tr><th>key</th><th>acknowledged</th>\
             <th>applied by the storage</th><th>final value</th><th>lost</th><th></th></tr></thead><tbody>\n",
        );
        for k in &c.keys {
            let words = if k.lost > 0 {
                format!(
                    "the storage accepted {} increments but the final value is {}: {} overwritten",
                    k.applied, k.final_value, k.lost
                )
            } else {
                "every applied increment is in the final value".to_string()
            };
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if k.lost > 0 { "unmet" } else { "" },
                escape(&k.key),
                k.acknowledged,
                k.applied,
                k.final_value,
                k.lost,
                escape(&words)
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</section>\n");
}

fn linearizable_section(h: &mut String, ctx: &Ctx, l: &LinearizableCheck) {
    check_header(
        h,
        ctx,
        "linearizable",
        "linearizable",
        l.valid,
        "Does the client-observed storage history fit a fenced register?",
    );
    let _ = writeln!(
        h,
        "<p>{} operations checked against the <code>{}</code> model in {:.0} ms.</p>",
        l.operations,
        escape(&l.model),
        l.elapsed_ms
    );
    let detail = &l.detail;
    if let Some(parts) = detail.get("partitions").and_then(Value::as_array) {
        if !parts.is_empty() && parts.iter().all(Value::is_object) {
            h.push_str("<h3>Partitions</h3>\n");
            object_table(h, ctx, parts, "lin-partitions", None);
        }
    }
    match detail.get("counterexample") {
        Some(Value::Object(ce)) => {
            h.push_str(
                "<div id=\"lin-counterexample\" class=\"lin-cx\">\n<h3>Counterexample</h3>\n",
            );
            let (t0, t1) = ce_time_range(ctx, &Value::Object(ce.clone()));
            if let (Some(a), Some(b)) = (t0, t1) {
                let _ = writeln!(
                    h,
                    "<p>The operations below lie in {}. {}</p>",
                    ctx.clock.span(a, Some(b)),
                    goto_link("lin")
                );
            }
            // Scalars first (key, state…), then the op lists, which are long.
            for (k, v) in ce {
                if !matches!(v, Value::Array(_)) {
                    let _ = writeln!(
                        h,
                        "<div class=\"kv\"><span>{}</span> <code>{}</code></div>",
                        escape(k),
                        escape(&compact_json(v))
                    );
                }
            }
            for (k, v) in ce {
                if let Value::Array(items) = v {
                    let _ = writeln!(h, "<h4>{} ({})</h4>", escape(k), items.len());
                    if items.iter().all(Value::is_object) && !items.is_empty() {
                        // A long linearized prefix hides the interesting end.
                        let shown: &[Value] = if k == "linearized" && items.len() > 20 {
                            let _ = writeln!(
                                h,
                                "<p class=\"muted\">the last 20 of {} shown</p>",
                                items.len()
                            );
                            &items[items.len() - 20..]
                        } else {
                            items
                        };
                        object_table(h, ctx, shown, &format!("lin-{}", k), Some(k));
                    } else {
                        let _ =
                            writeln!(h, "<pre class=\"json\">{}</pre>", escape(&pretty_json(v)));
                    }
                }
            }
            if let Some(svg) = lin_svg(ctx, ce) {
                h.push_str(&svg);
            }
            h.push_str("</div>\n");
        }
        Some(Value::Null) | None if l.valid != Validity::Invalid => {}
        _ => {
            h.push_str("<h3>Checker output</h3>\n");
            let _ = writeln!(
                h,
                "<pre class=\"json\" id=\"lin-detail\">{}</pre>",
                escape(&pretty_json(detail))
            );
        }
    }
    h.push_str("</section>\n");
}

fn pretty_json(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn compact_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        _ => serde_json::to_string(v).unwrap_or_default(),
    }
}

fn is_time_field(k: &str) -> bool {
    k.ends_with("_ns") || k == "time" || k == "call" || k == "return"
}

/// A table of JSON objects: one column per field seen. Nanosecond times within the
/// run are shown as seconds since its start.
fn object_table(h: &mut String, ctx: &Ctx, items: &[Value], id: &str, group: Option<&str>) {
    // Known lincheck fields first, in reading order; anything else after.
    let mut cols: Vec<String> = [
        "index",
        "client",
        "process",
        "key",
        "op",
        "f",
        "arg",
        "out",
        "call_ns",
        "return_ns",
        "unknown",
        "state_after",
    ]
    .iter()
    .filter(|k| items.iter().any(|it| it.get(**k).is_some()))
    .map(|k| k.to_string())
    .collect();
    for it in items {
        if let Value::Object(o) = it {
            for k in o.keys() {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    let _ = write!(
        h,
        "<table class=\"grid small\" id=\"{}\"><thead><tr>",
        escape(id)
    );
    for c in &cols {
        let _ = write!(h, "<th>{}</th>", escape(c));
    }
    h.push_str("</tr></thead><tbody>\n");
    for it in items {
        let _ = write!(
            h,
            "<tr{}>",
            if group == Some("unplaceable") {
                " class=\"unmet\""
            } else {
                ""
            }
        );
        for c in &cols {
            let v = it.get(c).unwrap_or(&Value::Null);
            let text = match (is_time_field(c), v.as_u64()) {
                (true, Some(ns)) if in_run(ctx, ns) => ctx.clock.at(ns),
                _ if v.is_null() => String::new(),
                _ => compact_json(v),
            };
            let _ = write!(h, "<td>{}</td>", escape(&text));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table>\n");
}

fn in_run(ctx: &Ctx, ns: u64) -> bool {
    let r = &ctx.report.run;
    let slack = (r.time_end_ns.saturating_sub(r.time_origin_ns)) / 2 + 60_000_000_000;
    ns + slack >= r.time_origin_ns && ns <= r.time_end_ns + slack
}

/// The span of run times (`*_ns` fields) found in a counterexample, if any.
fn ce_time_range(ctx: &Ctx, v: &Value) -> (Option<u64>, Option<u64>) {
    fn walk(ctx: &Ctx, v: &Value, lo: &mut Option<u64>, hi: &mut Option<u64>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    match (is_time_field(k), v.as_u64()) {
                        (true, Some(ns)) if in_run(ctx, ns) => {
                            *lo = Some(lo.map_or(ns, |l| l.min(ns)));
                            *hi = Some(hi.map_or(ns, |x| x.max(ns)));
                        }
                        _ => walk(ctx, v, lo, hi),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(ctx, v, lo, hi)),
            _ => {}
        }
    }
    let (mut lo, mut hi) = (None, None);
    walk(ctx, v, &mut lo, &mut hi);
    (lo, hi)
}

/// A Knossos-style picture of a linearizability counterexample: one row per client,
/// each op a bar from call to return; the ops that cannot be placed in red.
fn lin_svg(ctx: &Ctx, ce: &serde_json::Map<String, Value>) -> Option<String> {
    struct Bar {
        client: String,
        call: u64,
        ret: Option<u64>,
        label: String,
        bad: bool,
    }
    let mut bars = Vec::new();
    for (group, v) in ce {
        let Some(items) = v.as_array() else { continue };
        let items = if group == "linearized" && items.len() > 20 {
            &items[items.len() - 20..]
        } else {
            &items[..]
        };
        for it in items {
            let Some(call) = it.get("call_ns").and_then(Value::as_u64) else {
                continue;
            };
            let client = it
                .get("client")
                .or_else(|| it.get("process"))
                .or_else(|| it.get("worker"))
                .map(compact_json)
                .unwrap_or_else(|| "?".into());
            let op = it.get("op").or_else(|| it.get("f")).map(compact_json);
            let arg = it.get("arg").filter(|v| !v.is_null()).map(compact_json);
            let out = it.get("out").filter(|v| !v.is_null()).map(compact_json);
            let mut label = op.unwrap_or_default();
            if let Some(a) = arg {
                let _ = write!(label, "({a})");
            }
            if let Some(o) = out {
                let _ = write!(label, " → {o}");
            }
            bars.push(Bar {
                client,
                call,
                ret: it.get("return_ns").and_then(Value::as_u64),
                label,
                bad: group == "unplaceable",
            });
        }
    }
    if bars.is_empty() {
        return None;
    }
    let t0 = bars.iter().map(|b| b.call).min()?;
    let t1 = bars
        .iter()
        .map(|b| b.ret.unwrap_or(b.call))
        .max()?
        .max(t0 + 1);
    let span = (t1 - t0) as f64 * 1.08;
    let mut clients: Vec<String> = bars.iter().map(|b| b.client.clone()).collect();
    clients.sort();
    clients.dedup();
    let (w, left, row) = (900.0_f64, 90.0_f64, 34.0_f64);
    let height = 30.0 + row * clients.len() as f64;
    let x = |ns: u64| left + (ns - t0) as f64 / span * (w - left - 10.0);
    let mut s = format!(
        "<svg class=\"lin-svg\" id=\"lin-svg\" viewBox=\"0 0 {w} {height}\" width=\"100%\" role=\"img\" \
         aria-label=\"counterexample operations\">\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"14\" class=\"axis\">{}</text><text x=\"{}\" y=\"14\" class=\"axis\" text-anchor=\"end\">{}</text>",
        escape(&ctx.clock.at(t0)),
        w - 10.0,
        escape(&ctx.clock.at(t1))
    );
    for (i, c) in clients.iter().enumerate() {
        let y = 24.0 + row * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{}\" class=\"lane\">client {}</text><line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" class=\"rule\"/>",
            y + row / 2.0 + 4.0,
            escape(c),
            w - 10.0,
            y + row - 2.0,
            y + row - 2.0
        );
    }
    for b in &bars {
        let i = clients.iter().position(|c| *c == b.client).unwrap_or(0);
        let y = 24.0 + row * i as f64 + 6.0;
        let x0 = x(b.call);
        let x1 = b.ret.map_or(w - 10.0, x).max(x0 + 3.0);
        // Labels of ops in the right half grow leftwards, so none runs off the picture.
        let (tx, anchor) = if x0 > (left + w) / 2.0 {
            (x1 - 3.0, "end")
        } else {
            (x0 + 3.0, "start")
        };
        let _ = writeln!(
            s,
            "<g class=\"{}\"><rect x=\"{x0:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" rx=\"3\"{}/>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text><title>{} {}–{}</title></g>",
            if b.bad { "op bad" } else { "op" },
            x1 - x0,
            row - 14.0,
            if b.ret.is_none() {
                " stroke-dasharray=\"4 3\""
            } else {
                ""
            },
            tx,
            y + row - 18.0,
            escape(&b.label),
            escape(&b.label),
            escape(&ctx.clock.at(b.call)),
            b.ret
                .map(|r| escape(&ctx.clock.at(r)))
                .unwrap_or_else(|| "never returned".into())
        );
    }
    s.push_str("</svg>\n");
    Some(s)
}

fn timeline_section(h: &mut String, ctx: &Ctx) {
    let n = ctx.lanes.ids.len();
    let lane_h = lane_height(n);
    let _ = write!(
        h,
        "<section id=\"timeline\" class=\"card\" data-lanes=\"{n}\">\n<h2>Timeline</h2>\n\
<div class=\"tl-controls\"><button type=\"button\" data-zoom=\"in\" title=\"zoom in\">+</button>\
<button type=\"button\" data-zoom=\"out\" title=\"zoom out\">−</button>\
<button type=\"button\" data-zoom=\"reset\" title=\"whole run\">whole run</button>\
<span id=\"tl-range\" class=\"muted\"></span><span class=\"muted tl-hint\">scroll: zoom · drag: pan · shift-drag: zoom to range</span></div>\n\
<div class=\"tl-body\">\n<div class=\"tl-labels\" style=\"--lane-h:{lane_h}px\">\
<div class=\"tl-axis-space\"></div><div class=\"tl-lane nemesis\" data-lane=\"nemesis\">nemesis</div>"
    );
    for (i, w) in ctx.lanes.ids.iter().enumerate() {
        let _ = write!(
            h,
            "<div class=\"tl-lane worker\" data-lane=\"{i}\" data-worker=\"{w}\">worker {w}</div>"
        );
    }
    h.push_str(
        "</div>\n<div class=\"tl-canvas-wrap\"><canvas id=\"tl-canvas\" aria-label=\"timeline\"></canvas>\
         <div id=\"tl-loading\" class=\"muted\">drawing…</div></div>\n</div>\n\
         <noscript><p>The timeline and the charts are drawn by JavaScript; everything else on this page reads without it.</p></noscript>\n",
    );
    h.push_str("<ul class=\"legend strip\" id=\"tl-legend\">");
    h.push_str(LEGEND);
    h.push_str("</ul>\n");
    if ctx.report.faults.is_empty() {
        h.push_str("<p class=\"muted\" id=\"tl-faults-none\">No fault was injected.</p>\n");
    } else {
        h.push_str("<h3>Faults</h3>\n<ul id=\"tl-faults\" class=\"faults\">\n");
        for f in &ctx.report.faults {
            let _ = writeln!(
                h,
                "<li class=\"tl-fault k-{kind_cls}\" id=\"fault-{id}\" data-fault-id=\"{id}\" data-kind=\"{kind}\">\
                 <span class=\"sw {sw}\"></span> <b>#{id}</b> {kind} → {target}: {words} {link}</li>",
                id = f.id,
                kind_cls = escape(&f.kind),
                sw = fault_swatch(&f.kind),
                kind = escape(&f.kind),
                target = escape(&f.target),
                words = escape(&ctx.fault_words(f)),
                link = goto_link(&format!("fault-{}", f.id)),
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");
}

fn fault_swatch(kind: &str) -> &'static str {
    match kind {
        "pause" => "f-pause",
        "revoke-lease" => "f-revoke",
        _ => "f-other",
    }
}

fn lane_height(n: usize) -> u32 {
    match n {
        0..=12 => 30,
        13..=24 => 22,
        25..=48 => 16,
        _ => 12,
    }
}

fn stats_section(h: &mut String, ctx: &Ctx) {
    let st = &ctx.report.stats;
    h.push_str(
        "<section id=\"charts\" class=\"card\">\n<h2>Throughput and latency</h2>\n\
<p class=\"muted\">Both charts follow the timeline's zoom; fault windows are shaded.</p>\n\
<h3>Operations completed per second, by outcome</h3>\n\
<div class=\"chart-wrap\"><canvas id=\"chart-throughput\" class=\"chart\"></canvas></div>\n\
<h3>Latency over time <span class=\"muted\">(each op a dot; lines: p99 per time bucket; log scale)</span></h3>\n\
<div id=\"lat-legend\" class=\"chart-legend\"></div>\n\
<div class=\"chart-wrap\"><canvas id=\"chart-latency\" class=\"chart tall\"></canvas></div>\n",
    );
    let _ = write!(
        h,
        "<h3>Latency percentiles</h3>\n<table class=\"grid num\" id=\"latency-table\"><thead><tr><th>op</th><th>count</th>\
         <th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr></thead><tbody>\n"
    );
    for l in &st.latency {
        let _ = writeln!(
            h,
            "<tr data-op=\"{op}\"><td><code>{op}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.count,
            us_words(l.p50_us),
            us_words(l.p90_us),
            us_words(l.p99_us),
            us_words(l.p999_us),
            us_words(l.max_us),
            op = escape(&l.op),
        );
    }
    h.push_str("</tbody></table>\n");
    let _ = writeln!(
        h,
        "<p class=\"muted\">acquires ok {} · failed {} · reads ok {} · writes ok {} · rejected {} · unknown {} · keepalives lost {}</p>",
        st.acquires_ok,
        st.acquires_failed,
        st.reads_ok,
        st.writes_ok,
        st.writes_rejected,
        st.writes_unknown,
        st.keepalive_lost
    );
    h.push_str("</section>\n");
}

fn us_words(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

/// The embedded data. Times are microseconds since the run's origin; ops and holds
/// are columns sorted by lane then start, so the script can binary-search a lane.
fn data_json(ctx: &Ctx, tl: &Timeline) -> String {
    let r = ctx.report;
    let clock = &ctx.clock;
    let mut out = String::with_capacity(tl.ops.len() * 60 + 4096);
    let _ = write!(
        out,
        "{{\"v\":1,\"end\":{},\"workers\":{},\"laneH\":{},",
        clock.rel_us(r.run.time_end_ns.max(r.run.time_origin_ns)),
        serde_json::to_string(&ctx.lanes.ids).unwrap_or_else(|_| "[]".into()),
        lane_height(ctx.lanes.ids.len())
    );

    let mut fnames = Interner::with(&["acquire", "read", "write", "release"]);
    let mut outcomes = Interner::with(&["ok", "rejected-stale", "fail", "unknown"]);
    let mut keys = Interner::default();
    let mut errors = Interner::default();

    let mut order: Vec<usize> = (0..tl.ops.len()).collect();
    order.sort_by_key(|&i| {
        let o = &tl.ops[i];
        (ctx.lanes.of(o.worker), o.start_ns)
    });
    // Compact encodings keep a 100,000-op page small enough for the browser to parse
    // quickly: lanes as offsets instead of a lane per op, starts as deltas within a
    // lane, ends as durations, and string indices shifted by one so 0 means none.
    let mut ops = Columns::new(&["f", "s", "d", "o", "k", "v", "t", "r", "q", "x"]);
    let mut lane_starts = vec![0usize; ctx.lanes.ids.len() + 1];
    let mut has_ops = vec![false; ctx.lanes.ids.len()];
    let mut prev: Option<(usize, i64)> = None;
    for (n, i) in order.into_iter().enumerate() {
        let o = &tl.ops[i];
        let lane = ctx.lanes.of(o.worker).unwrap_or(0);
        let start = clock.rel_us(o.start_ns);
        let base = match prev {
            Some((l, t)) if l == lane => t,
            _ => {
                lane_starts[lane] = n;
                has_ops[lane] = true;
                0
            }
        };
        prev = Some((lane, start));
        ops.push(0, Some(fnames.get(&o.f) as i128));
        ops.push(1, Some((start - base) as i128));
        ops.push(2, o.end_ns.map(|e| (clock.rel_us(e) - start) as i128));
        ops.push(3, Some(outcomes.get(&o.outcome) as i128));
        ops.push(
            4,
            Some(o.key.as_deref().map_or(0, |k| keys.get(k) + 1) as i128),
        );
        ops.push(5, o.value.map(i128::from));
        ops.push(6, o.token.map(i128::from));
        ops.push(7, o.revision.map(i128::from));
        ops.push(8, o.request_id.map(i128::from));
        ops.push(
            9,
            Some(o.error.as_deref().map_or(0, |e| errors.get(e) + 1) as i128),
        );
    }
    // Lanes without ops start where the next lane starts.
    let n_ops = tl.ops.len();
    let mut next = n_ops;
    for l in (0..ctx.lanes.ids.len()).rev() {
        if has_ops[l] {
            next = lane_starts[l];
        } else {
            lane_starts[l] = next;
        }
    }
    lane_starts[ctx.lanes.ids.len()] = n_ops;
    let ops = ops.finish();
    let _ = write!(
        out,
        "\"ops\":{},\"opLanes\":{},",
        ops,
        serde_json::to_string(&lane_starts).unwrap_or_else(|_| "[]".into())
    );

    let mut order: Vec<usize> = (0..tl.holds.len()).collect();
    order.sort_by_key(|&i| {
        let hd = &tl.holds[i];
        (ctx.lanes.of(hd.worker), hd.start_ns)
    });
    let mut holds = Columns::new(&["w", "s", "e", "k", "r", "l", "rel"]);
    for i in order {
        let hd = &tl.holds[i];
        holds.push(0, Some(ctx.lanes.of(hd.worker).unwrap_or(0) as i128));
        holds.push(1, Some(clock.rel_us(hd.start_ns) as i128));
        holds.push(2, Some(clock.rel_us(hd.end_ns) as i128));
        holds.push(3, Some(keys.get(&hd.key) as i128));
        holds.push(4, hd.revision.map(i128::from));
        holds.push(5, hd.lease.map(i128::from));
        holds.push(6, Some(hd.released as i128));
    }
    let _ = write!(out, "\"holds\":{},", holds.finish());
    // Unsafe windows (session ended at the service, holder still at work): a red
    // bar under the hold, from the end to the holder's last operation.
    let unsafe_windows: Vec<[i64; 3]> = ctx
        .report
        .findings
        .unsafe_window
        .windows
        .iter()
        .filter_map(|w| {
            let lane = ctx.lanes.of(w.worker)? as i64;
            let end = clock.rel_us(w.last_op_ns);
            Some([lane, clock.rel_us(w.session_ended_ns), end])
        })
        .collect();
    let _ = write!(
        out,
        "\"unsafe\":{},",
        serde_json::to_string(&unsafe_windows).unwrap_or_else(|_| "[]".into())
    );

    let notices: Vec<Value> = tl
        .notices
        .iter()
        .map(|n| {
            serde_json::json!({
                "w": ctx.lanes.of(n.worker),
                "t": clock.rel_us(n.time_ns),
                "what": n.what,
                "detail": n.detail,
            })
        })
        .collect();
    let faults: Vec<Value> = r
        .faults
        .iter()
        .map(|f| {
            let victims: Vec<Option<usize>> = Ctx::victims(f)
                .into_iter()
                .map(|w| ctx.lanes.of(w))
                .collect();
            serde_json::json!({
                "id": f.id,
                "kind": f.kind,
                "target": f.target,
                "s": clock.rel_us(f.start_ns),
                "e": f.end_ns.map(|e| clock.rel_us(e)),
                "outcome": f.outcome,
                "victims": victims,
                "words": ctx.fault_words(f),
                "detail": js_safe(&f.detail),
            })
        })
        .collect();
    let mut marks: Vec<Value> = Vec::new();
    for (i, v) in r.checks.fencing.violations.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("fencing-{}", i + 1),
            "kind": "stale",
            "w": ctx.lanes.of_str(&v.stale.worker),
            "t": clock.rel_us(v.stale.time_ns),
            "w2": ctx.lanes.of_str(&v.newer.worker),
            "t2": clock.rel_us(v.newer.time_ns),
            "acq": v.stale_acquired_ns.map(|a| clock.rel_us(a)),
            "faults": v.faults,
            "words": ctx.stale_words(v),
        }));
    }
    for (i, w) in r.checks.fencing.fresh_rejected_examples.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("fresh-{}", i + 1),
            "kind": "fresh",
            "w": ctx.lanes.of_str(&w.worker),
            "t": clock.rel_us(w.time_ns),
            "words": ctx.fresh_words(w),
        }));
    }
    for (i, o) in r.checks.mutex.examples.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("mutex-{}", i + 1),
            "kind": "overlap",
            "a": ctx.lanes.of(o.a.worker),
            "b": ctx.lanes.of(o.b.worker),
            "s": clock.rel_us(o.start_ns),
            "e": clock.rel_us(o.end_ns),
            "as": clock.rel_us(o.a.start_ns),
            "bs": clock.rel_us(o.b.start_ns),
            "faults": o.faults,
            "words": ctx.overlap_words(o),
        }));
    }
    if let Some(l) = &r.checks.linearizable {
        if let Some(ce) = l.detail.get("counterexample").filter(|c| c.is_object()) {
            if let (Some(a), Some(b)) = ce_time_range(ctx, ce) {
                // lincheck's clients are the workers: highlight their lanes.
                let mut lanes: Vec<usize> = ce
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.values())
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter_map(|op| op.get("client").and_then(Value::as_u64))
                    .filter_map(|c| u32::try_from(c).ok().and_then(|c| ctx.lanes.of(c)))
                    .collect();
                lanes.sort_unstable();
                lanes.dedup();
                marks.push(serde_json::json!({
                    "id": "lin",
                    "kind": "lin",
                    "s": clock.rel_us(a),
                    "e": clock.rel_us(b),
                    "lanes": lanes,
                    "words": "the linearizability counterexample's operations",
                }));
            }
        }
    }
    let _ = write!(
        out,
        "\"notices\":{},\"faults\":{},\"marks\":{},\"fnames\":{},\"outcomes\":{},\"keys\":{},\"errors\":{}}}",
        serde_json::to_string(&notices).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&faults).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&marks).unwrap_or_else(|_| "[]".into()),
        fnames.json(),
        outcomes.json(),
        keys.json(),
        errors.json(),
    );
    out
}

/// Renders the index page of a suite of runs.
pub fn render_index(entries: &[SuiteEntry]) -> String {
    let passed = entries.iter().filter(|e| e.passed).count();
    let failed = entries.len() - passed;
    let all_pass = failed == 0;
    let mut h = String::with_capacity(8192 + entries.len() * 512);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>fencecheck suite — {}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
        if all_pass { "PASS" } else { "FAIL" },
        REPORT_CSS
    );
    let _ = write!(
        h,
        "<header id=\"verdict\" class=\"verdict {cls}\" data-passed=\"{all_pass}\">\
         <div class=\"verdict-word\">{word}</div><div class=\"verdict-text\"><h1>fencecheck suite</h1>\
         <p class=\"verdict-sub\">{n} run{s}: {passed} passed, {failed} failed · {secs:.1} s in all</p></div></header>\n<main>\n",
        cls = if all_pass { "pass" } else { "fail" },
        word = if all_pass { "PASS" } else { "FAIL" },
        n = entries.len(),
        s = if entries.len() == 1 { "" } else { "s" },
        secs = entries.iter().map(|e| e.elapsed_s).sum::<f64>(),
    );
    h.push_str(
        "<section class=\"card\"><table class=\"grid sortable\" id=\"suite\"><thead><tr>\
         <th data-sort=\"text\">verdict</th><th data-sort=\"text\">scenario</th><th data-sort=\"text\">key counts</th>\
         <th data-sort=\"num\">elapsed</th><th data-sort=\"num\">seed</th><th data-sort=\"text\">service</th></tr></thead><tbody>\n",
    );
    for e in entries {
        let _ = writeln!(
            h,
            "<tr class=\"run {cls}\" data-passed=\"{p}\"><td><span class=\"badge v-{vcls}\">{word}</span></td>\
             <td><a href=\"{href}\">{scenario}</a></td><td>{line}</td><td data-v=\"{el}\">{el:.1} s</td>\
             <td data-v=\"{seed}\">{seed}</td><td>{service} {version}</td></tr>",
            cls = if e.passed { "pass" } else { "fail" },
            p = e.passed,
            vcls = if e.passed { "valid" } else { "invalid" },
            word = if e.passed { "PASS" } else { "FAIL" },
            href = escape(&e.report_html),
            scenario = escape(&e.scenario),
            line = escape(&e.verdict_line),
            el = e.elapsed_s,
            seed = e.seed,
            service = escape(&e.service),
            version = escape(&e.version),
        );
    }
    h.push_str("</tbody></table></section>\n</main>\n<script>\n");
    h.push_str(INDEX_JS);
    h.push_str("</script>\n</body>\n</html>\n");
    h
}

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
        assert_eq!(expectation_checker("lost_increments"), "counter");
        assert_eq!(expectation_checker("linearizable"), "linearizable");
    }
}
