//! An external lock client (`[client]`): the user's adapter program around a lock
//! library, started as this worker's child and spoken to over JSON lines
//! (`docs/client-protocol.md`; the lines themselves are in [`wire`]).
//!
//! The child runs **in the worker's process group** (no `process_group` call:
//! it inherits the worker's, which is its own), so a pause of the holder stops
//! the library with the worker, as a GC pause would; `PR_SET_PDEATHSIG` and an
//! explicit kill at the end make sure it never outlives the worker.
//!
//! Nothing the client does can hang or crash the worker: every request but
//! `acquire` has a timeout counted in running time (a SIGSTOP of the whole group
//! does not count against it), after which the request is unknown and the child
//! is replaced; every line is checked, and a broken rule is a [`ClientError`] the
//! worker records before it ends. The process itself is in [`child`].

mod child;
pub mod owner;
pub mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use rand::Rng;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

// The adapter's config and its protocol error are part of the client seam
// (`ClientConfig::external`, `LockClient::client_error`), defined there.
use crate::systems::client::{Acquire, ClientConfig, Granted, LockClient, Session};
pub use crate::systems::client::{ClientError, ExternalConfig};
use child::{running_timeout, FromClient, LostSlot, Proc};

/// How long a client has to say hello (a JVM needs a few seconds).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// `open`, `release`, `close`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub struct ExternalClient {
    cfg: ClientConfig,
    ext: ExternalConfig,
    proc: Option<Proc>,
    next_id: u64,
    /// A request was sent and its answer not read (an `acquire` the worker gave
    /// up on at the run's end): the child cannot take another one.
    busy: bool,
    error: Option<ClientError>,
    notices: Vec<ClientError>,
    lost: LostSlot,
    session: i64,
    /// The system's owner entries for this worker's sessions and grants.
    owners: Box<dyn owner::Owners>,
    pub library: String,
}

enum CallError {
    /// The client answered `ok: false`.
    Failed(String),
    /// No answer in time: it may or may not have happened; the child was replaced.
    Unknown(String),
    /// A broken rule (recorded in `self.error`).
    Client(String),
}

