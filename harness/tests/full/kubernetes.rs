//! The Kubernetes Lease system end to end on the process backend: a real
//! kube-apiserver 1.20.2 (built by `ci/bootstrap.sh` from Debian's source) over a
//! real etcd, fencecheck's own elector on kube-rs, real faults, the verdicts the
//! shipped `k8s-lease-*` scenarios promise; and its bad input, refused before
//! anything starts.

use crate::common;

use common::*;
use serde_json::Value;

fn run_kept(name: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["run"]["service"], "kubernetes", "{name}");
    assert_eq!(r["run"]["service_version"], "1.20.2", "{}", r["run"]);
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    // Not an empty history: electors were granted the Lease and wrote under it.
    let h = history(&out);
    let grants = h
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .count();
    assert!(grants >= 4, "{name}: only {grants} grants");
    // The grant order is the apiserver's: every grant resolved to a holder change
    // the harness watched, with the resourceVersion of the acquiring write.
    assert_eq!(r["findings"]["observed"], true, "{name}");
    assert_eq!(
        n(&r["checks"]["token"]["unverified"]),
        0,
        "{name}: {}",
        r["checks"]["token"]
    );
    // The post-loss window is in every report of this system.
    assert!(
        r["findings"]["unsafe_window"]["post_loss"].is_object(),
        "{name}"
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("post-loss") || n(&r["findings"]["unsafe_window"]["holds"]) == 0,
        "{text}"
    );
    assert_nothing_left(&out);
    (dir, r)
}

#[test]
fn k8s_lease_pause_is_fenced_by_the_acquiring_resource_version() {
    let _g = serial();
    let (dir, r) = run_kept("k8s-lease-pause");
    let (accepted, rejected, _) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    // The woken leader's window: the Lease went to another identity while it
    // slept, and its writes after that were refused.
    let u = &r["findings"]["unsafe_window"];
    assert!(n(&u["holds"]) >= 1, "{u}");
    assert!(n(&u["writes_refused"]) >= 1, "{u}");
    let p = &u["post_loss"];
    assert_eq!(n(&p["told"]) + n(&p["untold"]), n(&u["holds"]), "{p}");
    // The run's TLS material and token were made into the run directory.
    let run = dir.path().join("run");
    for f in ["k8s-ca.crt", "k8s-serving.crt", "k8s-tokens.csv"] {
        assert!(run.join(f).is_file(), "{f}");
    }
    let html = std::fs::read_to_string(run.join("report.html")).expect("html");
    assert!(html.contains("id=\"post-loss\""));
}

#[test]
fn k8s_lease_no_fencing_finds_the_old_leaders_writes() {
    let _g = serial();
    let (_d, r) = run_kept("k8s-lease-no-fencing");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
    let v = &r["checks"]["fencing"]["violations"][0];
    assert!(
        v["stale"]["revision"].as_i64() < v["newer"]["revision"].as_i64(),
        "{v}"
    );
    // Those writes were the old leader's, after the Lease had moved on.
    assert!(n(&r["findings"]["unsafe_window"]["writes_accepted"]) >= 1);
}

#[test]
fn k8s_lease_partition_refuses_the_cut_off_leaders_writes() {
    let _g = serial();
    let (_d, r) = run_kept("k8s-lease-partition");
    let (accepted, rejected, _) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    let cuts = faults_of(&r, "partition");
    assert!(!cuts.is_empty(), "{}", r["faults"]);
}

#[test]
fn k8s_lease_apiserver_pause_stays_safe() {
    let _g = serial();
    let (_d, r) = run_kept("k8s-lease-apiserver-pause");
    assert_eq!(n(&r["checks"]["fencing"]["stale_accepted"]), 0);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_eq!(r["checks"]["linearizable"]["valid"], true);
    // The pause hit the apiserver's process (member 1), not an etcd member.
    let p = faults_of(&r, "pause");
    assert!(!p.is_empty(), "{}", r["faults"]);
}

