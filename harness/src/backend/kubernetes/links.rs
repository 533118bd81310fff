//! The workers' link proxies on a node that is not this machine: one pod,
//! `links`, on that node's network, running `fencecheck links serve` (the
//! worker image there carries the binary) with a proxy per link. The workers
//! reach the members and the storage through it without their traffic leaving
//! the node, so nothing of the run's traffic needs the node to reach this
//! machine. The harness steers the proxies through one exec of `links ctl`
//! into the pod, held open for the run: a command and its answer each cross
//! the API server once.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result};
use kube::api::AttachParams;

use super::{pods, KubernetesBackend};
use crate::links::serve::SOCKET;
use crate::links::{Ctl, Link};

/// The pod's name in the run's namespace.
pub const POD: &str = "links";

impl KubernetesBackend {
    /// Starts a proxy per `ups` entry in the `links` pod on the node, each on a
    /// port of the node's of its own, and the exec that steers them.
    pub async fn start_links(
        &mut self,
        ups: &[SocketAddr],
        say: &dyn Fn(&str),
    ) -> Result<Vec<Link>> {
        let r = self
            .workers_remote()
            .context("the workers are not pods on a node that is not this machine")?
            .clone();
        let image = self
            .worker_image
            .clone()
            .context("the workers have no image")?;
        // Ports the members and the storage already listen on, there.
        let taken: HashSet<u16> = ups
            .iter()
            .copied()
            .chain(self.peer_proxies.iter().map(|p| p.upstream()))
            .map(|a| a.port())
            .collect();
        let listens: Vec<SocketAddr> = super::node_ports(ups.len() + taken.len())
            .into_iter()
            .filter(|p| !taken.contains(p))
            .take(ups.len())
            .map(|p| SocketAddr::new(r.node_ip, p))
            .collect();
        anyhow::ensure!(
            listens.len() == ups.len(),
            "not enough free ports on the node"
        );
        let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
        let mut program = vec![
            exe.display().to_string(),
            "links".into(),
            "serve".into(),
            "--socket".into(),
            SOCKET.into(),
        ];
        program.extend(listens.iter().zip(ups).map(|(l, u)| format!("{l}={u}")));
        say(&format!(
            "starting {} link proxies in pod {POD} on node {} (the workers' traffic stays there)",
            ups.len(),
            self.node
        ));
        let t0 = Instant::now();
        let pod = pods::pod(&pods::PodSpecIn {
            name: POD.into(),
            run_id: &self.run_id,
            role: "links",
            node: &self.node,
            image: &image,
            program,
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
        let log = self.run_dir.join("links.log");
        pods::running(&self.pods, POD)
            .await
            .with_context(|| format!("see {}", log.display()))?;
        self.logs.push(pods::stream_log(
            self.streams.clone(),
            self.ns.clone(),
            POD.into(),
            log.clone(),
        ));
        let ap = AttachParams::default()
            .container(pods::CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(false);
        let exe = exe.display().to_string();
        let mut proc = self
            .pods
            .exec(POD, [exe.as_str(), "links", "ctl", "--socket", SOCKET], &ap)
            .await
            .with_context(|| format!("exec links ctl in pod {POD}"))?;
        let w = proc.stdin().context("exec: no stdin stream")?;
        let rd = proc.stdout().context("exec: no stdout stream")?;
        let ctl = Ctl::new(
            Box::new(w),
            Box::new(rd),
            Box::new(std::sync::Mutex::new(proc)),
            format!("pod {POD}"),
        );
        let links: Vec<Link> = listens
            .iter()
            .enumerate()
            .map(|(index, &listen)| Link::Away {
                ctl: ctl.clone(),
                index,
                listen,
            })
            .collect();
        // Every proxy answers before a worker uses one (`serve` binds them all
        // before it answers at all).
        for l in &links {
            l.stats()
                .await
                .with_context(|| format!("the link proxy {} in pod {POD}", l.listen()))?;
        }
        let ready_ms = t0.elapsed().as_millis() as u64;
        self.edit_record(|rec| {
            if let Some(p) = rec["pods"].as_array_mut() {
                p.push(POD.into());
            }
            rec["links"] = serde_json::json!({
                "pod": POD,
                "proxies": links.len(),
                "running_ms": ready_ms,
            });
        });
        Ok(links)
    }
}
