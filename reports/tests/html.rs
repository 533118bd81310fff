//! report.html and the suite index: rendered from real recorded runs (trimmed copies
//! in tests/data) and from synthetic ones.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use fencecheck_reports::{
    render_html, render_index, write_html, write_index, LinearizableCheck, Report, SuiteEntry,
    Timeline, Validity,
};
use serde_json::{json, Value};

/// The embedded data block, parsed.
fn data(html: &str) -> Value {
    let open = "<script type=\"application/json\" id=\"fc-data\">";
    let start = html.find(open).expect("data block") + open.len();
    let end = start + html[start..].find("</script>").expect("data block end");
    serde_json::from_str(&html[start..end]).expect("data block is JSON")
}

fn assert_offline(html: &str) {
    let lower = html.to_ascii_lowercase();
    for bad in [
        "http://",
        "https://",
        "<script src",
        "<link",
        "@import",
        "url(",
        "<iframe",
        "<img",
    ] {
        assert!(
            !lower.contains(bad),
            "page refers to an external resource: {bad}"
        );
    }
}

/// Every `<script` is closed by exactly one `</script>`: data cannot end a block early.
fn assert_scripts_balanced(html: &str) {
    let opens = html.matches("<script").count();
    let closes = html.matches("</script>").count();
    assert_eq!(opens, 2, "one data block and one script");
    assert_eq!(opens, closes);
}

fn lincheck_detail(origin: u64) -> Value {
    // The shape lincheck's CheckResult serializes to.
    let op = |i: u64,
              client: u64,
              call: u64,
              ret: Option<u64>,
              op: &str,
              arg: Value,
              out: Value| {
        json!({"index": i, "client": client, "call_ns": origin + call, "return_ns": ret.map(|r| origin + r),
               "op": op, "arg": arg, "out": out, "unknown": ret.is_none()})
    };
    json!({
        "valid": false, "model": "fenced-register", "ops": 312,
        "partitions": [{"key": "k0", "ops": 312, "valid": false, "visited": 5120}],
        "counterexample": {
            "key": "k0",
            "linearized": [op(0, 1, 7_900_000_000, Some(7_943_000_000), "write", json!({"value": 67, "token": 47}), json!("accepted"))],
            "state": {"value": 67, "token": 47},
            "unplaceable": [op(1, 3, 8_020_000_000, Some(8_024_000_000), "write", json!({"value": 57, "token": 39}), json!("accepted"))]
        },
        "check_ms": 12.5
    })
}

