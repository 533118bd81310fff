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

pub use fencecheck_storage::{Durability, Fencing};

mod client;
mod expect;
mod fault;
mod fault_spec;
mod locate;
mod network;
mod storage;
mod validate;

pub use client::{cache_dir, Client};
pub use expect::{Count, Expect, Holds};
pub use fault::{Aim, AimEvent, FaultKind, Target};
pub use fault_spec::{Fault, FaultSpec};
pub use locate::{locate, shipped_names};
pub use network::{Network, Unreachable};
pub use storage::{http_url, Isolation, StorageKind, SyncCommit};
pub use validate::{line_of_key, line_of_nth_table_key};

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
    /// The user's lock client (`docs/client-protocol.md`); unset: fencecheck's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Client>,
    /// The network as it stands for the whole run (not a fault; `network.rs`).
    #[serde(default, skip_serializing_if = "Network::is_empty")]
    pub network: Network,
    #[serde(default, rename = "fault", skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultSpec>,
    #[serde(default)]
    pub expect: Expect,
    /// The file it was read from, kept so that every later error (the plan's, the
    /// run's) points at a line without reading the file again.
    #[serde(skip)]
    pub source: Source,
}

/// A scenario's file name and text, as read.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub file: String,
    pub text: String,
}

impl Source {
    /// Whether the file assigns `key` anywhere.
    pub fn has_key(&self, key: &str) -> bool {
        line_of_key(&self.text, key).is_some()
    }

    /// An error at `key`'s first line.
    pub fn error_at_key(&self, key: &str, message: String) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            line: line_of_key(&self.text, key),
            message,
        }
    }

    /// An error at `key` in the `i`-th `[[fault]]` table (or at its header).
    pub fn error_at_fault(&self, i: usize, key: &str, message: String) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            line: line_of_nth_table_key(&self.text, "[[fault]]", i, key),
            message,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Members of the lock service (`etcd_members` in 0.1 scenarios).
    #[serde(default = "defaults::members", alias = "etcd_members")]
    pub members: Members,
    /// The service's version: etcd "3.5" or "3.4", zookeeper "3.8" (`etcd` in 0.1
    /// scenarios). Unset: the service's default.
    #[serde(default, alias = "etcd", skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub backend: BackendKind,
    /// The kubernetes backend's kubeconfig; unset: `KUBECONFIG`, then
    /// `~/.kube/config`, then the local cluster's (`fencecheck cluster up`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubernetes backend's node for every pod of the run; unset: the node
    /// that is this machine (named `localhost` or as this host, or the only one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The kubernetes backend's registry (`host[:port][/path]`): the run's images
    /// are pushed there and the node pulls them, so the node's container runtime
    /// need not be this machine's Docker engine. Unset: the node uses the engine's
    /// images as they are (`imagePullPolicy: Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// How the harness itself reaches the members and the storage on a node
    /// that is not this machine (the kubernetes backend): `auto` tries the
    /// node's address and falls back to port-forwards through the API server;
    /// `direct` only the node's address; `port-forward` only the API server.
    #[serde(default, skip_serializing_if = "Reach::is_auto")]
    pub reach: Reach,
    /// Where the kubernetes backend's reaper (the dead-man switch after a
    /// SIGKILL) runs: `auto` on a node that is this machine, on its host
    /// network, when the cluster has one, else as `in-cluster`; `in-cluster`
    /// on the run's node in the cluster's pod network, reaching the API server
    /// through the `kubernetes` Service as any pod does.
    #[serde(default, skip_serializing_if = "ReaperPlace::is_auto")]
    pub reaper: ReaperPlace,
}

/// `[cluster] reaper`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReaperPlace {
    #[default]
    Auto,
    InCluster,
}

impl ReaperPlace {
    pub fn is_auto(&self) -> bool {
        *self == ReaperPlace::Auto
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ReaperPlace::Auto => "auto",
            ReaperPlace::InCluster => "in-cluster",
        }
    }
}

/// `[cluster] reach`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    #[default]
    Auto,
    Direct,
    PortForward,
}

