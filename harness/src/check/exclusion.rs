//! `exclusion`: the overlaps that are bugs of the lock library or service, kept
//! apart from the expected overlap of a lease lock under a pause (`mutex`,
//! informational). Judged against what the harness observed of the service
//! (`service.jsonl`), after the grants were put in its order (`resolve`):
//!
//! - a **phantom grant**: a client told it holds a lock that the service never
//!   granted it. Its acquisition matches no grant the harness observed, although
//!   the harness observed that lock's grants (the entry was covered, and no gap
//!   in the feed overlaps the acquisition);
//! - an **unexplained overlap**: two holds of observed grants at once, with both
//!   holders' sessions alive at the service (no session loss explains it).
//!
//! An unmatched acquisition of a lock the harness never observed (or while its
//! feed was lost) is neither: it is a coverage gap (`unobserved`), which keeps
//! the run from passing (`check::coverage`), never a finding.

use std::collections::{BTreeSet, HashMap, HashSet};

use fencecheck_reports::{ExclusionCheck, PhantomGrant, UnexplainedOverlap, Validity};

use super::Recorded;
use crate::record::history::{Event, EventType, F};
use crate::record::observe::Observation;

const MAX_EXAMPLES: usize = 50;
/// A gap in the observer's feed this close to an acquisition may have hidden
/// its grant.
const GAP_SLACK_NS: u64 = 2_000_000_000;
/// How long after an overlap a session's end may still be observed (the
/// observer's feed lags the service).
const END_SLACK_NS: u64 = super::faults::SESSION_END_SLACK_NS;

/// One reported acquisition and how it stands against the observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Matched to a grant the harness observed.
    Matched,
    /// Unmatched, though the harness observed the lock's grants.
    Phantom,
    /// Unmatched, and the harness never observed the lock (or lost its feed).
    Unobserved,
}

/// An acquisition (`acquire` `ok` of a worker) with what the check needs.
struct Acq<'a> {
    event: &'a Event,
    worker: u32,
    key: String,
    invoked_ns: u64,
}

impl Acq<'_> {
    fn client(&self, field: &str) -> Option<String> {
        self.event
            .detail
            .as_ref()
            .and_then(|d| d.get("client"))
            .and_then(|c| c.get(field))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    }
    /// What the message names: the library's own entry, else the lock's name.
    fn entry(&self) -> String {
        self.client("entry").unwrap_or_else(|| self.key.clone())
    }
}

fn acquisitions(rec: &Recorded) -> Vec<Acq<'_>> {
    let mut invoked: HashMap<u32, u64> = HashMap::new();
    let mut out = Vec::new();
    for e in rec.events.iter().filter(|e| e.f == F::Acquire) {
        let Some(w) = e.process.worker() else {
            continue;
        };
        match e.kind {
            EventType::Invoke => {
                invoked.insert(w, e.time_ns);
            }
            EventType::Ok => out.push(Acq {
                event: e,
                worker: w,
                key: e.key.clone().unwrap_or_default(),
                invoked_ns: invoked.get(&w).copied().unwrap_or(e.time_ns),
            }),
            _ => {}
        }
    }
    out
}

/// What the observation says, indexed.
struct Seen<'a> {
    /// (key, grant) → session.
    created: HashMap<(String, i64), i64>,
    /// Keys whose grants the harness observed.
    keys: HashSet<&'a str>,
    gaps: Vec<u64>,
    obs: &'a [Observation],
}

