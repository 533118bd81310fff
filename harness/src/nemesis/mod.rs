//! The nemesis: injects the planned faults at their times and records what it
//! actually did as `nemesis` events (an `invoke` at injection, `ok` when healed,
//! `fail` when it could not be done), each pair sharing a `fault_id`.

//! One file per fault kind, each with `available` (from the system's and the
//! backend's declared capabilities, asked by `crate::plan` before anything starts)
//! and `inject`: `pause`, `session` (revoke-lease, expire-session), `delay`,
//! `partition` (both over `net`), `kill`, `clock` (clock-jump).

pub mod clock;
pub mod delay;
pub mod effect;
pub mod kill;
pub mod net;
pub mod partition;
pub mod pause;
pub mod schedule;
pub mod session;
mod target;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::backend::caps::Caps;
use crate::backend::Backend;
use crate::links::Links;
use crate::record::history::{Event, EventType, EventWriter, Process, F};
use crate::scenario::{FaultKind, ServiceKind, Target};
use crate::systems::service::{Capabilities, LockService};
pub use schedule::{plan, Planned};
pub use target::{Resolved, Victim};

/// What a fault's availability is decided from: the system's and the backend's
/// declared capabilities, the fault's kind and its target.
pub struct Ask<'a> {
    pub service: ServiceKind,
    pub system: &'a Capabilities,
    pub backend: &'a Caps,
    pub kind: FaultKind,
    pub target: Target,
}

/// Can this fault be done? The target's needs first, then the kind's.
pub fn available(a: &Ask) -> Result<(), String> {
    target::available(a)?;
    match a.kind {
        FaultKind::Pause => pause::available(a),
        FaultKind::RevokeLease | FaultKind::ExpireSession => session::available(a),
        FaultKind::Delay => delay::available(a),
        FaultKind::Partition => partition::available(a),
        FaultKind::Kill => kill::available(a),
        FaultKind::ClockJump => clock::available(a),
    }
}

/// What the nemesis can reach.
pub struct World {
    /// The lock service, reached directly (never through the fault proxies).
    pub service: Arc<dyn LockService>,
    /// How many members it has.
    pub members: usize,
    /// Worker id → pid.
    pub workers: HashMap<u32, u32>,
    pub backend: Arc<tokio::sync::Mutex<Backend>>,
    pub links: Arc<Links>,
    /// Worker id → its clockshim offset file, for workers run under clockshim
    /// (a scenario that steps a worker's clock).
    pub worker_clocks: HashMap<u32, std::path::PathBuf>,
}

pub struct Nemesis {
    world: World,
    log: Mutex<EventWriter>,
    rng: Mutex<ChaCha8Rng>,
    /// Pids this nemesis has stopped and not yet continued: healed on every exit path.
    stopped: Mutex<HashSet<u32>>,
}

impl Nemesis {
    pub fn new(world: World, events: &Path, seed: u64) -> Result<Arc<Nemesis>> {
        Ok(Arc::new(Nemesis {
            world,
            log: Mutex::new(EventWriter::create(events)?),
            // Target choices use their own stream, so they do not shift the schedule.
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x9e37_79b9))),
            stopped: Mutex::new(HashSet::new()),
        }))
    }

    /// Runs the whole plan; returns when every fault has ended.
    pub async fn run(self: Arc<Self>, plan: Vec<Planned>, start: tokio::time::Instant) {
        let mut tasks = Vec::new();
        for p in plan {
            let me = self.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(start + p.at).await;
                me.inject(&p).await;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    async fn inject(&self, p: &Planned) {
        let f = F::Fault(p.kind);
        let resolved = match target::resolve(self, p.target).await {
            Ok(v) => v,
            Err(e) => {
                let mut ev = self.event(p, EventType::Invoke, f);
                ev.detail = Some(serde_json::json!({ "planned_at_ms": p.at.as_millis() as u64 }));
                self.record(&ev);
                let mut end = self.event(p, EventType::Fail, f);
                end.error = Some(format!("{e:#}"));
                self.record(&end);
                return;
            }
        };
        match p.kind {
            FaultKind::Pause => pause::inject(self, p, &resolved).await,
            FaultKind::RevokeLease | FaultKind::ExpireSession => {
                session::inject(self, p, &resolved).await
            }
            FaultKind::Delay => delay::inject(self, p, &resolved).await,
            FaultKind::Partition => partition::inject(self, p, &resolved).await,
            FaultKind::Kill => kill::inject(self, p, &resolved).await,
            FaultKind::ClockJump => clock::inject(self, p, &resolved).await,
        }
    }

    fn event(&self, p: &Planned, kind: EventType, f: F) -> Event {
        let mut e = Event::new(Process::nemesis(), kind, f);
        e.fault_id = Some(p.id);
        e.target = Some(p.target.to_string());
        e
    }

    fn record(&self, e: &Event) {
        match self.log.lock() {
            Ok(mut w) => {
                if let Err(err) = w.write(e) {
                    tracing::error!("cannot record nemesis event: {err}");
                }
            }
            Err(_) => tracing::error!("nemesis log lock poisoned"),
        }
    }

    /// Continues every process this nemesis stopped and clears every link fault.
    /// Safe to call any number of times, from any exit path.
    pub fn heal(&self) {
        if let Ok(mut s) = self.stopped.lock() {
            for pid in s.drain() {
                let _ = pause::cont(pid);
            }
        }
        self.world.links.heal();
    }

    /// The heal phase: every fault removed, every process continued, every killed
    /// member restarted. Returns what had to be undone, for the record.
    pub async fn heal_all(&self) -> Vec<String> {
        self.heal();
        self.world.backend.lock().await.heal().await
    }
}

impl Drop for Nemesis {
    fn drop(&mut self) {
        self.heal();
    }
}
