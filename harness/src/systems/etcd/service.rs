//! etcd behind the lock-service seam: holders read from the lock keys (the oldest key under a
//! lock's prefix holds; its lease's owner key names the worker), the leader from
//! each member's status, `expire-session` as LeaseRevoke, and the observer as a
//! watch on fencecheck's prefix.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};

use crate::record::history::monotonic_ns;
use crate::record::observe::{gap, Observation, ObservationWriter};
use crate::scenario::ServiceKind;
use crate::systems::etcd::keys::{LOCK_PREFIX, OWNER_PREFIX};
use crate::systems::service::{Holder, LockService, SessionOwner};

const CALL: Duration = Duration::from_secs(3);

/// Polls `http://client/health` until etcd answers `{"health":"true"}`.
pub async fn wait_ready(what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
    crate::proc::wait_http_healthy(what, client, deadline).await
}

pub struct EtcdService {
    etcd: Client,
    endpoints: Vec<String>,
}

impl EtcdService {
    pub async fn connect(clients: &[SocketAddr]) -> Result<EtcdService> {
        let endpoints: Vec<String> = clients.iter().map(|a| format!("http://{a}")).collect();
        let etcd = Client::connect(
            &endpoints,
            Some(ConnectOptions::new().with_connect_timeout(Duration::from_secs(2))),
        )
        .await
        .context("cannot connect to etcd")?;
        Ok(EtcdService { etcd, endpoints })
    }

    /// lease → (worker, pid), from the owner keys.
    async fn owners(&self) -> Result<BTreeMap<i64, (u32, u32)>> {
        let mut etcd = self.etcd.clone();
        let resp = tokio::time::timeout(
            CALL,
            etcd.get(OWNER_PREFIX, Some(GetOptions::new().with_prefix())),
        )
        .await
        .context("etcd did not answer the owner look-up")??;
        let mut out = BTreeMap::new();
        for kv in resp.kvs() {
            if let Some((w, p)) = parse_owner(kv.value_str().unwrap_or_default()) {
                out.insert(kv.lease(), (w, p));
            }
        }
        Ok(out)
    }
}

