//! Lock systems: one folder each (`etcd/`, `zookeeper/`, `redis/` with Redlock,
//! `external/` for a team's own client), holding everything about that system —
//! its keyspace contract, the worker-side client, the harness-side service handle
//! and observer, its members (one backend-neutral spec, [`members`]) and how its
//! binary or image is provisioned.
//!
//! The seams every system implements sit beside the folders: [`client`] (what a
//! worker needs from a lock) and [`service`] (what the harness needs from the
//! running service). [`system`] is **the registry**: the one place that matches on
//! the system kind; everything else asks the [`System`] it returns.

pub mod client;
pub mod entry;
pub mod etcd;
pub mod external;
pub mod kubernetes;
pub mod members;
pub mod redis;
pub mod service;
pub mod zookeeper;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::scenario::{EtcdVersion, Scenario, ScenarioError, ServiceKind, TokenName};
use client::{ClientConfig, LockClient};
use members::{Deploy, Ports};
use service::{Capabilities, LockService, ServiceAccess};

/// What the rest of fencecheck asks of a lock system.
#[async_trait::async_trait]
pub trait System: Sync {
    /// What it can take, whatever the backend.
    fn capabilities(&self) -> Capabilities;
    /// Its scenario rules (its `rules.rs`), asked by the plan.
    fn rules(&self) -> &'static Rules;
    /// Whether it has a docker deployment (`backend = "docker"`); `auto` runs the
    /// others as processes.
    fn runs_on_docker(&self) -> bool;
    /// The name its member logs and data directories carry (`etcd-0.log`).
    fn member_name(&self) -> &'static str;
    /// The ports a member listens on in a network of its own (docker); the
    /// process backend puts a proxy in front of each peer port.
    fn ports(&self) -> Ports;
    /// The deployment side, finding (or provisioning) its binaries: the members'
    /// backend-neutral specs and its image.
    /// The members whose client endpoints the workers are given, of `n`
    /// (Kubernetes: the apiserver only; the etcd under it is not the clients').
    fn client_members(&self, n: usize) -> std::ops::Range<usize> {
        0..n
    }
    fn deploy(&self, s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn Deploy>>;
    /// The deployments `fencecheck images` builds an image for, each with its
    /// name: an error skips that image (not installed here), an error of the
    /// whole fails the command (etcd: one per version in `etcd`, provisioned).
    fn image_deploys(&self, etcd: &[EtcdVersion], say: &dyn Fn(&str)) -> Result<Vec<ImageDeploy>>;
    /// The `[lock] persistence` the run has, for the report (systems that keep
    /// their data by a setting of it).
    fn persistence(&self, _s: &Scenario) -> Option<&'static str> {
        None
    }
    /// Whether its clients read each grant's place in the service's order
    /// (etcd's CreateRevision, ZooKeeper's czxid); when not (Redis, Redlock), the
    /// harness orders the grants by what it observed before anything judges.
    fn numbers_grants_itself(&self) -> bool {
        true
    }
    /// Whether `--etcd <version>` picks its version and the report's
    /// `etcd_version` is its version (etcd itself; the field predates the rest).
    fn etcd_versioned(&self) -> bool {
        false
    }
    /// `tracing` directives (`,target=level`) for its client crates' logs.
    fn quiet_logs(&self) -> &'static str {
        ""
    }
    /// The harness's handle on running members (client addresses, direct).
    async fn connect(
        &self,
        kind: ServiceKind,
        clients: &[SocketAddr],
        access: Option<&ServiceAccess>,
    ) -> Result<Arc<dyn LockService>>;
    /// Waits until a member answers at `client` (its own health check).
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()>;
    /// fencecheck's own worker-side client.
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>>;
    /// How an external adapter's sessions and grants on it are tied to their
    /// worker (its owner entries), for one worker.
    fn external_owners(&self, cfg: &ClientConfig) -> Box<dyn external::owner::Owners>;
}

/// A system's scenario rules: the `[lock]` and `[storage] token` settings it has
/// beyond the common ones (the plan refuses the others, naming the systems that
/// have them), and its own checks.
pub struct Rules {
    /// Its own rules over a parsed scenario (version, TTL, members, tokens), each
    /// error at the line of the field it names (`Scenario::source`).
    pub check: fn(&Scenario) -> Result<(), ScenarioError>,
    /// `[storage] token` names it has (an external client's `[client] token`
    /// is judged by `scenario/client.rs`, not here).
    pub tokens: &'static [TokenName],
    /// What its tokens are, appended to the refusal of one it does not have.
    pub tokens_why: &'static str,
    /// `[lock] persistence`.
    pub persistence: bool,
    /// `[lock] renew_deadline` and `retry_period` (an elector's timing).
    pub elector_timing: bool,
    /// `[lock] apiserver = "cluster"`: it can elect on the kubernetes backend's
    /// cluster's own API server instead of members of its own.
    pub cluster_apiserver: bool,
}

/// A `[cluster] version` the system does not have, refused at the line of
/// whichever spelling the file uses (`etcd` in 0.1 scenarios).
pub fn version_refused(
    s: &Scenario,
    ok: impl Fn(&str) -> bool,
    want: &str,
) -> Result<(), ScenarioError> {
    match &s.cluster.version {
        Some(v) if !ok(v) => {
            let key = if s.source.has_key("version") {
                "version"
            } else {
                "etcd"
            };
            Err(s.source.error_at_key(
                key,
                format!(
                    "cluster.version = {v:?} is not available for {}; expected {want}",
                    s.lock.service
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The registry: the system behind a `[lock] service` kind.
pub fn system(kind: ServiceKind) -> &'static dyn System {
    match kind {
        ServiceKind::Etcd => &etcd::Etcd,
        ServiceKind::Zookeeper => &zookeeper::Zookeeper,
        ServiceKind::Redis => &redis::Redis { redlock: false },
        ServiceKind::Redlock => &redis::Redis { redlock: true },
        ServiceKind::Kubernetes => &kubernetes::Kubernetes,
    }
}

/// One system's image to build: its name, and its deployment or why it is not
/// installed here.
pub type ImageDeploy = (&'static str, Result<Box<dyn Deploy>>);

/// One system per deployment (Redlock runs Redis's): what `fencecheck images`
/// builds, whose logs [`quiet_logs`] quiets.
pub fn every() -> [&'static dyn System; 4] {
    [
        &etcd::Etcd,
        &zookeeper::Zookeeper,
        &redis::Redis { redlock: false },
        &kubernetes::Kubernetes,
    ]
}

/// Every system's [`System::quiet_logs`], for the default log filter.
pub fn quiet_logs() -> String {
    every().iter().map(|s| s.quiet_logs()).collect()
}

/// Connects the worker's lock client: the user's adapter when `[client]` names
/// one (any system), else fencecheck's own client for the system.
pub async fn connect_client(cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
    if let Some(ext) = &cfg.external {
        return Ok(Box::new(external::ExternalClient::start(cfg, ext).await?));
    }
    system(cfg.service).client(cfg).await
}
