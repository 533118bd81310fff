//! Redis and Redlock behind the lock-client seam, on the `redis` crate.
//!
//! - The lock of storage key `k` is the Redis key `fencecheck:lock:k`, taken with
//!   `SET key owner NX PX ttl` inside a script that, atomically with a successful
//!   SET, `INCR`s the per-lock counter `fencecheck:token:k` (the `counter` token)
//!   and `PUBLISH`es the grant on [`EVENTS`], so the harness sees every grant in
//!   the instance's own order (the client never reports it).
//! - The owner value is `<worker>:<pid>:<session>:<nonce>`: unique per acquisition
//!   (a random nonce), and it names its worker so the harness can find holders.
//! - A "session" is the client's own: Redis has none. It is lost when a lock key
//!   of it turns out gone (a renewal or a release found another value, or none),
//!   which is when the service ended the hold.
//! - `redis` (one instance): the key is renewed every TTL/3 by compare-and-pexpire;
//!   release is compare-and-delete. `redlock`: Redlock as published — the script
//!   on every master at once, each call bounded by a small timeout; held when a
//!   majority granted within the validity time (TTL − elapsed − drift), else
//!   released on all and retried after a random delay; no renewal (the published
//!   algorithm holds for the validity time); release on all. With `token =
//!   "counter"` the INCR runs on the first instance only and the lock is held only
//!   when that instance granted too: one instance is then a single point of
//!   failure, for the token and for progress.
//!
//! The client cannot know the grant's place in any order: `Granted::grant` is the
//! acquisition's nonce, which `check::resolve` replaces after the run with the
//! number the harness's observer gave the grant.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::Rng;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;
use tokio::time::Instant;

use super::keys::{lock_key, Owner, ACQUIRE, EVENTS, RELEASE, RENEW, TOKEN_PREFIX};
use crate::scenario::TokenMode;
use crate::systems::client::{Acquire, ClientConfig, Granted, LockClient, Session, RPC_TIMEOUT};

/// A positive random i64: session ids and nonces (never 0, never negative, so
/// they read the same in every log).
fn random_id() -> i64 {
    rand::thread_rng().gen_range(1..i64::MAX)
}

/// Connects to `endpoint` ("host:port"), bounded.
pub async fn connect(endpoint: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{endpoint}/"))
        .with_context(|| format!("bad Redis address {endpoint}"))?;
    tokio::time::timeout(RPC_TIMEOUT, client.get_multiplexed_tokio_connection())
        .await
        .with_context(|| format!("connecting to Redis at {endpoint} timed out"))?
        .with_context(|| format!("connecting to Redis at {endpoint}"))
}

/// Runs a script with `keys` and `args`, bounded by `limit`.
pub async fn eval(
    con: &mut MultiplexedConnection,
    script: &str,
    keys: &[&str],
    args: &[String],
    limit: Duration,
) -> Result<i64> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
    tokio::time::timeout(limit, cmd.query_async::<i64>(con))
        .await
        .context("Redis did not answer in time")?
        .context("Redis script")
}

pub struct RedisClient {
    endpoints: Vec<String>,
    /// One connection per instance, opened on first use and dropped on error.
    cons: Vec<Option<MultiplexedConnection>>,
    redlock: bool,
    /// Redlock with `token = "counter"`: the counter is the first instance's INCR,
    /// and a majority without the first instance is not held (a single point).
    counter_on_first: bool,
    ttl: Duration,
    worker: u32,
    session: i64,
    lost: Arc<watch::Sender<Option<String>>>,
    /// The renewal task of the held lock (`redis` only).
    renewal: Option<tokio::task::JoinHandle<()>>,
    /// Owner value → lock name, for every acquisition handed to the caller with an
    /// id (granted, or unknown), until it is released.
    names: HashMap<String, String>,
}

