//! What a worker records, in one place: [`Recording`] wraps the lock client and
//! the fenced resource (etcd robustness's `RecordingClient` is the model) and
//! appends each call to the worker's event file as it happens — its `invoke`
//! before the call, its completion after: `ok`, `fail` when it surely did not
//! happen, `info` when it may have (Jepsen's way). Each event is flushed as it is
//! written (`EventWriter::write`), so a killed worker leaves its history up to
//! its last call.
//!
//! Every method's outer `Result` is the recording itself: an event file that
//! cannot be appended to ends the worker. What the call did is the inner value.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use fencecheck_storage::{Answer, OpKind, Request, Verdict};
use tokio::sync::watch;

use crate::record::history::{Event, EventType, EventWriter, Process, F};
use crate::resources::FencedResource;
use crate::scenario::TokenMode;
use crate::systems::client::{Acquire, Granted, LockClient};

/// The worker's event file, shared by both wrappers and the session-loss watch.
#[derive(Clone)]
pub struct Log {
    me: Process,
    out: Arc<Mutex<EventWriter>>,
}

impl Log {
    pub fn new(me: Process, out: EventWriter) -> Log {
        Log {
            me,
            out: Arc::new(Mutex::new(out)),
        }
    }

    fn event(&self, kind: EventType, f: F) -> Event {
        Event::new(self.me.clone(), kind, f)
    }

    fn record(&self, ev: &Event) -> Result<()> {
        let mut w = self
            .out
            .lock()
            .map_err(|_| anyhow::anyhow!("event log lock poisoned"))?;
        w.write(ev)
            .context("cannot append to the worker's event file")
    }
}

/// A lock client or a fenced resource, recording every call.
pub struct Recording<C: ?Sized> {
    log: Log,
    inner: Box<C>,
    /// The lock client: which of a grant's numbers is its token (`[storage]
    /// token`), recorded with the grant; the resource's requests carry theirs.
    token: TokenMode,
    /// The lock client: its broken rule is recorded once.
    client_error_recorded: bool,
}

impl<C: ?Sized> Recording<C> {
    pub fn new(log: Log, inner: Box<C>, token: TokenMode) -> Recording<C> {
        Recording {
            log,
            inner,
            token,
            client_error_recorded: false,
        }
    }
}

/// The session the worker holds locks under, with its loss flag.
pub struct Current {
    pub id: i64,
    lost: watch::Receiver<Option<String>>,
    /// Records the loss the moment the client reports it.
    recorder: tokio::task::JoinHandle<()>,
}

impl Current {
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        // A session dropped because it was lost keeps its recorder: the worker
        // may see the loss before the recorder has run (a client that reports it
        // from the worker's own call, Kubernetes at release), and it finishes as
        // soon as it runs.
        if !self.is_lost() {
            self.recorder.abort();
        }
    }
}

impl Recording<dyn LockClient> {
    fn lock_event(&self, kind: EventType, f: F, key: &str, session: i64) -> Event {
        let mut e = self.log.event(kind, f);
        e.key = Some(key.to_string());
        e.session = Some(session);
        e
    }

    /// Records what an external client did wrong since the last look: requests
    /// it left unanswered (`info`), and a broken rule (`fail`, once), after which
    /// the worker ends. Returns whether it broke a rule.
    pub fn client_broke(&mut self, worker: u32) -> Result<bool> {
        for n in self.inner.take_notices() {
            let mut e = self.log.event(EventType::Info, F::ClientError);
            e.error = Some(n.message.clone());
            e.detail = n.line.map(|l| serde_json::json!({ "line": l }));
            self.log.record(&e)?;
        }
        let Some(err) = self.inner.client_error() else {
            return Ok(false);
        };
        if !self.client_error_recorded {
            self.client_error_recorded = true;
            tracing::error!("worker {worker}: client error: {err}");
            let mut e = self.log.event(EventType::Fail, F::ClientError);
            e.error = Some(err.message.clone());
            e.detail = err.line.map(|l| serde_json::json!({ "line": l }));
            self.log.record(&e)?;
        }
        Ok(true)
    }

    /// Opens a session and watches it: its loss is recorded (`keepalive-lost`)
    /// the moment the client reports it, whatever the worker is doing then.
    pub async fn open_session(&mut self) -> Result<Current> {
        let s = self.inner.open_session().await?;
        let mut lost = s.lost.clone();
        let (log, id) = (self.log.clone(), s.id);
        let recorder = tokio::spawn(async move {
            let Ok(reason) = lost.wait_for(Option::is_some).await.map(|r| r.clone()) else {
                return;
            };
            let mut e = log.event(EventType::Info, F::KeepaliveLost);
            e.session = Some(id);
            e.error = reason;
            if let Err(err) = log.record(&e) {
                tracing::error!("cannot record the session loss: {err:#}");
            }
        });
        Ok(Current {
            id: s.id,
            lost: s.lost,
            recorder,
        })
    }

