//! `token`: is what the clients sent as their fencing token a fencing token at all?
//! Judged against the service's own order of grants: along each lock's grants, in
//! that order, the token must grow with every grant, and no two grants may share
//! one. A lease ID, a session id or a random owner value shows up here, whatever
//! the storage then did with it.
//!
//! The order is the grant each acquisition reports (etcd CreateRevision, ZooKeeper
//! czxid); where the harness observed the service create the grant
//! (`service.jsonl`), that order is the service's own, not the client's word —
//! grants it never saw are counted as `unverified`.

use std::collections::{BTreeMap, HashSet};

use fencecheck_reports::{TokenCheck, TokenPair, Validity};

use super::Recorded;
use crate::record::history::{EventType, F};
use crate::record::observe::Observation;

const MAX_EXAMPLES: usize = 50;

struct Grant {
    worker: u32,
    grant: i64,
    token: Option<i64>,
}

pub fn check(rec: &Recorded) -> TokenCheck {
    let observed: Option<HashSet<(String, i64)>> = rec.observations.as_ref().map(|obs| {
        obs.iter()
            .filter_map(|o| match o {
                Observation::Created { key, grant, .. } => Some((key.clone(), *grant)),
                _ => None,
            })
            .collect()
    });
    // Lock → its grants in the service's order.
    let mut by_lock: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
    let mut c = TokenCheck::default();
    for e in &rec.events {
        if (e.f, e.kind) != (F::Acquire, EventType::Ok) {
            continue;
        }
        let (Some(worker), Some(grant), Some(key)) = (e.process.worker(), e.grant, &e.key) else {
            continue;
        };
        if let Some(seen) = &observed {
            if !seen.contains(&(key.clone(), grant)) {
                c.unverified += 1;
            }
        }
        by_lock.entry(key.clone()).or_default().push(Grant {
            worker,
            grant,
            token: e.token,
        });
    }
    let mut any_token = false;
    for (key, mut grants) in by_lock {
        grants.sort_by_key(|g| g.grant);
        // The same grant acquired again (etcd: a Lock under a lease whose key
        // survived a failed unlock returns that key) is one grant, not two.
        grants.dedup_by_key(|g| g.grant);
        let mut max: Option<&Grant> = None;
        let mut seen = HashSet::new();
        for g in &grants {
            c.grants += 1;
            let Some(t) = g.token else { continue };
            any_token = true;
            let repeat = !seen.insert(t);
            let regress = max.is_some_and(|m| m.token.is_some_and(|mt| t < mt));
            if repeat {
                c.repeats += 1;
            }
            if regress {
                c.regressions += 1;
            }
            if let (true, Some(m)) = (repeat || regress, max) {
                if c.examples.len() < MAX_EXAMPLES {
                    c.examples.push(TokenPair {
                        key: key.clone(),
                        earlier_worker: m.worker,
                        earlier_grant: m.grant,
                        earlier_token: m.token.unwrap_or_default(),
                        later_worker: g.worker,
                        later_grant: g.grant,
                        later_token: t,
                    });
                }
            }
            if max.is_none_or(|m| m.token.is_none_or(|mt| t >= mt)) {
                max = Some(g);
            }
        }
    }
    c.valid = if !any_token {
        Validity::Unknown
    } else {
        Validity::from_bool(c.regressions == 0 && c.repeats == 0)
    };
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Event, Process};

    fn ok(t: u64, w: u32, grant: i64, token: Option<i64>) -> Event {
        let mut e = Event::new(Process::Worker(w), EventType::Ok, F::Acquire);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.grant = Some(grant);
        e.token = token;
        e
    }

    #[test]
    fn the_grant_itself_is_a_token() {
        let rec = Recorded::new(
            vec![
                ok(1, 0, 5, Some(5)),
                ok(2, 1, 9, Some(9)),
                ok(3, 0, 12, Some(12)),
            ],
            Vec::new(),
        );
        let c = check(&rec);
        assert_eq!(c.valid, Validity::Valid);
        assert_eq!((c.grants, c.regressions, c.repeats), (3, 0, 0));
    }

    #[test]
    fn a_session_id_repeats_and_goes_backwards() {
        // Worker 0 keeps session 70 across holds; worker 1's session 40 is older.
        let rec = Recorded::new(
            vec![
                ok(1, 0, 5, Some(70)),
                ok(2, 1, 9, Some(40)),
                ok(3, 0, 12, Some(70)),
            ],
            Vec::new(),
        );
        let c = check(&rec);
        assert_eq!(c.valid, Validity::Invalid);
        assert_eq!(c.regressions, 1, "{c:?}");
        assert_eq!(c.repeats, 1, "{c:?}");
        assert_eq!(c.examples[0].later_grant, 9);
    }

    #[test]
    fn the_same_grant_acquired_twice_is_one_grant() {
        let rec = Recorded::new(
            vec![
                ok(1, 0, 5, Some(5)),
                ok(2, 0, 5, Some(5)),
                ok(3, 1, 9, Some(9)),
            ],
            Vec::new(),
        );
        let c = check(&rec);
        assert_eq!(c.valid, Validity::Valid, "{c:?}");
        assert_eq!(c.grants, 2);
    }

    #[test]
    fn no_token_is_unknown_and_unobserved_grants_are_unverified() {
        let mut rec = Recorded::new(vec![ok(1, 0, 5, None)], Vec::new());
        rec.observations = Some(Vec::new());
        let c = check(&rec);
        assert_eq!(c.valid, Validity::Unknown);
        assert_eq!(c.unverified, 1);
    }
}
