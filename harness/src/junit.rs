//! What a CI system reads: JUnit XML (`--junit FILE`) and a Markdown verdict table
//! for GitHub's job summary (`$GITHUB_STEP_SUMMARY`), both from the typed report
//! of each run.
//!
//! The JUnit layout: one `<testsuite>` per run (scenario), in it one `<testcase>`
//! per check (`check fencing`, `check mutex`, …) and one per expectation
//! (`expect fencing_violations`). A run that could not run is a testsuite with a
//! single `run` testcase carrying an `<error>`; a run that never reached its end
//! gets a failed `run complete` testcase, and an INCONCLUSIVE one a failed
//! `coverage` testcase (what it did not test). Which testcases fail:
//! - an expectation fails when it is not met;
//! - a check fails when it is INVALID and the run did not pass. When the run
//!   passed anyway, an INVALID check was either expected (a negative control) or
//!   informational, and the run's verdict is what the exit code says; the
//!   testcase passes and says so in its `<system-out>`. A check whose
//!   descriptor says it never fails (`mutex`: a lease lock is not a mutex)
//!   never does; a check that could not judge (`unknown`) is `<skipped>`.
//!
//! Every failure's text is the verdict line, the check's question (its
//! descriptor's summary) and the report's path.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use anyhow::{Context, Result};
use fencecheck_reports::descriptor::{self, Kind};
use fencecheck_reports::{Report, Validity};
use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;

use crate::output::{row_fails, Row};
use crate::record::rundir;
use crate::suite::{verdict_word, Outcome};

/// The checks of a report as testcases: the verdict table's rows of the
/// checks of the recorded history (findings are judged by their expectations).
pub fn check_rows(r: &Report) -> Vec<Row> {
    crate::output::rows(r)
        .into_iter()
        .filter(|row| row.check.kind == Kind::Check)
        .collect()
}

/// A check's verdict word (`valid`, `INVALID`, `unknown`).
fn valid(row: &Row) -> Validity {
    row.valid.unwrap_or_default()
}

/// XML 1.0 cannot carry most control characters even escaped (a child's log
/// line with a terminal colour code): they become U+FFFD.
fn xml_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// `report.html` and `report.json` of a run, as one line for a failure's text.
fn report_paths(o: &Outcome) -> String {
    format!(
        "report: {} ({})",
        o.run_dir.join(rundir::REPORT_HTML).display(),
        o.run_dir.join(rundir::REPORT_JSON).display()
    )
}

type W = Writer<Vec<u8>>;

fn testcase(
    w: &mut W,
    suite: &str,
    name: &str,
    time: f64,
    body: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    w.create_element("testcase")
        .with_attribute((
            "classname",
            xml_text(&format!("fencecheck.{suite}")).as_str(),
        ))
        .with_attribute(("name", xml_text(name).as_str()))
        .with_attribute(("time", format!("{time:.3}").as_str()))
        .write_inner_content(body)?;
    Ok(())
}

/// `<failure>`/`<error>`/`<skipped>` with a message and a text.
fn outcome_element(w: &mut W, kind: &str, message: &str, text: &str) -> io::Result<()> {
    w.create_element(kind)
        .with_attribute(("message", xml_text(message).as_str()))
        .write_text_content(BytesText::new(&xml_text(text)))?;
    Ok(())
}

fn system_out(w: &mut W, text: &str) -> io::Result<()> {
    w.create_element("system-out")
        .write_text_content(BytesText::new(&xml_text(text)))?;
    Ok(())
}

/// Tests, failures, errors and skips of one run, as the testsuite's attributes.
fn tally(o: &Outcome) -> (usize, usize, usize, usize) {
    match &o.report {
        None => (1, 0, 1, 0),
        Some(r) => {
            let rows = check_rows(r);
            let failed_checks = rows.iter().filter(|c| row_fails(r, c)).count();
            let skipped = rows
                .iter()
                .filter(|c| valid(c) == Validity::Unknown)
                .count();
            let failed_expect = r.expectations.iter().filter(|e| !e.met).count();
            let incomplete =
                usize::from(r.incomplete.is_some()) + usize::from(r.inconclusive.is_some());
            (
                rows.len() + r.expectations.len() + incomplete,
                failed_checks + failed_expect + incomplete,
                0,
                skipped,
            )
        }
    }
}

