//! Redis and Redlock behind the lock-service seam.
//!
//! The service: holders from the lock keys' owner values (the owner names its worker
//! and session; on Redlock the owner holding a majority of instances),
//! `expire-session` by deleting the session's lock keys on every instance (a
//! compare-and-delete that publishes what it did, so the observer sees it), and
//! the observer (`feed`): the grants and releases the scripts publish, and the
//! expiries Redis announces, numbered in the order the harness sees them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

/// Lua: every string key and its value, flat in `kv` (`KEYS` is fine on a
/// keyspace of a few keys; python-redis-lock's `lock-signal:` keys are lists).
/// A macro, so the scripts that use it are one literal each (`concat!`).
macro_rules! lua_string_keys {
    () => {
        "local kv = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  if redis.call('TYPE', k).ok == 'string' then
    kv[#kv + 1] = k
    kv[#kv + 1] = redis.call('GET', k)
  end
end
"
    };
}

mod feed;

use crate::record::observe::ObservationWriter;
use crate::scenario::ServiceKind;
use crate::systems::redis::client as proto;
use crate::systems::redis::keys::{self, Owner, EVENTS};
use crate::systems::service::{Holder, LockService, SessionOwner};

/// Bounds every call the harness makes to an instance.
const CALL: Duration = Duration::from_secs(2);
/// Deletes every lock key (KEYS) whose owner belongs to session ARGV[1], and
/// publishes each deletion; returns how many.
///
/// Keyspace events: `E$gx` — expired keys (`x`), and `set`/`del` (`$`, `g`) so
/// the observer sees the grants and releases of clients that announce nothing
/// (redis-py's `Lock`, through `[client]`).
const DELETE_SESSION: &str = r"
local n = 0
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then
    local _, _, s = string.find(v, '^[^:]*:[^:]*:([^:]*):')
    if s == ARGV[1] then
      -- Announced before the DEL: the observer also follows DEL keyspace events
      -- (as releases, for clients that publish nothing), and must learn first
      -- that this one ends a session.
      local m = 'deleted ' .. k .. ' ' .. v
      local id = redis.call('XADD', 'fencecheck:log', 'MAXLEN', '~', '100000', '*', 'm', m)
      redis.call('PUBLISH', ARGV[2], m .. ' ' .. id)
      redis.call('DEL', k)
      n = n + 1
    end
  end
end
return n
";

/// Polls PING until the instance answers PONG (not LOADING: an AOF being read).
pub async fn wait_ready(what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
    crate::proc::poll_until(what, deadline, || async move {
        let ping = async {
            let mut c = proto::connect(&client.to_string()).await?;
            let pong: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok::<_, anyhow::Error>(pong == "PONG")
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), ping).await,
            Ok(Ok(true))
        )
    })
    .await
}

/// The harness's handle: a connection per instance, directly (never through the
/// workers' proxies), opened again after an error.
pub struct RedisService {
    kind: ServiceKind,
    /// Redlock's independent masters (the registry's word), not one instance.
    redlock: bool,
    clients: Vec<SocketAddr>,
    cons: Mutex<Vec<Option<MultiplexedConnection>>>,
}

impl RedisService {
    pub async fn connect(
        kind: ServiceKind,
        redlock: bool,
        clients: &[SocketAddr],
    ) -> Result<RedisService> {
        let svc = RedisService {
            kind,
            redlock,
            clients: clients.to_vec(),
            cons: Mutex::new(vec![None; clients.len()]),
        };
        for i in 0..clients.len() {
            svc.con(i).await?;
        }
        Ok(svc)
    }

    fn majority(&self) -> usize {
        self.clients.len() / 2 + 1
    }

    async fn con(&self, i: usize) -> Result<MultiplexedConnection> {
        let mut cons = self.cons.lock().await;
        if let Some(c) = &cons[i] {
            return Ok(c.clone());
        }
        let c = proto::connect(&self.clients[i].to_string()).await?;
        cons[i] = Some(c.clone());
        Ok(c)
    }

    async fn forget(&self, i: usize) {
        self.cons.lock().await[i] = None;
    }