fn parse_owner(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The storage key a lock entry guards, wherever a library put it
/// ([`crate::systems::entry`]): `fencecheck/lock/<key>/<lease hex>` (etcd's Lock
/// RPC, Go's `concurrency.Mutex`), `/locks/fencecheck/lock/<key>` (python-etcd3,
/// which prefixes the name it is given), or a library's own name with the
/// storage key as a segment (`/tooz/locks/k3`). Never the harness's owner keys.
fn lock_of(etcd_key: &str) -> Option<&str> {
    if etcd_key.starts_with(OWNER_PREFIX) {
        return None;
    }
    crate::systems::entry::storage_key(etcd_key, LOCK_PREFIX)
}

/// Lock entries live wherever the library writes them (python-etcd3 under
/// `/locks/`), so the harness reads and watches the whole keyspace and keeps
/// what [`lock_of`] recognises; fencecheck's runs own their cluster.
fn whole_keyspace() -> (&'static str, GetOptions) {
    ("\0", GetOptions::new().with_from_key())
}

#[async_trait::async_trait]
impl LockService for EtcdService {
    fn kind(&self) -> ServiceKind {
        ServiceKind::Etcd
    }

    async fn holders(&self) -> Result<Vec<Holder>> {
        let mut etcd = self.etcd.clone();
        let (from, all) = whole_keyspace();
        let resp = tokio::time::timeout(CALL, etcd.get(from, Some(all)))
            .await
            .context("etcd did not answer the holder look-up")??;
        // Lock → (CreateRevision, lease) of its oldest key: the holder.
        let mut first: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for kv in resp.kvs() {
            let Some(lock) = lock_of(kv.key_str().unwrap_or_default()) else {
                continue;
            };
            let e = first.entry(lock.to_string()).or_insert((i64::MAX, 0));
            if kv.create_revision() < e.0 {
                *e = (kv.create_revision(), kv.lease());
            }
        }
        let owners = self.owners().await?;
        Ok(first
            .into_iter()
            .filter_map(|(key, (grant, session))| {
                let (worker, pid) = *owners.get(&session)?;
                Some(Holder {
                    worker,
                    pid,
                    session,
                    grant,
                    key,
                })
            })
            .collect())
    }

    async fn sessions(&self) -> Result<Vec<SessionOwner>> {
        Ok(SessionOwner::from_map(self.owners().await?))
    }

    async fn leader(&self) -> Result<usize> {
        for (i, ep) in self.endpoints.iter().enumerate() {
            let opts = ConnectOptions::new()
                .with_connect_timeout(Duration::from_millis(500))
                .with_timeout(Duration::from_secs(1));
            let status = async {
                let mut c = Client::connect([ep.as_str()], Some(opts)).await?;
                c.status().await
            };
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), status).await {
                let me = s.header().map(|h| h.member_id()).unwrap_or(0);
                if s.leader() != 0 && s.leader() == me {
                    return Ok(i);
                }
            }
        }
        bail!("no etcd member reports itself leader")
    }

    async fn holds(&self, entry: &str, value: Option<&str>) -> Result<Option<bool>> {
        let mut etcd = self.etcd.clone();
        let resp = tokio::time::timeout(CALL, etcd.get(entry, None))
            .await
            .context("etcd did not answer the entry look-up")??;
        Ok(Some(resp.kvs().iter().any(|kv| {
            value.is_none_or(|v| {
                entry_value(kv.value()).is_some_and(|o| o == v || hex(o.as_bytes()) == v)
            })
        })))
    }

    async fn expire_session(&self, session: i64) -> Result<serde_json::Value> {
        let mut etcd = self.etcd.clone();
        tokio::time::timeout(CALL, etcd.lease_revoke(session))
            .await
            .with_context(|| format!("revoke {session:x}: timed out"))?
            .with_context(|| format!("revoke {session:x}"))?;
        Ok(serde_json::json!({ "action": "LeaseRevoke", "lease": session }))
    }

    async fn observe(
        &self,
        out: ObservationWriter,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let mut etcd = self.etcd.clone();
        let mut from_rev = 0i64;
        loop {
            let opts = WatchOptions::new()
                .with_from_key()
                .with_prev_key()
                .with_start_revision(from_rev);
            let watch = tokio::select! {
                w = tokio::time::timeout(CALL, etcd.watch("\0", Some(opts))) => w,
                _ = stop.changed() => return Ok(()),
            };
            let mut stream = match watch {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    gap(&out, format!("watch: {e}"), &mut stop).await;
                    if *stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
                Err(_) => {
                    gap(&out, "watch: no answer".into(), &mut stop).await;
                    if *stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
            };
            loop {
                let msg = tokio::select! {
                    m = stream.message() => m,
                    _ = stop.changed() => {
                        self.settle(&mut stream, &out).await;
                        return Ok(());
                    }
                };
                let resp = match msg {
                    Ok(Some(r)) => r,
                    Ok(None) | Err(_) => {
                        gap(&out, "watch stream ended".into(), &mut stop).await;
                        break;
                    }
                };
                if resp.created() {
                    // The watch is up: it sends every change after the revision
                    // it started at (the member's, when none was asked), and a
                    // watch again after a lost stream starts right after it.
                    if from_rev == 0 {
                        from_rev = resp.header().map_or(0, |h| h.revision() + 1);
                    }
                    out.ready();
                }
                let now = monotonic_ns();
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    from_rev = from_rev.max(kv.mod_revision() + 1);
                    if let Some(o) = observation(now, ev.event_type(), kv, ev.prev_kv()) {
                        out.write(&o);
                    }
                }
            }
            if *stop.borrow() {
                return Ok(());
            }
        }
    }
}

/// How long the observer keeps reading after the run asked it to stop.
const SETTLE_MAX: Duration = Duration::from_secs(3);

