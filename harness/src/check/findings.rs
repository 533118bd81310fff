//! The two findings, judged against what the harness observed of the service
//! (`service.jsonl`): when each session ended there. Clients are compared with
//! that, never trusted for it.
//!
//! - grant validity: an acquisition the service answered ("granted") after the
//!   session it was made under had already ended at the service;
//! - unsafe window: a hold whose session ended while the holder went on
//!   (`outlived`: the window runs from the end to the holder's last storage
//!   operation of that hold), or had already ended when the grant was told
//!   (`granted-dead`: unsafe from its first operation, the window is the whole
//!   hold); it counts what the fence did with those operations, as the storage
//!   logged them, or as the workers recorded them when there is no log. Its
//!   post-loss split cuts each window where the client itself said the session
//!   was lost (the worker's `keepalive-lost`: an elector at its renew deadline):
//!   what the old holder did while it still believed, and after it knew.
//!
//! A grant's session is the one the service created its entry under, as
//! observed (`Created`), not the one the worker was told of: an external client
//! (Curator) may open a session of its own after a loss and be granted under it.
//! Only when the creation was not observed is the worker's word used.

use std::collections::HashMap;

use fencecheck_reports::{Findings, GrantValidity, LateGrant, OpCounts, UnsafeHold, UnsafeWindow};
use fencecheck_storage::{OpKind, Verdict};

use super::sessions::{entry_sessions, frozen_or_cut, session_ends, session_of, EntrySessions};
use super::Recorded;
use crate::record::history::{EventType, F};
use crate::record::observe::Observation;

const MAX_EXAMPLES: usize = 50;
const MAX_WINDOWS: usize = 200;

/// `storage_log`: whether the storage kept a log; without one the unsafe
/// windows' operations are counted from the client history (a lower bound the
/// report marks).
pub fn check(rec: &Recorded, storage_log: bool) -> Findings {
    let Some(obs) = &rec.observations else {
        return Findings::default();
    };
    let ended = session_ends(obs);
    let sessions = entry_sessions(obs);
    // A phantom grant (the service never made it) is not a grant: never
    // counted valid, nor judged under a session (the exclusion check has it).
    let not_grants = super::exclusion::phantoms(rec);
    Findings {
        observed: true,
        observation_gaps: obs
            .iter()
            .filter(|o| matches!(o, Observation::Gap { .. }))
            .count() as u64,
        grant_validity: grant_validity(rec, &ended, &sessions, &not_grants),
        unsafe_window: unsafe_window(rec, &ended, &sessions, &not_grants, storage_log),
        liveness: super::liveness::check(rec),
    }
}

/// Phantom grants (worker, time told): acquisitions the service never granted.
type NotGrants = std::collections::HashSet<(u32, u64)>;

fn grant_validity(
    rec: &Recorded,
    ended: &HashMap<i64, u64>,
    sessions: &EntrySessions,
    not_grants: &NotGrants,
) -> GrantValidity {
    let mut g = GrantValidity::default();
    let mut invoked: HashMap<u32, u64> = HashMap::new();
    for e in rec.events.iter().filter(|e| e.f == F::Acquire) {
        if let (EventType::Invoke, Some(w)) = (e.kind, e.process.worker()) {
            invoked.insert(w, e.time_ns);
        }
        let told = match e.kind {
            EventType::Ok
                if e.process
                    .worker()
                    .is_some_and(|w| not_grants.contains(&(w, e.time_ns))) =>
            {
                continue
            }
            EventType::Ok => false,
            EventType::Fail if told_granted(e) => true,
            _ => continue,
        };
        let session = session_of(sessions, e.key.as_ref(), e.grant, e.session);
        let (Some(worker), Some(session)) = (e.process.worker(), session) else {
            continue;
        };
        g.grants += 1;
        let Some(&end) = ended.get(&session) else {
            continue;
        };
        if end >= e.time_ns {
            continue;
        }
        g.after_session_end += 1;
        let since = invoked.get(&worker).copied().unwrap_or(e.time_ns);
        let client_fault = !told && frozen_or_cut(rec, worker, since, e.time_ns);
        if told {
            g.caught_by_client += 1;
        } else if client_fault {
            g.during_client_fault += 1;
        }
        if g.examples.len() < MAX_EXAMPLES {
            g.examples.push(LateGrant {
                worker,
                key: e.key.clone().unwrap_or_default(),
                grant: e.grant,
                session,
                session_ended_ns: end,
                told_ns: e.time_ns,
                caught_by_client: told,
                during_client_fault: client_fault,
            });
        }
    }
    g
}

