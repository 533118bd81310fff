//! A cluster member's lifecycle, whatever the system: a labelled data volume, a
//! container created on the run's peer network (its container name is its peer
//! host name), waited for until it prints its ready line, joined to the client
//! network for its published port, then waited for until it answers healthy;
//! paused, killed with SIGKILL and started again as the same container (same
//! volume, same fixed host port, same networks). The system only supplies a
//! backend-neutral [`MemberSpec`]; [`placement`] says where it goes and
//! [`Member::realize`] makes it a container of the system's image.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use testcontainers::bollard::Docker;

use super::cleanup::{tracked, InFlight};
use super::container::{self, ContainerSpec, MountSpec, Running, StartFailure};
use super::network;
use crate::scenario::ServiceKind;
use crate::systems::members::{FilePlace, HostPort, MemberSpec, PeerPlace, Placement, Ports};

/// Where a member's data volume and its config files are, inside its container.
const DATA: &str = "/data";
const CONF: &str = "/conf";

/// How to tell that a started member serves (once enough members are up to form
/// the cluster).
#[derive(Debug, Clone)]
pub(crate) enum Health {
    /// `GET path` on the client address answers 2xx (and, if the body mentions
    /// "health", says "true").
    Http(&'static str),
    /// The system's own readiness probe on the client address
    /// (`System::wait_ready`; ZooKeeper: `srvr` reports a mode).
    Service(ServiceKind),
}

/// Member `i` of a run (`prefix` is `fencecheck-<run id>`): container
/// `<prefix>-m<i>`, also its peer host name; every address of the container bound
/// (a network reconnect may change it); the system's own ports inside it, its
/// client port published on 127.0.0.1:`host_port`.
pub(super) fn placement(i: usize, prefix: &str, host_port: u16, ports: Ports) -> Placement {
    let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
    Placement {
        index: i,
        client_bind: any(ports.client),
        client: SocketAddr::from(([127, 0, 0, 1], host_port)),
        peers: ports
            .peers
            .iter()
            .map(|&port| PeerPlace {
                bind: any(port),
                advertise: HostPort {
                    host: container_name(prefix, i),
                    port,
                },
            })
            .collect(),
        data_dir: DATA.into(),
        config_dir: CONF.into(),
        cluster_token: prefix.to_string(),
    }
}

fn container_name(prefix: &str, i: usize) -> String {
    format!("{prefix}-m{i}")
}

/// A member as a container.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    /// Image, command, env, fixed host port, data volume mount, ready line. Its
    /// name is the host name its peers reach it by; its network is the run's peer
    /// network, set by [`Member::start`].
    pub container: ContainerSpec,
    /// The named volume holding its data (mounted by `container`).
    pub volume: String,
    /// Its client address on the host.
    pub client: SocketAddr,
    pub health: Health,
}

/// What the member lifecycle needs besides the spec.
pub(super) struct Realize<'a> {
    pub kind: ServiceKind,
    pub image: &'a str,
    /// Its containers' and volumes' role label (etcd, zookeeper, redis).
    pub role: &'static str,
    pub ports: Ports,
    pub run_dir: &'a Path,
    /// The name its logs and files in the run directory carry (`zk-0.myid`).
    pub short: &'a str,
}

