//! Two findings every report carries, for every service, each judged against the
//! harness's own observation of the lock service (`service.jsonl`), never against
//! what a worker says:
//! - *grant validity*: grants a client was told about after its session had
//!   already ended at the service;
//! - *unsafe window*: for each hold whose session ended at the service while the
//!   holder went on, how long it kept operating on the storage afterwards, and
//!   what the fence did with those operations.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Findings {
    /// Did the run record the service's observations? (`false` for runs written
    /// before fencecheck observed the service: both findings are then empty.)
    pub observed: bool,
    /// Gaps in the observation feed (a member down): what happened inside them
    /// may be missing.
    pub observation_gaps: u64,
    pub grant_validity: GrantValidity,
    pub unsafe_window: UnsafeWindow,
    /// Waiters left waiting while the lock was free (absent in reports written
    /// before it was judged).
    #[serde(default)]
    pub liveness: Liveness,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GrantValidity {
    /// Acquisitions the service answered (granted, as the client was told).
    pub grants: u64,
    /// Of those, told after the session had ended at the service.
    pub after_session_end: u64,
    /// Of those, how many the client itself caught (e.g. etcd: the lock key was
    /// already gone when the client read it right after `Lock`); the others it
    /// went on to use.
    pub caught_by_client: u64,
    /// Of those the client did not catch, how many it was told while it was
    /// itself frozen or cut off by a fault aimed at it (a pause or partition of
    /// that worker): its "told" time is the fault's, not the service's doing. The
    /// `late_grants` expectation does not count them.
    #[serde(default)]
    pub during_client_fault: u64,
    /// Up to 50.
    pub examples: Vec<LateGrant>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LateGrant {
    pub worker: u32,
    pub key: String,
    /// The grant, when the client learned it.
    pub grant: Option<i64>,
    pub session: i64,
    /// When the service ended the session (observed).
    pub session_ended_ns: u64,
    /// When the client was told it held the lock.
    pub told_ns: u64,
    pub caught_by_client: bool,
    /// Told while a pause or partition aimed at this worker was on.
    #[serde(default)]
    pub during_client_fault: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UnsafeWindow {
    /// Holds whose session ended at the service before the holder let go, or had
    /// already ended when the grant was told (`granted_dead`).
    pub holds: u64,
    /// Of those, holds granted on a session that had already ended: unsafe from
    /// their first operation (the window is the whole hold). The others outlived
    /// their session.
    #[serde(default)]
    pub granted_dead: u64,
    /// Storage operations those holders made after their session ended.
    pub reads: u64,
    pub writes_refused: u64,
    pub writes_accepted: u64,
    /// Window lengths (first session end → last storage operation of the hold),
    /// milliseconds; 0 for a hold that made no operation after the end.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
    /// Every such hold (up to 200), longest first.
    pub windows: Vec<UnsafeHold>,
    /// Present when the operation counts are lower bounds (no storage log: counted
    /// from the client history), with the one-line reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<String>,
    /// The post-loss action window: the same holds split at the moment the client
    /// itself said its session was lost (an elector at its renew deadline, an
    /// etcd client when its keepalive failed).
    #[serde(default)]
    pub post_loss: PostLoss,
}

/// How long old holders believed they still held, and what they did before and
/// after they knew.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PostLoss {
    /// Holds whose client said the session was lost before the hold ended.
    pub told: u64,
    /// Holds whose client never said so while holding (it let go first, or never
    /// tells).
    pub untold: u64,
    /// For the told ones: session end at the service → the client's own word,
    /// milliseconds (0 when the client knew first).
    pub believed_p50_ms: f64,
    pub believed_max_ms: f64,
    /// Operations after the end and before the client knew (every operation of
    /// an untold hold's window counts here).
    pub before: OpCounts,
    /// Operations after the client knew (a careful worker finishing its hold).
    pub after: OpCounts,
}

/// A window's storage operations by what the fence did with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    pub reads: u64,
    pub writes_refused: u64,
    pub writes_accepted: u64,
}

