//! Resolution of grants whose place in the service's order the worker cannot
//! know: external clients (`[client]`, any service), whose answers are not
//! trusted, and Redis and Redlock (there is no order a client can read).
//!
//! An external client's `acquire` `ok` event carries, in `detail.client`, the
//! worker's own `handle` for the grant (what its storage requests carry as
//! `revision`) and what the client said the grant is: `entry` (etcd key,
//! ZooKeeper path, Redis key), `value`, `revision`. That is matched to a creation
//! the harness observed — same entry, same value when both are known, the last
//! one seen before the worker let go — and the client's `revision`, when given,
//! is checked against it, never used.
//!
//! Redis and Redlock's own clients
//! clients report the acquisition's own random nonce as `grant` (and in each
//! storage request's `revision`); the harness's observer numbered each grant as
//! it saw the service make it (`service.jsonl`, `Created`, whose `id` is the
//! owner value `<worker>:<pid>:<session>:<nonce>`). This rewrites every nonce
//! into that number before the checks run, so fencing, mutex, token and the
//! findings judge by the service's order exactly as for etcd and ZooKeeper. A
//! nonce the observer never saw is removed (the storage request is then
//! unjudged) and counted as a problem.

use std::collections::HashMap;

use crate::record::history::{Event, EventType, F};

use super::Recorded;
use crate::record::observe::{Observation, OwnerValue as Owner};

/// Rewrites grants and revisions; returns the problem lines.
pub fn resolve(rec: &mut Recorded) -> Vec<String> {
    let Some(obs) = &rec.observations else {
        return vec![
            "no service observations (service.jsonl): the grants of this run \
                     cannot be put in the service's order, so nothing was judged by it"
                .into(),
        ];
    };
    // (lock name, nonce) → the harness's grant number.
    let mut map: HashMap<(String, i64), i64> = HashMap::new();
    for o in obs {
        if let Observation::Created { key, grant, id, .. } = o {
            if let Some(owner) = Owner::parse(id) {
                map.insert((key.clone(), owner.nonce), *grant);
            }
        }
    }
    let mut problems = Vec::new();
    let (external, disagree) = match_external(&rec.events, obs);
    map.extend(external);
    if disagree > 0 {
        problems.push(format!(
            "{disagree} acquisition(s): the client's `revision` is not the creation the harness              observed for its entry; judged by the observed one"
        ));
    }
    let mut unresolved_grants = 0u64;
    for e in &mut rec.events {
        let (Some(key), Some(nonce)) = (e.key.as_ref(), e.grant) else {
            continue;
        };
        // Nemesis and final reads carry no grant; a release after an unknown
        // acquisition carries none either.
        match map.get(&(key.clone(), nonce)) {
            Some(&g) => e.grant = Some(g),
            None => {
                if e.f == crate::record::history::F::Acquire {
                    unresolved_grants += 1;
                }
                e.grant = None;
            }
        }
    }
    let mut unresolved_requests = 0u64;
    for r in &mut rec.storage {
        let Some(nonce) = r.request.revision else {
            continue;
        };
        match map.get(&(r.request.key.clone(), nonce)) {
            Some(&g) => r.request.revision = Some(g),
            None => {
                unresolved_requests += 1;
                r.request.revision = None;
            }
        }
    }
    if unresolved_grants > 0 || unresolved_requests > 0 {
        problems.push(format!(
            "{unresolved_grants} acquisition(s) and {unresolved_requests} storage request(s) \
             name a grant the harness never observed the service make (see service.jsonl): \
             they are left unjudged"
        ));
    }
    problems
}

/// External clients' grants: (lock, handle) → the observed creation's grant, and
/// how many given `revision`s disagreed with it.
fn match_external(events: &[Event], obs: &[Observation]) -> (HashMap<(String, i64), i64>, u64) {
    let mut out = HashMap::new();
    let mut claims = Vec::new();
    let mut disagree = 0;
    for (i, e) in events.iter().enumerate() {
        if (e.f, e.kind) != (F::Acquire, EventType::Ok) {
            continue;
        }
        let Some(c) = e.detail.as_ref().and_then(|d| d.get("client")) else {
            continue;
        };
        let (Some(key), Some(handle), Some(entry)) = (
            e.key.as_ref(),
            c.get("handle").and_then(serde_json::Value::as_i64),
            c.get("entry").and_then(serde_json::Value::as_str),
        ) else {
            continue;
        };
        let value = c.get("value").and_then(serde_json::Value::as_str);
        let revision = c.get("revision").and_then(serde_json::Value::as_i64);
        // The entry exists from before the grant until the worker lets go, so
        // its creation was seen before that (a later one of the same entry is a
        // later grant).
        let until = events[i + 1..]
            .iter()
            .find(|r| r.process == e.process && r.f == F::Release && r.key == e.key)
            .map_or(u64::MAX, |r| r.time_ns);
        let candidates: Vec<i64> = obs
            .iter()
            .filter_map(|o| match o {
                Observation::Created {
                    time_ns,
                    key: k,
                    grant,
                    id,
                    value: v,
                    ..
                } if k == key
                    && (id == entry || value.is_some_and(|val| val == id))
                    && (value.is_none() || v.is_none() || same_value(value, v.as_deref()))
                    && *time_ns <= until =>
                {
                    Some(*grant)
                }
                _ => None,
            })
            .collect();
        // Without a value to tell them apart (the same etcd key is created again
        // by every grant), a `revision` naming one of the entry's observed
        // creations picks it — the harness saw that creation, the client cannot
        // make one up — else the last one seen before the worker let go.
        let found = revision
            .filter(|r| candidates.contains(r))
            .or(candidates.last().copied());
        if let Some(g) = found {
            if revision.is_some_and(|r| r != g) {
                disagree += 1;
            }
            claims.push(Claim {
                key: key.clone(),
                handle,
                grant: g,
                worker: e.process.worker(),
                session: e.session,
                time_ns: e.time_ns,
            });
        }
    }
    for c in one_holder_each(claims, obs) {
        out.insert((c.key, c.handle), c.grant);
    }
    (out, disagree)
}

