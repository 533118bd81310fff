//! `[storage] kind = "postgres"`: its own settings (isolation level,
//! `synchronous_commit`) and the rules that keep them, and `check-then-write`,
//! to PostgreSQL (on either backend).

use serde::{Deserialize, Serialize};

use super::{Durability, Fencing, Scenario, ScenarioError, StorageKind};

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
