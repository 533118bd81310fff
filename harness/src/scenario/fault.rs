//! `[[fault]]` tables: the fault kinds and the targets they hit.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGSTOP the target for `duration`, then SIGCONT.
    Pause,
    /// Revoke the target's lease through the etcd API (`etcdctl lease revoke`).
    RevokeLease,
    /// End the target's session at the service (etcd: LeaseRevoke; ZooKeeper: the
    /// session expired, the way ZooKeeper's own tests do it).
    ExpireSession,
    /// Add latency (± `latency_jitter`) on the target's links, through the proxies.
    Delay,
    /// Blackhole the target's links: connections stay open, bytes are dropped.
    Partition,
    /// SIGKILL service members (or the storage); restart them on their data after
    /// `restart_after`.
    Kill,
    /// Step a Redis instance's wall clock forward by `by` (clockshim under the
    /// instance; process backend): every key set before the jump expires `by`
    /// early. The clock stays ahead, as after a real step; the fault's window is
    /// `duration`, by default the lock TTL (by then every key set before the jump
    /// would have expired anyway).
    ClockJump,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Pause => "pause",
            FaultKind::RevokeLease => "revoke-lease",
            FaultKind::ExpireSession => "expire-session",
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::Kill => "kill",
            FaultKind::ClockJump => "clock-jump",
        })
    }
}

/// Who a fault hits. Resolved at injection time (the holder and the leader change).
/// Member sets follow Jepsen's node specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    /// The worker that holds a lock now, as the service sees it.
    #[default]
    Holder,
    RandomWorker,
    AllWorkers,
    Worker(u32),
    /// Links: every worker's connections to the lock service (`workers->etcd`).
    WorkersToService,
    /// Links: the current holder's connections to the lock service (its session
    /// is kept alive no more, it expires, the holder keeps writing — the classic).
    HolderToService,
    /// Links: every worker's connections to the storage.
    WorkersToStorage,
    /// A member: its process (pause, kill) or every link into it (delay,
    /// partition). `etcd-member:N` too.
    Member(u8),
    /// The service's leader at injection time (`etcd-leader` too).
    Leader,
    /// Every member.
    AllMembers,
    /// A majority of members, chosen at random (the leader may or may not be in it).
    Majority,
    /// A minority of members (at least one; needs 3 or more members).
    Minority,
    /// A random non-empty subset of members.
    RandomMembers,
    /// etcd's leader plus enough members to make a minority, cut off from the
    /// majority.
    EtcdMajorityMinority,
    /// The storage process (pause; kill on the process backend).
    Storage,
}

impl Target {
    /// Does this target name worker processes (as opposed to links or members)?
    pub fn is_worker(&self) -> bool {
        matches!(
            self,
            Target::Holder | Target::RandomWorker | Target::AllWorkers | Target::Worker(_)
        )
    }

    /// Does this target name service members?
    pub fn is_members(&self) -> bool {
        matches!(
            self,
            Target::Member(_)
                | Target::Leader
                | Target::AllMembers
                | Target::Majority
                | Target::Minority
                | Target::RandomMembers
                | Target::EtcdMajorityMinority
        )
    }

    /// Does this target name links between workers and services?
    pub fn is_worker_link(&self) -> bool {
        matches!(
            self,
            Target::WorkersToService | Target::HolderToService | Target::WorkersToStorage
        )
    }

    /// The fewest members this target makes sense with.
    pub fn min_members(&self) -> u8 {
        match self {
            Target::Member(n) => n + 1,
            Target::Minority | Target::EtcdMajorityMinority => 3,
            _ => 1,
        }
    }
}

impl TryFrom<String> for Target {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "holder" => Ok(Target::Holder),
            "random-worker" => Ok(Target::RandomWorker),
            "all-workers" => Ok(Target::AllWorkers),
            "workers->service" | "workers->etcd" => Ok(Target::WorkersToService),
            "holder->service" | "holder->etcd" => Ok(Target::HolderToService),
            "workers->storage" => Ok(Target::WorkersToStorage),
            "leader" | "etcd-leader" => Ok(Target::Leader),
            "all-members" => Ok(Target::AllMembers),
            "majority" => Ok(Target::Majority),
            "minority" => Ok(Target::Minority),
            "random-members" => Ok(Target::RandomMembers),
            "etcd-majority-minority" => Ok(Target::EtcdMajorityMinority),
            "storage" => Ok(Target::Storage),
            _ => {
                let member = s
                    .strip_prefix("member:")
                    .or_else(|| s.strip_prefix("etcd-member:"));
                if let Some(n) = member {
                    return n
                        .parse()
                        .map(Target::Member)
                        .map_err(|_| format!("target {s:?}: expected member:N with N a number"));
                }
                if let Some(n) = s.strip_prefix("worker:") {
                    return n
                        .parse()
                        .map(Target::Worker)
                        .map_err(|_| format!("target {s:?}: expected worker:N with N a number"));
                }
                Err(format!(
                    "unknown target {s:?}, expected holder, random-worker, all-workers, worker:N, \
                     workers->service, holder->service, workers->storage, leader, member:N, \
                     all-members, majority, minority, random-members, etcd-majority-minority \
                     or storage"
                ))
            }
        }
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        t.to_string()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Holder => f.write_str("holder"),
            Target::RandomWorker => f.write_str("random-worker"),
            Target::AllWorkers => f.write_str("all-workers"),
            Target::Worker(n) => write!(f, "worker:{n}"),
            Target::WorkersToService => f.write_str("workers->service"),
            Target::HolderToService => f.write_str("holder->service"),
            Target::WorkersToStorage => f.write_str("workers->storage"),
            Target::Member(n) => write!(f, "member:{n}"),
            Target::Leader => f.write_str("leader"),
            Target::AllMembers => f.write_str("all-members"),
            Target::Majority => f.write_str("majority"),
            Target::Minority => f.write_str("minority"),
            Target::RandomMembers => f.write_str("random-members"),
            Target::EtcdMajorityMinority => f.write_str("etcd-majority-minority"),
            Target::Storage => f.write_str("storage"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    #[serde(default)]
    pub target: Target,
    /// One injection at this offset from the start of the run.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub at: Option<Duration>,
    /// Repeated injections; the first one after `every` (or a random gap with jitter).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub every: Option<Duration>,
    /// With `every`: gaps drawn uniformly from [0, 2*every) with the scenario's seed.
    #[serde(default)]
    pub jitter: bool,
    /// How long the fault lasts (pause, delay, partition); a kill lasts until the
    /// restart; revoke-lease is instantaneous.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub duration: Option<Duration>,
    /// delay: added latency per chunk, each way.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub latency: Option<Duration>,
    /// delay: uniform ± jitter around `latency`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub latency_jitter: Option<Duration>,
    /// kill: how long the member (or storage) stays dead before it is restarted
    /// (default 3s).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub restart_after: Option<Duration>,
    /// clock-jump: how far the instance's wall clock steps forward.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub by: Option<Duration>,
}

impl FaultSpec {
    /// How long one occurrence lasts, for the schedule (`ttl`: the lock's, the
    /// default window of a clock jump).
    pub fn window(&self, ttl: Duration) -> Duration {
        match self.kind {
            FaultKind::ClockJump => self.duration.unwrap_or(ttl),
            FaultKind::RevokeLease | FaultKind::ExpireSession => Duration::ZERO,
            FaultKind::Kill => self.restart_after.unwrap_or(Duration::from_secs(3)),
            _ => self.duration.unwrap_or_default(),
        }
    }
}
