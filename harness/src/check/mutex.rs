//! `mutex`: did two workers hold the same lock at the same time?
//!
//! Holds are client-observed: from the worker seeing `acquire ok` to it invoking
//! `release`. The server-side hold contains that interval, so every overlap found
//! here is a real overlap (it never over-reports).

use std::collections::HashMap;

use fencecheck_reports::{Hold, MutexCheck, Overlap, Validity};

use super::Recorded;
use crate::record::history::{EventType, F};

const MAX_EXAMPLES: usize = 50;

pub fn holds(rec: &Recorded) -> Vec<Hold> {
    let mut open: HashMap<u32, Hold> = HashMap::new();
    let mut last_seen: HashMap<u32, u64> = HashMap::new();
    let mut out = Vec::new();
    for e in &rec.events {
        let Some(w) = e.process.worker() else {
            continue;
        };
        last_seen.insert(w, e.time_ns);
        match (e.f, e.kind) {
            (F::Acquire, EventType::Ok) => {
                if let Some(h) = open.remove(&w) {
                    out.push(Hold {
                        end_ns: e.time_ns,
                        ..h
                    });
                }
                open.insert(
                    w,
                    Hold {
                        worker: w,
                        key: e.key.clone().unwrap_or_default(),
                        revision: e.grant,
                        lease: e.session,
                        start_ns: e.time_ns,
                        end_ns: e.time_ns,
                        released: false,
                    },
                );
            }
            (F::Release, EventType::Invoke) => {
                if let Some(h) = open.remove(&w) {
                    out.push(Hold {
                        end_ns: e.time_ns,
                        released: true,
                        ..h
                    });
                }
            }
            _ => {}
        }
    }
    // Never released: the hold lasts at least to the worker's last recorded event.
    for (w, h) in open {
        let end = last_seen.get(&w).copied().unwrap_or(h.start_ns);
        out.push(Hold { end_ns: end, ..h });
    }
    out.sort_by_key(|h| (h.start_ns, h.worker));
    out
}

pub fn check(rec: &Recorded) -> MutexCheck {
    let hs = holds(rec);
    let mut by_key: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in &hs {
        by_key.entry(h.key.as_str()).or_default().push(h);
    }
    let mut overlaps = 0u64;
    let mut examples = Vec::new();
    let mut keys: Vec<_> = by_key.keys().copied().collect();
    keys.sort();
    for key in keys {
        let list = &by_key[key];
        // Sorted by start: each hold can only overlap later-starting holds that begin
        // before it ends.
        for (i, a) in list.iter().enumerate() {
            for b in list[i + 1..].iter().take_while(|b| b.start_ns < a.end_ns) {
                if a.worker == b.worker {
                    continue;
                }
                overlaps += 1;
                if examples.len() < MAX_EXAMPLES {
                    let (s, e) = (b.start_ns, a.end_ns.min(b.end_ns));
                    examples.push(Overlap {
                        a: (*a).clone(),
                        b: (*b).clone(),
                        start_ns: s,
                        end_ns: e,
                        faults: rec.faults_between(a.start_ns, e),
                    });
                }
            }
        }
    }
    MutexCheck {
        valid: Validity::from_bool(overlaps == 0),
        holds: hs.len() as u64,
        overlaps,
        examples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Event, Process};

    fn ev(t: u64, w: u32, kind: EventType, f: F, rev: Option<i64>) -> Event {
        let mut e = Event::new(Process::Worker(w), kind, f);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.grant = rev;
        e
    }

    #[test]
    fn sequential_holds_do_not_overlap() {
        let evs = vec![
            ev(1, 0, EventType::Ok, F::Acquire, Some(5)),
            ev(2, 0, EventType::Invoke, F::Release, Some(5)),
            ev(3, 1, EventType::Ok, F::Acquire, Some(7)),
            ev(4, 1, EventType::Invoke, F::Release, Some(7)),
        ];
        let c = check(&Recorded::new(evs, Vec::new()));
        assert_eq!((c.holds, c.overlaps), (2, 0));
        assert_eq!(c.valid, Validity::Valid);
    }

    #[test]
    fn paused_holder_overlaps_next_holder() {
        let evs = vec![
            ev(1, 0, EventType::Ok, F::Acquire, Some(5)),
            ev(3, 1, EventType::Ok, F::Acquire, Some(7)),
            ev(4, 1, EventType::Invoke, F::Release, Some(7)),
            ev(9, 0, EventType::Invoke, F::Release, Some(5)),
        ];
        let c = check(&Recorded::new(evs, Vec::new()));
        assert_eq!(c.overlaps, 1);
        assert_eq!(c.valid, Validity::Invalid);
        let o = &c.examples[0];
        assert_eq!((o.a.worker, o.b.worker), (0, 1));
        assert_eq!((o.start_ns, o.end_ns), (3, 4));
    }

    #[test]
    fn unreleased_hold_extends_to_last_event() {
        let evs = vec![
            ev(1, 0, EventType::Ok, F::Acquire, Some(5)),
            ev(2, 1, EventType::Ok, F::Acquire, Some(7)),
            ev(3, 1, EventType::Invoke, F::Release, Some(7)),
            ev(8, 0, EventType::Invoke, F::Write, Some(5)),
        ];
        let hs = holds(&Recorded::new(evs.clone(), Vec::new()));
        let h0 = hs.iter().find(|h| h.worker == 0).expect("hold");
        assert_eq!((h0.end_ns, h0.released), (8, false));
        assert_eq!(check(&Recorded::new(evs, Vec::new())).overlaps, 1);
    }
}