impl EtcdService {
    /// Before the observer stops: what the watch still has in flight. The last
    /// grants of a run are answered just before the workers stop and reach the
    /// watch after; missing from the record, they would be judged phantoms. A
    /// linearizable read gives the revision every grant so far is at or below;
    /// the watch is read until its progress answer (etcd sends it once it has
    /// sent every event up to its member's revision) reaches that revision: the
    /// member watched may be a follower behind the leader. Within SETTLE_MAX.
    async fn settle(&self, stream: &mut etcd_client::WatchStream, out: &ObservationWriter) {
        let until = tokio::time::Instant::now() + SETTLE_MAX;
        let mut etcd = self.etcd.clone();
        let Ok(Ok(read)) = tokio::time::timeout_at(until, etcd.get(SETTLE_KEY, None)).await else {
            return;
        };
        let Some(target) = read.header().map(|h| h.revision()) else {
            return;
        };
        loop {
            if stream.request_progress().await.is_err() {
                return;
            }
            loop {
                let Ok(Ok(Some(resp))) = tokio::time::timeout_at(until, stream.message()).await
                else {
                    return;
                };
                if resp.events().is_empty() && !resp.created() && !resp.canceled() {
                    if resp.header().map_or(0, |h| h.revision()) >= target {
                        tracing::debug!("observer settled at revision {target}");
                        return;
                    }
                    break;
                }
                let now = monotonic_ns();
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    if let Some(o) = observation(now, ev.event_type(), kv, ev.prev_kv()) {
                        out.write(&o);
                    }
                }
            }
            // The member is behind: ask again shortly (the poll's interval).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A key no one writes: reading it is how the observer learns the current
/// revision.
const SETTLE_KEY: &str = "fencecheck-observer-settle";

/// A lock entry's value as text for matching an external client's `value`:
/// UTF-8 as is, anything else (python-etcd3's raw uuid bytes) as lowercase hex;
/// none when empty or long.
fn entry_value(v: &[u8]) -> Option<String> {
    if v.is_empty() || v.len() > 200 {
        return None;
    }
    Some(match std::str::from_utf8(v) {
        Ok(s) => s.to_string(),
        Err(_) => v.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// Lowercase hex of bytes: how a client sends a value that happens to be UTF-8
/// when it sends raw bytes as hex (docs/client-protocol.md).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn observation(
    now: u64,
    kind: EventType,
    kv: &etcd_client::KeyValue,
    prev: Option<&etcd_client::KeyValue>,
) -> Option<Observation> {
    let key = kv.key_str().ok()?;
    if let Some(lease_hex) = key.strip_prefix(OWNER_PREFIX) {
        if kind != EventType::Delete {
            return None;
        }
        let worker = prev
            .and_then(|p| parse_owner(p.value_str().ok()?))
            .map(|(w, _)| w);
        return Some(Observation::SessionEnded {
            time_ns: now,
            session: u64::from_str_radix(lease_hex, 16).ok()? as i64,
            worker,
        });
    }
    let lock = lock_of(key)?.to_string();
    match kind {
        EventType::Put if kv.create_revision() == kv.mod_revision() => Some(Observation::Created {
            time_ns: now,
            key: lock,
            grant: kv.create_revision(),
            session: kv.lease(),
            id: key.to_string(),
            value: entry_value(kv.value()),
        }),
        EventType::Delete => {
            let p = prev?;
            Some(Observation::Deleted {
                time_ns: now,
                key: lock,
                grant: p.create_revision(),
                session: p.lease(),
                id: key.to_string(),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lock_entries_are_recognised_wherever_a_library_writes_them() {
        assert_eq!(super::lock_of("fencecheck/lock/k3/694d8b1c2e"), Some("k3"));
        assert_eq!(super::lock_of("/locks/fencecheck/lock/k3"), Some("k3"));
        assert_eq!(super::lock_of("fencecheck/owner/694d"), None);
        assert_eq!(super::lock_of("/locks/other"), None);
        // A library's own prefix with another name given to it.
        assert_eq!(super::lock_of("/tooz/locks/k3"), Some("k3"));
        assert_eq!(super::lock_of("fencecheck/owner/k3"), None);
    }
}
