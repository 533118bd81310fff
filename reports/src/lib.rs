//! The report model — plain serde types shared by every stage that produces or reads
//! a report — and its renderers. `report.json` is this model serialized; its schema
//! is documented in `docs/report-schema.md` and versioned by [`SCHEMA_VERSION`].
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds as recorded; `time_origin_ns` is the run's
//! start, so a renderer shows `(t - time_origin_ns)` as seconds into the run.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub mod descriptor;
pub mod findings;
pub mod html;
pub mod timeline;
pub use descriptor::Descriptor;
pub use findings::{
    ExclusionCheck, Findings, GrantValidity, LateGrant, Liveness, OpCounts, PhantomGrant, PostLoss,
    StuckWait, TokenCheck, TokenPair, UnexplainedOverlap, UnsafeHold, UnsafeWindow, UntoldHolder,
};
pub use html::{render_html, render_index, write_html, write_index, SuiteEntry};
pub use timeline::{Notice, OpMark, Timeline};

pub const SCHEMA_VERSION: u32 = 2;

fn default_service() -> String {
    "etcd".into()
}

fn default_resource() -> String {
    "fencecheck".into()
}

fn default_behaviour() -> String {
    "careful".into()
}

/// `true`, `false`, or `"unknown"` (a checker could not decide, e.g. it timed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validity {
    Valid,
    Invalid,
    #[default]
    Unknown,
}

impl Validity {
    pub fn from_bool(ok: bool) -> Validity {
        if ok {
            Validity::Valid
        } else {
            Validity::Invalid
        }
    }
}

impl std::fmt::Display for Validity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Validity::Valid => "valid",
            Validity::Invalid => "INVALID",
            Validity::Unknown => "unknown",
        })
    }
}

impl Serialize for Validity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Validity::Valid => s.serialize_bool(true),
            Validity::Invalid => s.serialize_bool(false),
            Validity::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl<'de> Deserialize<'de> for Validity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Bool(b) => Ok(Validity::from_bool(b)),
            serde_json::Value::String(s) if s == "unknown" => Ok(Validity::Unknown),
            other => Err(serde::de::Error::custom(format!(
                "expected true, false or \"unknown\", got {other}"
            ))),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub fencecheck_version: String,
    pub run: RunInfo,
    /// Did every expectation hold? Decides the exit code (0 or 1).
    pub passed: bool,
    /// Set when the run never reached its end (killed or interrupted: no heal
    /// phase, no final reads); such a run never passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Set when the run needed a finding (an expectation such as `">0"`) but no
    /// fault was confirmed to have taken effect: it cannot pass, and is not a
    /// plain fail either. The reason, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<String>,
    /// What the run did not test that it claims to (acquisitions of a lock the
    /// harness never observed, planned faults not injected or not confirmed,
    /// a lock client that crashed), one sentence each. Non-empty keeps a run
    /// from passing: it is INCONCLUSIVE unless it failed on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<String>,
    pub expectations: Vec<Expectation>,
    pub checks: Checks,
    /// Fault windows as the nemesis recorded them.
    pub faults: Vec<FaultWindow>,
    /// Per fault kind: planned, injected, confirmed, skipped (absent in reports
    /// written before faults were confirmed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_counts: Vec<FaultCount>,
    /// Grant validity and unsafe windows, from the harness's own observation of
    /// the service (schema 2).
    #[serde(default)]
    pub findings: Findings,
    pub stats: Stats,
    /// Non-fatal problems met while reading the recorded files (torn lines, …).
    pub problems: Vec<String>,
}

