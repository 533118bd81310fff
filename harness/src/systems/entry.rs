//! Which storage key a lock entry guards, wherever a library put it. The
//! harness's observers (etcd, Redis/Redlock) keep every entry a library writes in
//! the service's keyspace, except the harness's own bookkeeping, and file each
//! under the storage key it guards, so a library's own prefix (`lock:` from
//! python-redis-lock, `/locks/` from python-etcd3) or suffix (etcd's
//! `/<lease hex>`) changes nothing.
//!
//! The adapter is given the lock's name (`fencecheck:lock:k3`,
//! `fencecheck/lock/k3`) and passes it to its library, which may prefix or
//! suffix it: an entry containing that name guards `k3`. An adapter that gives
//! its library another name still has its entries recognised when a segment of
//! the entry (between `:` and `/`) is a storage key (`lock:k3`, `/tooz/k3`):
//! fencecheck's storage keys are always `k<n>`. An entry that names no storage
//! key either way (a name hashed by the library) is not a lock entry to the
//! harness; its acquisitions stay unmatched and the report says so.

const SEPARATORS: [char; 2] = [':', '/'];

/// The storage key `entry` guards: the segment after `lock_prefix` (the
/// harness's own lock name prefix, wherever it appears in the entry), else the
/// entry's last segment that is a storage key.
pub fn storage_key<'a>(entry: &'a str, lock_prefix: &str) -> Option<&'a str> {
    if let Some(at) = entry.find(lock_prefix) {
        let rest = &entry[at + lock_prefix.len()..];
        let name = rest.split(SEPARATORS).next().filter(|k| !k.is_empty())?;
        // A library's own suffix right after the name (tooz's redis driver
        // writes `_tooz_<name>_lock`): the storage key is the name's leading
        // `k<digits>`.
        return Some(leading_storage_key(name).unwrap_or(name));
    }
    entry.rsplit(SEPARATORS).find(|s| is_storage_key(s))
}

/// The `k<digits>` that `s` starts with, if it does.
fn leading_storage_key(s: &str) -> Option<&str> {
    let digits = s
        .strip_prefix('k')?
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    (digits > 0).then(|| &s[..1 + digits])
}

/// `k<digits>`: how the workers and the storage name every key.
fn is_storage_key(s: &str) -> bool {
    s.strip_prefix('k')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::storage_key;

    #[test]
    fn an_entry_names_its_storage_key_wherever_the_library_put_it() {
        let redis = "fencecheck:lock:";
        // The name as given, prefixed by the library (python-redis-lock).
        assert_eq!(storage_key("fencecheck:lock:k3", redis), Some("k3"));
        assert_eq!(storage_key("lock:fencecheck:lock:k3", redis), Some("k3"));
        // ... and suffixed (tooz's redis driver).
        assert_eq!(
            storage_key("_tooz_fencecheck:lock:k3_lock", redis),
            Some("k3")
        );
        assert_eq!(storage_key("fencecheck:lock:k31", redis), Some("k31"));
        // Another name given to the library: a segment that is a storage key.
        assert_eq!(storage_key("lock:k3", redis), Some("k3"));
        assert_eq!(storage_key("app:k12:x", redis), Some("k12"));
        assert_eq!(storage_key("lock:kettle", redis), None);
        assert_eq!(storage_key("lock:5f3a", redis), None);
        let etcd = "fencecheck/lock/";
        assert_eq!(
            storage_key("fencecheck/lock/k3/694d8b1c2e", etcd),
            Some("k3")
        );
        assert_eq!(storage_key("/locks/fencecheck/lock/k3", etcd), Some("k3"));
        assert_eq!(storage_key("/tooz/locks/k0", etcd), Some("k0"));
        assert_eq!(storage_key("/locks/other", etcd), None);
    }
}
