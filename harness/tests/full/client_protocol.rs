//! External lock clients (`[client]`, docs/client-protocol.md) end to end on
//! etcd: deliberately broken clients (tests/data/clients/) each end in a clear
//! error naming the worker and the line, in the worker's history, its log and
//! the report, with the documented exit code and no client process left; and a
//! small correct client around python-etcd3 whose grants the harness resolves to
//! the service's own order.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use common::*;

fn client(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/clients")
        .join(name)
}

/// A scenario with `[client] command = command` (plus `extra` lines in the
/// file), run on the process backend into `out`.
fn run_with_client(dir: &Path, command: &[String], extra: &str, out: &Path) -> (Output, Value) {
    let argv = command
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "name = \"client\"\nduration = \"6s\"\nseed = 3\n\
         [cluster]\nbackend = \"process\"\n\
         [workload]\nworkers = 2\nhold = \"50ms..200ms\"\n\
         {extra}\n\
         [client]\ncommand = [{argv}]\n"
    );
    run_text(dir, &text, out)
}

/// Runs the scenario `text` (written to `dir/client.toml`) into `out`.
fn run_text(dir: &Path, text: &str, out: &Path) -> (Output, Value) {
    let file = dir.join("client.toml");
    std::fs::write(&file, text).expect("write scenario");
    let output = bin()
        .arg("scenario")
        .arg(&file)
        .args(["--quiet", "--out"])
        .arg(out)
        .output()
        .expect("run fencecheck");
    (output, read_report(out))
}