    /// Instance `i`'s lock keys (as named in Redis) and their values now.
    async fn locks_on(&self, i: usize) -> Result<BTreeMap<String, String>> {
        let mut c = self.con(i).await?;
        let res = tokio::time::timeout(CALL, read_locks(&mut c)).await;
        match res {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(e)) => {
                self.forget(i).await;
                Err(e)
            }
            Err(_) => {
                self.forget(i).await;
                bail!("Redis instance {i} did not answer in time")
            }
        }
    }

    /// (lock key, value) on a majority of instances, each value once per key.
    async fn on_majority(&self) -> Result<Vec<(String, String)>> {
        let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut errors = Vec::new();
        for i in 0..self.clients.len() {
            match self.locks_on(i).await {
                Ok(m) => {
                    for (k, v) in m {
                        *count.entry((k, v)).or_default() += 1;
                    }
                }
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        if errors.len() == self.clients.len() {
            bail!("no Redis instance answered: {}", errors.join("; "));
        }
        Ok(count
            .into_iter()
            .filter(|(_, n)| *n >= self.majority())
            .map(|(kv, _)| kv)
            .collect())
    }

    /// (lock key, owner) held on a majority of instances, for owners that are
    /// fencecheck's (a library's own random value names no worker).
    async fn held(&self) -> Result<Vec<(String, Owner)>> {
        Ok(self
            .on_majority()
            .await?
            .into_iter()
            .filter_map(|(k, v)| Some((k, Owner::parse(&v)?)))
            .collect())
    }
}

/// Every lock key (whatever the library named it, never the harness's own) and
/// its value; one script, so the keys and values are one moment's.
async fn read_locks(c: &mut MultiplexedConnection) -> Result<BTreeMap<String, String>> {
    const READ_ALL: &str = concat!(lua_string_keys!(), "return kv\n");
    // Bytes: a library's value need not be UTF-8 (read lossily, it is still
    // told apart), and one such value must not fail the whole read.
    let flat: Vec<Vec<u8>> = redis::cmd("EVAL")
        .arg(READ_ALL)
        .arg(0)
        .query_async(c)
        .await
        .context("reading the lock keys")?;
    Ok(lock_values(&flat))
}

/// The lock keys of a flat `key, value, …` list of strings (as bytes).
fn lock_values(flat: &[Vec<u8>]) -> BTreeMap<String, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    flat.chunks_exact(2)
        .map(|kv| (text(&kv[0]), text(&kv[1])))
        .filter(|(k, _)| keys::lock_of(k).is_some())
        .collect()
}

#[async_trait::async_trait]
impl LockService for RedisService {
    fn kind(&self) -> ServiceKind {
        self.kind
    }

    async fn holders(&self) -> Result<Vec<Holder>> {
        Ok(self
            .held()
            .await?
            .into_iter()
            .filter_map(|(key, o)| {
                Some(Holder {
                    worker: o.worker,
                    pid: o.pid,
                    session: o.session,
                    // The harness numbers grants only in its observer; the nonce
                    // identifies this one.
                    grant: o.nonce,
                    key: keys::lock_of(&key)?.to_string(),
                })
            })
            .collect())
    }

    async fn sessions(&self) -> Result<Vec<SessionOwner>> {
        let owners = self
            .held()
            .await?
            .into_iter()
            .map(|(_, o)| (o.session, (o.worker, o.pid)))
            .collect();
        Ok(SessionOwner::from_map(owners))
    }

    async fn leader(&self) -> Result<usize> {
        if self.redlock {
            bail!("Redlock's masters are independent: there is no leader");
        }
        // One instance is its own leader.
        Ok(0)
    }

    async fn expire_session(&self, session: i64) -> Result<serde_json::Value> {
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for i in 0..self.clients.len() {
            let res = async {
                let keys: Vec<String> = self.locks_on(i).await?.into_keys().collect();
                if keys.is_empty() {
                    return Ok(0);
                }
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                let mut c = self.con(i).await?;
                let args = [session.to_string(), EVENTS.to_string()];
                proto::eval(&mut c, DELETE_SESSION, &keys, &args, CALL).await
            }
            .await;
            match res {
                Ok(n) => deleted.push(n),
                Err(e) => {
                    self.forget(i).await;
                    deleted.push(0);
                    errors.push(format!("instance {i}: {e:#}"));
                }
            }
        }
        if deleted.iter().all(|&n| n == 0) {
            if errors.is_empty() {
                bail!("session {session} holds no lock key on any instance: already ended");
            }
            bail!(
                "cannot delete session {session}'s keys: {}",
                errors.join("; ")
            );
        }
        Ok(serde_json::json!({
            "action": "deleted the session's lock keys (compare-and-delete) on every instance",
            "session": session,
            "deleted_per_instance": deleted,
            "errors": errors,
        }))
    }

    async fn holds(&self, entry: &str, value: Option<&str>) -> Result<Option<bool>> {
        let Some(value) = value else {
            // A key with no value to compare says nothing of whose it is.
            return Ok(None);
        };
        Ok(Some(
            self.on_majority()
                .await?
                .iter()
                .any(|(k, v)| k == entry && v == value),
        ))
    }

    async fn member_time_us(&self, i: usize) -> Result<i64> {
        if i >= self.clients.len() {
            bail!("no Redis instance {i}");
        }
        let mut c = self.con(i).await?;
        let res = tokio::time::timeout(
            CALL,
            redis::cmd("TIME").query_async::<(String, String)>(&mut c),
        )
        .await;
        let (secs, micros) = match res {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                self.forget(i).await;
                return Err(e).context("TIME");
            }
            Err(_) => {
                self.forget(i).await;
                bail!("Redis instance {i} did not answer TIME in time");
            }
        };
        let secs: i64 = secs.parse().context("TIME seconds")?;
        let micros: i64 = micros.parse().context("TIME microseconds")?;
        Ok(secs * 1_000_000 + micros)
    }

    async fn observe(
        &self,
        out: ObservationWriter,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        feed::observe(&self.clients, out, stop).await
    }
}
