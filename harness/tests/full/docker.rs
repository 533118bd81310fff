//! The docker backend, for real: the `fencecheck` binary builds its images FROM
//! scratch, starts etcd and the storage as containers on a private network, runs
//! worker processes on the host against them, injects faults through the engine
//! (`docker pause`, `docker kill` / `docker start`), checks the history, and removes
//! every container, network and volume it made — after a run, after Ctrl-C and after
//! a failed start; and when the harness is killed with SIGKILL, its reaper does.
//!
//! Where no Docker engine answers, each test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead. The tests run one at a time (a
//! shared lock), as in the other end-to-end files.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::docker::{
    assert_run_left_nothing, docker_json, docker_or_skip, host_has, leftovers_of, run_docker,
};
use common::{bin, explain, faults_of, leaders_killed, n, serial};
use serde_json::Value;

/// Starts from a clean engine: whatever an earlier, killed run left is removed (a
/// run in progress beside the tests is left alone, and each test looks only at
/// its own run's label).
fn clean() {
    let o = bin().arg("clean").output().expect("fencecheck clean");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
}

#[test]
fn pause_and_kill_on_docker_reach_the_process_verdicts_and_reuse_images() {
    if !docker_or_skip("pause_and_kill_on_docker") {
        return;
    }
    let _g = serial();
    clean();
    let dir = tempfile::tempdir().expect("tmp");

    // pause.toml: the holder (a host process) frozen past its TTL.
    let out = dir.path().join("pause");
    let (o, r) = run_docker("pause", &["--duration", "14s"], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker");
    assert_eq!(r["run"]["etcd_version"], "3.5.1");
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true);
    assert_eq!(n(&f["stale_accepted"]), 0);
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    // The storage wrote its log through the bind mount, into the run directory.
    let log = std::fs::read_to_string(out.join("storage.jsonl")).expect("storage.jsonl");
    assert!(log.lines().count() > 10, "{log}");
    assert!(out.join("etcd-0.log").is_file());
    let first = docker_json(&out);
    assert_run_left_nothing(&out, "after the pause run");

    // kill.toml, 3 members: the leader container killed and started again. This is
    // the second run: both images must be reused, unchanged.
    let out = dir.path().join("kill");
    let (o, r) = run_docker("kill", &["--duration", "20s"], &out, false);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("reusing image fencecheck/etcd:3.5.1-"),
        "{err}"
    );
    assert!(err.contains("reusing image fencecheck/storage:"), "{err}");
    assert!(!err.contains("building image"), "{err}");
    let second = docker_json(&out);
    for img in ["etcd", "storage"] {
        assert_eq!(second["images"][img]["reused"], true, "{second}");
        assert_eq!(
            first["images"][img]["tag"], second["images"][img]["tag"],
            "{first}\n{second}"
        );
        assert_eq!(first["images"][img]["id"], second["images"][img]["id"]);
    }
    assert_eq!(r["run"]["etcd_members"], 3);
    let kills = faults_of(&r, "kill");
    assert!(leaders_killed(&kills) >= 2, "{kills:#?}");
    for w in &kills {
        assert_eq!(
            w["detail"]["killed"][0]["done"]["action"], "docker kill",
            "{w}"
        );
        assert!(
            w["detail"]["restarted"][0]["done"]["container"]
                .as_str()
                .is_some_and(|c| c.starts_with("fencecheck-")),
            "every killed member is started again: {w}"
        );
    }
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_run_left_nothing(&out, "after the kill run");
}

#[test]
fn zookeeper_pause_on_docker_reaches_the_process_verdicts() {
    if !docker_or_skip("zk_pause_on_docker") {
        return;
    }
    // The image packages the host's JRE and Debian's ZooKeeper jars; without them
    // there is nothing to package (ci/bootstrap.sh installs them).
    if !host_has(
        "zk_pause_on_docker",
        "/usr/share/java/zookeeper.jar",
        "ZooKeeper jars",
    ) {
        return;
    }
    let _g = serial();
    // No `fencecheck clean` here (it removes every run on the engine, other
    // harnesses' live ones too); only this run's label is looked at, as in the
    // SIGKILL test.
    let dir = tempfile::tempdir().expect("tmp");
    // zk-pause.toml: the holder frozen past its 2 s session; the ensemble expires
    // it and the next waiter holds while the old holder still writes.
    let out = dir.path().join("zk-pause");
    let (o, r) = run_docker("zk-pause", &[], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker");
    assert_eq!(r["run"]["service"], "zookeeper");
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true);
    assert_eq!(n(&f["stale_accepted"]), 0);
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    assert!(
        n(&r["checks"]["mutex"]["overlaps"]) >= 1,
        "{}",
        r["checks"]["mutex"]
    );
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    // The member ran in the ZooKeeper image, and its output was saved.
    let d = docker_json(&out);
    assert!(
        d["images"]["zookeeper"]["tag"]
            .as_str()
            .is_some_and(|t| t.starts_with("fencecheck/zookeeper:3.8")),
        "{d}"
    );
    let log = std::fs::read_to_string(out.join("zk-0.log")).expect("zk-0.log");
    assert!(log.contains("binding to port"), "{log}");
    assert_run_left_nothing(&out, "after the zk-pause run");
}