impl RedisClient {
    /// `redlock`: the registry's word for which of the two this is.
    pub async fn connect(cfg: &ClientConfig, redlock: bool) -> Result<RedisClient> {
        if cfg.endpoints.is_empty() {
            bail!("no Redis endpoints");
        }
        let (tx, _) = watch::channel(None);
        Ok(RedisClient {
            endpoints: cfg.endpoints.clone(),
            cons: vec![None; cfg.endpoints.len()],
            redlock,
            counter_on_first: redlock && cfg.token == TokenMode::Counter,
            ttl: cfg.ttl,
            worker: cfg.worker,
            session: 0,
            lost: Arc::new(tx),
            renewal: None,
            names: HashMap::new(),
        })
    }

    fn majority(&self) -> usize {
        self.endpoints.len() / 2 + 1
    }

    /// Instance `i`'s connection, opened if need be.
    async fn con(&mut self, i: usize) -> Result<MultiplexedConnection> {
        if let Some(c) = &self.cons[i] {
            return Ok(c.clone());
        }
        let c = connect(&self.endpoints[i]).await?;
        self.cons[i] = Some(c.clone());
        Ok(c)
    }

    /// Every instance's connection (None where it cannot be had now), concurrently.
    async fn all_cons(&mut self) -> Vec<Option<MultiplexedConnection>> {
        let missing: Vec<usize> = (0..self.cons.len())
            .filter(|&i| self.cons[i].is_none())
            .collect();
        let opened =
            futures_util::future::join_all(missing.iter().map(|&i| connect(&self.endpoints[i])))
                .await;
        for (i, c) in missing.into_iter().zip(opened) {
            self.cons[i] = c.ok();
        }
        self.cons.clone()
    }

    fn stop_renewal(&mut self) {
        if let Some(t) = self.renewal.take() {
            t.abort();
        }
    }

    fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    fn mark_lost(&self, why: &str) {
        self.lost.send_if_modified(|v| {
            if v.is_some() {
                return false;
            }
            *v = Some(why.to_string());
            true
        });
    }

