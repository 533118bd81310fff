//! The holds the workers themselves report, read from their own event files
//! (`worker-N.jsonl`, flushed as each event happens): for a library whose
//! owner value names no worker (a random id), the only way to learn who holds
//! a lock. A report is a lead, never the answer: the nemesis aims at it only
//! once the service confirms the grant (`LockService::holds`, in
//! [`super::target`]).

use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::record::history::{Event, EventType, F};
use crate::record::rundir;

/// A hold a worker's client reported and has not let go of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub worker: u32,
    /// The storage key the lock guards.
    pub key: String,
    /// The grant's identity in the service as the client said it (`entry`).
    pub entry: String,
    /// What the client said is stored there (`value`).
    pub value: Option<String>,
    pub session: Option<i64>,
    /// The worker's own number for the grant (its `handle`).
    pub grant: Option<i64>,
}

/// The current holds of `workers`, from their event files in `run_dir`; a file
/// not there yet (or unreadable) reports nothing.
pub fn current(run_dir: &Path, workers: &[u32]) -> Vec<Reported> {
    workers
        .iter()
        .filter_map(|&w| {
            let f = std::fs::File::open(rundir::worker_events(run_dir, w)).ok()?;
            let events = BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                // A partial last line (being written) is not an event yet.
                .filter_map(|l| serde_json::from_str::<Event>(&l).ok());
            hold_of(w, events)
        })
        .collect()
}

/// The last acquisition the client reported with an `entry`, unless a release
/// (asked for: the hold is ending), a session loss or a client error came
/// after it.
fn hold_of(worker: u32, events: impl Iterator<Item = Event>) -> Option<Reported> {
    let mut hold = None;
    for e in events {
        match (e.f, e.kind) {
            (F::Acquire, EventType::Ok) => hold = reported(worker, &e),
            (F::Release | F::KeepaliveLost | F::ClientError, _) => hold = None,
            _ => {}
        }
    }
    hold
}

fn reported(worker: u32, e: &Event) -> Option<Reported> {
    let c = e.detail.as_ref()?.get("client")?;
    let text = |f: &str| {
        c.get(f)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    Some(Reported {
        worker,
        key: e.key.clone()?,
        entry: text("entry")?,
        value: text("value"),
        session: e.session,
        grant: e.grant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{EventWriter, Process};

    fn event(kind: EventType, f: F, entry: Option<&str>) -> Event {
        let mut e = Event::new(Process::Worker(2), kind, f);
        e.key = Some("k0".into());
        e.session = Some(11);
        e.grant = Some(3);
        if let Some(entry) = entry {
            e.detail = Some(serde_json::json!({
                "client": { "handle": 3, "entry": entry, "value": "Zm9vYmFy" }
            }));
        }
        e
    }

    #[test]
    fn a_hold_is_the_last_reported_grant_not_let_go_of() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = rundir::worker_events(dir.path(), 2);
        let mut w = EventWriter::create(&path).expect("writer");
        assert!(current(dir.path(), &[2, 5]).is_empty(), "no file yet");
        w.write(&event(EventType::Invoke, F::Acquire, None))
            .expect("write");
        w.write(&event(EventType::Ok, F::Acquire, Some("lock:k0")))
            .expect("write");
        let held = current(dir.path(), &[2]);
        assert_eq!(
            held,
            [Reported {
                worker: 2,
                key: "k0".into(),
                entry: "lock:k0".into(),
                value: Some("Zm9vYmFy".into()),
                session: Some(11),
                grant: Some(3),
            }]
        );
        w.write(&event(EventType::Invoke, F::Release, None))
            .expect("write");
        assert!(current(dir.path(), &[2]).is_empty(), "released");
        // fencecheck's own clients report no entry: the service names them.
        w.write(&event(EventType::Ok, F::Acquire, None))
            .expect("write");
        assert!(current(dir.path(), &[2]).is_empty());
    }
}
