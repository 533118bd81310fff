//! The history: event types, the per-process writers, the merge, and a reader that
//! tolerates a torn last line.
//!
//! Every process (each worker, the nemesis) appends its own JSONL file and flushes
//! each event as it happens, so a kill loses nothing that was already done. After
//! the run the files are merged by `time_ns` (one host-wide `CLOCK_MONOTONIC`) into
//! `history.jsonl`, Jepsen-shaped so Knossos/Elle users can cross-check.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use fencecheck_storage::monotonic_ns;

use crate::scenario::FaultKind;

/// Who an event belongs to: a worker number, or a named actor (`"nemesis"`, `"final"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    Worker(u32),
    Named(String),
}

impl Process {
    pub fn nemesis() -> Process {
        Process::Named("nemesis".into())
    }
    pub fn worker(&self) -> Option<u32> {
        match self {
            Process::Worker(n) => Some(*n),
            Process::Named(_) => None,
        }
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Worker(n) => write!(f, "worker {n}"),
            Process::Named(s) => f.write_str(s),
        }
    }
}

/// Jepsen's completion types: `invoke` starts an operation; `ok` and `fail` end it
/// with a known outcome; `info` ends it with an unknown one (or is a notice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// What an event is about: a worker's operation, or a nemesis fault (`invoke`
/// when injected, `ok`/`fail` when healed / not done) of the scenario's own kinds.
/// Written as one kebab-case word either way (`"acquire"`, `"pause"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum F {
    Acquire,
    Release,
    Read,
    Write,
    KeepaliveLost,
    /// An external lock client broke the protocol (`fail`: the worker stopped it
    /// and ended) or left a request unanswered (`info`: unknown; restarted).
    ClientError,
    /// Nemesis faults, named as in the scenario.
    Fault(FaultKind),
    /// Heal phase: the final read of a key by a fresh client.
    FinalRead,
}

impl F {
    const OPS: [F; 7] = [
        F::Acquire,
        F::Release,
        F::Read,
        F::Write,
        F::KeepaliveLost,
        F::ClientError,
        F::FinalRead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            F::Acquire => "acquire",
            F::Release => "release",
            F::Read => "read",
            F::Write => "write",
            F::KeepaliveLost => "keepalive-lost",
            F::ClientError => "client-error",
            F::Fault(k) => k.as_str(),
            F::FinalRead => "final-read",
        }
    }
}

impl From<F> for String {
    fn from(f: F) -> String {
        f.as_str().to_string()
    }
}

impl TryFrom<String> for F {
    type Error = String;
    fn try_from(s: String) -> Result<F, String> {
        if let Some(op) = F::OPS.into_iter().find(|f| f.as_str() == s) {
            return Ok(op);
        }
        s.parse()
            .map(F::Fault)
            .map_err(|_| format!("unknown f {s:?}"))
    }
}

impl fmt::Display for F {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key of a fault's confirmed effect in its event's `detail`: the nemesis
/// writes it (`nemesis::effect`), assess reads it (`check::faults`). It is part
/// of the recorded format, so it lives here, below both.
pub const EFFECT_KEY: &str = "effect";

/// Puts `effect` into an event's detail (an object; anything else is replaced).
pub fn record_effect(
    detail: &mut Option<serde_json::Value>,
    effect: &fencecheck_reports::FaultEffect,
) {
    let value = serde_json::to_value(effect).unwrap_or(serde_json::Value::Null);
    match detail {
        Some(serde_json::Value::Object(m)) => {
            m.insert(EFFECT_KEY.into(), value);
        }
        _ => *detail = Some(serde_json::json!({ EFFECT_KEY: value })),
    }
}

/// One line of a history file. Optional fields are omitted when empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the merged history; 0 in the per-process files.
    #[serde(default)]
    pub index: u64,
    pub time_ns: u64,
    pub process: Process,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub f: F,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// The fencing token sent (depends on `[storage] token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    /// The lock grant's place in the service's own order (etcd: the lock key's
    /// CreateRevision; ZooKeeper: the lock znode's czxid). `revision` in 0.1 files.
    #[serde(default, alias = "revision", skip_serializing_if = "Option::is_none")]
    pub grant: Option<i64>,
    /// The session the event belongs to (etcd: lease ID; ZooKeeper: session id).
    /// `lease` in 0.1 files.
    #[serde(default, alias = "lease", skip_serializing_if = "Option::is_none")]
    pub session: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Storage request id, linking a client op to its `storage.jsonl` record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
    /// Nemesis: which fault occurrence (start and end share it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_id: Option<u32>,
    /// Nemesis: the target as written in the scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Nemesis: what was actually done (pids, workers, leases, revisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl Event {
    pub fn new(process: Process, kind: EventType, f: F) -> Event {
        Event {
            index: 0,
            time_ns: monotonic_ns(),
            process,
            kind,
            f,
            key: None,
            value: None,
            token: None,
            grant: None,
            session: None,
            error: None,
            request_id: None,
            fault_id: None,
            target: None,
            detail: None,
        }
    }
}

