//! Aimed faults: a fault that fires on an event the harness sees instead of at
//! a time. A time-based schedule hits the moment that matters (a holder stopped
//! between its read and its write, a session ended while a write is in flight)
//! only by luck; the harness sees those moments in the workers' own records.
//!
//! The feed tails every worker's event file (`worker-N.jsonl`, flushed as each
//! event happens) every millisecond and broadcasts the events an aim can name.
//! An aimed injection is armed at its planned time and fires `offset` after the
//! first matching event seen from then on; if none comes while the fault would
//! still fit in the run, it is recorded as not done, with the reason.
//!
//! Aiming picks a moment, never a verdict: the checks judge from the service's
//! own order and the storage's, not from the records the feed reads.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::record::history::{Event, EventType, F};
use crate::scenario::{AimEvent, Target};

/// How often the worker files are read.
const POLL: Duration = Duration::from_millis(1);

/// One event an aim can fire on, as the worker recorded it.
#[derive(Debug, Clone, Serialize)]
pub struct Seen {
    pub event: AimEvent,
    pub worker: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<i64>,
    /// When the worker recorded it (`CLOCK_MONOTONIC`, as every event).
    pub time_ns: u64,
}

/// The event of a worker's record an aim can name, if it is one.
pub fn classify(e: &Event, worker: u32) -> Option<Seen> {
    let event = match (e.f, e.kind) {
        (F::Acquire, EventType::Ok) => AimEvent::Grant,
        (F::Acquire, EventType::Invoke) => AimEvent::Acquire,
        (F::Read, EventType::Ok) => AimEvent::Read,
        (F::Write, EventType::Invoke) => AimEvent::Write,
        _ => return None,
    };
    Some(Seen {
        event,
        worker,
        key: e.key.clone(),
        grant: e.grant,
        session: e.session,
        time_ns: e.time_ns,
    })
}

/// The fields a worker's events-file line names `event` by, as the worker
/// writes them (`"type":"ok","f":"read"`): what an agent armed in a worker pod
/// looks for (`backend::kubernetes::aim`). `None` for an event no line names.
pub fn needle(event: AimEvent) -> Option<String> {
    let (f, kind) = match event {
        AimEvent::Grant => (F::Acquire, EventType::Ok),
        AimEvent::Acquire => (F::Acquire, EventType::Invoke),
        AimEvent::Read => (F::Read, EventType::Ok),
        AimEvent::Write => (F::Write, EventType::Invoke),
        AimEvent::Renew => return None,
    };
    let kind = serde_json::to_string(&kind).ok()?;
    let f = serde_json::to_string(&f).ok()?;
    Some(format!("\"type\":{kind},\"f\":{f}"))
}

/// Does `seen` fit an aimed fault on `target`? A fault on one worker waits for
/// that worker's events; every other target takes anyone's.
pub fn fits(target: Target, seen: &Seen) -> bool {
    match target {
        Target::Worker(n) => seen.worker == n,
        _ => true,
    }
}

/// Is the event's worker the fault's victim? For the targets that name a
/// holder or a worker, the one whose event it was — except a waiter's acquire,
/// whose worker holds nothing: then the target is looked up as at a time.
pub fn names_victim(target: Target, seen: &Seen) -> bool {
    seen.event != AimEvent::Acquire
        && matches!(
            target,
            Target::Holder | Target::RandomWorker | Target::Worker(_) | Target::HolderToService
        )
}

pub struct Feed {
    tx: broadcast::Sender<Seen>,
    task: JoinHandle<()>,
}

