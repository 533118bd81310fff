//! Shared by the end-to-end test files: run the real binary, read what it wrote,
//! and look at the machine's process table for anything a run left behind.
#![allow(dead_code)]

pub mod cluster;
pub mod docker;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How many end-to-end tests run at once. A scenario run mostly waits (lease TTLs,
/// fault windows, a worker's think time), so two of them share the 2-core machine
/// without stretching the timings they rely on; more than two did (docs/testing.md
/// has the figures). `FENCECHECK_TEST_SLOTS` overrides it: 1 runs every end-to-end
/// test alone, as before.
fn capacity() -> u32 {
    std::env::var("FENCECHECK_TEST_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u32| n >= 1)
        .unwrap_or(2)
}

/// The slots, handed out first come, first served: a test that needs them all
/// (`alone`) is not overtaken by the ones that need one.
struct Slots {
    used: u32,
    next_ticket: u64,
    serving: std::collections::VecDeque<u64>,
}

static SLOTS: Mutex<Slots> = Mutex::new(Slots {
    used: 0,
    next_ticket: 0,
    serving: std::collections::VecDeque::new(),
});
static FREED: Condvar = Condvar::new();

/// Held for the length of a test; gives its slots back when dropped, a panicking
/// test's too.
pub struct Slot(u32, Instant);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        s.used -= self.0;
        FREED.notify_all();
        drop(s);
        note_time(self.0, self.1.elapsed());
    }
}

/// Appends `test<TAB>slots<TAB>seconds held` to `test-times.tsv` in cargo's
/// scratch directory for tests (`target/tmp`): which end-to-end tests make the
/// full tier long (libtest on stable reports no durations). Best effort.
fn note_time(slots: u32, held: Duration) {
    use std::io::Write;
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-times.tsv");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = writeln!(f, "{name}\t{slots}\t{:.1}", held.as_secs_f64());
    }
}

fn take(want: u32) -> Slot {
    let want = want.min(capacity());
    let mut s = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = s.next_ticket;
    s.next_ticket += 1;
    s.serving.push_back(ticket);
    while s.serving.front() != Some(&ticket) || s.used + want > capacity() {
        s = FREED.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.serving.pop_front();
    s.used += want;
    // The next in line may fit beside this one.
    FREED.notify_all();
    Slot(want, Instant::now())
}

/// One slot: a test that starts a cluster, processes or containers of its own, on
/// ports and in directories of its own, runs beside at most one other such test.
pub fn serial() -> Slot {
    take(1)
}

/// Two slots: a test that runs two scenarios of its own side by side.
pub fn pair() -> Slot {
    take(2)
}

/// Every slot: a test that looks at the whole machine runs with nothing else.
pub fn alone() -> Slot {
    take(u32::MAX)
}

/// One local Kubernetes cluster at a time.
static KUBE: Mutex<()> = Mutex::new(());

/// A test on a local Kubernetes cluster of its own: fixed ports (`fencecheck
/// cluster up`), so one such test at a time, and one slot, beside one other test.
/// The cluster is taken before the slot, and nothing that holds a slot waits for
/// the cluster, so the two cannot deadlock.
pub fn kube() -> (std::sync::MutexGuard<'static, ()>, Slot) {
    let cluster = KUBE.lock().unwrap_or_else(|e| e.into_inner());
    (cluster, take(1))
}

/// A test on a local Kubernetes cluster that loads the whole machine (a second
/// node: another Docker engine pulling images onto a copy-everything storage
/// driver), with nothing else beside it: timed scenarios beside it starved.
pub fn kube_alone() -> (std::sync::MutexGuard<'static, ()>, Slot) {
    let cluster = KUBE.lock().unwrap_or_else(|e| e.into_inner());
    (cluster, take(u32::MAX))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    c.current_dir(repo_root());
    c
}

/// Runs `scenarios/NAME.toml` on the process backend into `out`; returns the
/// process output and `report.json` (null when none was written).
pub fn run_scenario(name: &str, extra: &[&str], out: &Path) -> (Output, Value) {
    let output = bin()
        .args(["scenario", &format!("scenarios/{name}.toml"), "--quiet"])
        .args(["--backend", "process", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("run fencecheck");
    (output, read_report(out))
}

/// Runs a shipped scenario (`scenarios/NAME.toml`) that must meet its `[expect]`
/// (exit 0) with every grant observed and resolved (no problems), at least
/// `min_grants` grants, and nothing left behind; returns its report and history.
pub fn run_met(name: &str, min_grants: usize) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    let h = history(&out);
    let granted = h
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .count();
    assert!(granted >= min_grants, "{name}: only {granted} grants");
    assert_nothing_left(&out);
    (r, h)
}

pub fn read_report(run_dir: &Path) -> Value {
    std::fs::read_to_string(run_dir.join("report.json"))
        .map(|t| serde_json::from_str(&t).expect("report.json is JSON"))
        .unwrap_or(Value::Null)
}

pub fn explain(o: &Output) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout);
    // The verdict's lines once more at the end: a CI log keeps a failure's tail,
    // and the verdict is at the top of a long report.
    let verdict: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            [
                "FAIL",
                "INCONCLUSIVE",
                "NOT MET",
                "not met",
                "unmet",
                "invalid",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .take(20)
        .collect();
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}\nthe verdict's lines:\n{}",
        o.status.code(),
        stdout,
        String::from_utf8_lossy(&o.stderr),
        verdict.join("\n")
    )
}

