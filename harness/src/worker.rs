//! The lock-contending worker: a separate OS process (hidden `worker` subcommand), so
//! a SIGSTOP freezes it for real — its keepalives included.
//!
//! Loop until the run ends: (re)use a session lease kept alive every TTL/3 → `Lock`
//! with that lease → read the lock key's CreateRevision (the grant) → `ops_per_hold`
//! read-modify-write increments on the storage, each write carrying the token and
//! the grant revision → `Unlock`. The hold time is spread between each read and its
//! write (the think time of a read-modify-write), so a pause lands between a read and
//! the write that depends on it, as in the classic fencing diagram.
//!
//! A worker whose keepalive fails records it and carries on with the hold it is in,
//! as a real, unaware client would: that is the bug being tested. Only at its next
//! acquisition does it notice, as `concurrency.Session.Done()` would, and start a new
//! session lease.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{Client, ConnectOptions, LockOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::history::{monotonic_ns, Event, EventType, EventWriter, Process, F};
use crate::scenario::TokenMode;
use fencecheck_storage::{Answer, OpKind, Request, Verdict};

/// Everything a worker process needs, passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub id: u32,
    pub etcd_endpoints: Vec<String>,
    pub storage_url: String,
    pub ttl_s: i64,
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

/// etcd key of the lock that guards storage key `key`.
pub fn lock_name(key: &str) -> String {
    format!("fencecheck/lock/{key}")
}

/// etcd key (attached to the lease) telling the nemesis which worker owns a lease.
pub fn owner_key(lease: i64) -> String {
    format!("fencecheck/owner/{lease:x}")
}

const RPC_TIMEOUT: Duration = Duration::from_secs(5);

type Log = Arc<Mutex<EventWriter>>;

fn record(log: &Log, ev: &Event) -> Result<()> {
    let mut w = log
        .lock()
        .map_err(|_| anyhow::anyhow!("event log lock poisoned"))?;
    w.write(ev)
        .context("cannot append to the worker's event file")
}

struct Session {
    lease: i64,
    lost: Arc<AtomicBool>,
    keepalive: tokio::task::JoinHandle<()>,
}

struct Worker {
    cfg: WorkerConfig,
    me: Process,
    log: Log,
    etcd: Client,
    http: reqwest::Client,
    next_request: u64,
}

pub async fn run(cfg: WorkerConfig) -> Result<()> {
    let log = Arc::new(Mutex::new(EventWriter::create(&cfg.events)?));
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    let etcd = Client::connect(&cfg.etcd_endpoints, Some(opts))
        .await
        .context("cannot connect to etcd")?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let mut w = Worker {
        me: Process::Worker(cfg.id),
        cfg,
        log,
        etcd,
        http,
        next_request: 0,
    };
    w.main_loop().await
}

impl Worker {
    fn event(&self, kind: EventType, f: F) -> Event {
        Event::new(self.me.clone(), kind, f)
    }

    /// An `acquire` or `release` event of lock `key` under `lease`.
    fn lock_event(&self, kind: EventType, f: F, key: &str, lease: i64) -> Event {
        let mut e = self.event(kind, f);
        e.key = Some(key.to_string());
        e.lease = Some(lease);
        e
    }

    /// Lock granted but its revision could not be read: the acquisition's outcome is
    /// unknown to us, so record it as such, let go, and try again.
    async fn unknown_grant(
        &mut self,
        key: &str,
        lock_key: &[u8],
        lease: i64,
        why: String,
    ) -> Result<HoldOutcome> {
        self.acquire_failed(EventType::Info, key, lease, why)?;
        self.release(key, lock_key, lease, None).await?;
        Ok(HoldOutcome::Retry)
    }

    /// Records a failed (`fail`) or unknown (`info`) acquisition.
    fn acquire_failed(&self, kind: EventType, key: &str, lease: i64, error: String) -> Result<()> {
        let mut e = self.lock_event(kind, F::Acquire, key, lease);
        e.error = Some(error);
        record(&self.log, &e)
    }

