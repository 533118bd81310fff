//! The shipped Redis and Redlock scenarios end to end on the process backend: real
//! `redis-server` instances (one, or three independent masters), real worker
//! processes, real faults, the verdicts the scenarios promise — judged by the
//! order of grants the harness observed, not by the counter under test.

use crate::common;

use common::*;
use serde_json::Value;

/// Runs a shipped scenario; the run directory lives as long as the returned guard.
fn run_kept(name: &str, service: &str) -> (tempfile::TempDir, Value) {
    run_kept_with(name, service, &[])
}

/// [`run_kept`] with extra command-line arguments.
fn run_kept_with(name: &str, service: &str, args: &[&str]) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, args, &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["run"]["service"], service, "{name}");
    assert!(
        r["run"]["service_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("7.0"),
        "{}",
        r["run"]
    );
    // Every grant a worker was told about was observed at the service.
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    assert_nothing_left(&out);
    (dir, r)
}

#[test]
fn redis_pause_is_fenced_by_the_counter() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-pause", "redis");
    let (accepted, rejected, fresh) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(fresh, 0, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_eq!(r["run"]["persistence"], "none");
    // Without a restart the counter is a fencing token in the observed order.
    assert_eq!(
        r["checks"]["token"]["valid"], true,
        "{}",
        r["checks"]["token"]
    );
    let u = &r["findings"]["unsafe_window"];
    assert!(n(&u["holds"]) >= 1, "{u}");
    assert_eq!(n(&u["writes_accepted"]), 0, "{u}");
}

#[test]
fn redis_no_fencing_accepts_stale_writes() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-no-fencing", "redis");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
}

#[test]
fn redis_restart_without_aof_hands_tokens_out_again() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-restart-no-aof", "redis");
    let (_, _, fresh) = fencing(&r);
    assert!(fresh >= 1, "{}", r["checks"]["fencing"]);
    // The token went backwards along the observed grants...
    let t = &r["checks"]["token"];
    assert_eq!(t["valid"], false, "{t}");
    assert!(n(&t["regressions"]) >= 1, "{t}");
    // ...after a restart: the first refused fresh write follows the first kill.
    let kills = faults_of(&r, "kill");
    assert!(!kills.is_empty(), "no kill recorded");
    let first_kill = kills
        .iter()
        .filter_map(|k| k["start_ns"].as_u64())
        .min()
        .expect("kill start");
    let first_fresh = r["checks"]["fencing"]["fresh_rejected_examples"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|w| w["time_ns"].as_u64()).min())
        .expect("a fresh-rejected example");
    assert!(
        first_fresh > first_kill,
        "fresh rejection before any restart"
    );
}

#[test]
fn redis_restart_with_aof_always_keeps_the_counter() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-restart-aof-always", "redis");
    assert_eq!(fencing(&r), (0, 0, 0), "{}", r["checks"]["fencing"]);
    assert_eq!(r["run"]["persistence"], "aof-always");
    assert!(faults_of(&r, "kill").len() >= 2, "{}", r["faults"]);
}

#[test]
fn redlock_without_a_token_accepts_stale_writes() {
    let _g = serial();
    let (_dir, r) = run_kept("redlock-pause-no-token", "redlock");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(r["run"]["etcd_members"], 3);
    // The report says there was no token to check.
    assert_eq!(
        r["checks"]["token"]["valid"], "unknown",
        "{}",
        r["checks"]["token"]
    );
}

/// How far a stepped member's clock was seen to move, through its own `TIME`
/// (one entry of a clock-jump's `detail.done`).
fn clock_moved_us(done: &Value) -> i64 {
    done["instance_time_after_us"].as_i64().expect("after")
        - done["instance_time_before_us"].as_i64().expect("before")
}

/// The mutex check's overlap examples that name one of these faults.
fn overlaps_linked(mutex: &Value, fault_ids: &[u64]) -> usize {
    mutex["examples"]
        .as_array()
        .expect("examples")
        .iter()
        .filter(|o| {
            o["faults"].as_array().is_some_and(|f| {
                f.iter()
                    .any(|id| id.as_u64().is_some_and(|id| fault_ids.contains(&id)))
            })
        })
        .count()
}