impl ExternalClient {
    /// Starts the child and reads its hello. A client that cannot start or
    /// breaks a rule is not an `Err` here: it is [`LockClient::client_error`],
    /// which the worker records.
    pub async fn start(cfg: &ClientConfig, ext: &ExternalConfig) -> Result<ExternalClient> {
        // The client's stdin is a pipe: a client that died must be an EPIPE the
        // worker records, not a SIGPIPE that kills the worker (fencecheck
        // restores SIGPIPE's default for `… | head`). Nothing else in a worker
        // writes to a pipe.
        // SAFETY: sets one signal's disposition; no handler runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let mut c = ExternalClient {
            cfg: cfg.clone(),
            ext: ext.clone(),
            proc: None,
            next_id: 0,
            busy: false,
            error: None,
            notices: Vec::new(),
            lost: Arc::new(Mutex::new(None)),
            session: 0,
            owners: crate::systems::system(cfg.service).external_owners(cfg),
            library: String::new(),
        };
        c.spawn().await;
        Ok(c)
    }

    fn fail(&mut self, e: ClientError) -> String {
        tracing::error!("client error: {e}");
        let text = e.to_string();
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.proc = None;
        text
    }

    /// Spawns the child and waits for its hello; a failure sets `self.error`.
    async fn spawn(&mut self) {
        self.busy = false;
        match child::spawn(&self.ext, self.cfg.worker, self.lost.clone()) {
            Ok(p) => self.proc = Some(p),
            Err(e) => {
                self.fail(e);
                return;
            }
        }
        let hello = {
            let Some(p) = self.proc.as_mut() else { return };
            running_timeout(HELLO_TIMEOUT, p.from.recv()).await
        };
        match hello {
            Some(Some(FromClient::Hello(lib))) => {
                // Straight to the worker's log (stderr), whatever the log
                // filter: which library ran is part of the record.
                eprintln!(
                    "worker {}: client {} says hello: {lib}",
                    self.cfg.worker, self.ext.command[0]
                );
                self.library = lib;
            }
            Some(Some(FromClient::Broken(e))) => {
                self.fail(e);
            }
            Some(Some(FromClient::Answer(a))) => {
                self.fail(ClientError {
                    message: "not a protocol line (expected the hello first)".into(),
                    line: Some(a.line),
                });
            }
            Some(Some(FromClient::Closed) | None) => {
                let e = self.exited().await;
                self.fail(e);
            }
            None => {
                self.fail(ClientError {
                    message: format!("no hello within {} s", HELLO_TIMEOUT.as_secs()),
                    line: None,
                });
            }
        }
    }

    /// The client closed its stdout: how it exited, with its last stderr line.
    async fn exited(&mut self) -> ClientError {
        child::exited(self.proc.as_mut(), &self.ext.log).await
    }

    /// Kills the child, tells the session it is gone, and starts a new child.
    async fn restart(&mut self, why: &str) {
        self.proc = None;
        self.mark_lost(why);
        self.spawn().await;
    }

    fn mark_lost(&mut self, why: &str) {
        if let Ok(mut slot) = self.lost.lock() {
            if let Some(tx) = slot.take() {
                let _ = tx.send(Some(why.to_string()));
            }
        }
    }

    /// Sends one request and reads its answer; `limit` None waits as long as
    /// the caller does.
    async fn call(
        &mut self,
        op: &str,
        fields: Value,
        limit: Option<Duration>,
    ) -> Result<Map<String, Value>, CallError> {
        if let Some(e) = &self.error {
            return Err(CallError::Client(e.to_string()));
        }
        if self.busy || self.proc.is_none() {
            self.restart("client restarted").await;
            if let Some(e) = &self.error {
                return Err(CallError::Client(e.to_string()));
            }
        }
        self.next_id += 1;
        let id = self.next_id;
        let line = wire::request(id, op, fields) + "\n";
        let Some(p) = self.proc.as_mut() else {
            return Err(CallError::Client("no client".into()));
        };
        if p.stdin.write_all(line.as_bytes()).await.is_err() || p.stdin.flush().await.is_err() {
            let e = self.exited().await;
            return Err(CallError::Client(self.fail(e)));
        }
        self.busy = true;
        let got = match limit {
            Some(l) => running_timeout(l, p.from.recv()).await,
            None => Some(p.from.recv().await),
        };
        self.busy = false;
        match got {
            None => {
                let what = format!(
                    "client did not answer `{op}` (id {id}) within {} s; restarted it",
                    limit.unwrap_or_default().as_secs()
                );
                tracing::warn!("{what}");
                self.notices.push(ClientError {
                    message: what.clone(),
                    line: Some(wire::truncate(&line)),
                });
                if op == "close" {
                    // Killed by close_session; nothing to restart it for.
                    self.proc = None;
                } else {
                    self.restart("client restarted after an unanswered request")
                        .await;
                }
                Err(CallError::Unknown(what))
            }
            Some(Some(FromClient::Answer(a))) if a.id == id => match a.result.clone() {
                Ok(m) => Ok(m),
                Err(error) => {
                    // A field-less answer is kept for grant parsing below.
                    Err(CallError::Failed(error))
                }
            }
            .map(|mut m| {
                m.insert("__line".into(), Value::String(a.line.clone()));
                m
            }),
            Some(Some(FromClient::Answer(a))) => Err(CallError::Client(self.fail(ClientError {
                message: format!("not a protocol line (answers id {}, expected {id})", a.id),
                line: Some(a.line),
            }))),
            Some(Some(FromClient::Hello(_))) => Err(CallError::Client(self.fail(ClientError {
                message: "not a protocol line (a second hello)".into(),
                line: None,
            }))),
            Some(Some(FromClient::Broken(e))) => Err(CallError::Client(self.fail(e))),
            Some(Some(FromClient::Closed) | None) => {
                let e = self.exited().await;
                Err(CallError::Client(self.fail(e)))
            }
        }
    }

    fn new_session_slot(&mut self) -> watch::Receiver<Option<String>> {
        let (tx, rx) = watch::channel(None);
        if let Ok(mut slot) = self.lost.lock() {
            *slot = Some(tx);
        }
        rx
    }
}

fn random_id() -> i64 {
    rand::thread_rng().gen_range(1..i64::MAX)
}

