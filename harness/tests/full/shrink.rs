//! `fencecheck shrink` end to end: a recorded failing run (real etcd, real
//! workers, real SIGSTOPs) with one fault that matters among harmless ones is
//! shrunk to that fault; the result validates, says where it came from and how
//! reliably it fails, and fails again when run anew. Bad input is exit 2 with a
//! message naming what is wrong, before anything runs.

use crate::common;

use std::process::Output;

use common::*;
use fencecheck::scenario::{FaultKind, Scenario, Target};

/// A holder paused 3 s past its 2 s TTL with fencing off (the stale write), and
/// two 1 ms delays that change nothing. Fencing violations are expected to be 0,
/// so the run fails (exit 1) on `fencing_violations`.
const HEAP: &str = r#"
name = "heap"
description = "One pause that matters among harmless delays."
duration = "7s"
seed = 5

[lock]
ttl = "2s"

[storage]
fencing = "off"
token = "revision"

[workload]
workers = 3
ops_per_hold = 2
hold = "600ms..1200ms"

[[fault]]
kind = "delay"
target = "workers->storage"
at = "1s"
duration = "1s"
latency = "1ms"

# Aimed at the holder's read: a pause at a time could land after the hold's
# last write, and the woken holder would write nothing stale (it did, once, in a
# loaded CI run); between a read and its write it always has one to make.
[[fault]]
kind = "pause"
target = "holder"
at = "2s"
duration = "3s"
aim = "read"

[[fault]]
kind = "delay"
target = "workers->service"
at = "1500ms"
duration = "1s"
latency = "1ms"

[expect]
fencing_violations = 0
mutex_overlaps = "any"
lost_updates = "any"
linearizable = "any"
"#;

/// No fault, fencing on: passes on every seed.
const CALM: &str = r#"
name = "calm"
duration = "3s"

[storage]
fencing = "monotonic"
token = "revision"

[workload]
workers = 2
"#;