/// The container of `spec` placed at `p`: the program in the system's image
/// (which has it at its host path), its files written into the run directory and
/// bind-mounted read-only (config files under /conf, data files inside the data
/// volume at /data: the engine mounts by depth, so they land inside it).
pub(super) fn realize(
    spec: MemberSpec,
    p: &Placement,
    prefix: &str,
    r: &Realize,
) -> Result<Placed> {
    let i = p.index;
    let volume = format!("{}-data", container_name(prefix, i));
    let mut mounts = vec![MountSpec::Volume {
        name: volume.clone(),
        target: DATA.into(),
    }];
    for f in &spec.files {
        let (host, target) = match f.place {
            FilePlace::Config => (r.run_dir.join(&f.name), p.config_file(&f.name)),
            FilePlace::Data => (
                r.run_dir.join(format!("{}-{i}.{}", r.short, f.name)),
                format!("{DATA}/{}", f.name),
            ),
        };
        std::fs::write(&host, &f.contents)
            .with_context(|| format!("cannot write {}", host.display()))?;
        mounts.push(MountSpec::BindReadOnly {
            host: host.display().to_string(),
            target,
        });
    }
    let cmd = std::iter::once(spec.program.display().to_string())
        .chain(spec.args)
        .collect();
    Ok(Placed {
        container: ContainerSpec {
            name: container_name(prefix, i),
            image: r.image.to_string(),
            role: r.role,
            cmd,
            env: spec.env,
            // The run's peer network, set by the member lifecycle.
            network: None,
            ports: vec![(r.ports.client, p.client.port())],
            mounts,
            user: None,
            ready_line: spec.ready.line,
            auto_remove: false,
        },
        volume,
        client: p.client,
        health: match spec.ready.http {
            Some(path) => Health::Http(path),
            None => Health::Service(r.kind),
        },
    })
}

pub(super) struct Member {
    pub spec: Placed,
    container: Option<Running>,
    running: bool,
}

