//! The network links the nemesis can break: every worker reaches each member of the
//! lock service and the storage through its own fault proxy (so one worker — the
//! holder — can be cut off alone), and every member is reached by its peers through
//! a proxy in front of each of its peer ports (see `backend::process`).

//!
//! Those proxies run in the harness's process ([`Link::Here`]), or, for worker
//! pods on a node that is not this machine, in a `fencecheck links serve` in a
//! pod on that node ([`Link::Away`], `serve.rs`), so the workers' traffic stays
//! on the node.

pub mod link;
pub mod serve;

pub use link::{Ctl, Link};

use std::net::SocketAddr;

use anyhow::{Context, Result};
use faultproxy::ctl::Op;
use faultproxy::Proxy;

/// Loopback address for worker-side proxies: one address, a port per link.
const WORKER_SIDE: &str = "127.0.3.1";

pub struct Links {
    /// `worker_service[w][m]`: worker `w`'s link to member `m`'s client port.
    pub worker_service: Vec<Vec<Link>>,
    /// `worker_storage[w]`: worker `w`'s link to the storage.
    pub worker_storage: Vec<Link>,
    /// `peers[m]`: every link into member `m`'s peer ports.
    pub peers: Vec<Vec<Link>>,
    /// (worker, member) links down for the whole run (`[network] unreachable`):
    /// they refuse every connection from the start, and healing a fault leaves
    /// them so.
    standing: Vec<(u32, u32)>,
}

/// What each worker's links lead to, in the order [`Links::new`] takes them:
/// for each worker, each member's client address, then the storage's.
pub fn upstreams(workers: u32, clients: &[SocketAddr], storage: SocketAddr) -> Vec<SocketAddr> {
    (0..workers)
        .flat_map(|_| clients.iter().copied().chain([storage]))
        .collect()
}

/// The workers' proxies in the harness's process, one per [`upstreams`] entry,
/// listening on `worker_side` (this machine's address on the route to worker
/// pods elsewhere) or this machine's loopback.
pub async fn start_here(
    ups: &[SocketAddr],
    worker_side: Option<std::net::IpAddr>,
) -> Result<Vec<Link>> {
    let any: SocketAddr = match worker_side {
        Some(ip) => SocketAddr::new(ip, 0),
        None => format!("{WORKER_SIDE}:0")
            .parse()
            .context("proxy address")?,
    };
    let mut out = Vec::new();
    for &u in ups {
        out.push(Link::Here(
            Proxy::start(any, u)
                .await
                .with_context(|| format!("start a link proxy to {u}"))?,
        ));
    }
    Ok(out)
}

/// Proxies of the harness's, as links.
pub fn here(proxies: Vec<Vec<Proxy>>) -> Vec<Vec<Link>> {
    proxies
        .into_iter()
        .map(|ps| ps.into_iter().map(Link::Here).collect())
        .collect()
}

impl Links {
    /// `made`: the workers' links, as [`upstreams`] lists them.
    pub async fn new(
        workers: u32,
        members: usize,
        made: Vec<Link>,
        peers: Vec<Vec<Link>>,
        standing: Vec<(u32, u32)>,
    ) -> Result<Links> {
        anyhow::ensure!(
            made.len() == workers as usize * (members + 1),
            "{} links made for {workers} workers and {members} members",
            made.len()
        );
        let mut worker_service = Vec::new();
        let mut worker_storage = Vec::new();
        let mut it = made.into_iter();
        for _ in 0..workers {
            worker_service.push(it.by_ref().take(members).collect());
            worker_storage.push(it.next().context("a worker's storage link")?);
        }
        let links = Links {
            worker_service,
            worker_storage,
            peers,
            standing,
        };
        links.cut_standing().await?;
        Ok(links)
    }

    /// Each standing link refuses new connections (reset at once) and loses the
    /// ones it has: unreachable, not slow — a client's connect fails at once, as
    /// to a host that is down, instead of waiting out its timeout.
    async fn cut_standing(&self) -> Result<()> {
        for &(w, m) in &self.standing {
            if let Some(p) = self
                .worker_service
                .get(w as usize)
                .and_then(|ps| ps.get(m as usize))
            {
                p.apply(Op::Reject(true)).await?;
                p.apply(Op::Reset).await?;
            }
        }
        Ok(())
    }

    /// Worker `worker`'s way to each member (`host:port` of its proxies).
    pub fn service_endpoints(&self, worker: u32) -> Vec<String> {
        self.worker_service
            .get(worker as usize)
            .map(|ps| ps.iter().map(|p| p.listen().to_string()).collect())
            .unwrap_or_default()
    }

    pub fn storage_url(&self, worker: u32) -> String {
        self.worker_storage
            .get(worker as usize)
            .map(|p| format!("http://{}/", p.listen()))
            .unwrap_or_default()
    }

    fn all(&self) -> impl Iterator<Item = &Link> {
        self.worker_service
            .iter()
            .flatten()
            .chain(&self.worker_storage)
            .chain(self.peers.iter().flatten())
    }

    /// Removes every fault from every link of the harness's own, at once (safe
    /// in a `Drop`); links away are healed by [`Links::heal`].
    pub fn heal_here(&self) {
        for l in self.all() {
            if let Link::Here(p) = l {
                // Refusing new connections too.
                p.clear_all();
            }
        }
        for &(w, m) in &self.standing {
            if let Some(Link::Here(p)) = self
                .worker_service
                .get(w as usize)
                .and_then(|ps| ps.get(m as usize))
            {
                p.reject_new(true);
                p.reset_connections();
            }
        }
    }

    /// Removes every fault from every link, wherever it runs; the standing
    /// ones are cut again. What could not be reached is returned, for the record.
    pub async fn heal(&self) -> Vec<String> {
        self.heal_here();
        let mut failed = Vec::new();
        for l in self.all().filter(|l| matches!(l, Link::Away { .. })) {
            if let Err(e) = l.apply(Op::ClearAll).await {
                failed.push(format!("heal link {}: {e:#}", l.listen()));
            }
        }
        if let Err(e) = self.cut_standing().await {
            failed.push(format!("cut the standing links again: {e:#}"));
        }
        failed
    }

    /// What each standing link did over the run, from its proxy's counters:
    /// the connections it refused, and the bytes that crossed it (0 unless the
    /// link was up at some point, which would be a fault of fencecheck's).
    pub async fn standing_report(&self) -> Option<serde_json::Value> {
        if self.standing.is_empty() {
            return None;
        }
        let mut links = Vec::new();
        for &(w, m) in &self.standing {
            let Some(l) = self
                .worker_service
                .get(w as usize)
                .and_then(|ps| ps.get(m as usize))
            else {
                continue;
            };
            links.push(match l.stats().await {
                Ok(st) => serde_json::json!({
                    "worker": w,
                    "member": m,
                    "connections_refused": st.connections_rejected,
                    "bytes_crossed": st.bytes_upstream + st.bytes_downstream,
                }),
                Err(e) => serde_json::json!({
                    "worker": w, "member": m, "error": format!("{e:#}"),
                }),
            });
        }
        Some(serde_json::json!({ "unreachable": links }))
    }

    pub async fn shutdown(&self) {
        for p in self
            .worker_service
            .iter()
            .flatten()
            .chain(&self.worker_storage)
        {
            p.shutdown().await;
        }
    }
}
