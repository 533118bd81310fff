//! `fencecheck cluster up|down|status`: a local single-node Kubernetes cluster for
//! fencecheck's own tests and for users without a cluster — etcd 3.4, kube-apiserver
//! 1.20.2 (the same member specs as the `kubernetes` lock system) and kubelet
//! 1.20.2 with dockershim on this machine's Docker engine, all built or provisioned
//! by `ci/bootstrap.sh`. No scheduler and no controller-manager: a pod names its
//! node (`nodeName`), and `up` creates the one object a controller would have (the
//! `default` service account).
//!
//! `up`, `status` and `down` are a file each. The processes are detached and
//! outlive `up`; [`state`] keeps what `status` and `down` need. [`process`] starts and stops them, [`api`] talks to the apiserver
//! (kube-rs, through the kubeconfig `up` writes), [`kubelet`] is kubelet's command
//! line, [`containers`] the pods' containers on the engine.
pub mod api;
pub mod certs;
pub mod containers;
mod down;
pub mod exec;
pub mod kubelet;
pub mod process;
pub mod state;
mod status;
mod up;

use std::time::Duration;

pub use down::down;
pub use status::{status, Status};
pub use up::{up, Up};

/// Fixed ports, high and unusual so they clash with nothing that usually runs (a
/// real kubelet's 10250, etcd's 2379): one local cluster per machine.
pub const ETCD_CLIENT_PORT: u16 = 32379;
pub const ETCD_PEER_PORT: u16 = 32380;
pub const APISERVER_PORT: u16 = 32443;
pub const KUBELET_PORTS: kubelet::Ports = kubelet::Ports {
    kubelet: 32250,
    kubelet_healthz: 32248,
};
/// Every port a local cluster holds on 127.0.0.1, and what holds it: `up`
/// refuses when one is taken, `status` names them.
pub const PORTS: [(u16, &str); 5] = [
    (ETCD_CLIENT_PORT, "etcd client"),
    (ETCD_PEER_PORT, "etcd peer"),
    (APISERVER_PORT, "kube-apiserver"),
    (KUBELET_PORTS.kubelet, "kubelet"),
    (KUBELET_PORTS.kubelet_healthz, "kubelet healthz"),
];
/// The node's name (`--hostname-override`): what a pod's `nodeName` says. It is
/// also the node's Hostname address, which the apiserver dials for a pod's logs
/// (`--kubelet-preferred-address-types=Hostname`): `localhost` resolves from
/// /etc/hosts to the loopback kubelet listens on, with no DNS.
pub const NODE: &str = "localhost";

/// How long each component may take to serve. The node's is the longest: kubelet
/// starts dockershim, registers, then reports Ready after its first sync (11.7 s
/// measured on the 2-core development machine; 25 s in an earlier try there).
pub(super) const ETCD_READY: Duration = Duration::from_secs(30);
pub(super) const APISERVER_READY: Duration = Duration::from_secs(60);
pub(super) const NODE_READY: Duration = Duration::from_secs(120);
/// SIGTERM to SIGKILL.
pub(super) const GRACE: Duration = Duration::from_secs(10);

/// The lock system's scenario that the apiserver's member specs are made for:
/// Kubernetes over one etcd member (nothing else of it is read).
pub(super) const MEMBERS_SCENARIO: &str =
    "name = \"local-cluster\"\n[lock]\nservice = \"kubernetes\"\n";
