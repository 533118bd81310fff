//! The holds the workers themselves report, read from their own event files
//! (`worker-N.jsonl`, flushed as each event happens): for a library whose
//! owner value names no worker (a random id), the only way to learn who holds
//! a lock. A report is a lead, never the answer: the nemesis aims at it only
//! once the service confirms the grant (`LockService::holds`, in
//! [`super::target`]).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
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

/// The workers' event files as read so far: each file's next offset and the
/// hold as of there. The nemesis polls while it looks for a holder (every 25 ms,
/// up to 2 s per fault); each poll reads only what was appended since the last,
/// not the whole file again (a soak's files grow to megabytes).
#[derive(Debug, Default)]
pub struct Follow {
    read: HashMap<u32, (u64, Option<Reported>)>,
}

impl Follow {
    /// The current holds of `workers`, from their event files in `run_dir`; a
    /// file not there yet (or unreadable) reports nothing.
    pub fn current(&mut self, run_dir: &Path, workers: &[u32]) -> Vec<Reported> {
        workers
            .iter()
            .filter_map(|&w| {
                let (at, hold) = self.read.entry(w).or_default();
                read_on(&rundir::worker_events(run_dir, w), w, at, hold);
                hold.clone()
            })
            .collect()
    }
}

/// Reads whole lines from `at` on, advancing `at` past each and `hold` by each
/// event. A partial last line (being written) is left for the next read.
fn read_on(path: &Path, worker: u32, at: &mut u64, hold: &mut Option<Reported>) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    // A file shorter than what was read was written anew: read it from the start.
    if f.metadata().map(|m| m.len() < *at).unwrap_or(false) {
        (*at, *hold) = (0, None);
    }
    if f.seek(SeekFrom::Start(*at)).is_err() {
        return;
    }
    let mut r = BufReader::new(f);
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(n) if n > 0 && line.ends_with('\n') => *at += n as u64,
            _ => return,
        }
        if let Ok(e) = serde_json::from_str::<Event>(&line) {
            apply(worker, &e, hold);
        }
    }
}

/// The hold after event `e`: the last acquisition the client reported with an
/// `entry`, unless a release (asked for: the hold is ending), a session loss or
/// a client error came after it.
fn apply(worker: u32, e: &Event, hold: &mut Option<Reported>) {
    match (e.f, e.kind) {
        (F::Acquire, EventType::Ok) => *hold = reported(worker, e),
        (F::Release | F::KeepaliveLost | F::ClientError, _) => *hold = None,
        _ => {}
    }
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
        let mut follow = Follow::default();
        let mut current = |ws: &[u32]| follow.current(dir.path(), ws);
        assert!(current(&[2, 5]).is_empty(), "no file yet");
        w.write(&event(EventType::Invoke, F::Acquire, None))
            .expect("write");
        w.write(&event(EventType::Ok, F::Acquire, Some("lock:k0")))
            .expect("write");
        let held = current(&[2]);
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
        assert!(current(&[2]).is_empty(), "released");
        // fencecheck's own clients report no entry: the service names them.
        w.write(&event(EventType::Ok, F::Acquire, None))
            .expect("write");
        assert!(current(&[2]).is_empty());
    }
}
