//! Fenced resources end to end: fencecheck's own storage killed and restarted on
//! its log, and storage reached as the user's own service over HTTP (`kind =
//! "http"`). Real processes, real SIGKILL, real sockets.

use crate::common;

use std::collections::HashSet;
use std::path::Path;

use common::*;
use serde_json::Value;

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a whole JSON line"))
        .collect()
}

#[test]
fn storage_killed_and_restarted_on_its_log_loses_no_acknowledged_write() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("storage-crash", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));

    // Both kills happened, each with its restart, on different pids.
    let kills = faults_of(&r, "kill");
    assert_eq!(kills.len(), 2, "kills at 5s and 10s: {kills:?}");
    let mut pids = HashSet::new();
    for w in &kills {
        assert_eq!(w["outcome"], "ok", "{w}");
        assert_eq!(w["target"], "storage");
        assert_eq!(w["detail"]["killed"][0]["storage"], true, "{w}");
        assert_eq!(w["detail"]["killed"][0]["done"]["action"], "SIGKILL", "{w}");
        assert_eq!(
            w["detail"]["restarted"][0]["done"]["action"], "restart",
            "{w}"
        );
        pids.insert(w["detail"]["killed"][0]["done"]["pid"].clone());
        pids.insert(w["detail"]["restarted"][0]["done"]["pid"].clone());
    }
    assert_eq!(pids.len(), 3, "three storage processes in turn: {pids:?}");

    // The log runs on across the restarts: one sequence, nothing renumbered, so
    // every restarted storage rebuilt its state from it.
    let log = jsonl(&out.join("storage.jsonl"));
    let seqs: Vec<u64> = log.iter().map(|l| n(&l["seq"])).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    let last_kill_end = n(&kills[1]["end_ns"]);
    assert!(
        log.iter().any(|l| n(&l["time_ns"]) > last_kill_end),
        "no traffic after the last restart"
    );

    // Every write a worker was told was accepted is in the log as accepted.
    let accepted: HashSet<(String, u64)> = log
        .iter()
        .filter(|l| l["request"]["op"] == "write" && l["verdict"] == "accepted")
        .map(|l| {
            let client = l["request"]["client"].as_str().expect("client").to_string();
            (client, n(&l["request"]["request_id"]))
        })
        .collect();
    let acked: Vec<(String, u64)> = history(&out)
        .iter()
        .filter(|e| e["f"] == "write" && e["type"] == "ok")
        .map(|e| (e["process"].to_string(), n(&e["request_id"])))
        .collect();
    assert!(acked.len() > 20, "too little traffic: {}", acked.len());
    for a in &acked {
        assert!(
            accepted.contains(a),
            "acknowledged write {a:?} is not in the log"
        );
    }

    // And the final read, by a fresh client after the last restart, is every one.
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(n(&c["lost"]), 0);
    let k = &c["keys"][0];
    assert_eq!(n(&k["final_value"]), n(&k["applied"]), "{k}");
    assert!(n(&k["final_value"]) >= n(&k["acknowledged"]), "{k}");
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    assert_nothing_left(&out);
}

/// fencecheck's own storage, run as if it were the user's service: a separate
/// process on its own port and log, which the harness neither starts nor reads.
struct External {
    child: std::process::Child,
    url: String,
    log: std::path::PathBuf,
}

impl External {
    fn start(dir: &Path, fencing: &str) -> External {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = dir.join(format!("external-{fencing}.jsonl"));
        let child = bin()
            .args(["storage", "--listen", &addr, "--fencing", fencing, "--log"])
            .arg(&log)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the external storage");
        // It listens once its state is rebuilt: poll for the port, with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "external storage never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        External {
            child,
            url: format!("http://{addr}/"),
            log,
        }
    }
}

impl Drop for External {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scenarios/NAME.toml` with its storage pointed at `url` (kind = "http").
fn http_variant(name: &str, url: &str, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo_root().join(format!("scenarios/{name}.toml")))
        .expect("scenario");
    let text = text.replacen(
        "[storage]\n",
        &format!("[storage]\nkind = \"http\"\nurl = \"{url}\"\n"),
        1,
    );
    let path = dir.join(format!("{name}-http.toml"));
    std::fs::write(&path, text).expect("write scenario");
    path
}

fn run_file(file: &Path, out: &Path) -> (std::process::Output, Value) {
    run_for(file, "14s", out)
}

fn run_for(file: &Path, duration: &str, out: &Path) -> (std::process::Output, Value) {
    let o = bin()
        .arg("scenario")
        .arg(file)
        .args([
            "--quiet",
            "--backend",
            "process",
            "--duration",
            duration,
            "--out",
        ])
        .arg(out)
        .output()
        .expect("run fencecheck");
    (o, read_report(out))
}

#[test]
fn http_storage_of_your_own_gets_the_built_in_verdicts_from_the_client_history() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");

    // pause: fenced by the service's own monotonic check.
    let ext = External::start(dir.path(), "monotonic");
    let out = dir.path().join("pause");
    // The scenario's own 20 s (three pauses, not two): a careful holder that learns
    // of its lost lease before its next write makes no stale write, and from the
    // client side a refused write is counted only when judged stale, so two pauses
    // sometimes gave none to count (CI, seed 7: 0 stale rejected).
    let (o, r) = run_for(&http_variant("pause", &ext.url, dir.path()), "20s", &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["run"]["resource"], format!("http {}", ext.url));
    let j = &r["checks"]["judged_from"];
    assert_eq!(j["source"], "client-history", "{j}");
    assert!(j["weaker"].to_string().contains("real-time order"), "{j}");
    let f = &r["checks"]["fencing"];
    assert_eq!(n(&f["stale_accepted"]), 0, "{f}");
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_eq!(r["checks"]["counter"]["valid"], true);
    assert_eq!(r["checks"]["linearizable"]["valid"], true);
    // The writes went to the service, not to a storage of the harness's.
    assert!(!out.join("storage.jsonl").exists());
    assert!(jsonl(&ext.log).len() > 20);
    let html = std::fs::read_to_string(out.join("report.html")).expect("html");
    assert!(html.contains("id=\"judged-from\""));
    assert_nothing_left(&out);
    drop(ext);

    // no-fencing: the service checks nothing; the client history still shows it.
    let ext = External::start(dir.path(), "off");
    let out = dir.path().join("no-fencing");
    let (o, r) = run_file(&http_variant("no-fencing", &ext.url, dir.path()), &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert!(n(&f["stale_accepted"]) >= 1, "{f}");
    let v = &f["violations"][0];
    assert!(
        v["stale"]["revision"].as_i64() < v["newer"]["revision"].as_i64(),
        "{v}"
    );
    assert_nothing_left(&out);
}

#[test]
fn http_storage_unreachable_or_not_speaking_the_protocol_is_exit_2_before_the_run() {
    let dir = tempfile::tempdir().expect("tmp");
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let file = http_variant("pause", &format!("http://127.0.0.1:{port}/"), dir.path());
    let out = dir.path().join("unreachable");
    let (o, _) = run_file(&file, &out);
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("-http.toml:") && err.contains("storage.url"),
        "{err}"
    );
    assert!(!out.join("run.json").exists(), "nothing ran");

    // Something answers, but not by the protocol.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            use std::io::{Read, Write};
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        }
    });
    let file = http_variant("pause", &format!("http://{addr}/"), dir.path());
    let (o, _) = run_file(&file, &dir.path().join("garbage"));
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("protocol"), "{err}");
}
