//! The observer: on every instance, a Pub/Sub subscription to the scripts' own
//! announcements ([`EVENTS`]: granted, released, deleted — published inside the
//! script that made the change, so in the instance's order of changes) and to
//! Redis's keyspace events for every key (`__keyevent@0__:set`, `del`,
//! `expired`, on with `notify-keyspace-events E$gx`): a library announces
//! nothing and names its keys as it likes (`lock:<name>` for python-redis-lock),
//! so every `set` of a key that guards a storage key ([`keys::lock_of`]: not the
//! harness's own) is followed by a read of its value, in the instance's order.
//! From them the observer keeps each instance's lock keys and their values, and
//! numbers the grants itself: a grant is **held** once the same value has the
//! key on a majority of instances (one instance on `redis`), and gets the next
//! number at that moment — the harness's own order, which `check::resolve`
//! hands to the checks. A hold ends when its value drops below the majority: by
//! a release (`Deleted`), or by an expiry, a deletion by the harness or a
//! restart that lost the key (`Deleted` and `SessionEnded`).
//!
//! A creation is filed under the storage key its Redis key guards, with the
//! value as its `id`; its session is the one fencecheck's owner value names, or
//! for a library's own value (a random id) one of its own per key and value
//! ([`keys::value_session`]), which that hold's end ends.
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

use super::lock_values;
use crate::record::history::monotonic_ns;
use crate::record::observe::{Observation, ObservationWriter};
use crate::systems::redis::client as proto;
use crate::systems::redis::keys::{self, Owner, EVENTS, LOG};

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
/// library (redis-py, python-redis-lock) announces nothing, so its grants are
/// seen as the SET of a lock key (its value read right after) and its releases
/// as the DEL.
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
    /// Per instance: lock key (the Redis key, as the library named it) → value.
    per: Vec<BTreeMap<String, String>>,
    /// (key, value) held now → its grant number.
    held: HashMap<(String, String), i64>,
    /// (key, value) whose hold has ended: values are unique per acquisition, so
    /// one that ended never holds again.
    ended: HashSet<(String, String)>,
    next: i64,
    out: ObservationWriter,
    /// Instances that have subscribed and read their keys: the feed is up once
    /// every one has.
    up: HashSet<usize>,
    /// Per instance: the id of the last [`LOG`] entry applied, where a sync after
    /// a lost subscription reads on from.
    last: Vec<Option<String>>,
}

impl State {
    fn apply(&mut self, i: usize, key: &str, new: Option<&str>, cause: Cause) {
        let old = match new {
            Some(v) => self.per[i].insert(key.to_string(), v.to_string()),
            None => self.per[i].remove(key),
        };
        if old.as_deref() == new {
            return;
        }
        if let Some(o) = old {
            self.recount(key, &o, cause);
        }
        if let Some(n) = new {
            self.recount(key, n, cause);
        }
    }

    /// One message of instance `i`'s subscription, in the instance's order.
    /// Returns a lock key whose owner must be read (after a keyspace SET: an
    /// external client announces nothing); the read's answer comes back as a
    /// `read` announcement in this same stream (see [`read_in_order`]).
    fn on_message(&mut self, i: usize, channel: &str, payload: &str) -> Option<String> {
        // Only keys that guard a storage key: never the harness's own counters.
        let name = |key: &str| keys::lock_of(key).map(|_| key.to_string());
        match channel {
            EXPIRED => {
                let n = name(payload)?;
                self.apply(i, &n, None, Cause::Ended);
                None
            }
            // fencecheck's own scripts announce theirs too (the harness's
            // deletion before its DEL); a repeated change is a no-op.
            DEL => {
                let n = name(payload)?;
                self.apply(i, &n, None, Cause::Released);
                None
            }
            SET => name(payload).map(|_| payload.to_string()),
            _ => {
                let mut it = payload.splitn(3, ' ');
                let (what, key) = (it.next()?, it.next()?);
                let n = name(key)?;
                // granted/released/deleted: `<key> <owner> … <log id>`; read:
                // `<key> <value>`.
                let rest = it.next()?;
                if what != "read" {
                    if let Some(id) = rest.rsplit(' ').next().filter(|id| log_id(id)) {
                        self.last[i] = Some(id.to_string());
                    }
                }
                let owner = rest.split(' ').next().unwrap_or(rest);
                match what {
                    "granted" => self.apply(i, &n, Some(owner), Cause::Granted),
                    "released" => self.apply(i, &n, None, Cause::Released),
                    "deleted" => self.apply(i, &n, None, Cause::Ended),
                    // What the key held at the read: in order, so never older than
                    // what came before it (gone by then: its removal came before).
                    "read" => self.apply(i, &n, Some(rest), Cause::Granted),
                    _ => {}
                }
                None
            }
        }
    }