impl Member {
    pub(super) fn new(spec: Placed) -> Member {
        Member {
            spec,
            container: None,
            running: false,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.spec.container.name
    }

    pub(super) fn running(&self) -> bool {
        self.running
    }

    pub(super) fn container(&self) -> Result<&Running> {
        self.container
            .as_ref()
            .with_context(|| format!("member container {} was never started", self.name()))
    }

    /// The container, for its removal (None once taken or never started).
    pub(super) fn take_container(&mut self) -> Option<Running> {
        self.running = false;
        self.container.take()
    }

    /// Its data volume, before the first start.
    pub(super) async fn create_volume(
        &self,
        d: &Docker,
        inflight: &InFlight,
        run_id: &str,
    ) -> Result<()> {
        let role = format!("{}-data", self.spec.container.role);
        network::create_volume(d, inflight, run_id, &self.spec.volume, &role).await
    }

    /// Creates and starts the container on the peer network, waits for its ready
    /// line, then joins it to the client network, where its port is published.
    /// In this order because the service resolves its own peer name as it starts
    /// (etcd checks its advertised peer URL), Docker API 1.41 attaches a single
    /// network at creation, and testcontainers creates and starts in one call.
    pub(super) async fn start(
        &mut self,
        d: &Docker,
        inflight: &InFlight,
        run_id: &str,
        peer_network: &str,
    ) -> Result<(), StartFailure> {
        let mut spec = self.spec.container.clone();
        spec.network = Some(peer_network.to_string());
        let c = spec.start(run_id, inflight).await?;
        self.container = Some(c);
        self.running = true;
        network::connect(d, inflight, network::CLIENT_NETWORK, self.name())
            .await
            .map_err(|error| StartFailure {
                error,
                output: None,
            })
    }

    /// Waits until the member answers healthy (the cluster has formed).
    pub(super) async fn wait_healthy(&self, d: &Docker) -> Result<()> {
        let c = self.container()?;
        match self.spec.health {
            Health::Http(path) => {
                container::wait_healthy(d, self.name(), c, self.spec.client, path).await
            }
            Health::Service(kind) => {
                // Probed in short rounds so a member that exited fails the start at
                // once instead of at the deadline.
                let what = format!("{kind} member {} at {}", self.name(), self.spec.client);
                let end = tokio::time::Instant::now() + container::READY_DEADLINE;
                loop {
                    let round = Duration::from_secs(1);
                    let probe = crate::systems::system(kind)
                        .wait_ready(&what, self.spec.client, round)
                        .await;
                    if probe.is_ok() {
                        return Ok(());
                    }
                    container::fail_if_exited(d, self.name(), c).await?;
                    if tokio::time::Instant::now() >= end {
                        return probe.context(format!(
                            "not ready after {}",
                            humantime::format_duration(container::READY_DEADLINE)
                        ));
                    }
                }
            }
        }
    }

    pub(super) async fn pause(&self, inflight: &InFlight) -> Result<()> {
        if !self.running {
            bail!("{} is not running", self.name());
        }
        let c = self.container()?.clone();
        tracked(inflight, async move { c.pause().await })
            .await?
            .with_context(|| format!("docker pause {}", self.name()))
    }

    pub(super) async fn unpause(&self, inflight: &InFlight) -> Result<()> {
        let c = self.container()?.clone();
        tracked(inflight, async move { c.unpause().await })
            .await?
            .with_context(|| format!("docker unpause {}", self.name()))
    }

    /// SIGKILL of its main process (testcontainers has no kill with a signal);
    /// the container, its volume and its host port stay. Returns the pid killed.
    pub(super) async fn kill(&mut self, d: &Docker) -> Result<Option<i64>> {
        if !self.running {
            bail!("{} is not running", self.name());
        }
        let c = self.container()?.clone();
        let pid = container::pid(d, &c).await;
        container::kill(d, &c, "SIGKILL").await?;
        self.running = false;
        Ok(pid)
    }

    /// Starts the same container again (`docker start`): its data volume, host
    /// port and peer-network connection are those it had. Returns its new pid.
    pub(super) async fn restart(&mut self, d: &Docker, inflight: &InFlight) -> Result<Option<i64>> {
        let c = self.container()?.clone();
        if !self.running {
            let c2 = c.clone();
            tracked(inflight, async move { c2.start().await })
                .await?
                .with_context(|| format!("docker start {}", self.name()))?;
            self.running = true;
        }
        Ok(container::pid(d, &c).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::members::{MemberFile, Readiness};

    fn spec(files: Vec<MemberFile>) -> MemberSpec {
        MemberSpec {
            name: "member 1".into(),
            program: "/usr/bin/server".into(),
            args: vec!["-cp".into(), "/conf/m-1.cfg".into()],
            env: Vec::new(),
            files,
            ready: Readiness {
                line: "ready",
                http: None,
            },
            clock_file: None,
        }
    }

    #[test]
    fn a_member_is_its_container_with_its_volume_port_and_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let ports = Ports {
            client: 7000,
            peers: &[7001, 7002],
        };
        let p = placement(1, "fencecheck-fc1", 2, ports);
        assert_eq!(p.peers[1].advertise.to_string(), "fencecheck-fc1-m1:7002");
        let r = Realize {
            kind: ServiceKind::Etcd,
            image: "fencecheck/x:1.0-abc",
            role: "x",
            ports,
            run_dir: dir.path(),
            short: "m",
        };
        let files = vec![
            MemberFile {
                name: "m-1.cfg".into(),
                place: FilePlace::Config,
                contents: "tickTime=1000\n".into(),
            },
            MemberFile {
                name: "id".into(),
                place: FilePlace::Data,
                contents: "2\n".into(),
            },
        ];
        let m = realize(spec(files), &p, "fencecheck-fc1", &r).expect("placed");
        let c = &m.container;
        assert_eq!(c.name, "fencecheck-fc1-m1");
        assert_eq!(c.cmd[0], "/usr/bin/server");
        assert_eq!(c.cmd.last().map(String::as_str), Some("/conf/m-1.cfg"));
        assert_eq!(c.ports, vec![(7000, 2)]);
        assert_eq!(m.volume, "fencecheck-fc1-m1-data");
        assert_eq!(m.client, SocketAddr::from(([127, 0, 0, 1], 2)));
        let id = std::fs::read_to_string(dir.path().join("m-1.id")).expect("id");
        assert_eq!(id.trim(), "2");
        assert!(dir.path().join("m-1.cfg").is_file());
        assert!(matches!(&c.mounts[0], MountSpec::Volume { target, .. } if target == "/data"));
        assert!(
            matches!(&c.mounts[2], MountSpec::BindReadOnly { target, .. } if target == "/data/id")
        );
    }
}
