//! The harness's own way to the members and the storage on a node it cannot
//! reach at the node's address (`[cluster] reach`): a listener on this
//! machine's loopback per address, each connection to it carried by a
//! port-forward through the API server into the `links` pod, where a proxy on
//! the node's loopback leads on to the member's or the storage's port. Only the
//! harness's own connections take this way (readiness, the observer, the
//! checks' reads); the workers' links stay on the node.
//!
//! A port-forward takes about half a second to open (the API server, then
//! kubelet, then `socat` on the node under dockershim): the clients that use
//! these addresses keep their connections open.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::net::{TcpListener, TcpStream};

/// How long the harness tries the node's address before it goes through the
/// API server instead (`auto`).
pub const PROBE: Duration = Duration::from_secs(3);

/// What the forwards carried, for `kubernetes.json`.
#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// The run's forwards; each ends with it.
#[derive(Default)]
pub struct Forwards {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counts: Arc<Counts>,
}

impl Forwards {
    /// A listener on this machine's loopback whose every connection is carried
    /// to `port` of `pod`'s network (the node's, for a host-network pod).
    pub async fn add(&mut self, api: Api<Pod>, pod: &str, port: u16) -> Result<SocketAddr> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("a port-forward's listener on this machine's loopback")?;
        let local = listener.local_addr()?;
        let counts = self.counts.clone();
        let pod = pod.to_string();
        self.tasks.push(tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    // Out of descriptors, say: not a loop that spins.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let (api, pod, counts) = (api.clone(), pod.clone(), counts.clone());
                tokio::spawn(async move {
                    if let Err(e) = carry(&api, &pod, port, tcp, &counts).await {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut l) = counts.last_error.lock() {
                            *l = Some(format!("{e:#}"));
                        }
                    }
                });
            }
        }));
        Ok(local)
    }

    /// `{forwards, connections, failed, last_error}`.
    pub fn record(&self) -> serde_json::Value {
        let c = &self.counts;
        serde_json::json!({
            "forwards": self.tasks.len(),
            "connections": c.opened.load(Ordering::Relaxed),
            "failed": c.failed.load(Ordering::Relaxed),
            "last_error": c.last_error.lock().ok().and_then(|l| l.clone()),
        })
    }
}

impl Drop for Forwards {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One connection, both ways, until either side ends it.
async fn carry(
    api: &Api<Pod>,
    pod: &str,
    port: u16,
    mut tcp: TcpStream,
    counts: &Counts,
) -> Result<()> {
    let mut pf = api
        .portforward(pod, &[port])
        .await
        .with_context(|| format!("port-forward to pod {pod} port {port}"))?;
    let mut stream = pf
        .take_stream(port)
        .context("port-forward: no stream for the port")?;
    // What kubelet says went wrong at its end (e.g. "socat not found").
    let said = pf.take_error(port);
    counts.opened.fetch_add(1, Ordering::Relaxed);
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut stream).await;
    drop(stream);
    if let Some(said) = said {
        if let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(200), said).await {
            pf.abort();
            anyhow::bail!("port-forward to pod {pod} port {port}: {e}");
        }
    }
    pf.abort();
    Ok(())
}

/// Whether this machine opens a connection to `addr` within `PROBE`; if
/// not, why.
pub async fn reaches(addr: SocketAddr) -> Result<(), String> {
    match tokio::time::timeout(PROBE, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("this machine cannot open a connection to the node at {addr}: {e}")),
        Err(_) => Err(format!(
            "this machine cannot open a connection to the node at {addr} (no answer within {PROBE:?})"
        )),
    }
}

impl super::KubernetesBackend {
    /// The harness's address for `addr` on the node: a port-forward's where
    /// `reach_them` set one, else `addr` itself.
    pub(super) fn seen(&self, addr: SocketAddr) -> SocketAddr {
        self.seen.get(&addr).copied().unwrap_or(addr)
    }