/// Did the service answer "granted" to this failed acquisition (the client then
/// found the grant gone)?
fn told_granted(e: &crate::record::history::Event) -> bool {
    e.detail
        .as_ref()
        .is_some_and(|d| d.get("told_granted").is_some())
}

/// A storage operation of a hold as the window counts it.
struct HoldOp {
    time_ns: u64,
    read: bool,
    accepted: bool,
}

/// The operations of one worker's hold (key, grant) that began after `from`:
/// from the storage's log when there is one, else from the client history
/// (invoked after `from`, answered: a lower bound).
fn hold_ops(
    rec: &Recorded,
    worker: u32,
    key: &str,
    grant: Option<i64>,
    from: u64,
    storage_log: bool,
) -> Vec<HoldOp> {
    if storage_log {
        let w = worker.to_string();
        return rec
            .storage
            .iter()
            .filter(|r| {
                r.request.client == w
                    && r.request.key == key
                    && r.request.revision == grant
                    && r.time_ns > from
            })
            .map(|r| HoldOp {
                time_ns: r.time_ns,
                read: r.request.op == OpKind::Read,
                accepted: r.verdict == Verdict::Accepted,
            })
            .collect();
    }
    let mut out = Vec::new();
    let mut invoked: Option<u64> = None;
    for e in rec.events.iter().filter(|e| {
        e.process.worker() == Some(worker)
            && matches!(e.f, F::Read | F::Write)
            && e.key.as_deref() == Some(key)
            && e.grant == grant
    }) {
        match e.kind {
            EventType::Invoke => invoked = Some(e.time_ns),
            EventType::Ok | EventType::Fail => {
                if invoked.take().is_some_and(|t| t > from) {
                    out.push(HoldOp {
                        time_ns: e.time_ns,
                        read: e.f == F::Read,
                        accepted: e.f == F::Write && e.kind == EventType::Ok,
                    });
                }
            }
            _ => invoked = None,
        }
    }
    out
}

