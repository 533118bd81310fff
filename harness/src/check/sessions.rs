//! What the findings, the exclusion check and liveness each ask of the recorded
//! run about sessions and faults: when the service ended each session, and
//! whether a worker was itself frozen or cut off, and which session each
//! observed entry was created under. Here, in a file of its own, so
//! that those three checks read the same answers without importing each other.

use std::collections::HashMap;

use super::Recorded;
use crate::record::observe::Observation;

/// Session → when the service ended it (the earliest observation: they need
/// not be written in time order).
pub(super) fn session_ends(obs: &[Observation]) -> HashMap<i64, u64> {
    let mut out: HashMap<i64, u64> = HashMap::new();
    for o in obs {
        if let Observation::SessionEnded {
            time_ns, session, ..
        } = o
        {
            let t = out.entry(*session).or_insert(*time_ns);
            *t = (*t).min(*time_ns);
        }
    }
    out
}

/// Was `worker` itself paused or cut off (a `pause` or `partition` whose
/// recorded detail names it) at some time in `[from, to]`? A grant it was told
/// then may arrive late through the fault alone.
pub(super) fn frozen_or_cut(rec: &Recorded, worker: u32, from: u64, to: u64) -> bool {
    fn names(v: &serde_json::Value, w: u32) -> bool {
        match v {
            serde_json::Value::Object(m) => {
                m.get("worker").and_then(serde_json::Value::as_u64) == Some(u64::from(w))
                    || m.values().any(|x| names(x, w))
            }
            serde_json::Value::Array(a) => a.iter().any(|x| names(x, w)),
            _ => false,
        }
    }
    rec.faults.iter().any(|f| {
        matches!(f.kind.as_str(), "pause" | "partition")
            && f.start_ns <= to
            && f.end_ns.unwrap_or(u64::MAX) >= from
            && names(&f.detail, worker)
    })
}

/// (key, grant) → the session the service created the entry under.
pub(super) type EntrySessions = HashMap<(String, i64), i64>;

pub(super) fn entry_sessions(obs: &[Observation]) -> EntrySessions {
    obs.iter()
        .filter_map(|o| match o {
            Observation::Created {
                key,
                grant,
                session,
                ..
            } if *session != 0 => Some(((key.clone(), *grant), *session)),
            _ => None,
        })
        .collect()
}

/// The session a grant is judged by: its entry's, as observed, else `told`.
pub(super) fn session_of(
    sessions: &EntrySessions,
    key: Option<&String>,
    grant: Option<i64>,
    told: Option<i64>,
) -> Option<i64> {
    key.zip(grant)
        .and_then(|(k, g)| sessions.get(&(k.clone(), g)).copied())
        .or(told)
}
