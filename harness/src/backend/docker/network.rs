//! A run's network and volumes, and the peer-network cut that isolates a member.
//! Created through bollard because testcontainers cannot label them (nor make a
//! network internal), and the run's label is how clean-up finds them.
//!
//! - `fencecheck-<id>-peers`: the run's own network, internal, cluster traffic
//!   only. Members are created on it and reach each other by container name.
//! - the engine's default `bridge`: the published ports (members join it once
//!   started; the storage and the reaper run on it). It has no name resolution,
//!   so a member's name resolves on the peer network alone, and disconnecting a
//!   member from the peer network cuts its peer links and nothing else (clients
//!   still reach it, as with the process backend's peer proxies). A user-defined
//!   bridge would not do: Docker resolves container names on every one.

use anyhow::{Context, Result};
use testcontainers::bollard::models::{
    EndpointSettings, NetworkConnectRequest, NetworkCreateRequest, NetworkDisconnectRequest,
    VolumeCreateRequest,
};
use testcontainers::bollard::Docker;

use super::cleanup::{tracked, InFlight};
use super::labels;

/// The network of the published ports (see above).
pub(super) const CLIENT_NETWORK: &str = "bridge";

/// Creates the run's peer network.
pub(super) async fn create_peer_network(
    d: &Docker,
    inflight: &InFlight,
    run_id: &str,
    name: &str,
) -> Result<()> {
    let req = NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(true),
        labels: Some(labels(run_id, "network")),
        ..Default::default()
    };
    let d = d.clone();
    tracked(inflight, async move { d.create_network(req).await })
        .await?
        .with_context(|| format!("docker network create {name}"))?;
    Ok(())
}

/// Creates a labelled named volume (a member's data: it outlives a kill).
pub(super) async fn create_volume(
    d: &Docker,
    inflight: &InFlight,
    run_id: &str,
    name: &str,
    role: &str,
) -> Result<()> {
    let req = VolumeCreateRequest {
        name: Some(name.to_string()),
        labels: Some(labels(run_id, role)),
        ..Default::default()
    };
    let d = d.clone();
    tracked(inflight, async move { d.create_volume(req).await })
        .await?
        .with_context(|| format!("docker volume create {name}"))?;
    Ok(())
}

/// Connects a container to `network` (it is known there by its name).
pub(super) async fn connect(
    d: &Docker,
    inflight: &InFlight,
    network: &str,
    container: &str,
) -> Result<()> {
    let req = NetworkConnectRequest {
        container: container.to_string(),
        endpoint_config: Some(EndpointSettings::default()),
    };
    let (d, net) = (d.clone(), network.to_string());
    tracked(inflight, async move { d.connect_network(&net, req).await })
        .await?
        .with_context(|| format!("docker network connect {network} {container}"))
}

pub(super) async fn disconnect(
    d: &Docker,
    inflight: &InFlight,
    network: &str,
    container: &str,
) -> Result<()> {
    let req = NetworkDisconnectRequest {
        container: container.to_string(),
        force: Some(true),
    };
    let (d, net) = (d.clone(), network.to_string());
    tracked(
        inflight,
        async move { d.disconnect_network(&net, req).await },
    )
    .await?
    .with_context(|| format!("docker network disconnect {network} {container}"))
}
