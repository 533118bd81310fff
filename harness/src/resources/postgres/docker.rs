//! PostgreSQL's container on the docker backend (the backend's `storage.rs` runs
//! it like any resource's own server): the process backend's settings, its data
//! directory on the volume `<name>-data` (filled by the engine from the image's
//! fresh cluster), its output saved as `postgres.log`.

use std::net::SocketAddr;

use anyhow::{Context, Result};

use super::image::{PG_DATA, PG_PORT};
use crate::image_context::BuildContext;
use crate::resources::container::{ContainerStorage, StorageSpec};
use crate::scenario::{Scenario, SyncCommit};

/// PostgreSQL prints this once it serves, after a crash recovery too.
const READY_LINE: &str = "database system is ready to accept connections";

/// PostgreSQL as a container: the scenario's settings it runs with.
#[derive(Default)]
pub struct PgContainer {
    sync: SyncCommit,
    /// The rows of its `kv` table (one per workload key).
    keys: u32,
}

impl PgContainer {
    pub fn new(s: &Scenario) -> PgContainer {
        PgContainer {
            sync: s.storage.synchronous_commit.unwrap_or_default(),
            keys: s.workload.keys,
        }
    }
}

#[async_trait::async_trait]
impl ContainerStorage for PgContainer {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn what(&self) -> &'static str {
        "PostgreSQL"
    }

    /// Debian's postgresql-15 on this machine.
    fn image(&self) -> Result<(String, BuildContext)> {
        let version = super::image::version()?;
        let ctx = super::image::context().context("cannot package PostgreSQL 15 for an image")?;
        Ok((version, ctx))
    }

    fn spec(&self) -> StorageSpec {
        StorageSpec {
            program: &[
                "/usr/lib/postgresql/15/bin/postgres",
                "-D",
                PG_DATA,
                "-c",
                "hba_file=/etc/fencecheck/pg_hba.conf",
            ],
            args: super::server::settings("*", self.sync)
                .into_iter()
                .flat_map(|s| ["-c".to_string(), s])
                .collect(),
            port: PG_PORT,
            data_dir: PG_DATA,
            ready_line: READY_LINE,
            log: super::server::LOG,
        }
    }

    async fn answers(&self, addr: SocketAddr, end: tokio::time::Instant) -> bool {
        super::server::answers(&addr.to_string(), end).await
    }

    async fn prepare(&self, addr: SocketAddr) -> Result<()> {
        super::server::create_schema(addr, self.keys).await
    }
}