    /// Instance `i` (re)connected: what it logged while nobody listened, in
    /// its order, then its keys as they are now (a key gone ended its hold:
    /// an expiry, or a restart that lost it), stamped now.
    fn sync(&mut self, i: usize, synced: &Synced) {
        if !synced.log.is_empty() {
            tracing::debug!(
                "redis {i}: {} changes read from the log after a lost subscription",
                synced.log.len()
            );
        }
        for (id, m) in &synced.log {
            self.on_message(i, EVENTS, m);
            self.last[i] = Some(id.clone());
        }
        let before: Vec<String> = self.per[i].keys().cloned().collect();
        for name in before {
            if !synced.keys.contains_key(&name) {
                self.apply(i, &name, None, Cause::Ended);
            }
        }
        for (name, v) in &synced.keys {
            self.apply(i, name, Some(v), Cause::Granted);
        }
        if synced.newest.is_some() {
            self.last[i] = synced.newest.clone();
        }
        self.up.insert(i);
        if self.up.len() == self.per.len() {
            self.out.ready();
        }
    }

    fn recount(&mut self, key: &str, owner: &str, cause: Cause) {
        let count = self
            .per
            .iter()
            .filter(|m| m.get(key).map(String::as_str) == Some(owner))
            .count();
        let Some(name) = keys::lock_of(key).map(str::to_string) else {
            return;
        };
        let id = (key.to_string(), owner.to_string());
        let o = Owner::parse(owner);
        let session = o.map_or_else(|| keys::value_session(key, owner), |o| o.session);
        if count >= self.majority {
            if self.held.contains_key(&id) || self.ended.contains(&id) {
                return;
            }
            self.next += 1;
            self.held.insert(id, self.next);
            self.out.write(&Observation::Created {
                time_ns: monotonic_ns(),
                key: name,
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
            key: name,
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
        up: HashSet::new(),
        last: vec![None; clients.len()],
    }));
    let tasks = clients.iter().enumerate().map(|(i, a)| {
        let (state, out, stop) = (state.clone(), out.clone(), stop.clone());
        instance(i, *a, state, out, stop)
    });
    futures_util::future::join_all(tasks).await;
    Ok(())
}

/// Reads a lock key's owner inside a script that announces what it read on
/// [`EVENTS`] (`read <key> <value>`), so the answer takes its place in the
/// instance's order of changes: a plain GET's answer may be newer than messages
/// still queued, and applied before them, an older owner announced after it
/// would replace the newer one and end its hold for a moment.
async fn read_in_order(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Result<()> {
    // Only a string: a SET may be followed by a command that made the key a
    // list before this read (GET of a list is an error).
    const READ: &str = "if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end \
        local v = redis.call('GET', KEYS[1]) \
        if v then redis.call('PUBLISH', ARGV[1], 'read ' .. KEYS[1] .. ' ' .. v) end \
        return 1";
    tokio::time::timeout(
        Duration::from_secs(2),
        redis::cmd("EVAL")
            .arg(READ)
            .arg(1)
            .arg(key)
            .arg(EVENTS)
            .query_async::<i64>(c),
    )
    .await
    .context("reading a lock key's owner timed out")?
    .context("reading a lock key's owner")?;
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
    let marker = format!("{}-{i}", monotonic_ns());
    let last = with(state, |s| s.last[i].clone()).flatten();
    let setup = async {
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(EVENTS).await?;
        pubsub.subscribe(EXPIRED).await?;
        pubsub.subscribe(SET).await?;
        pubsub.subscribe(DEL).await?;
        // After subscribing, so nothing falls between; `c` stays for the GET
        // of an owner after a keyspace SET.
        let mut c = proto::connect(&addr.to_string()).await?;
        let synced = sync(&mut c, &marker, last.as_deref()).await?;
        anyhow::Ok((pubsub, synced, c))
    };
    let (mut pubsub, synced, mut c) = tokio::time::timeout(SETUP, setup)
        .await
        .context("subscribing and reading the lock keys timed out")??;
    let mut msgs = pubsub.on_message();
    // What was published before the marker is in the sync already (its log
    // entries, its keys as they were): skipped, so nothing is applied twice or
    // out of order.
    let sync_msg = format!("sync {marker}");
    tokio::time::timeout(SETUP, async {
        while let Some(m) = msgs.next().await {
            if m.get_channel_name() == EVENTS
                && m.get_payload::<String>().is_ok_and(|p| p == sync_msg)
            {
                return Ok(());
            }
        }
        anyhow::bail!("the subscription ended before the sync's marker")
    })
    .await
    .context("waiting for the sync's marker timed out")??;
    with(state, |s| s.sync(i, &synced));
    *first = false;
    while let Some(m) = msgs.next().await {
        let Ok(payload) = m.get_payload::<String>() else {
            continue;
        };
        let read = with(state, |s| s.on_message(i, m.get_channel_name(), &payload)).flatten();
        if let Some(key) = read {
            read_in_order(&mut c, &key).await?;
        }
    }
    Ok(())
}

/// What one instance held and logged at one moment.
struct Synced {
    /// The [`LOG`] entries after the last one applied (none on a first
    /// connection): (id, message), in order.
    log: Vec<(String, String)>,
    /// The newest entry's id, if the log has any.
    newest: Option<String>,
    /// Every lock key and its value.
    keys: BTreeMap<String, String>,
}

/// Reads, in one script, the log entries after `last`, the newest entry's id and
/// every lock key, and publishes `sync <marker>` on [`EVENTS`] at that same
/// moment: what comes after the marker on the subscription is newer than all of
/// it. A log lost with a restart (no persistence) starts again with larger ids
/// (they are the instance's clock), so reading on from `last` reads all of it.
async fn sync(
    c: &mut redis::aio::MultiplexedConnection,
    marker: &str,
    last: Option<&str>,
) -> Result<Synced> {
    const SYNC: &str = concat!(
        r"local log = {}
if ARGV[3] ~= '' then
  for _, e in ipairs(redis.call('XRANGE', KEYS[1], '(' .. ARGV[3], '+')) do
    log[#log + 1] = e[1]
    log[#log + 1] = e[2][2]
  end
end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest = ''
if #top > 0 then newest = top[1][1] end
",
        lua_string_keys!(),
        r"redis.call('PUBLISH', ARGV[1], 'sync ' .. ARGV[2])
return {newest, log, kv}
"
    );
    let (newest, log, kv): (String, Vec<String>, Vec<Vec<u8>>) = redis::cmd("EVAL")
        .arg(SYNC)
        .arg(1)
        .arg(LOG)
        .arg(EVENTS)
        .arg(marker)
        .arg(last.unwrap_or(""))
        .query_async(c)
        .await
        .context("reading the lock keys and the log")?;
    Ok(Synced {
        log: log
            .chunks_exact(2)
            .map(|e| (e[0].clone(), e[1].clone()))
            .collect(),
        newest: Some(newest).filter(|n| !n.is_empty()),
        keys: lock_values(&kv),
    })
}

/// A stream entry id (`<ms>-<seq>`), as the end of a published message.
fn log_id(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    s.split_once('-')
        .is_some_and(|(a, b)| digits(a) && digits(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::observe::Observation;

    /// Feeds one instance's messages, in order, to a fresh 3-instance state
    /// (majority 2); returns the reads asked for and what was observed.
    fn feed(msgs: &[(usize, &str, &str)]) -> (Vec<String>, Vec<Observation>) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("service.jsonl");
        let mut s = State {
            majority: 2,
            per: vec![BTreeMap::new(); 3],
            held: HashMap::new(),
            ended: HashSet::new(),
            next: 0,
            out: ObservationWriter::create(&path).expect("writer"),
            up: HashSet::new(),
            last: vec![None; 3],
        };
        let reads = msgs
            .iter()
            .filter_map(|(i, ch, p)| s.on_message(*i, ch, p))
            .collect();
        let obs = std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .map(|l| serde_json::from_str(l).expect("observation"))
            .collect();
        (reads, obs)
    }

    fn ids(obs: &[Observation], created: bool) -> Vec<&str> {
        obs.iter()
            .filter_map(|o| match o {
                Observation::Created { id, .. } if created => Some(id.as_str()),
                Observation::Deleted { id, .. } if !created => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The race a plain GET after a SET had: instance 0's SET of X is followed
    /// by X's release and Y's grant before the read; the read's answer (Y) now
    /// comes as a `read` announcement after them, so X's announcement never
    /// replaces Y, and Y's hold does not end.
    #[test]
    fn a_read_takes_its_place_in_the_order() {
        let (x, y) = ("1:10:100:1", "2:20:200:2");
        let (gx, gy) = (
            format!("granted fencecheck:lock:k0 {x} 0"),
            format!("granted fencecheck:lock:k0 {y} 0"),
        );
        let (rx, ry) = (
            format!("released fencecheck:lock:k0 {x}"),
            format!("read fencecheck:lock:k0 {y}"),
        );
        let key = "fencecheck:lock:k0";
        let (reads, obs) = feed(&[
            (1, EVENTS, &gy),
            (0, SET, key),
            (0, EVENTS, &gx),
            (0, DEL, key),
            (0, EVENTS, &rx),
            (0, SET, key),
            (0, EVENTS, &gy),
            (0, EVENTS, &ry), // the first read's answer: Y by then
            (0, EVENTS, &ry),
        ]);
        assert_eq!(reads, [key, key]);
        assert_eq!(ids(&obs, true), [y], "{obs:?}");
        assert!(ids(&obs, false).is_empty(), "{obs:?}");
        assert!(
            !obs.iter()
                .any(|o| matches!(o, Observation::SessionEnded { .. })),
            "{obs:?}"
        );
    }

    /// A lost subscription: the grants made and let go while nobody listened
    /// come from the log, in order, then the keys as they are; the messages'
    /// log ids are where the next sync reads on from.
    #[test]
    fn a_sync_reads_what_the_log_kept_while_nobody_listened() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("service.jsonl");
        let mut s = State {
            majority: 1,
            per: vec![BTreeMap::new()],
            held: HashMap::new(),
            ended: HashSet::new(),
            next: 0,
            out: ObservationWriter::create(&path).expect("writer"),
            up: HashSet::new(),
            last: vec![None],
        };
        let key = "fencecheck:lock:k0";
        let (a, b, c) = ("1:10:100:1", "2:20:200:2", "3:30:300:3");
        s.on_message(0, EVENTS, &format!("granted {key} {a} 1 1700000000000-0"));
        assert_eq!(s.last[0].as_deref(), Some("1700000000000-0"));
        let entry = |id: &str, m: String| (id.to_string(), m);
        s.sync(
            0,
            &Synced {
                log: vec![
                    entry("1700000000001-0", format!("released {key} {a}")),
                    entry("1700000000002-0", format!("granted {key} {b} 2")),
                    entry("1700000000003-0", format!("released {key} {b}")),
                    entry("1700000000004-0", format!("granted {key} {c} 3")),
                ],
                newest: Some("1700000000004-0".into()),
                keys: BTreeMap::from([(key.to_string(), c.to_string())]),
            },
        );
        assert_eq!(s.last[0].as_deref(), Some("1700000000004-0"));
        let obs: Vec<Observation> = std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .map(|l| serde_json::from_str(l).expect("observation"))
            .collect();
        assert_eq!(ids(&obs, true), [a, b, c], "{obs:?}");
        assert_eq!(ids(&obs, false), [a, b], "{obs:?}");
        assert!(
            !obs.iter()
                .any(|o| matches!(o, Observation::SessionEnded { .. })),
            "every hold ended by a release: {obs:?}"
        );
        assert!(log_id("1700000000004-12"));
        assert!(!log_id("3") && !log_id("1:10:100:-5") && !log_id("-1"));
    }

    /// An external client (nothing announced): its owner comes from the reads,
    /// its release from the DEL, and an expiry ends its session.
    #[test]
    fn an_external_client_is_seen_through_reads() {
        let (a, b) = ("3:30:300:3", "4:40:400:4");
        let key = "fencecheck:lock:k0";
        let read = |v: &str| format!("read {key} {v}");
        let (ra, rb) = (read(a), read(b));
        let (reads, obs) = feed(&[
            (0, SET, key),
            (0, EVENTS, &ra),
            (1, SET, key),
            (1, EVENTS, &ra),
            (0, DEL, key),
            (1, DEL, key),
            (0, SET, key),
            (0, EVENTS, &rb),
            (1, SET, key),
            (1, EVENTS, &rb),
            (0, EXPIRED, key),
        ]);
        assert_eq!(reads.len(), 4);
        assert_eq!(ids(&obs, true), [a, b], "{obs:?}");
        assert_eq!(ids(&obs, false), [a, b], "{obs:?}");
        let ended: Vec<i64> = obs
            .iter()
            .filter_map(|o| match o {
                Observation::SessionEnded { session, .. } => Some(*session),
                _ => None,
            })
            .collect();
        assert_eq!(
            ended,
            [400],
            "only b's hold ended without a release: {obs:?}"
        );
    }

    /// A library's own key (`lock:<name>`) and random value: seen through the
    /// reads, filed under the storage key it guards, with a session of its own
    /// that its expiry ends; its signal list and the harness's counters are not
    /// lock keys.
    #[test]
    fn a_librarys_own_key_and_value_are_observed() {
        let key = "lock:fencecheck:lock:k0";
        let (a, b) = ("rrx8ON+6hGekFB7oKUQxv16K", "Zm9vYmFyYmF6cXV4cXV1eDEy");
        let read = |i: usize, v: &str| (i, EVENTS, format!("read {key} {v}"));
        let (ra0, ra1, rb0, rb1) = (read(0, a), read(1, a), read(0, b), read(1, b));
        let (reads, obs) = feed(&[
            (0, SET, key),
            (ra0.0, ra0.1, &ra0.2),
            (1, SET, key),
            (ra1.0, ra1.1, &ra1.2),
            (0, SET, "fencecheck:token:k0"),
            (0, EXPIRED, "lock-signal:fencecheck:lock:k0"),
            (0, EXPIRED, key),
            (1, EXPIRED, key),
            (0, SET, key),
            (rb0.0, rb0.1, &rb0.2),
            (1, SET, key),
            (rb1.0, rb1.1, &rb1.2),
            (0, DEL, key),
        ]);
        assert_eq!(reads, [key, key, key, key], "no read of the counter");
        assert_eq!(ids(&obs, true), [a, b], "{obs:?}");
        assert_eq!(ids(&obs, false), [a, b], "{obs:?}");
        let (mut created, mut ended) = (Vec::new(), Vec::new());
        for o in &obs {
            match o {
                Observation::Created { key, session, .. } => {
                    assert_eq!(key, "k0");
                    created.push(*session);
                }
                Observation::SessionEnded { session, .. } => ended.push(*session),
                _ => {}
            }
        }
        assert_eq!(
            created,
            [keys::value_session(key, a), keys::value_session(key, b)]
        );
        assert_ne!(created[0], created[1]);
        assert_eq!(ended, [created[0]], "a's expiry ends a's session only");
    }
}
