//! Test inputs for the HTML report: real runs (a report.json and its history.jsonl,
//! copied from runs of `scenarios/no-fencing.toml` and `scenarios/contrib-lock.toml`)
//! turned into a `Timeline` the way the harness does, and a synthetic large run.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fencecheck_reports::{
    FaultWindow, Hold, Latency, Notice, OpMark, Report, Stats, Timeline, Validity,
};
use serde_json::Value;

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Loads `tests/data/NAME.report.json` and builds its timeline from
/// `NAME.history.jsonl`.
pub fn load(name: &str) -> (Report, Timeline) {
    let dir = data_dir();
    let report =
        Report::read_json(&dir.join(format!("{name}.report.json"))).expect("read report.json");
    let history = std::fs::read_to_string(dir.join(format!("{name}.history.jsonl")))
        .expect("read history.jsonl");
    let timeline = timeline_from_history(&report, &history);
    (report, timeline)
}

/// A history.jsonl → Timeline conversion good enough for tests: each worker has
/// one op in flight at a time; a hold runs from `acquire ok` to `release` invoke.
pub fn timeline_from_history(report: &Report, history: &str) -> Timeline {
    let mut tl = Timeline {
        workers: (0..report.run.workers).collect(),
        ..Timeline::default()
    };
    let mut open: HashMap<u32, OpMark> = HashMap::new();
    let mut holding: HashMap<u32, Hold> = HashMap::new();
    for line in history.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(w) = ev["process"].as_u64().map(|w| w as u32) else {
            continue; // the nemesis
        };
        let t = ev["time_ns"].as_u64().unwrap_or(0);
        let f = ev["f"].as_str().unwrap_or("").to_string();
        let ty = ev["type"].as_str().unwrap_or("");
        if f == "keepalive-lost" {
            tl.notices.push(Notice {
                worker: w,
                time_ns: t,
                what: f,
                detail: ev["error"].as_str().map(String::from),
            });
            continue;
        }
        if ty == "invoke" {
            if f == "release" {
                if let Some(mut h) = holding.remove(&w) {
                    h.end_ns = t;
                    h.released = true;
                    tl.holds.push(h);
                }
            }
            open.insert(
                w,
                OpMark {
                    worker: w,
                    f,
                    start_ns: t,
                    end_ns: None,
                    outcome: "unknown".into(),
                    key: ev["key"].as_str().map(String::from),
                    value: ev["value"].as_i64(),
                    token: ev["token"].as_i64(),
                    revision: ev["revision"].as_i64(),
                    request_id: ev["request_id"].as_u64(),
                    error: None,
                },
            );
            continue;
        }
        let Some(mut op) = open.remove(&w) else {
            continue;
        };
        op.end_ns = Some(t);
        let error = ev["error"].as_str().map(String::from);
        op.outcome = match ty {
            "ok" => "ok".into(),
            "fail"
                if error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("rejected-stale")) =>
            {
                "rejected-stale".into()
            }
            "fail" => "fail".into(),
            _ => "unknown".into(),
        };
        op.error = error;
        for (field, slot) in [
            ("value", &mut op.value),
            ("token", &mut op.token),
            ("revision", &mut op.revision),
        ] {
            if let Some(v) = ev[field].as_i64() {
                *slot = Some(v);
            }
        }
        if op.f == "acquire" && ty == "ok" {
            holding.insert(
                w,
                Hold {
                    worker: w,
                    key: op.key.clone().unwrap_or_default(),
                    revision: op.revision,
                    lease: ev["lease"].as_i64(),
                    start_ns: t,
                    end_ns: t,
                    released: false,
                },
            );
        }
        tl.ops.push(op);
    }
    tl.ops.extend(open.into_values());
    for (_, mut h) in holding {
        h.end_ns = report.run.time_end_ns;
        tl.holds.push(h);
    }
    tl
}

