//! From a run directory's recorded files to a [`Report`]: merge the per-process
//! event files into `history.jsonl`, read `storage.jsonl`, run every checker,
//! judge the expectations, and write `report.json` and `report.html`. The live run ends by calling
//! exactly this, and so does `fencecheck check RUN_DIR`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fencecheck_reports::{
    Latency, Notice, OpMark, Report, RunInfo, Stats, Timeline, SCHEMA_VERSION,
};
use fencecheck_storage::LogRecord;

use crate::check::{self, Recorded};
use crate::record::history::{self, Event, EventType, F};
use crate::scenario::Scenario;

use crate::record::before::KeyBefore;
use crate::record::observe::Observation;
use crate::record::rundir::{HISTORY, RUN_INFO, SCENARIO, SERVICE_OBSERVATIONS, STORAGE_LOG};

/// The per-process event files of a run (`worker-*.jsonl`, `nemesis.jsonl`).
pub fn event_files(run_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .with_context(|| format!("cannot read run directory {}", run_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            crate::record::rundir::is_event_file(name)
        })
        .collect();
    out.sort();
    Ok(out)
}

pub fn write_run_info(run_dir: &Path, info: &RunInfo) -> Result<()> {
    let text = serde_json::to_string_pretty(info)?;
    std::fs::write(run_dir.join(RUN_INFO), text + "\n")?;
    Ok(())
}

/// Loads everything recorded in `run_dir` and produces the report (also written to
/// `report.json` and `report.html`).
pub fn assess(run_dir: &Path) -> Result<Report> {
    let info: RunInfo = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join(RUN_INFO)).with_context(|| {
            format!(
                "{} is not a fencecheck run directory (no {RUN_INFO})",
                run_dir.display()
            )
        })?,
    )
    .with_context(|| format!("{}: unreadable", run_dir.join(RUN_INFO).display()))?;
    let scenario = Scenario::load_recorded(&run_dir.join(SCENARIO))?;
    let storage_log = scenario.storage.kind.has_log();
    let (mut rec, mut problems) = load(run_dir, storage_log)?;
    rec.end_ns = Some(info.time_end_ns);
    // Clients of a system that does not number its grants cannot know a grant's
    // place: put the grants in the order the harness observed before anything
    // judges by it. External clients' grants likewise: their entries are
    // matched to the creations the harness observed.
    let numbered = crate::systems::system(scenario.lock.service).numbers_grants_itself();
    if !numbered || scenario.client.is_some() {
        problems.extend(check::resolve::resolve(&mut rec));
    }
    let client_errors = client_errors(&rec.events);

    let mut checks = check::run_all(&rec, scenario.storage.fencing, storage_log);
    let mut findings = check::findings::check(&rec, storage_log);
    if checks.judged_from.is_some() {
        // Judged from the client side: say so wherever a count is only a floor.
        use fencecheck_reports::descriptor::{COUNTER, FENCING, UNSAFE_WINDOW};
        checks.fencing.lower_bound = no_log(&FENCING);
        checks.counter.lower_bound = no_log(&COUNTER);
        if findings.observed {
            findings.unsafe_window.lower_bound = no_log(&UNSAFE_WINDOW);
        }
    }
    let keepalive_lost = check::keepalive_lost(&rec.events);
    let expectations = check::evaluate(&scenario.expect, &checks, &findings, keepalive_lost);
    let incomplete = incomplete(&rec, scenario.workload.keys);
    let before = storage_before(run_dir)?;
    let before_empty = before.is_empty();
    // First, so the terminal's few notes show them.
    problems.splice(0..0, client_errors.1);
    problems.splice(0..0, before);
    let storage_ops = if storage_log {
        rec.storage.iter().any(|r| r.request.client != "final")
    } else {
        // No log: the workers' own record of served reads and answered writes.
        rec.events.iter().any(|e| {
            e.process.worker().is_some()
                && matches!(e.f, F::Read | F::Write)
                && matches!(e.kind, EventType::Ok | EventType::Fail)
        })
    };
    let untested = rec.events.iter().all(|e| e.process.worker().is_none()) || !storage_ops;
    // Every fault confirmed or not, from the record.
    let mut faults = rec.faults.clone();
    let fault_counts = check::faults::confirm(
        &mut faults,
        &info.schedule,
        rec.observations.as_deref(),
        incomplete.is_some(),
    );
    // What the run did not test: a lock client that broke the protocol or a
    // run that recorded nothing (quoting the adapters' own last words), a
    // lock never observed, a planned fault not injected or not confirmed.
    let mut coverage = Vec::new();
    let last_words = if scenario.client.is_some() && (client_errors.0 > 0 || untested) {
        adapter_last_words(run_dir)
    } else {
        Vec::new()
    };
    if client_errors.0 > 0 {
        coverage.push(format!(
            "{} lock client(s) broke the protocol, so the run did not test the lock{}",
            client_errors.0,
            words_clause(&last_words)
        ));
    }
    if untested {
        let why = "the run recorded no worker operations: nothing was tested";
        problems.push(why.into());
        if client_errors.0 == 0 {
            coverage.push(format!("{why}{}", words_clause(&last_words)));
        }
    }
    if !untested && client_errors.0 == 0 {
        coverage.extend(check::coverage::gaps(
            &scenario.expect,
            checks.exclusion.as_ref(),
            rec.events
                .iter()
                .filter(|e| {
                    e.process.worker().is_some() && (e.f, e.kind) == (F::Acquire, EventType::Ok)
                })
                .count() as u64,
            &fault_counts,
        ));
    }
    // A run that recorded nothing proves nothing, and a run that never reached its
    // end proves only part: neither passes. Nor does a run that began on a
    // storage holding data: its counts start from values the run did not write.
    // Nor one with a coverage gap.
    let mut passed = expectations.iter().all(|e| e.met)
        && incomplete.is_none()
        && before_empty
        && coverage.is_empty();
    // A run that needed a finding and whose faults all failed to take effect
    // is inconclusive, and so is a run with a coverage gap — unless it failed
    // for a reason of its own (a problem above, or an expectation that asks
    // for no finding).
    let needs = scenario.expect.needs_finding();
    let failed_otherwise = incomplete.is_some()
        || !before_empty
        || expectations.iter().any(|e| {
            !e.met
                && !needs
                    .iter()
                    .any(|n| n.split(' ').next() == Some(e.name.as_str()))
        });
    let inconclusive = if failed_otherwise {
        None
    } else {
        check::faults::inconclusive(&needs, &fault_counts)
            .or_else(|| (!coverage.is_empty()).then(|| coverage.join("; ")))
    };
    if inconclusive.is_some() {
        passed = false;
    }
    let report = Report {
        schema_version: SCHEMA_VERSION,
        fencecheck_version: env!("CARGO_PKG_VERSION").to_string(),
        run: info,
        passed,
        incomplete,
        inconclusive,
        coverage,
        expectations,
        checks,
        faults,
        fault_counts,
        findings,
        stats: stats(&rec.events),
        problems,
    };
    report.write_json(run_dir)?;
    fencecheck_reports::write_html(run_dir, &report, &timeline(&rec))?;
    Ok(report)
}

