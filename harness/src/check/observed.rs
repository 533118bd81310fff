//! Checks judged from the client-observed history alone, for a storage that keeps
//! no log fencecheck can read (`[storage] kind = "http"`, the user's own service).
//!
//! - **fencing**, by real-time order: a write acknowledged as accepted whose call
//!   *began after* an operation of a newer grant on the same key had *returned*
//!   (a read served, a write accepted or refused as stale) is a violation. Whatever
//!   the storage's internal order, the newer operation took effect before the stale
//!   write was sent. A write concurrent with every newer operation cannot be judged.
//! - **counter**, by final reads: every acknowledged increment must be in the final
//!   value; fewer is a lower bound on what was lost.
//!
//! [`WEAKER`] says, for the report, what this gives up against a storage log.

use std::collections::BTreeMap;

use fencecheck_reports::{CounterCheck, FencingCheck, KeyCount, StaleWrite, Validity, WriteRef};

use super::Recorded;
use crate::record::history::{Event, EventType, F};

const MAX_EXAMPLES: usize = 50;

/// What the judgements from the client history give up, in the report's words.
pub const WEAKER: &[&str] = &[
    "fencing: judged by real-time order from the client history (no storage log): a \
     stale write concurrent with the newer grant's first operation is not judged, so \
     violations are a lower bound; the log would give the storage's own order",
    "counter: judged by final reads against acknowledged writes (no storage log): a \
     write whose answer was lost (unknown) but applied can hide a lost increment, so \
     lost is a lower bound",
    "unsafe windows: the writes a stale holder made are counted from a storage log; \
     without one, none are counted",
];

/// A storage operation as the client saw it: invoke to completion.
struct Op<'a> {
    inv: &'a Event,
    done: Option<&'a Event>,
}

impl Op<'_> {
    fn grant(&self) -> Option<i64> {
        self.inv.grant
    }
    fn key(&self) -> &str {
        self.inv.key.as_deref().unwrap_or_default()
    }
    fn kind(&self) -> EventType {
        self.done.map(|d| d.kind).unwrap_or(EventType::Info)
    }
    fn done_ns(&self) -> u64 {
        self.done.map(|d| d.time_ns).unwrap_or(u64::MAX)
    }
    /// Surely reached the storage: a served read, an accepted or refused write.
    fn reached(&self) -> bool {
        matches!(self.kind(), EventType::Ok | EventType::Fail)
    }
    fn write_ref(&self) -> WriteRef {
        let verdict = match (self.inv.f, self.kind()) {
            (F::Read, EventType::Ok) => "ok",
            (F::Write, EventType::Ok) => "accepted",
            (F::Write, EventType::Fail) => "rejected-stale",
            _ => "unknown",
        };
        WriteRef {
            worker: self
                .inv
                .process
                .worker()
                .map(|w| w.to_string())
                .unwrap_or_default(),
            key: self.key().to_string(),
            seq: 0,
            time_ns: self.done.map(|d| d.time_ns).unwrap_or(self.inv.time_ns),
            value: self.inv.value.or(self.done.and_then(|d| d.value)),
            token: self.inv.token,
            revision: self.inv.grant,
            lease: self.inv.session,
            verdict: verdict.into(),
            request_id: self.inv.request_id.unwrap_or_default(),
        }
    }
}

/// Every worker's reads and writes, paired by worker and request id.
fn ops(rec: &Recorded) -> Vec<Op<'_>> {
    let mut open: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    let mut out: Vec<Op> = Vec::new();
    for e in &rec.events {
        let (Some(w), Some(id)) = (e.process.worker(), e.request_id) else {
            continue;
        };
        if !matches!(e.f, F::Read | F::Write) {
            continue;
        }
        if e.kind == EventType::Invoke {
            open.insert((w, id), out.len());
            out.push(Op { inv: e, done: None });
        } else if let Some(i) = open.remove(&(w, id)) {
            out[i].done = Some(e);
        }
    }
    out
}

pub fn fencing(rec: &Recorded) -> FencingCheck {
    let ops = ops(rec);
    let mut c = FencingCheck::new();
    for w in ops.iter().filter(|o| o.inv.f == F::Write) {
        let (Some(g), kind) = (w.grant(), w.kind()) else {
            c.unjudged += 1;
            continue;
        };
        if kind == EventType::Info {
            // It may or may not have been applied: nothing to judge.
            c.unjudged += 1;
            continue;
        }
        c.writes += 1;
        let accepted = kind == EventType::Ok;
        if accepted {
            c.accepted += 1;
        } else {
            c.rejected += 1;
        }
        let newer = |o: &&Op| o.key() == w.key() && o.grant().is_some_and(|og| og > g);
        // The newest grant whose operation returned before this write was sent.
        let before = ops
            .iter()
            .filter(newer)
            .filter(|o| o.reached() && o.done_ns() < w.inv.time_ns)
            .max_by_key(|o| (o.grant(), o.done_ns()));
        match (before, accepted) {
            (Some(n), true) => {
                c.stale_accepted += 1;
                if c.violations.len() < MAX_EXAMPLES {
                    let acquired = super::fencing::acquired_at(rec, &w.write_ref().worker, g);
                    let from = acquired.unwrap_or(w.inv.time_ns);
                    c.violations.push(StaleWrite {
                        stale: w.write_ref(),
                        newer: n.write_ref(),
                        stale_acquired_ns: acquired,
                        faults: rec.faults_between(from, w.done_ns()),
                    });
                }
            }
            (Some(_), false) => c.stale_rejected += 1,
            (None, true) => {}
            (None, false) => {
                // Refused with no newer operation surely before it: stale if a newer
                // one (even unknown) overlapped it and may have come first, else the
                // storage refused the newest grant.
                let overlapped = ops
                    .iter()
                    .filter(newer)
                    .any(|o| o.inv.time_ns < w.done_ns());
                if overlapped {
                    c.stale_rejected += 1;
                } else {
                    c.fresh_rejected += 1;
                    if c.fresh_rejected_examples.len() < MAX_EXAMPLES {
                        c.fresh_rejected_examples.push(w.write_ref());
                    }
                }
            }
        }
    }
    c.valid = Validity::from_bool(c.stale_accepted == 0);
    c
}

