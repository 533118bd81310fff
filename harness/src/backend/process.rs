//! The `process` backend: the lock service's members and the storage as local
//! processes, each member on its own loopback address, data and logs inside the
//! run directory. What the command lines are is the system's business (its
//! backend-neutral member specs, `systems::members`); placing them (addresses,
//! directories), writing their files, starting, freezing, killing and restarting
//! them is this backend's.
//!
//! Members reach each other through a fault proxy in front of every peer port of
//! every member: the proxy's address is what the member advertises to its peers,
//! so all traffic into a member crosses its proxies and the nemesis can delay or
//! cut it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use faultproxy::Proxy;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Deployment, Service};
use crate::proc::{free_port, spawn, wait_http_healthy, Child};
use crate::scenario::Scenario;
use crate::systems::members::{FilePlace, MemberSpec, PeerPlace, Placement};

const READY_DEADLINE: Duration = Duration::from_secs(30);
const STORAGE_HOST: &str = "127.0.0.1";

struct Member {
    spec: MemberSpec,
    log: PathBuf,
    /// Its clock-offset file, when it runs under clockshim.
    clock_file: Option<PathBuf>,
    child: Option<Child>,
}

pub struct ProcessBackend {
    members: Vec<Member>,
    /// How the storage is started (again, after a kill: same address, same log).
    storage_spec: Option<StorageSpec>,
    storage: Option<Child>,
    /// Every peer proxy of every member.
    peer_proxies: Vec<Proxy>,
    /// Pids frozen by `pause` and not yet resumed.
    paused: HashSet<u32>,
    /// A server the resource runs itself (`resources::Resource::process_server`),
    /// when it is the storage instead of fencecheck's.
    server: Option<Box<dyn crate::resources::StorageServer>>,
}

fn member_ip(i: usize) -> String {
    format!("127.0.1.{}", i + 1)
}

/// Where each member goes: its own loopback IP (client and peer ports on it), a
/// proxy in front of each peer port (what it advertises), its data directory and
/// its files in the run directory.
pub(crate) async fn placements(
    n: usize,
    peer_ports: usize,
    run_dir: &Path,
    short: &str,
) -> Result<(Vec<Placement>, Vec<Vec<Proxy>>)> {
    let mut at = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..n {
        let ip = member_ip(i);
        let client = SocketAddr::new(ip.parse()?, free_port(&ip)?);
        let mut listens = Vec::new();
        for _ in 0..peer_ports {
            listens.push(SocketAddr::new(ip.parse()?, free_port(&ip)?));
        }
        let front = format!("127.0.2.{}", i + 1).parse()?;
        let (p, mine) = place(i, client, listens, front, run_dir, short).await?;
        at.push(p);
        proxies.push(mine);
    }
    Ok((at, proxies))
}

/// Member `i` at `client`, binding each of `listens` for its peers behind a
/// proxy of the harness's on `front` (what it advertises: every byte into it
/// crosses a proxy the nemesis can delay or cut), its data directory and
/// config files at their run-directory paths.
pub(crate) async fn place(
    i: usize,
    client: SocketAddr,
    listens: Vec<SocketAddr>,
    front: std::net::IpAddr,
    run_dir: &Path,
    short: &str,
) -> Result<(Placement, Vec<Proxy>)> {
    let mut peers = Vec::new();
    let mut mine = Vec::new();
    for listen in listens {
        let p = Proxy::start(SocketAddr::new(front, 0), listen)
            .await
            .context("peer proxy")?;
        peers.push(PeerPlace {
            bind: listen,
            advertise: p.local_addr().into(),
        });
        mine.push(p);
    }
    Ok((placement(i, client, peers, run_dir, short), mine))
}

/// Member `i` at `client` with `peers`, its data directory and config files
/// at their run-directory paths.
pub(crate) fn placement(
    i: usize,
    client: SocketAddr,
    peers: Vec<PeerPlace>,
    run_dir: &Path,
    short: &str,
) -> Placement {
    Placement {
        index: i,
        client_bind: client,
        client,
        peers,
        data_dir: crate::record::rundir::member_data(run_dir, short, i)
            .display()
            .to_string(),
        config_dir: run_dir.display().to_string(),
        cluster_token: "fencecheck".into(),
    }
}

