//! The fast tier: recorded run directories (`tests/fixtures/<name>/`, one per kind
//! of run — etcd, ZooKeeper, Redis, Redlock, PostgreSQL, HTTP storage, an external
//! adapter, a naive client, a killed run) re-checked offline with the real binary
//! (`fencecheck check DIR`) and compared, verdict by verdict and count by count, with
//! the report.json the live run wrote. Nothing is started: seconds per fixture.
//!
//! The comparison goes through [`Verdicts`], built field by field from the typed
//! [`Report`], so fields the report gains later (serde defaults) do not break it and
//! a mismatch prints as a readable diff. Re-record with
//! `harness/tests/fixtures/record.sh` (docs/testing.md) when a verdict changes on
//! purpose.

mod common;

use std::path::{Path, PathBuf};

use common::{bin, repo_root};
use fencecheck_reports::{Report, Validity};

fn fixtures_dir() -> PathBuf {
    repo_root().join("harness/tests/fixtures")
}

/// One key's counter: (key, acknowledged, applied, final value, lost).
type KeyCounts = (String, u64, u64, i64, u64);

/// What a re-check must reproduce: every check's verdict and counts, every
/// expectation's outcome, the findings' counts, the faults' outcomes. Examples,
/// latencies and timings are left out: they follow from the same counts, and a
/// field added to them later must not make every fixture stale.
#[derive(Debug, PartialEq)]
struct Verdicts {
    passed: bool,
    incomplete: bool,
    inconclusive: bool,
    coverage: Vec<String>,
    /// valid, acquisitions, matched, phantom, unobserved, unexplained overlaps
    exclusion: Option<(Validity, [u64; 5])>,
    /// (name, expected, actual, met)
    expectations: Vec<(String, String, String, bool)>,
    /// valid, writes, accepted, rejected, stale_accepted, stale_rejected,
    /// fresh_rejected, unjudged, violations listed
    fencing: (Validity, [u64; 7], usize),
    /// valid, holds, overlaps
    mutex: (Validity, u64, u64),
    /// valid, acknowledged, lost, and per key
    counter: (Validity, u64, u64, Vec<KeyCounts>),
    /// valid, model, operations
    linearizable: Option<(Validity, String, u64)>,
    /// valid, grants, regressions, repeats, unverified
    token: Option<(Validity, [u64; 4])>,
    judged_from: Option<(String, Vec<String>)>,
    /// observed, observation gaps
    observed: (bool, u64),
    /// grants, after session end, caught by client
    grant_validity: [u64; 3],
    /// holds, reads, writes refused, writes accepted
    unsafe_window: [u64; 4],
    /// (id, kind, target, outcome)
    faults: Vec<(u32, String, String, String)>,
    /// events, acquires ok/failed, reads ok, writes ok/rejected/unknown, keepalive
    /// lost, serialization retries
    stats: [u64; 9],
}

impl Verdicts {
    fn of(r: &Report) -> Verdicts {
        let c = &r.checks;
        let f = &c.fencing;
        let g = &r.findings.grant_validity;
        let u = &r.findings.unsafe_window;
        let s = &r.stats;
        Verdicts {
            passed: r.passed,
            incomplete: r.incomplete.is_some(),
            inconclusive: r.inconclusive.is_some(),
            coverage: r.coverage.clone(),
            exclusion: c.exclusion.as_ref().map(|x| {
                (
                    x.valid,
                    [
                        x.acquisitions,
                        x.matched,
                        x.phantom,
                        x.unobserved,
                        x.unexplained_overlaps,
                    ],
                )
            }),
            expectations: r
                .expectations
                .iter()
                .map(|e| (e.name.clone(), e.expected.clone(), e.actual.clone(), e.met))
                .collect(),
            fencing: (
                f.valid,
                [
                    f.writes,
                    f.accepted,
                    f.rejected,
                    f.stale_accepted,
                    f.stale_rejected,
                    f.fresh_rejected,
                    f.unjudged,
                ],
                f.violations.len(),
            ),
            mutex: (c.mutex.valid, c.mutex.holds, c.mutex.overlaps),
            counter: (
                c.counter.valid,
                c.counter.acknowledged,
                c.counter.lost,
                c.counter
                    .keys
                    .iter()
                    .map(|k| {
                        (
                            k.key.clone(),
                            k.acknowledged,
                            k.applied,
                            k.final_value,
                            k.lost,
                        )
                    })
                    .collect(),
            ),
            linearizable: c
                .linearizable
                .as_ref()
                .map(|l| (l.valid, l.model.clone(), l.operations)),
            token: c
                .token
                .as_ref()
                .map(|t| (t.valid, [t.grants, t.regressions, t.repeats, t.unverified])),
            judged_from: c
                .judged_from
                .as_ref()
                .map(|j| (j.source.clone(), j.weaker.clone())),
            observed: (r.findings.observed, r.findings.observation_gaps),
            grant_validity: [g.grants, g.after_session_end, g.caught_by_client],
            unsafe_window: [u.holds, u.reads, u.writes_refused, u.writes_accepted],
            faults: r
                .faults
                .iter()
                .map(|w| (w.id, w.kind.clone(), w.target.clone(), w.outcome.clone()))
                .collect(),
            stats: [
                s.events,
                s.acquires_ok,
                s.acquires_failed,
                s.reads_ok,
                s.writes_ok,
                s.writes_rejected,
                s.writes_unknown,
                s.keepalive_lost,
                s.serialization_retries,
            ],
        }
    }
}

