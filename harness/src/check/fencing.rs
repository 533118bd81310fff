//! `fencing`: was a write from an older lock grant accepted after a newer grant had
//! written?
//!
//! One pass over the storage log in its own order, per key, judged by the grant
//! revision each request carries — independent of the token the storage compared,
//! so a wrong token (lease ID) or a wrong comparison (equality) is caught too.
//! "Had written" is read broadly: the storage had seen any request (a read, or a
//! write whatever its verdict) from the newer grant. Once a newer holder has read,
//! an older holder's accepted write overwrites the value the newer one builds on —
//! a lost update — so it is as stale as a write after the newer holder's write.

use std::collections::HashMap;

use fencecheck_reports::{FencingCheck, StaleWrite, Validity, WriteRef};
use fencecheck_storage::{LogRecord, OpKind, Verdict};

use super::Recorded;
use crate::record::history::{EventType, F};

const MAX_EXAMPLES: usize = 50;

pub fn write_ref(r: &LogRecord) -> WriteRef {
    WriteRef {
        worker: r.request.client.clone(),
        key: r.request.key.clone(),
        seq: r.seq,
        time_ns: r.time_ns,
        value: r.request.val,
        token: r.request.token,
        revision: r.request.revision,
        lease: r.request.lease,
        verdict: match r.verdict {
            Verdict::Ok => "ok",
            Verdict::Accepted => "accepted",
            Verdict::RejectedStale => "rejected-stale",
        }
        .into(),
        request_id: r.request.request_id,
    }
}

pub fn check(rec: &Recorded) -> FencingCheck {
    let mut newest: HashMap<&str, &LogRecord> = HashMap::new();
    let mut c = FencingCheck::new();
    for r in &rec.storage {
        let is_write = r.request.op == OpKind::Write;
        let accepted = r.verdict == Verdict::Accepted;
        if is_write {
            c.writes += 1;
            if accepted {
                c.accepted += 1;
            } else {
                c.rejected += 1;
            }
        }
        let Some(rev) = r.request.revision else {
            if is_write {
                c.unjudged += 1;
            }
            continue;
        };
        let key = r.request.key.as_str();
        let newest_rev = newest.get(key).and_then(|n| n.request.revision);
        match newest.get(key) {
            Some(n) if newest_rev.is_some_and(|nr| rev < nr) => {
                // A stale read changes nothing; a stale write is judged.
                if !is_write {
                    continue;
                }
                if accepted {
                    c.stale_accepted += 1;
                    if c.violations.len() < MAX_EXAMPLES {
                        let acquired = acquired_at(rec, &r.request.client, rev);
                        let from = acquired.unwrap_or(r.time_ns);
                        c.violations.push(StaleWrite {
                            stale: write_ref(r),
                            newer: write_ref(n),
                            stale_acquired_ns: acquired,
                            faults: rec.faults_between(from, r.time_ns),
                        });
                    }
                } else {
                    c.stale_rejected += 1;
                }
            }
            _ => {
                if is_write && !accepted {
                    c.fresh_rejected += 1;
                    if c.fresh_rejected_examples.len() < MAX_EXAMPLES {
                        c.fresh_rejected_examples.push(write_ref(r));
                    }
                }
                // A read from the grant already newest proves nothing new; keep the
                // earlier proof.
                if is_write || newest_rev != Some(rev) {
                    newest.insert(key, r);
                }
            }
        }
    }
    c.valid = Validity::from_bool(c.stale_accepted == 0);
    c
}

/// When the worker observed acquiring the grant with this revision.
pub(super) fn acquired_at(rec: &Recorded, client: &str, revision: i64) -> Option<u64> {
    rec.events
        .iter()
        .find(|e| {
            e.f == F::Acquire
                && e.kind == EventType::Ok
                && e.grant == Some(revision)
                && e.process.worker().map(|w| w.to_string()).as_deref() == Some(client)
        })
        .map(|e| e.time_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencecheck_storage::Request;

    fn w(seq: u64, client: &str, rev: i64, verdict: Verdict) -> LogRecord {
        LogRecord {
            seq,
            time_ns: seq * 10,
            request: Request {
                op: OpKind::Write,
                key: "k0".into(),
                val: Some(seq as i64),
                token: Some(rev),
                revision: Some(rev),
                lease: None,
                client: client.into(),
                request_id: seq,
            },
            verdict,
            token_before: None,
            token_after: None,
            value_before: None,
            value_after: None,
        }
    }

    fn check_log(log: Vec<LogRecord>) -> FencingCheck {
        check(&Recorded::new(Vec::new(), log))
    }

    #[test]
    fn stale_accepted_after_newer_write_is_a_violation() {
        let c = check_log(vec![
            w(1, "1", 10, Verdict::Accepted),
            w(2, "2", 12, Verdict::Accepted),
            w(3, "1", 10, Verdict::Accepted),
        ]);
        assert_eq!(c.valid, Validity::Invalid);
        assert_eq!(c.stale_accepted, 1);
        assert_eq!(c.violations[0].stale.seq, 3);
        assert_eq!(c.violations[0].newer.revision, Some(12));
    }

    #[test]
    fn stale_rejected_counts_and_stays_valid() {
        let c = check_log(vec![
            w(1, "1", 10, Verdict::Accepted),
            w(2, "2", 12, Verdict::Accepted),
            w(3, "1", 10, Verdict::RejectedStale),
        ]);
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!((c.stale_rejected, c.stale_accepted), (1, 0));
    }

    #[test]
    fn newer_grant_rejected_then_older_accepted_is_caught() {
        // contrib/lock: equality rejects the new holder, then the old one writes.
        let c = check_log(vec![
            w(1, "1", 10, Verdict::Accepted),
            w(2, "2", 12, Verdict::RejectedStale),
            w(3, "1", 10, Verdict::Accepted),
        ]);
        assert_eq!(c.fresh_rejected, 1);
        assert_eq!(c.stale_accepted, 1);
        assert_eq!(c.valid, Validity::Invalid);
    }

    #[test]
    fn stale_write_after_a_newer_read_is_a_violation() {
        let mut read = w(2, "2", 12, Verdict::Ok);
        read.request.op = OpKind::Read;
        read.request.val = None;
        let c = check_log(vec![
            w(1, "1", 10, Verdict::Accepted),
            read,
            w(3, "1", 10, Verdict::Accepted),
        ]);
        assert_eq!(c.stale_accepted, 1);
        assert_eq!(c.violations[0].newer.verdict, "ok");
        assert_eq!(c.writes, 2, "reads are not writes");
    }

    #[test]
    fn keys_are_independent() {
        let mut a = w(1, "1", 12, Verdict::Accepted);
        a.request.key = "k1".into();
        let c = check_log(vec![a, w(2, "2", 10, Verdict::Accepted)]);
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!(c.writes, 2);
    }
}