#[test]
fn ctrl_c_while_a_member_container_is_paused_leaves_nothing() {
    if !docker_or_skip("ctrl_c_on_docker") {
        return;
    }
    let _g = serial();
    clean();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let mut child = bin()
        .args([
            "scenario",
            "scenarios/leader-pause.toml",
            "--backend",
            "docker",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Interrupt while the leader's container is frozen (`docker pause`). The first
    // run may build images (minutes on a cold cache), hence the long deadline.
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
        if nem.contains("\"invoke\"") {
            break;
        }
        if let Some(s) = child.try_wait().expect("wait") {
            panic!("fencecheck exited ({s}) before the first fault");
        }
        assert!(Instant::now() < deadline, "no fault injected in time");
        std::thread::sleep(Duration::from_millis(50));
    }
    let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
    assert!(nem.contains("docker pause"), "{nem}");
    let run_label = format!(
        "label=fencecheck.run={}",
        docker_json(&out)["run_id"].as_str().expect("run_id")
    );
    let paused = Command::new("docker")
        .args([
            "ps",
            "--filter",
            &run_label,
            "--filter",
            "status=paused",
            "--format",
            "{{.Names}}",
        ])
        .output()
        .expect("docker ps");
    assert!(
        !String::from_utf8_lossy(&paused.stdout).trim().is_empty(),
        "expected a paused member container"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2));
    assert_run_left_nothing(&out, "after Ctrl-C");
    // The containers' output was saved before they were removed.
    for i in 0..3 {
        assert!(
            out.join(format!("etcd-{i}.log")).is_file(),
            "etcd-{i}.log not saved"
        );
    }
    // The storage log, written through the bind mount, stays readable.
    let log = std::fs::read_to_string(out.join("storage.jsonl")).expect("storage.jsonl");
    assert!(!log.is_empty());
}

#[test]
fn a_failed_etcd_start_is_exit_2_and_leaves_nothing() {
    if !docker_or_skip("failed_start_on_docker") {
        return;
    }
    let _g = serial();
    clean();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let o = bin()
        .args([
            "scenario",
            "scenarios/kill.toml",
            "--backend",
            "docker",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        // Test hook: a flag etcd does not know, so every member exits at once.
        .env("FENCECHECK_TEST_ETCD_EXTRA_ARGS", "--no-such-flag")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("did not start"), "{err}");
    assert!(err.contains("flag provided but not defined"), "{err}");
    assert_eq!(err.lines().count(), 1, "one-line reason: {err}");
    // Its output was saved before the container was removed.
    let log = std::fs::read_to_string(out.join("etcd-0.log")).expect("etcd-0.log");
    assert!(log.contains("no-such-flag"), "{log}");
    assert_run_left_nothing(&out, "after a failed start");
}

#[test]
fn etcd_3_4_runs_in_a_scratch_image_with_its_libraries() {
    if !docker_or_skip("etcd_3_4_on_docker") {
        return;
    }
    // Debian's etcd 3.4 is what the image packages; without it there is nothing to
    // package (the process-backend tests need it too, and ci/bootstrap.sh installs it).
    if fencecheck::systems::etcd::provision::find(fencecheck::scenario::EtcdVersion::V3_4).is_none()
    {
        let _ = writeln!(
            std::io::stderr(),
            "etcd_3_4_on_docker: skipped: no etcd 3.4 binary on this machine"
        );
        return;
    }
    let _g = serial();
    clean();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    // The scenario's own 20 s (three pauses): with one pause (10 s) a holder frozen
    // after its last write makes no stale write to refuse, and `stale_rejected > 0`
    // went unmet in a CI run.
    let (o, r) = run_docker("pause", &["--etcd", "3.4"], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(
        r["run"]["etcd_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.4.")),
        "{}",
        r["run"]
    );
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    let d = docker_json(&out);
    assert!(
        d["images"]["etcd"]["tag"]
            .as_str()
            .is_some_and(|t| t.starts_with("fencecheck/etcd:3.4.")),
        "{d}"
    );
    assert_run_left_nothing(&out, "after the etcd 3.4 run");
}

#[test]
fn a_partitioned_leader_is_cut_off_by_the_engine_and_rejoins() {
    if !docker_or_skip("partition_on_docker") {
        return;
    }
    let _g = serial();
    clean();
    let dir = tempfile::tempdir().expect("tmp");
    // No peer proxies on docker: the backend disconnects the leader from the peer
    // network for the fault's duration and connects it back.
    let scenario = dir.path().join("part-leader.toml");
    std::fs::write(
        &scenario,
        "name = \"part-leader\"\nduration = \"16s\"\nseed = 5\n\
         [cluster]\netcd_members = 3\n[lock]\nttl = \"3s\"\n\
         [workload]\nworkers = 3\nhold = \"0ms..300ms\"\n\
         [[fault]]\nkind = \"partition\"\ntarget = \"etcd-leader\"\nat = \"5s\"\nduration = \"4s\"\n\
         [expect]\nfencing_violations = 0\nlost_updates = 0\n",
    )
    .expect("write scenario");
    let out = dir.path().join("run");
    let o = bin()
        .arg("scenario")
        .arg(&scenario)
        .args(["--backend", "docker", "--quiet", "--out"])
        .arg(&out)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("report.json")).expect("report.json"),
    )
    .expect("report");
    let parts: Vec<&Value> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|w| w["kind"] == "partition")
        .collect();
    assert_eq!(parts.len(), 1, "{parts:#?}");
    assert_eq!(parts[0]["outcome"], "ok", "{parts:#?}");
    // The cut-off leader lost its followers: the others elected a new leader.
    let logs: String = (0..3)
        .map(|i| std::fs::read_to_string(out.join(format!("etcd-{i}.log"))).unwrap_or_default())
        .collect();
    assert!(
        logs.contains("lost leader"),
        "no leader change in the etcd logs"
    );
    assert_run_left_nothing(&out, "after the partition run");
}

