//! Telling the harness which worker an external client's session belongs to, so
//! faults aimed at the holder find its worker (and with it the client, in the
//! worker's process group). The adapter knows nothing of fencecheck's owner
//! entries; the worker writes them itself, next to what the library wrote, with
//! its own connection through its own proxies.
//!
//! How that is done is each system's own keyspace contract, so each system's
//! folder implements [`Owners`] (`external.rs`) and hands it out through
//! [`crate::systems::System::external_owners`]; this folder names no system.

use anyhow::Result;

/// What a worker was told of an adapter's session or grant, tied to the owner
/// entries the harness reads (one per system, fresh per worker).
#[async_trait::async_trait]
pub trait Owners: Send {
    /// The lock the adapter is asked for, in the system's keyspace (the one the
    /// harness's observer watches).
    fn lock(&self, name: &str) -> String;
    /// The owner value the adapter must store as the lock's value, with the
    /// session it names (`handle` when the library has none), for systems whose
    /// owner travels in the value; `None` for the others.
    fn owner_value(&self, _worker: u32, _session: i64, _handle: i64) -> Option<(i64, String)> {
        None
    }
    /// After `open`: the session the client reported (never 0).
    async fn session(&mut self, _worker: u32, _session: i64) -> Result<()> {
        Ok(())
    }
    /// After a grant: reads the entry's lease or session from the service (a
    /// library may take a lease per lock, or be on a session it opened itself)
    /// and names its owner if not done yet; returns it.
    async fn granted(&mut self, _worker: u32, _entry: &str) -> Result<Option<i64>> {
        Ok(None)
    }
    /// At the end: owner entries that would outlive the worker go.
    async fn close(&mut self) {}
}

/// The text of an owner entry: which worker, and its pid (faults signal it).
pub fn owner_text(worker: u32) -> String {
    format!("{worker} {}", std::process::id())
}