fn read_report(path: &Path) -> Report {
    Report::read_json(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture's recorded files, minus its report, in a fresh directory (the check
/// writes history.jsonl, report.json and report.html there, never into the tree).
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let src = fixtures_dir().join(name);
    let dir = tempfile::tempdir().expect("temp dir");
    for e in std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let p = e.expect("dir entry").path();
        let file = p.file_name().expect("file name");
        if file == "report.json" || file == "fixture.toml" {
            continue;
        }
        std::fs::copy(&p, dir.path().join(file)).expect("copy fixture file");
    }
    dir
}

/// `fencecheck check DIR`; its exit code must agree with the report it wrote
/// (0 passed, 1 not), and that report is returned.
fn check(dir: &Path) -> Report {
    let o = bin()
        .arg("check")
        .arg(dir)
        .output()
        .expect("run fencecheck check");
    let fresh = read_report(&dir.join("report.json"));
    assert_eq!(
        o.status.code(),
        Some(if fresh.passed { 0 } else { 1 }),
        "exit code vs report.passed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    fresh
}

/// Re-checks fixture `name` and compares with what was recorded; returns the
/// recorded report for the fixture's own assertions.
fn recheck(name: &str) -> Report {
    let recorded = read_report(&fixtures_dir().join(name).join("report.json"));
    let dir = copy_fixture(name);
    let fresh = check(dir.path());
    assert_eq!(
        Verdicts::of(&without_newer_rows(&fresh, &recorded)),
        Verdicts::of(&recorded),
        "{name}: the offline re-check (left) differs from the recorded run (right); \
         if the change is meant, re-record: harness/tests/fixtures/record.sh {name}"
    );
    recorded
}

/// `fresh` without the expectation rows and checks the recorded report predates
/// (a check added since, e.g. `exclusion_violations`), each of which must be
/// met: a new rule that fails a recorded run shows as a changed verdict.
fn without_newer_rows(fresh: &Report, recorded: &Report) -> Report {
    let mut r = fresh.clone();
    r.expectations.retain(|e| {
        let known = recorded.expectations.iter().any(|x| x.name == e.name);
        assert!(
            known || e.met,
            "{}: a rule newer than the recording fails it: {e:?}",
            recorded.run.scenario
        );
        known
    });
    if recorded.checks.exclusion.is_none() {
        // Recorded before coverage was reported: its gaps may only be those of
        // a run that failed anyway (`passed` and `inconclusive` still compare).
        r.coverage.clear();
        let x = r.checks.exclusion.take();
        assert!(
            x.as_ref()
                .is_none_or(|x| x.violations() == 0 && x.unobserved == 0),
            "{}: the exclusion check, newer than the recording, fails it: {x:?}",
            recorded.run.scenario
        );
    }
    r
}

fn met(r: &Report, expectation: &str) -> bool {
    r.expectations
        .iter()
        .find(|e| e.name == expectation)
        .unwrap_or_else(|| panic!("no expectation {expectation}: {:?}", r.expectations))
        .met
}

// Each fixture's own assertion says why it is kept: the verdict it shows. A
// re-recording that lost it (e.g. no fault landed in the short run) fails here.

#[test]
fn etcd_pause() {
    let r = recheck("etcd-pause");
    assert_eq!(r.run.service, "etcd");
    assert!(r.checks.fencing.stale_rejected > 0 && r.checks.mutex.overlaps > 0);
    assert!(r.passed, "{:?}", r.expectations);
}

#[test]
fn zk_pause() {
    let r = recheck("zk-pause");
    assert_eq!(r.run.service, "zookeeper");
    assert!(r.checks.fencing.stale_rejected > 0);
    assert_eq!(r.checks.fencing.stale_accepted, 0);
}

#[test]
fn redis_no_fencing() {
    let r = recheck("redis-no-fencing");
    assert_eq!(r.run.service, "redis");
    // The negative control: without a fence the stale writes get through.
    assert!(
        r.checks.fencing.stale_accepted > 0,
        "{:?}",
        r.checks.fencing
    );
    assert_eq!(r.checks.fencing.valid, Validity::Invalid);
    assert!(met(&r, "fencing_violations"));
}

#[test]
fn redlock_counter_pause() {
    let r = recheck("redlock-counter-pause");
    assert_eq!(r.run.service, "redlock");
    assert!(r.checks.fencing.stale_rejected > 0);
}

#[test]
fn pg_pause() {
    let r = recheck("pg-pause");
    assert!(r.run.resource.contains("postgres"), "{}", r.run.resource);
    assert!(r.checks.fencing.stale_rejected > 0);
}

#[test]
fn http_pause() {
    let r = recheck("http-pause");
    assert!(r.run.resource.starts_with("http "), "{}", r.run.resource);
    assert!(r.checks.fencing.stale_rejected > 0);
}

#[test]
fn python_etcd3_pause() {
    let r = recheck("python-etcd3-pause");
    assert_eq!(r.run.service, "etcd");
    assert!(
        r.checks.token.is_some(),
        "an external client's tokens are checked"
    );
    assert!(r.checks.fencing.stale_rejected > 0);
}

#[test]
fn jepsen_2020() {
    let r = recheck("jepsen-2020");
    assert_eq!(r.run.behaviour, "naive");
    assert!(r.checks.mutex.overlaps > 0, "{:?}", r.checks.mutex);
}

#[test]
fn killed() {
    let r = recheck("killed");
    assert!(r.incomplete.is_some(), "a killed run is incomplete");
    assert!(!r.passed);
}

/// A planned fault that was never injected: the run did not test what it
/// planned, so it is INCONCLUSIVE naming the fault and why — and passes once
/// `[expect] faults_skipped` allows it.
#[test]
fn faults_skipped() {
    let r = recheck("faults-skipped");
    assert!(!r.passed);
    let why = r.inconclusive.clone().unwrap_or_default();
    assert!(
        why.starts_with(
            "1 of 1 planned faults not injected (fault 1 (pause): no worker held a lock"
        ),
        "{why}"
    );
    assert_eq!(r.coverage.len(), 1, "{:?}", r.coverage);
    assert!(r.expectations.iter().all(|e| e.met), "{:?}", r.expectations);
    let dir = copy_fixture("faults-skipped");
    let file = dir.path().join("scenario.toml");
    let text = std::fs::read_to_string(&file).expect("scenario");
    std::fs::write(
        &file,
        text.replace("[expect]\n", "[expect]\nfaults_skipped = \"<=1\"\n"),
    )
    .expect("write scenario");
    let allowed = check(dir.path());
    assert!(
        allowed.passed,
        "{:?} {:?}",
        allowed.inconclusive, allowed.coverage
    );
}

/// Acquisitions of a lock the harness never observed: never PASS, INCONCLUSIVE
/// naming the holder's key — and not phantom grants (nothing to judge them by).
#[test]
fn unobserved_grants() {
    let r = recheck("unobserved-grants");
    assert!(!r.passed);
    let why = r.inconclusive.clone().unwrap_or_default();
    assert!(
        why.contains(
            "the holder's key `/locks/fencecheck/lock/k0` was never observed at the service"
        ),
        "{why}"
    );
    let x = r.checks.exclusion.as_ref().expect("exclusion");
    assert_eq!((x.phantom, x.matched), (0, 0), "{x:?}");
    assert_eq!(x.unobserved, x.acquisitions);
    assert_eq!(x.valid, Validity::Unknown);
    // The fencing row counts its unjudged writes, as a lower bound.
    assert!(r.checks.fencing.unjudged > 0, "{:?}", r.checks.fencing);
    let dir = copy_fixture("unobserved-grants");
    let o = bin().arg("check").arg(dir.path()).output().expect("check");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("writes unjudged (lower bound)"), "{stdout}");
    assert!(stdout.contains("INCONCLUSIVE: "), "{stdout}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("report.html");
    assert!(
        html.contains("id=\"coverage\""),
        "no coverage box in report.html"
    );
    assert!(
        html.contains("75 writes unjudged"),
        "no unjudged line in report.html"
    );
}

/// python-etcd3 0.12.0's `with client.lock()` (kragniz/python-etcd3#599): bodies
/// entered without the lock are phantom grants, which fail the exclusion check by
/// default; none is counted a valid grant or filed under another's session.
#[test]
fn python_etcd3_with() {
    let r = recheck("python-etcd3-with");
    assert!(!r.passed);
    assert!(r.inconclusive.is_none(), "{:?}", r.inconclusive);
    let x = r.checks.exclusion.as_ref().expect("exclusion");
    assert!(x.phantom > 0, "{x:?}");
    assert_eq!(x.valid, Validity::Invalid);
    assert_eq!(x.matched + x.phantom + x.unobserved, x.acquisitions);
    let unmet: Vec<&str> = r
        .expectations
        .iter()
        .filter(|e| !e.met)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(unmet, ["exclusion_violations"]);
    assert!(r.findings.grant_validity.grants <= x.matched, "{x:?}");
    // Each phantom names the adapter's own uuid, never another worker's grant.
    assert!(x.phantoms.iter().all(|p| p.value.is_some()), "{x:?}");
    // Without the optional `value`, the same entry's last creation would be
    // another worker's grant: it stays that worker's, and the verdict is the same.
    let dir = copy_fixture("python-etcd3-with");
    for w in 0..8 {
        let path = dir.path().join(format!("worker-{w}.jsonl"));
        let text = std::fs::read_to_string(&path).expect("worker events");
        let stripped: Vec<String> = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("event");
                if let Some(c) = v
                    .pointer_mut("/detail/client")
                    .and_then(|c| c.as_object_mut())
                {
                    c.remove("value");
                }
                v.to_string()
            })
            .collect();
        std::fs::write(&path, stripped.join("\n") + "\n").expect("write events");
    }
    let fresh = check(dir.path());
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("report.html");
    assert!(
        html.contains("id=\"check-exclusion\"") && html.contains("Phantom grants ("),
        "report.html has no exclusion section with its phantom grants"
    );
    let y = fresh.checks.exclusion.as_ref().expect("exclusion");
    assert_eq!((y.phantom, y.matched), (x.phantom, x.matched), "{y:?}");
    assert_eq!(
        fresh.findings.grant_validity.grants,
        r.findings.grant_validity.grants
    );
}

