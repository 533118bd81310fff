//! End to end, the real thing: the `fencecheck` binary starts a real etcd, the
//! storage and worker processes, injects real faults, and checks the history.
//!
//! The tests run one at a time (a shared lock): on a 2-core machine, concurrent
//! clusters would compete for CPU and stretch every timing the scenarios rely on.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    c.current_dir(repo_root());
    c
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run_scenario(name: &str, extra: &[&str], out: &Path) -> (Output, Value) {
    let output = bin()
        .args([
            "scenario",
            &format!("scenarios/{name}.toml"),
            "--quiet",
            "--backend",
            "process",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .expect("run fencecheck");
    let report = std::fs::read_to_string(out.join("report.json"))
        .map(|t| serde_json::from_str(&t).expect("report.json is JSON"))
        .unwrap_or(Value::Null);
    (output, report)
}

fn explain(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Processes whose command line mentions `needle` (our run dir), with their state.
fn processes_mentioning(needle: &str) -> Vec<(u32, String, String)> {
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
        // State is the field after the ")" that closes the command name.
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

fn assert_nothing_left(run_dir: &Path) {
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

#[test]
fn pause_is_fenced_and_check_agrees_offline() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("pause", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true);
    assert_eq!(n(&f["stale_accepted"]), 0);
    assert!(
        n(&f["stale_rejected"]) >= 1,
        "no stale write was even tried: {f}"
    );
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    assert!(n(&r["stats"]["keepalive_lost"]) >= 1);
    assert!(
        n(&r["stats"]["writes_ok"]) > 10,
        "too little traffic: {}",
        r["stats"]
    );
    let faults = r["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 2, "pauses at 5s and 10s");
    assert!(faults.iter().all(|w| w["outcome"] == "ok"), "{faults:?}");
    assert_eq!(r["run"]["seed"], 7);
    assert!(r["run"]["etcd_version"]
        .as_str()
        .unwrap_or("")
        .starts_with("3.5."));

    // The history is merged, numbered, time-ordered.
    let hist = std::fs::read_to_string(out.join("history.jsonl")).expect("history");
    let times: Vec<u64> = hist
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("event")["time_ns"]
                .as_u64()
                .expect("time")
        })
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(n(&r["stats"]["events"]), times.len() as u64);

    // Offline re-check reaches the same verdict, even with a torn line appended.
    use std::io::Write;
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .open(out.join("worker-0.jsonl"))
        .expect("open");
    w.write_all(b"{\"index\":0,\"time_ns\":1,\"proc")
        .expect("torn");
    drop(w);
    let c = bin().arg("check").arg(&out).output().expect("check");
    assert_eq!(c.status.code(), Some(0), "{}", explain(&c));
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report"))
            .expect("json");
    assert_eq!(again["checks"], r["checks"]);
    assert!(
        again["problems"].to_string().contains("torn last line"),
        "{}",
        again["problems"]
    );
    assert_nothing_left(&out);
}

#[test]
fn no_fencing_finds_stale_writes_with_their_faults() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("no-fencing", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], false);
    assert!(n(&f["stale_accepted"]) >= 1);
    let v = &f["violations"][0];
    assert!(
        v["stale"]["revision"].as_i64() < v["newer"]["revision"].as_i64(),
        "{v}"
    );
    assert_ne!(v["stale"]["worker"], v["newer"]["worker"]);
    assert!(
        !v["faults"].as_array().expect("faults").is_empty(),
        "the pause that caused it is named: {v}"
    );
    // Overwritten increments are visible in the counter too.
    assert!(
        n(&r["checks"]["counter"]["lost"]) >= 1,
        "{}",
        r["checks"]["counter"]
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("PASS"));
    assert_nothing_left(&out);
}

#[test]
fn contrib_lock_shows_both_failures_of_lease_id_equality() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("contrib-lock", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert!(n(&f["fresh_rejected"]) >= 1, "{f}");
    assert!(n(&f["stale_accepted"]) >= 1, "{f}");
    let kinds: Vec<&str> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    assert_eq!(kinds, vec!["pause", "revoke-lease"]);
    assert_nothing_left(&out);
}

#[test]
fn revoke_lease_on_etcd_3_4() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("revoke", &["--duration", "10s", "--etcd", "3.4"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(
        r["run"]["etcd_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("3.4."),
        "{}",
        r["run"]
    );
    let revokes = r["faults"].as_array().expect("faults");
    assert!(revokes.iter().any(|w| w["outcome"] == "ok"), "{revokes:?}");
    assert_eq!(r["checks"]["fencing"]["stale_accepted"], 0);
    assert_nothing_left(&out);
}

#[test]
fn bad_scenario_is_exit_2_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "name = \"x\"\n[workload]\nworkers = 3\nwrokers = 4\n").expect("write");
    let o = bin().arg("scenario").arg(&f).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.toml:4") && err.contains("wrokers"),
        "{err}"
    );
    let o = bin().arg("validate").arg(&f).output().expect("validate");
    assert_eq!(o.status.code(), Some(2));
    let o = bin()
        .args(["check", "/nonexistent/run"])
        .output()
        .expect("check");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
}

#[test]
fn shipped_scenarios_validate() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("scenarios"))
        .expect("scenarios/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let o = bin()
        .arg("validate")
        .args(&files)
        .output()
        .expect("validate");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
}

#[test]
fn ctrl_c_mid_pause_leaves_nothing_running_or_stopped() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let mut child = bin()
        .args([
            "scenario",
            "scenarios/pause.toml",
            "--quiet",
            "--backend",
            "process",
            "--duration",
            "30s",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until the first pause has been injected (a worker is SIGSTOPped now).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
        if nem.contains("\"invoke\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no pause injected within 60s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let needle = out.display().to_string();
    assert!(
        processes_mentioning(&needle)
            .iter()
            .any(|(_, st, _)| st == "T"),
        "expected a stopped worker mid-pause"
    );
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
    assert_nothing_left(&out);
    // What was recorded before the interrupt can still be checked.
    let c = bin().arg("check").arg(&out).output().expect("check");
    assert!(
        matches!(c.status.code(), Some(0) | Some(1)),
        "{}",
        explain(&c)
    );
}