#[test]
fn k8s_lease_transitions_token_is_judged_against_the_grant_order() {
    let _g = serial();
    let (_d, r) = run_kept("k8s-lease-transitions-token");
    let t = &r["checks"]["token"];
    // leaseTransitions rises with every change of holder while the Lease lives:
    // judged against the resourceVersions the harness watched, it neither went
    // backwards nor repeated (docs/lock-systems.md says when it does).
    assert!(n(&t["grants"]) >= 4, "{t}");
    assert_eq!(t["valid"], true, "{t}");
    assert_eq!(n(&r["checks"]["fencing"]["stale_accepted"]), 0);
    // The harness took the Lease away once (expire-session: a holder of its own).
    assert!(
        !faults_of(&r, "expire-session").is_empty(),
        "{}",
        r["faults"]
    );
}

#[test]
fn an_apiserver_that_exits_is_exit_2_naming_its_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let o = bin()
        .args(["scenario", "scenarios/k8s-lease-pause.toml", "--quiet"])
        .args(["--backend", "process", "--out"])
        .arg(&out)
        // Test hook: a flag the apiserver does not know, so it exits at once.
        .env("FENCECHECK_TEST_APISERVER_EXTRA_ARGS", "--no-such-flag")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("k8s-1.log") && err.contains("exited"), "{err}");
    let log = std::fs::read_to_string(out.join("k8s-1.log")).expect("log");
    assert!(log.contains("no-such-flag"), "{log}");
    assert_nothing_left(&out);
}

#[test]
fn bad_elector_timing_tokens_and_targets_are_exit_2_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let base = std::fs::read_to_string(repo_root().join("scenarios/k8s-lease-pause.toml"))
        .expect("scenario");
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "ttl = \"3s\"",
            "ttl = \"3s\"\nrenew_deadline = \"3s\"",
            "lock.renew_deadline",
            "not below",
        ),
        (
            "ttl = \"3s\"",
            "ttl = \"3s\"\nretry_period = \"1800ms\"",
            "lock.retry_period",
            "1.2",
        ),
        (
            "ttl = \"3s\"",
            "ttl = \"2500ms\"",
            "lock.ttl",
            "whole seconds",
        ),
        (
            "token = \"grant\"",
            "token = \"session\"",
            "storage.token",
            "transitions",
        ),
        (
            "members = 1",
            "members = 1\nversion = \"1.19\"",
            "cluster.version",
            "1.20",
        ),
        (
            "members = 1",
            "members = 1\nbackend = \"docker\"",
            "docker",
            "process",
        ),
        (
            "target = \"holder\"",
            "target = \"member:2\"",
            "member:2",
            "does not exist",
        ),
    ];
    for (i, (from, to, field, why)) in cases.iter().enumerate() {
        assert!(base.contains(from), "{from}");
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, base.replacen(from, to, 1)).expect("write");
        let o = bin().arg("validate").arg(&path).output().expect("validate");
        assert_eq!(o.status.code(), Some(2), "{to}: {}", explain(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let at = format!("bad{i}.toml:");
        assert!(
            err.contains(&at) && err.contains(field) && err.contains(why),
            "{to}: {err}"
        );
    }
}

/// The run's access token for the apiserver is on no command line (which every
/// user of the machine reads): the workers, alive and mentioning the run
/// directory on theirs, take it from their environment.
#[test]
fn the_access_token_is_on_no_command_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    interrupt_mid_fault(
        "k8s-lease-pause",
        &["--backend", "process"],
        &out,
        |procs| {
            let tokens =
                std::fs::read_to_string(out.join("k8s-tokens.csv")).expect("k8s-tokens.csv");
            let token = tokens.split(',').next().unwrap_or_default().trim();
            assert!(token.len() >= 16, "{tokens}");
            let workers: Vec<_> = procs
                .iter()
                .filter(|(_, _, cmd)| cmd.contains(" worker --config "))
                .collect();
            assert!(workers.len() >= 2, "no workers alive: {procs:?}");
            for (pid, _, cmd) in procs {
                assert!(!cmd.contains(token), "pid {pid}'s command line: {cmd}");
            }
            for (pid, _, _) in &workers {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                let env = String::from_utf8_lossy(&env);
                assert!(
                    env.contains("FENCECHECK_WORKER_ACCESS=") && env.contains(token),
                    "worker pid {pid} without its access in its environment"
                );
            }
        },
    );
}