/// Writes member `p`'s files: its data directory (owner-only, as etcd wants it)
/// with what goes in it, and its config files in the run directory.
pub fn write_files(spec: &MemberSpec, p: &Placement) -> Result<()> {
    let data = Path::new(&p.data_dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data)
        .with_context(|| format!("cannot create {}", data.display()))?;
    for f in &spec.files {
        let path = match f.place {
            FilePlace::Data => data.join(&f.name),
            FilePlace::Config => PathBuf::from(p.config_file(&f.name)),
        };
        std::fs::write(&path, &f.contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

impl ProcessBackend {
    pub async fn start(
        scenario: &Scenario,
        external: Option<SocketAddr>,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(ProcessBackend, Deployment)> {
        let svc = scenario.lock.service;
        let system = crate::systems::system(svc);
        let deploy = system.deploy(scenario, say)?;
        let n = scenario.member_count();
        let short = system.member_name();
        // Ports and peer proxies first: every member must know every advertised URL.
        let peer_ports = system.ports().peers.len();
        let (addrs, proxies) = placements(n, peer_ports, run_dir, short).await?;
        let specs = deploy.members(scenario, &addrs)?;
        for (spec, p) in specs.iter().zip(&addrs) {
            write_files(spec, p)?;
        }
        say(&format!(
            "starting {n} {svc} {} member(s){}",
            deploy.version(),
            match external {
                None => " and the storage service".to_string(),
                Some(a) => format!("; the storage is yours, at {a}"),
            }
        ));
        let mut backend = ProcessBackend {
            members: Vec::new(),
            storage_spec: None,
            storage: None,
            peer_proxies: proxies.iter().flatten().cloned().collect(),
            paused: HashSet::new(),
            server: None,
        };
        for (i, spec) in specs.into_iter().enumerate() {
            let clock_file = spec.clock_file.as_ref().map(|f| run_dir.join(f));
            let log = crate::record::rundir::member_log(run_dir, short, i);
            let mut m = Member {
                spec,
                log,
                clock_file,
                child: None,
            };
            if let Err(e) = spawn_member(&mut m) {
                backend.stop().await;
                return Err(e);
            }
            backend.members.push(m);
        }
        let resource = crate::resources::resource(scenario);
        let own = match external {
            Some(_) => None,
            None => resource.process_server(scenario, run_dir).await,
        };
        let storage_addr = match (external, own) {
            (Some(addr), _) => addr,
            (None, Some(Ok(server))) => {
                let addr = server.addr();
                backend.server = Some(server);
                addr
            }
            (None, Some(Err(e))) => {
                backend.stop().await;
                return Err(e);
            }
            (None, None) => match backend.start_storage(scenario, run_dir) {
                Ok(addr) => addr,
                Err(e) => {
                    backend.stop().await;
                    return Err(e);
                }
            },
        };
        for (i, a) in addrs.iter().enumerate() {
            let what = format!("{svc} member {i} at {}", a.client);
            let ready = crate::systems::system(svc).wait_ready(&what, a.client, READY_DEADLINE);
            tokio::pin!(ready);
            // A member that exits (a bad flag, a bad key file) is said at once, not
            // after the whole readiness deadline.
            let res = loop {
                tokio::select! {
                    r = &mut ready => break r,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {
                        let m = &mut backend.members[i];
                        if let Some(st) = m.child.as_mut().and_then(|c| c.exited()) {
                            break Err(anyhow::anyhow!("{what} exited ({st}) before it was ready"));
                        }
                    }
                }
            };
            if let Err(e) = res {
                let log = backend.members[i].log.display().to_string();
                backend.stop().await;
                return Err(e.context(format!("see {log}")));
            }
        }
        // A storage of the user's own was probed before the run began (its /health
        // is not part of the protocol); ours is polled until it answers.
        // A server of the resource's own answered before its tables were made.
        let ours = external.is_none() && backend.server.is_none();
        if ours {
            if let Err(e) = wait_http_healthy("storage", storage_addr, READY_DEADLINE).await {
                backend.stop().await;
                return Err(e.context(format!(
                    "see {}",
                    run_dir
                        .join(crate::record::rundir::STORAGE_PROCESS_LOG)
                        .display()
                )));
            }
        }
        let deployment = Deployment {
            service: svc,
            clients: addrs.iter().map(|a| a.client).collect(),
            storage: storage_addr,
            workers_reach: None,
            peer_proxies: crate::links::here(proxies),
            version: deploy.version().to_string(),
            backend: "process".into(),
            backend_reason: String::new(),
            access: deploy.access(),
        };
        Ok((backend, deployment))
    }

    fn start_storage(&mut self, scenario: &Scenario, run_dir: &Path) -> Result<SocketAddr> {
        let spec = StorageSpec::new(scenario, run_dir)?;
        let addr = spec.addr;
        self.storage = Some(spec.spawn()?);
        self.storage_spec = Some(spec);
        Ok(addr)
    }

    fn pid_of(&self, who: Service) -> Result<u32> {
        let child = match who {
            Service::Member(i) => self.members.get(i).and_then(|m| m.child.as_ref()),
            Service::Storage => self.storage.as_ref(),
            // The nemesis signals a worker process itself.
            Service::Worker(_) => None,
        };
        child
            .map(|c| c.pid())
            .context("that process is not running")
    }

    pub fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        if let (Service::Storage, Some(server)) = (who, self.server.as_mut()) {
            return server.pause();
        }
        let pid = self.pid_of(who)?;
        // Recorded before the signal, so a heal never misses it.
        self.paused.insert(pid);
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).context("SIGSTOP")?;
        Ok(serde_json::json!({ "action": "SIGSTOP", "pid": pid }))
    }

    pub fn resume(&mut self, who: Service) -> Result<()> {
        if let (Service::Storage, Some(server)) = (who, self.server.as_mut()) {
            return server.resume();
        }
        let pid = self.pid_of(who)?;
        self.paused.remove(&pid);
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).context("SIGCONT")?;
        Ok(())
    }

    /// Member `i`'s clockshim offset file, when it runs under clockshim.
    pub fn clock_file(&self, i: usize) -> Result<Option<&std::path::Path>> {
        let m = self.members.get(i).context("no such member")?;
        Ok(m.clock_file.as_deref())
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

    /// SIGKILLs the storage (its log stays: it is the storage's state).
    pub async fn kill_storage(&mut self) -> Result<serde_json::Value> {
        if let Some(server) = self.server.as_mut() {
            return server.kill().await;
        }
        let mut c = self.storage.take().context("the storage is not running")?;
        let pid = c.pid();
        self.paused.remove(&pid);
        c.stop(Duration::ZERO).await;
        Ok(serde_json::json!({ "action": "SIGKILL", "pid": pid }))
    }

    /// Starts the storage again on the same address and log, and waits until it
    /// answers: it rebuilds its state from the log before it listens.
    pub async fn restart_storage(&mut self) -> Result<serde_json::Value> {
        if let Some(server) = self.server.as_mut() {
            return server.restart().await;
        }
        let spec = self
            .storage_spec
            .as_ref()
            .context("this run has no storage of its own to restart")?;
        if self.storage.is_none() {
            self.storage = Some(spec.spawn()?);
        }
        let pid = self.storage.as_ref().map(|c| c.pid()).unwrap_or_default();
        let t0 = std::time::Instant::now();
        wait_http_healthy("storage", spec.addr, READY_DEADLINE)
            .await
            .with_context(|| format!("the restarted storage; see {}", spec.log.display()))?;
        Ok(serde_json::json!({
            "action": "restart",
            "pid": pid,
            "ready_ms": t0.elapsed().as_millis() as u64,
        }))
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
        if let Some(server) = self.server.as_mut() {
            if server.heal_paused() {
                done.push(format!("continued {}", server.what()));
            }
            if !server.is_running() && server.restart().await.is_ok() {
                done.push(format!("restarted {}", server.what()));
            }
        }
        if self.storage_spec.is_some()
            && self.storage.is_none()
            && self.restart_storage().await.is_ok()
        {
            done.push("restarted the storage".into());
        }
        done
    }

    pub async fn stop(&mut self) {
        self.heal_paused();
        if let Some(server) = self.server.as_mut() {
            server.stop().await;
        }
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
    m.child = Some(spawn(&m.spec.name, cmd, &m.log)?);
    Ok(())
}

/// fencecheck's storage's flags: where it listens, its log in the run directory
/// (its state: a restart reads it back), the scenario's fencing and durability.
/// The same for its process (`fencecheck storage`) and its pod
/// (`/fencecheck-storage`).
pub(crate) fn storage_flags(scenario: &Scenario, addr: SocketAddr, run_dir: &Path) -> Vec<String> {
    let st = &scenario.storage;
    vec![
        "--listen".into(),
        addr.to_string(),
        "--log".into(),
        run_dir
            .join(crate::record::rundir::STORAGE_LOG)
            .display()
            .to_string(),
        "--fencing".into(),
        st.fencing.as_str().into(),
        "--durability".into(),
        st.durability.as_str().into(),
    ]
}

/// The storage service: this binary's hidden `storage` subcommand, on a fixed
/// address and log, so a restart after a kill is the same storage.
struct StorageSpec {
    addr: SocketAddr,
    args: Vec<String>,
    log: PathBuf,
}

impl StorageSpec {
    fn new(scenario: &Scenario, run_dir: &Path) -> Result<StorageSpec> {
        let port = free_port(STORAGE_HOST)?;
        let addr: SocketAddr = format!("{STORAGE_HOST}:{port}").parse()?;
        let mut args = vec!["storage".to_string()];
        args.extend(storage_flags(scenario, addr, run_dir));
        Ok(StorageSpec {
            addr,
            args,
            log: run_dir.join(crate::record::rundir::STORAGE_PROCESS_LOG),
        })
    }

    fn spawn(&self) -> Result<Child> {
        let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(&self.args);
        spawn("storage", cmd, &self.log)
    }
}
