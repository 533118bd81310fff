//! Third-party lock libraries as their own READMEs use them — their own key
//! names and owner values, no renaming — end to end: the harness must observe
//! every grant the library made at the service, find the holder for every
//! planned fault, and agree with the adapter's own ground-truth log of the
//! critical sections it entered.

use std::collections::HashSet;
use std::path::Path;

use crate::common;

use common::*;
use serde_json::Value;

/// The lock ids the adapter logged entering a critical section with (its
/// `worker-<id>.client.log`): the line's last word after `marker`.
fn logged_entries(run_dir: &Path, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(run_dir).expect("run dir").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.ends_with(".client.log") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).expect("client log");
        for l in text.lines().filter(|l| l.contains(marker)) {
            out.push(l.rsplit(' ').next().expect("a word").to_string());
        }
    }
    out
}

/// (storage key, id) of every grant the harness observed (`service.jsonl`).
fn observed(run_dir: &Path) -> HashSet<(String, String)> {
    std::fs::read_to_string(run_dir.join("service.jsonl"))
        .expect("service.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("observation"))
        .filter(|o| o["what"] == "created")
        .map(|o| {
            let s = |f: &str| o[f].as_str().expect("text").to_string();
            (s("key"), s("id"))
        })
        .collect()
}

/// Runs `scenarios/clients/<name>.toml` and checks what a run on a library's
/// own keys and values must show; `marker` is the adapter's log line for a
/// critical-section entry, ending in the lock's value.
fn library(name: &str, marker: &str) {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(&format!("clients/{name}"), &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");

    // Every acquisition a client reported matches a grant the harness observed
    // at the service: the same storage key, the same value.
    let seen = observed(&out);
    let acquired: Vec<(String, String)> = history(&out)
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .map(|e| {
            let value = e["detail"]["client"]["value"].as_str().expect("value");
            (
                e["key"].as_str().expect("key").to_string(),
                value.to_string(),
            )
        })
        .collect();
    assert!(
        acquired.len() >= 5,
        "{name}: only {} grants",
        acquired.len()
    );
    let unmatched: Vec<_> = acquired.iter().filter(|a| !seen.contains(a)).collect();
    assert!(
        unmatched.is_empty(),
        "{name}: never observed: {unmatched:?}"
    );

    // Every planned fault was injected on a holder and confirmed.
    let pauses = fault_count(&r, "pause");
    assert!(n(&pauses["planned"]) >= 2, "{name}: {pauses}");
    assert_eq!(pauses["injected"], pauses["planned"], "{name}: {pauses}");
    assert_eq!(pauses["confirmed"], pauses["injected"], "{name}: {pauses}");
    assert_eq!(n(&pauses["skipped"]), 0, "{name}: {pauses}");

    // The counts agree with the adapter's own log: every grant reported was an
    // entry the library logged, every entry it logged was observed at the
    // service, and only a worker's last acquisition, answered as the run ended,
    // may be logged without being recorded.
    let entries = logged_entries(&out, marker);
    let logged: HashSet<&str> = entries.iter().map(String::as_str).collect();
    assert_eq!(logged.len(), entries.len(), "{name}: an id entered twice");
    for (_, v) in &acquired {
        assert!(
            logged.contains(v.as_str()),
            "{name}: {v} reported, never logged"
        );
    }
    let ids: HashSet<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    let unseen: Vec<_> = logged.iter().filter(|v| !ids.contains(*v)).collect();
    assert!(
        unseen.is_empty(),
        "{name}: entered, never observed: {unseen:?}"
    );
    let workers = 5;
    assert!(
        entries.len() >= acquired.len() && entries.len() <= acquired.len() + workers,
        "{name}: {} logged entries, {} recorded grants",
        entries.len(),
        acquired.len()
    );
    assert_nothing_left(&out);
}

/// python-redis-lock 4.0.1: key `lock:<name>`, a random id as the value.
#[test]
fn python_redis_lock_grants_are_observed_and_its_holder_found() {
    library("python-redis-lock-pause", "critical-section enter ");
}

/// redis-py's `Lock` on the owner value the worker hands it.
#[test]
fn redis_py_grants_are_observed_and_its_holder_found() {
    library("redis-py-pause", " with token ");
}

/// How a tooz driver's grant is told apart at the service: etcd3gw and redis
/// reuse one key for every grant (the value, tooz's uuid or redis-py's token,
/// tells them apart); zookeeper creates a new child each time (its path does).
#[derive(Clone, Copy, PartialEq)]
enum Ident {
    Value,
    Entry,
}

/// The (entry, value) pairs the tooz adapter logged entering a critical
/// section with (`critical-section enter <entry> <value>`).
fn tooz_logged(run_dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(run_dir).expect("run dir").flatten() {
        if !e.file_name().to_string_lossy().ends_with(".client.log") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).expect("client log");
        for l in text.lines() {
            let Some((_, rest)) = l.split_once("critical-section enter ") else {
                continue;
            };
            let (entry, value) = rest.rsplit_once(' ').expect("entry and value");
            out.push((entry.to_string(), value.to_string()));
        }
    }
    out
}

/// Runs `scenarios/clients/<name>.toml` (tooz 9.1.0, one driver) and checks what
/// a run on tooz's own keys and values must show: exit 0 (the scenario's
/// `[expect]` states what tooz does, `untold_holders` included), every reported
/// acquisition matched to a grant observed at the service, every planned pause
/// injected on a holder and confirmed, the counts equal to the adapter's own
/// log, and no session loss ever reported (tooz never tells).
fn tooz(name: &str, ident: Ident) {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(&format!("clients/{name}"), &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");

    let id_of = |o: &Value| match ident {
        Ident::Entry => o["id"].as_str().map(str::to_string),
        // etcd keeps the stored value beside the key; Redis's id is the value.
        Ident::Value => o["value"].as_str().or(o["id"].as_str()).map(str::to_string),
    };
    let seen: HashSet<(String, String)> = std::fs::read_to_string(out.join("service.jsonl"))
        .expect("service.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("observation"))
        .filter(|o| o["what"] == "created")
        .filter_map(|o| Some((o["key"].as_str()?.to_string(), id_of(&o)?)))
        .collect();
    let events = history(&out);
    let acquired: Vec<(String, String, String)> = events
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .map(|e| {
            let c = &e["detail"]["client"];
            let s = |v: &Value| v.as_str().expect("text").to_string();
            (s(&e["key"]), s(&c["entry"]), s(&c["value"]))
        })
        .collect();
    assert!(
        acquired.len() >= 5,
        "{name}: only {} grants",
        acquired.len()
    );
    let ident_of = |(_, entry, value): &(String, String, String)| match ident {
        Ident::Entry => entry.clone(),
        Ident::Value => value.clone(),
    };
    let unmatched: Vec<_> = acquired
        .iter()
        .filter(|a| !seen.contains(&(a.0.clone(), ident_of(a))))
        .collect();
    assert!(
        unmatched.is_empty(),
        "{name}: never observed: {unmatched:?}"
    );
    assert_eq!(
        r["checks"]["exclusion"]["phantom"], 0,
        "{name}: {}",
        r["checks"]["exclusion"]
    );

    let pauses = fault_count(&r, "pause");
    assert!(n(&pauses["planned"]) >= 2, "{name}: {pauses}");
    assert_eq!(pauses["injected"], pauses["planned"], "{name}: {pauses}");
    assert_eq!(pauses["confirmed"], pauses["injected"], "{name}: {pauses}");

    // Ground truth: every reported grant was logged by the adapter as entered,
    // with the same entry and value; every logged entry was observed; only a
    // worker's last acquisition, answered as the run ended, may be logged
    // without being recorded.
    let logged = tooz_logged(&out);
    let logged_set: HashSet<(String, String)> = logged.iter().cloned().collect();
    for (_, entry, value) in &acquired {
        assert!(
            logged_set.contains(&(entry.clone(), value.clone())),
            "{name}: {entry} {value} reported, never logged"
        );
    }
    let ids: HashSet<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    let unseen: Vec<_> = logged
        .iter()
        .filter(|(entry, value)| {
            let id = if ident == Ident::Entry { entry } else { value };
            !ids.contains(id.as_str())
        })
        .collect();
    assert!(
        unseen.is_empty(),
        "{name}: entered, never observed: {unseen:?}"
    );
    assert!(
        logged.len() >= acquired.len() && logged.len() <= acquired.len() + 5,
        "{name}: {} logged entries, {} recorded grants",
        logged.len(),
        acquired.len()
    );

    // tooz never told a holder: no session loss recorded, and the holders the
    // pauses outlived are counted as untold.
    assert!(
        !events.iter().any(|e| e["f"] == "keepalive-lost"),
        "{name}: a session loss was reported"
    );
    let untold = n(&r["findings"]["liveness"]["untold_holders"]);
    assert!(untold > 0, "{name}: {}", r["findings"]["liveness"]);
    assert_nothing_left(&out);
}

/// tooz's etcd3gw driver: key `/tooz/locks<name>`, a random uuid as the value,
/// fenced on the key's CreateRevision.
#[test]
fn tooz_etcd3gw_grants_are_observed_and_its_holder_found() {
    tooz("tooz-etcd3gw-pause", Ident::Value);
}

/// tooz's zookeeper driver (kazoo): a sequential child of the lock path,
/// fenced on its czxid.
#[test]
fn tooz_zookeeper_grants_are_observed_and_its_holder_found() {
    tooz("tooz-zookeeper-pause", Ident::Entry);
}

/// tooz's redis driver: key `_tooz_<name>_lock`, redis-py's random token as
/// the value.
#[test]
fn tooz_redis_grants_are_observed_and_its_holder_found() {
    tooz("tooz-redis-pause", Ident::Value);
}

/// The no-fencing twins: the same pause, nothing refuses the woken holder, who
/// was never told; the scenario's `[expect]` asks for the stale writes found.
fn tooz_no_fencing(name: &str) {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(&format!("clients/{name}"), &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert!(
        n(&r["checks"]["fencing"]["stale_accepted"]) > 0,
        "{name}: {}",
        r["checks"]["fencing"]
    );
    assert_eq!(r["checks"]["exclusion"]["phantom"], 0, "{name}");
    assert!(
        n(&r["findings"]["liveness"]["untold_holders"]) > 0,
        "{name}"
    );
    assert_nothing_left(&out);
}

#[test]
fn tooz_etcd3gw_without_a_fence_lets_the_untold_holder_write() {
    tooz_no_fencing("tooz-etcd3gw-no-fencing");
}

#[test]
fn tooz_zookeeper_without_a_fence_lets_the_untold_holder_write() {
    tooz_no_fencing("tooz-zookeeper-no-fencing");
}

/// The zoo: tooz 9.1.0's etcd3gw heartbeat finds the lease gone and tells no
/// one. The scenario requires every holder whose session ended to be told
/// (`untold_holders = 0`) and FAILs on that expectation alone; each untold
/// holder is one the adapter's log shows entering its critical section and
/// never hearing of the loss.
#[test]
fn tooz_etcd3gw_never_tells_its_holder_the_lease_is_gone() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("clients/tooz-etcd3gw-untold", &[], &out);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert!(r["inconclusive"].is_null(), "{}", r["inconclusive"]);
    let unmet: Vec<&str> = r["expectations"]
        .as_array()
        .expect("expectations")
        .iter()
        .filter(|e| e["met"] == false)
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(unmet, ["untold_holders"], "{}", r["expectations"]);
    let l = &r["findings"]["liveness"];
    assert!(n(&l["untold_holders"]) > 0, "{l}");
    let logged = tooz_logged(&out);
    let events = history(&out);
    assert!(!events.iter().any(|e| e["f"] == "keepalive-lost"));
    for u in l["untold"].as_array().expect("untold") {
        // The untold hold was one the library entered (its grant's value was
        // logged as entered by that worker's adapter).
        let w = n(&u["worker"]);
        let start = n(&u["hold_start_ns"]);
        let grant = events
            .iter()
            .find(|e| {
                e["f"] == "acquire"
                    && e["type"] == "ok"
                    && e["process"] == w
                    && e["time_ns"].as_u64() == Some(start)
            })
            .unwrap_or_else(|| panic!("no acquisition for {u}"));
        let value = grant["detail"]["client"]["value"].as_str().expect("value");
        assert!(
            logged.iter().any(|(_, v)| v == value),
            "{value} untold, never logged as entered"
        );
        assert!(n(&u["session_ended_ns"]) <= n(&u["hold_end_ns"]), "{u}");
    }
    // The adapter's log shows what tooz's heartbeat saw: the lease gone while
    // `lock.acquired` was True.
    let gone = std::fs::read_dir(&out)
        .expect("run dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".client.log"))
        .map(|e| std::fs::read_to_string(e.path()).expect("client log"))
        .any(|t| t.contains("while lock.acquired is True"));
    assert!(gone, "no adapter logged a lease gone while acquired");
    assert_nothing_left(&out);
}

/// The twin: tooz's redis driver with `is_still_owner()` checked tells its
/// holder; the same pause passes `untold_holders = 0`.
#[test]
fn tooz_redis_checking_is_still_owner_tells_its_holder() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("clients/tooz-redis-told", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(
        n(&r["findings"]["unsafe_window"]["holds"]) > 0,
        "no hold outlived its session: nothing was tested"
    );
    assert_eq!(n(&r["findings"]["liveness"]["untold_holders"]), 0);
    assert!(history(&out).iter().any(|e| e["f"] == "keepalive-lost"));
    assert_nothing_left(&out);
}
