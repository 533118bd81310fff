//! The network links the nemesis can break: every worker reaches each member of the
//! lock service and the storage through its own fault proxy (so one worker — the
//! holder — can be cut off alone), and every member is reached by its peers through
//! a proxy in front of each of its peer ports (see `backend::process`).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use faultproxy::Proxy;

/// Loopback address for worker-side proxies: one address, a port per link.
const WORKER_SIDE: &str = "127.0.3.1";

pub struct Links {
    /// `worker_service[w][m]`: worker `w`'s link to member `m`'s client port.
    pub worker_service: Vec<Vec<Proxy>>,
    /// `worker_storage[w]`: worker `w`'s link to the storage.
    pub worker_storage: Vec<Proxy>,
    /// `peers[m]`: every link into member `m`'s peer ports.
    pub peers: Vec<Vec<Proxy>>,
    /// (worker, member) links down for the whole run (`[network] unreachable`):
    /// they refuse every connection from the start, and healing a fault leaves
    /// them so.
    standing: Vec<(u32, u32)>,
}

impl Links {
    pub async fn start(
        workers: u32,
        clients: &[SocketAddr],
        storage: SocketAddr,
        peers: Vec<Vec<Proxy>>,
        standing: Vec<(u32, u32)>,
        worker_side: Option<std::net::IpAddr>,
    ) -> Result<Links> {
        let any: SocketAddr = match worker_side {
            Some(ip) => SocketAddr::new(ip, 0),
            None => format!("{WORKER_SIDE}:0")
                .parse()
                .context("proxy address")?,
        };
        let mut worker_service = Vec::new();
        let mut worker_storage = Vec::new();
        for _ in 0..workers {
            let mut to_members = Vec::new();
            for &m in clients {
                to_members.push(
                    Proxy::start(any, m)
                        .await
                        .context("start service link proxy")?,
                );
            }
            worker_service.push(to_members);
            worker_storage.push(
                Proxy::start(any, storage)
                    .await
                    .context("start storage link proxy")?,
            );
        }
        let links = Links {
            worker_service,
            worker_storage,
            peers,
            standing,
        };
        links.cut_standing();
        Ok(links)
    }

    /// Each standing link refuses new connections (reset at once) and loses the
    /// ones it has: unreachable, not slow — a client's connect fails at once, as
    /// to a host that is down, instead of waiting out its timeout.
    fn cut_standing(&self) {
        for &(w, m) in &self.standing {
            if let Some(p) = self
                .worker_service
                .get(w as usize)
                .and_then(|ps| ps.get(m as usize))
            {
                p.reject_new(true);
                p.reset_connections();
            }
        }
    }

    /// Worker `worker`'s way to each member (`host:port` of its proxies).
    pub fn service_endpoints(&self, worker: u32) -> Vec<String> {
        self.worker_service
            .get(worker as usize)
            .map(|ps| ps.iter().map(|p| p.local_addr().to_string()).collect())
            .unwrap_or_default()
    }

    pub fn storage_url(&self, worker: u32) -> String {
        self.worker_storage
            .get(worker as usize)
            .map(|p| format!("http://{}/", p.local_addr()))
            .unwrap_or_default()
    }

    /// Removes every fault from every link.
    pub fn heal(&self) {
        for p in self
            .worker_service
            .iter()
            .flatten()
            .chain(&self.worker_storage)
            .chain(self.peers.iter().flatten())
        {
            p.clear_all();
            p.reject_new(false);
        }
        self.cut_standing();
    }

    /// What each standing link did over the run, from its proxy's counters:
    /// the connections it refused, and the bytes that crossed it (0 unless the
    /// link was up at some point, which would be a fault of fencecheck's).
    pub fn standing_report(&self) -> Option<serde_json::Value> {
        if self.standing.is_empty() {
            return None;
        }
        let links: Vec<serde_json::Value> = self
            .standing
            .iter()
            .filter_map(|&(w, m)| {
                let st = self
                    .worker_service
                    .get(w as usize)?
                    .get(m as usize)?
                    .stats();
                Some(serde_json::json!({
                    "worker": w,
                    "member": m,
                    "connections_refused": st.connections_rejected,
                    "bytes_crossed": st.bytes_upstream + st.bytes_downstream,
                }))
            })
            .collect();
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
