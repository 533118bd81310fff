//! `[[fault]]` tables: the fault kinds, the targets they hit, and each kind's own
//! fields. A table is a tagged enum ([`Fault`], tagged by `kind`): a field a kind
//! does not take is a serde error, located by [`locate_error`] at its own line.
//! What a kind needs (a `duration`, a `latency`, a `by`) and which targets fit it
//! are its own rules ([`Fault::check`]); what the lock system or the backend can do
//! is not the config's to know (`crate::plan`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The one list of fault kinds: the scenario's `kind` and the history's `f` of a
/// nemesis event (`crate::record::history::F::Fault`) are both this.
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

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Pause,
        FaultKind::RevokeLease,
        FaultKind::ExpireSession,
        FaultKind::Delay,
        FaultKind::Partition,
        FaultKind::Kill,
        FaultKind::ClockJump,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::RevokeLease => "revoke-lease",
            FaultKind::ExpireSession => "expire-session",
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::Kill => "kill",
            FaultKind::ClockJump => "clock-jump",
        }
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault kind {s:?}"))
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

/// What an aimed fault fires on (`[[fault]] aim`): an event of a worker's own
/// record, seen by the harness as it is written. `renew` is named so that asking
/// for it gets a clear refusal: workers do not record their keepalives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AimEvent {
    /// A worker was told it holds the lock (its acquire answered `ok`).
    Grant,
    /// A holder's read of the storage answered: the fault lands between the
    /// read and the write that depends on it.
    Read,
    /// A holder's write sent (in flight).
    Write,
    /// A waiter's acquire sent (in flight).
    Acquire,
    /// A session renewal in flight: not observable (refused by `check`).
    Renew,
}

impl AimEvent {
    pub const ALL: [AimEvent; 5] = [
        AimEvent::Grant,
        AimEvent::Read,
        AimEvent::Write,
        AimEvent::Acquire,
        AimEvent::Renew,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AimEvent::Grant => "grant",
            AimEvent::Read => "read",
            AimEvent::Write => "write",
            AimEvent::Acquire => "acquire",
            AimEvent::Renew => "renew",
        }
    }

    /// The kind's most damaging moment (`aim = true`, `--aim`) for the `nth`
    /// injection (from 0) of a fault of `kind` on `target`: a worker paused
    /// between its read and its write (the write then lands under a grant that
    /// is gone: the stale write fencing must refuse); a session ended there too
    /// — and, every other injection, while the holder's write is in flight
    /// instead (the next holder then reads while that write is between a
    /// storage's check and its store: the race of a check-then-write storage);
    /// a holder's links slowed from its read on; a holder's links cut, or a
    /// member or the storage hit, right after a grant (the whole hold then runs
    /// under it).
    pub fn most_damaging(kind: FaultKind, target: Target, nth: usize) -> AimEvent {
        match kind {
            FaultKind::Pause if target.is_worker() => AimEvent::Read,
            FaultKind::RevokeLease | FaultKind::ExpireSession if nth % 2 == 1 => AimEvent::Write,
            FaultKind::RevokeLease | FaultKind::ExpireSession => AimEvent::Read,
            FaultKind::Delay => AimEvent::Read,
            _ => AimEvent::Grant,
        }
    }
}

impl Serialize for AimEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for AimEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[[fault]] aim`: `true` for the kind's most damaging event, or an event's
/// name. `false` is the same as leaving it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "AimRepr", into = "AimRepr")]
pub enum Aim {
    #[default]
    Off,
    MostDamaging,
    On(AimEvent),
}

impl Aim {
    pub fn is_on(self) -> bool {
        self != Aim::Off
    }

    /// The event its `nth` injection fires on, for a fault of `kind` on
    /// `target`.
    pub fn event(self, kind: FaultKind, target: Target, nth: usize) -> Option<AimEvent> {
        match self {
            Aim::Off => None,
            Aim::MostDamaging => Some(AimEvent::most_damaging(kind, target, nth)),
            Aim::On(e) => Some(e),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum AimRepr {
    Flag(bool),
    Event(String),
}

impl std::str::FromStr for Aim {
    type Err = String;
    /// `--aim[=EVENT]`: `true` (the flag alone) or an event an aim can see.
    fn from_str(s: &str) -> Result<Self, String> {
        let a = match s {
            "true" => Aim::MostDamaging,
            _ => Aim::try_from(AimRepr::Event(s.to_string()))?,
        };
        if a == Aim::On(AimEvent::Renew) {
            return Err(RENEW_UNSEEN.into());
        }
        Ok(a)
    }
}

/// Why `renew` cannot be aimed at.
pub const RENEW_UNSEEN: &str = "aim = \"renew\" cannot be seen: workers do not record \
     their session renewals (keepalives); aim at grant, read, write or acquire";

impl TryFrom<AimRepr> for Aim {
    type Error = String;
    fn try_from(r: AimRepr) -> Result<Self, String> {
        match r {
            AimRepr::Flag(false) => Ok(Aim::Off),
            AimRepr::Flag(true) => Ok(Aim::MostDamaging),
            AimRepr::Event(s) => AimEvent::ALL
                .into_iter()
                .find(|e| e.as_str() == s)
                .map(Aim::On)
                .ok_or_else(|| {
                    format!(
                        "unknown aim {s:?}, expected true (the kind's most damaging event), \
                         grant, read, write or acquire"
                    )
                }),
        }
    }
}

impl From<Aim> for AimRepr {
    fn from(a: Aim) -> AimRepr {
        match a {
            Aim::Off => AimRepr::Flag(false),
            Aim::MostDamaging => AimRepr::Flag(true),
            Aim::On(e) => AimRepr::Event(e.as_str().to_string()),
        }
    }
}