impl Reach {
    pub fn is_auto(&self) -> bool {
        *self == Reach::Auto
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Auto => "auto",
            Reach::Direct => "direct",
            Reach::PortForward => "port-forward",
        }
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            members: defaults::members(),
            version: None,
            backend: BackendKind::default(),
            kubeconfig: None,
            node: None,
            registry: None,
            reach: Reach::Auto,
            reaper: ReaperPlace::Auto,
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
            _ => Err(format!("members = {n}: expected 1, 3 or 5")),
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
    Kubernetes,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Process => "process",
            BackendKind::Docker => "docker",
            BackendKind::Kubernetes => "kubernetes",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "process" => Ok(BackendKind::Process),
            "docker" => Ok(BackendKind::Docker),
            "kubernetes" => Ok(BackendKind::Kubernetes),
            _ => Err(format!(
                "unknown backend {s:?}, expected auto, process, docker or kubernetes"
            )),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The lock service under test.
    #[serde(default)]
    pub service: ServiceKind,
    /// Session TTL: etcd's lease TTL (etcd raises anything under 2 s to 2 s
    /// silently; we refuse it instead), ZooKeeper's session timeout.
    #[serde(default = "defaults::ttl", with = "humantime_serde")]
    pub ttl: Duration,
    /// Redis and Redlock: what each instance keeps across a restart (unset: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<Persistence>,
    /// Kubernetes: how long a leader keeps trying to renew before it stops leading
    /// (client-go's `RenewDeadline`); unset: client-go's default scaled to the TTL
    /// (10 s of 15 s: two thirds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub renew_deadline: Option<Duration>,
    /// Kubernetes: how often an elector tries to acquire or renew (client-go's
    /// `RetryPeriod`); unset: client-go's default scaled to the TTL (2 s of 15 s).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub retry_period: Option<Duration>,
    /// Kubernetes: whose API server the electors elect on — a kube-apiserver of
    /// the run's own (with its etcd, as members fencecheck can fault), or the
    /// kubernetes backend's cluster's own (`"cluster"`: no members of
    /// fencecheck's; docs/lock-systems.md).
    #[serde(default, skip_serializing_if = "ApiServer::is_own")]
    pub apiserver: ApiServer,
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            service: ServiceKind::default(),
            ttl: defaults::ttl(),
            persistence: None,
            renew_deadline: None,
            retry_period: None,
            apiserver: ApiServer::Own,
        }
    }
}

/// `[lock] apiserver` (Kubernetes): where the Leases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApiServer {
    /// kube-apiserver 1.20.2 and its etcd, started for the run as its members.
    #[default]
    Own,
    /// The API server of the kubernetes backend's cluster (the kubeconfig's), in
    /// the run's namespace, with a service account's token of the run's own.
    Cluster,
}

impl ApiServer {
    pub fn is_own(&self) -> bool {
        *self == ApiServer::Own
    }
}

impl Lock {
    /// Kubernetes: the renew deadline in effect (client-go's 10 s of 15 s, scaled).
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline.unwrap_or(self.ttl * 2 / 3)
    }
    /// Kubernetes: the retry period in effect (client-go's 2 s of 15 s, scaled).
    pub fn retry_period(&self) -> Duration {
        self.retry_period.unwrap_or(self.ttl * 2 / 15)
    }
}

/// A Redis instance's persistence (`[lock] persistence`). No RDB snapshots in any
/// mode (`save ""`): what survives a kill is exactly what the AOF kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persistence {
    /// `appendonly no`: a restarted instance starts empty.
    #[default]
    None,
    /// `appendonly yes`, `appendfsync everysec`: up to a second of writes lost.
    AofEverysec,
    /// `appendonly yes`, `appendfsync always`: fsynced before the reply.
    AofAlways,
}

impl Persistence {
    pub fn as_str(self) -> &'static str {
        match self {
            Persistence::None => "none",
            Persistence::AofEverysec => "aof-everysec",
            Persistence::AofAlways => "aof-always",
        }
    }
}

/// The lock services fencecheck can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceKind {
    #[default]
    Etcd,
    Zookeeper,
    /// One Redis instance: `SET NX PX` in a script.
    Redis,
    /// Redlock over 3 or 5 independent Redis masters.
    Redlock,
    /// Kubernetes Lease leader election: kube-apiserver over etcd, a Lease per key.
    Kubernetes,
}