fn unsafe_window(
    rec: &Recorded,
    ended: &HashMap<i64, u64>,
    sessions: &EntrySessions,
    not_grants: &NotGrants,
    storage_log: bool,
) -> UnsafeWindow {
    let mut w = UnsafeWindow::default();
    let told = client_told(rec);
    let mut believed: Vec<f64> = Vec::new();
    for h in super::mutex::holds(rec) {
        if not_grants.contains(&(h.worker, h.start_ns)) {
            continue;
        }
        let Some(session) = session_of(sessions, Some(&h.key), h.revision, h.lease) else {
            continue;
        };
        let Some(&end) = ended.get(&session) else {
            continue;
        };
        if end > h.end_ns {
            continue;
        }
        // A hold told after its session had already ended is unsafe from its
        // first operation: its window is the whole hold.
        let granted_dead = end < h.start_ns;
        let from = end.max(h.start_ns);
        let mut u = UnsafeHold {
            kind: if granted_dead {
                "granted-dead"
            } else {
                "outlived"
            }
            .into(),
            worker: h.worker,
            key: h.key.clone(),
            grant: h.revision,
            session,
            hold_start_ns: h.start_ns,
            session_ended_ns: end,
            last_op_ns: from,
            window_ms: 0.0,
            reads: 0,
            writes_refused: 0,
            writes_accepted: 0,
            client_told_ns: None,
            before_told: OpCounts::default(),
            after_told: OpCounts::default(),
        };
        // The client's own word on the worker's session (the one it was told of),
        // if it came before the hold ended.
        // An adapter whose library has no session (an elector: `open` answers
        // session 0) says `session-lost` of session 0: that is the hold in
        // progress.
        let own = told
            .get(&(h.worker, h.lease.unwrap_or(session)))
            .and_then(|ts| ts.first().copied());
        let sessionless = told.get(&(h.worker, 0)).and_then(|ts| {
            ts.iter()
                .copied()
                .find(|&t| t >= h.start_ns && t <= h.end_ns)
        });
        u.client_told_ns = own.filter(|&t| t <= h.end_ns).or(sessionless);
        for op in hold_ops(rec, h.worker, &h.key, h.revision, from, storage_log) {
            u.last_op_ns = u.last_op_ns.max(op.time_ns);
            match (op.read, op.accepted) {
                (true, _) => u.reads += 1,
                (false, true) => u.writes_accepted += 1,
                (false, false) => u.writes_refused += 1,
            }
            let side = match u.client_told_ns {
                Some(t) if op.time_ns >= t => &mut u.after_told,
                _ => &mut u.before_told,
            };
            count(side, &op);
        }
        let p = &mut w.post_loss;
        match u.client_told_ns {
            Some(t) => {
                p.told += 1;
                believed.push(t.saturating_sub(end) as f64 / 1e6);
            }
            None => p.untold += 1,
        }
        add(&mut p.before, &u.before_told);
        add(&mut p.after, &u.after_told);
        u.window_ms = (u.last_op_ns - from) as f64 / 1e6;
        w.holds += 1;
        w.granted_dead += u64::from(granted_dead);
        w.reads += u.reads;
        w.writes_refused += u.writes_refused;
        w.writes_accepted += u.writes_accepted;
        w.windows.push(u);
    }
    w.windows
        .sort_by(|a, b| b.window_ms.total_cmp(&a.window_ms));
    let mut lens: Vec<f64> = w.windows.iter().map(|u| u.window_ms).collect();
    lens.sort_by(f64::total_cmp);
    w.p50_ms = percentile(&lens, 0.5);
    w.p90_ms = percentile(&lens, 0.9);
    w.max_ms = lens.last().copied().unwrap_or(0.0);
    believed.sort_by(f64::total_cmp);
    w.post_loss.believed_p50_ms = percentile(&believed, 0.5);
    w.post_loss.believed_max_ms = believed.last().copied().unwrap_or(0.0);
    w.windows.truncate(MAX_WINDOWS);
    w
}

/// (worker, session) → when the client said that session was lost, earliest
/// first.
fn client_told(rec: &Recorded) -> HashMap<(u32, i64), Vec<u64>> {
    let mut out: HashMap<(u32, i64), Vec<u64>> = HashMap::new();
    for e in rec.events.iter().filter(|e| e.f == F::KeepaliveLost) {
        let (Some(w), Some(s)) = (e.process.worker(), e.session) else {
            continue;
        };
        out.entry((w, s)).or_default().push(e.time_ns);
    }
    for ts in out.values_mut() {
        ts.sort_unstable();
    }
    out
}

fn count(c: &mut OpCounts, op: &HoldOp) {
    match (op.read, op.accepted) {
        (true, _) => c.reads += 1,
        (false, true) => c.writes_accepted += 1,
        (false, false) => c.writes_refused += 1,
    }
}