pub fn counter(rec: &Recorded) -> CounterCheck {
    let mut keys: BTreeMap<String, (KeyCount, u64, bool)> = BTreeMap::new();
    for e in &rec.events {
        let Some(k) = &e.key else { continue };
        let entry = keys.entry(k.clone()).or_insert_with(|| {
            (
                KeyCount {
                    key: k.clone(),
                    acknowledged: 0,
                    applied: 0,
                    final_value: 0,
                    lost: 0,
                    lost_fraction: None,
                },
                0,
                false,
            )
        });
        match (e.f, e.kind) {
            (F::Write, EventType::Ok) if e.process.worker().is_some() => entry.0.acknowledged += 1,
            (F::Write, EventType::Info) if e.process.worker().is_some() => entry.1 += 1,
            (F::FinalRead, EventType::Ok) => {
                entry.0.final_value = e.value.unwrap_or(0);
                entry.2 = true;
            }
            _ => {}
        }
    }
    let (mut lost, mut acknowledged, mut consistent) = (0, 0, true);
    let mut out = Vec::new();
    for (_, (mut kc, unknown, read)) in keys {
        if kc.acknowledged == 0 && unknown == 0 && !read {
            continue;
        }
        // Without a log, "applied" is what the clients were told was accepted.
        kc.applied = kc.acknowledged;
        kc.lost = kc.acknowledged.saturating_sub(kc.final_value.max(0) as u64);
        // A final value above every increment anyone may have made, or no final
        // read at all, means the record cannot be judged as consistent.
        if !read || kc.final_value as u64 > kc.acknowledged + unknown {
            consistent = false;
        }
        lost += kc.lost;
        acknowledged += kc.acknowledged;
        out.push(kc);
    }
    CounterCheck {
        valid: Validity::from_bool(lost == 0 && consistent),
        acknowledged,
        lost,
        lost_fraction: super::counter::lost_fractions(&mut out),
        keys: out,
        lower_bound: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::Process;

    /// Worker `w`'s `f` with grant `g`, invoked at `t0`, completed `kind` at `t1`.
    fn op(w: u32, f: F, g: i64, id: u64, t0: u64, t1: u64, kind: EventType) -> Vec<Event> {
        let mut inv = Event::new(Process::Worker(w), EventType::Invoke, f);
        inv.key = Some("k0".into());
        inv.grant = Some(g);
        inv.request_id = Some(id);
        inv.time_ns = t0;
        let mut done = inv.clone();
        done.kind = kind;
        done.time_ns = t1;
        vec![inv, done]
    }

    fn rec(ops: Vec<Vec<Event>>) -> Recorded {
        let mut evs: Vec<Event> = ops.into_iter().flatten().collect();
        evs.sort_by_key(|e| e.time_ns);
        Recorded::new(evs, Vec::new())
    }

    #[test]
    fn a_write_sent_after_a_newer_grant_returned_is_judged_by_real_time() {
        let r = rec(vec![
            op(1, F::Write, 10, 1, 0, 10, EventType::Ok),
            op(2, F::Read, 12, 1, 20, 30, EventType::Ok),
            // Sent after the newer read returned, accepted: a violation.
            op(1, F::Write, 10, 2, 40, 50, EventType::Ok),
            // Sent after it too, refused: fencing at work.
            op(1, F::Write, 10, 3, 60, 70, EventType::Fail),
        ]);
        let c = fencing(&r);
        assert_eq!(
            (c.stale_accepted, c.stale_rejected, c.fresh_rejected),
            (1, 1, 0)
        );
        assert_eq!(c.violations[0].newer.revision, Some(12));
        assert_eq!(c.valid, Validity::Invalid);
    }

    #[test]
    fn concurrent_with_the_newer_grant_is_not_a_violation() {
        let r = rec(vec![
            op(2, F::Read, 12, 1, 20, 40, EventType::Ok),
            op(1, F::Write, 10, 1, 30, 50, EventType::Ok),
            op(3, F::Write, 14, 1, 60, 70, EventType::Fail),
        ]);
        let c = fencing(&r);
        assert_eq!(c.stale_accepted, 0);
        assert_eq!(c.fresh_rejected, 1, "the newest grant refused");
    }

    #[test]
    fn counter_counts_acknowledged_increments_missing_from_the_final_read() {
        let mut evs = vec![
            op(1, F::Write, 10, 1, 0, 10, EventType::Ok),
            op(2, F::Write, 12, 1, 20, 30, EventType::Ok),
            op(1, F::Write, 10, 2, 40, 50, EventType::Ok),
        ];
        let mut fin = Event::new(Process::Named("final".into()), EventType::Ok, F::FinalRead);
        fin.key = Some("k0".into());
        fin.value = Some(2);
        fin.time_ns = 100;
        evs.push(vec![fin]);
        let c = counter(&rec(evs));
        assert_eq!((c.acknowledged, c.lost), (3, 1));
        assert_eq!(c.valid, Validity::Invalid);
    }
}
