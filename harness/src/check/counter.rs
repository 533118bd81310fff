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
use crate::history::{EventType, F};

fn slot<'a>(keys: &'a mut BTreeMap<String, KeyCount>, key: &str) -> &'a mut KeyCount {
    keys.entry(key.to_string()).or_insert_with(|| KeyCount {
        key: key.to_string(),
        acknowledged: 0,
        applied: 0,
        final_value: 0,
        lost: 0,
    })
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
    CounterCheck {
        valid: Validity::from_bool(lost == 0 && consistent),
        acknowledged,
        lost,
        keys: keys.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Event, Process};
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
    }
}