/// Facts about the run (recorded when it ran; `check` reuses them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    /// The exact command that reproduces this run.
    pub command: String,
    pub run_dir: String,
    pub started_at: String,
    pub duration_s: f64,
    pub backend: String,
    pub backend_reason: String,
    /// The lock service under test ("etcd", "zookeeper"); absent in schema 1.
    #[serde(default = "default_service")]
    pub service: String,
    /// The service version that ran, e.g. "3.5.1"; absent in schema 1.
    #[serde(default)]
    pub service_version: String,
    /// etcd runs only: the same as `service_version` (kept for schema-1 readers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etcd_version: String,
    /// Redis and Redlock runs: each instance's persistence ("none", "aof-everysec",
    /// "aof-always").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub persistence: String,
    /// Members of the lock service (the name is schema 1's).
    pub etcd_members: u8,
    pub workers: u32,
    pub keys: u32,
    pub ttl_s: u64,
    pub fencing: String,
    pub token: String,
    /// How fencecheck's worker treated grants and session loss: "careful" or
    /// "naive" (Jepsen's 2020 lock-set client); "careful" when read from a run
    /// written before it was a choice.
    #[serde(default = "default_behaviour")]
    pub behaviour: String,
    /// Where the fenced writes landed: "fencecheck (flush)", "fencecheck (fsync)",
    /// "http <url>"; absent before fenced resources were a choice.
    #[serde(default = "default_resource")]
    pub resource: String,
    /// Links down for the whole run (`[network] unreachable`), e.g. "worker 0, 1
    /// cannot reach member 2": the topology the run was set in, not a fault.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    pub time_origin_ns: u64,
    pub time_end_ns: u64,
    /// The planned fault schedule (same seed → same schedule).
    pub schedule: Vec<PlannedFault>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedFault {
    pub id: u32,
    pub kind: String,
    pub target: String,
    pub at_ms: u64,
    pub duration_ms: u64,
    /// An aimed fault: the event it fires on (`read`, `grant +20ms`…); `at_ms`
    /// is then when it is armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aim: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expectation {
    /// The `[expect]` field, e.g. `fencing_violations`.
    pub name: String,
    pub expected: String,
    pub actual: String,
    pub met: bool,
    /// `true` when `[expect]` did not state it: a safety check's default (it
    /// must hold). Absent (false) in reports written before defaults existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checks {
    pub fencing: FencingCheck,
    pub mutex: MutexCheck,
    pub counter: CounterCheck,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linearizable: Option<LinearizableCheck>,
    /// The token the clients sent, judged against the service's order of grants
    /// (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenCheck>,
    /// Set when fencing and the counter were not judged from a storage log (a
    /// storage of the user's own): from what, and which judgements are weaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged_from: Option<JudgedFrom>,
    /// Phantom grants and overlaps no session loss explains, judged against
    /// the harness's observation of the service (absent when it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusion: Option<ExclusionCheck>,
}

/// What the checks were judged from when it was not the storage's own log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgedFrom {
    /// "client-history": the workers' invoke/complete events and the final reads.
    pub source: String,
    /// One sentence per judgement that is weaker than with a log, and why.
    pub weaker: Vec<String>,
}