    async fn main_loop(&mut self) -> Result<()> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ (u64::from(self.cfg.id) << 32));
        let mut session: Option<Session> = None;
        while monotonic_ns() < self.cfg.end_ns {
            let lost = session
                .as_ref()
                .is_some_and(|s| s.lost.load(Ordering::SeqCst));
            if session.is_none() || lost {
                if let Some(s) = session.take() {
                    s.keepalive.abort();
                }
                match self.new_session().await {
                    Ok(s) => session = Some(s),
                    Err(e) => {
                        tracing::warn!("lease grant failed: {e:#}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let Some(s) = session.as_ref() else { continue };
            let lease = s.lease;
            let key = format!("k{}", rng.gen_range(0..self.cfg.keys));
            let hold_ms = rng.gen_range(self.cfg.hold_min_ms..=self.cfg.hold_max_ms);
            match self.hold(&key, lease, hold_ms).await? {
                HoldOutcome::Done => {}
                HoldOutcome::LeaseGone => {
                    if let Some(s) = session.as_ref() {
                        s.lost.store(true, Ordering::SeqCst);
                    }
                }
                HoldOutcome::RunOver => break,
                HoldOutcome::Retry => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        if let Some(s) = session.take() {
            s.keepalive.abort();
            let _ = tokio::time::timeout(RPC_TIMEOUT, self.etcd.lease_revoke(s.lease)).await;
        }
        Ok(())
    }

    async fn new_session(&mut self) -> Result<Session> {
        let grant = tokio::time::timeout(RPC_TIMEOUT, self.etcd.lease_grant(self.cfg.ttl_s, None))
            .await
            .context("lease grant timed out")??;
        let lease = grant.id();
        let owner = format!("{} {}", self.cfg.id, std::process::id());
        tokio::time::timeout(
            RPC_TIMEOUT,
            self.etcd.put(
                owner_key(lease),
                owner,
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            ),
        )
        .await
        .context("owner put timed out")??;
        let lost = Arc::new(AtomicBool::new(false));
        let keepalive = tokio::spawn(keepalive(
            self.etcd.clone(),
            lease,
            Duration::from_secs(self.cfg.ttl_s as u64) / 3,
            lost.clone(),
            self.log.clone(),
            self.me.clone(),
        ));
        Ok(Session {
            lease,
            lost,
            keepalive,
        })
    }

    async fn hold(&mut self, key: &str, lease: i64, hold_ms: u64) -> Result<HoldOutcome> {
        record(
            &self.log,
            &self.lock_event(EventType::Invoke, F::Acquire, key, lease),
        )?;

        let remaining = Duration::from_nanos(self.cfg.end_ns.saturating_sub(monotonic_ns()));
        let lock = tokio::time::timeout(
            remaining,
            self.etcd
                .lock(lock_name(key), Some(LockOptions::new().with_lease(lease))),
        )
        .await;
        let lock_key = match lock {
            Err(_) => {
                self.acquire_failed(
                    EventType::Fail,
                    key,
                    lease,
                    "run ended while waiting for the lock".to_string(),
                )?;
                return Ok(HoldOutcome::RunOver);
            }
            Ok(Err(err)) => {
                self.acquire_failed(EventType::Fail, key, lease, format!("lock: {err}"))?;
                return Ok(HoldOutcome::LeaseGone);
            }
            Ok(Ok(resp)) => resp.key().to_vec(),
        };

        // The grant is the lock key's CreateRevision; a missing key means the lock
        // was already lost (etcd 3.4 can answer Lock after the lease expired).
        let got = tokio::time::timeout(RPC_TIMEOUT, self.etcd.get(lock_key.clone(), None)).await;
        let revision = match got {
            Ok(Ok(r)) => r.kvs().first().map(|kv| kv.create_revision()),
            Ok(Err(err)) => {
                return self
                    .unknown_grant(
                        key,
                        &lock_key,
                        lease,
                        format!("reading the lock key: {err}"),
                    )
                    .await;
            }
            Err(_) => {
                return self
                    .unknown_grant(
                        key,
                        &lock_key,
                        lease,
                        "reading the lock key timed out".into(),
                    )
                    .await;
            }
        };
        let Some(revision) = revision else {
            self.acquire_failed(
                EventType::Fail,
                key,
                lease,
                "lock key gone right after Lock: the lease had expired".to_string(),
            )?;
            return Ok(HoldOutcome::LeaseGone);
        };
        let token = match self.cfg.token {
            TokenMode::Revision => Some(revision),
            TokenMode::LeaseId => Some(lease),
            TokenMode::None => None,
        };
        let mut ok = self.lock_event(EventType::Ok, F::Acquire, key, lease);
        ok.revision = Some(revision);
        ok.token = token;
        record(&self.log, &ok)?;

        let think = Duration::from_millis(hold_ms) / self.cfg.ops_per_hold.max(1);
        let grant = Grant {
            key,
            token,
            revision,
            lease,
        };
        for _ in 0..self.cfg.ops_per_hold {
            let Some(v) = self.read(&grant).await? else {
                break;
            };
            tokio::time::sleep(think).await;
            if !self.write(&grant, v.unwrap_or(0) + 1).await? {
                break;
            }
        }
        self.release(key, &lock_key, lease, Some(revision)).await?;
        Ok(HoldOutcome::Done)
    }

    fn op_event(&self, kind: EventType, f: F, g: &Grant<'_>, request_id: u64) -> Event {
        let mut e = self.event(kind, f);
        e.key = Some(g.key.to_string());
        e.token = g.token;
        e.revision = Some(g.revision);
        e.lease = Some(g.lease);
        e.request_id = Some(request_id);
        e
    }

    async fn storage(
        &mut self,
        g: &Grant<'_>,
        op: OpKind,
        val: Option<i64>,
    ) -> (u64, Result<Answer>) {
        self.next_request += 1;
        let req = Request {
            op,
            key: g.key.to_string(),
            val,
            token: g.token,
            revision: Some(g.revision),
            lease: Some(g.lease),
            client: self.cfg.id.to_string(),
            request_id: self.next_request,
        };
        let id = self.next_request;
        let res = async {
            let resp = self
                .http
                .post(&self.cfg.storage_url)
                .json(&req)
                .send()
                .await?;
            let status = resp.status();
            if !status.is_success() {
                anyhow::bail!(
                    "storage answered {status}: {}",
                    resp.text().await.unwrap_or_default()
                );
            }
            Ok(resp.json::<Answer>().await?)
        }
        .await;
        (id, res)
    }

    /// Returns the value read (`Some(None)` for a never-written key), or `None` when
    /// the read failed and the hold should end.
    async fn read(&mut self, g: &Grant<'_>) -> Result<Option<Option<i64>>> {
        let id = self.next_request + 1;
        record(&self.log, &self.op_event(EventType::Invoke, F::Read, g, id))?;
        let (id, res) = self.storage(g, OpKind::Read, None).await;
        match res {
            Ok(a) => {
                let mut e = self.op_event(EventType::Ok, F::Read, g, id);
                e.value = a.value;
                record(&self.log, &e)?;
                Ok(Some(a.value))
            }
            Err(err) => {
                // A read has no effect: a failed read is a `fail`, not an unknown.
                let mut e = self.op_event(EventType::Fail, F::Read, g, id);
                e.error = Some(format!("{err:#}"));
                record(&self.log, &e)?;
                Ok(None)
            }
        }
    }

    /// Returns whether the write was accepted.
    async fn write(&mut self, g: &Grant<'_>, value: i64) -> Result<bool> {
        let id = self.next_request + 1;
        let mut inv = self.op_event(EventType::Invoke, F::Write, g, id);
        inv.value = Some(value);
        record(&self.log, &inv)?;
        let (id, res) = self.storage(g, OpKind::Write, Some(value)).await;
        let mut e = self.op_event(EventType::Info, F::Write, g, id);
        e.value = Some(value);
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

    async fn release(
        &mut self,
        key: &str,
        lock_key: &[u8],
        lease: i64,
        revision: Option<i64>,
    ) -> Result<()> {
        let mut inv = self.lock_event(EventType::Invoke, F::Release, key, lease);
        inv.revision = revision;
        record(&self.log, &inv)?;
        let res = tokio::time::timeout(RPC_TIMEOUT, self.etcd.unlock(lock_key.to_vec())).await;
        let mut e = self.lock_event(EventType::Ok, F::Release, key, lease);
        e.revision = revision;
        match res {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                e.kind = EventType::Info;
                e.error = Some(format!("unlock: {err}"));
            }
            Err(_) => {
                e.kind = EventType::Info;
                e.error = Some("unlock timed out".into());
            }
        }
        record(&self.log, &e)
    }
}

struct Grant<'a> {
    key: &'a str,
    token: Option<i64>,
    revision: i64,
    lease: i64,
}

enum HoldOutcome {
    Done,
    LeaseGone,
    RunOver,
    Retry,
}

/// Keeps `lease` alive every `interval`, as etcd's clientv3 does: a failed
/// keepalive is retried (a member may be restarting, a leader being elected) until
/// the lease's TTL has run out since the last success; then, or at once when etcd
/// answers TTL 0 (the lease is gone), it records one `keepalive-lost`, raises `lost`
/// and stops.
async fn keepalive(
    mut etcd: Client,
    lease: i64,
    interval: Duration,
    lost: Arc<AtomicBool>,
    log: Log,
    me: Process,
) {
    let ttl = interval * 3;
    let mut last_ok = tokio::time::Instant::now();
    let reason = 'session: loop {
        // Every wait is bounded by the lease's deadline: a hung stream must not
        // outlive the lease unnoticed.
        let opened = tokio::time::timeout_at(last_ok + ttl, etcd.lease_keep_alive(lease)).await;
        let (mut keeper, mut stream) = match opened {
            Err(_) => break "no keepalive answer within the TTL".to_string(),
            Ok(Err(e)) => {
                if last_ok.elapsed() >= ttl {
                    break format!("keepalive stream: {e}; TTL ran out");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Ok(Ok(x)) => x,
        };
        loop {
            let sent = tokio::time::timeout_at(last_ok + ttl, keeper.keep_alive()).await;
            let answer = match sent {
                Err(_) => break 'session "no keepalive answer within the TTL".to_string(),
                Ok(Err(_)) => None,
                Ok(Ok(())) => {
                    let until = (last_ok + ttl).min(tokio::time::Instant::now() + interval);
                    match tokio::time::timeout_at(until, stream.message()).await {
                        Ok(Ok(Some(r))) => Some(r.ttl()),
                        _ => None,
                    }
                }
            };
            match answer {
                Some(t) if t <= 0 => {
                    break 'session "lease expired (keepalive answered TTL 0)".to_string()
                }
                Some(_) => last_ok = tokio::time::Instant::now(),
                None => {
                    if last_ok.elapsed() >= ttl {
                        break 'session "no keepalive answer within the TTL".to_string();
                    }
                    // Reopen the stream: the member behind it may be gone.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'session;
                }
            }
            tokio::time::sleep(interval).await;
        }
    };
    lost.store(true, Ordering::SeqCst);
    let mut e = Event::new(me, EventType::Info, F::KeepaliveLost);
    e.lease = Some(lease);
    e.error = Some(reason);
    if let Err(err) = record(&log, &e) {
        tracing::error!("cannot record keepalive loss: {err:#}");
    }
}