/// Why a check's counts are a lower bound without a storage log: its
/// descriptor's rule, which the terminal, report.json and report.html give.
fn no_log(d: &fencecheck_reports::Descriptor) -> Option<String> {
    d.lower_bound.map(|l| l.no_log.to_string())
}

/// What the storage held before the run, as the pre-run probe read it
/// (`storage-before.json`: one entry per workload key). Absent for storages the
/// harness starts itself, which start empty.
pub use crate::record::rundir::STORAGE_BEFORE;

/// Problems for every key the storage already held before the run (empty when
/// it held none, or was not probed).
fn storage_before(run_dir: &Path) -> Result<Vec<String>> {
    let path = run_dir.join(STORAGE_BEFORE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let keys: Vec<KeyBefore> = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{}: unreadable", path.display()))?;
    Ok(keys
        .iter()
        .filter(|k| k.value.is_some() || k.token.is_some())
        .map(|k| {
            let show = |v: Option<i64>| v.map_or("none".to_string(), |v| v.to_string());
            format!(
                "storage not empty before the run: {} held value {}, token {} \
                 (the checks count from an empty storage; clear it and run again)",
                k.key,
                show(k.value),
                show(k.token)
            )
        })
        .collect())
}

/// Each adapter's last words (`worker-<id>.client.log`, the adapter's own
/// stderr): `file:line: text`, in worker order.
fn adapter_last_words(run_dir: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(run_dir) else {
        return Vec::new();
    };
    let mut logs: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("worker-") && n.ends_with(".client.log"))
        })
        .collect();
    logs.sort();
    logs.iter()
        .filter_map(|p| {
            let text = std::fs::read(p).ok()?;
            let (line, words) = check::coverage::last_words(&String::from_utf8_lossy(&text))?;
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some(format!("{name}:{line}: {words}"))
        })
        .collect()
}