/// A large synthetic run: `workers` workers taking turns on one lock, ~`ops` ops in
/// all over `secs` seconds, with a pause fault every 5 s that produces a stale write
/// and a mutex overlap, so every kind of mark is on the page.
pub fn synthetic(workers: u32, ops: usize, secs: u64) -> (Report, Timeline) {
    let (mut report, _) = load("no-fencing");
    let origin = report.run.time_origin_ns;
    let end = origin + secs * 1_000_000_000;
    report.run.duration_s = secs as f64;
    report.run.time_end_ns = end;
    report.run.workers = workers;
    report.run.scenario = "synthetic".into();
    report.run.description = format!("{workers} workers, about {ops} ops, for benchmarks");
    let mut tl = Timeline {
        workers: (0..workers).collect(),
        ..Timeline::default()
    };
    // xorshift: deterministic without a rand dependency.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Every worker runs its own lock-free loop of short ops, so that the op count is
    // exact and every lane is busy (the real workload serializes on the lock).
    let per_worker = ops / workers as usize;
    let span = end - origin;
    let step = span / per_worker as u64;
    for w in 0..workers {
        let mut t = origin + rnd() % step;
        let mut rev = 10 + w as i64;
        for i in 0..per_worker {
            let f = match i % 5 {
                0 => "acquire",
                1 | 3 => "read",
                2 => "write",
                _ => "release",
            };
            let dur = match f {
                "acquire" => step / 2 + rnd() % (step / 2),
                _ => 300_000 + rnd() % 2_000_000,
            };
            let r = rnd() % 1000;
            let outcome = if r < 6 {
                "rejected-stale"
            } else if r < 9 {
                "fail"
            } else if r < 11 {
                "unknown"
            } else {
                "ok"
            };
            if f == "acquire" && outcome == "ok" {
                rev += workers as i64;
                tl.holds.push(Hold {
                    worker: w,
                    key: "k0".into(),
                    revision: Some(rev),
                    lease: Some(5_796_311_021_997_294_600 + w as i64),
                    start_ns: t + dur,
                    end_ns: (t + dur + 4 * step).min(end),
                    released: true,
                });
            }
            tl.ops.push(OpMark {
                worker: w,
                f: f.into(),
                start_ns: t,
                end_ns: if outcome == "unknown" && r == 10 {
                    None
                } else {
                    Some(t + dur)
                },
                outcome: outcome.into(),
                key: Some("k0".into()),
                value: Some(i as i64),
                token: Some(rev),
                revision: Some(rev),
                request_id: Some(i as u64),
                error: (outcome != "ok").then(|| format!("{outcome} (synthetic)")),
            });
            t += step.max(dur + 1000);
            if t >= end {
                break;
            }
        }
    }
    let mut faults = Vec::new();
    let mut id = 1;
    let mut at = origin + 5_000_000_000;
    while at + 3_000_000_000 < end {
        let victim = (id * 7) % workers;
        faults.push(FaultWindow {
            id,
            kind: if id % 3 == 0 { "revoke-lease" } else { "pause" }.into(),
            target: "holder".into(),
            start_ns: at,
            end_ns: Some(at + if id % 3 == 0 { 2_000_000 } else { 3_000_000_000 }),
            outcome: "ok".into(),
            detail: serde_json::json!({"action": "SIGSTOP", "victims": [
                {"worker": victim, "pid": 1000 + victim, "lease": 5_796_311_021_997_294_600u64, "revision": 40 + id}
            ]}),
            error: None,
            effect: None,
        });
        tl.notices.push(Notice {
            worker: victim,
            time_ns: at + 3_000_000_000,
            what: "keepalive-lost".into(),
            detail: Some("lease expired (keepalive answered TTL 0)".into()),
        });
        id += 1;
        at += 5_000_000_000;
    }
    report.faults = faults;
    // Reuse the real counterexamples' shapes, moved onto the synthetic lanes.
    for (i, v) in report.checks.fencing.violations.iter_mut().enumerate() {
        v.stale.worker = ((i as u32 * 3) % workers).to_string();
        v.newer.worker = ((i as u32 * 3 + 1) % workers).to_string();
    }
    report.stats = Stats {
        events: (ops * 2) as u64,
        latency: ["acquire", "read", "write", "release"]
            .iter()
            .map(|op| Latency {
                op: op.to_string(),
                count: (ops / 5) as u64,
                p50_us: 1_000,
                p90_us: 2_000,
                p99_us: 3_000,
                p999_us: 9_000,
                max_us: 20_000,
            })
            .collect(),
        ..Stats::default()
    };
    report.checks.fencing.valid = Validity::Invalid;
    (report, tl)
}
