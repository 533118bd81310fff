//! fencecheck's own elector, behind the lock-client seam: client-go's
//! `tools/leaderelection` algorithm on a Lease per key, over kube-rs.
//!
//! - **acquire**: get the Lease; create it when missing; take it when it has no
//!   holder, is this session's, or is expired by *this elector's* clock (client-go
//!   measures expiry from when it last saw the record change, never from the
//!   record's own timestamps); every update carries the resourceVersion it read,
//!   so a concurrent change fails with 409. Otherwise try again every
//!   `retry_period`.
//! - **renew**: every `retry_period` while held; when a round of renewing has not
//!   succeeded within `renew_deadline`, stop leading: the session is lost.
//!   Between expiry at the service and that deadline the old leader still
//!   believes it leads — the window fencing has to cover.
//! - **grant**: the resourceVersion the acquiring write returned (the grant
//!   order, etcd's revision under it); `counter`: `leaseTransitions`.
//!
//! A session is an elector identity ([`lease::identity`]); a lost one is not
//! reused.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;

use super::lease::{self, Record};
use crate::systems::client::{Acquire, ClientConfig, Granted, LockClient, Session, RPC_TIMEOUT};

pub struct KubeClient {
    api: Api<Lease>,
    worker: u32,
    ttl: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    session: Option<Open>,
    /// Records last seen per Lease, and when (client-go's `observedTime`).
    seen: HashMap<String, (Record, Instant)>,
}

struct Open {
    id: i64,
    identity: String,
    lost: watch::Sender<Option<String>>,
    /// The renewer of each Lease held.
    renewing: HashMap<String, tokio::task::JoinHandle<()>>,
}

impl KubeClient {
    pub async fn connect(cfg: &ClientConfig) -> Result<KubeClient> {
        let access = cfg
            .access
            .as_ref()
            .context("the worker was not given the apiserver's token and CA")?;
        // The apiserver is the last member; the etcd members under it are not the
        // clients' business.
        let endpoint = cfg.endpoints.last().context("no apiserver endpoint")?;
        Ok(KubeClient {
            api: lease::api(endpoint, access)?,
            worker: cfg.worker,
            ttl: cfg.ttl,
            renew_deadline: cfg.renew_deadline.unwrap_or(cfg.ttl * 2 / 3),
            retry_period: cfg.retry_period.unwrap_or(cfg.ttl * 2 / 15),
            session: None,
            seen: HashMap::new(),
        })
    }

    /// One `tryAcquireOrRenew` of Lease `name` for `identity`: `Ok(Some(lease))`
    /// when this identity holds it now, `Ok(None)` when another one does.
    async fn try_acquire(&mut self, name: &str, identity: &str) -> Result<Option<Lease>> {
        let got = tokio::time::timeout(RPC_TIMEOUT, self.api.get_opt(name))
            .await
            .context("the apiserver did not answer the get")??;
        let Some(old) = got else {
            let l = lease::new_lease(name, identity, self.ttl);
            return match tokio::time::timeout(RPC_TIMEOUT, lease::create(&self.api, &l)).await {
                Ok(Ok(made)) => Ok(Some(made)),
                Ok(Err(e)) if lease::is_conflict(&e) => Ok(None),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => anyhow::bail!("the apiserver did not answer the create"),
            };
        };
        let rec = Record::of(&old);
        let now = Instant::now();
        let observed = match self.seen.get(name) {
            // client-go compares the whole record; the resourceVersion changes
            // with every write of it.
            Some((r, t)) if r.resource_version == rec.resource_version => *t,
            _ => now,
        };
        self.seen.insert(name.to_string(), (rec.clone(), observed));
        let mine = rec.holder.as_deref() == Some(identity);
        let expired = rec.holder.is_none()
            || observed + Duration::from_secs(rec.duration_s.max(0) as u64) < now;
        if !mine && !expired {
            return Ok(None);
        }
        let l = lease::taken_by(&old, identity, self.ttl);
        match tokio::time::timeout(RPC_TIMEOUT, lease::replace(&self.api, &l)).await {
            Ok(Ok(done)) => {
                self.seen
                    .insert(name.to_string(), (Record::of(&done), Instant::now()));
                Ok(Some(done))
            }
            Ok(Err(e)) if lease::is_conflict(&e) => Ok(None),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => anyhow::bail!("the apiserver did not answer the update"),
        }
    }
}

#[async_trait::async_trait]
impl LockClient for KubeClient {
    async fn open_session(&mut self) -> Result<Session> {
        self.close_session().await;
        let id = (rand::random::<i64>() & i64::MAX).max(1);
        let (tx, rx) = watch::channel(None);
        self.session = Some(Open {
            id,
            identity: lease::identity(self.worker, id),
            lost: tx,
            renewing: HashMap::new(),
        });
        Ok(Session { id, lost: rx })
    }

