//! The lock-contending worker: a separate OS process (hidden `worker` subcommand), so
//! a SIGSTOP freezes it for real — its session keepalives included.
//!
//! Loop until the run ends: (re)open a session → acquire the lock (the client
//! reports the grant's place in the service's own order) → `ops_per_hold`
//! read-modify-write increments on the fenced resource, each request carrying the
//! token and the grant → release. The hold time is spread between each read and its
//! write (the think time of a read-modify-write), so a pause lands between a read and
//! the write that depends on it, as in the classic fencing diagram.
//!
//! The worker neither knows nor cares which lock service or resource runs: both sit
//! behind seams (`crate::systems::client`, `crate::resources`). What it records is here, in one
//! place: every call is an `invoke` and its completion (`ok`, `fail` when it surely
//! did not happen, `info` when it may have), Jepsen's way.
//!
//! A worker whose session is lost records it (`keepalive-lost`) and carries on with
//! the hold it is in, as a real, unaware client would: that is the bug being tested.
//! Only at its next acquisition does it notice, as `concurrency.Session.Done()`
//! would, and open a new session.
//!
//! A naive worker (`[workload] behaviour = "naive"`, Jepsen's 2020 lock-set client)
//! does not notice even then: it goes on acquiring under the lost session and opens
//! a new one only once an acquisition fails (etcd: `Lock` on a lease that is gone).
//! What its lock client trusts is the client's business (`crate::systems::etcd::client`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::record::history::{monotonic_ns, Event, EventType, EventWriter, Process, F};
use crate::resources::{FencedResource, Reach};
use crate::scenario::TokenMode;
use crate::systems::client::{Acquire, Behaviour, ClientConfig, Granted, LockClient};
use fencecheck_storage::{OpKind, Request, Verdict};

/// Everything a worker process needs, passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub id: u32,
    pub lock: ClientConfig,
    /// The fenced resource, as this worker reaches it (through its own proxy).
    pub resource: Reach,
    pub token: TokenMode,
    pub keys: u32,
    pub ops_per_hold: u32,
    pub hold_min_ms: u64,
    pub hold_max_ms: u64,
    pub seed: u64,
    pub events: PathBuf,
    /// `CLOCK_MONOTONIC` time at which to stop starting new holds.
    pub end_ns: u64,
}

type Log = Arc<Mutex<EventWriter>>;

fn record(log: &Log, ev: &Event) -> Result<()> {
    let mut w = log
        .lock()
        .map_err(|_| anyhow::anyhow!("event log lock poisoned"))?;
    w.write(ev)
        .context("cannot append to the worker's event file")
}

/// The session the worker holds locks under, with its loss flag.
struct Current {
    id: i64,
    lost: watch::Receiver<Option<String>>,
    /// Records the loss the moment the client reports it.
    recorder: tokio::task::JoinHandle<()>,
}

impl Current {
    fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        self.recorder.abort();
    }
}

struct Worker {
    cfg: WorkerConfig,
    me: Process,
    log: Log,
    lock: Box<dyn LockClient>,
    storage: Box<dyn FencedResource>,
    next_request: u64,
    client_error_recorded: bool,
}

enum HoldOutcome {
    Done,
    SessionGone,
    RunOver,
    Retry,
}

pub async fn run(cfg: WorkerConfig) -> Result<()> {
    let log = Arc::new(Mutex::new(EventWriter::create(&cfg.events)?));
    let lock = crate::systems::connect_client(&cfg.lock).await?;
    let storage = cfg.resource.open(Duration::from_secs(2))?;
    let mut w = Worker {
        me: Process::Worker(cfg.id),
        cfg,
        log,
        lock,
        storage,
        next_request: 0,
        client_error_recorded: false,
    };
    w.main_loop().await
}

