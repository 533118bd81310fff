//! Resolution of grants for services whose clients cannot know a grant's place in
//! the service's order (Redis, Redlock: there is none a client can read). Their
//! clients report the acquisition's own random nonce as `grant` (and in each
//! storage request's `revision`); the harness's observer numbered each grant as
//! it saw the service make it (`service.jsonl`, `Created`, whose `id` is the
//! owner value `<worker>:<pid>:<session>:<nonce>`). This rewrites every nonce
//! into that number before the checks run, so fencing, mutex, token and the
//! findings judge by the service's order exactly as for etcd and ZooKeeper. A
//! nonce the observer never saw is removed (the storage request is then
//! unjudged) and counted as a problem.

use std::collections::HashMap;

use super::Recorded;
use crate::lock::redis::Owner;
use crate::service::observe::Observation;

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
                if e.f == crate::history::F::Acquire {
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
    let mut problems = Vec::new();
    if unresolved_grants > 0 || unresolved_requests > 0 {
        problems.push(format!(
            "{unresolved_grants} acquisition(s) and {unresolved_requests} storage request(s) \
             name a grant the harness never observed the service make (see service.jsonl): \
             they are left unjudged"
        ));
    }
    problems
}