/// No process of the run in `out` whose command line names `script` is left
/// (polled: the kernel delivers PDEATHSIG and the worker's kill
/// asynchronously). Of the run: its workers name `out` on their command line,
/// its clients run in it (their working directory). Two tests run at a time,
/// and another one's clients of the same script are not this run's.
fn assert_no_client_left(script: &Path, out: &Path) {
    let needle = script.display().to_string();
    let of_run = |pid: u32, cmd: &str| {
        cmd.contains(&out.display().to_string())
            || std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|d| d.starts_with(out))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<_> = processes_mentioning(&needle)
            .into_iter()
            .filter(|(pid, _, cmd)| of_run(*pid, cmd))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "client processes left behind: {left:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs a broken client and checks what every broken client must leave: exit
/// 1, a report whose problems name a worker and contain `expect`, the same in
/// a worker's `client-error` event and log, and no client process left.
fn broken(mode: &[&str], script: &str, expect: &str) -> Value {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let path = client(script);
    let mut command = vec![path.display().to_string()];
    command.extend(mode.iter().map(|s| s.to_string()));
    let (o, r) = run_with_client(dir.path(), &command, "", &out);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert_eq!(r["passed"], false);
    let problems: Vec<&str> = r["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let named = problems
        .iter()
        .find(|p| p.starts_with("worker ") && p.contains(expect))
        .unwrap_or_else(|| panic!("no problem naming a worker and {expect:?}: {problems:#?}"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(expect), "terminal: {stdout}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("client error") || html.contains("client request"),
        "html"
    );
    // The worker's own record: the history event and its log.
    let worker: u32 = named["worker ".len()..]
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("worker id");
    let ev = history(&out)
        .into_iter()
        .find(|e| e["f"] == "client-error" && e["process"] == worker)
        .expect("client-error event");
    let recorded = format!("{} {}", ev["error"], ev["detail"]);
    assert!(recorded.contains(expect), "{ev}");
    let log = std::fs::read_to_string(out.join(format!("worker-{worker}.log"))).expect("log");
    assert!(log.contains(expect), "worker log: {log}");
    assert_nothing_left(&out);
    assert_no_client_left(&path, &out);
    r
}

#[test]
fn a_client_that_crashes_mid_hold_is_a_client_error() {
    let r = broken(
        &["crash-mid-hold"],
        "grant_all.py",
        "client exited (exit status: 3)",
    );
    let p = r["problems"].to_string();
    assert!(
        p.contains("crashing mid-hold on purpose"),
        "last stderr line: {p}"
    );
}

#[test]
fn a_line_that_is_not_json_is_a_client_error_quoting_it() {
    broken(&["not-json"], "grant_all.py", "session opened, all good");
}

#[test]
fn another_protocol_version_is_a_client_error() {
    broken(
        &["version"],
        "grant_all.py",
        "speaks protocol version 2, this worker speaks 1",
    );
}

#[test]
fn a_client_that_exits_at_start_is_a_client_error() {
    broken(&[], "exits_at_start.sh", "no module named lockthing");
}

#[test]
fn a_client_that_never_answers_is_unknown_restarted_and_never_hangs() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let path = client("grant_all.py");
    let command = vec![path.display().to_string(), "never-answers".into()];
    let started = std::time::Instant::now();
    let (o, r) = run_with_client(dir.path(), &command, "", &out);
    // 6 s of run, a 10 s `open` timeout, the workers' grace: bounded.
    assert!(
        started.elapsed().as_secs() < 90,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    let p = r["problems"].to_string();
    assert!(
        p.contains("client did not answer `open` (id 1) within 10 s; restarted it"),
        "{p}"
    );
    assert!(
        p.contains("\\\"op\\\":\\\"open\\\""),
        "the request line: {p}"
    );
    assert_nothing_left(&out);
    assert_no_client_left(&path, &out);
}

#[test]
fn a_client_command_that_does_not_exist_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, _) = run_with_client(dir.path(), &["./no-such-client.py".into()], "", &out);
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("client.toml:"), "file:line: {err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(!out.exists(), "nothing started");
    let v = bin()
        .arg("validate")
        .arg(dir.path().join("client.toml"))
        .output()
        .expect("validate");
    assert_eq!(v.status.code(), Some(2), "{}", explain(&v));
}

/// python-etcd3's Lock through the protocol: every grant is resolved to the
/// creation the harness observed, the token offered (the key's CreateRevision)
/// grows with the service's order, and the fence on it holds.
#[test]
fn python_etcd3_grants_resolve_to_the_service_order() {
    let has_etcd3 = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import etcd3"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_etcd3,
        "python3-etcd3 missing: ci/bootstrap.sh installs it (apt-get install python3-etcd3)"
    );
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let path = client("etcd3_lock.py");
    // `[client] token` picks the CreateRevision the adapter offers.
    let text = format!(
        "name = \"python-etcd3\"\nduration = \"8s\"\nseed = 5\n\
         [cluster]\nbackend = \"process\"\n\
         [workload]\nworkers = 3\nhold = \"50ms..300ms\"\n\
         [expect]\nfencing_violations = 0\n\
         [client]\ncommand = [{:?}]\ntoken = \"create_revision\"\n",
        path.display().to_string()
    );
    let (o, r) = run_text(dir.path(), &text, &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let problems = r["problems"].as_array().expect("problems");
    assert!(
        problems.is_empty(),
        "no unjudged grant, no client error: {problems:#?}"
    );
    let grants = n(&r["checks"]["token"]["grants"]);
    assert!(grants >= 5, "grants judged: {}", r["checks"]["token"]);
    assert_eq!(n(&r["checks"]["token"]["unverified"]), 0);
    assert_eq!(n(&r["checks"]["token"]["regressions"]), 0);
    assert_eq!(n(&r["checks"]["token"]["repeats"]), 0);
    assert!(n(&r["checks"]["fencing"]["writes"]) > 0);
    // The token sent is the CreateRevision the client read, and the harness saw
    // the service create exactly that entry at that revision.
    let obs = std::fs::read_to_string(out.join("service.jsonl")).expect("service.jsonl");
    let created: Vec<Value> = obs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|o| o["what"] == "created")
        .collect();
    let evs = history(&out);
    let oks: Vec<&Value> = evs
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .collect();
    assert!(!oks.is_empty());
    for e in oks {
        let c = &e["detail"]["client"];
        assert_eq!(e["token"], c["revision"], "{e}");
        assert!(
            created
                .iter()
                .any(|o| o["id"] == c["entry"] && o["grant"] == c["revision"]),
            "no observed creation of {c}"
        );
        assert!(
            e["detail"]["client"]["entry"]
                .as_str()
                .is_some_and(|s| s.starts_with("/locks/fencecheck/lock/")),
            "{e}"
        );
    }
    assert_nothing_left(&out);
    assert_no_client_left(&path, &out);
}

