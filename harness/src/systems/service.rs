//! The lock-service seam, harness side (how it is deployed is [`super::members`]):
//! what the harness can ask it (holders, leader, sessions) **from its own state**,
//! what it can do to it (expire a session), what it records of it (the grants and
//! session ends it observes, for the findings), and which faults it can take —
//! declared up front, as etcd robustness's `failpoint.Available`, so `validate`
//! refuses the rest before anything starts. Each service sits beside the trait.

use anyhow::Result;
use serde::Serialize;

use crate::scenario::{BackendKind, FaultKind, ServiceKind, Target};

/// Is a fault available for a service on a backend?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Yes,
    No(String),
}

/// What a service can take, whatever the backend.
pub struct Capabilities {
    /// `expire-session` (etcd: LeaseRevoke; ZooKeeper: session expiry).
    pub expire_session: bool,
    /// `revoke-lease` (etcd's own word for it).
    pub revoke_lease: bool,
    /// The service has a leader the harness can find (`leader` targets).
    pub leader: bool,
}

/// Whether `kind` on `target` can be done for `service` on `backend`. For `auto`,
/// what either backend can do (the run checks again once it knows which).
pub fn available(
    service: ServiceKind,
    backend: BackendKind,
    kind: FaultKind,
    target: Target,
) -> Availability {
    let caps = crate::systems::system(service).capabilities();
    if kind == FaultKind::RevokeLease && !caps.revoke_lease {
        return Availability::No(format!(
            "{service} has no leases to revoke; use kind = \"expire-session\""
        ));
    }
    if kind == FaultKind::ExpireSession && !caps.expire_session {
        return Availability::No(format!("{service} cannot expire a session"));
    }
    if matches!(target, Target::Leader | Target::EtcdMajorityMinority) && !caps.leader {
        return Availability::No(format!("{service} has no leader to find"));
    }
    if target == Target::EtcdMajorityMinority && service != ServiceKind::Etcd {
        return Availability::No(format!(
            "etcd-majority-minority is etcd's; on {service} use majority or minority"
        ));
    }
    // The clock is stepped by clockshim under redis-server processes: Redis only
    // (its expiry reads the wall clock), process backend only.
    if kind == FaultKind::ClockJump {
        if !service.is_redis() {
            return Availability::No(format!(
                "clock-jump steps a Redis instance's wall clock (clockshim under \
                 redis-server); {service} is not available for it"
            ));
        }
        if backend == BackendKind::Docker {
            return Availability::No(
                "clock-jump is done on the process backend only (clockshim is preloaded \
                 into redis-server processes); use backend = \"process\""
                    .into(),
            );
        }
    }
    // Redis instances have no peers, hence no peer proxies to cut or slow.
    if service.is_redis()
        && matches!(kind, FaultKind::Delay | FaultKind::Partition)
        && target.is_members()
    {
        return Availability::No(format!(
            "{kind} of {target}: {service} instances have no peer links; use \
             holder->service or workers->service"
        ));
    }
    // Member links are slowed through the peer proxies, which only the process
    // backend has; a docker member can be cut off (network disconnect), not slowed.
    if backend == BackendKind::Docker && kind == FaultKind::Delay && target.is_members() {
        return Availability::No(format!(
            "delay of {target} needs peer proxies, which only the process backend has \
             (docker can partition members, not slow them)"
        ));
    }
    Availability::Yes
}

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
