//! Scenario files: TOML → a validated [`Scenario`].
//!
//! Most validation happens during deserialization (enums, `try_from` newtypes,
//! human durations), so the TOML parser's error already names the file, line,
//! column and field. The few cross-field rules run afterwards and point at the line
//! of the field they name.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use fencecheck_storage::Fencing;

/// A bad scenario: where, and what was expected. Always exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "defaults::duration", with = "humantime_serde")]
    pub duration: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default)]
    pub cluster: Cluster,
    #[serde(default)]
    pub lock: Lock,
    #[serde(default)]
    pub storage: Storage,
    #[serde(default)]
    pub workload: Workload,
    #[serde(default, rename = "fault", skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultSpec>,
    #[serde(default)]
    pub expect: Expect,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    #[serde(default = "defaults::members")]
    pub etcd_members: Members,
    #[serde(default)]
    pub etcd: EtcdVersion,
    #[serde(default)]
    pub backend: BackendKind,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            etcd_members: defaults::members(),
            etcd: EtcdVersion::default(),
            backend: BackendKind::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Members(pub u8);

impl TryFrom<u8> for Members {
    type Error = String;
    fn try_from(n: u8) -> Result<Self, String> {
        match n {
            1 | 3 | 5 => Ok(Members(n)),
            _ => Err(format!("etcd_members = {n}: expected 1, 3 or 5")),
        }
    }
}

impl From<Members> for u8 {
    fn from(m: Members) -> u8 {
        m.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EtcdVersion {
    #[default]
    #[serde(rename = "3.5")]
    V3_5,
    #[serde(rename = "3.4")]
    V3_4,
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EtcdVersion::V3_5 => "3.5",
            EtcdVersion::V3_4 => "3.4",
        })
    }
}

impl std::str::FromStr for EtcdVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "3.5" => Ok(EtcdVersion::V3_5),
            "3.4" => Ok(EtcdVersion::V3_4),
            _ => Err(format!("unknown etcd version {s:?}, expected 3.5 or 3.4")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    #[default]
    Auto,
    Process,
    Docker,
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "process" => Ok(BackendKind::Process),
            "docker" => Ok(BackendKind::Docker),
            _ => Err(format!(
                "unknown backend {s:?}, expected auto, process or docker"
            )),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// Lease TTL. etcd raises anything under 2 s to 2 s silently; we refuse it instead.
    #[serde(default = "defaults::ttl", with = "humantime_serde")]
    pub ttl: Duration,
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            ttl: defaults::ttl(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenMode {
    /// The lock key's CreateRevision: the correct token.
    #[default]
    Revision,
    /// The lease ID, as etcd's contrib/lock demo does: not ordered across grants.
    LeaseId,
    /// No token at all (only with `fencing = "off"`).
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    #[serde(default = "defaults::fencing")]
    pub fencing: Fencing,
    #[serde(default)]
    pub token: TokenMode,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            fencing: defaults::fencing(),
            token: TokenMode::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    #[serde(default = "defaults::workers")]
    pub workers: u32,
    #[serde(default = "defaults::keys")]
    pub keys: u32,
    #[serde(default = "defaults::ops_per_hold")]
    pub ops_per_hold: u32,
    #[serde(default = "defaults::hold")]
    pub hold: DurationRange,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            workers: defaults::workers(),
            keys: defaults::keys(),
            ops_per_hold: defaults::ops_per_hold(),
            hold: defaults::hold(),
        }
    }
}

/// `"0ms..500ms"`, or a single duration for a fixed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DurationRange {
    pub min: Duration,
    pub max: Duration,
}

impl TryFrom<String> for DurationRange {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let parse = |p: &str| {
            humantime::parse_duration(p.trim())
                .map_err(|e| format!("{p:?} is not a duration ({e}); expected e.g. \"250ms\""))
        };
        let (min, max) = match s.split_once("..") {
            Some((a, b)) => (parse(a)?, parse(b)?),
            None => {
                let d = parse(&s)?;
                (d, d)
            }
        };
        if min > max {
            return Err(format!("range {s:?} has min > max"));
        }
        Ok(DurationRange { min, max })
    }
}

