//! Liveness, judged against what the harness observed of the service: a worker
//! left waiting for a lock while the service held no entry of it at all — a
//! waiter never woken, a lock stuck after a reconnect or a cancelled release
//! (kazoo#282's shape). A waiter's own entry (etcd's Lock key, ZooKeeper's
//! sequential child) counts as an entry: the lock is free only when none is
//! live. A stretch in which the waiter was paused or cut off by a fault, or in
//! which the observer lost its feed, does not count.

use std::collections::{BTreeMap, HashMap};

use fencecheck_reports::{Liveness, StuckWait};

use super::Recorded;
use crate::record::history::{EventType, F};
use crate::record::observe::Observation;

/// How long the lock must stay free with a worker waiting: longer than any
/// wake-up a working client takes (a watch fires at once, a poll retries in
/// well under a second, a TTL expiry is observed as the entry's deletion).
pub const STUCK_NS: u64 = 10_000_000_000;
const MAX_EXAMPLES: usize = 50;

pub fn check(rec: &Recorded) -> Liveness {
    let mut out = Liveness {
        threshold_ms: STUCK_NS / 1_000_000,
        ..Liveness::default()
    };
    let Some(obs) = &rec.observations else {
        return out;
    };
    let free = free_stretches(obs);
    let gaps: Vec<u64> = obs
        .iter()
        .filter_map(|o| match o {
            Observation::Gap { time_ns, .. } => Some(*time_ns),
            _ => None,
        })
        .collect();
    for (worker, key, from, to) in waits(rec) {
        let Some(stretches) = free.get(&key) else {
            continue;
        };
        for &(f0, f1) in stretches {
            let (a, b) = (f0.max(from), f1.min(to));
            if b <= a || b - a < STUCK_NS {
                continue;
            }
            if gaps.iter().any(|&g| g >= a && g <= b)
                || super::findings::frozen_or_cut(rec, worker, a, b)
            {
                continue;
            }
            out.stuck_waits += 1;
            if out.examples.len() < MAX_EXAMPLES {
                out.examples.push(StuckWait {
                    worker,
                    key: key.clone(),
                    waiting_since_ns: from,
                    free_from_ns: a,
                    free_to_ns: b,
                });
            }
            break;
        }
    }
    out
}

/// Per key: the stretches in which no entry of it was live at the service,
/// from its first observed entry (before that the record says nothing) to the
/// end of the observation.
fn free_stretches(obs: &[Observation]) -> HashMap<String, Vec<(u64, u64)>> {
    let mut sorted: Vec<&Observation> = obs.iter().collect();
    sorted.sort_by_key(|o| o.time_ns());
    let end = sorted.last().map_or(0, |o| o.time_ns());
    let mut live: HashMap<String, BTreeMap<i64, ()>> = HashMap::new();
    let mut free_since: HashMap<String, u64> = HashMap::new();
    let mut out: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for o in sorted {
        match o {
            Observation::Created {
                time_ns,
                key,
                grant,
                ..
            } => {
                if let Some(since) = free_since.remove(key) {
                    out.entry(key.clone()).or_default().push((since, *time_ns));
                }
                live.entry(key.clone()).or_default().insert(*grant, ());
            }
            Observation::Deleted {
                time_ns,
                key,
                grant,
                ..
            } => {
                let entries = live.entry(key.clone()).or_default();
                if entries.remove(grant).is_some() && entries.is_empty() {
                    free_since.insert(key.clone(), *time_ns);
                }
            }
            _ => {}
        }
    }
    for (key, since) in free_since {
        out.entry(key).or_default().push((since, end));
    }
    out
}

/// Every wait: (worker, key, invoked, answered — or the worker's last event).
fn waits(rec: &Recorded) -> Vec<(u32, String, u64, u64)> {
    let mut open: HashMap<u32, (String, u64)> = HashMap::new();
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut out = Vec::new();
    for e in &rec.events {
        let Some(w) = e.process.worker() else {
            continue;
        };
        last.insert(w, e.time_ns);
        if e.f != F::Acquire {
            continue;
        }
        match e.kind {
            EventType::Invoke => {
                open.insert(w, (e.key.clone().unwrap_or_default(), e.time_ns));
            }
            _ => {
                if let Some((key, from)) = open.remove(&w) {
                    out.push((w, key, from, e.time_ns));
                }
            }
        }
    }
    for (w, (key, from)) in open {
        out.push((w, key, from, last.get(&w).copied().unwrap_or(from)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Event, Process};

    const S: u64 = 1_000_000_000;

    fn acquire(t: u64, w: u32, kind: EventType) -> Event {
        let mut e = Event::new(Process::Worker(w), kind, F::Acquire);
        e.time_ns = t;
        e.key = Some("k0".into());
        e
    }

    fn entry(t: u64, grant: i64, created: bool) -> Observation {
        if created {
            Observation::Created {
                time_ns: t,
                key: "k0".into(),
                grant,
                session: 1,
                id: "/k0".into(),
                value: None,
            }
        } else {
            Observation::Deleted {
                time_ns: t,
                key: "k0".into(),
                grant,
                session: 1,
                id: "/k0".into(),
            }
        }
    }

    #[test]
    fn a_waiter_left_waiting_on_a_free_lock_is_stuck() {
        // Grant 5 is released at 2 s; worker 1, waiting since 1 s, is answered
        // only at 20 s, and nothing held the lock in between.
        let events = vec![
            acquire(S, 1, EventType::Invoke),
            acquire(20 * S, 1, EventType::Ok),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![
            entry(0, 5, true),
            entry(2 * S, 5, false),
            entry(20 * S, 7, true),
        ]);
        let l = check(&rec);
        assert_eq!(l.stuck_waits, 1, "{l:?}");
        assert_eq!(
            (l.examples[0].free_from_ns, l.examples[0].free_to_ns),
            (2 * S, 20 * S)
        );
        // Woken at 3 s instead: no finding.
        rec.events[1].time_ns = 3 * S;
        if let Some(o) = rec.observations.as_mut() {
            o[2] = entry(3 * S, 7, true);
        }
        assert_eq!(check(&rec).stuck_waits, 0);
    }

    #[test]
    fn a_waiters_own_entry_keeps_the_lock_from_being_free() {
        let events = vec![
            acquire(S, 1, EventType::Invoke),
            acquire(20 * S, 1, EventType::Ok),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![
            entry(0, 5, true),
            entry(S, 6, true),
            entry(15 * S, 5, false),
        ]);
        assert_eq!(check(&rec).stuck_waits, 0);
    }
}