/// ": its last words: worker-0.client.log:12: …" (the first two adapters').
fn words_clause(words: &[String]) -> String {
    if words.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = words.iter().take(2).map(String::as_str).collect();
    format!(
        "; the adapter's last words: {}{}",
        shown.join(" | "),
        if words.len() > 2 {
            format!(" (and {} more logs)", words.len() - 2)
        } else {
            String::new()
        }
    )
}

/// Client errors (`client-error` events) as problem lines naming the worker and
/// the offending line; the count is of broken rules (`fail`), which fail the
/// run — unanswered requests (`info`) are listed but do not.
fn client_errors(events: &[Event]) -> (usize, Vec<String>) {
    let mut broken = 0;
    let mut lines = Vec::new();
    for e in events.iter().filter(|e| e.f == F::ClientError) {
        if e.kind == EventType::Fail {
            broken += 1;
        }
        let what = e.error.as_deref().unwrap_or("client error");
        let line = e
            .detail
            .as_ref()
            .and_then(|d| d.get("line"))
            .and_then(serde_json::Value::as_str)
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        let kind = if e.kind == EventType::Fail {
            "client error"
        } else {
            "client request unanswered"
        };
        lines.push(format!("{}: {kind}: {what}{line}", e.process));
    }
    (broken, lines)
}

/// Reads the recorded files: the per-process event files (the source of truth;
/// `history.jsonl` is rewritten as their merge — a run killed before merging still
/// has them), the storage log (when the storage keeps one: `storage_log`), and the
/// service observations. Torn or unreadable lines are problems, not errors.
pub fn load(run_dir: &Path, storage_log: bool) -> Result<(Recorded, Vec<String>)> {
    let files = event_files(run_dir)?;
    let (events, mut problems) = if files.is_empty() {
        history::read_jsonl::<Event>(&run_dir.join(HISTORY))
            .with_context(|| format!("no event files and no {HISTORY} in {}", run_dir.display()))?
    } else {
        let (evs, p) = history::merge(&files)?;
        history::write_history(&run_dir.join(HISTORY), &evs)?;
        (evs, p)
    };
    let storage_path = run_dir.join(STORAGE_LOG);
    let (storage, p) = if storage_path.exists() {
        history::read_jsonl::<LogRecord>(&storage_path)?
    } else if !storage_log {
        (Vec::new(), Vec::new())
    } else {
        (
            Vec::new(),
            vec![format!("{}: missing", storage_path.display())],
        )
    };
    problems.extend(p);
    let obs_path = run_dir.join(SERVICE_OBSERVATIONS);
    let observations = if obs_path.exists() {
        let (o, p) = history::read_jsonl::<Observation>(&obs_path)?;
        problems.extend(p);
        Some(o)
    } else {
        None
    };
    let mut rec = Recorded::new(events, storage);
    rec.observations = observations;
    Ok((rec, problems))
}

/// Why a run is incomplete, if it is: the heal phase ends with a final read of
/// every key; without all of them the run was killed or interrupted before its
/// end, and its verdict covers only part of it.
fn incomplete(rec: &Recorded, keys: u32) -> Option<String> {
    let finished = rec
        .events
        .iter()
        .filter(|e| e.f == F::FinalRead && e.kind != EventType::Invoke)
        .count();
    (finished < keys as usize).then(|| {
        format!(
            "incomplete: no heal phase, no final reads ({finished} of {keys} keys read); \
             the run was killed or interrupted, so its checks cover only what was recorded"
        )
    })
}