impl ServiceKind {
    /// Every kind, for questions asked of each system in turn.
    pub const ALL: [ServiceKind; 5] = [
        ServiceKind::Etcd,
        ServiceKind::Zookeeper,
        ServiceKind::Redis,
        ServiceKind::Redlock,
        ServiceKind::Kubernetes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Etcd => "etcd",
            ServiceKind::Zookeeper => "zookeeper",
            ServiceKind::Redis => "redis",
            ServiceKind::Redlock => "redlock",
            ServiceKind::Kubernetes => "kubernetes",
        }
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a worker sends as its fencing token, service-neutral.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenMode {
    /// The grant's place in the service's own order: the correct token.
    Grant,
    /// The session's id (etcd lease ID, ZooKeeper session id): no order of grants.
    Session,
    /// No token at all (only with `fencing = "off"`).
    None,
    /// A counter the service hands out with the grant, apart from its order (Redis:
    /// `INCR` in the acquire script): what a restart without persistence resets.
    Counter,
    /// The grant's random owner value (Redis, Redlock): unique, not ordered.
    Owner,
}

/// `[storage] token` as written: the service-neutral names, and each service's own
/// names for them (`revision` and `lease-id` on etcd, `czxid` and `session-id` on
/// ZooKeeper), so a scenario reads in its service's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenName {
    #[default]
    Grant,
    Revision,
    Czxid,
    Session,
    LeaseId,
    SessionId,
    None,
    Counter,
    Owner,
    /// Kubernetes: the Lease's `leaseTransitions`, what a client-go user has.
    Transitions,
}

impl TokenName {
    pub fn mode(self) -> TokenMode {
        match self {
            TokenName::Grant | TokenName::Revision | TokenName::Czxid => TokenMode::Grant,
            TokenName::Session | TokenName::LeaseId | TokenName::SessionId => TokenMode::Session,
            TokenName::None => TokenMode::None,
            TokenName::Counter | TokenName::Transitions => TokenMode::Counter,
            TokenName::Owner => TokenMode::Owner,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenName::Grant => "grant",
            TokenName::Revision => "revision",
            TokenName::Czxid => "czxid",
            TokenName::Session => "session",
            TokenName::LeaseId => "lease-id",
            TokenName::SessionId => "session-id",
            TokenName::None => "none",
            TokenName::Counter => "counter",
            TokenName::Owner => "owner",
            TokenName::Transitions => "transitions",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    #[serde(default)]
    pub kind: StorageKind,
    /// `kind = "http"`: the service's endpoint, `http://host:port/path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What the storage compares: fencecheck's storage is started with it; a
    /// user's service (`http`) is taken to do it (the linearizability model).
    #[serde(default = "defaults::fencing")]
    pub fencing: Fencing,
    #[serde(default)]
    pub token: TokenName,
    /// How far fencecheck's storage takes a record before answering: `flush` (to
    /// the kernel; survives a kill of the storage) or `fsync` (per record).
    #[serde(default)]
    pub durability: Durability,
    /// PostgreSQL: the transactions' isolation level (unset: read committed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// PostgreSQL: `synchronous_commit` (unset: on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous_commit: Option<SyncCommit>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            kind: StorageKind::default(),
            url: None,
            fencing: defaults::fencing(),
            token: TokenName::default(),
            durability: Durability::default(),
            isolation: None,
            synchronous_commit: None,
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
    /// A worker's pause between letting go of the lock and asking for it again
    /// (default none). On a polling lock (Redis, Redlock) a holder that asks
    /// again at once wins nearly every time against waiters that poll every
    /// 10–60 ms; a rest longer than their poll lets the lock change hands.
    #[serde(default = "defaults::rest")]
    pub rest: DurationRange,
    /// fencecheck's own worker: `careful` (default) or `naive` (Jepsen's 2020
    /// lock-set client), see [`Behaviour`].
    #[serde(default)]
    pub behaviour: Behaviour,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            workers: defaults::workers(),
            keys: defaults::keys(),
            ops_per_hold: defaults::ops_per_hold(),
            hold: defaults::hold(),
            rest: defaults::rest(),
            behaviour: Default::default(),
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
    pub fn rest() -> DurationRange {
        DurationRange {
            min: Duration::ZERO,
            max: Duration::ZERO,
        }
    }
}

impl Scenario {
    /// The etcd version to run (etcd scenarios); 3.5 unless the scenario says 3.4.
    pub fn etcd_version(&self) -> EtcdVersion {
        self.cluster
            .version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    }

    /// How many members the run starts: `[cluster] members`, and on Kubernetes
    /// the apiserver after them (`member:N` with N = members targets it).
    pub fn member_count(&self) -> usize {
        let n = self.cluster.members.0 as usize;
        // Kubernetes' own apiserver is one more member; the cluster's is the one
        // member the workers reach.
        match (self.lock.service, self.lock.apiserver) {
            (ServiceKind::Kubernetes, ApiServer::Own) => n + 1,
            (ServiceKind::Kubernetes, ApiServer::Cluster) => 1,
            _ => n,
        }
    }

    /// The scenario file `arg` names (see [`locate`]).
    pub fn locate(arg: &Path) -> Result<std::path::PathBuf, ScenarioError> {
        locate(arg)
    }

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

    /// Reads a run directory's resolved `scenario.toml`: validated as any, but
    /// a `[client]` command that has since gone does not stop a `check` of what
    /// was recorded.
    pub fn load_recorded(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            message: format!("cannot read scenario file: {e}"),
        })?;
        Scenario::parse_with(&text, &file, false)
    }

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse_with(text, file, true)
    }

    fn parse_with(text: &str, file: &str, find_client: bool) -> Result<Scenario, ScenarioError> {
        let mut sc: Scenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| validate::line_of_offset(text, s.start));
            let (line, message) = line
                .and_then(|l| fault_spec::locate_error(text, l))
                .unwrap_or_else(|| (line, e.message().to_string()));
            ScenarioError {
                file: file.to_string(),
                line,
                message,
            }
        })?;
        sc.source = Source {
            file: file.to_string(),
            text: text.to_string(),
        };
        validate::validate(&sc, text, file)?;
        client::resolve(&mut sc, text, file, find_client)?;
        Ok(sc)
    }

    /// The scenario as resolved (defaults filled in), for the run directory.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# could not render: {e}\n"))
    }
}