#[async_trait::async_trait]
impl LockClient for ExternalClient {
    async fn open_session(&mut self) -> Result<Session> {
        let mut fields = json!({
            "service": self.cfg.service.as_str(),
            "endpoints": self.cfg.endpoints,
            "ttl_ms": self.cfg.ttl.as_millis() as u64,
        });
        // A service that asks who is calling (Kubernetes): the run's token, the CA
        // of its serving certificate and the name that certificate is for (the
        // endpoints are the worker's proxies, not the service's address).
        if let Some(a) = &self.cfg.access {
            fields["bearer_token"] = json!(a.token);
            fields["ca_pem"] = json!(a.ca_pem);
            fields["tls_server_name"] = json!(a.server_name);
        }
        if let (Some(renew), Some(retry)) = (self.cfg.renew_deadline, self.cfg.retry_period) {
            fields["renew_deadline_ms"] = json!(renew.as_millis() as u64);
            fields["retry_period_ms"] = json!(retry.as_millis() as u64);
        }
        let m = match self.call("open", fields, Some(REQUEST_TIMEOUT)).await {
            Ok(m) => m,
            Err(CallError::Failed(e) | CallError::Unknown(e) | CallError::Client(e)) => {
                anyhow::bail!("open: {e}")
            }
        };
        let Some(session) = m.get("session").and_then(Value::as_i64) else {
            let line = m.get("__line").and_then(Value::as_str).map(str::to_string);
            let e = self.fail(ClientError {
                message: "not a protocol line (an `open` answer needs an integer `session`)".into(),
                line,
            });
            anyhow::bail!("open: {e}");
        };
        self.session = session;
        let lost = self.new_session_slot();
        // 0: the library has no session (the grants carry theirs).
        let named = match session {
            0 => Ok(()),
            s => self.owners.session(self.cfg.worker, s).await,
        };
        if let Err(e) = named {
            // Faults aimed at the holder will not find this worker; the run
            // goes on (the grants are still judged).
            tracing::warn!("cannot register the session's owner: {e:#}");
        }
        Ok(Session { id: session, lost })
    }

    async fn acquire(&mut self, name: &str) -> Acquire {
        let handle = random_id();
        let mut fields = json!({ "lock": self.owners.lock(name) });
        let mut session = self.session;
        if let Some((s, owner)) = self.owners.owner_value(self.cfg.worker, session, handle) {
            session = s;
            fields["owner"] = json!(owner);
        }
        let m = match self.call("acquire", fields, None).await {
            Ok(m) => m,
            Err(CallError::Failed(error)) => {
                return Acquire::Failed {
                    error,
                    session_gone: false,
                    told: None,
                }
            }
            Err(CallError::Unknown(error) | CallError::Client(error)) => {
                return Acquire::Unknown { error, id: None }
            }
        };
        let line = m
            .get("__line")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let answer = wire::Answer {
            id: self.next_id,
            result: Ok(m.clone()),
            line,
        };
        let g = match wire::grant(&answer, &m, &self.ext.token) {
            Ok(g) => g,
            Err(e) => {
                let error = self.fail(e);
                return Acquire::Unknown { error, id: None };
            }
        };
        let lease = match self.owners.granted(self.cfg.worker, &g.entry).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot register the grant's owner: {e:#}");
                None
            }
        };
        let token = if self.ext.no_token {
            None
        } else {
            wire::to_storage(&g.raw_token).ok().flatten()
        };
        let external = Some(crate::systems::client::GrantDetail {
            token,
            detail: json!({ "client": {
                "handle": handle,
                "entry": g.entry,
                "value": g.value,
                "revision": g.revision,
                "token": g.raw_token,
                "tokens": g.tokens,
            }}),
        });
        Acquire::Granted(Granted {
            // Resolved to the service's order after the run (`check::resolve`).
            grant: handle,
            // A library without sessions (python-etcd3) has a lease per lock.
            session: match lease {
                Some(l) if self.session == 0 => l,
                _ => session,
            },
            id: g.entry,
            counter: None,
            external,
        })
    }

    async fn release(&mut self, _g: &Granted) -> Result<()> {
        match self.call("release", json!({}), Some(REQUEST_TIMEOUT)).await {
            Ok(_) => Ok(()),
            Err(CallError::Failed(e) | CallError::Unknown(e) | CallError::Client(e)) => {
                anyhow::bail!("release: {e}")
            }
        }
    }

    async fn close_session(&mut self) {
        if self.error.is_none() && !self.busy && self.proc.is_some() {
            let _ = self.call("close", json!({}), Some(REQUEST_TIMEOUT)).await;
        }
        self.owners.close().await;
        // The client may exit on its own after `close`; it is killed regardless.
        if let Some(mut p) = self.proc.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), p.child.wait()).await;
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
    }

    fn client_error(&self) -> Option<ClientError> {
        self.error.clone()
    }

    fn take_notices(&mut self) -> Vec<ClientError> {
        std::mem::take(&mut self.notices)
    }
}
