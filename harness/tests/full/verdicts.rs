//! Verdicts that never pass a broken system by default: a storage of the user's
//! own that already holds data fails the run, naming the key; the same run on an
//! empty storage passes, its client-side counts marked as lower bounds; and the
//! README's sample verdict table has the rows and columns a real run prints.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;

use common::*;
use serde_json::Value;

/// fencecheck's own storage, run as a separate service of the user's (the
/// harness neither starts nor reads it).
struct External {
    child: std::process::Child,
    addr: String,
}

impl External {
    fn start(dir: &Path) -> External {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = bin()
            .args([
                "storage",
                "--listen",
                &addr,
                "--fencing",
                "monotonic",
                "--log",
            ])
            .arg(dir.join(format!("external-{port}.jsonl")))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the external storage");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "external storage never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        External { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// One protocol request, straight to the storage; returns the answer.
    fn call(&self, body: &Value) -> Value {
        let body = body.to_string();
        let mut s = std::net::TcpStream::connect(&self.addr).expect("connect");
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .expect("send");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("answer");
        let (_, json) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

impl Drop for External {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scenarios/pause.toml` with its storage pointed at `url` (kind = "http").
fn pause_on(url: &str, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo_root().join("scenarios/pause.toml")).expect("pause");
    let text = text.replacen(
        "[storage]\n",
        &format!("[storage]\nkind = \"http\"\nurl = \"{url}\"\n"),
        1,
    );
    let path = dir.join("pause-http.toml");
    std::fs::write(&path, text).expect("write scenario");
    path
}

fn run_file(file: &Path, out: &Path) -> (std::process::Output, Value) {
    let o = bin()
        .arg("scenario")
        .arg(file)
        .args([
            "--quiet",
            "--backend",
            "process",
            "--duration",
            "14s",
            "--out",
        ])
        .arg(out)
        .output()
        .expect("run fencecheck");
    (o, read_report(out))
}

#[test]
fn a_storage_holding_data_before_the_run_fails_it_naming_the_key() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let ext = External::start(dir.path());
    // What an earlier test left behind: k0 = 119 under token 120.
    let a = ext.call(&serde_json::json!({
        "op": "write", "key": "k0", "val": 119, "token": 120,
        "client": "earlier-test", "request_id": 1
    }));
    assert_eq!(a["verdict"], "accepted", "{a}");
    let out = dir.path().join("dirty");
    let (o, r) = run_file(&pause_on(&ext.url(), dir.path()), &out);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert_eq!(r["passed"], false);
    let problems = r["problems"].to_string();
    assert!(
        problems.contains("k0 held value 119, token 120"),
        "{problems}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("FAIL: the storage held data before the run"),
        "{stdout}"
    );
    // `check` judges the recorded directory the same way.
    let c = bin().arg("check").arg(&out).output().expect("check");
    assert_eq!(c.status.code(), Some(1), "{}", explain(&c));
    assert_nothing_left(&out);
}

#[test]
fn the_same_run_on_an_empty_storage_passes_with_its_lower_bounds_marked() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let ext = External::start(dir.path());
    let out = dir.path().join("clean");
    let (o, r) = run_file(&pause_on(&ext.url(), dir.path()), &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{}", r["problems"]);
    // The probe read every key and found them empty.
    let before: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("storage-before.json")).expect("storage-before"),
    )
    .expect("json");
    assert_eq!(before[0]["key"], "k0", "{before}");
    assert_eq!(before[0]["value"], Value::Null, "{before}");
    // Judged from the client side: the counts that are floors say so, with why.
    let f = &r["checks"]["fencing"];
    assert!(
        f["lower_bound"]
            .as_str()
            .unwrap_or("")
            .contains("HTTP storage"),
        "{f}"
    );
    let u = &r["findings"]["unsafe_window"];
    assert!(u["lower_bound"].is_string(), "{u}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row: {stdout}"))
            .to_string()
    };
    let fencing = row("fencing");
    assert!(
        fencing.contains(&format!("≥ {} stale accepted", n(&f["stale_accepted"])))
            && fencing.ends_with("(lower bound: HTTP storage)"),
        "{fencing}"
    );
    assert!(row("unsafe-window").ends_with("(lower bound: HTTP storage)"));
    let counter = row("counter");
    assert!(
        r["checks"]["counter"]["lower_bound"].is_string()
            && counter.contains(&format!("≥ {} lost", n(&r["checks"]["counter"]["lost"])))
            && counter.ends_with("(lower bound: HTTP storage)"),
        "{counter}"
    );
    assert!(
        stdout.contains("cannot be judged from the client side"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("html");
    assert!(html.contains("id=\"fencing-lower-bound\""));
    assert!(html.contains("id=\"counter-lower-bound\""));
    assert_nothing_left(&out);
}

/// The check rows and the two header lines of a verdict table: the first word
/// of each line between `check … counts` and `expectation …`, and each header's
/// words.
fn table_shape(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let head = lines
        .iter()
        .position(|l| l.starts_with("check "))
        .unwrap_or_else(|| panic!("no check header in:\n{text}"));
    let exp = lines
        .iter()
        .position(|l| l.starts_with("expectation "))
        .unwrap_or_else(|| panic!("no expectation header in:\n{text}"));
    let rows = lines[head + 1..exp]
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "≥")
        .map(String::from)
        .collect();
    (rows, words(lines[head]), words(lines[exp]))
}

#[test]
fn the_readme_sample_verdict_table_matches_a_real_run() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README");
    let section = readme
        .split_once("## Reading the verdict")
        .map(|(_, rest)| rest)
        .expect("a 'Reading the verdict' section");
    let block = section
        .split_once("```")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(b, _)| b.trim_start_matches(|c: char| c != '\n'))
        .expect("a fenced code block in 'Reading the verdict'");
    let want = table_shape(block);

    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, _) = run_scenario("pause", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let got = table_shape(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(got.0, want.0, "check rows: the README shows {:?}", want.0);
    assert_eq!(got.1, want.1, "check header");
    assert_eq!(got.2, want.2, "expectation header");
    assert_nothing_left(&out);
}

/// The expectation named `name` of a report.
fn expectation<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["expectations"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no expectation {name}: {}", r["expectations"]))
}

/// python-etcd3 0.12.0 (PyPI) used as its README shows, `with client.lock()`
/// (kragniz/python-etcd3#599), no fault: a waiter past the library's 10 s enters
/// the body without the lock. The run fails on the exclusion check itself —
/// phantom grants, none counted as a valid grant — and on nothing else.
#[test]
fn python_etcd3_with_form_fails_on_its_phantom_grants() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("clients/python-etcd3-with", &[], &out);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert_eq!(r["passed"], false);
    assert!(r["inconclusive"].is_null(), "{}", r["inconclusive"]);
    let x = &r["checks"]["exclusion"];
    assert!(n(&x["phantom"]) > 0, "no phantom grant: {x}");
    assert_eq!(x["valid"], false, "{x}");
    // The adapter logged each body entered without the lock: the ground truth.
    let entered_without: usize = (0..8)
        .map(|w| {
            std::fs::read_to_string(out.join(format!("worker-{w}.client.log")))
                .unwrap_or_default()
                .matches("entering the body WITHOUT the lock")
                .count()
        })
        .sum();
    // Each phantom is one of them; a body entered as the run ended (its worker
    // no longer waiting) is the only one the record may lack.
    let phantom = n(&x["phantom"]);
    assert!(
        phantom <= entered_without as u64 && phantom + 8 >= entered_without as u64,
        "{phantom} phantom grants, {entered_without} bodies entered without the lock: {x}"
    );
    // A non-grant is never a valid grant.
    let grants = n(&r["findings"]["grant_validity"]["grants"]);
    assert!(grants <= n(&x["matched"]), "{grants} grants vs {x}");
    let unmet: Vec<&str> = r["expectations"]
        .as_array()
        .expect("expectations")
        .iter()
        .filter(|e| e["met"] == false)
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(unmet, ["exclusion_violations"], "{}", r["expectations"]);
    assert!(expectation(&r, "exclusion_violations")["default"] == true);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("FAIL: not met: exclusion_violations (default 0)"),
        "{stdout}"
    );
    assert_nothing_left(&out);
}

/// Its twin: the same library and contention, `if not lock.acquire(): give up`.
/// Every acquisition is a grant the service made; the run passes.
#[test]
fn python_etcd3_acquire_with_its_result_checked_passes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("clients/python-etcd3-checked", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let x = &r["checks"]["exclusion"];
    assert!(n(&x["acquisitions"]) > 0, "{x}");
    assert_eq!(n(&x["matched"]), n(&x["acquisitions"]), "{x}");
    assert_eq!(
        (n(&x["phantom"]), n(&x["unexplained_overlaps"])),
        (0, 0),
        "{x}"
    );
    assert!(r["coverage"].is_null(), "{}", r["coverage"]);
    assert_nothing_left(&out);
}
