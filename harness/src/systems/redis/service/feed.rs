//! The observer: on every instance, a Pub/Sub subscription to the scripts' own
//! announcements ([`EVENTS`]: granted, released, deleted — published inside the
//! script that made the change, so in the instance's order of changes) and to
//! Redis's expired-key events (`__keyevent@0__:expired`, on with
//! `notify-keyspace-events Ex`). From them the observer keeps each instance's lock
//! keys and their owners, and numbers the grants itself: a grant is **held** once
//! the same owner has the key on a majority of instances (one instance on
//! `redis`), and gets the next number at that moment — the harness's own order,
//! which `check::resolve` hands to the checks. A hold ends when its owner drops
//! below the majority: by a release (`Deleted`), or by an expiry, a deletion by
//! the harness or a restart that lost the key (`Deleted` and `SessionEnded`).
//!
//! Limits: an expiry is announced when Redis deletes the key (on access, or by its
//! active expire cycle, 10 times a second), so shortly after the TTL; a key lost
//! with a restarted instance is noticed when the observer reconnects (a `Gap`
//! covers the time between), and stamped then.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::StreamExt;
use tokio::sync::watch;

use super::read_locks;
use crate::record::history::monotonic_ns;
use crate::record::observe::{Observation, ObservationWriter};
use crate::systems::redis::client::{self as proto, Owner, EVENTS, LOCK_PREFIX};

const EXPIRED: &str = "__keyevent@0__:expired";
/// How long one attempt to subscribe and read the keys may take (a few ms when the
/// instance serves). Short, because an attempt made while a container is being
/// started again sits in the engine's port proxy until its SYN is retransmitted
/// (1 s), and workers whose attempts came earlier get their grants in before it:
/// abandoned and made again, it gets through as soon as the instance serves.
const SETUP: Duration = Duration::from_millis(250);
/// Between attempts: short, so the observer is back before the workers are.
const RETRY: Duration = Duration::from_millis(20);
/// Every SET and DEL (`notify-keyspace-events E$gx`): an external client's
/// library (redis-py) announces nothing, so its grants are seen as the SET of a
/// lock key (its owner value read right after) and its releases as the DEL.
const SET: &str = "__keyevent@0__:set";
const DEL: &str = "__keyevent@0__:del";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Granted,
    Released,
    /// Expired, deleted by the harness, or gone after a restart.
    Ended,
}

struct State {
    majority: usize,
    /// Per instance: lock name → owner value.
    per: Vec<BTreeMap<String, String>>,
    /// (name, owner) held now → its grant number.
    held: HashMap<(String, String), i64>,
    /// (name, owner) whose hold has ended: owners are unique per acquisition, so
    /// one that ended never holds again.
    ended: HashSet<(String, String)>,
    next: i64,
    out: ObservationWriter,
}

impl State {
    fn apply(&mut self, i: usize, name: &str, new: Option<&str>, cause: Cause) {
        let old = match new {
            Some(v) => self.per[i].insert(name.to_string(), v.to_string()),
            None => self.per[i].remove(name),
        };
        if old.as_deref() == new {
            return;
        }
        if let Some(o) = old {
            self.recount(name, &o, cause);
        }
        if let Some(n) = new {
            self.recount(name, n, cause);
        }
    }

    fn recount(&mut self, name: &str, owner: &str, cause: Cause) {
        let count = self
            .per
            .iter()
            .filter(|m| m.get(name).map(String::as_str) == Some(owner))
            .count();
        let id = (name.to_string(), owner.to_string());
        let o = Owner::parse(owner);
        let session = o.map(|o| o.session).unwrap_or(0);
        if count >= self.majority {
            if self.held.contains_key(&id) || self.ended.contains(&id) {
                return;
            }
            self.next += 1;
            self.held.insert(id, self.next);
            self.out.write(&Observation::Created {
                time_ns: monotonic_ns(),
                key: name.to_string(),
                grant: self.next,
                session,
                id: owner.to_string(),
                value: None,
            });
            return;
        }
        let Some(grant) = self.held.remove(&id) else {
            return;
        };
        self.ended.insert(id);
        let now = monotonic_ns();
        self.out.write(&Observation::Deleted {
            time_ns: now,
            key: name.to_string(),
            grant,
            session,
            id: owner.to_string(),
        });
        if cause != Cause::Released {
            self.out.write(&Observation::SessionEnded {
                time_ns: now,
                session,
                worker: o.map(|o| o.worker),
            });
        }
    }
}