/// One write as the storage logged it, with who sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRef {
    pub worker: String,
    pub key: String,
    pub seq: u64,
    pub time_ns: u64,
    pub value: Option<i64>,
    pub token: Option<i64>,
    pub revision: Option<i64>,
    pub lease: Option<i64>,
    pub verdict: String,
    pub request_id: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StaleWrite {
    /// The write from the older grant that the storage accepted.
    pub stale: WriteRef,
    /// The earlier request (a read or a write) that proved a newer grant existed.
    pub newer: WriteRef,
    /// When the stale writer's grant was acquired (client-observed), if known.
    pub stale_acquired_ns: Option<u64>,
    /// Fault windows (ids) overlapping the stale grant's life up to the write.
    pub faults: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FencingCheck {
    pub valid: Validity,
    pub writes: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Accepted writes from a grant older than one already seen writing: violations.
    pub stale_accepted: u64,
    /// Stale writes the storage rejected: fencing at work.
    pub stale_rejected: u64,
    /// Writes from the newest grant seen that were rejected: a liveness failure.
    pub fresh_rejected: u64,
    /// Writes carrying no grant revision (cannot be judged).
    pub unjudged: u64,
    pub violations: Vec<StaleWrite>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fresh_rejected_examples: Vec<WriteRef>,
    /// Present when `stale_accepted` is a lower bound (no storage log: judged from
    /// the client history), with the one-line reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<String>,
}

impl FencingCheck {
    /// Nothing judged yet: valid until a violation is found.
    pub fn new() -> FencingCheck {
        FencingCheck {
            valid: Validity::Valid,
            writes: 0,
            accepted: 0,
            rejected: 0,
            stale_accepted: 0,
            stale_rejected: 0,
            fresh_rejected: 0,
            unjudged: 0,
            violations: Vec::new(),
            fresh_rejected_examples: Vec::new(),
            lower_bound: None,
        }
    }
}

impl Default for FencingCheck {
    fn default() -> Self {
        FencingCheck::new()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    pub worker: u32,
    pub key: String,
    pub revision: Option<i64>,
    pub lease: Option<i64>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// False when the worker never got to release (run ended, or it was killed).
    pub released: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overlap {
    pub a: Hold,
    pub b: Hold,
    pub start_ns: u64,
    pub end_ns: u64,
    pub faults: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MutexCheck {
    pub valid: Validity,
    pub holds: u64,
    pub overlaps: u64,
    /// The first overlaps (at most 50).
    pub examples: Vec<Overlap>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyCount {
    pub key: String,
    /// Increments whose write the client saw accepted.
    pub acknowledged: u64,
    /// Increments the storage accepted (acknowledged or not).
    pub applied: u64,
    pub final_value: i64,
    /// `applied - final_value` when positive: increments overwritten.
    pub lost: u64,
    /// `(acknowledged - final_value) / acknowledged` when positive: the share of
    /// this key's acknowledged increments its final value does not hold. Absent
    /// when nothing was acknowledged (and in reports written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_fraction: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CounterCheck {
    pub valid: Validity,
    pub acknowledged: u64,
    pub lost: u64,
    /// The share of acknowledged increments the final value does not hold:
    /// `(acknowledged - final value) / acknowledged` summed over keys (a lower
    /// bound: an increment whose answer was lost may have landed in their stead).
    /// Absent when nothing was acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_fraction: Option<f64>,
    pub keys: Vec<KeyCount>,
    /// Present when `lost` is a lower bound (no storage log: judged by final reads
    /// against acknowledged writes), with the one-line reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinearizableCheck {
    pub valid: Validity,
    pub model: String,
    pub operations: u64,
    pub elapsed_ms: f64,
    /// The checker's own result (partitions, counterexample), as it produced it.
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultWindow {
    pub id: u32,
    pub kind: String,
    pub target: String,
    pub start_ns: u64,
    /// `None` when the fault never ended in the record (run killed mid-fault).
    pub end_ns: Option<u64>,
    /// `ok`, or `fail` when the fault could not be applied (e.g. no holder).
    pub outcome: String,
    /// What was actually done (worker, pid, lease, revision…).
    pub detail: serde_json::Value,
    /// Why the fault could not be done, or what went wrong undoing it, as the
    /// nemesis recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether its effect was seen (assess fills it in; absent in reports
    /// written before faults were confirmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<FaultEffect>,
}

impl FaultWindow {
    /// An aimed fault's trigger, in words: "aimed at read of worker 2 on k0
    /// (grant 1187), fired 1.3 ms after it". From `detail.aim`, which the
    /// nemesis writes on the fault's `invoke` (absent: fired at its time).
    pub fn aim_words(&self) -> Option<String> {
        let a = self.detail.get("aim")?;
        let event = a.get("event").and_then(|v| v.as_str()).unwrap_or("?");
        let Some(seen) = a.get("seen") else {
            return Some(format!("aimed at {event}: none seen"));
        };
        let mut w = format!("aimed at {event}");
        if let Some(n) = seen.get("worker").and_then(|v| v.as_u64()) {
            w += &format!(" of worker {n}");
        }
        if let Some(k) = seen.get("key").and_then(|v| v.as_str()) {
            w += &format!(" on {k}");
        }
        if let Some(g) = seen.get("grant").and_then(|v| v.as_i64()) {
            w += &format!(" (grant {g})");
        }
        if let Some(ms) = a.get("after_ms").and_then(|v| v.as_f64()) {
            w += &format!(", fired {ms:.1} ms after it");
        }
        Some(w)
    }
}

/// What became of one planned fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectStatus {
    /// Injected, and its effect seen (the process stopped, bytes dropped, …).
    Confirmed,
    /// Injected, and its effect looked for and not seen.
    Unconfirmed,
    /// Injected, but nothing the harness can look at shows its effect (a run
    /// recorded before faults were confirmed, a docker network cut): it counts
    /// as unconfirmed, but does not make a run inconclusive.
    Unchecked,
    /// Planned but not injected (no target found, the run ended first, …).
    Skipped,
}

impl EffectStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::Confirmed => "confirmed",
            EffectStatus::Unconfirmed => "unconfirmed",
            EffectStatus::Unchecked => "unchecked",
            EffectStatus::Skipped => "skipped",
        }
    }
}

/// One fault's confirmation: the status, and the evidence (confirmed) or the
/// reason (otherwise), in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEffect {
    pub status: EffectStatus,
    pub how: String,
}

impl FaultEffect {
    pub fn confirmed(how: impl Into<String>) -> FaultEffect {
        FaultEffect {
            status: EffectStatus::Confirmed,
            how: how.into(),
        }
    }
    pub fn unconfirmed(why: impl Into<String>) -> FaultEffect {
        FaultEffect {
            status: EffectStatus::Unconfirmed,
            how: why.into(),
        }
    }
    pub fn unchecked(why: impl Into<String>) -> FaultEffect {
        FaultEffect {
            status: EffectStatus::Unchecked,
            how: why.into(),
        }
    }
    pub fn skipped(why: impl Into<String>) -> FaultEffect {
        FaultEffect {
            status: EffectStatus::Skipped,
            how: why.into(),
        }
    }
}

/// One fault kind's tally. `planned = injected + skipped` and `unconfirmed =
/// injected - confirmed` (unchecked ones included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCount {
    /// The scenario's name for the kind (`pause`, `partition`, …).
    pub kind: String,
    pub planned: u64,
    pub injected: u64,
    pub confirmed: u64,
    pub skipped: u64,
    pub unconfirmed: u64,
    /// Of the unconfirmed, those nothing could be checked for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unchecked: u64,
    /// Every fault of this kind that was not confirmed (skipped, unconfirmed or
    /// unchecked), with its reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<FaultReason>,
}