    pub async fn close_session(&mut self) {
        self.inner.close_session().await;
    }

    /// Acquires `key` under `session`, waiting at most `remaining`; `None` when
    /// the run ended first (recorded as a failed acquisition).
    pub async fn acquire(
        &mut self,
        key: &str,
        session: i64,
        remaining: Duration,
    ) -> Result<Option<Acquire>> {
        self.log
            .record(&self.lock_event(EventType::Invoke, F::Acquire, key, session))?;
        let Ok(res) = tokio::time::timeout(remaining, self.inner.acquire(key)).await else {
            let mut e = self.lock_event(EventType::Fail, F::Acquire, key, session);
            e.error = Some("run ended while waiting for the lock".to_string());
            self.log.record(&e)?;
            return Ok(None);
        };
        let e = match &res {
            Acquire::Failed { error, told, .. } => {
                let mut e = self.lock_event(EventType::Fail, F::Acquire, key, session);
                e.error = Some(error.clone());
                // The service said "granted" but the grant was already gone.
                e.detail = told
                    .as_ref()
                    .map(|id| serde_json::json!({ "told_granted": id }));
                e
            }
            Acquire::Unknown { error, .. } => {
                // Maybe held: the caller lets go and tries again.
                let mut e = self.lock_event(EventType::Info, F::Acquire, key, session);
                e.error = Some(error.clone());
                e
            }
            Acquire::Granted(g) => {
                // The grant's own session: the current one, except for an external
                // library that takes a lease per lock (python-etcd3), whose grant
                // names that lease, so the findings can follow its end.
                let mut e = self.lock_event(EventType::Ok, F::Acquire, key, g.session);
                // An external client's token is its own answer's (`[client] token`).
                e.detail = g.external.as_ref().map(|d| d.detail.clone());
                e.grant = Some(g.grant);
                e.token = g.token(self.token);
                e
            }
        };
        self.log.record(&e)?;
        Ok(Some(res))
    }

    /// Releases `g`; the events carry `grant` (`None` for a lock that was
    /// maybe held).
    pub async fn release(&mut self, key: &str, g: &Granted, grant: Option<i64>) -> Result<()> {
        let mut inv = self.lock_event(EventType::Invoke, F::Release, key, g.session);
        inv.grant = grant;
        self.log.record(&inv)?;
        let res = self.inner.release(g).await;
        let mut e = self.lock_event(EventType::Ok, F::Release, key, g.session);
        e.grant = grant;
        if let Err(err) = res {
            e.kind = EventType::Info;
            e.error = Some(format!("{err:#}"));
        }
        self.log.record(&e)
    }
}

impl Recording<dyn FencedResource> {
    pub fn thinks_inside_writes(&self) -> bool {
        self.inner.thinks_inside_writes()
    }

    /// An event of `req`: its key, token, grant, session and request id.
    fn op_event(&self, kind: EventType, req: &Request) -> Event {
        let f = match req.op {
            OpKind::Read => F::Read,
            OpKind::Write => F::Write,
        };
        let mut e = self.log.event(kind, f);
        e.key = Some(req.key.clone());
        e.token = req.token;
        e.grant = req.revision;
        e.session = req.lease;
        e.request_id = Some(req.request_id);
        e.value = match req.op {
            OpKind::Read => None,
            OpKind::Write => req.val,
        };
        e
    }

    /// Sends `req` (a write with `think` inside it, if not zero). `None`: the
    /// outcome is unknown (`info`) — the request may have reached the resource (a
    /// fenced read too: it may have raised the key's max). A write's answer other
    /// than `accepted` is recorded as `fail`.
    pub async fn call(&mut self, req: &Request, think: Duration) -> Result<Option<Answer>> {
        self.log.record(&self.op_event(EventType::Invoke, req))?;
        let res = if think.is_zero() {
            self.inner.call(req).await
        } else {
            self.inner.call_thinking(req, think).await
        };
        let mut e = self.op_event(EventType::Info, req);
        // The resource's retries of this call.
        e.detail = match self.inner.take_retries() {
            0 => None,
            n => Some(serde_json::json!({ "retries": n })),
        };
        let answer = match res {
            Ok(a) => {
                match req.op {
                    OpKind::Read => {
                        e.kind = EventType::Ok;
                        e.value = a.value;
                    }
                    OpKind::Write if a.verdict == Verdict::Accepted => e.kind = EventType::Ok,
                    OpKind::Write => {
                        e.kind = EventType::Fail;
                        e.error = Some(format!(
                            "rejected-stale (storage token {})",
                            a.token
                                .map(|t| t.to_string())
                                .unwrap_or_else(|| "none".into())
                        ));
                    }
                }
                Some(a)
            }
            Err(err) => {
                e.error = Some(format!("{err:#}"));
                None
            }
        };
        self.log.record(&e)?;
        Ok(answer)
    }
}