fn outlived() -> String {
    "outlived".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnsafeHold {
    /// `outlived` (the session ended during the hold) or `granted-dead` (it had
    /// ended before the grant was told: the window is the whole hold).
    #[serde(default = "outlived")]
    pub kind: String,
    pub worker: u32,
    pub key: String,
    pub grant: Option<i64>,
    pub session: i64,
    pub hold_start_ns: u64,
    pub session_ended_ns: u64,
    /// The last storage operation of the hold after the end (= `session_ended_ns`
    /// when there was none).
    pub last_op_ns: u64,
    pub window_ms: f64,
    pub reads: u64,
    pub writes_refused: u64,
    pub writes_accepted: u64,
    /// When the client said the session was lost (the worker's `keepalive-lost`),
    /// if it did before the hold ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_told_ns: Option<u64>,
    /// The window's operations before and after that.
    #[serde(default)]
    pub before_told: OpCounts,
    #[serde(default)]
    pub after_told: OpCounts,
}

/// The `token` check: is the token the client sent a fencing token at all, judged
/// against the service's own order of grants?
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokenCheck {
    /// `true` when the token grows with every grant and no two grants share one;
    /// `false` otherwise; `"unknown"` when no token was sent.
    pub valid: crate::Validity,
    /// Grants judged (acquisitions granted, with their grant and token).
    pub grants: u64,
    /// Grants whose token is lower than an earlier grant's (of the same lock).
    pub regressions: u64,
    /// Grants whose token an earlier grant (of the same lock) already had.
    pub repeats: u64,
    /// Grants the harness did not see the service create (no observation of them):
    /// their place in the order is the client's word.
    pub unverified: u64,
    /// Up to 50: `(earlier, later)` grants where the token did not grow.
    pub examples: Vec<TokenPair>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenPair {
    pub key: String,
    pub earlier_worker: u32,
    pub earlier_grant: i64,
    pub earlier_token: i64,
    pub later_worker: u32,
    pub later_grant: i64,
    pub later_token: i64,
}

/// `exclusion`: bugs of the lock library or service, judged against what the
/// harness observed of the service — never the expected overlap of a lease lock
/// under a pause (that is the informational `mutex` check). Fails by default
/// (`[expect] exclusion_violations`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExclusionCheck {
    /// `false` when a phantom grant or an unexplained overlap was found;
    /// `"unknown"` when no acquisition could be matched at all.
    pub valid: crate::Validity,
    /// Acquisitions the clients reported (`acquire` `ok`).
    pub acquisitions: u64,
    /// Of those, matched to a grant the harness observed the service make.
    pub matched: u64,
    /// Phantom grants: a client told it holds a lock the service never granted
    /// it — its acquisition is unmatched although the harness observed that
    /// lock's grants all along.
    pub phantom: u64,
    /// Unmatched acquisitions of a lock the harness never observed at all (or
    /// while its feed was lost): a coverage gap, not a finding.
    pub unobserved: u64,
    /// The entries (the library's own key or path, else the lock's name) of
    /// the unobserved acquisitions, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unobserved_entries: Vec<String>,
    /// Overlapping holds of matched grants with both holders' sessions alive at
    /// the service: no session loss explains them.
    pub unexplained_overlaps: u64,
    /// Overlapping holds of matched grants whose sessions are not known (not
    /// judged either way).
    #[serde(default)]
    pub overlaps_unjudged: u64,
    /// Up to 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phantoms: Vec<PhantomGrant>,
    /// Up to 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<UnexplainedOverlap>,
}

impl ExclusionCheck {
    /// Phantom grants plus unexplained overlaps: what `exclusion_violations`
    /// counts.
    pub fn violations(&self) -> u64 {
        self.phantom + self.unexplained_overlaps
    }
}

/// A client told it holds a lock the service never granted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhantomGrant {
    pub worker: u32,
    /// The lock's name (the workload key).
    pub key: String,
    /// The entry the client named (its library's key or path), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// The owner value the client named, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// When the client was told it holds the lock.
    pub told_ns: u64,
    /// Who held the lock at the service then (the grant observed last before),
    /// if anyone: `(grant, session)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<(i64, i64)>,
}

/// Two holds of observed grants at once, both sessions alive at the service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnexplainedOverlap {
    pub key: String,
    pub a_worker: u32,
    pub a_grant: Option<i64>,
    pub a_session: i64,
    pub b_worker: u32,
    pub b_grant: Option<i64>,
    pub b_session: i64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Liveness: a waiter left waiting while the lock was free at the service (a
/// waiter never woken, a lock stuck after a reconnect or a cancelled release).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Liveness {
    /// How long the lock must have been free, with a worker waiting all along,
    /// to count (milliseconds).
    pub threshold_ms: u64,
    /// Such waits: the worker was neither paused nor cut off meanwhile.
    pub stuck_waits: u64,
    /// Up to 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<StuckWait>,
    /// Holds whose session the service ended while the holder held, whose
    /// worker was never told (no `keepalive-lost`: no `session-lost` from an
    /// adapter, no failed keepalive, and no client error) from the grant to its
    /// next acquisition or the end of the run.
    #[serde(default)]
    pub untold_holders: u64,
    /// Up to 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untold: Vec<UntoldHolder>,
}

/// A holder never told that the service ended its session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UntoldHolder {
    pub worker: u32,
    pub key: String,
    /// The grant (CreateRevision, czxid, observation order), when known.
    pub grant: Option<i64>,
    /// The session the grant is judged by (its entry's, as observed).
    pub session: i64,
    pub hold_start_ns: u64,
    /// When the service ended the session (observed).
    pub session_ended_ns: u64,
    /// When the hold ended (its release asked for, or the worker's last event).
    pub hold_end_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StuckWait {
    pub worker: u32,
    pub key: String,
    /// When the worker began waiting (its `acquire` invoke).
    pub waiting_since_ns: u64,
    /// The stretch the lock was free at the service while it waited.
    pub free_from_ns: u64,
    pub free_to_ns: u64,
}