    /// Decides, once the pods at `addrs` (the members' client addresses and
    /// the storage's, on the node) are created, how the harness reaches them:
    /// on a node that is not this machine, with the links pod there, a proxy
    /// per address in that pod on a port of the node's (every interface, the
    /// node's loopback too). `auto` then tries that port at the node's
    /// address: answered, the harness uses the node's addresses as they are;
    /// not, or `port-forward`, each address gets a port-forward to its proxy
    /// (`Forwards`). Elsewhere the node's addresses are this machine's to reach.
    pub(super) async fn reach_them(
        &mut self,
        addrs: &[SocketAddr],
        say: &dyn Fn(&str),
    ) -> Result<()> {
        use crate::scenario::Reach;
        let asked = self.reach_asked;
        let Some(r) = self.workers_remote().cloned() else {
            return Ok(());
        };
        if addrs.is_empty() || asked == Reach::Direct {
            self.reach = Some(serde_json::json!({
                "asked": asked.as_str(), "mode": "direct",
                "why": if addrs.is_empty() { "nothing of the run's own to reach" } else { "[cluster] reach = \"direct\"" },
            }));
            return Ok(());
        }
        let ports = self.free_node_ports(addrs)?;
        let ctl = self.links_pod(say).await?;
        let mut proxies = Vec::new();
        let mut probed = None;
        for (&a, &p) in addrs.iter().zip(&ports) {
            let listen = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), p);
            self.node_ports_used.insert(p);
            proxies.push((a, p, ctl.add(listen, a).await?));
            if asked == Reach::Auto && proxies.len() == 1 && r.unreached.is_none() {
                let probe = SocketAddr::new(r.node_ip, p);
                let tried = reaches(probe).await;
                if tried.is_ok() {
                    self.reach = Some(serde_json::json!({
                        "asked": "auto", "mode": "direct",
                        "why": format!("this machine reached the node at {probe}"),
                    }));
                    say(&format!(
                        "this machine reaches node {} at its address: the harness reaches the \
                         members there directly",
                        self.node
                    ));
                    return Ok(());
                }
                probed = tried.err();
            }
        }
        let why = match (asked, &r.unreached, probed) {
            (Reach::Auto, Some(u), _) => u.clone(),
            (Reach::Auto, None, Some(p)) => p,
            _ => "[cluster] reach = \"port-forward\"".to_string(),
        };
        let api: Api<Pod> = Api::namespaced(self.streams.clone(), &self.ns);
        for (a, p, _) in &proxies {
            let local = self
                .forwards
                .add(api.clone(), super::links::POD, *p)
                .await?;
            self.seen.insert(*a, local);
        }
        say(&format!(
            "{why}: the harness reaches the run's {} address(es) there through port-forwards \
             (the API server, to pod {} on the node)",
            proxies.len(),
            super::links::POD
        ));
        self.reach = Some(serde_json::json!({
            "asked": asked.as_str(), "mode": "port-forward", "why": why,
            "through": {
                "pod": super::links::POD,
                "ports": proxies.iter().map(|(a, p, _)| serde_json::json!({"node": a.to_string(), "pod_port": p, "local": self.seen(*a).to_string()})).collect::<Vec<_>>(),
            },
        }));
        Ok(())
    }

    /// What the port-forwards carried, into `kubernetes.json` (at the end).
    pub(super) fn record_forwards(&self) {
        if self.seen.is_empty() {
            return;
        }
        let counts = self.forwards.record();
        self.edit_record(|r| r["reach"]["port_forwards"] = counts);
    }
}

#[cfg(test)]
mod tests {
    /// `auto`'s probe: a port something listens on is reached; one nothing
    /// listens on is not, and the reason names the address.
    #[tokio::test]
    async fn the_probe_says_which_address_it_could_not_open() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let open = l.local_addr().expect("addr");
        assert_eq!(super::reaches(open).await, Ok(()));
        let port = crate::proc::free_port("127.0.0.1").expect("port");
        let closed: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let why = super::reaches(closed).await.expect_err("nothing listens");
        assert!(why.contains(&closed.to_string()), "{why}");
    }
}
