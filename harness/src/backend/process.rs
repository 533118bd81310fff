//! The `process` backend: etcd members and the storage as local processes, each
//! member on its own loopback address, data and logs inside the run directory.
//!
//! Members reach each other through a fault proxy in front of every member's peer
//! port: the proxy's address is what the member advertises as its peer URL, so all
//! traffic into a member crosses its proxy and the nemesis can delay or cut it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use faultproxy::Proxy;

use std::collections::HashSet;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Deployment, Service};
use crate::etcd;
use crate::proc::{free_port, poll_until, spawn, Child};
use crate::scenario::Scenario;

const READY_DEADLINE: Duration = Duration::from_secs(30);
const STORAGE_HOST: &str = "127.0.0.1";

pub struct Member {
    pub name: String,
    pub client: SocketAddr,
    cmd_args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

pub struct ProcessBackend {
    etcd_bin: PathBuf,
    pub members: Vec<Member>,
    storage: Option<Child>,
    peer_proxies: Vec<Proxy>,
    /// Pids frozen by `pause` and not yet resumed.
    paused: HashSet<u32>,
}

fn member_ip(i: usize) -> String {
    format!("127.0.1.{}", i + 1)
}

impl ProcessBackend {
    pub async fn start(
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(ProcessBackend, Deployment)> {
        let want = scenario.cluster.etcd;
        let bin = tokio::task::block_in_place(|| etcd::find_or_provision(want, say))?;
        let n = scenario.cluster.etcd_members.0 as usize;
        say(&format!(
            "starting {n} etcd {} member(s) ({}) and the storage service",
            bin.version,
            bin.path.display()
        ));

        // Ports and peer proxies first: every member must know every advertised URL.
        let mut clients = Vec::new();
        let mut peer_listen = Vec::new();
        let mut peer_proxies = Vec::new();
        for i in 0..n {
            let ip = member_ip(i);
            clients.push(SocketAddr::new(ip.parse()?, free_port(&ip)?));
            let real: SocketAddr = SocketAddr::new(ip.parse()?, free_port(&ip)?);
            let front: SocketAddr = format!("127.0.2.{}:0", i + 1).parse()?;
            peer_proxies.push(Proxy::start(front, real).await.context("peer proxy")?);
            peer_listen.push(real);
        }
        let initial_cluster = peer_proxies
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://{}", p.local_addr()))
            .collect::<Vec<_>>()
            .join(",");
        let mut backend = ProcessBackend {
            etcd_bin: bin.path.clone(),
            members: Vec::new(),
            storage: None,
            peer_proxies: peer_proxies.clone(),
            paused: HashSet::new(),
        };
        for i in 0..n {
            let client_url = format!("http://{}", clients[i]);
            let args = vec![
                "--name".into(),
                format!("m{i}"),
                "--data-dir".into(),
                run_dir.join(format!("etcd-{i}.data")).display().to_string(),
                "--listen-client-urls".into(),
                client_url.clone(),
                "--advertise-client-urls".into(),
                client_url,
                "--listen-peer-urls".into(),
                format!("http://{}", peer_listen[i]),
                "--initial-advertise-peer-urls".into(),
                format!("http://{}", peer_proxies[i].local_addr()),
                "--initial-cluster".into(),
                initial_cluster.clone(),
                "--initial-cluster-state".into(),
                "new".into(),
                "--initial-cluster-token".into(),
                "fencecheck".into(),
                "--logger".into(),
                "zap".into(),
            ];
            let mut m = Member {
                name: format!("m{i}"),
                client: clients[i],
                cmd_args: args,
                log: run_dir.join(format!("etcd-{i}.log")),
                child: None,
            };
            if let Err(e) = spawn_member(&backend.etcd_bin, &mut m) {
                backend.stop().await;
                return Err(e);
            }
            backend.members.push(m);
        }

        let storage_port = free_port(STORAGE_HOST)?;
        let storage_addr: SocketAddr = format!("{STORAGE_HOST}:{storage_port}").parse()?;
        let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("storage")
            .arg("--listen")
            .arg(storage_addr.to_string())
            .arg("--log")
            .arg(run_dir.join("storage.jsonl"))
            .arg("--fencing")
            .arg(scenario.storage.fencing.as_str());
        backend.storage = Some(spawn("storage", cmd, &run_dir.join("storage.log"))?);

        for (i, &client) in clients.iter().enumerate() {
            let what = format!("etcd at {client}");
            if let Err(e) = wait_healthy(&what, client, READY_DEADLINE).await {
                backend.stop().await;
                return Err(e.context(format!(
                    "see {}",
                    run_dir.join(format!("etcd-{i}.log")).display()
                )));
            }
        }
        let ready = wait_healthy("storage", storage_addr, READY_DEADLINE).await;
        if let Err(e) = ready {
            backend.stop().await;
            return Err(e.context(format!("see {}", run_dir.join("storage.log").display())));
        }
        let deployment = Deployment {
            etcd_clients: clients,
            storage: storage_addr,
            peer_proxies,
            etcd_version: bin.version.clone(),
            backend: "process".into(),
            backend_reason: String::new(),
        };
        Ok((backend, deployment))
    }

    fn pid_of(&self, who: Service) -> Result<u32> {
        let child = match who {
            Service::Member(i) => self.members.get(i).and_then(|m| m.child.as_ref()),
            Service::Storage => self.storage.as_ref(),
        };
        child
            .map(|c| c.pid())
            .context("that process is not running")
    }

    pub fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        let pid = self.pid_of(who)?;
        // Recorded before the signal, so a heal never misses it.
        self.paused.insert(pid);
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).context("SIGSTOP")?;
        Ok(serde_json::json!({ "action": "SIGSTOP", "pid": pid }))
    }