    /// Redlock's per-instance bound: small against the TTL, as the algorithm asks,
    /// but not so small that a busy 2-core machine misses a local answer.
    fn instance_timeout(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(50))
    }

    /// One Redlock attempt: the script on every master at once. Returns how many
    /// granted, how many gave no answer (timed out or failed: the key may be set
    /// there all the same), how long it took, and the first instance's counter if
    /// it granted (the INCR runs there only).
    async fn redlock_attempt(&mut self, name: &str, owner: &str) -> Attempt {
        let start = Instant::now();
        let (key, tkey) = (lock_key(name), format!("{TOKEN_PREFIX}{name}"));
        let limit = self.instance_timeout();
        let cons = self.all_cons().await;
        let calls = cons.into_iter().enumerate().map(|(i, c)| {
            let (key, tkey) = (key.clone(), tkey.clone());
            let args = [
                owner.to_string(),
                self.ttl.as_millis().to_string(),
                EVENTS.to_string(),
                if i == 0 { "1" } else { "0" }.to_string(),
            ];
            async move {
                let mut c = c?;
                eval(&mut c, ACQUIRE, &[&key, &tkey], &args, limit)
                    .await
                    .ok()
            }
        });
        let answers = futures_util::future::join_all(calls).await;
        // A call that failed or timed out leaves its connection unusable (a dead
        // instance, or a reply still owed on a multiplexed connection): opened
        // again on the next attempt.
        for (i, a) in answers.iter().enumerate() {
            if a.is_none() {
                self.cons[i] = None;
            }
        }
        Attempt {
            granted: answers.iter().filter(|a| a.is_some_and(|t| t >= 0)).count(),
            unanswered: answers.iter().filter(|a| a.is_none()).count(),
            elapsed: start.elapsed(),
            first: answers.first().copied().flatten().filter(|&t| t >= 0),
        }
    }

    /// Compare-and-delete on every instance; returns how many still had it.
    async fn release_all(&mut self, name: &str, owner: &str) -> Result<usize> {
        let key = lock_key(name);
        let args = [owner.to_string(), EVENTS.to_string()];
        let cons = self.all_cons().await;
        let calls = cons.into_iter().map(|c| {
            let (key, args) = (key.clone(), args.clone());
            async move {
                let mut c = c.context("no connection")?;
                eval(&mut c, RELEASE, &[&key], &args, RPC_TIMEOUT).await
            }
        });
        let answers = futures_util::future::join_all(calls).await;
        let mut ours = 0;
        let mut errors = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(n) => ours += n.max(0) as usize,
                Err(e) => {
                    self.cons[i] = None;
                    errors.push(format!("{}: {e:#}", self.endpoints[i]));
                }
            }
        }
        if errors.len() == self.endpoints.len() {
            bail!("release reached no instance: {}", errors.join("; "));
        }
        Ok(ours)
    }

    async fn acquire_redis(&mut self, name: &str, owner: Owner) -> Acquire {
        let (key, tkey) = (lock_key(name), format!("{TOKEN_PREFIX}{name}"));
        let args = [
            owner.to_string(),
            self.ttl.as_millis().to_string(),
            EVENTS.to_string(),
            "1".to_string(),
        ];
        loop {
            let mut con = match self.con(0).await {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match eval(&mut con, ACQUIRE, &[&key, &tkey], &args, RPC_TIMEOUT).await {
                Ok(t) if t >= 0 => {
                    self.start_renewal(con, key, owner.to_string());
                    return Acquire::Granted(Granted {
                        grant: owner.nonce,
                        session: self.session,
                        id: owner.to_string(),
                        counter: Some(t),
                        external: None,
                    });
                }
                // Held by another: poll again soon, with jitter so waiters spread.
                Ok(_) => {
                    let ms = rand::thread_rng().gen_range(10..40);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                // The SET may have happened: let the caller release it.
                Err(e) => {
                    self.cons[0] = None;
                    return Acquire::Unknown {
                        error: format!("{e:#}"),
                        id: Some(owner.to_string()),
                    };
                }
            }
        }
    }

    /// Renews the key every TTL/3 until it is found gone (the session is then
    /// lost) or no renewal has succeeded for a whole TTL (the key has expired by
    /// then whatever happened to it). After a failed call the connection is
    /// opened again: a multiplexed connection matches replies to requests in
    /// order, so one request lost on the way (a partition drops bytes) would hand
    /// every later request the reply meant for the one before.
    fn start_renewal(&mut self, mut con: MultiplexedConnection, key: String, owner: String) {
        let (ttl, lost) = (self.ttl, self.lost.clone());
        let endpoint = self.endpoints[0].clone();
        let mark = move |why: &str| {
            lost.send_if_modified(|v| {
                if v.is_some() {
                    return false;
                }
                *v = Some(why.to_string());
                true
            });
        };
        self.stop_renewal();
        self.renewal = Some(tokio::spawn(async move {
            let args = [owner, ttl.as_millis().to_string()];
            let mut last_ok = Instant::now();
            loop {
                tokio::time::sleep(ttl / 3).await;
                match eval(&mut con, RENEW, &[&key], &args, ttl / 3).await {
                    Ok(1) => last_ok = Instant::now(),
                    Ok(_) => {
                        mark("lock key expired or taken (renewal found it gone)");
                        return;
                    }
                    Err(_) if last_ok.elapsed() >= ttl => {
                        mark("no renewal succeeded for a whole TTL");
                        return;
                    }
                    Err(_) => {
                        if let Ok(Ok(c)) = tokio::time::timeout(ttl / 3, connect(&endpoint)).await {
                            con = c;
                        }
                    }
                }
            }
        }));
    }
}

/// What one Redlock attempt got (see `RedisClient::redlock_attempt`).
struct Attempt {
    granted: usize,
    unanswered: usize,
    elapsed: Duration,
    first: Option<i64>,
}

#[async_trait::async_trait]
impl LockClient for RedisClient {
    async fn open_session(&mut self) -> Result<Session> {
        self.stop_renewal();
        let (tx, rx) = watch::channel(None);
        self.lost = Arc::new(tx);
        self.session = random_id();
        Ok(Session {
            id: self.session,
            lost: rx,
        })
    }

    async fn acquire(&mut self, name: &str) -> Acquire {
        if self.session == 0 || self.is_lost() {
            return Acquire::Failed {
                error: "session lost".into(),
                session_gone: true,
                told: None,
            };
        }
        let owner = Owner {
            worker: self.worker,
            pid: std::process::id(),
            session: self.session,
            nonce: random_id(),
        };
        if !self.redlock {
            self.names.insert(owner.to_string(), name.to_string());
            let res = self.acquire_redis(name, owner).await;
            return res;
        }
        let drift = self.ttl / 100 + Duration::from_millis(2);
        let mut owner = owner;
        loop {
            // A fresh owner value per attempt: an attempt given up (a minority, too
            // slow, or — with the counter — without the first instance) may still
            // have been a majority for a moment, which the harness's observer numbers
            // as a grant; the next attempt must not pass for it.
            let id = owner.to_string();
            self.names.insert(id.clone(), name.to_string());
            let began = Instant::now();
            let a = self.redlock_attempt(name, &id).await;
            let held = a.granted >= self.majority()
                && a.elapsed + drift < self.ttl
                && (!self.counter_on_first || a.first.is_some());
            if held {
                return Acquire::Granted(Granted {
                    grant: owner.nonce,
                    session: self.session,
                    id,
                    counter: a.first,
                    external: None,
                });
            }
            // As published: unlock every instance, even those it believes it
            // failed to lock — an unanswered call may have set the key.
            let maybe_majority = a.granted + a.unanswered >= self.majority();
            let mut ours = None;
            if a.granted > 0 || maybe_majority {
                match self.release_all(name, &id).await {
                    Ok(n) => ours = Some(n),
                    Err(e) if a.granted > 0 => {
                        return Acquire::Unknown {
                            error: format!("releasing a minority grant: {e:#}"),
                            id: Some(id),
                        };
                    }
                    // Nothing known to be set: what was, expires.
                    Err(_) => {}
                }
            }
            self.names.remove(&id);
            // An attempt that may have been a majority — a grant in the
            // observer's numbering — and has lasted a TTL (the holder was paused
            // within it: its answers timed out) may have expired at the service
            // before it let go, which ends the session there. Given up here too,
            // as `release` does, so the next grants are not made on a session the
            // service has ended.
            let could_expire = began.elapsed() + drift >= self.ttl;
            if maybe_majority && could_expire && ours.is_none_or(|n| n < self.majority()) {
                self.mark_lost("an attempt that may have held a majority outlived the TTL");
                return Acquire::Failed {
                    error: "session lost: an attempt outlived the TTL before it let go".into(),
                    session_gone: true,
                    told: None,
                };
            }
            // The published algorithm's random delay before retrying.
            let ms = rand::thread_rng().gen_range(10..60);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            owner.nonce = random_id();
        }
    }

    async fn release(&mut self, g: &Granted) -> Result<()> {
        self.stop_renewal();
        let name = self
            .names
            .remove(&g.id)
            .context("release of a grant this client did not make")?;
        // A release that did not find the key on a majority leaves the hold to end
        // at the service (by expiry, or it already had): the observer will say the
        // session ended then, so the session is given up here too, and later
        // grants are made under a new one.
        match self.release_all(&name, &g.id).await {
            Ok(ours) if ours >= self.majority() => Ok(()),
            Ok(_) => {
                self.mark_lost(
                    "lock key already gone at release: the hold had ended at the service",
                );
                Ok(())
            }
            Err(e) => {
                self.mark_lost("release not confirmed: the key is left to expire");
                Err(e)
            }
        }
    }

    async fn close_session(&mut self) {
        self.stop_renewal();
    }
}