/// What the HTML timeline draws: every worker's operations (invoke to completion),
/// its lock holds, and its keepalive losses.
pub fn timeline(rec: &Recorded) -> Timeline {
    use std::collections::{BTreeSet, HashMap};
    let workers: BTreeSet<u32> = rec
        .events
        .iter()
        .filter_map(|e| e.process.worker())
        .collect();
    let mut tl = Timeline {
        workers: workers.into_iter().collect(),
        holds: crate::check::mutex::holds(rec),
        ..Timeline::default()
    };
    let mut open: HashMap<(u32, F), &Event> = HashMap::new();
    for e in &rec.events {
        let Some(w) = e.process.worker() else {
            continue;
        };
        if matches!(e.f, F::KeepaliveLost | F::ClientError) {
            tl.notices.push(Notice {
                worker: w,
                time_ns: e.time_ns,
                what: e.f.to_string(),
                detail: e.error.clone(),
            });
            continue;
        }
        if e.kind == EventType::Invoke {
            open.insert((w, e.f), e);
            continue;
        }
        let Some(inv) = open.remove(&(w, e.f)) else {
            continue;
        };
        let outcome = match (e.f, e.kind) {
            (_, EventType::Ok) => "ok",
            (F::Write, EventType::Fail)
                if e.error
                    .as_deref()
                    .is_some_and(|m| m.starts_with("rejected-stale")) =>
            {
                "rejected-stale"
            }
            (_, EventType::Fail) => "fail",
            _ => "unknown",
        };
        tl.ops.push(op_mark(w, inv, Some(e), outcome));
    }
    // Invoked, never completed (killed, or the run ended mid-call).
    for ((w, _), inv) in open {
        tl.ops.push(op_mark(w, inv, None, "unknown"));
    }
    tl.ops.sort_by_key(|o| (o.start_ns, o.worker));
    tl
}

fn op_mark(worker: u32, inv: &Event, done: Option<&Event>, outcome: &str) -> OpMark {
    OpMark {
        worker,
        f: inv.f.to_string(),
        start_ns: inv.time_ns,
        end_ns: done.map(|d| d.time_ns),
        outcome: outcome.to_string(),
        key: inv.key.clone(),
        // A read's value is what it returned; a write's is what it wrote.
        value: done.and_then(|d| d.value).or(inv.value),
        token: done.and_then(|d| d.token).or(inv.token),
        revision: done.and_then(|d| d.grant).or(inv.grant),
        request_id: inv.request_id,
        error: done.and_then(|d| d.error.clone()),
    }
}

/// Operation counts and latency percentiles (invoke → completion per process).
pub fn stats(events: &[Event]) -> Stats {
    use std::collections::hash_map::Entry;
    use std::collections::HashMap;
    let mut s = Stats {
        events: events.len() as u64,
        ..Stats::default()
    };
    let ops = [F::Acquire, F::Read, F::Write, F::Release];
    let mut hists: HashMap<F, hdrhistogram::Histogram<u64>> = HashMap::new();
    let mut open: HashMap<(String, F), u64> = HashMap::new();
    for e in events {
        if e.process.worker().is_some() {
            s.serialization_retries += e
                .detail
                .as_ref()
                .and_then(|d| d.get("retries"))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
        }
        match (e.f, e.kind) {
            (F::Acquire, EventType::Ok) => s.acquires_ok += 1,
            (F::Acquire, EventType::Fail) => s.acquires_failed += 1,
            (F::Read, EventType::Ok) => s.reads_ok += 1,
            (F::Write, EventType::Ok) => s.writes_ok += 1,
            (F::Write, EventType::Fail) => s.writes_rejected += 1,
            (F::Write, EventType::Info) => s.writes_unknown += 1,
            (F::KeepaliveLost, _) => s.keepalive_lost += 1,
            _ => {}
        }
        if !ops.contains(&e.f) || e.process.worker().is_none() {
            continue;
        }
        let k = (e.process.to_string(), e.f);
        if e.kind == EventType::Invoke {
            open.insert(k, e.time_ns);
        } else if let Some(t0) = open.remove(&k) {
            let us = e.time_ns.saturating_sub(t0) / 1_000;
            let h = match hists.entry(e.f) {
                Entry::Occupied(o) => o.into_mut(),
                // new(3) auto-resizes; it only fails for more than 5 significant figures.
                Entry::Vacant(v) => match hdrhistogram::Histogram::new(3) {
                    Ok(h) => v.insert(h),
                    Err(_) => continue,
                },
            };
            let _ = h.record(us.max(1));
        }
    }
    for f in ops {
        if let Some(h) = hists.get(&f) {
            s.latency.push(Latency {
                op: f.to_string(),
                count: h.len(),
                p50_us: h.value_at_quantile(0.5),
                p90_us: h.value_at_quantile(0.9),
                p99_us: h.value_at_quantile(0.99),
                p999_us: h.value_at_quantile(0.999),
                max_us: h.max(),
            });
        }
    }
    s
}
