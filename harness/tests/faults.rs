//! End to end with network faults and etcd clusters: real etcd members, real
//! proxies, real SIGKILLs. One test at a time (see e2e.rs for why).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    c.current_dir(repo_root());
    c
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

fn faults_of<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|w| w["kind"] == kind)
        .collect()
}

/// Processes (not zombies) whose command line mentions `needle`, with their state.
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

#[test]
fn partition_cuts_the_holder_off_and_fencing_rejects_its_late_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("partition", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let parts = faults_of(&r, "partition");
    assert!(parts.len() >= 3, "{parts:?}");
    // The nemesis says whose links it cut; that worker then lost its keepalive.
    let cut: Vec<u64> = parts
        .iter()
        .filter_map(|w| w["detail"]["target"]["links"]["holder"]["worker"].as_u64())
        .collect();
    assert!(!cut.is_empty(), "{parts:?}");
    let hist = std::fs::read_to_string(out.join("history.jsonl")).expect("history");
    let lost_by: Vec<u64> = hist
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("event"))
        .filter(|e| e["f"] == "keepalive-lost")
        .filter_map(|e| e["process"].as_u64())
        .collect();
    assert!(
        cut.iter().any(|w| lost_by.contains(w)),
        "cut off {cut:?}, keepalives lost by {lost_by:?}"
    );
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true, "{f}");
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
}

#[test]
fn partition_without_fencing_accepts_the_cut_off_holders_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("partition-no-fencing", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(n(&r["checks"]["fencing"]["stale_accepted"]) >= 1);
}

#[test]
fn kill_the_leader_of_three_members_repeatedly() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("kill", &["--duration", "20s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["run"]["etcd_members"], 3);
    let kills = faults_of(&r, "kill");
    let leaders_killed = kills
        .iter()
        .filter(|w| w["outcome"] == "ok")
        .filter(|w| w["detail"]["killed"][0]["was_leader"] == true)
        .count();
    assert!(leaders_killed >= 2, "{kills:#?}");
    for w in &kills {
        assert!(
            w["detail"]["restarted"][0]["done"]["pid"]
                .as_u64()
                .is_some(),
            "every killed member is restarted: {w}"
        );
    }
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    // The heal phase's final read is recorded and agrees with the counter.
    let hist = std::fs::read_to_string(out.join("history.jsonl")).expect("history");
    let finals: Vec<Value> = hist
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("event"))
        .filter(|e| e["f"] == "final-read" && e["type"] == "ok")
        .collect();
    assert_eq!(finals.len(), 1);
    assert!(n(&finals[0]["value"]) > 0);
    assert_eq!(
        finals[0]["value"],
        r["checks"]["counter"]["keys"][0]["final_value"]
    );
}

#[test]
fn mixed_schedule_is_the_same_for_the_same_seed() {
    let sched = |seed: &str| {
        let o = bin()
            .args([
                "validate",
                "--schedule",
                "--seed",
                seed,
                "scenarios/mixed.toml",
            ])
            .output()
            .expect("validate");
        assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let a = sched("29");
    assert_eq!(a, sched("29"));
    assert_ne!(a, sched("30"));
    // Every fault kind appears in the mix.
    for kind in ["pause", "revoke-lease", "partition", "delay", "kill"] {
        assert!(a.contains(kind), "{kind} missing from\n{a}");
    }
}

#[test]
fn ctrl_c_during_a_three_member_run_leaves_nothing_behind() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let mut child = bin()
        .args([
            "scenario",
            "scenarios/leader-pause.toml",
            "--quiet",
            "--backend",
            "process",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Interrupt while the leader is frozen.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
        if nem.contains("\"invoke\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no fault injected within 60s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let needle = out.display().to_string();
    let before = processes_mentioning(&needle);
    assert!(
        before.iter().filter(|(_, _, c)| c.contains("etcd")).count() >= 3,
        "{before:#?}"
    );
    assert!(
        before.iter().any(|(_, st, _)| st == "T"),
        "expected the paused leader: {before:#?}"
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
        assert!(Instant::now() < deadline, "no exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_mentioning(&needle);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
