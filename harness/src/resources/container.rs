//! A resource's own server on a container backend (docker today), said once and
//! backend-neutrally, as a lock system's members are (`systems/members.rs`): the
//! image to build, and the container to run from it — its arguments, its port,
//! its data directory, how to tell it serves. The backend realizes it
//! (`backend/docker/storage.rs`) without knowing which resource it is.

use std::net::SocketAddr;

use anyhow::Result;

use crate::image_context::BuildContext;

/// The container a [`ContainerStorage`] runs in.
#[derive(Debug, Clone)]
pub struct StorageSpec {
    /// The image's entry point (the kubernetes backend runs it under its in-pod
    /// agent, so it names it).
    pub program: &'static [&'static str],
    /// Arguments after the image's entry point.
    pub args: Vec<String>,
    /// The port it listens on inside its container.
    pub port: u16,
    /// Its data directory in the container: a volume of its own, kept across a
    /// restart of the container (crash recovery runs on it).
    pub data_dir: &'static str,
    /// Printed once it serves (after a crash recovery too).
    pub ready_line: &'static str,
    /// Its output's file name in the run directory.
    pub log: &'static str,
}

/// A resource that runs its own server in a container (PostgreSQL), not
/// fencecheck's storage service.
#[async_trait::async_trait]
pub trait ContainerStorage: Send + Sync {
    /// Its image's name and its container's role, e.g. "postgres": the container
    /// is `<run>-<name>`, its volume `<run>-<name>-data`.
    fn name(&self) -> &'static str;
    /// Its name in messages, e.g. "PostgreSQL".
    fn what(&self) -> &'static str;
    /// Its image's version and build context, from what this machine has; an
    /// error says what is not installed.
    fn image(&self) -> Result<(String, BuildContext)>;
    /// The container to run from the image.
    fn spec(&self) -> StorageSpec;
    /// Whether it answers at `addr` before `end` (one bounded try).
    async fn answers(&self, addr: SocketAddr, end: tokio::time::Instant) -> bool;
    /// Once it first answers: what it needs before a worker comes (its tables).
    async fn prepare(&self, addr: SocketAddr) -> Result<()>;
}