/// An acquisition matched to an observed creation.
struct Claim {
    key: String,
    handle: i64,
    grant: i64,
    worker: Option<u32>,
    session: Option<i64>,
    time_ns: u64,
}

/// The service made each creation for one client: when acquisitions of several
/// workers matched the same one (a client that named no `value`, told it holds
/// a lock it was never granted, matches the entry's last creation), it stays
/// with the worker whose session the creation was made under, else with the
/// first told; the others match nothing (never filed under another worker's
/// session).
fn one_holder_each(claims: Vec<Claim>, obs: &[Observation]) -> Vec<Claim> {
    let created: HashMap<(&str, i64), i64> = obs
        .iter()
        .filter_map(|o| match o {
            Observation::Created {
                key,
                grant,
                session,
                ..
            } => Some(((key.as_str(), *grant), *session)),
            _ => None,
        })
        .collect();
    let mut by_grant: HashMap<(String, i64), Vec<Claim>> = HashMap::new();
    for c in claims {
        by_grant
            .entry((c.key.clone(), c.grant))
            .or_default()
            .push(c);
    }
    let mut out = Vec::new();
    for ((key, grant), mut cs) in by_grant {
        let workers: std::collections::HashSet<Option<u32>> = cs.iter().map(|c| c.worker).collect();
        if workers.len() < 2 {
            out.extend(cs);
            continue;
        }
        let session = created.get(&(key.as_str(), grant)).copied();
        cs.sort_by_key(|c| c.time_ns);
        let owner = cs
            .iter()
            .position(|c| session.is_some_and(|s| s != 0 && c.session == Some(s)))
            .unwrap_or(0);
        let keep = cs.swap_remove(owner);
        let worker = keep.worker;
        out.push(keep);
        // The same worker's other claims on it (a retry) stay too.
        out.extend(cs.into_iter().filter(|c| c.worker == worker));
    }
    out
}

/// Whether a client's `value` is the observed one. The observer writes a value as
/// text when its bytes happen to be UTF-8 and as lowercase hex otherwise, and a
/// client sends raw bytes (python-etcd3's uuid) as hex: a uuid that happens to be
/// valid UTF-8 must still match, so the hex of the observed text counts too.
fn same_value(client: Option<&str>, observed: Option<&str>) -> bool {
    let (Some(c), Some(o)) = (client, observed) else {
        return false;
    };
    c == o || hex(o.as_bytes()).eq_ignore_ascii_case(c)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::Process;

    /// Worker `w` told at `t` it holds `/locks/k0` (no value), under lease `s`.
    fn told(t: u64, w: u32, handle: i64, s: i64) -> Event {
        let mut e = Event::new(Process::Worker(w), EventType::Ok, F::Acquire);
        e.time_ns = t;
        e.key = Some("k0".into());
        e.grant = Some(handle);
        e.session = Some(s);
        e.detail = Some(serde_json::json!({"client": {"handle": handle, "entry": "/locks/k0"}}));
        e
    }

    #[test]
    fn a_creation_is_never_filed_under_another_workers_acquisition() {
        // Worker 0 holds the grant the service made under its lease 7; worker 1,
        // told it holds the lock too (lease 9, no value), would match the same
        // last creation: it stays worker 0's, and worker 1's matches nothing.
        let events = vec![told(20, 0, 100, 7), told(30, 1, 200, 9)];
        let obs = vec![Observation::Created {
            time_ns: 15,
            key: "k0".into(),
            grant: 5,
            session: 7,
            id: "/locks/k0".into(),
            value: None,
        }];
        let (map, _) = match_external(&events, &obs);
        assert_eq!(map.get(&("k0".to_string(), 100)), Some(&5));
        assert_eq!(map.get(&("k0".to_string(), 200)), None);
        // Told in the other order, the lease still decides.
        let events = vec![told(20, 1, 200, 9), told(30, 0, 100, 7)];
        let (map, _) = match_external(&events, &obs);
        assert_eq!(map.get(&("k0".to_string(), 100)), Some(&5));
        assert_eq!(map.get(&("k0".to_string(), 200)), None);
    }

    #[test]
    fn a_value_matches_as_text_or_as_the_hex_of_its_bytes() {
        assert!(same_value(Some("abc"), Some("abc")));
        // A uuid whose 16 bytes happen to be UTF-8 is observed as text; the
        // client sends the hex of the same bytes.
        assert!(same_value(Some("616263"), Some("abc")));
        assert!(same_value(Some("61626A"), Some("abj")));
        assert!(!same_value(Some("616264"), Some("abc")));
        assert!(!same_value(None, Some("abc")));
    }
}