impl From<DurationRange> for String {
    fn from(r: DurationRange) -> String {
        format!(
            "{}..{}",
            humantime::format_duration(r.min),
            humantime::format_duration(r.max)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGSTOP the target for `duration`, then SIGCONT.
    Pause,
    /// Revoke the target's lease through the etcd API (`etcdctl lease revoke`).
    RevokeLease,
    /// Add latency (± `latency_jitter`) on the target's links, through the proxies.
    Delay,
    /// Blackhole the target's links: connections stay open, bytes are dropped.
    Partition,
    /// SIGKILL an etcd member; restart it on the same data dir after `restart_after`.
    Kill,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Pause => "pause",
            FaultKind::RevokeLease => "revoke-lease",
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::Kill => "kill",
        })
    }
}

/// Who a fault hits. Resolved at injection time (the holder changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    /// The worker that holds the lock now, as etcd sees it.
    #[default]
    Holder,
    RandomWorker,
    AllWorkers,
    Worker(u32),
    /// Links: every worker's connections to etcd.
    WorkersToEtcd,
    /// Links: the current holder's connections to etcd (its keepalives fail, its
    /// lease expires, it keeps writing — the classic).
    HolderToEtcd,
    /// Links: every worker's connections to the storage.
    WorkersToStorage,
    /// An etcd member: its process (pause, kill) or every link into it (delay,
    /// partition).
    EtcdMember(u8),
    /// The etcd leader, found through the status API at injection time.
    EtcdLeader,
    /// A minority of members (the leader among them) cut off from the majority.
    EtcdMajorityMinority,
    /// The storage process.
    Storage,
}

impl Target {
    /// Does this target name worker processes (as opposed to links or etcd/storage)?
    pub fn is_worker(&self) -> bool {
        matches!(
            self,
            Target::Holder | Target::RandomWorker | Target::AllWorkers | Target::Worker(_)
        )
    }
}

impl TryFrom<String> for Target {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "holder" => Ok(Target::Holder),
            "random-worker" => Ok(Target::RandomWorker),
            "all-workers" => Ok(Target::AllWorkers),
            "workers->etcd" => Ok(Target::WorkersToEtcd),
            "holder->etcd" => Ok(Target::HolderToEtcd),
            "workers->storage" => Ok(Target::WorkersToStorage),
            "etcd-leader" => Ok(Target::EtcdLeader),
            "etcd-majority-minority" => Ok(Target::EtcdMajorityMinority),
            "storage" => Ok(Target::Storage),
            _ => {
                if let Some(n) = s.strip_prefix("etcd-member:") {
                    return n.parse().map(Target::EtcdMember).map_err(|_| {
                        format!("target {s:?}: expected etcd-member:N with N a number")
                    });
                }
                if let Some(n) = s.strip_prefix("worker:") {
                    return n
                        .parse()
                        .map(Target::Worker)
                        .map_err(|_| format!("target {s:?}: expected worker:N with N a number"));
                }
                Err(format!(
                    "unknown target {s:?}, expected holder, random-worker, all-workers, worker:N, \
                     workers->etcd, holder->etcd, workers->storage, etcd-leader, etcd-member:N, \
                     etcd-majority-minority or storage"
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
            Target::WorkersToEtcd => f.write_str("workers->etcd"),
            Target::HolderToEtcd => f.write_str("holder->etcd"),
            Target::WorkersToStorage => f.write_str("workers->storage"),
            Target::EtcdMember(n) => write!(f, "etcd-member:{n}"),
            Target::EtcdLeader => f.write_str("etcd-leader"),
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
    /// kill: how long the member stays dead before it is restarted (default 3s).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub restart_after: Option<Duration>,
}

impl FaultSpec {
    /// How long one occurrence lasts, for the schedule.
    pub fn window(&self) -> Duration {
        match self.kind {
            FaultKind::RevokeLease => Duration::ZERO,
            FaultKind::Kill => self.restart_after.unwrap_or(Duration::from_secs(3)),
            _ => self.duration.unwrap_or_default(),
        }
    }
}

/// An expected count: `0`, `">0"`, `">=N"`, `"<=N"`, `N`, or `"any"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CountRepr", into = "String")]
pub enum Count {
    Any,
    Exactly(u64),
    AtLeast(u64),
    AtMost(u64),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CountRepr {
    N(u64),
    S(String),
}

impl TryFrom<CountRepr> for Count {
    type Error = String;
    fn try_from(r: CountRepr) -> Result<Self, String> {
        let s = match r {
            CountRepr::N(n) => return Ok(Count::Exactly(n)),
            CountRepr::S(s) => s,
        };
        let t = s.trim();
        let num = |p: &str| {
            p.trim()
                .parse::<u64>()
                .map_err(|_| format!("{s:?}: expected 0, \">0\", \">=N\", \"<=N\", N or \"any\""))
        };
        if t == "any" {
            Ok(Count::Any)
        } else if let Some(rest) = t.strip_prefix(">=") {
            Ok(Count::AtLeast(num(rest)?))
        } else if let Some(rest) = t.strip_prefix("<=") {
            Ok(Count::AtMost(num(rest)?))
        } else if let Some(rest) = t.strip_prefix('>') {
            Ok(Count::AtLeast(num(rest)? + 1))
        } else {
            Ok(Count::Exactly(num(t)?))
        }
    }
}

impl From<Count> for String {
    fn from(c: Count) -> String {
        c.to_string()
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Any => f.write_str("any"),
            Count::Exactly(n) => write!(f, "{n}"),
            Count::AtLeast(n) => write!(f, ">={n}"),
            Count::AtMost(n) => write!(f, "<={n}"),
        }
    }
}

impl Count {
    pub fn matches(&self, n: u64) -> bool {
        match *self {
            Count::Any => true,
            Count::Exactly(m) => n == m,
            Count::AtLeast(m) => n >= m,
            Count::AtMost(m) => n <= m,
        }
    }
}

/// What the run must show. Unset counts are not checked, except
/// `fencing_violations`, which defaults to 0: that is what fencing promises.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default = "defaults::zero")]
    pub fencing_violations: Count,
    /// Stale writes the storage rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_rejected: Option<Count>,
    /// Writes from the newest grant that the storage rejected (a liveness failure,
    /// e.g. `contrib/lock`'s equality check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_rejected: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutex_overlaps: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_updates: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_lost: Option<Count>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linearizable: Option<bool>,
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            fencing_violations: defaults::zero(),
            stale_rejected: None,
            fresh_rejected: None,
            mutex_overlaps: None,
            lost_updates: None,
            keepalive_lost: None,
            linearizable: None,
        }
    }
}

