//! Liveness, judged against what the harness observed of the service:
//! - a worker left waiting for a lock while the service held no entry of it at
//!   all — a waiter never woken, a lock stuck after a reconnect or a cancelled
//!   release (kazoo#282's shape). A waiter's own entry (etcd's Lock key,
//!   ZooKeeper's sequential child) counts as an entry: the lock is free only
//!   when none is live. A stretch in which the waiter was paused or cut off by a
//!   fault, or in which the observer lost its feed, does not count;
//! - a holder never told that it lost the lock: the service ended the session
//!   its grant was made under while it held, and its worker recorded no
//!   `keepalive-lost` (an adapter's `session-lost`, a failed keepalive) nor a
//!   client error from the grant to its next acquisition (tooz's etcd3gw
//!   heartbeat finds the lease gone and says nothing). What the old holder did
//!   meanwhile is the unsafe window's; this says only that it was never told.

use std::collections::{BTreeMap, HashMap};

use fencecheck_reports::{Liveness, StuckWait, UntoldHolder};

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
    out.untold = untold_holders(rec, obs);
    out.untold_holders = out.untold.len() as u64;
    out.untold.truncate(MAX_EXAMPLES);
    let run_end = rec.end_ns.unwrap_or(0);
    let free = free_stretches(obs, run_end);
    let gaps: Vec<u64> = obs
        .iter()
        .filter_map(|o| match o {
            Observation::Gap { time_ns, .. } => Some(*time_ns),
            _ => None,
        })
        .collect();
    for (worker, key, from, to) in waits(rec, run_end) {
        let Some(stretches) = free.get(&key) else {
            continue;
        };
        for &(f0, f1) in stretches {
            let (a, b) = (f0.max(from), f1.min(to));
            if b <= a || b - a < STUCK_NS {
                continue;
            }
            if gaps.iter().any(|&g| g >= a && g <= b)
                || super::sessions::frozen_or_cut(rec, worker, a, b)
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
/// end of the observation or of the run (`run_end`), whichever is later: a lock
/// left free to the end, nothing changing any more, is free all that time.
fn free_stretches(obs: &[Observation], run_end: u64) -> HashMap<String, Vec<(u64, u64)>> {
    let mut sorted: Vec<&Observation> = obs.iter().collect();
    sorted.sort_by_key(|o| o.time_ns());
    let end = sorted.last().map_or(0, |o| o.time_ns()).max(run_end);
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

/// Every hold of a grant the service made whose session the service ended
/// before the hold ended, and whose worker was not told from the grant to its
/// next acquisition (or the end of the record).
fn untold_holders(rec: &Recorded, obs: &[Observation]) -> Vec<UntoldHolder> {
    let ended = super::sessions::session_ends(obs);
    let sessions = super::sessions::entry_sessions(obs);
    let not_grants = super::exclusion::phantoms(rec);
    let told = told_times(rec);
    let mut out = Vec::new();
    for h in super::mutex::holds(rec) {
        if not_grants.contains(&(h.worker, h.start_ns)) {
            continue;
        }
        let session = super::sessions::session_of(&sessions, Some(&h.key), h.revision, h.lease);
        let Some((session, &end)) = session.and_then(|s| ended.get(&s).map(|e| (s, e))) else {
            continue;
        };
        if end > h.end_ns {
            continue;
        }
        let until = next_acquire(rec, h.worker, h.end_ns);
        let was_told = told
            .get(&h.worker)
            .is_some_and(|ts| ts.iter().any(|&t| t >= h.start_ns && t < until));
        if !was_told {
            out.push(UntoldHolder {
                worker: h.worker,
                key: h.key.clone(),
                grant: h.revision,
                session,
                hold_start_ns: h.start_ns,
                session_ended_ns: end,
                hold_end_ns: h.end_ns,
            });
        }
    }
    out
}

/// Worker → when it was told its session or client was gone: `keepalive-lost`
/// (what an adapter's `session-lost` and a failed keepalive record) and
/// `client-error` (a client stopped or replaced: its session counts as lost).
fn told_times(rec: &Recorded) -> HashMap<u32, Vec<u64>> {
    let mut out: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in &rec.events {
        if let (F::KeepaliveLost | F::ClientError, Some(w)) = (e.f, e.process.worker()) {
            out.entry(w).or_default().push(e.time_ns);
        }
    }
    out
}

/// The worker's first `acquire` invoke after `after`, or never.
fn next_acquire(rec: &Recorded, worker: u32, after: u64) -> u64 {
    rec.events
        .iter()
        .find(|e| {
            e.f == F::Acquire
                && e.kind == EventType::Invoke
                && e.time_ns > after
                && e.process.worker() == Some(worker)
        })
        .map_or(u64::MAX, |e| e.time_ns)
}

/// Every wait: (worker, key, invoked, answered — or, never answered, the
/// worker's last event or the run's end, whichever is later: a worker still
/// waiting when told to stop waited until then).
fn waits(rec: &Recorded, run_end: u64) -> Vec<(u32, String, u64, u64)> {
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
        out.push((
            w,
            key,
            from,
            last.get(&w).copied().unwrap_or(from).max(run_end),
        ));
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
    fn a_waiter_never_answered_on_a_lock_free_to_the_end_is_stuck() {
        // Grant 5 is released at 2 s and nothing changes after; worker 1,
        // waiting since 1 s, is never answered. The record alone ends at 2 s:
        // only the run's end (20 s) says how long the lock stayed free.
        let mut rec = Recorded::new(vec![acquire(S, 1, EventType::Invoke)], Vec::new());
        rec.observations = Some(vec![entry(0, 5, true), entry(2 * S, 5, false)]);
        assert_eq!(check(&rec).stuck_waits, 0, "without the run's end");
        rec.end_ns = Some(20 * S);
        let l = check(&rec);
        assert_eq!(l.stuck_waits, 1, "{l:?}");
        assert_eq!(
            (l.examples[0].free_from_ns, l.examples[0].free_to_ns),
            (2 * S, 20 * S)
        );
        // A run that ended 5 s after the release: not long enough.
        rec.end_ns = Some(7 * S);
        assert_eq!(check(&rec).stuck_waits, 0);
    }

    fn event(t: u64, w: u32, kind: EventType, f: F) -> Event {
        let mut e = Event::new(Process::Worker(w), kind, f);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.grant = Some(5);
        e.session = Some(9);
        e
    }

    /// Worker 1 holds grant 5 (session 9) from 1 s and releases at 5 s; the
    /// service ends session 9 at 3 s; worker 1 asks for the lock again at 6 s.
    fn untold_run(told_at: Option<u64>, ended_at: u64) -> Recorded {
        let mut events = vec![
            event(S, 1, EventType::Invoke, F::Acquire),
            event(S, 1, EventType::Ok, F::Acquire),
            event(5 * S, 1, EventType::Invoke, F::Release),
            event(5 * S, 1, EventType::Fail, F::Release),
            event(6 * S, 1, EventType::Invoke, F::Acquire),
        ];
        if let Some(t) = told_at {
            events.push(event(t, 1, EventType::Info, F::KeepaliveLost));
            events.sort_by_key(|e| e.time_ns);
        }
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![
            Observation::Created {
                time_ns: S,
                key: "k0".into(),
                grant: 5,
                session: 9,
                id: "/k0".into(),
                value: None,
            },
            Observation::SessionEnded {
                time_ns: ended_at,
                session: 9,
                worker: Some(1),
            },
        ]);
        rec
    }

    #[test]
    fn a_holder_never_told_that_its_session_ended_is_untold() {
        let l = check(&untold_run(None, 3 * S));
        assert_eq!(l.untold_holders, 1, "{l:?}");
        let u = &l.untold[0];
        assert_eq!(
            (u.worker, u.session, u.session_ended_ns, u.hold_end_ns),
            (1, 9, 3 * S, 5 * S)
        );
        // Told while holding, or after letting go but before asking again: told.
        for t in [4 * S, 5 * S + 1] {
            assert_eq!(check(&untold_run(Some(t), 3 * S)).untold_holders, 0, "{t}");
        }
        // Told only once it was waiting for the lock again: too late.
        assert_eq!(check(&untold_run(Some(7 * S), 3 * S)).untold_holders, 1);
        // The session ended after the hold: nothing to tell.
        assert_eq!(check(&untold_run(None, 5 * S + 1)).untold_holders, 0);
    }

    /// A recorded run directory (`harness/tests/fixtures/<name>`), read as
    /// `fencecheck check` reads it, without writing into it.
    fn fixture(name: &str) -> Recorded {
        use crate::record::history;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let files = crate::assess::event_files(&dir).expect("event files");
        let (events, _) = history::merge(&files).expect("events");
        let (obs, _) =
            history::read_jsonl::<Observation>(&dir.join("service.jsonl")).expect("service.jsonl");
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(obs);
        // As `fencecheck check` does: an adapter's grants are resolved to the
        // service's entries first.
        super::super::resolve::resolve(&mut rec);
        rec
    }

    #[test]
    fn recorded_runs_count_the_holders_never_told() {
        // tooz 9.1.0's etcd3gw driver: each paused holder's lease ended at the
        // service and nothing told it; none of its holders said a word.
        let rec = fixture("tooz-etcd3gw-untold");
        let l = check(&rec);
        assert!(l.untold_holders > 0, "{l:?}");
        assert!(!rec.events.iter().any(|e| e.f == F::KeepaliveLost));
        for u in &l.untold {
            assert!(u.hold_start_ns <= u.session_ended_ns && u.session_ended_ns <= u.hold_end_ns);
        }
        // fencecheck's own ZooKeeper client reports every session loss: the
        // holders the pauses outlived were all told.
        let rec = fixture("zk-pause");
        assert!(rec.events.iter().any(|e| e.f == F::KeepaliveLost));
        assert_eq!(check(&rec).untold_holders, 0);
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
