//! etcd behind the lock-client seam: a session is a lease kept alive every TTL/3
//! (as clientv3's `concurrency.Session`), a lock is the server's `Lock` RPC with
//! that lease, and the grant is the lock key's CreateRevision, read right after
//! `Lock` (a missing key means the lock was already lost: etcd 3.4 can answer
//! `Lock` after the lease expired).
//!
//! With `behaviour = "naive"` (Jepsen's 2020 lock-set client) two checks go:
//! the grant is trusted as `Lock` answers it — the key is looked up only to record
//! its CreateRevision, never to refuse it — and the connection has no HTTP/2
//! keepalive, so a `Lock` sent to a member that stopped answering (paused,
//! partitioned) waits for it instead of failing after 2 s. The lease keepalive is
//! the same in both: what differs is that the naive worker ignores its verdict.

use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{Client, ConnectOptions, GetOptions, LockOptions, PutOptions};
use tokio::sync::watch;

use super::keys::{lock_name, owner_key};
use crate::systems::client::{
    Acquire, Behaviour, ClientConfig, Granted, LockClient, Session, RPC_TIMEOUT,
};

pub struct EtcdClient {
    etcd: Client,
    ttl: Duration,
    worker: u32,
    behaviour: Behaviour,
    lease: Option<i64>,
    keepalive: Option<tokio::task::JoinHandle<()>>,
}

impl EtcdClient {
    pub async fn connect(cfg: &ClientConfig) -> Result<EtcdClient> {
        let mut opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        // HTTP/2 pings every second, the connection given up after 2 s without an
        // answer: this is what aborts a `Lock` waiting on a frozen member. Jepsen's
        // client had no such thing; the naive one waits.
        if cfg.behaviour == Behaviour::Careful {
            opts = opts.with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
        }
        let endpoints: Vec<String> = cfg
            .endpoints
            .iter()
            .map(|e| format!("http://{e}"))
            .collect();
        let etcd = Client::connect(&endpoints, Some(opts))
            .await
            .context("cannot connect to etcd")?;
        Ok(EtcdClient {
            etcd,
            ttl: cfg.ttl,
            worker: cfg.worker,
            behaviour: cfg.behaviour,
            lease: None,
            keepalive: None,
        })
    }

    fn stop_keepalive(&mut self) {
        if let Some(k) = self.keepalive.take() {
            k.abort();
        }
    }

    /// The naive client's grant, for the record only: the lock key's
    /// CreateRevision as of the revision `Lock` answered at. When the key is gone
    /// by then (etcd 3.4 answered `Lock` after the lease had expired, and the key
    /// went with it), the incarnation it answered for is the last one before: the
    /// key is read at the revisions just before the answer until it shows up (a
    /// lock key names its lease, so a session's holds reuse the name; the
    /// history is never compacted). The client trusts the grant either way, as
    /// Jepsen's did; if none is found, the answer's revision stands in (later than
    /// the key's creation, so only roughly its place).
    async fn grant_as_answered(&mut self, lock_key: &[u8], answered_at: i64) -> i64 {
        if answered_at <= 0 {
            return self.created_at(lock_key, None).await.unwrap_or(0);
        }
        let search = async {
            let oldest = (answered_at - LOOK_BACK).max(1);
            for rev in (oldest..=answered_at).rev() {
                if let Some(created) = self.created_at(lock_key, Some(rev)).await {
                    return Some(created);
                }
            }
            None
        };
        tokio::time::timeout(RPC_TIMEOUT, search)
            .await
            .ok()
            .flatten()
            .unwrap_or(answered_at)
    }

    /// The CreateRevision of `key` as of `rev` (now when `None`), if it existed.
    async fn created_at(&mut self, key: &[u8], rev: Option<i64>) -> Option<i64> {
        let opts = rev.map(|r| GetOptions::new().with_revision(r));
        let got = tokio::time::timeout(RPC_TIMEOUT, self.etcd.get(key.to_vec(), opts)).await;
        got.ok()?.ok()?.kvs().first().map(|kv| kv.create_revision())
    }
}