    async fn acquire(&mut self, key: &str) -> Acquire {
        let name = lease::lease_name(key);
        let Some((id, identity, lost)) = self
            .session
            .as_ref()
            .map(|s| (s.id, s.identity.clone(), s.lost.subscribe()))
        else {
            return Acquire::Failed {
                error: "no session".into(),
                session_gone: true,
                told: None,
            };
        };
        loop {
            if let Some(why) = lost.borrow().clone() {
                return Acquire::Failed {
                    error: why,
                    session_gone: true,
                    told: None,
                };
            }
            match self.try_acquire(&name, &identity).await {
                Ok(Some(l)) => {
                    let rec = Record::of(&l);
                    let renewer = tokio::spawn(renew(
                        self.api.clone(),
                        name.clone(),
                        identity.clone(),
                        self.ttl,
                        self.retry_period,
                        self.renew_deadline,
                        self.session.as_ref().map(|s| s.lost.clone()),
                    ));
                    if let Some(s) = self.session.as_mut() {
                        if let Some(old) = s.renewing.insert(name.clone(), renewer) {
                            old.abort();
                        }
                    }
                    return Acquire::Granted(Granted {
                        grant: rec.resource_version,
                        session: id,
                        id: name,
                        counter: Some(rec.transitions as i64),
                        external: None,
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::debug!("acquire {name}: {e:#}"),
            }
            tokio::time::sleep(jittered(self.retry_period)).await;
        }
    }

    async fn release(&mut self, g: &Granted) -> Result<()> {
        let identity = match self.session.as_mut() {
            Some(s) => {
                if let Some(r) = s.renewing.remove(&g.id) {
                    r.abort();
                }
                s.identity.clone()
            }
            None => return Ok(()),
        };
        // A release that cannot be confirmed leaves the Lease naming this identity
        // until another elector takes it over by expiry, which the observer reads
        // as this session's end: so the session is given up here too, and later
        // grants are made under a new identity (as the Redis client does). Kept,
        // its next grant would be on a session the service had ended.
        match self.release_write(g, &identity).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.mark_lost(format!(
                    "release of {} not confirmed ({e:#}): the Lease is left to expire",
                    g.id
                ));
                Err(e)
            }
        }
    }

    async fn close_session(&mut self) {
        if let Some(s) = self.session.take() {
            for (_, r) in s.renewing {
                r.abort();
            }
        }
    }
}

impl KubeClient {
    /// The release itself: the Lease's holder cleared, when it still names us.
    async fn release_write(&mut self, g: &Granted, identity: &str) -> Result<()> {
        let got = tokio::time::timeout(RPC_TIMEOUT, self.api.get_opt(&g.id))
            .await
            .context("the apiserver did not answer the get")??;
        let holder = got.as_ref().and_then(|l| Record::of(l).holder);
        let Some(old) = got.filter(|_| holder.as_deref() == Some(identity)) else {
            // Not ours any more: the term was lost before the renewer's deadline
            // said so. This elector stops leading now, and says so once.
            self.mark_lost(format!(
                "stopped leading {}: at release the Lease's holder was {}",
                g.id,
                holder.as_deref().unwrap_or("nobody")
            ));
            return Ok(());
        };
        let l = lease::released(&old);
        tokio::time::timeout(RPC_TIMEOUT, lease::replace(&self.api, &l))
            .await
            .context("the apiserver did not answer the release")??;
        Ok(())
    }

    /// Says once that this session is lost (the worker then opens a new one).
    fn mark_lost(&self, why: String) {
        if let Some(s) = &self.session {
            s.lost.send_if_modified(|l| {
                let first = l.is_none();
                if first {
                    *l = Some(why);
                }
                first
            });
        }
    }
}

/// client-go's `wait.JitterUntil(…, RetryPeriod, JitterFactor = 1.2, …)`:
/// between one and 2.2 periods.
fn jittered(period: Duration) -> Duration {
    period + period.mul_f64(1.2 * rand::random::<f64>())
}

/// client-go's `renew`: every `retry` a round of `tryAcquireOrRenew` polled
/// every `retry` until it succeeds; a round that has not succeeded within
/// `deadline` stops leading (`OnStoppedLeading`): the session is lost.
async fn renew(
    api: Api<Lease>,
    name: String,
    identity: String,
    ttl: Duration,
    retry: Duration,
    deadline: Duration,
    lost: Option<watch::Sender<Option<String>>>,
) {
    loop {
        tokio::time::sleep(jittered(retry)).await;
        let round = Instant::now();
        loop {
            let left = deadline.saturating_sub(round.elapsed());
            if left.is_zero() {
                if let Some(l) = &lost {
                    let _ = l.send(Some(format!(
                        "stopped leading {name}: no renew succeeded within the renew deadline \
                         ({} ms)",
                        deadline.as_millis()
                    )));
                }
                return;
            }
            match tokio::time::timeout(left, renew_once(&api, &name, &identity, ttl)).await {
                Ok(Ok(true)) => break,
                Ok(Ok(false)) | Ok(Err(_)) => {}
                Err(_) => continue,
            }
            let left = deadline.saturating_sub(round.elapsed());
            tokio::time::sleep(retry.min(left)).await;
        }
    }
}

/// One renew: the Lease still ours, its renewTime moved on.
async fn renew_once(api: &Api<Lease>, name: &str, identity: &str, ttl: Duration) -> Result<bool> {
    let Some(old) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if Record::of(&old).holder.as_deref() != Some(identity) {
        return Ok(false);
    }
    let l = lease::taken_by(&old, identity, ttl);
    match lease::replace(api, &l).await {
        Ok(_) => Ok(true),
        Err(e) if lease::is_conflict(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
