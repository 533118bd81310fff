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
}

impl Links {
    pub async fn start(
        workers: u32,
        clients: &[SocketAddr],
        storage: SocketAddr,
        peers: Vec<Vec<Proxy>>,
    ) -> Result<Links> {
        let any: SocketAddr = format!("{WORKER_SIDE}:0")
            .parse()
            .context("proxy address")?;
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
        Ok(Links {
            worker_service,
            worker_storage,
            peers,
        })
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