#[test]
fn real_run_renders_every_part() {
    let (report, tl) = common::load("no-fencing");
    let html = render_html(&report, &tl);
    assert_offline(&html);
    assert_scripts_balanced(&html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("id=\"verdict\" class=\"verdict pass\" data-passed=\"true\""));
    assert!(html.contains(">PASS<"));
    for id in ["check-fencing", "check-mutex", "check-counter"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(html.contains(
        "id=\"check-fencing\" class=\"card check\" data-checker=\"fencing\" data-valid=\"false\""
    ));
    assert!(
        !html.contains("id=\"check-linearizable\""),
        "no linearizable check in this run"
    );
    // The counterexample in words, with times since the start and the fault window.
    assert!(
        html.contains(
            "Worker 3 wrote k0 with revision 39 at 8.024 s, after worker 1&#39;s write with \
             revision 47 was accepted at 7.943 s, while worker 3 was paused 5.02–8.02 s (fault 1)."
        ),
        "fencing counterexample in words"
    );
    assert!(html.contains("data-goto=\"fencing-1\""));
    assert!(html.contains("id=\"mutex-14\""));
    assert!(html.contains(&report.run.command));
    assert!(html.contains("id=\"expectations\""));
    assert!(html.contains("id=\"latency-table\""));
    for op in ["acquire", "read", "write", "release"] {
        assert!(html.contains(&format!("<tr data-op=\"{op}\">")));
    }
    assert!(html.contains("id=\"howto\""));

    let d = data(&html);
    assert_eq!(d["workers"], json!([0, 1, 2, 3, 4]));
    assert_eq!(d["opLanes"].as_array().map(Vec::len), Some(6));
    assert_eq!(d["ops"]["f"].as_array().map(Vec::len), Some(tl.ops.len()));
    assert_eq!(
        d["holds"]["s"].as_array().map(Vec::len),
        Some(tl.holds.len())
    );
    assert_eq!(html.matches("class=\"tl-lane worker\"").count(), 5);
    for w in 0..5 {
        assert!(html.contains(&format!("data-worker=\"{w}\">worker {w}</div>")));
    }
    // Fault windows: in the data, in the list, and shaded by the script.
    let faults = d["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 3);
    for (f, want) in faults.iter().zip(&report.faults) {
        assert_eq!(f["id"], want.id);
        assert!(html.contains(&format!("data-fault-id=\"{}\"", want.id)));
    }
    assert_eq!(faults[0]["victims"], json!([3]));
    // Lease IDs exceed JavaScript's exact integers: they travel as strings.
    assert_eq!(
        faults[0]["detail"]["victims"][0]["lease"],
        json!("5796311021997294604")
    );
    let marks = d["marks"].as_array().expect("marks");
    assert_eq!(marks.iter().filter(|m| m["kind"] == "stale").count(), 5);
    assert_eq!(marks.iter().filter(|m| m["kind"] == "overlap").count(), 14);
    assert_eq!(d["notices"].as_array().map(Vec::len), Some(3));
}

#[test]
fn fresh_rejections_and_revocations_read_in_words() {
    let (report, tl) = common::load("contrib-lock");
    let html = render_html(&report, &tl);
    assert_offline(&html);
    assert!(html.contains("worker 0&#39;s lease was revoked at 3.011 s (fault 2)"));
    assert!(html.contains("id=\"fresh-rejected\""));
    assert!(html.contains("was answered rejected-stale at"));
    // The newer write that proved a newer grant was itself rejected: said so.
    assert!(html.contains("worker 1&#39;s write with revision 32 was answered rejected-stale"));
    let d = data(&html);
    // Tokens here are lease IDs, beyond 2^53.
    let tokens = d["ops"]["t"].as_array().expect("tokens");
    assert!(tokens.iter().any(|t| t == "7550463076871340294"));
}

#[test]
fn script_end_tags_in_data_cannot_break_out() {
    let (mut report, mut tl) = common::load("no-fencing");
    let evil = "</script><b>x";
    report.run.description = format!("desc {evil}");
    report.run.command = format!("fencecheck {evil}");
    report.problems.push(format!("torn line: {evil}"));
    report.faults[0].detail = json!({ evil: "<!--", "victims": [{"worker": 3}] });
    report.faults[0].kind = evil.to_string();
    tl.ops[0].key = Some(evil.to_string());
    tl.ops[1].error = Some(format!("<!-- <script> {evil}"));
    tl.notices[0].detail = Some(evil.to_string());
    let html = render_html(&report, &tl);
    assert!(
        !html.contains(evil),
        "raw </script> from the data reached the page"
    );
    assert!(!html.contains("<b>x"));
    assert!(!html.contains("<!--"));
    assert_scripts_balanced(&html);
    assert!(
        html.contains("&lt;/script&gt;&lt;b&gt;x"),
        "escaped in the text"
    );
    let d = data(&html);
    assert_eq!(
        d["faults"][0]["detail"][evil], "<!--",
        "the key survives intact"
    );
    assert_eq!(d["faults"][0]["kind"], evil);
    assert!(d["keys"].as_array().expect("keys").contains(&json!(evil)));
}

#[test]
fn failing_run_with_a_linearizability_counterexample() {
    let (mut report, tl) = common::load("no-fencing");
    report.passed = false;
    report.expectations[0].met = false;
    report.checks.linearizable = Some(LinearizableCheck {
        valid: Validity::Invalid,
        model: "fenced-register".into(),
        operations: 312,
        elapsed_ms: 12.5,
        detail: lincheck_detail(report.run.time_origin_ns),
    });
    let html = render_html(&report, &tl);
    assert_offline(&html);
    assert!(html.contains("id=\"verdict\" class=\"verdict fail\" data-passed=\"false\""));
    assert!(html.contains(">FAIL<"));
    assert!(html.contains("FAIL: 1 of 2 expectations not met"));
    assert!(html.contains("id=\"check-linearizable\""));
    assert!(html.contains("id=\"lin-counterexample\""));
    assert!(html.contains("id=\"lin-unplaceable\""));
    assert!(html.contains("id=\"lin-svg\""));
    assert!(html.contains("id=\"lin-partitions\""));
    assert!(
        html.contains("8.024 s"),
        "op times as seconds since the start"
    );
    let d = data(&html);
    let lin = d["marks"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "lin"))
        .expect("lin mark");
    assert_eq!(lin["s"], 7_900_000);
    assert_eq!(lin["e"], 8_024_000);
    assert_eq!(lin["lanes"], json!([1, 3]));

    // A detail of another shape is shown as JSON, whatever it holds.
    if let Some(l) = report.checks.linearizable.as_mut() {
        l.detail = json!({"verdict": "nope", "why": ["a", "b"]});
    }
    let html = render_html(&report, &tl);
    assert!(html.contains("id=\"lin-detail\""));
    assert!(html.contains("&quot;why&quot;"));
}

#[test]
fn an_inconclusive_run_shows_its_word_and_the_confirmation_table() {
    use fencecheck_reports::{EffectStatus, FaultCount, FaultEffect, FaultReason};
    let (mut report, tl) = common::load("no-fencing");
    report.passed = false;
    report.inconclusive = Some("no fault took effect (1 injected, 0 confirmed)".into());
    let id = report.faults[0].id;
    report.faults[0].effect = Some(FaultEffect::unconfirmed("pid 7 had exited <zombie>"));
    report.fault_counts = vec![FaultCount {
        kind: "pause".into(),
        planned: 2,
        injected: 1,
        confirmed: 0,
        skipped: 1,
        unconfirmed: 1,
        unchecked: 0,
        reasons: vec![FaultReason {
            id,
            status: EffectStatus::Unconfirmed,
            reason: "pid 7 had exited <zombie>".into(),
        }],
    }];
    let html = render_html(&report, &tl);
    assert_offline(&html);
    assert!(html.contains("<div class=\"verdict-word\">INCONCLUSIVE</div>"));
    assert!(html.contains("INCONCLUSIVE: no fault took effect (1 injected, 0 confirmed)"));
    assert!(html.contains(
        "<tr class=\"unmet\" data-kind=\"pause\"><td>pause</td><td>2</td><td>1</td><td>0</td><td>1</td><td>1</td></tr>"
    ));
    assert!(html.contains("unconfirmed: pid 7 had exited &lt;zombie&gt;"));
}

#[test]
fn empty_run_renders() {
    let (mut report, _) = common::load("no-fencing");
    report.faults.clear();
    report.checks.fencing.violations.clear();
    report.checks.mutex.examples.clear();
    report.expectations.clear();
    report.stats.latency.clear();
    let html = render_html(&report, &Timeline::default());
    assert_offline(&html);
    assert_scripts_balanced(&html);
    assert!(html.contains("No fault was injected."));
    assert!(html.contains("No stale write was accepted."));
    let d = data(&html);
    assert_eq!(d["workers"], json!([]));
    assert_eq!(d["opLanes"], json!([0]));
}

#[test]
fn ops_are_grouped_by_lane_with_delta_starts() {
    let (report, tl) = common::load("no-fencing");
    let d = data(&render_html(&report, &tl));
    let lanes: Vec<usize> = d["opLanes"]
        .as_array()
        .expect("opLanes")
        .iter()
        .map(|v| v.as_u64().expect("offset") as usize)
        .collect();
    let starts = d["ops"]["s"].as_array().expect("starts");
    for (l, w) in lanes.windows(2).enumerate() {
        let mut t = 0i64;
        let mut want: Vec<i64> = tl
            .ops
            .iter()
            .filter(|o| o.worker == l as u32)
            .map(|o| ((o.start_ns as i128 - report.run.time_origin_ns as i128) / 1000) as i64)
            .collect();
        want.sort();
        let got: Vec<i64> = starts[w[0]..w[1]]
            .iter()
            .map(|s| {
                t += s.as_i64().expect("delta");
                t
            })
            .collect();
        assert_eq!(got, want, "lane {l}");
    }
}

fn suite() -> Vec<SuiteEntry> {
    vec![
        SuiteEntry {
            scenario: "pause".into(),
            passed: true,
            verdict_line: "fencing valid (0 stale accepted), mutex INVALID (8 overlaps)".into(),
            elapsed_s: 24.5,
            report_html: "pause-2026/report.html".into(),
            seed: 7,
            service: "etcd".into(),
            version: "3.5.1".into(),
        },
        SuiteEntry {
            scenario: "no-fencing <x>".into(),
            passed: false,
            verdict_line: "fencing INVALID (0 stale accepted)".into(),
            elapsed_s: 21.0,
            report_html: "no-fencing-2026/report.html".into(),
            seed: 8,
            service: "etcd".into(),
            version: "3.4.23".into(),
        },
    ]
}

#[test]
fn index_links_every_run() {
    let html = render_index(&suite());
    assert_offline(&html);
    assert!(html.contains("data-passed=\"false\""));
    assert!(html.contains("2 runs: 1 passed, 1 failed"));
    assert!(html.contains("<a href=\"pause-2026/report.html\">pause</a>"));
    assert!(html.contains("<a href=\"no-fencing-2026/report.html\">no-fencing &lt;x&gt;</a>"));
    assert_eq!(html.matches("<tr class=\"run").count(), 2);
    assert!(html.contains("3.4.23"));
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fencecheck-html-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn writes_report_html_and_index_html() {
    let (report, tl) = common::load("contrib-lock");
    let dir = temp_dir("write");
    let path = write_html(&dir, &report, &tl).expect("write");
    assert_eq!(path, dir.join("report.html"));
    let text = std::fs::read_to_string(&path).expect("read back");
    assert_eq!(text, render_html(&report, &tl));
    let index = write_index(&dir, &suite()).expect("write index");
    assert_eq!(index, dir.join("index.html"));
    assert!(write_html(&dir.join("missing/dir"), &report, &tl).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn large_timeline_stays_compact() {
    let (report, tl) = common::synthetic(16, 100_000, 60);
    assert_eq!(tl.ops.len(), 100_000);
    let html = render_html(&report, &tl);
    assert!(html.len() < 8_000_000, "{} bytes", html.len());
    let d = data(&html);
    assert_eq!(d["workers"].as_array().map(Vec::len), Some(16));
    assert_eq!(d["ops"]["s"].as_array().map(Vec::len), Some(100_000));
}

// ---- headless Chromium --------------------------------------------------------------
// `cargo test -p fencecheck-reports --test html -- --ignored` (needs `chromium`).

fn chromium(args: &[&str], page: &Path) -> String {
    chromium_url(args, page, "")
}

fn chromium_url(args: &[&str], page: &Path, hash: &str) -> String {
    let abs = std::fs::canonicalize(page).expect("page path");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(args)
        .arg(format!("file://{}{hash}", abs.display()))
        .output()
        .expect("run chromium (apt-get install -y chromium)");
    assert!(out.status.success(), "chromium failed: {:?}", out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn body_attr<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let at = body.find(&format!(" {name}=\""))? + name.len() + 3;
    let rest = &body[at..];
    Some(&rest[..rest.find('"')?])
}

fn check_in_chromium(name: &str, report: &Report, tl: &Timeline) -> String {
    let dir = temp_dir(name);
    let page = write_html(&dir, report, tl).expect("write");
    let dom = chromium(&["--window-size=1400,2400", "--dump-dom"], &page);
    assert_eq!(
        body_attr(&dom, "data-errors"),
        None,
        "script errors: {dom:.2000}"
    );
    assert_eq!(
        body_attr(&dom, "data-rendered"),
        Some("ok"),
        "{name}: not rendered"
    );
    assert!(
        !dom.contains("id=\"tl-loading\""),
        "loading note left in place"
    );
    // Hover, zoom and focus paths, driven by the page itself.
    let st = chromium_url(
        &["--window-size=1400,2400", "--dump-dom"],
        &page,
        "#selftest",
    );
    assert_eq!(body_attr(&st, "data-errors"), None, "self-test errors");
    let verdict = body_attr(&st, "data-selftest").unwrap_or("").to_string();
    assert!(verdict.starts_with("ok "), "{name}: self-test {verdict:?}");
    let shot = dir.join("shot.png");
    chromium(
        &[
            "--window-size=1400,2400",
            &format!("--screenshot={}", shot.display()),
        ],
        &page,
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "screenshot too small: {size} bytes");
    eprintln!(
        "{name}: render {} ms, self-test {verdict}, screenshot {}",
        body_attr(&dom, "data-render-ms").unwrap_or("?"),
        shot.display()
    );
    dom
}

#[test]
#[ignore = "needs chromium"]
fn chromium_runs_the_scripts_without_errors() {
    let (report, tl) = common::load("no-fencing");
    let dom = check_in_chromium("no-fencing", &report, &tl);
    assert_eq!(body_attr(&dom, "data-lanes"), Some("5"));
    let (report, tl) = common::load("contrib-lock");
    check_in_chromium("contrib-lock", &report, &tl);
    let (mut report, _) = common::load("no-fencing");
    report.faults.clear();
    check_in_chromium("empty", &report, &Timeline::default());
    let (mut report, tl) = common::load("no-fencing");
    report.checks.linearizable = Some(LinearizableCheck {
        valid: Validity::Invalid,
        model: "fenced-register".into(),
        operations: 312,
        elapsed_ms: 12.5,
        detail: lincheck_detail(report.run.time_origin_ns),
    });
    check_in_chromium("linearizable", &report, &tl);

    let dir = temp_dir("index");
    let page = write_index(&dir, &suite()).expect("index");
    let dom = chromium(&["--dump-dom"], &page);
    assert_eq!(body_attr(&dom, "data-rendered"), Some("ok"));
    assert_eq!(body_attr(&dom, "data-errors"), None);
}

#[test]
#[ignore = "needs chromium; a benchmark"]
fn chromium_renders_100k_ops() {
    let (report, tl) = common::synthetic(16, 100_000, 60);
    let dom = check_in_chromium("synthetic-100k", &report, &tl);
    let ms: f64 = body_attr(&dom, "data-render-ms")
        .and_then(|v| v.parse().ok())
        .expect("render time");
    eprintln!(
        "100,000 ops: page rendered {ms:.0} ms after navigation start ({})",
        body_attr(&dom, "data-draw-ms").unwrap_or("")
    );
    assert!(ms < 10_000.0, "{ms} ms");
}
