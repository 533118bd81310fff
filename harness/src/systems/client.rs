//! The lock-client seam, worker side: what a worker needs from a lock service,
//! whatever the service. Each implementation sits beside the trait (`etcd`,
//! `zookeeper`); the worker's read-modify-write loop and its recording
//! (`crate::worker`) never see which one runs, as etcd robustness keeps recording
//! out of its `Traffic` behind a `RecordingClient`.
//!
//! The client reports the grant's place in the **service's own order** (etcd: the
//! lock key's CreateRevision; ZooKeeper: the lock znode's czxid). The token a worker
//! sends to the storage is derived from it by the scenario's token mode
//! ([`Granted::token`]); the checkers judge that token against the grant order.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::scenario::TokenMode;

/// How a worker reaches its lock service: the service's client endpoints through
/// the worker's own fault proxies, and the session TTL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientConfig {
    pub service: crate::scenario::ServiceKind,
    /// `host:port` of every member, as this worker reaches it (through its proxies).
    pub endpoints: Vec<String>,
    pub ttl: Duration,
    /// Worker id and pid, registered with the service so the harness can tell which
    /// worker a session belongs to (etcd: an owner key on the lease; ZooKeeper: an
    /// ephemeral owner node of the session).
    pub worker: u32,
    /// The token the worker will send: Redlock takes its `counter` from the first
    /// instance and is held only with that instance's grant.
    #[serde(default = "no_token")]
    pub token: TokenMode,
    /// What the worker does with a lost session (`[workload] behaviour`, or
    /// `[client] behaviour` for an external client).
    #[serde(default)]
    pub behaviour: Behaviour,
    /// `[client]`: the lock client is the user's adapter program, spoken to over
    /// `docs/client-protocol.md`, instead of fencecheck's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalConfig>,
    /// The token and CA the service asks for (Kubernetes), made per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<crate::systems::service::ServiceAccess>,
    /// Kubernetes: the elector's renew deadline and retry period (`[lock]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<Duration>,
}

pub use crate::scenario::Behaviour;

fn no_token() -> TokenMode {
    TokenMode::None
}

/// An open session: etcd a lease kept alive every TTL/3, ZooKeeper a session.
pub struct Session {
    pub id: i64,
    /// Becomes `Some(reason)` once the client knows the session is lost
    /// (keepalive failed, session expired). The worker records it as it happens.
    pub lost: watch::Receiver<Option<String>>,
}

/// A lock held, as the client knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The grant's place in the service's own order (etcd CreateRevision,
    /// ZooKeeper czxid): grows with every grant, service-wide.
    pub grant: i64,
    /// The session the grant belongs to (etcd lease ID, ZooKeeper session id).
    pub session: i64,
    /// The grant's identity in the service, to release it (etcd lock key,
    /// ZooKeeper znode path, Redis owner value).
    pub id: String,
    /// A counter the service handed out with the grant, apart from its order
    /// (Redis: `INCR` in the acquire script), for `token = "counter"`.
    pub counter: Option<i64>,
    /// An external client's answer (`[client]`): its token, which the worker
    /// sends whatever `mode`, and what `check::resolve` matches.
    pub external: Option<GrantDetail>,
}

impl Granted {
    /// The fencing token the scenario says the client sends.
    pub fn token(&self, mode: TokenMode) -> Option<i64> {
        if let Some(d) = &self.external {
            return d.token;
        }
        match mode {
            TokenMode::Grant => Some(self.grant),
            TokenMode::Session => Some(self.session),
            TokenMode::None => None,
            TokenMode::Counter => self.counter,
            // Redis and Redlock report their random owner nonce as `grant` (they
            // cannot know the grant's place; `check::resolve` fills it in later).
            TokenMode::Owner => Some(self.grant),
        }
    }
}

/// `[client]` as a worker needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExternalConfig {
    /// argv, `command[0]` resolved.
    pub command: Vec<String>,
    /// Which token of the answer is sent (`[client] token`).
    pub token: String,
    /// Send no token at all (`[storage] token = "none"`).
    #[serde(default)]
    pub no_token: bool,
    /// Where the client's stderr goes.
    pub log: PathBuf,
}

/// A broken protocol rule: what, and the offending line (truncated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(l) = &self.line {
            write!(f, ": {l}")?;
        }
        Ok(())
    }
}

/// An external client's grant as it answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantDetail {
    /// The token the worker sends to the storage (`[client] token`, made an integer).
    pub token: Option<i64>,
    /// For the `acquire` `ok` event: `{"client": {handle, entry, value, revision,
    /// token, tokens}}`, what `check::resolve` matches against the observations.
    pub detail: serde_json::Value,
}

/// The outcome of one acquisition.
#[derive(Debug)]
pub enum Acquire {
    Granted(Granted),
    /// Known not held. `session_gone`: the session is lost and must be reopened.
    /// `told`: the service did answer "granted" (with this identity), but the
    /// client found the grant already gone (etcd 3.4 answers `Lock` after the lease
    /// expired) — counted by the grant-validity finding.
    Failed {
        error: String,
        session_gone: bool,
        told: Option<String>,
    },
    /// Maybe held (e.g. granted but its grant could not be read): the caller lets go
    /// of `id` if there is one and tries again.
    Unknown {
        error: String,
        id: Option<String>,
    },
}

/// A lock service client. Calls are bounded by their own timeouts, except
/// `acquire`, which waits for the lock as long as the caller lets it (the caller
/// drops the future at the end of the run).
#[async_trait::async_trait]
pub trait LockClient: Send {
    /// Opens a new session (and whatever keeps it alive).
    async fn open_session(&mut self) -> Result<Session>;
    /// Waits for lock `name` under the current session.
    async fn acquire(&mut self, name: &str) -> Acquire;
    /// Lets go of a grant.
    async fn release(&mut self, g: &Granted) -> Result<()>;
    /// Ends the current session at the service (end of run), best effort.
    async fn close_session(&mut self);
    /// A broken protocol rule that ends the worker (external clients only): the
    /// worker records it and stops.
    fn client_error(&self) -> Option<ClientError> {
        None
    }
    /// Requests the client left unanswered since the last call (external
    /// clients): recorded as unknown, not fatal.
    fn take_notices(&mut self) -> Vec<ClientError> {
        Vec::new()
    }
}

/// Bounds an RPC: every call but `acquire` gives up after this.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(5);