fn write_suite(w: &mut W, o: &Outcome) -> io::Result<()> {
    let (tests, failures, errors, skipped) = tally(o);
    let mut el = w
        .create_element("testsuite")
        .with_attribute(("name", xml_text(&o.name).as_str()))
        .with_attribute(("tests", tests.to_string().as_str()))
        .with_attribute(("failures", failures.to_string().as_str()))
        .with_attribute(("errors", errors.to_string().as_str()))
        .with_attribute(("skipped", skipped.to_string().as_str()))
        .with_attribute(("time", format!("{:.3}", o.elapsed_s).as_str()))
        .with_attribute(("file", xml_text(&o.file.display().to_string()).as_str()));
    if let Some(r) = &o.report {
        el = el.with_attribute(("timestamp", xml_text(&r.run.started_at).as_str()));
    }
    el.write_inner_content(|w| {
        if let Some(r) = &o.report {
            w.create_element("properties").write_inner_content(|w| {
                let props = [
                    ("verdict", verdict_word(o).to_string()),
                    ("seed", r.run.seed.to_string()),
                    ("backend", r.run.backend.clone()),
                    ("service", r.run.service.clone()),
                    ("service_version", r.run.service_version.clone()),
                    ("resource", r.run.resource.clone()),
                    (
                        "report_html",
                        o.run_dir.join(rundir::REPORT_HTML).display().to_string(),
                    ),
                    (
                        "report_json",
                        o.run_dir.join(rundir::REPORT_JSON).display().to_string(),
                    ),
                    ("command", r.run.command.clone()),
                ];
                for (k, v) in props {
                    w.create_element("property")
                        .with_attribute(("name", k))
                        .with_attribute(("value", xml_text(&v).as_str()))
                        .write_empty()?;
                }
                Ok(())
            })?;
        }
        write_cases(w, o)
    })?;
    Ok(())
}

fn write_cases(w: &mut W, o: &Outcome) -> io::Result<()> {
    let suite = o.name.as_str();
    let Some(r) = &o.report else {
        let err = o.error.as_deref().unwrap_or("the run could not run");
        let first = err.lines().next().unwrap_or_default();
        return testcase(w, suite, "run", o.elapsed_s, |w| {
            outcome_element(w, "error", first, err)
        });
    };
    let paths = report_paths(o);
    if let Some(why) = &r.incomplete {
        testcase(w, suite, "run complete", 0.0, |w| {
            outcome_element(
                w,
                "failure",
                "INCOMPLETE: the run never reached its end",
                &format!("{why}\n{paths}"),
            )
        })?;
    }
    if let Some(why) = &r.inconclusive {
        // The first clause of the reason is the message: "no fault took
        // effect (…)", "2 of 4 planned faults not injected (…)", "1 lock
        // client(s) broke the protocol, …".
        let head = why.split(" (").next().unwrap_or(why);
        // What the coverage checks that found a gap (the coverage, the fault
        // confirmation) ask.
        let asks: String = crate::output::failed_checks(r)
            .iter()
            .filter(|d| d.kind == Kind::Coverage)
            .map(|d| format!("{}: {}\n", d.name, d.summary))
            .collect();
        testcase(w, suite, descriptor::COVERAGE.name, 0.0, |w| {
            outcome_element(
                w,
                "failure",
                &format!("INCONCLUSIVE: {head}"),
                &format!("{why}\n{asks}{paths}"),
            )
        })?;
    }
    for row in check_rows(r) {
        let name = row.check.name;
        let line = format!("{name} {}: {}", valid(&row), row.counts);
        // The check's question under its verdict, in every case's text.
        let asks = format!("{line}\n{name}: {}", row.check.summary);
        testcase(w, suite, &format!("check {name}"), 0.0, |w| {
            if row_fails(r, &row) {
                outcome_element(w, "failure", &line, &format!("{asks}\n{paths}"))
            } else if valid(&row) == Validity::Unknown {
                outcome_element(w, "skipped", &line, &asks)
            } else if valid(&row) == Validity::Invalid {
                system_out(
                    w,
                    &format!(
                        "{asks}\nthe run passed: this check's result was expected or is \
                         informational\n{paths}"
                    ),
                )
            } else {
                system_out(w, &asks)
            }
        })?;
    }
    for e in &r.expectations {
        let line = format!(
            "{} expected {}, actual {}: {}",
            e.name,
            e.expected,
            e.actual,
            if e.met { "met" } else { "NOT MET" }
        );
        // An unmet expectation says what its check asks.
        let asks = descriptor::judged_by(&e.name)
            .map(|d| format!("\n{}: {}", d.name, d.summary))
            .unwrap_or_default();
        testcase(w, suite, &format!("expect {}", e.name), 0.0, |w| {
            if e.met {
                system_out(w, &line)
            } else {
                outcome_element(w, "failure", &line, &format!("{line}{asks}\n{paths}"))
            }
        })?;
    }
    Ok(())
}

