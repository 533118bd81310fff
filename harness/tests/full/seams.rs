//! The lock-service seam end to end on etcd: Jepsen's member targets, faults the
//! service or backend cannot do refused before anything starts, the findings from
//! the service's own record, incomplete runs, and the brief's usage line.

use crate::common;

use std::path::Path;

use common::*;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write scenario");
    p
}

#[test]
fn all_members_pause_on_three_etcd_members_pauses_each_member() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let file = write(
        dir.path(),
        "all-members.toml",
        "name = \"all-members\"\nduration = \"9s\"\nseed = 1\n\
         [cluster]\nmembers = 3\nbackend = \"process\"\n\
         [workload]\nworkers = 3\n\
         [[fault]]\nkind = \"pause\"\ntarget = \"all-members\"\nat = \"3s\"\nduration = \"2s\"\n\
         [expect]\nlost_updates = 0\n",
    );
    let out = dir.path().join("run");
    let o = bin()
        .args(["scenario"])
        .arg(&file)
        .args(["--quiet", "--out"])
        .arg(&out)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let r = read_report(&out);
    let pauses = faults_of(&r, "pause");
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    let w = pauses[0];
    assert_eq!(w["outcome"], "ok", "{w}");
    let members: Vec<u64> = w["detail"]["target"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["member"].as_u64().expect("member"))
        .collect();
    assert_eq!(members, vec![0, 1, 2], "{w}");
    let done = w["detail"]["done"].as_array().expect("done");
    assert_eq!(done.len(), 3, "each member paused: {w}");
    assert!(done.iter().all(|d| d["action"] == "SIGSTOP"), "{w}");
    assert_eq!(r["run"]["service"], "etcd");
    assert_eq!(r["run"]["etcd_members"], 3);
    assert_nothing_left(&out);
}

#[test]
fn validate_refuses_what_the_service_or_backend_cannot_do() {
    let dir = tempfile::tempdir().expect("tmp");
    let cases = [
        // (scenario text, the line the error must name, a word it must say)
        ("name = \"x\"\n[lock]\nservice = \"consul\"\n", 3, "consul"),
        ("name = \"x\"\n[storage]\ntoken = \"czxid\"\n", 3, "czxid"),
        // Another system's settings and tokens: refused naming the systems that have them.
        ("name = \"x\"\n[storage]\ntoken = \"czxid\"\n", 3, "zookeeper"),
        (
            "name = \"x\"\n[lock]\npersistence = \"aof-always\"\n",
            3,
            "redis, redlock",
        ),
        ("name = \"x\"\n[lock]\nretry_period = \"1s\"\n", 3, "kubernetes"),
        (
            "name = \"x\"\n[lock]\nservice = \"zookeeper\"\n[cluster]\nversion = \"3.4\"\n",
            5,
            "not available",
        ),
        (
            "name = \"x\"\n[cluster]\nmembers = 3\n[[fault]]\nkind = \"kill\"\ntarget = \"member:3\"\nat = \"1s\"\n",
            6,
            "member:3",
        ),
        (
            "name = \"x\"\n[[fault]]\nkind = \"pause\"\ntarget = \"minority\"\nat = \"1s\"\nduration = \"1s\"\n",
            4,
            "at least 3 members",
        ),
        (
            "name = \"x\"\n[lock]\nservice = \"zookeeper\"\n[[fault]]\nkind = \"revoke-lease\"\ntarget = \"holder\"\nat = \"1s\"\n",
            5,
            "expire-session",
        ),
        (
            "name = \"x\"\n[lock]\nservice = \"zookeeper\"\n[cluster]\nmembers = 3\n[[fault]]\nkind = \"pause\"\ntarget = \"etcd-leader\"\nat = \"1s\"\nduration = \"1s\"\n",
            8,
            "names etcd",
        ),
        (
            "name = \"x\"\n[cluster]\nmembers = 3\nbackend = \"docker\"\n[[fault]]\nkind = \"delay\"\ntarget = \"leader\"\nat = \"1s\"\nduration = \"1s\"\nlatency = \"10ms\"\n",
            6,
            "peer proxies",
        ),
    ];
    for (i, (text, line, word)) in cases.iter().enumerate() {
        let f = write(dir.path(), &format!("bad-{i}.toml"), text);
        let o = bin().arg("validate").arg(&f).output().expect("validate");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "case {i}: {}", explain(&o));
        let at = format!("bad-{i}.toml:{line}:");
        assert!(err.contains(&at), "case {i}: expected {at} in {err}");
        assert!(err.contains(word), "case {i}: expected {word:?} in {err}");
    }
}

