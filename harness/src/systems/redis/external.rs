//! An external client's owners on Redis and Redlock: the owner value the worker
//! hands the client in `acquire` (`<worker>:<pid>:<session>:<nonce>`), which the
//! library stores as the lock's value — nothing to write.

use super::keys::{lock_key, Owner};
use crate::systems::external::owner::Owners;

pub struct RedisOwners;

impl Owners for RedisOwners {
    fn lock(&self, name: &str) -> String {
        lock_key(name)
    }

    /// redis-py and the like have no session: each lock is its own (`handle`),
    /// so `expire-session` of its holder deletes just that lock, and the
    /// observer's end of it is this grant's session end.
    fn owner_value(&self, worker: u32, session: i64, handle: i64) -> Option<(i64, String)> {
        let session = if session == 0 { handle } else { session };
        let owner = Owner {
            worker,
            pid: std::process::id(),
            session,
            nonce: handle,
        };
        Some((session, owner.to_string()))
    }
}
