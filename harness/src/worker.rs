//! The lock-contending worker: a separate OS process (hidden `worker` subcommand), so
//! a SIGSTOP freezes it for real — its session keepalives included.
//!
//! Loop until the run ends: (re)open a session → acquire the lock (the client
//! reports the grant's place in the service's own order) → `ops_per_hold`
//! read-modify-write increments on the fenced resource, each request carrying the
//! token and the grant → release. The hold time is spread between each read and its
//! write (the think time of a read-modify-write), so a pause lands between a read and
//! the write that depends on it, as in the classic fencing diagram.
//!
//! The worker neither knows nor cares which lock service or resource runs: both sit
//! behind seams (`crate::systems::client`, `crate::resources`). Nor does this loop
//! record anything itself: the client and the resource are wrapped in
//! [`recording::Recording`], which writes every call as an `invoke` and its
//! completion (`ok`, `fail` when it surely did not happen, `info` when it may
//! have), Jepsen's way.
//!
//! A worker whose session is lost records it (`keepalive-lost`) and carries on with
//! the hold it is in, as a real, unaware client would: that is the bug being tested.
//! Only at its next acquisition does it notice, as `concurrency.Session.Done()`
//! would, and open a new session.
//!
//! A naive worker (`[workload] behaviour = "naive"`, Jepsen's 2020 lock-set client)
//! does not notice even then: it goes on acquiring under the lost session and opens
//! a new one only once an acquisition fails (etcd: `Lock` on a lease that is gone).
//! What its lock client trusts is the client's business (`crate::systems::etcd::client`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::record::history::{monotonic_ns, EventWriter, Process};
use crate::resources::{FencedResource, Reach};
use crate::scenario::TokenMode;
use crate::systems::client::{Acquire, Behaviour, ClientConfig, Granted, LockClient};
use fencecheck_storage::{OpKind, Request, Verdict};

pub mod recording;

use recording::{Current, Log, Recording};

/// Where the harness passes a worker its service's access material (the
/// `lock.access` of its [`WorkerConfig`]); defined beside that material, so the
/// adapter's child (`systems/external/`) keeps it from the adapter without
/// importing the worker.
pub use crate::systems::service::ACCESS_ENV;

/// Everything a worker process needs, passed as one JSON argument, all but
/// the access material ([`ACCESS_ENV`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub id: u32,
    pub lock: ClientConfig,
    /// The fenced resource, as this worker reaches it (through its own proxy).
    pub resource: Reach,
    pub token: TokenMode,
    pub keys: u32,
    pub ops_per_hold: u32,
    pub hold_min_ms: u64,
    pub hold_max_ms: u64,
    /// `[workload] rest`: the pause after a hold before the next acquire.
    #[serde(default)]
    pub rest_min_ms: u64,
    #[serde(default)]
    pub rest_max_ms: u64,
    pub seed: u64,
    pub events: PathBuf,
    /// `CLOCK_MONOTONIC` time at which to stop starting new holds.
    pub end_ns: u64,
    /// Where the worker runs in a pod (the kubernetes backend), it is created
    /// before the run starts and waits for this file, which holds the run's
    /// `end_ns` (it overrides the one above): all start together once every pod
    /// runs, and the run's clock starts then, not a pod start earlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_gate: Option<PathBuf>,
}

/// How long a gated worker waits for its gate before it gives up.
const GATE_DEADLINE: Duration = Duration::from_secs(300);