impl Worker {
    async fn main_loop(&mut self) -> Result<()> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ (u64::from(self.cfg.id) << 32));
        let mut session: Option<Current> = None;
        while monotonic_ns() < self.cfg.end_ns {
            if self.client_broke()? {
                break;
            }
            // The loss is recorded as it happens either way; only the careful
            // worker acts on it here.
            let careful = self.cfg.lock.behaviour == Behaviour::Careful;
            if session.as_ref().is_none_or(|s| careful && s.is_lost()) {
                session = None;
                match self.open_session().await {
                    Ok(s) => session = Some(s),
                    Err(e) => {
                        tracing::warn!("opening a session failed: {e:#}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let Some(s) = session.as_ref() else { continue };
            let sid = s.id;
            let key = format!("k{}", rng.gen_range(0..self.cfg.keys));
            let hold_ms = rng.gen_range(self.cfg.hold_min_ms..=self.cfg.hold_max_ms);
            match self.hold(&key, sid, hold_ms).await? {
                HoldOutcome::Done => {}
                HoldOutcome::SessionGone => session = None,
                HoldOutcome::RunOver => break,
                HoldOutcome::Retry => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        drop(session);
        // Recorded before `close`, which may itself wait for an unanswering client.
        self.client_broke()?;
        self.lock.close_session().await;
        self.client_broke()?;
        Ok(())
    }

    /// Records what an external client did wrong since the last look: requests
    /// it left unanswered (`info`), and a broken rule (`fail`), after which the
    /// worker ends. Returns whether it broke a rule.
    fn client_broke(&mut self) -> Result<bool> {
        for n in self.lock.take_notices() {
            let mut e = self.event(EventType::Info, F::ClientError);
            e.error = Some(n.message.clone());
            e.detail = n.line.map(|l| serde_json::json!({ "line": l }));
            record(&self.log, &e)?;
        }
        let Some(err) = self.lock.client_error() else {
            return Ok(false);
        };
        if !self.client_error_recorded {
            self.client_error_recorded = true;
            tracing::error!("worker {}: client error: {err}", self.cfg.id);
            let mut e = self.event(EventType::Fail, F::ClientError);
            e.error = Some(err.message.clone());
            e.detail = err.line.map(|l| serde_json::json!({ "line": l }));
            record(&self.log, &e)?;
        }
        Ok(true)
    }

    async fn open_session(&mut self) -> Result<Current> {
        let s = self.lock.open_session().await?;
        let mut lost = s.lost.clone();
        let (log, me, id) = (self.log.clone(), self.me.clone(), s.id);
        let recorder = tokio::spawn(async move {
            let Ok(reason) = lost.wait_for(Option::is_some).await.map(|r| r.clone()) else {
                return;
            };
            let mut e = Event::new(me, EventType::Info, F::KeepaliveLost);
            e.session = Some(id);
            e.error = reason;
            if let Err(err) = record(&log, &e) {
                tracing::error!("cannot record the session loss: {err:#}");
            }
        });
        Ok(Current {
            id: s.id,
            lost: s.lost,
            recorder,
        })
    }

    fn event(&self, kind: EventType, f: F) -> Event {
        Event::new(self.me.clone(), kind, f)
    }

    /// An `acquire` or `release` event of lock `key` under session `session`.
    fn lock_event(&self, kind: EventType, f: F, key: &str, session: i64) -> Event {
        let mut e = self.event(kind, f);
        e.key = Some(key.to_string());
        e.session = Some(session);
        e
    }

    /// Records a failed (`fail`) or unknown (`info`) acquisition.
    fn acquire_failed(
        &self,
        kind: EventType,
        key: &str,
        session: i64,
        error: String,
    ) -> Result<()> {
        let mut e = self.lock_event(kind, F::Acquire, key, session);
        e.error = Some(error);
        record(&self.log, &e)
    }

    async fn hold(&mut self, key: &str, session: i64, hold_ms: u64) -> Result<HoldOutcome> {
        record(
            &self.log,
            &self.lock_event(EventType::Invoke, F::Acquire, key, session),
        )?;
        let remaining = Duration::from_nanos(self.cfg.end_ns.saturating_sub(monotonic_ns()));
        let g = match tokio::time::timeout(remaining, self.lock.acquire(key)).await {
            Err(_) => {
                let why = "run ended while waiting for the lock".to_string();
                self.acquire_failed(EventType::Fail, key, session, why)?;
                return Ok(HoldOutcome::RunOver);
            }
            Ok(Acquire::Failed {
                error,
                session_gone,
                told,
            }) => {
                let mut e = self.lock_event(EventType::Fail, F::Acquire, key, session);
                e.error = Some(error);
                // The service said "granted" but the grant was already gone.
                e.detail = told.map(|id| serde_json::json!({ "told_granted": id }));
                record(&self.log, &e)?;
                return Ok(if session_gone {
                    HoldOutcome::SessionGone
                } else {
                    HoldOutcome::Retry
                });
            }
            Ok(Acquire::Unknown { error, id }) => {
                // Maybe held: record it as unknown, let go, and try again.
                self.acquire_failed(EventType::Info, key, session, error)?;
                if let Some(id) = id {
                    let g = Granted {
                        grant: 0,
                        session,
                        id,
                        counter: None,
                        external: None,
                    };
                    self.release(key, &g, None).await?;
                }
                return Ok(HoldOutcome::Retry);
            }
            Ok(Acquire::Granted(g)) => g,
        };
        // The grant's own session: the current one, except for an external
        // library that takes a lease per lock (python-etcd3), whose grant
        // names that lease, so the findings can follow its end.
        let session = g.session;
        let mut ok = self.lock_event(EventType::Ok, F::Acquire, key, session);
        // An external client's token is its own answer's (`[client] token`).
        ok.detail = g.external.as_ref().map(|d| d.detail.clone());
        let token = g.token(self.cfg.token);
        ok.grant = Some(g.grant);
        ok.token = token;
        record(&self.log, &ok)?;

        let think = Duration::from_millis(hold_ms) / self.cfg.ops_per_hold.max(1);
        let op = Op {
            key,
            token,
            grant: g.grant,
            session,
        };
        for _ in 0..self.cfg.ops_per_hold {
            let Some(v) = self.read(&op).await? else {
                break;
            };
            // check-then-write: the think time goes between the check and the update.
            let inside = self.storage.thinks_inside_writes();
            if !inside {
                tokio::time::sleep(think).await;
            }
            let think_inside = if inside { think } else { Duration::ZERO };
            if !self.write(&op, v.unwrap_or(0) + 1, think_inside).await? {
                break;
            }
        }
        self.release(key, &g, Some(g.grant)).await?;
        Ok(HoldOutcome::Done)
    }

    fn op_event(&self, kind: EventType, f: F, op: &Op<'_>, request_id: u64) -> Event {
        let mut e = self.event(kind, f);
        e.key = Some(op.key.to_string());
        e.token = op.token;
        e.grant = Some(op.grant);
        e.session = Some(op.session);
        e.request_id = Some(request_id);
        e
    }

    fn request(&mut self, op: &Op<'_>, kind: OpKind, val: Option<i64>) -> Request {
        self.next_request += 1;
        Request {
            op: kind,
            key: op.key.to_string(),
            val,
            token: op.token,
            revision: Some(op.grant),
            lease: Some(op.session),
            client: self.cfg.id.to_string(),
            request_id: self.next_request,
        }
    }

    /// Returns the value read (`Some(None)` for a never-written key), or `None` when
    /// the read failed and the hold should end.
    async fn read(&mut self, op: &Op<'_>) -> Result<Option<Option<i64>>> {
        let req = self.request(op, OpKind::Read, None);
        let id = req.request_id;
        record(
            &self.log,
            &self.op_event(EventType::Invoke, F::Read, op, id),
        )?;
        let res = self.storage.call(&req).await;
        let retries = self.retries();
        match res {
            Ok(a) => {
                let mut e = self.op_event(EventType::Ok, F::Read, op, id);
                e.value = a.value;
                e.detail = retries;
                record(&self.log, &e)?;
                Ok(Some(a.value))
            }
            Err(err) => {
                // The read may have reached the storage and registered its token
                // (a fenced read raises the key's max): its effect is unknown.
                let mut e = self.op_event(EventType::Info, F::Read, op, id);
                e.error = Some(format!("{err:#}"));
                e.detail = retries;
                record(&self.log, &e)?;
                Ok(None)
            }
        }
    }

    /// Returns whether the write was accepted.
    /// The resource's retries of the last call, as an event's `detail`.
    fn retries(&mut self) -> Option<serde_json::Value> {
        match self.storage.take_retries() {
            0 => None,
            n => Some(serde_json::json!({ "retries": n })),
        }
    }

    async fn write(&mut self, op: &Op<'_>, value: i64, think: Duration) -> Result<bool> {
        let req = self.request(op, OpKind::Write, Some(value));
        let id = req.request_id;
        let mut inv = self.op_event(EventType::Invoke, F::Write, op, id);
        inv.value = Some(value);
        record(&self.log, &inv)?;
        let res = if think.is_zero() {
            self.storage.call(&req).await
        } else {
            self.storage.call_thinking(&req, think).await
        };
        let mut e = self.op_event(EventType::Info, F::Write, op, id);
        e.value = Some(value);
        e.detail = self.retries();
        let accepted = match res {
            Ok(a) if a.verdict == Verdict::Accepted => {
                e.kind = EventType::Ok;
                true
            }
            Ok(a) => {
                e.kind = EventType::Fail;
                e.error = Some(format!(
                    "rejected-stale (storage token {})",
                    a.token
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "none".into())
                ));
                false
            }
            Err(err) => {
                // The request may or may not have reached the storage.
                e.error = Some(format!("{err:#}"));
                false
            }
        };
        record(&self.log, &e)?;
        Ok(accepted)
    }

    async fn release(&mut self, key: &str, g: &Granted, grant: Option<i64>) -> Result<()> {
        let mut inv = self.lock_event(EventType::Invoke, F::Release, key, g.session);
        inv.grant = grant;
        record(&self.log, &inv)?;
        let res = self.lock.release(g).await;
        let mut e = self.lock_event(EventType::Ok, F::Release, key, g.session);
        e.grant = grant;
        if let Err(err) = res {
            e.kind = EventType::Info;
            e.error = Some(format!("{err:#}"));
        }
        record(&self.log, &e)
    }
}

/// What every storage request of one hold carries.
struct Op<'a> {
    key: &'a str,
    token: Option<i64>,
    grant: i64,
    session: i64,
}
