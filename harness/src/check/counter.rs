//! `counter`: were acknowledged increments lost?
//!
//! Every accepted write is one read-modify-write increment, so a key's final value
//! must equal the number of increments the storage accepted. Fewer means some were
//! overwritten by a write computed from a stale read, or, when the workers were
//! told of more increments than the log holds, lost by the storage itself.

use std::collections::BTreeMap;

use fencecheck_reports::{CounterCheck, KeyCount, Validity};
use fencecheck_storage::{OpKind, Verdict};

use super::Recorded;
use crate::record::history::{EventType, F};

fn slot<'a>(keys: &'a mut BTreeMap<String, KeyCount>, key: &str) -> &'a mut KeyCount {
    keys.entry(key.to_string()).or_insert_with(|| KeyCount {
        key: key.to_string(),
        acknowledged: 0,
        applied: 0,
        final_value: 0,
        lost: 0,
        lost_fraction: None,
    })
}

/// Fills in each key's share of acknowledged increments its final value does not
/// hold, and returns the same share over all keys — the figure Jepsen reports for
/// its lock-set test ("~18% of acknowledged updates lost", etcd 3.4.3). It compares
/// acknowledged increments with the final value only, so it is a lower bound: an
/// increment whose answer was lost (`info`) may have landed in place of an
/// acknowledged one. `None` when nothing was acknowledged.
pub fn lost_fractions(keys: &mut [KeyCount]) -> Option<f64> {
    let (mut missing, mut acknowledged) = (0u64, 0u64);
    for c in keys.iter_mut() {
        let m = c.acknowledged.saturating_sub(c.final_value.max(0) as u64);
        c.lost_fraction = (c.acknowledged > 0).then(|| m as f64 / c.acknowledged as f64);
        missing += m;
        acknowledged += c.acknowledged;
    }
    (acknowledged > 0).then(|| missing as f64 / acknowledged as f64)
}

pub fn check(rec: &Recorded) -> CounterCheck {
    let mut keys: BTreeMap<String, KeyCount> = BTreeMap::new();
    for e in &rec.events {
        if let (F::Write, EventType::Ok, Some(k)) = (e.f, e.kind, &e.key) {
            slot(&mut keys, k).acknowledged += 1;
        }
    }
    // The storage log's order is the order writes took effect: its last record per
    // key holds the final value.
    for r in &rec.storage {
        let c = slot(&mut keys, &r.request.key);
        if r.request.op == OpKind::Write && r.verdict == Verdict::Accepted {
            c.applied += 1;
        }
        c.final_value = r.value_after.unwrap_or(0);
    }
    // The heal phase's final read, by a fresh client, is the value that counts; it
    // must agree with the storage's own log.
    let mut disagree = false;
    for e in &rec.events {
        if let (F::FinalRead, EventType::Ok, Some(k)) = (e.f, e.kind, &e.key) {
            let c = slot(&mut keys, k);
            let v = e.value.unwrap_or(0);
            disagree |= v != c.final_value;
            c.final_value = v;
        }
    }
    let mut lost = 0;
    let mut acknowledged = 0;
    let mut consistent = !disagree;
    for c in keys.values_mut() {
        // Increments the storage's log shows applied, or the workers were told
        // were, whichever is more: a database that loses acknowledged commits in a
        // crash (PostgreSQL, synchronous_commit = off) loses their log rows too.
        c.lost = c
            .applied
            .max(c.acknowledged)
            .saturating_sub(c.final_value.max(0) as u64);
        lost += c.lost;
        acknowledged += c.acknowledged;
        // More value than accepted increments, or acknowledged writes the storage
        // never accepted, would mean the record itself is inconsistent.
        if c.final_value as u64 > c.applied || c.acknowledged > c.applied {
            consistent = false;
        }
    }
    let mut keys: Vec<KeyCount> = keys.into_values().collect();
    CounterCheck {
        valid: Validity::from_bool(lost == 0 && consistent),
        acknowledged,
        lost,
        lost_fraction: lost_fractions(&mut keys),
        keys,
        lower_bound: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Event, Process};
    use fencecheck_storage::{LogRecord, Request};

    fn rec(seq: u64, val: i64, verdict: Verdict, after: i64) -> LogRecord {
        LogRecord {
            seq,
            time_ns: seq,
            request: Request {
                op: OpKind::Write,
                key: "k0".into(),
                val: Some(val),
                token: None,
                revision: Some(1),
                lease: None,
                client: "0".into(),
                request_id: seq,
            },
            verdict,
            token_before: None,
            token_after: None,
            value_before: None,
            value_after: Some(after),
        }
    }

    fn ok_write() -> Event {
        let mut e = Event::new(Process::Worker(0), EventType::Ok, F::Write);
        e.key = Some("k0".into());
        e
    }

    #[test]
    fn all_increments_present() {
        let log = vec![
            rec(1, 1, Verdict::Accepted, 1),
            rec(2, 2, Verdict::Accepted, 2),
            rec(3, 2, Verdict::RejectedStale, 2),
        ];
        let c = check(&Recorded::new(vec![ok_write(), ok_write()], log));
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!((c.acknowledged, c.lost), (2, 0));
        assert_eq!(c.keys[0].final_value, 2);
        assert_eq!(c.lost_fraction, Some(0.0));
    }

    #[test]
    fn stale_overwrite_loses_increments() {
        // Two writers read 1; both write 2.
        let log = vec![
            rec(1, 1, Verdict::Accepted, 1),
            rec(2, 2, Verdict::Accepted, 2),
            rec(3, 2, Verdict::Accepted, 2),
        ];
        let c = check(&Recorded::new(
            vec![ok_write(), ok_write(), ok_write()],
            log,
        ));
        assert_eq!(c.lost, 1);
        assert_eq!(c.valid, Validity::Invalid);
        // Three acknowledged, the final value holds two: a third of them is gone.
        let third = 1.0 / 3.0;
        assert!((c.lost_fraction.unwrap() - third).abs() < 1e-9);
        assert!((c.keys[0].lost_fraction.unwrap() - third).abs() < 1e-9);
    }

    #[test]
    fn no_acknowledged_increment_has_no_fraction() {
        let c = check(&Recorded::new(vec![], vec![]));
        assert_eq!(c.lost_fraction, None);
    }
}
