//! Checkers: pure functions from the recorded files to verdicts. They never look at
//! live processes, so `fencecheck check RUN_DIR` and the live run agree by
//! construction.
//!
//! Each check is described once — its name, the question it answers, how it
//! fails, when its counts are a floor — in `fencecheck_reports::descriptor`
//! (one table in the reports crate, because report.html is rendered there and
//! that crate cannot read this one). A new check here is a file in this folder
//! plus its line in that table; `crate::descriptors` (a test beside the
//! renderers it reads) checks that every check that runs has exactly one.

pub mod counter;
pub mod coverage;
pub mod exclusion;
pub mod faults;
pub mod fencing;
pub mod findings;
pub mod linearizable;
pub mod liveness;
pub mod mutex;
pub mod observed;
pub mod resolve;
mod sessions;
pub mod token;

use fencecheck_reports::{Checks, Expectation, FaultWindow, JudgedFrom};
use fencecheck_storage::LogRecord;

use crate::record::history::{Event, EventType, Process, F};
use crate::scenario::Expect;

/// Everything the checkers read, loaded from a run directory.
pub struct Recorded {
    pub events: Vec<Event>,
    pub storage: Vec<LogRecord>,
    pub faults: Vec<FaultWindow>,
    /// What the harness observed of the lock service (`None` for runs written
    /// before it did).
    pub observations: Option<Vec<crate::record::observe::Observation>>,
    /// When the workers were told to stop (`run.json`'s `time_end_ns`): a wait
    /// or a free lock still open at the end of the record lasted until then.
    pub end_ns: Option<u64>,
}

impl Recorded {
    pub fn new(events: Vec<Event>, storage: Vec<LogRecord>) -> Recorded {
        let faults = fault_windows(&events);
        Recorded {
            events,
            storage,
            faults,
            observations: None,
            end_ns: None,
        }
    }

    /// Ids of the fault windows that overlap `[from, to]` (an open window counts as
    /// lasting to the end of the record).
    pub fn faults_between(&self, from: u64, to: u64) -> Vec<u32> {
        self.faults
            .iter()
            .filter(|w| w.start_ns <= to && w.end_ns.unwrap_or(u64::MAX) >= from)
            .map(|w| w.id)
            .collect()
    }
}

/// Pairs nemesis start (`invoke`) and end (`ok`/`fail`) events by `fault_id`.
pub fn fault_windows(events: &[Event]) -> Vec<FaultWindow> {
    let mut out: Vec<FaultWindow> = Vec::new();
    for e in events.iter().filter(|e| e.process == Process::nemesis()) {
        let Some(id) = e.fault_id else { continue };
        match e.kind {
            EventType::Invoke => out.push(FaultWindow {
                id,
                kind: e.f.to_string(),
                target: e.target.clone().unwrap_or_default(),
                start_ns: e.time_ns,
                end_ns: None,
                outcome: "open".into(),
                detail: e.detail.clone().unwrap_or(serde_json::Value::Null),
                error: e.error.clone(),
                effect: None,
            }),
            _ => {
                if let Some(w) = out
                    .iter_mut()
                    .rev()
                    .find(|w| w.id == id && w.end_ns.is_none())
                {
                    w.end_ns = Some(e.time_ns);
                    w.outcome = if e.kind == EventType::Ok {
                        "ok"
                    } else {
                        "fail"
                    }
                    .into();
                    if let Some(d) = &e.detail {
                        merge_json(&mut w.detail, d);
                    }
                    // The end's error says why it failed; a start's error (some
                    // targets failed) stays before it.
                    w.error = match (w.error.take(), &e.error) {
                        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                        (a, b) => a.or_else(|| b.clone()),
                    };
                }
            }
        }
    }
    out
}

fn merge_json(into: &mut serde_json::Value, from: &serde_json::Value) {
    match (into.as_object_mut(), from.as_object()) {
        (Some(a), Some(b)) => {
            for (k, v) in b {
                a.insert(k.clone(), v.clone());
            }
        }
        _ => *into = from.clone(),
    }
}

/// Every check. With a storage log (`storage_log`), fencing and the counter are
/// judged from the storage's own order; without one (a storage of the user's own),
/// from the client-observed history, and the report says what that gives up.
pub fn run_all(
    rec: &Recorded,
    storage_fencing: crate::scenario::Fencing,
    storage_log: bool,
) -> Checks {
    let (fencing, counter, judged_from) = if storage_log {
        (fencing::check(rec), counter::check(rec), None)
    } else {
        (
            observed::fencing(rec),
            observed::counter(rec),
            Some(JudgedFrom {
                source: "client-history".into(),
                weaker: observed::WEAKER.iter().map(|s| s.to_string()).collect(),
            }),
        )
    };
    Checks {
        fencing,
        mutex: mutex::check(rec),
        counter,
        linearizable: Some(linearizable::check(rec, storage_fencing)),
        token: Some(token::check(rec)),
        judged_from,
        exclusion: exclusion::check(rec),
    }
}

/// Compares the checks and findings with the scenario's `[expect]`, its unset
/// safety expectations judged by their defaults (`Expect::judge`).
pub fn evaluate(
    expect: &Expect,
    checks: &Checks,
    findings: &fencecheck_reports::Findings,
    keepalive_lost: u64,
) -> Vec<Expectation> {
    expect.judge(checks, findings, keepalive_lost)
}

/// Counts keepalive losses in the history.
pub fn keepalive_lost(events: &[Event]) -> u64 {
    events.iter().filter(|e| e.f == F::KeepaliveLost).count() as u64
}