mod defaults {
    use super::*;
    pub fn duration() -> Duration {
        Duration::from_secs(20)
    }
    pub fn members() -> Members {
        Members(1)
    }
    pub fn ttl() -> Duration {
        Duration::from_secs(2)
    }
    pub fn fencing() -> Fencing {
        Fencing::Monotonic
    }
    pub fn workers() -> u32 {
        5
    }
    pub fn keys() -> u32 {
        1
    }
    pub fn ops_per_hold() -> u32 {
        3
    }
    pub fn hold() -> DurationRange {
        DurationRange {
            min: Duration::ZERO,
            max: Duration::from_millis(500),
        }
    }
    pub fn zero() -> Count {
        Count::Exactly(0)
    }
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            message: format!("cannot read scenario file: {e}"),
        })?;
        Scenario::parse(&text, &file)
    }

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let sc: Scenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of_offset(text, s.start));
            ScenarioError {
                file: file.to_string(),
                line,
                message: e.message().to_string(),
            }
        })?;
        sc.validate(text, file)?;
        Ok(sc)
    }

    fn validate(&self, text: &str, file: &str) -> Result<(), ScenarioError> {
        let err = |key: &str, message: String| ScenarioError {
            file: file.to_string(),
            line: line_of_key(text, key),
            message,
        };
        if self.name.trim().is_empty() {
            return Err(err("name", "`name` must not be empty".into()));
        }
        if self.duration < Duration::from_secs(1) {
            return Err(err("duration", "`duration` must be at least 1s".into()));
        }
        if self.lock.ttl < Duration::from_secs(2) {
            return Err(err(
                "ttl",
                format!(
                    "lock.ttl = {}: etcd's minimum lease TTL is 2s (it would silently raise it); \
                     expected at least \"2s\"",
                    humantime::format_duration(self.lock.ttl)
                ),
            ));
        }
        if self.lock.ttl.subsec_nanos() != 0 {
            return Err(err(
                "ttl",
                "lock.ttl: etcd leases have whole-second TTLs; expected e.g. \"2s\"".into(),
            ));
        }
        let w = &self.workload;
        if w.workers == 0 || w.workers > 64 {
            return Err(err(
                "workers",
                format!("workload.workers = {}: expected 1 to 64", w.workers),
            ));
        }
        if w.keys == 0 || w.keys > 1000 {
            return Err(err(
                "keys",
                format!("workload.keys = {}: expected 1 to 1000", w.keys),
            ));
        }
        if w.ops_per_hold == 0 {
            return Err(err(
                "ops_per_hold",
                "workload.ops_per_hold must be at least 1".into(),
            ));
        }
        if self.storage.token == TokenMode::None && self.storage.fencing != Fencing::Off {
            return Err(err(
                "token",
                "storage.token = \"none\" needs storage.fencing = \"off\" (nothing to compare)"
                    .into(),
            ));
        }
        for (i, f) in self.faults.iter().enumerate() {
            let ferr = |key: &str, message: String| ScenarioError {
                file: file.to_string(),
                line: line_of_nth_table_key(text, "[[fault]]", i, key),
                message: format!("fault #{} ({}): {message}", i + 1, f.kind),
            };
            match (f.at, f.every) {
                (None, None) => {
                    return Err(ferr("kind", "needs `at` or `every`".into()));
                }
                (Some(_), Some(_)) => {
                    return Err(ferr("every", "has both `at` and `every`; pick one".into()));
                }
                (_, Some(e)) if e < Duration::from_millis(100) => {
                    return Err(ferr("every", "`every` must be at least 100ms".into()));
                }
                _ => {}
            }
            if f.jitter && f.every.is_none() {
                return Err(ferr("jitter", "`jitter` only goes with `every`".into()));
            }
            let t = f.target;
            let link = matches!(
                t,
                Target::WorkersToEtcd
                    | Target::HolderToEtcd
                    | Target::WorkersToStorage
                    | Target::EtcdMember(_)
                    | Target::EtcdLeader
                    | Target::EtcdMajorityMinority
            );
            let ok_target = match f.kind {
                FaultKind::Pause => {
                    t.is_worker()
                        || matches!(
                            t,
                            Target::EtcdLeader | Target::EtcdMember(_) | Target::Storage
                        )
                }
                FaultKind::RevokeLease => {
                    matches!(t, Target::Holder | Target::RandomWorker | Target::Worker(_))
                }
                FaultKind::Delay | FaultKind::Partition => link,
                FaultKind::Kill => matches!(t, Target::EtcdLeader | Target::EtcdMember(_)),
            };
            if !ok_target {
                let want = match f.kind {
                    FaultKind::Pause => "holder, random-worker, all-workers, worker:N, etcd-leader, etcd-member:N or storage",
                    FaultKind::RevokeLease => "holder, random-worker or worker:N",
                    FaultKind::Delay | FaultKind::Partition => "workers->etcd, holder->etcd, workers->storage, etcd-member:N, etcd-leader or etcd-majority-minority",
                    FaultKind::Kill => "etcd-leader or etcd-member:N",
                };
                return Err(ferr(
                    "target",
                    format!("target {t} does not fit; expected {want}"),
                ));
            }
            let needs_duration = matches!(
                f.kind,
                FaultKind::Pause | FaultKind::Delay | FaultKind::Partition
            );
            if needs_duration && f.duration.is_none() {
                return Err(ferr("kind", format!("a {} needs a `duration`", f.kind)));
            }
            if f.kind == FaultKind::Delay && f.latency.is_none() {
                return Err(ferr("kind", "a delay needs a `latency`".into()));
            }
            if f.kind != FaultKind::Delay && (f.latency.is_some() || f.latency_jitter.is_some()) {
                return Err(ferr(
                    "latency",
                    "`latency` goes only with kind = \"delay\"".into(),
                ));
            }
            if f.kind != FaultKind::Kill && f.restart_after.is_some() {
                return Err(ferr(
                    "restart_after",
                    "`restart_after` goes only with kind = \"kill\"".into(),
                ));
            }
            if let Target::EtcdMember(m) = t {
                if m >= self.cluster.etcd_members.0 {
                    return Err(ferr(
                        "target",
                        format!(
                            "etcd-member:{m} does not exist (members are 0..{})",
                            self.cluster.etcd_members.0
                        ),
                    ));
                }
            }
            if t == Target::EtcdMajorityMinority && self.cluster.etcd_members.0 < 3 {
                return Err(ferr(
                    "target",
                    "etcd-majority-minority needs etcd_members = 3 or 5".into(),
                ));
            }
            if let Target::Worker(n) = f.target {
                if n >= w.workers {
                    return Err(ferr(
                        "target",
                        format!("worker:{n} does not exist (workers are 0..{})", w.workers),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The scenario as resolved (defaults filled in), for the run directory.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# could not render: {e}\n"))
    }
}

fn line_of_offset(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The line of the first `key = ...` assignment, for errors found after parsing.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .map(|r| r.trim_start().starts_with('='))
                .unwrap_or(false)
        })
        .map(|i| i + 1)
}

/// The line of `key` inside the n-th `[[fault]]` table (or of the table header).
fn line_of_nth_table_key(text: &str, header: &str, n: usize, key: &str) -> Option<usize> {
    let mut seen = 0usize;
    let mut in_table = false;
    let mut header_line = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            in_table = t == header && {
                seen += 1;
                seen == n + 1
            };
            if in_table {
                header_line = Some(i + 1);
            }
            continue;
        }
        if in_table {
            if let Some(r) = t.strip_prefix(key) {
                if r.trim_start().starts_with('=') {
                    return Some(i + 1);
                }
            }
        }
    }
    header_line
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "pause"
duration = "20s"
seed = 7

[cluster]
etcd_members = 1
etcd = "3.5"

[lock]
ttl = "2s"

[storage]
fencing = "monotonic"
token = "revision"

[workload]
workers = 5
hold = "0ms..500ms"

[[fault]]
kind = "pause"
target = "holder"
every = "5s"
duration = "3s"

[expect]
fencing_violations = 0
mutex_overlaps = ">0"
"#;

    #[test]
    fn parses_the_design_example() {
        let s = Scenario::parse(GOOD, "pause.toml").expect("valid");
        assert_eq!(s.duration, Duration::from_secs(20));
        assert_eq!(s.faults.len(), 1);
        assert_eq!(s.faults[0].target, Target::Holder);
        assert_eq!(s.workload.hold.max, Duration::from_millis(500));
        assert_eq!(s.expect.mutex_overlaps, Some(Count::AtLeast(1)));
        // Round trip: the resolved scenario written to the run dir parses again.
        let again = Scenario::parse(&s.to_toml(), "resolved.toml").expect("round trip");
        assert_eq!(again.workload.workers, 5);
    }

    #[test]
    fn defaults_fill_everything_but_name() {
        let s = Scenario::parse("name = \"x\"\n", "x.toml").expect("valid");
        assert_eq!(s.workload.workers, 5);
        assert_eq!(s.storage.fencing, Fencing::Monotonic);
        assert_eq!(s.expect.fencing_violations, Count::Exactly(0));
    }

    #[test]
    fn unknown_field_names_field_and_line() {
        let text = "name = \"x\"\n[workload]\nworkers = 3\nwrokers = 4\n";
        let e = Scenario::parse(text, "bad.toml").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("wrokers"), "{e}");
        assert!(e.to_string().starts_with("bad.toml:4:"), "{e}");
    }

    #[test]
    fn bad_duration_and_target_are_located() {
        let e = Scenario::parse("name = \"x\"\nduration = \"ten\"\n", "d.toml").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let text = "name = \"x\"\n[[fault]]\nkind = \"pause\"\ntarget = \"leader\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("holder"), "{e}");
    }

    #[test]
    fn cross_field_errors_point_at_the_field() {
        let text = "name = \"x\"\n[lock]\nttl = \"1s\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let text = "name = \"x\"\n[[fault]]\nkind = \"revoke-lease\"\nevery = \"1s\"\n[[fault]]\nkind = \"pause\"\nat = \"1s\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert!(e.message.contains("fault #2"), "{e}");
        assert_eq!(e.line, Some(6), "{e}");
    }

    #[test]
    fn counts_parse_and_match() {
        for (s, n, ok) in [
            (">0", 1, true),
            (">0", 0, false),
            (">=3", 3, true),
            ("any", 9, true),
        ] {
            let c = Count::try_from(CountRepr::S(s.into())).expect("count");
            assert_eq!(c.matches(n), ok, "{s} vs {n}");
        }
        assert!(Count::try_from(CountRepr::S("lots".into())).is_err());
    }
}
