//! The Docker engine, reached through testcontainers' own client (`DOCKER_HOST`,
//! else the local socket), so the backend and testcontainers share one connection
//! setup.
//!
//! No version negotiation: bollard 0.21.1 (pinned in Cargo.toml) builds request
//! paths without the `/v1.53` prefix, and an engine answers an unversioned request
//! at its own API version (Docker 20.10: 1.41).

use std::time::Duration;

use anyhow::{Context, Result};
use testcontainers::bollard::Docker;

/// How long `auto` waits for an engine to answer before choosing processes.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an explicit `--backend docker` waits for the engine.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// A Docker engine that answered.
pub struct Engine {
    pub docker: Docker,
    /// e.g. "20.10.24+dfsg1 (API 1.41)".
    pub version: String,
}

/// Where the engine is expected, for messages (testcontainers reads the same
/// variable).
pub(super) fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

/// Connects to the engine and asks its version, within `timeout`.
pub async fn engine(timeout: Duration) -> Result<Engine> {
    let host = docker_host();
    let ask = async {
        let d = testcontainers::core::client::docker_client_instance()
            .await
            .with_context(|| format!("cannot connect to the Docker engine at {host}"))?;
        let v = d
            .version()
            .await
            .with_context(|| format!("the Docker engine at {host} did not answer"))?;
        anyhow::Ok((d, v))
    };
    let (docker, v) = tokio::time::timeout(timeout, ask).await.map_err(|_| {
        anyhow::anyhow!(
            "the Docker engine at {host} gave no answer within {}",
            humantime::format_duration(timeout)
        )
    })??;
    let version = format!(
        "{} (API {})",
        v.version.unwrap_or_default(),
        v.api_version.unwrap_or_default()
    );
    Ok(Engine { docker, version })
}

/// A connection of its own, not testcontainers' shared one: for the clean-up of a
/// dropped run, which runs on a runtime of its own while the run's runtime may be
/// shutting down, and must not reuse connections driven by that runtime.
pub(super) async fn fresh(timeout: Duration) -> Result<Docker> {
    let host = docker_host();
    let d = Docker::connect_with_defaults()
        .with_context(|| format!("cannot connect to the Docker engine at {host}"))?;
    tokio::time::timeout(timeout, d.ping())
        .await
        .map_err(|_| anyhow::anyhow!("the Docker engine at {host} gave no answer"))?
        .with_context(|| format!("the Docker engine at {host} did not answer"))?;
    Ok(d)
}
