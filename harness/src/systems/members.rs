//! The backend-neutral member spec: what a lock system says about running one of
//! its members (program, arguments, environment, files to write, readiness), given
//! where a backend places it ([`Placement`]: the addresses it binds and advertises,
//! the directories it sees). Each system writes its command line once, in its own
//! `members.rs`; each backend realizes the spec its own way (`backend/process.rs`
//! spawns the program, `backend/docker/` runs it in the system's image, which
//! holds the program at the same path as this machine).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;

use crate::scenario::Scenario;

/// A host name (or IP) and a port, as a member's peers reach it: an IP on the
/// process backend (a peer proxy), a container name on docker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl From<SocketAddr> for HostPort {
    fn from(a: SocketAddr) -> HostPort {
        HostPort {
            host: a.ip().to_string(),
            port: a.port(),
        }
    }
}

/// One peer port of a member.
#[derive(Debug, Clone)]
pub struct PeerPlace {
    /// What the member binds. An unspecified IP (`0.0.0.0`) means every address
    /// of the member, which may change (docker: a network reconnect).
    pub bind: SocketAddr,
    /// What every other member connects to (process: the proxy in front of it).
    pub advertise: HostPort,
}

/// Where a backend puts member `index`.
#[derive(Debug, Clone)]
pub struct Placement {
    pub index: usize,
    /// What it binds for clients.
    pub client_bind: SocketAddr,
    /// Where the harness and the workers reach it.
    pub client: SocketAddr,
    /// One per port of [`Ports::peers`].
    pub peers: Vec<PeerPlace>,
    /// Its data directory, as the member sees it.
    pub data_dir: String,
    /// Where its [`FilePlace::Config`] files are, as the member sees it.
    pub config_dir: String,
    /// Tells this cluster from any other (etcd's initial cluster token).
    pub cluster_token: String,
}

impl Placement {
    /// The path the member sees a config file `name` at.
    pub fn config_file(&self, name: &str) -> String {
        format!("{}/{name}", self.config_dir)
    }
}

/// The ports a member listens on inside its own network namespace (docker): the
/// client port and each peer port. The process backend uses only their number.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub client: u16,
    pub peers: &'static [u16],
}

/// Where a file a member needs is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilePlace {
    /// In [`Placement::config_dir`].
    Config,
    /// In the data directory (ZooKeeper's `myid`).
    Data,
}

#[derive(Debug, Clone)]
pub struct MemberFile {
    pub name: String,
    pub place: FilePlace,
    pub contents: String,
}

/// How to tell a started member serves.
#[derive(Debug, Clone, Copy)]
pub struct Readiness {
    /// Printed once its listeners are up, before the cluster has a quorum (so each
    /// member can be waited for while the others are not started yet).
    pub line: &'static str,
    /// `GET path` on the client address answers healthy; `None`: the system's own
    /// probe (`System::wait_ready`).
    pub http: Option<&'static str>,
}

/// One member, backend-neutral.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    /// For messages: "etcd 0".
    pub name: String,
    /// The program on this machine (the system's image has it at the same path).
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub files: Vec<MemberFile>,
    pub ready: Readiness,
    /// The config file a clock step is written to (clockshim's offset file), if
    /// the member runs under one.
    pub clock_file: Option<String>,
}

/// A system's deployment, found (or provisioned) once per run: its version, its
/// members for a set of placements, and the build context of its image.
pub trait Deploy: Send + Sync {
    /// The exact version that runs, e.g. "3.5.1" or "3.8.0".
    fn version(&self) -> &str;
    /// Its image's name and its containers' role label: etcd, zookeeper, redis.
    fn image_name(&self) -> &'static str;
    /// The member specs for `at.len()` members.
    fn members(&self, s: &Scenario, at: &[Placement]) -> Result<Vec<MemberSpec>>;
    /// The `FROM scratch` image's build context: the program and what it loads,
    /// at their paths on this machine.
    fn image(&self) -> Result<crate::image_context::BuildContext>;
    /// The token and CA the run's clients need, for a service that asks for them
    /// (made per run with the members: Kubernetes).
    fn access(&self) -> Option<crate::systems::service::ServiceAccess> {
        None
    }
}

/// Placements as the docker backend makes them (every address bound, peers by
/// container name, data in /data, configs in /conf), for the systems' own
/// member-spec tests.
#[cfg(test)]
pub fn docker_like(n: usize, client_port: u16, peer_ports: &[u16]) -> Vec<Placement> {
    use std::net::SocketAddr;
    (0..n)
        .map(|i| Placement {
            index: i,
            client_bind: SocketAddr::from(([0, 0, 0, 0], client_port)),
            client: SocketAddr::from(([127, 0, 0, 1], i as u16 + 1)),
            peers: peer_ports
                .iter()
                .map(|&port| PeerPlace {
                    bind: SocketAddr::from(([0, 0, 0, 0], port)),
                    advertise: HostPort {
                        host: format!("fencecheck-fc1-m{i}"),
                        port,
                    },
                })
                .collect(),
            data_dir: "/data".into(),
            config_dir: "/conf".into(),
            cluster_token: "fencecheck-fc1".into(),
        })
        .collect()
}
