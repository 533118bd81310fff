//! `--junit FILE` and `$GITHUB_STEP_SUMMARY` on a short real run: the JUnit file
//! parses as XML (quick-xml's reader), and its testcases are report.json's checks
//! and expectations, with the same pass/fail.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use quick_xml::events::Event;
use serde_json::Value;

/// A testcase as read back: its name and what it carried.
#[derive(Debug, Default)]
struct Case {
    failure: Option<String>,
    error: bool,
    skipped: bool,
}

/// Every `<testsuite>`'s name and its testcases, by name; the parse fails the test
/// on any XML error.
fn parse(path: &Path) -> BTreeMap<String, BTreeMap<String, Case>> {
    let text = std::fs::read_to_string(path).expect("junit file");
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut suites: BTreeMap<String, BTreeMap<String, Case>> = BTreeMap::new();
    let (mut suite, mut case) = (String::new(), String::new());
    let mut roots = 0;
    let attr = |e: &quick_xml::events::BytesStart, name: &str| -> String {
        e.try_get_attribute(name)
            .expect("attribute")
            .map(|a| a.unescape_value().expect("escaped").into_owned())
            .unwrap_or_default()
    };
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuites" => roots += 1,
                b"testsuite" => {
                    suite = attr(&e, "name");
                    suites.entry(suite.clone()).or_default();
                }
                b"testcase" => {
                    case = attr(&e, "name");
                    let prev = suites
                        .get_mut(&suite)
                        .expect("a testcase inside a testsuite")
                        .insert(case.clone(), Case::default());
                    assert!(prev.is_none(), "testcase {case} twice");
                }
                b"failure" => {
                    let c = suites.get_mut(&suite).unwrap().get_mut(&case).unwrap();
                    c.failure = Some(attr(&e, "message"));
                }
                b"error" => {
                    suites
                        .get_mut(&suite)
                        .unwrap()
                        .get_mut(&case)
                        .unwrap()
                        .error = true
                }
                b"skipped" => {
                    suites
                        .get_mut(&suite)
                        .unwrap()
                        .get_mut(&case)
                        .unwrap()
                        .skipped = true
                }
                _ => {}
            },
            _ => {}
        }
    }
    assert_eq!(roots, 1, "one <testsuites> root");
    suites
}

/// What report.json says each testcase must be: (name, fails, skipped).
fn expected_cases(r: &Value) -> Vec<(String, bool, bool)> {
    let passed = r["passed"].as_bool().expect("passed");
    let mut out = Vec::new();
    for name in [
        "fencing",
        "mutex",
        "exclusion",
        "counter",
        "linearizable",
        "token",
    ] {
        let c = &r["checks"][name];
        if c.is_null() {
            continue;
        }
        let invalid = c["valid"] == false;
        let unknown = c["valid"] == "unknown";
        out.push((
            format!("check {name}"),
            invalid && !passed && name != "mutex",
            unknown,
        ));
    }
    for e in r["expectations"].as_array().expect("expectations") {
        let name = e["name"].as_str().expect("name");
        out.push((format!("expect {name}"), e["met"] == false, false));
    }
    out
}

#[test]
fn junit_matches_report_json_and_the_step_summary_gets_a_table() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("run");
    let junit = tmp.path().join("ci/junit.xml");
    let summary = tmp.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").expect("summary");
    // 3 s of `pause`: its pause fault may not come, so an expectation may fail;
    // either way the JUnit file must say what report.json says.
    let o = bin()
        .args([
            "scenario",
            "scenarios/pause.toml",
            "--quiet",
            "--backend",
            "process",
        ])
        .args(["--duration", "3s", "--out"])
        .arg(&out)
        .arg("--junit")
        .arg(&junit)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .expect("run fencecheck");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", explain(&o));
    let r = read_report(&out);
    assert_eq!(r["passed"], o.status.code() == Some(0), "{}", explain(&o));

    let suites = parse(&junit);
    assert_eq!(suites.len(), 1, "{suites:?}");
    let cases = suites
        .get("pause")
        .expect("a testsuite named after the scenario");
    let want = expected_cases(&r);
    assert!(want.iter().any(|(n, ..)| n.starts_with("expect ")));
    assert_eq!(
        cases.keys().cloned().collect::<Vec<_>>().len(),
        want.len(),
        "{cases:?} vs {want:?}"
    );
    for (name, fails, skipped) in &want {
        let c = cases
            .get(name)
            .unwrap_or_else(|| panic!("no testcase {name}: {cases:?}"));
        assert_eq!(c.failure.is_some(), *fails, "{name}: {c:?}");
        assert_eq!(c.skipped, *skipped, "{name}: {c:?}");
        assert!(!c.error, "{name}: {c:?}");
    }
    // A failure carries the verdict line and the report path.
    let text = std::fs::read_to_string(&junit).expect("junit");
    assert!(text.contains(&out.join("report.html").display().to_string()));

    let md = std::fs::read_to_string(&summary).expect("summary");
    assert!(
        md.starts_with("earlier step\n"),
        "appended, not replaced: {md}"
    );
    assert!(md.contains("| check | verdict | counts |"), "{md}");
    let fencing_row = format!(
        "| fencing | {} |",
        if r["checks"]["fencing"]["valid"] == true {
            "valid"
        } else {
            "INVALID"
        }
    );
    assert!(md.contains(&fencing_row), "{md}");
    for e in r["expectations"].as_array().unwrap() {
        assert!(
            md.contains(&format!("| {} |", e["name"].as_str().unwrap())),
            "{md}"
        );
    }
}

/// A run that could not run is a testsuite with one `run` testcase carrying an
/// `<error>`; a message with markup characters and a terminal colour code still
/// makes well-formed XML that reads back as the same text.
#[test]
fn a_run_that_could_not_run_is_an_error_testcase() {
    let tmp = tempfile::tempdir().expect("tmp");
    let err =
        "etcd did not start: <listen> & \"127.0.0.1\" 'x' \u{1b}[31mred\u{1b}[0m\nsecond line";
    let outcome = fencecheck::suite::Outcome {
        file: "scenarios/a<b>.toml".into(),
        name: "a<b>&c".into(),
        run_dir: tmp.path().join("a"),
        report: None,
        error: Some(err.into()),
        elapsed_s: 1.5,
    };
    let path = tmp.path().join("junit.xml");
    fencecheck::junit::write(&path, &[outcome]).expect("write");
    let suites = parse(&path);
    let cases = suites.get("a<b>&c").expect("the suite, name unescaped");
    assert_eq!(cases.len(), 1, "{cases:?}");
    let run = cases.get("run").expect("a `run` testcase");
    assert!(run.error && run.failure.is_none(), "{run:?}");
    let text = std::fs::read_to_string(&path).expect("junit");
    assert!(
        !text.contains('\u{1b}'),
        "a control character in XML: {text}"
    );
    assert!(text.contains("errors=\"1\""), "{text}");
}
