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

    /// A keyspace SET, and what a read of the key found after it: only an
    /// external owner is taken from the read (ours come from announcements).
    fn set_read(&mut self, i: usize, name: &str, read: Option<&str>) {
        if let Some(v) = read.filter(|v| !ours(v)) {
            self.apply(i, name, Some(v), Cause::Granted);
        }
    }

    /// Must a removal of `name` on `i` be checked by reading the key again? Yes
    /// when an external owner is held there (see [`State::removed`]).
    fn needs_read(&self, i: usize, name: &str) -> bool {
        self.per[i].get(name).is_some_and(|v| !ours(v))
    }

    /// A DEL or an expiry of `name` on `i`, with the key's value read after it
    /// when [`State::needs_read`] asked for one: what replaced an external owner
    /// (external again) stays, anything else is gone.
    fn removed(&mut self, i: usize, name: &str, read: Option<&str>, cause: Cause) {
        let now = read.filter(|v| !ours(v));
        self.apply(i, name, now, cause);
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

/// Is `v` an owner value of fencecheck's own scripts (announced on [`EVENTS`])?
/// Anything else is an external client's (redis-py's token), seen only by reads.
fn ours(v: &str) -> bool {
    Owner::parse(v).is_some()
}

/// The lock key's value now (after a keyspace event named it).
async fn get_owner(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Result<Option<String>> {
    tokio::time::timeout(
        Duration::from_secs(2),
        redis::cmd("GET").arg(key).query_async(c),
    )
    .await
    .context("GET after a keyspace event timed out")?
    .context("GET after a keyspace event")
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
        let gone = match m.get_channel_name() {
            EXPIRED => Some(Cause::Ended),
            // fencecheck's own scripts announce theirs too (the harness's
            // deletion before its DEL); a repeated change is a no-op.
            DEL => Some(Cause::Released),
            _ => None,
        };
        if let Some(cause) = gone {
            let Some(name) = payload.strip_prefix(LOCK_PREFIX) else {
                continue;
            };
            // A removal arrives in the instance's order, so it removes what the
            // announcements put there. An external owner, though, was put there
            // by a read made *after* its event, which may be newer than this
            // removal: read again, so the state never goes back in time.
            let fresh = with(state, |s| s.needs_read(i, name));
            let now = match fresh {
                Some(true) => get_owner(&mut c, &payload).await?,
                _ => None,
            };
            with(state, |s| s.removed(i, name, now.as_deref(), cause));
            continue;
        }
        if m.get_channel_name() == SET {
            let Some(name) = payload.strip_prefix(LOCK_PREFIX) else {
                continue;
            };
            // The owner is what the key holds now; gone already (released or
            // expired within the look-up) leaves it unobserved. The read may be
            // newer than this event: an owner of fencecheck's own scripts is
            // taken only from their announcements, which come in the instance's
            // order — applied from this read, the older owner announced after it
            // would replace it and end its hold for a moment (under load that
            // ended real holds as "granted on an ended session").
            let now = get_owner(&mut c, &payload).await?;
            with(state, |s| s.set_read(i, name, now.as_deref()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::observe::Observation;

    fn state(dir: &std::path::Path) -> (State, std::path::PathBuf) {
        let path = dir.join("service.jsonl");
        let out = ObservationWriter::create(&path).expect("writer");
        let s = State {
            majority: 2,
            per: vec![BTreeMap::new(); 3],
            held: HashMap::new(),
            ended: HashSet::new(),
            next: 0,
            out,
        };
        (s, path)
    }

    fn observed(path: &std::path::Path) -> Vec<Observation> {
        std::fs::read_to_string(path)
            .expect("read")
            .lines()
            .map(|l| serde_json::from_str(l).expect("observation"))
            .collect()
    }

    /// The CI failure: instance 0's SET event for X is handled after X was
    /// released and Y set there, so the read after it finds Y. Taken from the
    /// read, Y would be replaced by X's announcement that follows, drop below
    /// the majority and end its session; taken only from announcements, Y holds
    /// once, and nothing ends.
    #[test]
    fn a_late_read_never_ends_a_newer_hold() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut s, path) = state(dir.path());
        let (x, y) = ("1:10:100:1", "2:20:200:2");
        s.apply(1, "k0", Some(y), Cause::Granted); // Y holds instance 1 already
        s.set_read(0, "k0", Some(y)); // SET(X) on 0, read finds Y
        s.apply(0, "k0", Some(x), Cause::Granted); // "granted X"
        s.removed(0, "k0", None, Cause::Released); // DEL (X's release)
        s.apply(0, "k0", None, Cause::Released); // "released X"
        s.set_read(0, "k0", Some(y)); // SET(Y)
        s.apply(0, "k0", Some(y), Cause::Granted); // "granted Y"
        let obs = observed(&path);
        let created = obs
            .iter()
            .filter(|o| matches!(o, Observation::Created { .. }))
            .count();
        assert_eq!(created, 1, "{obs:?}");
        assert!(
            !obs.iter().any(|o| matches!(
                o,
                Observation::SessionEnded { .. } | Observation::Deleted { .. }
            )),
            "{obs:?}"
        );
    }

    /// An external owner read late (newer than the removal that follows it)
    /// survives the removal: the second read finds it still there.
    #[test]
    fn an_external_owner_read_late_survives_the_older_removal() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut s, path) = state(dir.path());
        let (old, new) = ("uuid-old", "uuid-new");
        s.set_read(0, "k0", Some(old));
        s.set_read(1, "k0", Some(old));
        s.set_read(0, "k0", Some(new)); // old released, new set: read late
        s.set_read(1, "k0", Some(new));
        assert!(s.needs_read(0, "k0"));
        s.removed(0, "k0", Some(new), Cause::Released); // old's DEL: new is there
        s.removed(1, "k0", Some(new), Cause::Released);
        let obs = observed(&path);
        let held: Vec<&str> = obs
            .iter()
            .filter_map(|o| match o {
                Observation::Created { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(held, [old, new], "{obs:?}");
        // Only the old hold ended; the new one is still held.
        let ended: Vec<&str> = obs
            .iter()
            .filter_map(|o| match o {
                Observation::Deleted { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ended, [old], "{obs:?}");
    }
}