/// The JUnit XML document of these runs.
pub fn render(outcomes: &[Outcome]) -> Result<String> {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let (mut tests, mut failures, mut errors, mut skipped) = (0, 0, 0, 0);
    for o in outcomes {
        let (t, f, e, s) = tally(o);
        tests += t;
        failures += f;
        errors += e;
        skipped += s;
    }
    let time: f64 = outcomes.iter().map(|o| o.elapsed_s).sum();
    w.create_element("testsuites")
        .with_attribute(("name", "fencecheck"))
        .with_attribute(("tests", tests.to_string().as_str()))
        .with_attribute(("failures", failures.to_string().as_str()))
        .with_attribute(("errors", errors.to_string().as_str()))
        .with_attribute(("skipped", skipped.to_string().as_str()))
        .with_attribute(("time", format!("{time:.3}").as_str()))
        .write_inner_content(|w| {
            for o in outcomes {
                write_suite(w, o)?;
            }
            Ok(())
        })?;
    let mut text = String::from_utf8(w.into_inner()).context("JUnit XML is UTF-8")?;
    text.push('\n');
    Ok(text)
}

/// Writes the JUnit XML of these runs to `path` (its folder created).
pub fn write(path: &Path, outcomes: &[Outcome]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, render(outcomes)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A Markdown table cell: no line breaks, `|` escaped.
fn cell(s: &str) -> String {
    s.replace('\n', " ").replace('|', "\\|")
}

/// One run's verdict table as Markdown (checks, then expectations).
pub fn markdown_run(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### fencecheck: {} — {}\n",
        cell(&o.name),
        verdict_word(o)
    );
    let Some(r) = &o.report else {
        let _ = writeln!(
            s,
            "The run could not run: {}\n",
            cell(o.error.as_deref().unwrap_or("unknown error"))
        );
        return s;
    };
    if let Some(why) = &r.incomplete {
        let _ = writeln!(s, "INCOMPLETE: {}\n", cell(why));
    }
    if let Some(why) = &r.inconclusive {
        let _ = writeln!(s, "INCONCLUSIVE: {}\n", cell(why));
    }
    let _ = writeln!(s, "| check | verdict | counts |\n|---|---|---|");
    for row in check_rows(r) {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            row.check.name,
            valid(&row),
            cell(&row.counts)
        );
    }
    for d in crate::output::failed_checks(r) {
        let _ = writeln!(s, "\n**{}**: {}", d.name, cell(d.summary));
    }
    if !r.expectations.is_empty() {
        let _ = writeln!(
            s,
            "\n| expectation | expected | actual | |\n|---|---|---|---|"
        );
        for e in &r.expectations {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                cell(&e.name),
                cell(&e.expected),
                cell(&e.actual),
                if e.met { "met" } else { "**NOT MET**" }
            );
        }
    }
    let _ = writeln!(
        s,
        "\nseed {}, backend {}, {} {}; report: `{}`\n",
        r.run.seed,
        cell(&r.run.backend),
        cell(&r.run.service),
        cell(&r.run.service_version),
        o.run_dir.join(rundir::REPORT_HTML).display()
    );
    s
}

/// A suite's table as Markdown: one row per run.
pub fn markdown_suite(outcomes: &[Outcome], index: &Path) -> String {
    let mut s = String::new();
    let passed = outcomes
        .iter()
        .filter(|o| verdict_word(o) == "PASS")
        .count();
    let _ = writeln!(
        s,
        "### fencecheck suite: {passed}/{} passed\n\n| scenario | service | verdict | time | key counts |\n|---|---|---|---|---|",
        outcomes.len()
    );
    for o in outcomes {
        let service = o
            .report
            .as_ref()
            .map(|r| format!("{} {}", r.run.service, r.run.service_version))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1}s | {} |",
            cell(&o.name),
            cell(&service),
            verdict_word(o),
            o.elapsed_s,
            cell(&crate::suite::counts(o))
        );
    }
    let _ = writeln!(s, "\nindex: `{}`\n", index.display());
    s
}

/// Appends `text` to the file `$GITHUB_STEP_SUMMARY` names, when it is set. A
/// summary that cannot be written is a warning, never the run's verdict.
pub fn append_step_summary(text: &str) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    use std::io::Write;
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = res {
        eprintln!(
            "fencecheck: warning: cannot append to GITHUB_STEP_SUMMARY {}: {e}",
            Path::new(&path).display()
        );
    }
}