/// What `network.json` says each standing link did: every one refused the
/// connections its worker tried, and no byte crossed any.
fn assert_links_stayed_down(dir: &std::path::Path, want: &[(u64, u64)]) {
    let text = std::fs::read_to_string(dir.join("network.json")).expect("network.json");
    let v: Value = serde_json::from_str(&text).expect("json");
    let links = v["unreachable"].as_array().expect("unreachable");
    let got: Vec<(u64, u64)> = links
        .iter()
        .map(|l| (n(&l["worker"]), n(&l["member"])))
        .collect();
    assert_eq!(got, want, "{v}");
    for l in links {
        assert!(n(&l["connections_refused"]) >= 1, "never tried: {l}");
        assert_eq!(
            n(&l["bytes_crossed"]),
            0,
            "a standing link let bytes through: {l}"
        );
    }
}

/// Kleppmann's example as he wrote it, with one fault: each side of the workers
/// cut off from one master for the whole run (the network it is set in), so each
/// holder has a bare majority; one aimed step of member 0's clock, and a worker
/// of the other side gets a majority while the first still holds. No pause, no
/// kill; the report ties the overlap to the jump.
#[test]
fn redlock_clock_jump_gives_two_holders_with_one_fault() {
    let _g = serial();
    let (dir, r) = run_kept_with(
        "redlock-clock-jump",
        "redlock",
        &["--aim", "--aim-count", "1"],
    );
    assert_eq!(
        r["run"]["network"],
        "worker 0, 1 cannot reach member 2; worker 2, 3, 4 cannot reach member 1",
        "{}",
        r["run"]
    );
    assert_eq!(
        r["faults"].as_array().map(Vec::len),
        Some(1),
        "{}",
        r["faults"]
    );
    let jumps = faults_of(&r, "clock-jump");
    assert_eq!(jumps.len(), 1, "{}", r["faults"]);
    let j = jumps[0];
    assert_eq!(j["outcome"], "ok", "{j}");
    // The step was seen through the instance's own TIME, not assumed.
    let done = &j["detail"]["done"][0];
    assert!(clock_moved_us(done) >= 9_000_000, "{j}");
    assert_eq!(done["member"], 0, "{j}");
    let m = &r["checks"]["mutex"];
    let id = j["id"].as_u64().expect("fault id");
    assert!(
        overlaps_linked(m, &[id]) >= 1,
        "no overlap linked to the clock jump: {m}"
    );
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
    assert_links_stayed_down(
        &dir.path().join("run"),
        &[(0, 2), (1, 2), (2, 1), (3, 1), (4, 1)],
    );
}

/// The same network and no fault: both sides take the lock (a bare majority
/// each, member 0 in every one), and no two holds overlap — the overlaps above
/// are the clock jump's, not the network's.
#[test]
fn redlock_partial_network_alone_keeps_holders_apart() {
    let _g = serial();
    let (dir, r) = run_kept("redlock-partial-network", "redlock");
    assert!(
        r["faults"].as_array().is_some_and(Vec::is_empty),
        "{}",
        r["faults"]
    );
    let m = &r["checks"]["mutex"];
    assert_eq!(n(&m["overlaps"]), 0, "{m}");
    let run = dir.path().join("run");
    // Grants by each side, as the service's observer saw them ("<worker>:…").
    let service = std::fs::read_to_string(run.join("service.jsonl")).expect("service.jsonl");
    let granted_to: Vec<u64> = service
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["what"] == "created")
        .filter_map(|e| e["id"].as_str()?.split(':').next()?.parse().ok())
        .collect();
    assert!(granted_to.iter().any(|&w| w <= 1), "{granted_to:?}");
    assert!(granted_to.iter().any(|&w| w >= 2), "{granted_to:?}");
    assert_links_stayed_down(&run, &[(0, 2), (1, 2), (2, 1), (3, 1), (4, 1)]);
}

