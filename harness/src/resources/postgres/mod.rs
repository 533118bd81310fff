//! PostgreSQL 15 as the fenced resource (`[storage] kind = "postgres"`), all of it:
//! - `client.rs`: the worker side, one transaction per request with the fencing
//!   rule in SQL;
//! - `server.rs`: the server on the process backend (initdb, start, pause, crash,
//!   restart) and what both backends share: its settings, the readiness probe,
//!   the tables, the export of the log table to `storage.jsonl`;
//! - `image.rs`: the docker backend's image; `docker.rs`: its container.
//!
//! The scenario's PostgreSQL settings stay in the config (`scenario/storage.rs`).

mod client;
pub mod docker;
pub mod image;
mod server;

use std::net::SocketAddr;
use std::path::Path;

pub use client::{PgClientConfig, PgResource};
pub use server::PgServer;

use anyhow::Result;

use super::container::ContainerStorage;
use super::{Reach, Resource, StorageServer};
use crate::record::rundir;
use crate::scenario::{Fencing, Isolation, Scenario, SyncCommit};

/// The harness side of PostgreSQL (the backend starts the server).
pub struct Postgres {
    fencing: Fencing,
    isolation: Isolation,
    sync: SyncCommit,
}

impl Postgres {
    pub fn new(s: &Scenario) -> Postgres {
        Postgres {
            fencing: s.storage.fencing,
            isolation: s.storage.isolation.unwrap_or_default(),
            sync: s.storage.synchronous_commit.unwrap_or_default(),
        }
    }
}

#[async_trait::async_trait]
impl Resource for Postgres {
    fn describe(&self) -> String {
        format!(
            "postgres (isolation {}, synchronous_commit {})",
            self.isolation.as_str(),
            self.sync.as_str()
        )
    }

    fn reach(&self, addr: SocketAddr) -> Reach {
        Reach::Postgres(PgClientConfig {
            addr: addr.to_string(),
            fencing: self.fencing,
            isolation: self.isolation,
        })
    }

    fn docker_storage(&self, s: &Scenario) -> Option<Box<dyn ContainerStorage>> {
        Some(Box::new(docker::PgContainer::new(s)))
    }

    async fn process_server(
        &self,
        scenario: &Scenario,
        run_dir: &Path,
    ) -> Option<Result<Box<dyn StorageServer>>> {
        Some(
            PgServer::start(scenario, run_dir)
                .await
                .map(|s| Box::new(s) as Box<dyn StorageServer>),
        )
    }

    /// The log table becomes `storage.jsonl` while the database is still up.
    async fn collect(&self, storage: SocketAddr, run_dir: &Path) -> Option<String> {
        match server::export(storage, &run_dir.join(rundir::STORAGE_LOG)).await {
            Ok(n) => Some(format!("exported {n} PostgreSQL log rows")),
            Err(e) => {
                tracing::warn!(
                    "exporting PostgreSQL's log table failed: {e:#}; the data stays in {}",
                    run_dir.join(server::DATA).display()
                );
                None
            }
        }
    }
}
