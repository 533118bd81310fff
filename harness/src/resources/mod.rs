//! The fenced-resource seam: where a worker's reads and writes land, and the one
//! factory that turns `[storage]` into both of its sides.
//!
//! - Worker side: a [`FencedResource`]. Requests and answers are the storage
//!   protocol's (`fencecheck_storage::Request`, `Answer`): op, key, value, token,
//!   and the grant and session they come from.
//! - Harness side: a [`Resource`] — what happens before the backend starts (a
//!   storage of the user's own is probed), how a worker and the final reads reach
//!   it ([`Reach`]), what the run records of it, and what is collected from it
//!   while it is still up (PostgreSQL's log table becomes `storage.jsonl`).
//!
//! fencecheck's own storage and a service of the user's own speak the protocol
//! over HTTP (`fencecheck.rs`); PostgreSQL is one folder (`postgres/`). A new
//! resource is a module beside them and one arm in [`resource`] and [`Reach`].

pub mod container;
pub mod fencecheck;
pub mod postgres;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use fencecheck_storage::{Answer, Request};
use serde::{Deserialize, Serialize};

use crate::record::before::KeyBefore;
use crate::scenario::{Scenario, ScenarioError, Source, StorageKind};
use container::ContainerStorage;

#[async_trait::async_trait]
pub trait FencedResource: Send {
    /// Sends one request. An error means the outcome is unknown: the request may or
    /// may not have reached the resource.
    async fn call(&mut self, req: &Request) -> Result<Answer>;

    /// Does this resource want a write's think time inside the write, between its
    /// check and its update (PostgreSQL `check-then-write`)? Otherwise the worker
    /// thinks between the read and the write.
    fn thinks_inside_writes(&self) -> bool {
        false
    }

    /// A write with the think time inside it (see `thinks_inside_writes`).
    async fn call_thinking(&mut self, req: &Request, think: std::time::Duration) -> Result<Answer> {
        tokio::time::sleep(think).await;
        self.call(req).await
    }

    /// Retries the resource made since the last call of this (PostgreSQL:
    /// serialization failures, SQLSTATE 40001), for the report.
    fn take_retries(&mut self) -> u32 {
        0
    }
}

/// How one client (a worker through its proxy, or the final reads straight)
/// reaches the resource: serialized into the worker's configuration, so the
/// worker process opens the same resource the harness chose.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Reach {
    /// The storage protocol over HTTP at `url` (fencecheck's storage or the user's).
    Http { url: String },
    /// PostgreSQL at `addr`.
    Postgres(postgres::PgClientConfig),
}

impl Reach {
    /// The worker side of the factory: the resource this names. `timeout` bounds
    /// each call (past it the call's outcome is unknown).
    pub fn open(&self, timeout: Duration) -> Result<Box<dyn FencedResource>> {
        Ok(match self {
            Reach::Http { url } => Box::new(fencecheck::HttpStorage::new(url.clone(), timeout)?),
            Reach::Postgres(cfg) => Box::new(postgres::PgResource::new(cfg.clone(), timeout)),
        })
    }
}

/// A storage of the user's own, found before the run: where the backend's links
/// lead to, and what each workload key held.
pub struct Probed {
    pub addr: SocketAddr,
    pub before: Vec<KeyBefore>,
}

/// The harness side of a run's fenced resource (see the module comment).
#[async_trait::async_trait]
pub trait Resource: Send + Sync {
    /// Before anything starts: a storage of the user's own answers a protocol
    /// probe of every workload key, or the scenario is bad input (naming the
    /// line of `scenario_path`). `None`: the backend starts the storage.
    async fn probe(&mut self, source: &Source) -> Result<Option<Probed>, ScenarioError> {
        let _ = source;
        Ok(None)
    }

    /// The run's `resource` line (run.json, the report).
    fn describe(&self) -> String;

    /// How a client whose link to the storage is `addr` reaches it.
    fn reach(&self, addr: SocketAddr) -> Reach;

    /// After the main phase, on every path that started the storage (an
    /// interrupted run too), while it is still up: what the checkers need from it
    /// that it did not write to the run directory itself. Returns a line for the
    /// user, if there is one to say; a failure is logged, not fatal: the run's
    /// files say what is missing.
    async fn collect(&self, storage: SocketAddr, run_dir: &Path) -> Option<String> {
        let _ = (storage, run_dir);
        None
    }

    /// On the docker backend, a resource that runs its own server (not
    /// fencecheck's storage service) says which image and container
    /// ([`container`]). `None`: the backend runs fencecheck's storage.
    fn docker_storage(&self, scenario: &Scenario) -> Option<Box<dyn ContainerStorage>> {
        let _ = scenario;
        None
    }

    /// On the process backend, a resource that runs its own server (not
    /// fencecheck's storage service) starts it here, ready and with its tables.
    /// `None`: the backend starts fencecheck's storage.
    async fn process_server(
        &self,
        scenario: &Scenario,
        run_dir: &Path,
    ) -> Option<Result<Box<dyn StorageServer>>> {
        let _ = (scenario, run_dir);
        None
    }
}

/// A storage server a resource runs itself on the process backend: the
/// backend's storage faults (pause, kill, restart) and its heal and stop go here.
#[async_trait::async_trait]
pub trait StorageServer: Send {
    /// Where it listens.
    fn addr(&self) -> SocketAddr;
    /// Its name, for messages ("PostgreSQL").
    fn what(&self) -> &'static str;
    /// Freezes it whole; the answer is the nemesis event's detail.
    fn pause(&mut self) -> Result<serde_json::Value>;
    fn resume(&mut self) -> Result<()>;
    /// Continues it if it was paused; says whether it was.
    fn heal_paused(&mut self) -> bool;
    /// A crash: SIGKILL, its data stays.
    async fn kill(&mut self) -> Result<serde_json::Value>;
    fn is_running(&self) -> bool;
    /// Starts it again on its data and waits until it answers.
    async fn restart(&mut self) -> Result<serde_json::Value>;
    /// Stops it for good at the run's end.
    async fn stop(&mut self);
}

/// The factory: `[storage]` → the harness side of its resource (whose
/// [`Resource::reach`] gives the worker side). The only match on the storage kind
/// outside the config.
pub fn resource(s: &Scenario) -> Box<dyn Resource> {
    match s.storage.kind {
        StorageKind::Fencecheck => Box::new(fencecheck::Http::ours(s)),
        StorageKind::Http => Box::new(fencecheck::Http::users(s)),
        StorageKind::Postgres => Box::new(postgres::Postgres::new(s)),
    }
}

/// Every resource's own server image, for `fencecheck images` (each with the
/// settings a scenario that says nothing more has: an image does not depend on
/// them).
pub fn every_container() -> Vec<Box<dyn ContainerStorage>> {
    vec![Box::<postgres::docker::PgContainer>::default()]
}
