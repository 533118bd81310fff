//! Aimed faults, end to end on the process backend: `--aim` turns the negative
//! control's pauses into pauses between a holder's read and its write, and one
//! such pause finds the stale write; a fault whose event never comes in time is
//! recorded as skipped, with the reason; what cannot be aimed is refused before
//! anything starts (exit 2, file:line). Real etcd, real workers, real signals.

use crate::common;

use common::{bin, explain, run_scenario, serial};
use fencecheck_reports::{EffectStatus, Report};

fn report(out: &std::path::Path) -> Report {
    let path = out.join("report.json");
    Report::read_json(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn one_aimed_pause_finds_the_negative_controls_stale_write() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    // Seed 19 is the one the time-based schedule once missed on every pause.
    let (o, _) = run_scenario(
        "no-fencing",
        &["--seed", "19", "--aim", "--aim-count", "1"],
        &out,
    );
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let r = report(&out);
    assert_eq!(r.run.schedule.len(), 1, "{:?}", r.run.schedule);
    assert_eq!(r.run.schedule[0].aim.as_deref(), Some("read"));
    assert!(
        r.run.command.ends_with("--aim --aim-count 1"),
        "{}",
        r.run.command
    );
    let w = &r.faults[0];
    assert_eq!(w.outcome, "ok", "{w:?}");
    let aim = &w.detail["aim"];
    assert_eq!(aim["event"], "read", "{aim}");
    // The worker stopped is the one whose read it was, on the grant it read under.
    let seen = &aim["seen"];
    let victim = &w.detail["target"]["workers"][0];
    assert_eq!(victim["worker"], seen["worker"], "{}", w.detail);
    assert_eq!(victim["revision"], seen["grant"], "{}", w.detail);
    assert_eq!(
        w.effect.as_ref().map(|e| e.status),
        Some(EffectStatus::Confirmed),
        "{w:?}"
    );
    assert!(
        r.checks.fencing.stale_accepted >= 1,
        "{:?}",
        r.checks.fencing
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("1 faults injected (1 aimed)"), "{stdout}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("aimed at read of worker"),
        "the page names the aim"
    );
}

#[test]
fn an_aimed_fault_whose_event_cannot_come_in_time_is_skipped_with_the_reason() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let file = dir.path().join("late.toml");
    // Armed at 2 s, but 3 s after its event a 2 s pause would not end before
    // the 6 s run does: there is no moment left to fire at.
    std::fs::write(
        &file,
        "name = \"late\"\nduration = \"6s\"\nseed = 1\n[cluster]\nbackend = \"process\"\n\
         [workload]\nworkers = 2\n\
         [[fault]]\nkind = \"pause\"\nat = \"2s\"\nduration = \"2s\"\naim = \"read\"\n\
         offset = \"3s\"\n",
    )
    .expect("write");
    let o = bin()
        .args(["scenario", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .expect("run");
    let r = report(&out);
    let c = &r.fault_counts[0];
    assert_eq!((c.planned, c.injected, c.skipped), (1, 0, 1), "{c:?}");
    let why = &c.reasons[0].reason;
    assert!(
        why.contains("aimed at read") && why.contains("no such event"),
        "{why}\n{}",
        explain(&o)
    );
}

#[test]
fn what_cannot_be_aimed_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tmp");
    // On the command line: refused by the argument parser, exit 2.
    for (flag, want) in [("--aim=renew", "renewals"), ("--aim=soon", "unknown aim")] {
        let o = bin()
            .args(["scenario", "scenarios/pause.toml", flag])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(want), "{flag}: want {want:?} in {err}");
    }
    let cases = [
        ("aim = \"renew\"", "renewals", 7),
        ("aim = \"nudge\"", "unknown aim \"nudge\"", 7),
        ("aim = true\ncount = 0", "`count` must be at least 1", 8),
        (
            "aim = true\noffset = \"2m\"",
            "`offset` must be at most 1m",
            8,
        ),
        ("offset = \"20ms\"", "`offset` only goes with `aim`", 7),
    ];
    for (lines, want, line) in cases {
        let file = dir.path().join("bad.toml");
        std::fs::write(
            &file,
            format!(
                "name = \"bad\"\n\
                 [[fault]]\nkind = \"pause\"\nevery = \"4s\"\nduration = \"3s\"\n\
                 target = \"holder\"\n{lines}\n"
            ),
        )
        .expect("write");
        let o = bin().arg("validate").arg(&file).output().expect("run");
        let err =
            String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(2), "{lines}: {err}");
        assert!(err.contains(want), "{lines}: want {want:?} in {err}");
        assert!(
            err.contains(&format!("bad.toml:{line}")),
            "{lines}: want line {line} in {err}"
        );
    }
}