/// A pause of the holder stops its worker's whole process group: the library
/// freezes with the worker (state `T`), and is continued afterwards.
#[test]
fn a_holder_pause_freezes_the_client_with_its_worker() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let path = client("etcd3_lock.py");
    let text = format!(
        "name = \"pause-client\"\nduration = \"10s\"\nseed = 9\n\
         [cluster]\nbackend = \"process\"\n\
         [workload]\nworkers = 3\nhold = \"300ms..600ms\"\n\
         [[fault]]\nkind = \"pause\"\ntarget = \"holder\"\nat = \"3s\"\nduration = \"3s\"\n\
         [client]\ncommand = [{:?}]\ntoken = \"create_revision\"\n",
        path.display().to_string()
    );
    let file = dir.path().join("pause.toml");
    std::fs::write(&file, text).expect("write");
    let mut run = bin()
        .arg("scenario")
        .arg(&file)
        .args(["--quiet", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run");
    wait_for_first_fault(&out);
    // The nemesis stops the holder's worker with its group; poll briefly. (The
    // workers' command lines name the client too, in their config.)
    let needle = path.display().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let stopped = loop {
        let clients = processes_mentioning(&needle);
        let stopped: Vec<_> = clients.into_iter().filter(|(_, s, _)| s == "T").collect();
        if !stopped.is_empty() {
            break stopped;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no client stopped during the pause"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let python = stopped
        .iter()
        .filter(|(_, _, c)| c.starts_with("/usr/bin/python3"))
        .count();
    assert_eq!(python, 1, "the holder's client, and no other: {stopped:#?}");
    assert_eq!(stopped.len(), 2, "the client and its worker: {stopped:#?}");
    // Continued afterwards: nothing stays stopped.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let frozen: Vec<_> = processes_mentioning(&needle)
        .into_iter()
        .filter(|(_, s, _)| s == "T")
        .collect();
    assert!(
        frozen.is_empty(),
        "still stopped after the pause: {frozen:#?}"
    );
    let status = run.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    let r = read_report(&out);
    let pauses = faults_of(&r, "pause");
    assert_eq!(pauses.len(), 1, "{}", r["faults"]);
    assert_eq!(
        pauses[0]["outcome"], "ok",
        "the holder was found: {}",
        pauses[0]
    );
    assert_nothing_left(&out);
    assert_no_client_left(&path, &out);
}

fn has_python_module(m: &str) -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {m}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `script` (tests/data/clients) for 8 s with 3 workers under `config`
/// (TOML lines before `[client]`) and `client` (lines inside it); asserts a
/// clean end with every grant resolved: exit 0, no problem, no unverified
/// grant, nothing left. Returns the report and the observed creations.
fn library_run(script: &str, config: &str, client_lines: &str) -> (Value, Vec<Value>) {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let path = client(script);
    let text = format!(
        "name = \"library\"\nduration = \"8s\"\nseed = 5\n\
         [cluster]\nbackend = \"process\"\n\
         [workload]\nworkers = 3\nhold = \"50ms..300ms\"\n\
         {config}\n\
         [client]\ncommand = [{:?}]\n{client_lines}\n",
        path.display().to_string()
    );
    let (o, r) = run_text(dir.path(), &text, &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let problems = r["problems"].as_array().expect("problems");
    assert!(problems.is_empty(), "no unjudged grant: {problems:#?}");
    assert!(
        n(&r["checks"]["token"]["grants"]) >= 5,
        "{}",
        r["checks"]["token"]
    );
    assert_eq!(n(&r["checks"]["token"]["unverified"]), 0);
    let created = std::fs::read_to_string(out.join("service.jsonl"))
        .expect("service.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|o| o["what"] == "created")
        .collect();
    assert_nothing_left(&out);
    assert_no_client_left(&path, &out);
    (r, created)
}

/// kazoo's children (`<uuid hex>__lock__<seq>`) are seen by the ZooKeeper
/// observer and each grant is its czxid; the worker names the session's owner.
#[test]
fn kazoo_grants_resolve_to_their_czxid() {
    assert!(
        has_python_module("kazoo"),
        "python3-kazoo missing (ci/bootstrap.sh)"
    );
    let (r, created) = library_run(
        "kazoo_lock.py",
        "[lock]\nservice = \"zookeeper\"\nttl = \"4s\"\n",
        "token = \"czxid\"",
    );
    assert_eq!(n(&r["checks"]["token"]["regressions"]), 0);
    assert_eq!(n(&r["checks"]["fencing"]["stale_accepted"]), 0);
    assert!(
        created
            .iter()
            .all(|o| o["id"].as_str().is_some_and(|s| s.contains("__lock__"))),
        "{created:#?}"
    );
}

/// redis-py's Lock announces nothing: its grants are seen through keyspace
/// events and its value (the owner the worker handed over) names each one.
#[test]
fn redis_py_grants_are_seen_through_keyspace_events() {
    assert!(
        has_python_module("redis"),
        "python3-redis missing (ci/bootstrap.sh)"
    );
    let (r, created) = library_run(
        "redis_py_lock.py",
        // redis-py's token is its random value, which has no order: the token
        // check's default (no regressions) does not apply to a run about grants.
        "[lock]\nservice = \"redis\"\n[storage]\nfencing = \"off\"\n\
         [expect]\ntoken_regressions = \"any\"\n",
        "",
    );
    assert!(created.len() as u64 >= n(&r["checks"]["token"]["grants"]));
}
