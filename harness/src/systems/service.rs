//! The lock-service seam, harness side (how it is deployed is [`super::members`]):
//! what the harness can ask it (holders, leader, sessions) **from its own state**,
//! what it can do to it (expire a session), what it records of it (the grants and
//! session ends it observes, for the findings), and what it can take — declared up
//! front ([`Capabilities`]), as etcd robustness's `failpoint.Available`, so the
//! plan refuses the rest before anything starts. Each service sits beside the trait.

use anyhow::Result;
use serde::Serialize;

use crate::scenario::ServiceKind;

/// What a system can take, whatever the backend: declared by each system, read by
/// the plan (`crate::plan`) and the nemesis's per-kind availability.
pub struct Capabilities {
    /// `expire-session` (etcd: LeaseRevoke; ZooKeeper: session expiry).
    pub expire_session: bool,
    /// `revoke-lease` (etcd's own word for it).
    pub revoke_lease: bool,
    /// The service has a leader the harness can find (`leader` targets).
    pub leader: bool,
    /// Members talk to each other (peer links a partition or a delay can hit).
    pub peer_links: bool,
    /// `etcd-majority-minority`: the leader plus a minority, cut off (etcd's).
    pub majority_minority: bool,
    /// `clock-jump`: its leases expire by a member's wall clock (Redis).
    pub clock_jump: bool,
    /// `clock-jump` of a worker: its clients judge a lease's expiry by their own
    /// clock (Kubernetes' electors), so a worker's clock is worth stepping.
    pub client_clock: bool,
}

/// Where the harness passes a worker its service's access material
/// ([`ServiceAccess`] as JSON: a bearer token for Kubernetes Lease): the
/// environment, which only its own user reads (`/proc/PID/environ`), not the
/// command line, which every user of the machine reads; in a pod, from a
/// Secret, not the pod's spec. Not passed on to a `[client]` adapter (it gets
/// the token in `open`).
pub const ACCESS_ENV: &str = "FENCECHECK_WORKER_ACCESS";

/// How the harness and the workers authenticate to a service that asks (the
/// Kubernetes apiserver): material the deployment generates per run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ServiceAccess {
    /// A bearer token the service accepts.
    pub token: String,
    /// The CA that signed the service's serving certificate (PEM).
    pub ca_pem: String,
    /// The name the certificate is for (clients reach it through proxies, so not
    /// by its address).
    pub server_name: String,
    /// The namespace the Leases are in: `default` on the run's own apiserver,
    /// the run's namespace on the cluster's (`[lock] apiserver = "cluster"`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

impl ServiceAccess {
    /// The namespace of an access that names none: the run's own apiserver's
    /// `default`, where its bootstrap controller makes the Leases' namespace
    /// (the Lease system's `lease::NAMESPACE`).
    pub const DEFAULT_NAMESPACE: &'static str = "default";
}

fn default_namespace() -> String {
    ServiceAccess::DEFAULT_NAMESPACE.to_string()
}

// The availability of a fault moved to `crate::plan`; the backend's `auto` choice
// still asks it here.

/// A holder of a lock, as the service sees it now.
#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub worker: u32,
    pub pid: u32,
    pub session: i64,
    /// The grant (etcd CreateRevision, ZooKeeper czxid).
    pub grant: i64,
    /// The storage key the lock guards.
    pub key: String,
}

/// A worker's session as the service sees it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionOwner {
    pub session: i64,
    pub worker: u32,
    pub pid: u32,
}

impl SessionOwner {
    /// From the session → (worker, pid) map both services read off their owner
    /// entries.
    pub fn from_map(owners: std::collections::BTreeMap<i64, (u32, u32)>) -> Vec<SessionOwner> {
        owners
            .into_iter()
            .map(|(session, (worker, pid))| SessionOwner {
                session,
                worker,
                pid,
            })
            .collect()
    }
}

/// The harness's handle on a running lock service. Every call is bounded in time
/// and goes to the members directly, never through the workers' fault proxies.
#[async_trait::async_trait]
pub trait LockService: Send + Sync {
    fn kind(&self) -> ServiceKind;
    /// Current holders of every lock.
    async fn holders(&self) -> Result<Vec<Holder>>;
    /// Every live worker session, with its owner.
    async fn sessions(&self) -> Result<Vec<SessionOwner>>;
    /// The index of the member that leads now.
    async fn leader(&self) -> Result<usize>;
    /// Whether the service holds the grant a client reported, now: its `entry`
    /// (the key or znode the library wrote) exists, with `value` when given.
    /// `None` when the service cannot tell (the default); the nemesis then does
    /// not trust the report (`crate::nemesis::target`).
    async fn holds(&self, _entry: &str, _value: Option<&str>) -> Result<Option<bool>> {
        Ok(None)
    }
    /// Ends a session at the service; returns what was done, for the record.
    async fn expire_session(&self, session: i64) -> Result<serde_json::Value>;
    /// Member `i`'s own wall clock now, in µs since the epoch, as the member says it
    /// (Redis: `TIME`): how the clock-jump fault sees its step take effect.
    async fn member_time_us(&self, i: usize) -> Result<i64> {
        anyhow::bail!("{} does not tell its clock (member {i})", self.kind())
    }
    /// Records, until `stop` fires, what the service itself says about grants and
    /// sessions (see [`crate::record::observe`]): the ground truth for the findings.
    async fn observe(
        &self,
        out: crate::record::observe::ObservationWriter,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()>;
}