/// An adapter that exits before its hello: never PASS; INCONCLUSIVE quoting its
/// own last words, with the file and line of its log.
#[test]
fn adapter_crash() {
    let r = recheck("adapter-crash");
    assert!(!r.passed);
    let why = r.inconclusive.clone().unwrap_or_default();
    assert!(why.contains("broke the protocol"), "{why}");
    assert!(why.contains(".client.log:1: usage: client.py"), "{why}");
}

#[test]
fn tooz_etcd3gw_untold() {
    let r = recheck("tooz-etcd3gw-untold");
    assert!(!r.passed && r.inconclusive.is_none());
    assert!(!met(&r, "untold_holders"));
    assert!(r.findings.liveness.untold_holders > 0);
    assert_eq!(r.stats.keepalive_lost, 0);
}

/// Every fixture directory has its test above (a new fixture without one fails
/// here), and each says how it was recorded.
#[test]
fn every_fixture_is_tested_and_described() {
    let tested = [
        "etcd-pause",
        "zk-pause",
        "redis-no-fencing",
        "redlock-counter-pause",
        "pg-pause",
        "http-pause",
        "python-etcd3-pause",
        "jepsen-2020",
        "killed",
        "faults-skipped",
        "unobserved-grants",
        "python-etcd3-with",
        "adapter-crash",
        "tooz-etcd3gw-untold",
    ];
    let mut found: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut want: Vec<String> = tested.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
    for name in &found {
        let meta = fixtures_dir().join(name).join("fixture.toml");
        let text =
            std::fs::read_to_string(&meta).unwrap_or_else(|e| panic!("{}: {e}", meta.display()));
        let t: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", meta.display()));
        for key in ["command", "seed", "recorded", "fencecheck_commit"] {
            assert!(t.contains_key(key), "{}: no {key}", meta.display());
        }
    }
}

/// The comparison can fail: one stale write the storage rejected, turned into an
/// accepted one in the recorded storage log, must change the fencing verdict (and
/// the run's), so a checker that ignored its input would not pass this tier.
#[test]
fn a_corrupted_storage_log_changes_the_verdict() {
    let name = "etcd-pause";
    let recorded = read_report(&fixtures_dir().join(name).join("report.json"));
    let dir = copy_fixture(name);
    let log = dir.path().join("storage.jsonl");
    let text = std::fs::read_to_string(&log).expect("storage log");
    assert!(
        text.contains("\"verdict\":\"rejected-stale\""),
        "the fixture has a stale write rejected"
    );
    std::fs::write(
        &log,
        text.replace("\"verdict\":\"rejected-stale\"", "\"verdict\":\"accepted\""),
    )
    .expect("write storage log");
    let fresh = check(dir.path());
    assert_ne!(Verdicts::of(&fresh), Verdicts::of(&recorded));
    assert_eq!(fresh.checks.fencing.stale_rejected, 0);
    assert!(
        fresh.checks.fencing.stale_accepted > 0,
        "{:?}",
        fresh.checks.fencing
    );
    assert_eq!(fresh.checks.fencing.valid, Validity::Invalid);
    assert!(!fresh.passed);
}