fn add(to: &mut OpCounts, c: &OpCounts) {
    to.reads += c.reads;
    to.writes_refused += c.writes_refused;
    to.writes_accepted += c.writes_accepted;
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Event, Process};
    use fencecheck_storage::{LogRecord, Request};

    fn ev(t: u64, w: u32, kind: EventType, f: F, session: i64, grant: Option<i64>) -> Event {
        let mut e = Event::new(Process::Worker(w), kind, f);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.session = Some(session);
        e.grant = grant;
        e
    }

    fn op(t: u64, w: u32, grant: i64, op: OpKind, verdict: Verdict) -> LogRecord {
        LogRecord {
            seq: t,
            time_ns: t,
            request: Request {
                op,
                key: "k0".into(),
                val: None,
                token: Some(grant),
                revision: Some(grant),
                lease: None,
                client: w.to_string(),
                request_id: t,
            },
            verdict,
            token_before: None,
            token_after: None,
            value_before: None,
            value_after: None,
        }
    }

    #[test]
    fn a_hold_outliving_its_session_has_a_window_and_late_grants_are_counted() {
        let events = vec![
            ev(10, 0, EventType::Invoke, F::Acquire, 1, None),
            ev(20, 0, EventType::Ok, F::Acquire, 1, Some(5)),
            // Session 1 ends at 100 (observed); worker 0 still writes at 150 and 180.
            ev(200, 0, EventType::Invoke, F::Release, 1, Some(5)),
            // Worker 1's grant is told at 300, after its session ended at 250.
            ev(120, 1, EventType::Invoke, F::Acquire, 2, None),
            ev(300, 1, EventType::Ok, F::Acquire, 2, Some(9)),
            ev(400, 1, EventType::Invoke, F::Release, 2, Some(9)),
        ];
        let storage = vec![
            op(50, 0, 5, OpKind::Read, Verdict::Ok),
            op(150, 0, 5, OpKind::Read, Verdict::Ok),
            op(180, 0, 5, OpKind::Write, Verdict::RejectedStale),
        ];
        let mut rec = Recorded::new(events, storage);
        rec.observations = Some(vec![
            Observation::SessionEnded {
                time_ns: 100,
                session: 1,
                worker: Some(0),
            },
            Observation::SessionEnded {
                time_ns: 250,
                session: 2,
                worker: Some(1),
            },
        ]);
        let f = check(&rec, true);
        assert!(f.observed);
        assert_eq!(f.grant_validity.grants, 2);
        assert_eq!(f.grant_validity.after_session_end, 1);
        assert_eq!(f.grant_validity.examples[0].worker, 1);
        // Worker 0's hold outlived its session; worker 1's was granted on an
        // ended one (its window is the whole hold, with no operation: 0 ms).
        assert_eq!(f.unsafe_window.holds, 2, "{:?}", f.unsafe_window);
        assert_eq!(f.unsafe_window.granted_dead, 1, "{:?}", f.unsafe_window);
        let u = &f.unsafe_window.windows[0];
        assert_eq!(u.kind, "outlived");
        assert_eq!((u.reads, u.writes_refused, u.writes_accepted), (1, 1, 0));
        assert_eq!(u.last_op_ns, 180);
        assert!((u.window_ms - 80e-6).abs() < 1e-9);
        let d = &f.unsafe_window.windows[1];
        assert_eq!(
            (d.kind.as_str(), d.worker, d.last_op_ns),
            ("granted-dead", 1, 300)
        );
    }

    #[test]
    fn the_post_loss_split_cuts_a_window_where_the_client_said_it_lost_the_lock() {
        let mut lost = ev(160, 0, EventType::Info, F::KeepaliveLost, 1, None);
        lost.key = None;
        let events = vec![
            ev(10, 0, EventType::Invoke, F::Acquire, 1, None),
            ev(20, 0, EventType::Ok, F::Acquire, 1, Some(5)),
            // The service ends session 1 at 100; the client says so at 160.
            lost,
            ev(200, 0, EventType::Invoke, F::Release, 1, Some(5)),
            // Worker 1 outlives its session (ends at 300) and never says so.
            ev(210, 1, EventType::Invoke, F::Acquire, 2, None),
            ev(220, 1, EventType::Ok, F::Acquire, 2, Some(9)),
            ev(400, 1, EventType::Invoke, F::Release, 2, Some(9)),
        ];
        let storage = vec![
            op(120, 0, 5, OpKind::Write, Verdict::Accepted),
            op(150, 0, 5, OpKind::Write, Verdict::RejectedStale),
            op(180, 0, 5, OpKind::Write, Verdict::RejectedStale),
            op(350, 1, 9, OpKind::Write, Verdict::Accepted),
        ];
        let mut rec = Recorded::new(events, storage);
        rec.observations = Some(vec![
            Observation::SessionEnded {
                time_ns: 100,
                session: 1,
                worker: Some(0),
            },
            Observation::SessionEnded {
                time_ns: 300,
                session: 2,
                worker: Some(1),
            },
        ]);
        let u = check(&rec, true).unsafe_window;
        assert_eq!(u.holds, 2, "{u:?}");
        let p = &u.post_loss;
        assert_eq!((p.told, p.untold), (1, 1), "{p:?}");
        assert!((p.believed_max_ms - 60e-6).abs() < 1e-12, "{p:?}");
        // Before it knew: worker 0's two writes at 120 and 150, worker 1's at 350.
        assert_eq!(
            (p.before.writes_accepted, p.before.writes_refused),
            (2, 1),
            "{p:?}"
        );
        assert_eq!(
            (p.after.writes_accepted, p.after.writes_refused),
            (0, 1),
            "{p:?}"
        );
        let w0 = u.windows.iter().find(|w| w.worker == 0).expect("worker 0");
        assert_eq!(w0.client_told_ns, Some(160));
    }

    #[test]
    fn a_grant_is_judged_by_the_session_its_entry_was_created_under() {
        // Worker 0 was told of session 1; the client was granted entry 5 under a
        // session 3 it opened itself. Session 3 ends at 100, session 1 never.
        let events = vec![
            ev(10, 0, EventType::Invoke, F::Acquire, 1, None),
            ev(20, 0, EventType::Ok, F::Acquire, 1, Some(5)),
            ev(200, 0, EventType::Invoke, F::Release, 1, Some(5)),
        ];
        let storage = vec![op(150, 0, 5, OpKind::Write, Verdict::RejectedStale)];
        let mut rec = Recorded::new(events, storage);
        rec.observations = Some(vec![
            Observation::Created {
                time_ns: 15,
                key: "k0".into(),
                grant: 5,
                session: 3,
                id: "/fencecheck/locks/k0/_c_x-lock-0000000000".into(),
                value: None,
            },
            // Written out of time order (the end is stamped when the deletion
            // was seen, the line once the leader answered): the earliest counts.
            Observation::SessionEnded {
                time_ns: 120,
                session: 3,
                worker: Some(0),
            },
            Observation::SessionEnded {
                time_ns: 100,
                session: 3,
                worker: Some(0),
            },
        ]);
        let f = check(&rec, true);
        assert_eq!(f.unsafe_window.holds, 1, "{:?}", f.unsafe_window);
        let u = &f.unsafe_window.windows[0];
        assert_eq!((u.session, u.session_ended_ns), (3, 100));
        assert_eq!(u.writes_refused, 1);
    }

    #[test]
    fn a_late_grant_told_while_the_client_was_paused_is_the_faults_doing() {
        let events = vec![
            ev(120, 1, EventType::Invoke, F::Acquire, 2, None),
            ev(300, 1, EventType::Ok, F::Acquire, 2, Some(9)),
            ev(400, 1, EventType::Invoke, F::Release, 2, Some(9)),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![Observation::SessionEnded {
            time_ns: 250,
            session: 2,
            worker: Some(1),
        }]);
        let late = check(&rec, true).grant_validity;
        assert_eq!((late.after_session_end, late.during_client_fault), (1, 0));
        // The same grant, told right after a pause of worker 1 ended.
        rec.faults = vec![fencecheck_reports::FaultWindow {
            id: 1,
            kind: "pause".into(),
            target: "holder".into(),
            start_ns: 200,
            end_ns: Some(299),
            outcome: "ok".into(),
            detail: serde_json::json!({"target": {"workers": [{"worker": 1, "pid": 7}]}}),
            error: None,
            effect: None,
        }];
        let late = check(&rec, true).grant_validity;
        assert_eq!((late.after_session_end, late.during_client_fault), (1, 1));
        assert!(late.examples[0].during_client_fault);
    }

    #[test]
    fn without_observations_there_are_no_findings() {
        let rec = Recorded::new(Vec::new(), Vec::new());
        let f = check(&rec, true);
        assert!(!f.observed);
        assert_eq!(f.unsafe_window.holds, 0);
    }
}
