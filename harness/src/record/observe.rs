//! What the harness itself observes of the lock service during a run, through the
//! service's own change feed (etcd: a watch; ZooKeeper: persistent watches),
//! written to `service.jsonl` as it happens. It is the ground truth for the
//! findings (grant validity, unsafe window): when did the service create a lock
//! entry, delete it, end a session — never what a worker says.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// One line of `service.jsonl`. `time_ns` is the host's `CLOCK_MONOTONIC` when the
/// harness saw the change (shortly after the service made it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "kebab-case")]
pub enum Observation {
    /// A lock entry was created (etcd: a key under the lock prefix; ZooKeeper: a
    /// sequential child of the lock path): a waiter, holding once it is the oldest.
    Created {
        time_ns: u64,
        /// The storage key the lock guards.
        key: String,
        /// The entry's place in the service's order (CreateRevision, czxid).
        grant: i64,
        session: i64,
        id: String,
        /// The entry's value, when short text (python-etcd3's uuid): what an
        /// external client's `value` is matched against.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// A lock entry was deleted (released, or its session ended).
    Deleted {
        time_ns: u64,
        key: String,
        grant: i64,
        session: i64,
        id: String,
    },
    /// A worker session ended at the service (etcd: its lease expired or was
    /// revoked; ZooKeeper: the session expired or was closed).
    SessionEnded {
        time_ns: u64,
        session: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<u32>,
    },
    /// The observer lost its feed for a while (a member down): what it saw is
    /// complete only outside such gaps.
    Gap { time_ns: u64, error: String },
}

impl Observation {
    pub fn time_ns(&self) -> u64 {
        match self {
            Observation::Created { time_ns, .. }
            | Observation::Deleted { time_ns, .. }
            | Observation::SessionEnded { time_ns, .. }
            | Observation::Gap { time_ns, .. } => *time_ns,
        }
    }
}

/// Appends observations to `service.jsonl`, flushing each one; and says when the
/// observer's feed is up ([`ObservationWriter::ready`]).
#[derive(Clone)]
pub struct ObservationWriter {
    file: Arc<Mutex<BufWriter<File>>>,
    up: Arc<tokio::sync::watch::Sender<bool>>,
}

impl ObservationWriter {
    pub fn create(path: &Path) -> std::io::Result<ObservationWriter> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(ObservationWriter {
            file: Arc::new(Mutex::new(BufWriter::new(f))),
            up: Arc::new(tokio::sync::watch::channel(false).0),
        })
    }

    /// The observer's feed is up: every change the service makes from now on
    /// reaches it (etcd: its watch was created; the others: they watched, then
    /// read what was there). The run starts its workers only then: a grant made
    /// before the feed was up would be missing from the record and judged a
    /// phantom. A gap counts as up too: it is recorded, so the checks know.
    pub fn ready(&self) {
        self.up.send_replace(true);
    }

    /// Whether [`ObservationWriter::ready`] has been said, to wait on.
    pub fn readiness(&self) -> tokio::sync::watch::Receiver<bool> {
        self.up.subscribe()
    }

    pub fn write(&self, o: &Observation) {
        if matches!(o, Observation::Gap { .. }) {
            self.ready();
        }
        let Ok(mut w) = self.file.lock() else {
            tracing::error!("observation log lock poisoned");
            return;
        };
        let res = serde_json::to_writer(&mut *w, o)
            .map_err(std::io::Error::from)
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush());
        if let Err(e) = res {
            tracing::error!("cannot record an observation: {e}");
        }
    }
}

/// Records that the observer lost its feed (`error`), then waits a little — or
/// until `stop` — before the caller tries again.
pub async fn gap(
    out: &ObservationWriter,
    error: String,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    out.write(&Observation::Gap {
        time_ns: crate::record::history::monotonic_ns(),
        error,
    });
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        _ = stop.changed() => {}
    }
}

/// The owner value fencecheck's own key-value clients (Redis, Redlock) write
/// into a lock key, and the observer records as a creation's `id`:
/// `<worker>:<pid>:<session>:<nonce>`. The checks read the nonce from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerValue {
    pub worker: u32,
    pub pid: u32,
    pub session: i64,
    pub nonce: i64,
}

impl OwnerValue {
    pub fn parse(s: &str) -> Option<OwnerValue> {
        let mut it = s.split(':');
        let o = OwnerValue {
            worker: it.next()?.parse().ok()?,
            pid: it.next()?.parse().ok()?,
            session: it.next()?.parse().ok()?,
            nonce: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(o)
    }
}

impl std::fmt::Display for OwnerValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.worker, self.pid, self.session, self.nonce
        )
    }
}