impl Feed {
    /// Tails `files` (worker id, its event file); a file not there yet is
    /// looked for again on the next round.
    pub fn start(files: Vec<(u32, PathBuf)>) -> Feed {
        let (tx, _) = broadcast::channel(4096);
        let out = tx.clone();
        let task = tokio::spawn(async move {
            let mut tails: Vec<Tail> = files.into_iter().map(Tail::new).collect();
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                for t in &mut tails {
                    for seen in t.read_new() {
                        // Nobody listening is fine: no aimed fault is armed.
                        let _ = out.send(seen);
                    }
                }
            }
        });
        Feed { tx, task }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Seen> {
        self.tx.subscribe()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One worker file, read from where it was left; a partial last line waits.
struct Tail {
    worker: u32,
    path: PathBuf,
    file: Option<std::fs::File>,
    pos: u64,
    partial: Vec<u8>,
}

impl Tail {
    fn new((worker, path): (u32, PathBuf)) -> Tail {
        Tail {
            worker,
            path,
            file: None,
            pos: 0,
            partial: Vec::new(),
        }
    }

    fn read_new(&mut self) -> Vec<Seen> {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(f) = self.file.as_mut() else {
            return Vec::new();
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.pos)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.pos += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let lines: Vec<u8> = self.partial.drain(..=end).collect();
        lines
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice::<Event>(l).ok())
            .filter_map(|e| classify(&e, self.worker))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{EventWriter, Process};

    /// A hold's events, in the order a worker records them.
    const EVERY_EVENT: [(EventType, F); 6] = [
        (EventType::Invoke, F::Acquire),
        (EventType::Ok, F::Acquire),
        (EventType::Invoke, F::Read),
        (EventType::Ok, F::Read),
        (EventType::Invoke, F::Write),
        (EventType::Ok, F::Write),
    ];

    fn event(kind: EventType, f: F) -> Event {
        let mut e = Event::new(Process::Worker(1), kind, f);
        e.key = Some("k0".into());
        e.grant = Some(7);
        e.session = Some(99);
        e
    }

    #[test]
    fn the_feed_sees_what_a_worker_records_as_it_is_written() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("worker-1.jsonl");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let feed = Feed::start(vec![(1, path.clone())]);
            let mut rx = feed.subscribe();
            // The file appears after the feed started, as a worker's does.
            let mut w = EventWriter::create(&path).expect("writer");
            for (k, f) in EVERY_EVENT {
                w.write(&event(k, f)).expect("write");
            }
            let mut got = Vec::new();
            while got.len() < 4 {
                let s = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .expect("the feed answers within 5 s")
                    .expect("seen");
                got.push(s);
            }
            let names: Vec<&str> = got.iter().map(|s| s.event.as_str()).collect();
            assert_eq!(names, ["acquire", "grant", "read", "write"]);
            assert!(got
                .iter()
                .all(|s| s.worker == 1 && s.grant == Some(7) && s.session == Some(99)));
        });
    }

    #[test]
    fn each_needle_is_in_the_line_a_worker_writes_for_its_event_and_only_there() {
        for aimed in [
            AimEvent::Grant,
            AimEvent::Read,
            AimEvent::Write,
            AimEvent::Acquire,
        ] {
            let needle = needle(aimed).expect("a needle");
            for (kind, f) in EVERY_EVENT {
                let e = event(kind, f);
                let line = serde_json::to_string(&e).expect("json");
                let names = classify(&e, 1).is_some_and(|s| s.event == aimed);
                assert_eq!(line.contains(&needle), names, "{needle} in {line}");
            }
        }
        assert_eq!(needle(AimEvent::Renew), None);
    }

    #[test]
    fn a_fault_on_one_worker_waits_for_its_events_and_a_waiter_names_no_victim() {
        let seen = |event, worker| Seen {
            event,
            worker,
            key: None,
            grant: None,
            session: None,
            time_ns: 0,
        };
        assert!(fits(Target::Worker(2), &seen(AimEvent::Read, 2)));
        assert!(!fits(Target::Worker(2), &seen(AimEvent::Read, 1)));
        assert!(fits(Target::Leader, &seen(AimEvent::Grant, 0)));
        assert!(names_victim(Target::Holder, &seen(AimEvent::Read, 0)));
        assert!(!names_victim(Target::Holder, &seen(AimEvent::Acquire, 0)));
        assert!(!names_victim(Target::AllWorkers, &seen(AimEvent::Read, 0)));
        assert!(!names_victim(Target::Leader, &seen(AimEvent::Grant, 0)));
    }
}
