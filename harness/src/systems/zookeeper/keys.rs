//! ZooKeeper's keyspace contract: the lock recipe's paths and the owner nodes that
//! map a session to its worker. The worker's client creates them, the harness's
//! observer (`service.rs`, `service/feed.rs`) reads them and the external client's
//! owner entries (`external.rs`) write them, so they live here, apart from all three.

/// Parent of every lock: `/fencecheck/locks/<key>/_c_<uuid>-lock-<seq>`.
pub const LOCKS: &str = "/fencecheck/locks";
/// Parent of the owner nodes: `/fencecheck/owners/<session hex>` = "<worker> <pid>".
pub const OWNERS: &str = "/fencecheck/owners";
/// The lock node's name before its uuid and sequence, as Curator names it.
pub const LOCK_NAME: &str = "lock-";

/// The lock path that guards storage key `key`.
pub fn lock_dir(key: &str) -> String {
    format!("{LOCKS}/{key}")
}

/// The owner node of `session`.
pub fn owner_path(session: i64) -> String {
    format!("{OWNERS}/{:x}", session as u64)
}

/// Parses an owner node's name back into its session id.
pub fn owner_session(name: &str) -> Option<i64> {
    u64::from_str_radix(name, 16).ok().map(|s| s as i64)
}

/// An owner node's data: "<worker> <pid>".
pub fn owner_data(worker: u32, pid: u32) -> String {
    format!("{worker} {pid}")
}

/// Parses an owner node's data into (worker, pid).
pub fn parse_owner(data: &[u8]) -> Option<(u32, u32)> {
    let s = std::str::from_utf8(data).ok()?;
    let mut it = s.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}
