//! etcd's keyspace contract: where fencecheck's client puts its locks and owner
//! keys. The worker's client writes them, the harness's observer (`service.rs`)
//! watches them and the external client's owner entries (`external.rs`) use them,
//! so they live here, apart from any of the three.

/// etcd key of the lock that guards storage key `key`.
pub fn lock_name(key: &str) -> String {
    format!("fencecheck/lock/{key}")
}

/// Prefix of every lock key.
pub const LOCK_PREFIX: &str = "fencecheck/lock/";
/// Prefix of the owner keys: `fencecheck/owner/<lease hex>` = "<worker> <pid>",
/// attached to the lease, so it lives exactly as long as the session.
pub const OWNER_PREFIX: &str = "fencecheck/owner/";

pub fn owner_key(lease: i64) -> String {
    format!("{OWNER_PREFIX}{lease:x}")
}
