//! Kubernetes behind the lock-service seam: holders and sessions read off the
//! Leases' `holderIdentity`, `expire-session` as the harness writing a holder of
//! its own into the Lease (what an operator with `kubectl` could do), and the
//! observer as a watch on the Leases through the API.
//!
//! The observer's record is the grant order: every change of a Lease's holder,
//! with the resourceVersion of the write that made it (the acquiring write's, so
//! the same number the elector reports). A term ends when another identity takes
//! the Lease or the Lease is deleted: that ends the old holder's session.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, ObjectList, WatchEvent, WatchParams};

use super::lease::{self, Record, HARNESS_IDENTITY};
use crate::record::history::monotonic_ns;
use crate::record::observe::{gap, Observation, ObservationWriter};
use crate::scenario::ServiceKind;
use crate::systems::service::{Holder, LockService, ServiceAccess, SessionOwner};

const CALL: Duration = Duration::from_secs(3);

/// A member answers as etcd (`GET /health` over HTTP, `{"health":"true"}`) or as
/// an apiserver (`GET /readyz` over HTTPS, 200: the apiserver lets anyone read it).
/// The certificate is not checked here: readiness, not trust.
pub async fn wait_ready(what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .danger_accept_invalid_certs(true)
        .build()?;
    let until = std::time::Instant::now() + deadline;
    loop {
        let last;
        match http.get(format!("http://{client}/health")).send().await {
            Ok(r) if r.status().is_success() => {
                if r.text()
                    .await
                    .unwrap_or_default()
                    .contains("\"health\":\"true\"")
                {
                    return Ok(());
                }
                last = "etcd not healthy yet".into();
            }
            _ => match http.get(format!("https://{client}/readyz")).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("/readyz answered {}", r.status()),
                Err(e) => last = e.to_string(),
            },
        }
        if std::time::Instant::now() >= until {
            bail!("{what} did not become ready within {deadline:?} ({last})");
        }
        // The poll's interval, not a wait for readiness.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long the harness's own holder holds a Lease it took (`expire-session`):
/// one second, so the workers' electors may take it over a second after they see
/// it, as after any expiry.
const HARNESS_HOLD: Duration = Duration::from_secs(1);

pub struct KubeService {
    api: Api<Lease>,
    /// The Leases as listed when the harness connected, before any worker started.
    /// The observer watches on from this list's version, so that a Lease taken and
    /// renewed before the observer's task got to list is still seen at the write
    /// that took it: listed later, the list shows only its latest renewal's
    /// version, which is not the grant's (seen in CI under load, as "the client's
    /// `revision` is not the creation the harness observed").
    first_list: std::sync::Mutex<Option<ObjectList<Lease>>>,
}

impl KubeService {
    pub async fn connect(clients: &[SocketAddr], access: &ServiceAccess) -> Result<KubeService> {
        let api_addr = clients.last().context("no apiserver")?;
        let api = lease::api(&api_addr.to_string(), access)?;
        let first = tokio::time::timeout(CALL, api.list(&ListParams::default()))
            .await
            .context("the apiserver did not answer the first Lease list")?
            .context("the first Lease list")?;
        Ok(KubeService {
            api,
            first_list: std::sync::Mutex::new(Some(first)),
        })
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let l = tokio::time::timeout(CALL, self.api.list(&ListParams::default()))
            .await
            .context("the apiserver did not answer the Lease list")??;
        Ok(l.items
            .into_iter()
            .filter(|l| l.metadata.name.as_deref().and_then(lease::key_of).is_some())
            .collect())
    }
}

#[async_trait::async_trait]
impl LockService for KubeService {
    fn kind(&self) -> ServiceKind {
        ServiceKind::Kubernetes
    }

    async fn holders(&self) -> Result<Vec<Holder>> {
        Ok(self
            .leases()
            .await?
            .iter()
            .filter_map(|l| {
                let key = lease::key_of(l.metadata.name.as_deref()?)?.to_string();
                let o = Record::of(l).owner()?;
                Some(Holder {
                    worker: o.worker,
                    pid: o.pid,
                    session: o.session,
                    // The Lease's version now (a renew moves it on); the grant as
                    // the observer recorded it is in service.jsonl.
                    grant: lease::resource_version(l),
                    key,
                })
            })
            .collect())
    }

    async fn sessions(&self) -> Result<Vec<SessionOwner>> {
        let mut owners = std::collections::BTreeMap::new();
        for l in self.leases().await? {
            if let Some(o) = Record::of(&l).owner() {
                owners.insert(o.session, (o.worker, o.pid));
            }
        }
        Ok(SessionOwner::from_map(owners))
    }

    async fn leader(&self) -> Result<usize> {
        bail!("kubernetes has no leader to target (the apiserver is one member)")
    }

    async fn expire_session(&self, session: i64) -> Result<serde_json::Value> {
        for l in self.leases().await? {
            let rec = Record::of(&l);
            if rec.owner().map(|o| o.session) != Some(session) {
                continue;
            }
            let taken = lease::taken_by(&l, HARNESS_IDENTITY, HARNESS_HOLD);
            let done = tokio::time::timeout(CALL, lease::replace(&self.api, &taken))
                .await
                .context("the apiserver did not answer the takeover")??;
            return Ok(serde_json::json!({
                "lease": l.metadata.name,
                "holder": rec.holder,
                "taken_by": HARNESS_IDENTITY,
                "resource_version": lease::resource_version(&done),
            }));
        }
        bail!("no Lease is held by session {session}")
    }

    async fn observe(
        &self,
        out: ObservationWriter,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let mut state = Terms::default();
        loop {
            // List, then watch from the list's version; after a gap, list again and
            // judge the differences as changes seen late.
            let lp = ListParams::default();
            let first = self.first_list.lock().ok().and_then(|mut f| f.take());
            let listed = match first {
                Some(l) => Ok(Ok(l)),
                None => tokio::select! {
                    l = tokio::time::timeout(CALL, self.api.list(&lp)) => l,
                    _ = stop.changed() => return Ok(()),
                },
            };
            let list = match listed {
                Ok(Ok(l)) => l,
                Ok(Err(e)) => {
                    gap(&out, format!("list: {e}"), &mut stop).await;
                    if *stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
                Err(_) => {
                    gap(&out, "list: no answer".into(), &mut stop).await;
                    if *stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
            };
            let now = monotonic_ns();
            for l in &list.items {
                for o in state.on_lease(now, l, false) {
                    out.write(&o);
                }
            }
            let from = list.metadata.resource_version.unwrap_or_default();
            let wp = WatchParams::default().timeout(290);
            let stream = match self.api.watch(&wp, &from).await {
                Ok(s) => s,
                Err(e) => {
                    gap(&out, format!("watch: {e}"), &mut stop).await;
                    if *stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
            };
            let mut stream = stream.boxed();
            // Listed, and watching from the list's version: nothing falls between.
            out.ready();
            loop {
                let ev = tokio::select! {
                    e = stream.next() => e,
                    _ = stop.changed() => {
                        self.settle(&mut stream, &mut state, &out).await;
                        return Ok(());
                    }
                };
                let now = monotonic_ns();
                match ev {
                    Some(Ok(WatchEvent::Error(e))) => {
                        gap(&out, format!("watch: {}", e.message), &mut stop).await;
                        break;
                    }
                    Some(Ok(ev)) => {
                        for o in on_event(&mut state, now, ev) {
                            out.write(&o);
                        }
                    }
                    Some(Err(e)) => {
                        gap(&out, format!("watch: {e}"), &mut stop).await;
                        break;
                    }
                    // The server's watch timeout: watch again from a new list.
                    None => break,
                }
            }
            if *stop.borrow() {
                return Ok(());
            }
        }
    }
}

/// What one watch event makes of the Leases' terms.
fn on_event(state: &mut Terms, now: u64, ev: WatchEvent<Lease>) -> Vec<Observation> {
    match ev {
        WatchEvent::Added(l) | WatchEvent::Modified(l) => state.on_lease(now, &l, false),
        WatchEvent::Deleted(l) => state.on_lease(now, &l, true),
        WatchEvent::Bookmark(_) | WatchEvent::Error(_) => Vec::new(),
    }
}

/// How long the observer keeps reading after the run asked it to stop, and how
/// long a quiet watch counts as drained.
const SETTLE_MAX: Duration = Duration::from_secs(3);
const SETTLE_QUIET: Duration = Duration::from_millis(500);

impl KubeService {
    /// Before the observer stops: what the watch still had in flight (the last
    /// grants of a run, answered just before the workers stopped, reach the
    /// watch after them), then one list, so that the Leases' last terms are in
    /// the record, seen late rather than missing (a grant missing from the
    /// record would be judged a phantom).
    async fn settle<S>(&self, stream: &mut S, state: &mut Terms, out: &ObservationWriter)
    where
        S: futures_util::Stream<Item = kube::Result<WatchEvent<Lease>>> + Unpin,
    {
        let until = tokio::time::Instant::now() + SETTLE_MAX;
        loop {
            let quiet =
                SETTLE_QUIET.min(until.saturating_duration_since(tokio::time::Instant::now()));
            match tokio::time::timeout(quiet, stream.next()).await {
                Ok(Some(Ok(ev))) => {
                    for o in on_event(state, monotonic_ns(), ev) {
                        out.write(&o);
                    }
                }
                _ => break,
            }
        }
        let left = until
            .saturating_duration_since(tokio::time::Instant::now())
            .max(CALL);
        if let Ok(Ok(list)) =
            tokio::time::timeout(left, self.api.list(&ListParams::default())).await
        {
            let now = monotonic_ns();
            for l in &list.items {
                for o in state.on_lease(now, l, false) {
                    out.write(&o);
                }
            }
        }
    }
}

/// The current term of each Lease, and what a change of it means: pure, so the
/// observer's reading of Lease changes is tested without an apiserver.
#[derive(Default)]
pub struct Terms {
    /// Lease name → (holder identity, the resourceVersion that made it holder).
    held: HashMap<String, (String, i64)>,
}

impl Terms {
    /// The observations a Lease seen now (or deleted) makes.
    pub fn on_lease(&mut self, now: u64, l: &Lease, deleted: bool) -> Vec<Observation> {
        let Some(name) = l.metadata.name.clone() else {
            return Vec::new();
        };
        let Some(key) = lease::key_of(&name).map(str::to_string) else {
            return Vec::new();
        };
        let rec = Record::of(l);
        let holder = if deleted { None } else { rec.holder.clone() };
        let mut out = Vec::new();
        let before = self.held.get(&name).cloned();
        if before.as_ref().map(|(h, _)| h) == holder.as_ref() {
            return out;
        }
        if let Some((old, grant)) = before {
            self.held.remove(&name);
            if let Some(o) = crate::record::observe::OwnerValue::parse(&old) {
                out.push(Observation::Deleted {
                    time_ns: now,
                    key: key.clone(),
                    grant,
                    session: o.session,
                    id: name.clone(),
                });
                // Let go of (no holder now) is a release; taken by another
                // identity, or the Lease deleted, ends the term's session.
                if holder.is_some() || deleted {
                    out.push(Observation::SessionEnded {
                        time_ns: now,
                        session: o.session,
                        worker: Some(o.worker),
                    });
                }
            }
        }
        if let Some(h) = holder {
            self.held
                .insert(name.clone(), (h.clone(), rec.resource_version));
            if let Some(o) = crate::record::observe::OwnerValue::parse(&h) {
                out.push(Observation::Created {
                    time_ns: now,
                    key,
                    grant: rec.resource_version,
                    session: o.session,
                    id: name,
                    value: Some(h),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(l: &Lease, rv: i64) -> Lease {
        let mut l = l.clone();
        l.metadata.resource_version = Some(rv.to_string());
        l
    }

    #[test]
    fn a_takeover_ends_the_old_term_and_its_session_and_a_renew_is_nothing() {
        let d = Duration::from_secs(3);
        let mut t = Terms::default();
        let a = at(&lease::new_lease("fencecheck-k0", "0:10:7:0", d), 100);
        let o = t.on_lease(1, &a, false);
        assert!(
            matches!(&o[..], [Observation::Created { grant: 100, session: 7, key, .. }] if key == "k0"),
            "{o:?}"
        );
        // A renew: same holder, new version.
        assert!(t
            .on_lease(2, &at(&lease::taken_by(&a, "0:10:7:0", d), 101), false)
            .is_empty());
        let b = at(&lease::taken_by(&a, "1:11:8:0", d), 105);
        let o = t.on_lease(3, &b, false);
        assert!(
            matches!(
                &o[..],
                [
                    Observation::Deleted {
                        grant: 100,
                        session: 7,
                        ..
                    },
                    Observation::SessionEnded {
                        session: 7,
                        worker: Some(0),
                        ..
                    },
                    Observation::Created {
                        grant: 105,
                        session: 8,
                        ..
                    },
                ]
            ),
            "{o:?}"
        );
        // Released: the term ends, the session does not.
        let o = t.on_lease(4, &at(&lease::released(&b), 106), false);
        assert!(
            matches!(&o[..], [Observation::Deleted { session: 8, .. }]),
            "{o:?}"
        );
        // The harness's own holder ends a term but makes none of a worker's.
        let c = at(&lease::taken_by(&b, "2:12:9:0", d), 110);
        t.on_lease(5, &c, false);
        let o = t.on_lease(
            6,
            &at(&lease::taken_by(&c, HARNESS_IDENTITY, d), 111),
            false,
        );
        assert!(
            matches!(
                &o[..],
                [
                    Observation::Deleted { session: 9, .. },
                    Observation::SessionEnded { session: 9, .. }
                ]
            ),
            "{o:?}"
        );
    }
}
