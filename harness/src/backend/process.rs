//! The `process` backend: the lock service's members and the storage as local
//! processes, each member on its own loopback address, data and logs inside the
//! run directory. What the command lines are is the service's business
//! (`ServiceDeploy::process_plan`); starting, freezing, killing and restarting
//! them is this backend's.
//!
//! Members reach each other through a fault proxy in front of every peer port of
//! every member: the proxy's address is what the member advertises to its peers,
//! so all traffic into a member crosses its proxies and the nemesis can delay or
//! cut it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use faultproxy::Proxy;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Deployment, Service};
use crate::proc::{free_port, spawn, wait_http_healthy, Child};
use crate::scenario::Scenario;
use crate::service::{self, MemberAddrs, PeerPort, ProcessMember};

const READY_DEADLINE: Duration = Duration::from_secs(30);
const STORAGE_HOST: &str = "127.0.0.1";

struct Member {
    spec: ProcessMember,
    child: Option<Child>,
}

pub struct ProcessBackend {
    members: Vec<Member>,
    storage: Option<Child>,
    /// Every peer proxy of every member.
    peer_proxies: Vec<Proxy>,
    /// Pids frozen by `pause` and not yet resumed.
    paused: HashSet<u32>,
}

fn member_ip(i: usize) -> String {
    format!("127.0.1.{}", i + 1)
}

/// Client address, and a real address plus a proxy in front of it for each peer
/// port, for each member.
async fn member_addresses(
    n: usize,
    peer_ports: usize,
) -> Result<(Vec<MemberAddrs>, Vec<Vec<Proxy>>)> {
    let mut addrs = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..n {
        let ip = member_ip(i);
        let client = SocketAddr::new(ip.parse()?, free_port(&ip)?);
        let mut peers = Vec::new();
        let mut mine = Vec::new();
        for _ in 0..peer_ports {
            let listen = SocketAddr::new(ip.parse()?, free_port(&ip)?);
            let front: SocketAddr = format!("127.0.2.{}:0", i + 1).parse()?;
            let p = Proxy::start(front, listen).await.context("peer proxy")?;
            peers.push(PeerPort {
                listen,
                advertise: p.local_addr(),
            });
            mine.push(p);
        }
        addrs.push(MemberAddrs { client, peers });
        proxies.push(mine);
    }
    Ok((addrs, proxies))
}

impl ProcessBackend {
    pub async fn start(
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(ProcessBackend, Deployment)> {
        let svc = scenario.lock.service;
        let deploy = service::deploy(scenario, say)?;
        let n = scenario.cluster.members.0 as usize;
        // Ports and peer proxies first: every member must know every advertised URL.
        let (addrs, proxies) = member_addresses(n, deploy.peer_ports()).await?;
        let plan = deploy.process_plan(scenario, run_dir, &addrs)?;
        say(&format!(
            "starting {n} {svc} {} member(s) and the storage service",
            plan.version
        ));
        let mut backend = ProcessBackend {
            members: Vec::new(),
            storage: None,
            peer_proxies: proxies.iter().flatten().cloned().collect(),
            paused: HashSet::new(),
        };
        for spec in plan.members {
            let mut m = Member { spec, child: None };
            if let Err(e) = spawn_member(&mut m) {
                backend.stop().await;
                return Err(e);
            }
            backend.members.push(m);
        }
        let storage_addr = match start_storage(scenario, run_dir) {
            Ok((addr, child)) => {
                backend.storage = Some(child);
                addr
            }
            Err(e) => {
                backend.stop().await;
                return Err(e);
            }
        };
        for (i, a) in addrs.iter().enumerate() {
            let what = format!("{svc} member {i} at {}", a.client);
            if let Err(e) = service::wait_ready(svc, &what, a.client, READY_DEADLINE).await {
                let log = backend.members[i].spec.log.display().to_string();
                backend.stop().await;
                return Err(e.context(format!("see {log}")));
            }
        }
        if let Err(e) = wait_http_healthy("storage", storage_addr, READY_DEADLINE).await {
            backend.stop().await;
            return Err(e.context(format!(
                "see {}",
                run_dir.join(crate::rundir::STORAGE_PROCESS_LOG).display()
            )));
        }
        let deployment = Deployment {
            service: svc,
            clients: addrs.iter().map(|a| a.client).collect(),
            storage: storage_addr,
            peer_proxies: proxies,
            version: plan.version,
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

    /// SIGKILLs member `i` (its data stays).
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get_mut(i).context("no such member")?;
        let mut c = m.child.take().context("member is not running")?;
        let pid = c.pid();
        self.paused.remove(&pid);
        c.stop(Duration::ZERO).await;
        Ok(serde_json::json!({ "action": "SIGKILL", "pid": pid }))
    }

    /// Starts member `i` again on its data (it rejoins the cluster).
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get_mut(i).context("no such member")?;
        if m.child.is_none() {
            spawn_member(m)?;
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

    /// Continues every paused process; returns their pids.
    fn heal_paused(&mut self) -> Vec<u32> {
        let pids: Vec<u32> = self.paused.drain().collect();
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        pids
    }
}

fn spawn_member(m: &mut Member) -> Result<()> {
    let mut cmd = std::process::Command::new(&m.spec.program);
    cmd.args(&m.spec.args);
    for (k, v) in &m.spec.env {
        cmd.env(k, v);
    }
    m.child = Some(spawn(&m.spec.name, cmd, &m.spec.log)?);
    Ok(())
}

/// The storage service: this binary's hidden `storage` subcommand.
fn start_storage(scenario: &Scenario, run_dir: &Path) -> Result<(SocketAddr, Child)> {
    let port = free_port(STORAGE_HOST)?;
    let addr: SocketAddr = format!("{STORAGE_HOST}:{port}").parse()?;
    let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("storage")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--log")
        .arg(run_dir.join(crate::rundir::STORAGE_LOG))
        .arg("--fencing")
        .arg(scenario.storage.fencing.as_str());
    let child = spawn(
        "storage",
        cmd,
        &run_dir.join(crate::rundir::STORAGE_PROCESS_LOG),
    )?;
    Ok((addr, child))
}