/// How many revisions before `Lock`'s answer the naive client looks for its lock
/// key: the lease revocations that freed it are a few revisions, one per lease.
const LOOK_BACK: i64 = 64;

#[async_trait::async_trait]
impl LockClient for EtcdClient {
    async fn open_session(&mut self) -> Result<Session> {
        self.stop_keepalive();
        let ttl_s = self.ttl.as_secs() as i64;
        let grant = tokio::time::timeout(RPC_TIMEOUT, self.etcd.lease_grant(ttl_s, None))
            .await
            .context("lease grant timed out")??;
        let lease = grant.id();
        let owner = format!("{} {}", self.worker, std::process::id());
        tokio::time::timeout(
            RPC_TIMEOUT,
            self.etcd.put(
                owner_key(lease),
                owner,
                Some(PutOptions::new().with_lease(lease)),
            ),
        )
        .await
        .context("owner put timed out")??;
        let (tx, rx) = watch::channel(None);
        self.keepalive = Some(tokio::spawn(keepalive(
            self.etcd.clone(),
            lease,
            self.ttl / 3,
            tx,
        )));
        self.lease = Some(lease);
        Ok(Session {
            id: lease,
            lost: rx,
        })
    }

    async fn acquire(&mut self, name: &str) -> Acquire {
        let Some(lease) = self.lease else {
            return Acquire::Failed {
                error: "no session".into(),
                session_gone: true,
                told: None,
            };
        };
        let (lock_key, answered_at) = match self
            .etcd
            .lock(lock_name(name), Some(LockOptions::new().with_lease(lease)))
            .await
        {
            Ok(resp) => (
                resp.key().to_vec(),
                resp.header().map_or(0, |h| h.revision()),
            ),
            Err(err) => {
                return Acquire::Failed {
                    error: format!("lock: {err}"),
                    session_gone: true,
                    told: None,
                }
            }
        };
        let id = String::from_utf8_lossy(&lock_key).into_owned();
        if self.behaviour == Behaviour::Naive {
            let grant = self.grant_as_answered(&lock_key, answered_at).await;
            return Acquire::Granted(Granted {
                grant,
                session: lease,
                id,
                counter: None,
                external: None,
            });
        }
        // The grant is the lock key's CreateRevision; a missing key means the lock
        // was already lost (etcd 3.4 can answer Lock after the lease expired).
        let got = tokio::time::timeout(RPC_TIMEOUT, self.etcd.get(lock_key, None)).await;
        match got {
            Ok(Ok(r)) => match r.kvs().first() {
                Some(kv) => Acquire::Granted(Granted {
                    grant: kv.create_revision(),
                    session: lease,
                    id,
                    counter: None,
                    external: None,
                }),
                None => Acquire::Failed {
                    error: "lock key gone right after Lock: the lease had expired".into(),
                    session_gone: true,
                    told: Some(id),
                },
            },
            Ok(Err(err)) => Acquire::Unknown {
                error: format!("reading the lock key: {err}"),
                id: Some(id),
            },
            Err(_) => Acquire::Unknown {
                error: "reading the lock key timed out".into(),
                id: Some(id),
            },
        }
    }

    async fn release(&mut self, g: &Granted) -> Result<()> {
        tokio::time::timeout(RPC_TIMEOUT, self.etcd.unlock(g.id.as_bytes().to_vec()))
            .await
            .context("unlock timed out")?
            .context("unlock")?;
        Ok(())
    }

    async fn close_session(&mut self) {
        self.stop_keepalive();
        if let Some(lease) = self.lease.take() {
            let _ = tokio::time::timeout(RPC_TIMEOUT, self.etcd.lease_revoke(lease)).await;
        }
    }
}

/// Keeps `lease` alive every `interval`, as etcd's clientv3 does: a failed
/// keepalive is retried (a member may be restarting, a leader being elected) until
/// the lease's TTL has run out since the last success; then, or at once when etcd
/// answers TTL 0 (the lease is gone), it says why on `lost` and stops.
async fn keepalive(
    mut etcd: Client,
    lease: i64,
    interval: Duration,
    lost: watch::Sender<Option<String>>,
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
    let _ = lost.send(Some(reason));
}