/// The same defect with one fault: aimed at a grant, one clock jump of two of the
/// three masters at once takes the new holder's key from a majority, and a second
/// client gets the lock while the first still holds it.
#[test]
fn redlock_majority_clock_jump_detects_with_one_aimed_fault() {
    let _g = serial();
    let (_dir, r) = run_kept_with(
        "redlock-majority-clock-jump",
        "redlock",
        &["--aim", "--aim-count", "1"],
    );
    let jumps = faults_of(&r, "clock-jump");
    assert_eq!(jumps.len(), 1, "one fault in the run: {}", r["faults"]);
    assert!(faults_of(&r, "pause").is_empty(), "{}", r["faults"]);
    assert!(faults_of(&r, "kill").is_empty(), "{}", r["faults"]);
    let j = &jumps[0];
    assert_eq!(j["outcome"], "ok", "{j}");
    // Two masters stepped, each seen through its own TIME.
    let done = j["detail"]["done"].as_array().expect("done");
    assert_eq!(done.len(), 2, "{j}");
    for d in done {
        assert!(clock_moved_us(d) >= 9_000_000, "{j}");
    }
    let m = &r["checks"]["mutex"];
    let id = j["id"].as_u64().expect("fault id");
    assert!(
        overlaps_linked(m, &[id]) >= 1,
        "no overlap linked to the clock jump: {m}"
    );
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
}

/// Redlock with the first master's counter as the token: ordered while that master
/// keeps it, so a monotonic storage refuses the woken holder.
#[test]
fn redlock_counter_from_the_first_master_fences() {
    let _g = serial();
    let (_dir, r) = run_kept("redlock-counter-pause", "redlock");
    let (accepted, rejected, fresh) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(fresh, 0, "{}", r["checks"]["fencing"]);
    assert_eq!(
        r["checks"]["token"]["valid"], true,
        "{}",
        r["checks"]["token"]
    );
}

/// The random owner value as a token: unique, not ordered; monotonic fencing
/// refuses fresh holders.
#[test]
fn redlock_owner_value_is_not_an_order() {
    let _g = serial();
    let (_dir, r) = run_kept("redlock-owner-token", "redlock");
    let (_, _, fresh) = fencing(&r);
    assert!(fresh >= 1, "{}", r["checks"]["fencing"]);
    let t = &r["checks"]["token"];
    assert_eq!(t["valid"], false, "{t}");
    assert!(n(&t["regressions"]) >= 1, "{t}");
}

/// clockshim itself, on a bare redis-server: a key set before the step is gone
/// right after it, one set after it lives its TTL, and TIME moved.
#[test]
fn clockshim_steps_a_redis_clock_and_expires_keys_early() {
    let shim = fencecheck::clockshim::path();
    assert!(
        shim.is_file(),
        "no {}: run ci/bootstrap.sh --fault clock-jump",
        shim.display()
    );
    let dir = tempfile::tempdir().expect("tmp");
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "0\n").expect("offset");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut child = std::process::Command::new("/usr/bin/redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .env("LD_PRELOAD", &shim)
        .env("CLOCKSHIM_OFFSET_FILE", &offset)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let res = rt.block_on(async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut c = loop {
            match client.get_multiplexed_tokio_connection().await {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        };
        let time = |c: &mut redis::aio::MultiplexedConnection| {
            let mut c = c.clone();
            async move {
                let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await?;
                Ok::<i64, redis::RedisError>(s * 1_000_000 + us)
            }
        };
        let before = time(&mut c).await?;
        let _: () = redis::cmd("SET")
            .arg("old")
            .arg("v")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut c)
            .await?;
        std::fs::write(&offset, "20000000000\n").expect("step");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let after = time(&mut c).await?;
        let old: Option<String> = redis::cmd("GET").arg("old").query_async(&mut c).await?;
        let _: () = redis::cmd("SET")
            .arg("new")
            .arg("v")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut c)
            .await?;
        let ttl: i64 = redis::cmd("PTTL").arg("new").query_async(&mut c).await?;
        Ok((before, after, old, ttl))
    });
    let _ = child.kill();
    let _ = child.wait();
    let (before, after, old, ttl) = res.expect("redis under clockshim");
    assert!(
        after - before >= 20_000_000,
        "TIME moved {} µs",
        after - before
    );
    assert_eq!(old, None, "a key set before the step outlived it");
    assert!(
        ttl > 9_000,
        "a key set after the step lost its TTL: {ttl} ms"
    );
}