    pub fn resume(&mut self, who: Service) -> Result<()> {
        let pid = self.pid_of(who)?;
        self.paused.remove(&pid);
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).context("SIGCONT")?;
        Ok(())
    }

    /// SIGKILLs member `i` (its data dir stays).
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get_mut(i).context("no such member")?;
        let mut c = m.child.take().context("member is not running")?;
        let pid = c.pid();
        self.paused.remove(&pid);
        c.stop(Duration::ZERO).await;
        Ok(serde_json::json!({ "action": "SIGKILL", "pid": pid }))
    }

    /// Starts member `i` again on its data dir (it rejoins the cluster).
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let bin = self.etcd_bin.clone();
        let m = self.members.get_mut(i).context("no such member")?;
        if m.child.is_none() {
            spawn_member(&bin, m)?;
        }
        let pid = m
            .child
            .as_ref()
            .map(|c| c.pid())
            .context("member did not start")?;
        Ok(serde_json::json!({ "action": "restart", "pid": pid }))
    }

    pub async fn heal(&mut self) -> Vec<String> {
        let mut done: Vec<String> = self
            .heal_paused()
            .into_iter()
            .map(|pid| format!("continued pid {pid}"))
            .collect();
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() && self.restart_member(i).await.is_ok() {
                done.push(format!("restarted member {i}"));
            }
        }
        done
    }

    pub async fn stop(&mut self) {
        self.heal_paused();
        if let Some(mut s) = self.storage.take() {
            s.stop(Duration::from_secs(2)).await;
        }
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                c.stop(Duration::from_secs(5)).await;
            }
        }
        for p in &self.peer_proxies {
            p.shutdown().await;
        }
    }
}

fn spawn_member(bin: &Path, m: &mut Member) -> Result<()> {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(&m.cmd_args);
    m.child = Some(spawn(&format!("etcd {}", m.name), cmd, &m.log)?);
    Ok(())
}

impl ProcessBackend {
    /// Continues every paused process; returns their pids.
    fn heal_paused(&mut self) -> Vec<u32> {
        let pids: Vec<u32> = self.paused.drain().collect();
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        pids
    }
}

/// Polls `http://addr/health` until it answers healthy: etcd with
/// `{"health":"true"}`, the storage with any 2xx.
async fn wait_healthy(what: &str, addr: SocketAddr, deadline: Duration) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://{addr}/health");
    poll_until(what, deadline, || {
        let http = http.clone();
        let url = url.clone();
        async move {
            let Ok(r) = http.get(&url).send().await else {
                return false;
            };
            let ok = r.status().is_success();
            let body = r.text().await.unwrap_or_default();
            ok && (!body.contains("health") || body.contains("true"))
        }
    })
    .await
}
