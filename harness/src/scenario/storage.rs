//! `[storage]`: the kinds of fenced resource and what each needs (a `kind =
//! "http"` URL; PostgreSQL's own settings — isolation level,
//! `synchronous_commit`, `check-then-write` — and the rules that keep them, on
//! either backend). The one file of the config that names a storage kind's
//! specifics, as `systems/` does for lock systems.

use serde::{Deserialize, Serialize};

use super::{Durability, Fencing, Scenario, ScenarioError};

/// The isolation level of every storage transaction (`[storage] isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// PostgreSQL's default: each statement sees what committed before it.
    #[default]
    ReadCommitted,
    /// Serializable snapshot isolation: a conflicting transaction fails with
    /// SQLSTATE 40001 and is retried (the retries are counted in the report).
    Serializable,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read-committed",
            Isolation::Serializable => "serializable",
        }
    }

    pub fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }
}

/// PostgreSQL's `synchronous_commit` (`[storage] synchronous_commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncCommit {
    /// A commit is answered once its WAL is flushed (fsync on): survives a crash.
    #[default]
    On,
    /// A commit is answered before its WAL is flushed: a crash loses the last
    /// acknowledged transactions (up to 3 × wal_writer_delay).
    Off,
}

impl SyncCommit {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncCommit::On => "on",
            SyncCommit::Off => "off",
        }
    }
}

/// The `[storage]` rules of PostgreSQL and its modes; `err` points at a key's line.
pub fn rules(
    s: &Scenario,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let st = &s.storage;
    let pg = st.kind == StorageKind::Postgres;
    if st.fencing == Fencing::CheckThenWrite && !pg {
        return Err(err(
            "fencing",
            format!(
                "storage.fencing = \"check-then-write\" is PostgreSQL's (two SQL statements); \
                 storage.kind = \"{}\" decides atomically; expected kind = \"postgres\" or \
                 fencing monotonic, exact or off",
                st.kind.as_str()
            ),
        ));
    }
    if !pg && st.isolation.is_some() {
        return Err(err(
            "isolation",
            "storage.isolation goes only with storage.kind = \"postgres\"".into(),
        ));
    }
    if !pg && st.synchronous_commit.is_some() {
        return Err(err(
            "synchronous_commit",
            "storage.synchronous_commit goes only with storage.kind = \"postgres\"".into(),
        ));
    }
    if !pg {
        return Ok(());
    }
    if st.durability != Durability::Flush {
        return Err(err(
            "durability",
            "storage.durability is fencecheck's storage's; PostgreSQL's is \
             storage.synchronous_commit = \"on\" | \"off\""
                .into(),
        ));
    }
    if st.url.is_some() {
        return Err(err(
            "url",
            "storage.url goes only with kind = \"http\" (PostgreSQL is started by the backend)"
                .into(),
        ));
    }
    Ok(())
}

/// Where the fenced writes land.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageKind {
    /// fencecheck's own storage service, started by the backend; its durable log
    /// (`storage.jsonl`) is what the checkers judge from.
    #[default]
    Fencecheck,
    /// The user's own service at `url`, speaking `docs/storage-protocol.md`; no
    /// log, so the checkers judge from the client-observed history.
    Http,
    /// PostgreSQL 15, started by the process backend in the run directory; its
    /// log table, exported to `storage.jsonl` at the end, is what the checkers
    /// judge from.
    Postgres,
}

impl StorageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Fencecheck => "fencecheck",
            StorageKind::Http => "http",
            StorageKind::Postgres => "postgres",
        }
    }

    /// Does this kind leave a storage log for the checkers?
    pub fn has_log(self) -> bool {
        matches!(self, StorageKind::Fencecheck | StorageKind::Postgres)
    }
}

/// `[storage]`: what each kind needs and what it cannot take.
pub(super) fn storage_rules(
    s: &Scenario,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let st = &s.storage;
    match (st.kind, &st.url) {
        (StorageKind::Http, None) => {
            return Err(err(
                "kind",
                "storage.kind = \"http\" needs storage.url = \"http://host:port/\"".into(),
            ))
        }
        (StorageKind::Http, Some(url)) => {
            http_url(url).map_err(|why| err("url", format!("storage.url = {url:?}: {why}")))?;
        }
        (StorageKind::Fencecheck, Some(_)) => {
            return Err(err(
                "url",
                "storage.url goes only with kind = \"http\" (fencecheck's storage is started \
                 by the backend)"
                    .into(),
            ))
        }
        (StorageKind::Fencecheck, None) | (StorageKind::Postgres, _) => {}
    }
    rules(s, err)?;
    if st.kind == StorageKind::Http && st.durability != Durability::Flush {
        return Err(err(
            "durability",
            "storage.durability is fencecheck's storage's; a service of your own (kind = \
             \"http\") decides its own durability"
                .into(),
        ));
    }
    Ok(())
}

/// A `kind = "http"` URL: plain HTTP with a host and a port (the workers reach it
/// through fencecheck's TCP proxies, which name no host; TLS would not verify).
pub fn http_url(url: &str) -> Result<(String, u16, String), String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if u.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported: workers reach the service through fencecheck's \
             TCP proxies, so only plain http:// works",
            u.scheme()
        ));
    }
    let host = u.host_str().ok_or("no host")?.to_string();
    let port = u.port_or_known_default().ok_or("no port")?;
    let mut path = u.path().to_string();
    if let Some(q) = u.query() {
        path = format!("{path}?{q}");
    }
    Ok((host, port, path))
}