fn shrink(args: &[&str]) -> Output {
    bin()
        .arg("shrink")
        .args(args)
        .output()
        .expect("run fencecheck shrink")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_input_is_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("heap.toml");
    std::fs::write(&file, HEAP).expect("write");
    let f = file.to_str().expect("utf-8 path");
    let not_a_run = dir.path().join("empty");
    std::fs::create_dir(&not_a_run).expect("mkdir");
    let bad_field = dir.path().join("bad.toml");
    std::fs::write(
        &bad_field,
        HEAP.replace("workers = 3", "workers = \"three\""),
    )
    .expect("write");
    let cases: [(Vec<&str>, &str); 7] = [
        (
            vec!["no-such-scenario-anywhere.toml"],
            "no-such-scenario-anywhere",
        ),
        (
            vec![not_a_run.to_str().expect("utf-8")],
            "not a run directory (expected scenario.toml and run.json",
        ),
        (vec![bad_field.to_str().expect("utf-8")], "bad.toml:"),
        (vec![f, "--runs", "0"], "--runs"),
        (
            vec![f, "--runs", "3", "--k", "4"],
            "--k 4 must be between 1 and --runs 3",
        ),
        (vec![f, "--budget", "soon"], "--budget"),
        (
            vec![f, "--budget", "5s"],
            "--budget 5s is too small for even one run",
        ),
    ];
    for (args, says) in cases {
        let o = shrink(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", explain(&o));
        assert!(
            stderr(&o).contains(says),
            "{args:?} should say {says:?}: {}",
            explain(&o)
        );
        assert!(!stderr(&o).contains("panicked"), "{}", explain(&o));
    }
    // Nothing was run, so nothing was written.
    assert!(!repo_root()
        .join("scenarios/regressions/heap-shrunk.toml")
        .exists());
}

#[test]
fn a_scenario_that_passes_is_said_not_to_fail() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("calm.toml");
    std::fs::write(&file, CALM).expect("write");
    let out = dir.path().join("calm-shrunk.toml");
    let o = bin()
        .arg("shrink")
        .arg(&file)
        .args([
            "--runs",
            "2",
            "--k",
            "2",
            "--backend",
            "process",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .arg("--work")
        .arg(dir.path().join("work"))
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    // Needing 2 of 2, the first pass decides it.
    assert!(
        said.contains("does not fail: 1 of 1 runs passed"),
        "{}",
        explain(&o)
    );
    assert!(!out.exists(), "no result for a scenario that does not fail");
}

#[test]
fn a_recorded_failing_run_shrinks_to_the_fault_that_matters_and_still_fails() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("heap.toml");
    std::fs::write(&file, HEAP).expect("write");
    let run_dir = dir.path().join("recorded");
    let o = bin()
        .arg("scenario")
        .arg(&file)
        .args(["--seed", "41", "--backend", "process", "--quiet", "--out"])
        .arg(&run_dir)
        .output()
        .expect("run");
    assert_eq!(
        o.status.code(),
        Some(1),
        "the heap must fail to be shrunk: {}",
        explain(&o)
    );

    let out = dir.path().join("heap-shrunk.toml");
    let o = bin()
        .arg("shrink")
        .arg(&run_dir)
        .args([
            "--runs",
            "3",
            "--k",
            "2",
            "--backend",
            "process",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .arg("--work")
        .arg(dir.path().join("work"))
        .output()
        .expect("run shrink");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let text = std::fs::read_to_string(&out).expect("the shrunk scenario");

    // Fewer faults: the pause of the holder alone (the delays change nothing).
    // With K = 2 of 3 a pause that reproduces at p = 0.95 is wrongly dropped
    // about once in 140 tries (1 − P[Bin(3, 0.95) ≥ 2]).
    let s = Scenario::load(&out).expect("the result parses");
    assert_eq!(s.faults.len(), 1, "{text}");
    assert!(
        s.faults
            .iter()
            .all(|f| f.kind == FaultKind::Pause && f.target == Target::Holder),
        "only the pause matters: {text}"
    );
    assert_eq!(s.name, "heap-shrunk");
    assert_eq!(
        s.expect.fencing_violations.to_string(),
        "0",
        "[expect] kept: {text}"
    );

    // The header: origin and recorded seed, the sentence, the rate, the cost.
    let lines: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    let origin = format!(
        "# Shrunk by `fencecheck shrink` from run directory {} (seed 41).",
        run_dir.display()
    );
    assert_eq!(lines.first().copied(), Some(origin.as_str()), "{text}");
    assert!(
        lines[1].starts_with("# 1 pause of the holder, ")
            || lines[1].starts_with("# 2 pauses of the holder, "),
        "{text}"
    );
    assert!(
        lines[1].contains("TTL 2 s → stale write accepted in "),
        "{text}"
    );
    assert!(
        lines[2].starts_with("# Reproduction: failed fencing_violations in "),
        "{text}"
    );
    assert!(
        text.contains("# Rule: a candidate is kept when it fails the same way in ≥ 2 of 3"),
        "{text}"
    );
    assert!(
        text.contains("a shorter fault duration only when it fails in all 3."),
        "{text}"
    );
    assert!(
        text.contains("# Faults: 3 [[fault]] tables (3 planned injections) → "),
        "{text}"
    );
    assert!(text.contains("# Spent: "), "{text}");

    // It validates.
    let o = bin().arg("validate").arg(&out).output().expect("validate");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));

    // And it still fails, the same way, on seeds no shrink run used. A fault
    // duration is shortened only when the shorter one fails in all 3 runs, so a
    // result near the TTL that reproduces at p = 0.4 is kept 6% of the time
    // (0.4³) and then misses all 4 runs here 13% of the time: under 1 in 100;
    // one that never reproduces always fails this check. (Kept under 2 of 3, a
    // 1.5 s pause once failed 3 of 4 runs here.)
    let mut failed = 0;
    for seed in [900_001u64, 900_002, 900_003, 900_004] {
        let rd = dir.path().join(format!("again-{seed}"));
        let o = bin()
            .arg("scenario")
            .arg(&out)
            .args([
                "--seed",
                &seed.to_string(),
                "--backend",
                "process",
                "--quiet",
                "--out",
            ])
            .arg(&rd)
            .output()
            .expect("run");
        let r = read_report(&rd);
        let stale = r["expectations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "fencing_violations" && e["met"] == false);
        if o.status.code() == Some(1) && stale {
            failed += 1;
        }
    }
    assert!(
        failed >= 1,
        "the shrunk scenario failed in none of 4 fresh runs: {text}"
    );
}