pub fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The report's fault windows of one kind.
pub fn faults_of<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|w| w["kind"] == kind)
        .collect()
}

/// The report's planned/injected/confirmed/skipped counts of one fault kind
/// (`fault_counts`), `null` when the run had none of that kind.
pub fn fault_count(r: &Value, kind: &str) -> Value {
    r["fault_counts"]
        .as_array()
        .expect("fault_counts")
        .iter()
        .find(|c| c["kind"] == kind)
        .cloned()
        .unwrap_or_default()
}

/// How many `kill` windows hit the member that was leader at the time.
pub fn leaders_killed(kills: &[&Value]) -> usize {
    kills
        .iter()
        .filter(|w| w["outcome"] == "ok")
        .filter(|w| w["detail"]["killed"][0]["was_leader"] == true)
        .count()
}

/// The merged history of a run, one JSON value per event.
pub fn history(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("history.jsonl"))
        .expect("history.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect()
}

/// Processes (not zombies) whose command line mentions `needle`, with their state
/// letter (`T` = stopped).
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if !cmd.contains(needle) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The state is the field after the ")" that closes the command name.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        if state != "Z" {
            out.push((pid, state, cmd));
        }
    }
    out
}

/// Waits (with a deadline) until no process mentions the run dir.
pub fn assert_nothing_left(run_dir: &Path) {
    let needle = run_dir.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_mentioning(&needle);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (90 s at most) until the nemesis of the run in `out` has injected a fault.
pub fn wait_for_first_fault(out: &Path) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
        if nem.contains("\"invoke\"") {
            return;
        }
        assert!(Instant::now() < deadline, "no fault injected in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `fencecheck scenario` in the background, waits until the nemesis has
/// injected its first fault, checks `during` on the live processes, sends SIGINT,
/// and asserts the harness exits 2 leaving nothing behind, stopped or running.
pub fn interrupt_mid_fault(
    scenario: &str,
    extra: &[&str],
    out: &Path,
    during: impl Fn(&[(u32, String, String)]),
) {
    let mut child = bin()
        .args([
            "scenario",
            &format!("scenarios/{scenario}.toml"),
            "--quiet",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for_first_fault(out);
    during(&processes_mentioning(&out.display().to_string()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "harness did not exit after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2));
    assert_nothing_left(out);
}

/// A report's fencing counts: (stale accepted, stale rejected, fresh rejected).
pub fn fencing(r: &Value) -> (u64, u64, u64) {
    let f = &r["checks"]["fencing"];
    (
        n(&f["stale_accepted"]),
        n(&f["stale_rejected"]),
        n(&f["fresh_rejected"]),
    )
}