#[test]
fn pause_shows_the_holders_unsafe_window_refused_by_the_fence() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("pause", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["findings"];
    assert_eq!(f["observed"], true, "{f}");
    let u = &f["unsafe_window"];
    assert!(n(&u["holds"]) >= 1, "no hold outlived its session: {u}");
    assert!(u["max_ms"].as_f64().unwrap_or(0.0) > 0.0, "{u}");
    assert_eq!(n(&u["writes_accepted"]), 0, "{u}");
    assert!(n(&u["writes_refused"]) >= 1, "{u}");
    // Every write the paused holders made after their session ended was refused.
    for w in u["windows"].as_array().expect("windows") {
        assert_eq!(n(&w["writes_accepted"]), 0, "{w}");
    }
    assert!(n(&f["grant_validity"]["grants"]) >= 1, "{f}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("html");
    assert!(
        html.contains("id=\"unsafe-windows\""),
        "the table is in report.html"
    );
}

#[test]
fn the_briefs_usage_line_finds_the_shipped_scenario_and_a_killed_run_is_incomplete() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    // `fencecheck scenario pause.toml` from the repository root: no such file
    // there, so the shipped scenarios/pause.toml is run.
    let mut child = bin()
        .args([
            "scenario",
            "pause.toml",
            "--backend",
            "process",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for_first_fault(&out);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert_nothing_left(&out);
    let scenario = std::fs::read_to_string(out.join("scenario.toml")).expect("scenario");
    assert!(scenario.contains("name = \"pause\""), "{scenario}");

    let o = bin().arg("check").arg(&out).output().expect("check");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert!(stdout.contains("INCOMPLETE"), "{stdout}");
    assert!(!stdout.contains("PASS"), "{stdout}");
    let r = read_report(&out);
    assert_eq!(r["passed"], false);
    assert!(
        r["incomplete"]
            .as_str()
            .unwrap_or("")
            .contains("no heal phase, no final reads"),
        "{}",
        r["incomplete"]
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("html");
    assert!(html.contains("INCOMPLETE"));

    // A name that is nowhere: exit 2, and the error lists the shipped scenarios.
    let o = bin()
        .args(["scenario", "no-such-scenario"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    assert!(
        err.contains("shipped scenarios") && err.contains("pause"),
        "{err}"
    );
}

/// A run directory written by fencecheck 0.1 (etcd 3.5, `pause.toml` for 10 s, 3
/// workers; kept in `tests/data/v0.1-pause`): its history says `revision`/`lease`,
/// its scenario `etcd_members`/`etcd`/`token = "revision"`, its run.json has no
/// service. `fencecheck check` reads it and reaches 0.1's counts; its verdict
/// is INCONCLUSIVE, not 0.1's PASS: 0.1 did not observe the service, so no
/// acquisition can be matched to a grant the service made, and a verdict must
/// prove its coverage.
#[test]
fn check_still_reads_a_run_directory_written_by_0_1() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = repo_root().join("harness/tests/data/v0.1-pause");
    for e in std::fs::read_dir(&src).expect("test data") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, dir.path().join(p.file_name().expect("name"))).expect("copy");
    }
    let o = bin().arg("check").arg(dir.path()).output().expect("check");
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("INCONCLUSIVE: the service was not observed (no service.jsonl)"),
        "{out}"
    );
    let r = read_report(dir.path());
    let f = &r["checks"]["fencing"];
    // 0.1 said: 85 writes, 0 stale accepted, 1 stale rejected; 4 overlaps; 84 increments.
    assert_eq!(
        (
            n(&f["writes"]),
            n(&f["stale_accepted"]),
            n(&f["stale_rejected"])
        ),
        (85, 0, 1),
        "{f}"
    );
    assert_eq!(n(&r["checks"]["mutex"]["overlaps"]), 4);
    assert_eq!(n(&r["checks"]["counter"]["acknowledged"]), 84);
    assert_eq!(r["run"]["service"], "etcd");
    assert_eq!(
        r["findings"]["observed"], false,
        "0.1 did not observe the service"
    );
    assert!(r["incomplete"].is_null(), "{}", r["incomplete"]);
    // The 0.1 `revision`/`lease` fields are read as the grant and the session.
    let holds = r["checks"]["mutex"]["examples"]
        .as_array()
        .expect("examples");
    assert!(holds
        .iter()
        .all(|o| o["a"]["revision"].as_i64().is_some() && o["a"]["lease"].as_i64().is_some()));
}
