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

mod expect;
mod fault;
mod locate;
mod validate;

pub use expect::{Count, Expect};
pub use fault::{FaultKind, FaultSpec, Target};
pub use locate::{locate, shipped_names};
pub use validate::check_backend;

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
    /// Members of the lock service (`etcd_members` in 0.1 scenarios).
    #[serde(default = "defaults::members", alias = "etcd_members")]
    pub members: Members,
    /// The service's version: etcd "3.5" or "3.4", zookeeper "3.8" (`etcd` in 0.1
    /// scenarios). Unset: the service's default.
    #[serde(default, alias = "etcd", skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub backend: BackendKind,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            members: defaults::members(),
            version: None,
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
    /// The lock service under test.
    #[serde(default)]
    pub service: ServiceKind,
    /// Session TTL: etcd's lease TTL (etcd raises anything under 2 s to 2 s
    /// silently; we refuse it instead), ZooKeeper's session timeout.
    #[serde(default = "defaults::ttl", with = "humantime_serde")]
    pub ttl: Duration,
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            service: ServiceKind::default(),
            ttl: defaults::ttl(),
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
}

impl ServiceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Etcd => "etcd",
            ServiceKind::Zookeeper => "zookeeper",
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
}

impl TokenName {
    pub fn mode(self) -> TokenMode {
        match self {
            TokenName::Grant | TokenName::Revision | TokenName::Czxid => TokenMode::Grant,
            TokenName::Session | TokenName::LeaseId | TokenName::SessionId => TokenMode::Session,
            TokenName::None => TokenMode::None,
        }
    }

    /// The service this name belongs to, when it is one service's own word.
    pub fn service(self) -> Option<ServiceKind> {
        match self {
            TokenName::Revision | TokenName::LeaseId => Some(ServiceKind::Etcd),
            TokenName::Czxid | TokenName::SessionId => Some(ServiceKind::Zookeeper),
            _ => None,
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
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    #[serde(default = "defaults::fencing")]
    pub fencing: Fencing,
    #[serde(default)]
    pub token: TokenName,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            fencing: defaults::fencing(),
            token: TokenName::default(),
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

    /// The service version as the scenario asks for it (the service's default when
    /// unset).
    pub fn service_version(&self) -> String {
        match (&self.cluster.version, self.lock.service) {
            (Some(v), _) => v.clone(),
            (None, ServiceKind::Etcd) => EtcdVersion::default().to_string(),
            (None, ServiceKind::Zookeeper) => "3.8".into(),
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

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let sc: Scenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| validate::line_of_offset(text, s.start));
            ScenarioError {
                file: file.to_string(),
                line,
                message: e.message().to_string(),
            }
        })?;
        validate::validate(&sc, text, file)?;
        Ok(sc)
    }

    /// The scenario as resolved (defaults filled in), for the run directory.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# could not render: {e}\n"))
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
        let text = "name = \"x\"\n[lock]\nttl = \"1s\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        let text = "name = \"x\"\n[[fault]]\nkind = \"revoke-lease\"\nevery = \"1s\"\n[[fault]]\nkind = \"pause\"\nat = \"1s\"\n";
        let e = Scenario::parse(text, "t.toml").unwrap_err();
        assert!(e.message.contains("fault #2"), "{e}");
        assert_eq!(e.line, Some(6), "{e}");
    }
}
