//! PostgreSQL's container on the docker backend (the backend's `storage.rs` runs
//! it like any storage container): the process backend's settings, its data
//! directory on the volume `<name>-data` (filled by the engine from the image's
//! fresh cluster), its output saved as `postgres.log`.

use std::path::{Path, PathBuf};

use crate::backend::docker::container::{ContainerSpec, MountSpec};
use crate::scenario::Scenario;

use super::image::{PG_DATA, PG_PORT};
pub use super::server::{answers, create_schema};

/// PostgreSQL prints this once it serves, after a crash recovery too.
const READY_LINE: &str = "database system is ready to accept connections";

/// The container `name` from `image`, published on the host's `port`; with its
/// data volume's name and where its output goes.
pub(crate) fn container(
    name: String,
    image: &str,
    scenario: &Scenario,
    run_dir: &Path,
    port: u16,
) -> (ContainerSpec, String, PathBuf) {
    let volume = format!("{name}-data");
    let sync = scenario.storage.synchronous_commit.unwrap_or_default();
    let cmd = super::server::settings("*", sync)
        .into_iter()
        .flat_map(|s| ["-c".to_string(), s])
        .collect();
    let spec = ContainerSpec {
        name,
        image: image.to_string(),
        role: "postgres",
        cmd,
        env: Vec::new(),
        network: None,
        ports: vec![(PG_PORT, port)],
        mounts: vec![MountSpec::Volume {
            name: volume.clone(),
            target: PG_DATA.into(),
        }],
        // The image's `postgres` user.
        user: None,
        ready_line: READY_LINE,
        auto_remove: false,
    };
    (spec, volume, run_dir.join(super::server::LOG))
}
