//! Where etcd and the storage run. Both backends hand the rest of the run the same
//! plain [`Deployment`]: endpoints to connect to, and facts for the report.

pub mod process;

use std::path::Path;

use anyhow::{bail, Result};

use crate::scenario::{BackendKind, Scenario};

/// What the run needs to know about the started services.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// etcd client URLs, one per member.
    pub etcd_endpoints: Vec<String>,
    /// Base URL of the storage service.
    pub storage_url: String,
    /// The etcd version actually running, e.g. "3.5.1".
    pub etcd_version: String,
    /// Which backend ran, and why (for `auto`).
    pub backend: String,
    pub backend_reason: String,
}

/// The running services of one run. Stopping is explicit (`stop`) and also happens
/// on drop, so errors and panics do not leave services behind.
pub enum Backend {
    Process(process::ProcessBackend),
}

impl Backend {
    pub async fn start(
        kind: BackendKind,
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(Backend, Deployment)> {
        let reason = match kind {
            BackendKind::Process => "requested".to_string(),
            BackendKind::Auto => {
                "auto: the docker backend is not available in this build (issue 6), so local processes"
                    .to_string()
            }
            BackendKind::Docker => bail!(
                "backend \"docker\" is not available in this build yet; use --backend process"
            ),
        };
        let (b, mut d) = process::ProcessBackend::start(scenario, run_dir, say).await?;
        d.backend_reason = reason;
        Ok((Backend::Process(b), d))
    }

    pub async fn stop(&mut self) {
        match self {
            Backend::Process(b) => b.stop().await,
        }
    }
}
