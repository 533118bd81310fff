//! Redis's (and Redlock's) keyspace contract: the lock and counter keys, the
//! channel every lock change is published on, the owner value and the Lua scripts
//! that keep them in step. The worker's client runs the scripts, the harness's
//! observer (`service.rs`, `service/feed.rs`) reads the keys and the channel and
//! the external client's owners (`external.rs`) name the keys, so they live here.

/// Prefix of every lock key: `fencecheck:lock:<name>`.
pub const LOCK_PREFIX: &str = "fencecheck:lock:";
/// Prefix of every per-lock counter: `fencecheck:token:<name>`.
pub const TOKEN_PREFIX: &str = "fencecheck:token:";
/// The channel every lock change is published on: `granted <key> <owner>
/// <counter> <log id>`, `released <key> <owner> <log id>`, `deleted <key>
/// <owner> <log id>` (the harness's expire-session).
pub const EVENTS: &str = "fencecheck:events";
/// The same changes kept in a stream (the message without its id, field `m`),
/// so that an observer whose subscription was lost (the instance restarted,
/// the connection broke) reads what it missed instead of leaving a hole: a
/// Pub/Sub message sent while nobody listened is gone. Capped (`MAXLEN ~`): the
/// observer reads it only after a lost connection, from the last id it saw.
pub const LOG: &str = "fencecheck:log";

/// SET NX PX, and with it INCR (when ARGV[4] is "1"), the log entry and the
/// PUBLISH ([`LOG`], [`EVENTS`]: the stream's name is written out); returns the
/// counter (0 without INCR), or -1 when held.
pub const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = 0
  if ARGV[4] == '1' then
    t = redis.call('INCR', KEYS[2])
  end
  local m = 'granted ' .. KEYS[1] .. ' ' .. ARGV[1] .. ' ' .. t
  local id = redis.call('XADD', 'fencecheck:log', 'MAXLEN', '~', '100000', '*', 'm', m)
  redis.call('PUBLISH', ARGV[3], m .. ' ' .. id)
  return t
end
return -1
";

/// Compare-and-pexpire: 1 if the key was still ours.
pub const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Compare-and-delete: 1 if the key was still ours.
pub const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local m = 'released ' .. KEYS[1] .. ' ' .. ARGV[1]
  local id = redis.call('XADD', 'fencecheck:log', 'MAXLEN', '~', '100000', '*', 'm', m)
  redis.call('PUBLISH', ARGV[2], m .. ' ' .. id)
  return 1
end
return 0
";

/// The lock key of storage key `name`.
pub fn lock_key(name: &str) -> String {
    format!("{LOCK_PREFIX}{name}")
}

/// Whether a Redis key is the harness's own bookkeeping (the token counters,
/// the channel), never a lock entry.
pub fn harness_own(key: &str) -> bool {
    key.starts_with(TOKEN_PREFIX) || key == EVENTS || key == LOG
}

/// The storage key a Redis key is the lock of, whatever the library named it
/// (`fencecheck:lock:k0`, python-redis-lock's `lock:fencecheck:lock:k0`,
/// `lock:k0`); `None` for the harness's own keys and keys that name no storage
/// key ([`crate::systems::entry`]).
pub fn lock_of(key: &str) -> Option<&str> {
    if harness_own(key) {
        return None;
    }
    crate::systems::entry::storage_key(key, LOCK_PREFIX)
}

/// A session for a grant whose owner value is not fencecheck's (a library's
/// random id): one per (key, value), so the end of that hold (an expiry) ends
/// its own session and no other. Stable (FNV-1a of both), positive, never 0.
pub fn value_session(key: &str, value: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain([0u8]).chain(value.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ((h >> 1) as i64).max(1)
}

/// The owner value: a recorded format, so it lives with the observations.
pub use crate::record::observe::OwnerValue as Owner;