/// Waits for `gate` to exist and returns what is written in it: the run's
/// `end_ns`, and on a node that is not the harness's machine the offset of the
/// harness's monotonic clock to this one's (`END OFFSET`, ns).
async fn wait_gate(gate: &std::path::Path) -> Result<(u64, i64)> {
    let t0 = std::time::Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(gate) {
            return parse_gate(&text).with_context(|| {
                format!(
                    "the start gate {} holds no end time (and offset): {text:?}",
                    gate.display()
                )
            });
        }
        anyhow::ensure!(
            t0.elapsed() < GATE_DEADLINE,
            "the start gate {} did not open within {GATE_DEADLINE:?}",
            gate.display()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `END` or `END OFFSET` (see [`wait_gate`]).
fn parse_gate(text: &str) -> Option<(u64, i64)> {
    let mut f = text.split_whitespace();
    let end = f.next()?.parse().ok()?;
    let offset = match f.next() {
        Some(o) => o.parse().ok()?,
        None => 0,
    };
    f.next().is_none().then_some((end, offset))
}

struct Worker {
    cfg: WorkerConfig,
    lock: Recording<dyn LockClient>,
    storage: Recording<dyn FencedResource>,
    next_request: u64,
}

enum HoldOutcome {
    Done,
    SessionGone,
    RunOver,
    Retry,
}

pub async fn run(mut cfg: WorkerConfig) -> Result<()> {
    if let Some(gate) = cfg.start_gate.clone() {
        let (end_ns, offset) = wait_gate(&gate).await?;
        // Before anything is recorded: every time stamp in the harness's clock.
        fencecheck_storage::set_clock_offset(offset);
        cfg.end_ns = end_ns;
    }
    let log = Log::new(Process::Worker(cfg.id), EventWriter::create(&cfg.events)?);
    let lock = crate::systems::connect_client(&cfg.lock).await?;
    let storage = cfg.resource.open(Duration::from_secs(2))?;
    let mut w = Worker {
        lock: Recording::new(log.clone(), lock, cfg.token),
        storage: Recording::new(log, storage, cfg.token),
        cfg,
        next_request: 0,
    };
    w.main_loop().await
}

impl Worker {
    async fn main_loop(&mut self) -> Result<()> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ (u64::from(self.cfg.id) << 32));
        let mut session: Option<Current> = None;
        let me = self.cfg.id;
        while monotonic_ns() < self.cfg.end_ns {
            if self.lock.client_broke(me)? {
                break;
            }
            // The loss is recorded as it happens either way; only the careful
            // worker acts on it here.
            let careful = self.cfg.lock.behaviour == Behaviour::Careful;
            if session.as_ref().is_none_or(|s| careful && s.is_lost()) {
                session = None;
                match self.lock.open_session().await {
                    Ok(s) => session = Some(s),
                    Err(e) => {
                        tracing::warn!("opening a session failed: {e:#}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let Some(s) = session.as_ref() else { continue };
            let sid = s.id;
            let key = format!("k{}", rng.gen_range(0..self.cfg.keys));
            let hold_ms = rng.gen_range(self.cfg.hold_min_ms..=self.cfg.hold_max_ms);
            match self.hold(&key, sid, hold_ms).await? {
                // Drawn only when asked for: a seed's keys and holds stay
                // what they were before `rest` existed.
                HoldOutcome::Done if self.cfg.rest_max_ms > 0 => {
                    let rest = rng.gen_range(self.cfg.rest_min_ms..=self.cfg.rest_max_ms);
                    tokio::time::sleep(Duration::from_millis(rest)).await;
                }
                HoldOutcome::Done => {}
                HoldOutcome::SessionGone => session = None,
                HoldOutcome::RunOver => break,
                HoldOutcome::Retry => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        drop(session);
        // Recorded before `close`, which may itself wait for an unanswering client.
        self.lock.client_broke(me)?;
        self.lock.close_session().await;
        self.lock.client_broke(me)?;
        Ok(())
    }

    async fn hold(&mut self, key: &str, session: i64, hold_ms: u64) -> Result<HoldOutcome> {
        let remaining = Duration::from_nanos(self.cfg.end_ns.saturating_sub(monotonic_ns()));
        let g = match self.lock.acquire(key, session, remaining).await? {
            None => return Ok(HoldOutcome::RunOver),
            Some(Acquire::Failed { session_gone, .. }) => {
                return Ok(if session_gone {
                    HoldOutcome::SessionGone
                } else {
                    HoldOutcome::Retry
                });
            }
            Some(Acquire::Unknown { id, .. }) => {
                // Maybe held: let go, and try again.
                if let Some(id) = id {
                    let g = Granted {
                        grant: 0,
                        session,
                        id,
                        counter: None,
                        external: None,
                    };
                    self.lock.release(key, &g, None).await?;
                }
                return Ok(HoldOutcome::Retry);
            }
            Some(Acquire::Granted(g)) => g,
        };
        let think = Duration::from_millis(hold_ms) / self.cfg.ops_per_hold.max(1);
        let op = Op {
            key,
            token: g.token(self.cfg.token),
            grant: g.grant,
            // The grant's own session (see `Recording::acquire`).
            session: g.session,
        };
        for _ in 0..self.cfg.ops_per_hold {
            let req = self.request(&op, OpKind::Read, None);
            let Some(read) = self.storage.call(&req, Duration::ZERO).await? else {
                break;
            };
            // check-then-write: the think time goes between the check and the update.
            let inside = self.storage.thinks_inside_writes();
            if !inside {
                tokio::time::sleep(think).await;
            }
            let think_inside = if inside { think } else { Duration::ZERO };
            let value = read.value.unwrap_or(0) + 1;
            let req = self.request(&op, OpKind::Write, Some(value));
            let answer = self.storage.call(&req, think_inside).await?;
            if !answer.is_some_and(|a| a.verdict == Verdict::Accepted) {
                break;
            }
        }
        self.lock.release(key, &g, Some(g.grant)).await?;
        Ok(HoldOutcome::Done)
    }

    fn request(&mut self, op: &Op<'_>, kind: OpKind, val: Option<i64>) -> Request {
        self.next_request += 1;
        Request {
            op: kind,
            key: op.key.to_string(),
            val,
            token: op.token,
            revision: Some(op.grant),
            lease: Some(op.session),
            client: self.cfg.id.to_string(),
            request_id: self.next_request,
        }
    }
}

/// What every storage request of one hold carries.
struct Op<'a> {
    key: &'a str,
    token: Option<i64>,
    grant: i64,
    session: i64,
}

#[cfg(test)]
mod tests {
    use super::parse_gate;

    #[test]
    fn a_gate_holds_the_end_and_maybe_the_clock_offset() {
        assert_eq!(parse_gate("123\n"), Some((123, 0)));
        assert_eq!(parse_gate("123 -45\n"), Some((123, -45)));
        assert_eq!(parse_gate(""), None);
        assert_eq!(parse_gate("x"), None);
        assert_eq!(parse_gate("1 2 3"), None);
    }
}