impl<'a> Seen<'a> {
    fn new(obs: &'a [Observation]) -> Seen<'a> {
        let mut s = Seen {
            created: HashMap::new(),
            keys: HashSet::new(),
            gaps: Vec::new(),
            obs,
        };
        for o in obs {
            match o {
                Observation::Created {
                    key,
                    grant,
                    session,
                    ..
                } => {
                    s.created.insert((key.clone(), *grant), *session);
                    s.keys.insert(key.as_str());
                }
                Observation::Gap { time_ns, .. } => s.gaps.push(*time_ns),
                _ => {}
            }
        }
        s
    }

    fn standing(&self, a: &Acq) -> Standing {
        if let Some(g) = a.event.grant {
            if self.created.contains_key(&(a.key.clone(), g)) {
                return Standing::Matched;
            }
        }
        let from = a.invoked_ns.saturating_sub(GAP_SLACK_NS);
        let to = a.event.time_ns.saturating_add(GAP_SLACK_NS);
        let gap = self.gaps.iter().any(|&t| t >= from && t <= to);
        if gap || !self.keys.contains(a.key.as_str()) {
            Standing::Unobserved
        } else {
            Standing::Phantom
        }
    }

    /// The grant of `key` the service held at `t` as observed (the last one
    /// created by then and not deleted by then): (grant, session).
    fn holder_at(&self, key: &str, t: u64) -> Option<(i64, i64)> {
        let mut held: Option<(i64, i64)> = None;
        for o in self.obs.iter().filter(|o| o.time_ns() <= t) {
            match o {
                Observation::Created {
                    key: k,
                    grant,
                    session,
                    ..
                } if k == key => held = Some((*grant, *session)),
                Observation::Deleted { key: k, grant, .. }
                    if k == key && held.is_some_and(|(g, _)| g == *grant) =>
                {
                    held = None
                }
                _ => {}
            }
        }
        held
    }
}

/// The phantom grants (worker, time told): not grants, so no other check
/// counts them as grants or files them under a session. (An acquisition of a
/// lock never observed is judged on the client's word, as before; the run
/// cannot pass anyway.) Empty when the service was not observed.
pub fn phantoms(rec: &Recorded) -> HashSet<(u32, u64)> {
    let Some(obs) = &rec.observations else {
        return HashSet::new();
    };
    let seen = Seen::new(obs);
    acquisitions(rec)
        .iter()
        .filter(|a| seen.standing(a) == Standing::Phantom)
        .map(|a| (a.worker, a.event.time_ns))
        .collect()
}

/// `None` when the run has no observation of the service.
pub fn check(rec: &Recorded) -> Option<ExclusionCheck> {
    let obs = rec.observations.as_deref()?;
    let seen = Seen::new(obs);
    let mut c = ExclusionCheck::default();
    let mut entries = BTreeSet::new();
    let mut not_grants = HashSet::new();
    for a in acquisitions(rec) {
        c.acquisitions += 1;
        match seen.standing(&a) {
            Standing::Matched => c.matched += 1,
            Standing::Unobserved => {
                c.unobserved += 1;
                entries.insert(a.entry());
                not_grants.insert((a.worker, a.event.time_ns));
            }
            Standing::Phantom => {
                c.phantom += 1;
                not_grants.insert((a.worker, a.event.time_ns));
                if c.phantoms.len() < MAX_EXAMPLES {
                    c.phantoms.push(PhantomGrant {
                        worker: a.worker,
                        key: a.key.clone(),
                        entry: a.client("entry"),
                        value: a.client("value"),
                        told_ns: a.event.time_ns,
                        held_by: seen.holder_at(&a.key, a.event.time_ns),
                    });
                }
            }
        }
    }
    c.unobserved_entries = entries.into_iter().collect();
    overlaps(rec, &seen, &not_grants, &mut c);
    c.valid = if c.violations() > 0 {
        Validity::Invalid
    } else if c.matched == 0 && c.acquisitions > 0 {
        Validity::Unknown
    } else {
        Validity::Valid
    };
    Some(c)
}

/// Overlapping holds of observed grants, each judged by whether a session loss
/// at the service explains it.
fn overlaps(rec: &Recorded, seen: &Seen, not_grants: &HashSet<(u32, u64)>, c: &mut ExclusionCheck) {
    let ends = super::sessions::session_ends(seen.obs);
    let holds: Vec<_> = super::mutex::holds(rec)
        .into_iter()
        .filter(|h| !not_grants.contains(&(h.worker, h.start_ns)))
        .collect();
    let session = |h: &fencecheck_reports::Hold| {
        h.revision
            .and_then(|g| seen.created.get(&(h.key.clone(), g)).copied())
            .filter(|&s| s != 0)
            .or(h.lease.filter(|&s| s != 0))
    };
    // Sorted by start (mutex::holds): each hold can only overlap later-starting
    // holds that begin before it ends.
    for (i, a) in holds.iter().enumerate() {
        for b in holds[i + 1..]
            .iter()
            .take_while(|b| b.start_ns < a.end_ns)
            .filter(|b| b.key == a.key && b.worker != a.worker)
        {
            let end = a.end_ns.min(b.end_ns);
            let (Some(sa), Some(sb)) = (session(a), session(b)) else {
                c.overlaps_unjudged += 1;
                continue;
            };
            let lost = |s: i64| {
                ends.get(&s)
                    .is_some_and(|&t| t <= end.saturating_add(END_SLACK_NS))
            };
            if lost(sa) || lost(sb) {
                continue;
            }
            c.unexplained_overlaps += 1;
            if c.overlaps.len() < MAX_EXAMPLES {
                c.overlaps.push(UnexplainedOverlap {
                    key: a.key.clone(),
                    a_worker: a.worker,
                    a_grant: a.revision,
                    a_session: sa,
                    b_worker: b.worker,
                    b_grant: b.revision,
                    b_session: sb,
                    start_ns: b.start_ns,
                    end_ns: end,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::Process;

    fn acq(t: u64, w: u32, kind: EventType, grant: Option<i64>, session: i64) -> Event {
        let mut e = Event::new(Process::Worker(w), kind, F::Acquire);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.grant = grant;
        e.session = Some(session);
        e
    }

    fn release(t: u64, w: u32) -> Event {
        let mut e = Event::new(Process::Worker(w), EventType::Invoke, F::Release);
        e.time_ns = t;
        e.key = Some("k0".into());
        e
    }

    fn created(t: u64, grant: i64, session: i64) -> Observation {
        Observation::Created {
            time_ns: t,
            key: "k0".into(),
            grant,
            session,
            id: "/locks/k0".into(),
            value: None,
        }
    }

    #[test]
    fn an_unmatched_acquisition_of_an_observed_lock_is_a_phantom_grant() {
        // Worker 0 holds grant 5 (observed); worker 1 is told it holds the
        // lock at 30 with no grant the service made: a phantom, overlapping.
        let events = vec![
            acq(10, 0, EventType::Invoke, None, 1),
            acq(20, 0, EventType::Ok, Some(5), 1),
            acq(25, 1, EventType::Invoke, None, 2),
            acq(30, 1, EventType::Ok, None, 2),
            release(40, 1),
            release(50, 0),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![created(15, 5, 1)]);
        let c = check(&rec).expect("observed");
        assert_eq!(
            (c.acquisitions, c.matched, c.phantom, c.unobserved),
            (2, 1, 1, 0)
        );
        assert_eq!(c.phantoms[0].worker, 1);
        assert_eq!(c.phantoms[0].held_by, Some((5, 1)));
        // The phantom's overlap is the phantom's, not a second violation.
        assert_eq!(c.unexplained_overlaps, 0);
        assert_eq!(c.valid, Validity::Invalid);
        assert_eq!(phantoms(&rec), HashSet::from([(1, 30)]));
    }

    #[test]
    fn a_lock_never_observed_is_a_coverage_gap_not_a_finding() {
        let events = vec![
            acq(10, 0, EventType::Invoke, None, 1),
            acq(20, 0, EventType::Ok, None, 1),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(Vec::new());
        let c = check(&rec).expect("observed");
        assert_eq!((c.phantom, c.unobserved), (0, 1));
        assert_eq!(c.unobserved_entries, vec!["k0".to_string()]);
        assert_eq!(c.valid, Validity::Unknown);
        // A gap in the feed around an acquisition hides it the same way.
        rec.observations = Some(vec![
            created(1, 3, 9),
            Observation::Gap {
                time_ns: 15,
                error: "member down".into(),
            },
        ]);
        let c = check(&rec).expect("observed");
        assert_eq!((c.phantom, c.unobserved), (0, 1));
    }

    #[test]
    fn an_overlap_with_both_sessions_alive_is_unexplained_and_a_lost_one_is_not() {
        let events = vec![
            acq(10, 0, EventType::Ok, Some(5), 1),
            acq(20, 1, EventType::Ok, Some(7), 2),
            release(30, 1),
            release(40, 0),
        ];
        let mut rec = Recorded::new(events, Vec::new());
        rec.observations = Some(vec![created(5, 5, 1), created(15, 7, 2)]);
        let c = check(&rec).expect("observed");
        assert_eq!((c.matched, c.unexplained_overlaps), (2, 1));
        assert_eq!((c.overlaps[0].a_worker, c.overlaps[0].b_worker), (0, 1));
        // Session 1 ended at the service: the lease lock's expected overlap.
        if let Some(o) = rec.observations.as_mut() {
            o.push(Observation::SessionEnded {
                time_ns: 12,
                session: 1,
                worker: Some(0),
            });
        }
        let c = check(&rec).expect("observed");
        assert_eq!(c.unexplained_overlaps, 0);
        assert_eq!(c.valid, Validity::Valid);
    }
}