/// Bad input is refused before anything starts, with exit 2 and file:line.
#[test]
fn bad_redis_scenarios_are_refused_with_file_and_line() {
    use fencecheck::scenario::Scenario;
    let cases = [
        // Redlock with one instance, and with an even number.
        (
            "name = \"x\"\n[cluster]\nmembers = 1\n[lock]\nservice = \"redlock\"\n",
            3,
            "odd number",
        ),
        (
            "name = \"x\"\n[cluster]\nmembers = 4\n[lock]\nservice = \"redlock\"\n",
            3,
            "expected 1, 3 or 5",
        ),
        // A persistence mode Redis does not have.
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\npersistence = \"rdb\"\n",
            4,
            "aof-always",
        ),
        // A token Redis has no way to give.
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\n[storage]\ntoken = \"grant\"\n",
            5,
            "counter",
        ),
        // Persistence on a service that is not Redis.
        (
            "name = \"x\"\n[lock]\nservice = \"etcd\"\npersistence = \"none\"\n",
            4,
            "redis, redlock",
        ),
        // A clock jump on a service whose clock fencecheck cannot step...
        (
            "name = \"x\"\n[[fault]]\nkind = \"clock-jump\"\ntarget = \"member:0\"\n\
             at = \"2s\"\nby = \"5s\"\n",
            3,
            "clockshim",
        ),
        // ...without saying how far, or on a worker.
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\n[storage]\ntoken = \"counter\"\n\
             [[fault]]\nkind = \"clock-jump\"\ntarget = \"member:0\"\nat = \"2s\"\n",
            7,
            "needs `by`",
        ),
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\n[storage]\ntoken = \"counter\"\n\
             [[fault]]\nkind = \"clock-jump\"\ntarget = \"holder\"\nat = \"2s\"\nby = \"1s\"\n",
            // A worker's clock is an elector's (kubernetes): the plan refuses it here.
            7,
            "kubernetes",
        ),
        // `by` on another fault.
        (
            "name = \"x\"\n[[fault]]\nkind = \"pause\"\nat = \"2s\"\nduration = \"1s\"\n\
             by = \"1s\"\n",
            6,
            "only with kind",
        ),
    ];
    for (text, line, says) in cases {
        // Parsed, then planned against the backend it names: a fault the system
        // cannot take is the plan's to refuse (before anything starts).
        let e = Scenario::parse(text, "bad.toml")
            .and_then(|s| fencecheck::plan::check(&s, s.cluster.backend))
            .expect_err(text);
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(e.to_string().contains(says), "{text}: {e}");
        assert!(
            e.to_string().starts_with(&format!("bad.toml:{line}:")),
            "{e}"
        );
    }
    // A clock jump on a backend that cannot step a clock (the docker backend runs
    // no clockshim): refused from the fault's declared availability.
    use fencecheck::plan::{available, Availability};
    use fencecheck::scenario::{BackendKind, FaultKind, ServiceKind, Target};
    for svc in [ServiceKind::Redis, ServiceKind::Redlock] {
        match available(
            svc,
            BackendKind::Docker,
            FaultKind::ClockJump,
            Target::Member(0),
        ) {
            Availability::No(why) => assert!(why.contains("not on docker"), "{why}"),
            Availability::Yes => panic!("clock-jump accepted on docker for {svc}"),
        }
        assert_eq!(
            available(
                svc,
                BackendKind::Process,
                FaultKind::ClockJump,
                Target::Member(0)
            ),
            Availability::Yes
        );
    }
    let dir = tempfile::tempdir().expect("tmp");
    // Through the binary: a clock jump on etcd, and on the docker backend (refused
    // at the fault line, or — while Redis has no docker deployment — at the
    // backend line): exit 2 with file:line either way.
    let etcd = dir.path().join("etcd-jump.toml");
    std::fs::write(&etcd, cases[5].0).expect("write");
    let o = bin().arg("validate").arg(&etcd).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("etcd-jump.toml:3") && err.contains("clock-jump"),
        "{err}"
    );
    let docker = dir.path().join("docker-jump.toml");
    std::fs::write(
        &docker,
        "name = \"x\"\n[cluster]\nbackend = \"docker\"\n[lock]\nservice = \"redis\"\n\
         [storage]\ntoken = \"counter\"\n[[fault]]\nkind = \"clock-jump\"\n\
         target = \"member:0\"\nat = \"2s\"\nby = \"5s\"\n",
    )
    .expect("write");
    let o = bin().arg("validate").arg(&docker).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("docker-jump.toml:9") || err.contains("docker-jump.toml:3"),
        "{err}"
    );
    let path = dir.path().join("even.toml");
    std::fs::write(&path, cases[1].0).expect("write");
    let o = bin().arg("scenario").arg(&path).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("even.toml:3"), "{err}");
}