/// How a worker treats what its lock client tells it: a scenario choice, so the
/// same faults can be run against a client that checks and one that trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// fencecheck's own client: checks every grant against the service (etcd: the
    /// lock key still exists after `Lock`), aborts a call to a member that stopped
    /// answering, and opens a new session as soon as the old one is lost.
    #[default]
    Careful,
    /// Jepsen's 2020 lock-set client: trusts every grant the service answers,
    /// ignores session loss, keeps writing until its hold ends, and opens a new
    /// session only once an acquisition fails.
    Naive,
}

impl Behaviour {
    pub fn as_str(self) -> &'static str {
        match self {
            Behaviour::Careful => "careful",
            Behaviour::Naive => "naive",
        }
    }
}

impl std::fmt::Display for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
    fn a_token_expectation_without_a_token_is_refused_at_its_line() {
        let text = "name = \"x\"\n[storage]\nfencing = \"off\"\ntoken = \"none\"\n\
                    [expect]\nfencing_violations = \"any\"\ntoken_repeats = 0\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("expect.token_repeats"), "{e}");
        assert!(e.message.contains("sends no token"), "{e}");
        // With a token, the same expectation is fine.
        let ok = text.replace("token = \"none\"", "token = \"grant\"");
        Scenario::parse(&ok, "t.toml").expect("valid with a token");
    }

    #[test]
    fn a_registry_that_is_not_a_registry_name_is_refused_at_its_line() {
        for (bad, why) in [
            ("https://registry.example.com", "no scheme"),
            ("registry.example.com/team/fencecheck:1.0", "no tag"),
            ("registry.example.com/Team", "lower case"),
            ("", "empty"),
            ("/team", "no host"),
        ] {
            let text = format!(
                "name = \"x\"\n[cluster]\nbackend = \"kubernetes\"\nregistry = \"{bad}\"\n"
            );
            let e = Scenario::parse(&text, "t.toml").unwrap_err();
            assert_eq!(e.line, Some(4), "{bad}: {e}");
            assert!(
                e.message.contains("cluster.registry") && e.message.contains(why),
                "{bad}: {e}"
            );
        }
        for good in [
            "127.0.0.1:5000",
            "registry.example.com:5000/team/sub",
            "localhost",
        ] {
            let text = format!("name = \"x\"\n[cluster]\nregistry = \"{good}\"\n");
            let s = Scenario::parse(&text, "t.toml").expect(good);
            assert_eq!(s.cluster.registry.as_deref(), Some(good));
        }
    }

    #[test]
    fn reach_is_one_of_three_and_round_trips() {
        for (text, want) in [
            ("", Reach::Auto),
            ("reach = \"auto\"\n", Reach::Auto),
            ("reach = \"direct\"\n", Reach::Direct),
            ("reach = \"port-forward\"\n", Reach::PortForward),
        ] {
            let s =
                Scenario::parse(&format!("name = \"x\"\n[cluster]\n{text}"), "t.toml").expect(text);
            assert_eq!(s.cluster.reach, want, "{text}");
            let again = Scenario::parse(&s.to_toml(), "resolved.toml").expect("round trip");
            assert_eq!(again.cluster.reach, want, "{text}");
        }
        let e =
            Scenario::parse("name = \"x\"\n[cluster]\nreach = \"tunnel\"\n", "t.toml").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("port-forward"), "{e}");
    }

    #[test]
    fn reaper_is_auto_or_in_cluster_and_round_trips() {
        for (text, want) in [
            ("", ReaperPlace::Auto),
            ("reaper = \"auto\"\n", ReaperPlace::Auto),
            ("reaper = \"in-cluster\"\n", ReaperPlace::InCluster),
        ] {
            let s =
                Scenario::parse(&format!("name = \"x\"\n[cluster]\n{text}"), "t.toml").expect(text);
            assert_eq!(s.cluster.reaper, want, "{text}");
            let again = Scenario::parse(&s.to_toml(), "resolved.toml").expect("round trip");
            assert_eq!(again.cluster.reaper, want, "{text}");
        }
        let e =
            Scenario::parse("name = \"x\"\n[cluster]\nreaper = \"host\"\n", "t.toml").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("in-cluster"), "{e}");
    }

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
        let text = "name = \"x\"\n[[fault]]\nkind = \"pause\"\ntarget = \"leadr\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("holder"), "{e}");
    }

    #[test]
    fn cross_field_errors_point_at_the_field() {
        // A system's own rules (etcd's minimum TTL) are the plan's: systems/*/rules.rs.
        let text = "name = \"x\"\n[[fault]]\nkind = \"revoke-lease\"\nevery = \"1s\"\n[[fault]]\nkind = \"pause\"\nat = \"1s\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert!(e.message.contains("fault #2"), "{e}");
        assert_eq!(e.line, Some(6), "{e}");
    }

    #[test]
    fn storage_kill_and_durability_run_on_both_backends() {
        // The docker backend starts its storage container with the durability and
        // kills and starts it again like a member.
        let base = "name = \"x\"\n[storage]\ndurability = \"fsync\"\n\
                    [[fault]]\nkind = \"kill\"\ntarget = \"storage\"\nat = \"2s\"\n";
        let s = Scenario::parse(base, "k.toml").expect("process/auto: valid");
        assert_eq!(s.storage.durability, Durability::Fsync);
        let docker = format!("{base}[cluster]\nbackend = \"docker\"\n");
        let d = Scenario::parse(&docker, "k.toml").expect("docker: valid");
        assert_eq!(d.cluster.backend, BackendKind::Docker);
    }

    #[test]
    fn http_storage_rules_point_at_their_lines() {
        let e =
            Scenario::parse("name = \"x\"\n[storage]\nkind = \"http\"\n", "h.toml").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let text = "name = \"x\"\n[storage]\nkind = \"http\"\nurl = \"https://db:443/\"\n";
        let e = Scenario::parse(text, "h.toml").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("plain http"), "{e}");
        let e = Scenario::parse("name = \"x\"\n[storage]\nurl = \"http://a:1/\"\n", "h.toml")
            .unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let ok =
            "name = \"x\"\n[storage]\nkind = \"http\"\nurl = \"http://127.0.0.1:7070/kv?t=1\"\n";
        let s = s_of(ok);
        assert_eq!(
            http_url(s.storage.url.as_deref().unwrap_or_default()),
            Ok(("127.0.0.1".into(), 7070, "/kv?t=1".into()))
        );
        let paused = format!("{ok}[[fault]]\nkind = \"pause\"\ntarget = \"storage\"\nat = \"1s\"\nduration = \"1s\"\n");
        let e = Scenario::parse(&paused, "h.toml").unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
    }

    fn s_of(text: &str) -> Scenario {
        Scenario::parse(text, "t.toml").expect("valid")
    }
}
