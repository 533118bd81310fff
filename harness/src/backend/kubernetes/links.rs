//! The run's link proxies on a node that is not this machine, when the
//! workers are pods there: one pod, `links`, on that node's network, running
//! `fencecheck links serve` (the worker image there carries the binary) with a
//! proxy per link: each member's peer ports (added before the members start)
//! and each worker's links to the members and the storage. The run's traffic
//! stays on the node, so nothing of it needs the node to reach this machine. The harness steers the proxies through one exec of `links ctl`
//! into the pod, held open for the run: a command and its answer each cross
//! the API server once.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use kube::api::AttachParams;

use super::{pods, KubernetesBackend};
use crate::links::serve::SOCKET;
use crate::links::{Ctl, Link};

/// The pod's name in the run's namespace.
pub const POD: &str = "links";
/// Its output, in the run directory.
const LOG: &str = "links.log";

impl KubernetesBackend {
    /// The `links` pod's command line: the pod created, with no proxy yet, and
    /// the exec that steers it opened, the first time.
    pub(super) async fn links_pod(&mut self, say: &dyn Fn(&str)) -> Result<Arc<Ctl>> {
        if let Some(c) = &self.links {
            return Ok(c.clone());
        }
        let image = self
            .worker_image
            .clone()
            .context("the workers have no image")?;
        let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
        let exe = exe.display().to_string();
        say(&format!(
            "starting the link proxies' pod {POD} on node {} (the run's traffic stays there)",
            self.node
        ));
        let t0 = Instant::now();
        let pod = pods::pod(&pods::PodSpecIn {
            name: POD.into(),
            run_id: &self.run_id,
            role: "links",
            node: &self.node,
            image: &image,
            program: vec![
                exe.clone(),
                "links".into(),
                "serve".into(),
                "--socket".into(),
                SOCKET.into(),
            ],
            env: Vec::new(),
            run_dir: &self.run_dir,
            remote: true,
            files: None,
            user: None,
            host_files: Vec::new(),
            pull_secret: self.pull_secret.as_deref(),
            secret_env: Vec::new(),
        });
        pods::create(&self.pods, &pod)
            .await
            .context("the link proxies' pod did not start")?;
        let log = self.run_dir.join(LOG);
        pods::running(&self.pods, POD)
            .await
            .with_context(|| format!("see {}", log.display()))?;
        self.logs.push(pods::stream_log(
            self.streams.clone(),
            self.ns.clone(),
            POD.into(),
            log.clone(),
        ));
        // On the client without a read timeout: the exec is quiet between
        // faults for longer than a call may take, and a read timeout would end
        // it without a word (its stdin then goes nowhere). Opened again by the
        // `Ctl` when it breaks anyway.
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.streams.clone(), &self.ns);
        let open: crate::links::link::Open = Box::new(move || {
            let (api, exe, log) = (api.clone(), exe.clone(), log.clone());
            Box::pin(async move {
                let ap = AttachParams::default()
                    .container(pods::CONTAINER)
                    .stdin(true)
                    .stdout(true)
                    .stderr(true);
                let mut proc = api
                    .exec(POD, [exe.as_str(), "links", "ctl", "--socket", SOCKET], &ap)
                    .await
                    .with_context(|| format!("exec links ctl in pod {POD}"))?;
                let w = proc.stdin().context("exec: no stdin stream")?;
                let r = proc.stdout().context("exec: no stdout stream")?;
                // What `links ctl` says of itself (it could not reach the
                // server), into the pod's log file beside what the server says.
                if let Some(err) = proc.stderr() {
                    tokio::spawn(append_to(err, log));
                }
                Ok(crate::links::link::Pipe {
                    w: Box::new(w),
                    r: Box::new(r),
                    carrier: Box::new(std::sync::Mutex::new(proc)),
                })
            })
        });
        let ctl = Ctl::open(open, format!("pod {POD}")).await?;
        self.links_running_ms = Some(t0.elapsed().as_millis() as u64);
        self.links = Some(ctl.clone());
        Ok(ctl)
    }

    /// A proxy in the `links` pod per `(listen, upstream)` pair.
    async fn add_links(
        &mut self,
        pairs: &[(SocketAddr, SocketAddr)],
        say: &dyn Fn(&str),
    ) -> Result<Vec<Link>> {
        let ctl = self.links_pod(say).await?;
        let mut out = Vec::new();
        for &(l, u) in pairs {
            self.node_ports_used.insert(l.port());
            out.push(ctl.add(l, u).await?);
        }
        Ok(out)
    }

    /// The members' peer links, `pairs[m]` for member `m`: in the `links` pod,
    /// before any member starts (each advertises its proxies).
    pub async fn peer_links(
        &mut self,
        pairs: &[Vec<(SocketAddr, SocketAddr)>],
        say: &dyn Fn(&str),
    ) -> Result<Vec<Vec<Link>>> {
        let mut out = Vec::new();
        for mine in pairs {
            out.push(self.add_links(mine, say).await?);
        }
        Ok(out)
    }

    /// A port of the node's per `ups` entry for a proxy in the `links` pod:
    /// none of the run's already, nor one of `ups`' own.
    pub(super) fn free_node_ports(&self, ups: &[SocketAddr]) -> Result<Vec<u16>> {
        let taken: HashSet<u16> = ups
            .iter()
            .map(|a| a.port())
            .chain(self.node_ports_used.iter().copied())
            .collect();
        let ports: Vec<u16> = super::node_ports(ups.len() + taken.len())
            .into_iter()
            .filter(|p| !taken.contains(p))
            .take(ups.len())
            .collect();
        anyhow::ensure!(
            ports.len() == ups.len(),
            "not enough free ports on the node"
        );
        Ok(ports)
    }

    /// The workers' links: a proxy per `ups` entry in the `links` pod on the
    /// node, each on a port of the node's of its own.
    pub async fn start_links(
        &mut self,
        ups: &[SocketAddr],
        say: &dyn Fn(&str),
    ) -> Result<Vec<Link>> {
        let r = self
            .workers_remote()
            .context("the workers are not pods on a node that is not this machine")?
            .clone();
        let listens: Vec<SocketAddr> = self
            .free_node_ports(ups)?
            .into_iter()
            .map(|p| SocketAddr::new(r.node_ip, p))
            .collect();
        let pairs: Vec<(SocketAddr, SocketAddr)> =
            listens.into_iter().zip(ups.iter().copied()).collect();
        // Each `add` answered once its proxy listened.
        let links = self.add_links(&pairs, say).await?;
        let peers = self.peer_links_count;
        let running_ms = self.links_running_ms;
        self.edit_record(|rec| {
            if let Some(p) = rec["pods"].as_array_mut() {
                p.push(POD.into());
            }
            rec["links"] = serde_json::json!({
                "pod": POD,
                "worker_links": links.len(),
                "peer_links": peers,
                "running_ms": running_ms,
            });
        });
        say(&format!(
            "{} worker link(s) and {peers} peer link(s) in pod {POD}",
            links.len()
        ));
        Ok(links)
    }
}

/// Appends what `from` says, to its end, to the file `to`.
async fn append_to(mut from: impl tokio::io::AsyncRead + Unpin, to: std::path::PathBuf) {
    let mut text = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut from, &mut text).await;
    if !text.is_empty() {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&to)
        {
            let _ = f.write_all(&text);
        }
    }
}
