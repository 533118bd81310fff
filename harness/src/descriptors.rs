//! Every check the harness runs has exactly one descriptor (the reports crate's
//! `descriptor` table), and the terminal, the JUnit file, the suite's table and
//! index, and report.html all show its question. Judged on a recorded run
//! directory re-assessed offline (`etcd-pause`: a storage log, the service
//! observed, faults confirmed, unsafe holds), then with every check made to fail.

use std::path::Path;

use fencecheck_reports::descriptor::{self, Descriptor, Fails, Kind};
use fencecheck_reports::html::escape;
use fencecheck_reports::{Report, Timeline, Validity};

use crate::suite::Outcome;

/// A copy of a fixture (assess writes its report into the directory).
fn assessed(name: &str) -> (tempfile::TempDir, Report) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dir = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(&from).expect("fixture") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, dir.path().join(p.file_name().expect("name"))).expect("copy");
    }
    let r = crate::assess::assess(dir.path()).expect("assess");
    (dir, r)
}

/// What `assess` ran on this report, by descriptor name: every row of the
/// verdict table, the fault confirmation (a tally per kind) and the coverage
/// gaps (always looked for).
fn ran(r: &Report) -> Vec<&'static str> {
    let mut names: Vec<&str> = crate::output::rows(r)
        .iter()
        .map(|row| row.check.name)
        .collect();
    assert!(
        !r.fault_counts.is_empty(),
        "the fixture's faults were tallied"
    );
    names.push(descriptor::FAULTS.name);
    names.push(descriptor::COVERAGE.name);
    names
}

/// Every check failing: each expectation unmet, each check INVALID, a coverage
/// gap and a fault not injected (so the run is INCONCLUSIVE).
fn all_failed(mut r: Report) -> Report {
    r.passed = false;
    for e in &mut r.expectations {
        e.met = false;
    }
    let c = &mut r.checks;
    c.fencing.valid = Validity::Invalid;
    c.mutex.valid = Validity::Invalid;
    c.counter.valid = Validity::Invalid;
    for v in [
        c.exclusion.as_mut().map(|x| &mut x.valid),
        c.linearizable.as_mut().map(|l| &mut l.valid),
        c.token.as_mut().map(|t| &mut t.valid),
    ]
    .into_iter()
    .flatten()
    {
        *v = Validity::Invalid;
    }
    r.findings.grant_validity.after_session_end += 1;
    // Liveness is judged only when the scenario sets it.
    r.expectations.push(fencecheck_reports::Expectation {
        name: "stuck_waits".into(),
        expected: "0".into(),
        actual: "1".into(),
        met: false,
        default: false,
    });
    r.coverage.push("1 of 1 planned faults not injected".into());
    r.inconclusive = Some("1 of 1 planned faults not injected (fault 1: none held)".into());
    r.fault_counts[0].skipped += 1;
    r
}

#[test]
fn every_check_the_harness_runs_has_one_descriptor() {
    let (_dir, r) = assessed("etcd-pause");
    let ran = ran(&r);
    for name in &ran {
        let n = descriptor::ALL.iter().filter(|d| d.name == *name).count();
        assert_eq!(n, 1, "{name}: {n} descriptors");
    }
    // And no descriptor of a check that does not run.
    for d in descriptor::ALL {
        assert!(
            ran.contains(&d.name),
            "{} describes nothing that ran",
            d.name
        );
    }
    // Each check of the recorded history is a verdict, each finding is not.
    for row in crate::output::rows(&r) {
        assert_eq!(
            row.valid.is_some(),
            row.check.kind == Kind::Check || *row.check == descriptor::GRANT_VALID,
            "{}",
            row.check.name
        );
    }
}

#[test]
fn the_four_renderers_show_each_checks_question() {
    let (dir, r) = assessed("etcd-pause");
    let r = all_failed(r);
    let failed = crate::output::failed_checks(&r);
    // Every check that can fail a run failed this one (the mutex through its
    // stated expectation); a measured finding never does, and is only a row.
    for d in descriptor::ALL {
        assert_eq!(
            failed.contains(d),
            !matches!(d.fails, Fails::Never(_)),
            "{}",
            d.name
        );
    }
    let asks = |d: &Descriptor| format!("{}: {}", d.name, d.summary);

    let terminal = crate::output::verdict_table(&r, dir.path());
    for d in &failed {
        assert!(
            terminal.contains(&asks(d)),
            "terminal, {}:\n{terminal}",
            d.name
        );
    }
    // The mutex's row says why its verdict alone never fails a run.
    assert!(terminal.contains("(informational: a lease lock is not a mutex)"));
    // Nor does it fail its JUnit testcase (`mutex_overlaps` does).
    let mutex = crate::output::rows(&r)
        .into_iter()
        .find(|row| row.check.name == "mutex")
        .expect("a mutex row");
    assert!(!crate::output::row_fails(&r, &mutex));

    let outcome = Outcome {
        file: "scenarios/pause.toml".into(),
        name: r.run.scenario.clone(),
        run_dir: dir.path().to_path_buf(),
        report: Some(r.clone()),
        error: None,
        elapsed_s: 1.0,
    };
    let outcomes = [outcome];
    let junit = crate::junit::render(&outcomes).expect("junit");
    let markdown = crate::junit::markdown_run(&outcomes[0]);
    let suite = crate::suite::summary_table(&outcomes, dir.path());
    for d in &failed {
        let xml = quick_xml::escape::escape(asks(d)).into_owned();
        assert!(junit.contains(&xml), "junit, {}:\n{junit}", d.name);
        assert!(markdown.contains(d.summary), "markdown, {}", d.name);
        assert!(suite.contains(&asks(d)), "suite, {}:\n{suite}", d.name);
    }

    // report.html and index.html describe every check, failed or not; a check
    // with a section or a part of the findings asks its question there too.
    let html = fencecheck_reports::render_html(&r, &Timeline::default());
    let index = fencecheck_reports::render_index(&[fencecheck_reports::SuiteEntry {
        scenario: r.run.scenario.clone(),
        passed: false,
        verdict_line: crate::suite::counts(&outcomes[0]),
        elapsed_s: 1.0,
        report_html: "pause/report.html".into(),
        seed: r.run.seed,
        service: r.run.service.clone(),
        version: r.run.service_version.clone(),
    }]);
    for d in descriptor::ALL {
        let q = escape(d.summary);
        assert!(index.contains(&q), "index.html, {}", d.name);
        let n = html.matches(&q).count();
        assert!(n >= 2, "report.html asks {}'s question {n} time(s)", d.name);
    }
}