/// Appends events to one process's file, flushing each, so nothing recorded is lost
/// when the process is killed.
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    pub fn create(path: &Path) -> std::io::Result<EventWriter> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventWriter {
            out: BufWriter::new(f),
            path: path.to_path_buf(),
        })
    }

    /// Stamps nothing: the caller sets `time_ns` when the thing happened.
    pub fn write(&mut self, ev: &Event) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, ev)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a JSONL file of `T`. Unparseable lines are reported in the second value, not
/// fatal: a torn last line is what a killed writer leaves behind.
pub fn read_jsonl<T: for<'de> Deserialize<'de>>(
    path: &Path,
) -> std::io::Result<(Vec<T>, Vec<String>)> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let total = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<T>(line) {
            Ok(v) => out.push(v),
            Err(e) => {
                let what = if i + 1 == total && !text.ends_with('\n') {
                    "torn last line ignored"
                } else {
                    "unreadable line skipped"
                };
                problems.push(format!("{}:{}: {what} ({e})", path.display(), i + 1));
            }
        }
    }
    Ok((out, problems))
}

/// Merges per-process event files into one history in time order (ties keep each
/// file's own order) and numbers the events.
pub fn merge(files: &[PathBuf]) -> std::io::Result<(Vec<Event>, Vec<String>)> {
    let mut all: Vec<(u64, usize, usize, Event)> = Vec::new();
    let mut problems = Vec::new();
    for (fi, path) in files.iter().enumerate() {
        let (evs, p) = read_jsonl::<Event>(path)?;
        problems.extend(p);
        all.extend(
            evs.into_iter()
                .enumerate()
                .map(|(i, e)| (e.time_ns, fi, i, e)),
        );
    }
    all.sort_by_key(|(t, fi, i, _)| (*t, *fi, *i));
    let events = all
        .into_iter()
        .enumerate()
        .map(|(idx, (_, _, _, mut e))| {
            e.index = idx as u64;
            e
        })
        .collect();
    Ok((events, problems))
}

pub fn write_history(path: &Path, events: &[Event]) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for e in events {
        serde_json::to_writer(&mut out, e)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_shape_is_jepsen_like() {
        let mut e = Event::new(Process::Worker(3), EventType::Ok, F::Write);
        e.time_ns = 42;
        e.key = Some("k0".into());
        e.token = Some(7);
        let v = serde_json::to_value(&e).expect("json");
        assert_eq!(v["process"], 3);
        assert_eq!(v["type"], "ok");
        assert_eq!(v["f"], "write");
        assert!(v.get("session").is_none(), "empty fields are omitted");
        let n = Event::new(
            Process::nemesis(),
            EventType::Invoke,
            F::Fault(FaultKind::RevokeLease),
        );
        let v = serde_json::to_value(&n).expect("json");
        assert_eq!(v["process"], "nemesis");
        assert_eq!(v["f"], "revoke-lease");
    }

    #[test]
    fn merge_orders_by_time_and_tolerates_torn_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        let mut wa = EventWriter::create(&a).expect("a");
        let mut wb = EventWriter::create(&b).expect("b");
        for t in [10, 30] {
            let mut e = Event::new(Process::Worker(0), EventType::Invoke, F::Read);
            e.time_ns = t;
            wa.write(&e).expect("write");
        }
        let mut e = Event::new(Process::Worker(1), EventType::Invoke, F::Read);
        e.time_ns = 20;
        wb.write(&e).expect("write");
        drop(wb);
        // A writer killed mid-line.
        let mut f = OpenOptions::new().append(true).open(&b).expect("open");
        f.write_all(b"{\"index\":0,\"time_ns\":25,\"pro")
            .expect("torn");
        let (evs, problems) = merge(&[a, b]).expect("merge");
        let times: Vec<u64> = evs.iter().map(|e| e.time_ns).collect();
        assert_eq!(times, vec![10, 20, 30]);
        assert_eq!(evs[2].index, 2);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("torn last line"), "{problems:?}");
    }
}

#[cfg(test)]
mod f_tests {
    use super::*;

    #[test]
    fn every_f_reads_back_as_itself() {
        let faults = FaultKind::ALL.into_iter().map(F::Fault);
        for f in F::OPS.into_iter().chain(faults) {
            let v = serde_json::to_value(f).expect("json");
            assert_eq!(v, serde_json::json!(f.as_str()));
            assert_eq!(serde_json::from_value::<F>(v).expect("back"), f);
        }
        assert!(serde_json::from_str::<F>("\"paus\"").is_err());
    }
}