/// Why one fault was not confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReason {
    /// The fault's id (the schedule's and the window's).
    pub id: u32,
    pub status: EffectStatus,
    pub reason: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub events: u64,
    pub acquires_ok: u64,
    pub acquires_failed: u64,
    pub reads_ok: u64,
    pub writes_ok: u64,
    pub writes_rejected: u64,
    pub writes_unknown: u64,
    pub keepalive_lost: u64,
    /// Transactions the storage retried after a serialization failure (PostgreSQL
    /// at `isolation = "serializable"`, SQLSTATE 40001); 0 for other storages.
    #[serde(default)]
    pub serialization_retries: u64,
    pub latency: Vec<Latency>,
}

/// Latency percentiles of one operation kind, microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub op: String,
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Report {
    /// Writes `report.json` into `dir`.
    pub fn write_json(&self, dir: &Path) -> std::io::Result<std::path::PathBuf> {
        let path = dir.join("report.json");
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&path, text + "\n")?;
        Ok(path)
    }

    pub fn read_json(path: &Path) -> std::io::Result<Report> {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_serializes_as_bool_or_unknown() {
        assert_eq!(
            serde_json::to_string(&Validity::Valid).ok(),
            Some("true".into())
        );
        assert_eq!(
            serde_json::to_string(&Validity::Invalid).ok(),
            Some("false".into())
        );
        assert_eq!(
            serde_json::to_string(&Validity::Unknown).ok(),
            Some("\"unknown\"".into())
        );
        let v: Validity = serde_json::from_str("\"unknown\"").expect("parse");
        assert_eq!(v, Validity::Unknown);
        assert!(serde_json::from_str::<Validity>("3").is_err());
    }
}