#[test]
fn clean_removes_what_a_killed_run_left() {
    if !docker_or_skip("clean_on_docker") {
        return;
    }
    let _g = serial();
    // What a harness killed outright (SIGKILL) would leave: a labelled network and
    // volume (containers are covered by the runs above).
    let name = format!("fencecheck-testleft-{}", std::process::id());
    for args in [vec!["network", "create"], vec!["volume", "create"]] {
        let o = Command::new("docker")
            .args(&args)
            .args(["--label", "fencecheck.run=testleft", &name])
            .output()
            .expect("docker CLI");
        assert!(o.status.success(), "{o:?}");
    }
    assert!(leftovers_of("testleft").len() >= 2);
    let o = bin().arg("clean").output().expect("clean");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("network {name}")), "{text}");
    assert!(text.contains(&format!("volume {name}")), "{text}");
    let left = leftovers_of("testleft");
    assert!(
        left.is_empty(),
        "left behind after fencecheck clean: {left:#?}"
    );
}

/// Starts `pause.toml` on docker in the background and waits until it runs: the
/// workers have recorded events, so every container (the reaper first) is up.
/// The first run may build images (minutes on a cold cache), hence the long
/// deadline. Returns the child and the run's id.
fn start_pause_on_docker(out: &std::path::Path, extra: &[&str]) -> (std::process::Child, String) {
    let mut child = bin()
        .args(["scenario", "scenarios/pause.toml", "--backend", "docker"])
        .args(extra)
        .args(["--quiet", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let events = std::fs::read_to_string(out.join("worker-0.jsonl")).unwrap_or_default();
        if events.lines().count() >= 2 {
            break;
        }
        if let Some(s) = child.try_wait().expect("wait") {
            panic!("fencecheck exited ({s}) before its workers ran");
        }
        assert!(Instant::now() < deadline, "the run never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
    let run_id = docker_json(out)["run_id"]
        .as_str()
        .expect("run_id in docker.json")
        .to_string();
    (child, run_id)
}

/// `fencecheck clean` beside a run in progress (its reaper running) leaves that
/// run alone: the run passes, and removes its own objects at its end.
#[test]
fn clean_leaves_a_run_in_progress_alone() {
    if !docker_or_skip("clean_beside_a_run") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    // 12 s leave room for one pause; aimed (between the holder's read and its
    // write), that one pause is sure to make the stale write `pause.toml`
    // expects (a time-based one hits a holder between holds now and then: CI saw
    // it fail the run).
    let (mut child, id) = start_pause_on_docker(&out, &["--duration", "12s", "--aim"]);
    let o = bin().arg("clean").output().expect("clean");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("in progress") && text.contains(&id), "{text}");
    assert!(!leftovers_of(&id).is_empty(), "clean removed the live run");
    let status = child.wait().expect("wait");
    let report = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(0),
        "the run beside clean must pass: {report}"
    );
    assert_run_left_nothing(&out, "after the run beside clean");
}

#[test]
fn a_harness_killed_with_sigkill_leaves_nothing_within_30_s() {
    if !docker_or_skip("sigkill_on_docker") {
        return;
    }
    let _g = serial();
    // No `fencecheck clean` anywhere in this test: only this run's label is looked
    // at, and the run's reaper alone must remove it.
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (mut child, run_id) = start_pause_on_docker(&out, &[]);
    let before = leftovers_of(&run_id);
    for what in [
        "container fencecheck-",
        "network fencecheck-",
        "volume fencecheck-",
    ] {
        assert!(
            before.iter().any(|l| l.starts_with(what)),
            "expected a {what}… of run {run_id} while it runs: {before:#?}"
        );
    }
    assert!(
        before.iter().any(|l| l.ends_with("-reaper")),
        "no reaper container for run {run_id}: {before:#?}"
    );

    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status}"
    );
    let killed = Instant::now();
    loop {
        let left = leftovers_of(&run_id);
        if left.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "30 s after SIGKILL, run {run_id} still has: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = writeln!(
        std::io::stderr(),
        "sigkill_on_docker: run {run_id} gone {:.1} s after SIGKILL",
        killed.elapsed().as_secs_f64()
    );
}