/// Runs one subscription per instance until `stop` fires.
pub async fn observe(
    clients: &[SocketAddr],
    out: ObservationWriter,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let state = Arc::new(Mutex::new(State {
        majority: clients.len() / 2 + 1,
        per: vec![BTreeMap::new(); clients.len()],
        held: HashMap::new(),
        ended: HashSet::new(),
        next: 0,
        out: out.clone(),
    }));
    let tasks = clients.iter().enumerate().map(|(i, a)| {
        let (state, out, stop) = (state.clone(), out.clone(), stop.clone());
        instance(i, *a, state, out, stop)
    });
    futures_util::future::join_all(tasks).await;
    Ok(())
}

fn with<T>(state: &Mutex<State>, f: impl FnOnce(&mut State) -> T) -> Option<T> {
    match state.lock() {
        Ok(mut s) => Some(f(&mut s)),
        Err(_) => {
            tracing::error!("observer state lock poisoned");
            None
        }
    }
}

/// Instance `i`: subscribe, read its keys, follow its events; after a lost
/// connection, a `Gap`, and again.
async fn instance(
    i: usize,
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    out: ObservationWriter,
    mut stop: watch::Receiver<bool>,
) {
    let mut first = true;
    while !*stop.borrow() {
        let res = tokio::select! {
            r = follow(i, addr, &state, &mut first) => r,
            _ = stop.changed() => return,
        };
        if *stop.borrow() {
            return;
        }
        let error = match res {
            Ok(()) => format!("redis {i}: subscription ended"),
            Err(e) => format!("redis {i}: {e:#}"),
        };
        if !first {
            out.write(&Observation::Gap {
                time_ns: monotonic_ns(),
                error,
            });
        }
        first = true;
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One connection's life: returns when the subscription ends.
async fn follow(i: usize, addr: SocketAddr, state: &Mutex<State>, first: &mut bool) -> Result<()> {
    let setup = async {
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(EVENTS).await?;
        pubsub.subscribe(EXPIRED).await?;
        pubsub.subscribe(SET).await?;
        pubsub.subscribe(DEL).await?;
        // What the instance holds now (after subscribing, so nothing falls
        // between): keys gone since the last look ended their holds (a restart
        // without the AOF).
        let mut c = proto::connect(&addr.to_string()).await?;
        let now = read_locks(&mut c).await?;
        // `c` stays for the GET of an owner after a keyspace SET.
        anyhow::Ok((pubsub, now, c))
    };
    let (mut pubsub, now, mut c) = tokio::time::timeout(SETUP, setup)
        .await
        .context("subscribing and reading the lock keys timed out")??;
    with(state, |s| {
        let before: Vec<String> = s.per[i].keys().cloned().collect();
        for name in before {
            if !now.contains_key(&name) {
                s.apply(i, &name, None, Cause::Ended);
            }
        }
        for (name, v) in &now {
            s.apply(i, name, Some(v), Cause::Granted);
        }
    });
    *first = false;
    let mut msgs = pubsub.on_message();
    while let Some(m) = msgs.next().await {
        let Ok(payload) = m.get_payload::<String>() else {
            continue;
        };
        if m.get_channel_name() == EXPIRED {
            if let Some(name) = payload.strip_prefix(LOCK_PREFIX) {
                with(state, |s| s.apply(i, name, None, Cause::Ended));
            }
            continue;
        }
        if m.get_channel_name() == DEL {
            // fencecheck's own scripts announce theirs too (the harness's
            // deletion before its DEL); a repeated change is a no-op.
            if let Some(name) = payload.strip_prefix(LOCK_PREFIX) {
                with(state, |s| s.apply(i, name, None, Cause::Released));
            }
            continue;
        }
        if m.get_channel_name() == SET {
            let Some(name) = payload.strip_prefix(LOCK_PREFIX) else {
                continue;
            };
            // The owner is what the key holds now; gone already (released or
            // expired within the look-up) leaves it unobserved.
            let v: Option<String> = tokio::time::timeout(
                Duration::from_secs(2),
                redis::cmd("GET").arg(&payload).query_async(&mut c),
            )
            .await
            .context("GET after a SET timed out")??;
            if let Some(v) = v {
                with(state, |s| s.apply(i, name, Some(&v), Cause::Granted));
            }
            continue;
        }
        let mut it = payload.split(' ');
        let (Some(what), Some(key), Some(owner)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Some(name) = key.strip_prefix(LOCK_PREFIX) else {
            continue;
        };
        with(state, |s| match what {
            "granted" => s.apply(i, name, Some(owner), Cause::Granted),
            "released" => s.apply(i, name, None, Cause::Released),
            "deleted" => s.apply(i, name, None, Cause::Ended),
            _ => {}
        });
    }
    Ok(())
}
