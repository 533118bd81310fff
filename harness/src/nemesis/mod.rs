//! The nemesis: injects the planned faults at their times and records what it
//! actually did as `nemesis` events (an `invoke` at injection, `ok` when healed,
//! `fail` when it could not be done), each pair sharing a `fault_id`.

//! One file per fault kind, each with `available` (from the system's and the
//! backend's declared capabilities, asked by `crate::plan` before anything starts)
//! and `inject`: `pause`, `session` (revoke-lease, expire-session), `delay`,
//! `partition` (both over `net`), `kill`, `clock` (clock-jump).

pub mod aim;
pub mod clock;
pub mod delay;
pub mod effect;
pub mod in_pod;
pub mod kill;
pub mod net;
pub mod partition;
pub mod pause;
mod reported;
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
use crate::scenario::{AimEvent, FaultKind, ServiceKind, Target};
use crate::systems::service::{Capabilities, LockService};
pub use schedule::{plan, AimAt, Planned};
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
    /// The workers are pods on a node that is not this machine: no pid here to
    /// signal (0 above), their pauses go through the backend (`Service::Worker`).
    pub workers_by_backend: bool,
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
    /// Aimed faults: what each fired on, added to its `invoke` event's detail.
    aimed: Mutex<HashMap<u32, serde_json::Value>>,
    /// Workers an aimed pause holds stopped right after a read (by the pause's
    /// id): still between that read and its write, for as long as it lasts.
    between: Mutex<Vec<(u32, aim::Seen)>>,
    /// Workers an aimed fault other than a pause holds stopped in their pods
    /// (by the fault's id): the worker and when its agent stopped it, until
    /// the fault is in place (`in_pod.rs`).
    held: Mutex<HashMap<u32, (u32, u64)>>,
    /// The run directory (where `events` is): the workers' own event files,
    /// read to find a holder the service's owners do not name (`target.rs`).
    run_dir: std::path::PathBuf,
    /// Those files as read so far (`reported.rs`).
    reported: Mutex<reported::Follow>,
    /// The workers' events as they are written (set by `run` when a fault is
    /// aimed or a pause ends on the next grant).
    feed: std::sync::OnceLock<Arc<aim::Feed>>,
}

impl Nemesis {
    pub fn new(world: World, events: &Path, seed: u64) -> Result<Arc<Nemesis>> {
        Ok(Arc::new(Nemesis {
            world,
            log: Mutex::new(EventWriter::create(events)?),
            // Target choices use their own stream, so they do not shift the schedule.
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x9e37_79b9))),
            stopped: Mutex::new(HashSet::new()),
            aimed: Mutex::new(HashMap::new()),
            between: Mutex::new(Vec::new()),
            held: Mutex::new(HashMap::new()),
            run_dir: events.parent().map(Path::to_path_buf).unwrap_or_default(),
            reported: Mutex::new(reported::Follow::default()),
            feed: std::sync::OnceLock::new(),
        }))
    }

    /// Runs the whole plan; returns when every fault has ended. `end` is the
    /// run's end (an aimed fault must still fit before it); `feed` the workers'
    /// events, for the aimed ones.
    pub async fn run(
        self: Arc<Self>,
        plan: Vec<Planned>,
        start: tokio::time::Instant,
        end: tokio::time::Instant,
        feed: Option<Arc<aim::Feed>>,
    ) {
        if let Some(f) = &feed {
            let _ = self.feed.set(f.clone());
        }
        let mut tasks = Vec::new();
        // Each `[[fault]]`'s aimed injections in turn: one is armed after the
        // one before it has ended, so they never overlap.
        let mut aimed: Vec<(usize, Vec<Planned>)> = Vec::new();
        for p in plan {
            if p.aim.is_some() {
                match aimed.iter_mut().find(|(spec, _)| *spec == p.spec) {
                    Some((_, v)) => v.push(p),
                    None => aimed.push((p.spec, vec![p])),
                }
                continue;
            }
            let me = self.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(start + p.at).await;
                me.inject(&p, None).await;
            }));
        }
        for (_, list) in aimed {
            let me = self.clone();
            let feed = feed.clone();
            tasks.push(tokio::spawn(async move {
                let mut free = start;
                for p in list {
                    free = me
                        .aimed(&p, (start + p.at).max(free), end, feed.as_deref())
                        .await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    /// One aimed injection: armed at `armed`, fired `offset` after the first
    /// matching event, or recorded as not done when none comes while the fault
    /// still fits before `end`. Returns when it has ended.
    async fn aimed(
        &self,
        p: &Planned,
        armed: tokio::time::Instant,
        end: tokio::time::Instant,
        feed: Option<&aim::Feed>,
    ) -> tokio::time::Instant {
        let Some(a) = p.aim else {
            return armed;
        };
        tokio::time::sleep_until(armed).await;
        let armed_ns = crate::record::history::monotonic_ns();
        let last = end
            .checked_sub(p.duration + a.offset + std::time::Duration::from_millis(1))
            .unwrap_or(armed);
        // A worker an aimed pause stopped after its read is between that read
        // and its write now, and makes no event while stopped: a fault aimed at
        // a read fires on it at once (a pause then a revoke of the same holder).
        let stopped = (a.event == AimEvent::Read)
            .then(|| self.between.lock().ok())
            .flatten()
            .and_then(|b| {
                b.iter()
                    .map(|(_, s)| s.clone())
                    .find(|s| aim::fits(p.target, s) && aim::names_victim(p.target, s))
            });
        // Worker pods of a node that is not this machine: their agents stop
        // the worker themselves, `offset` after the event (`in_pod.rs`).
        let in_pods = stopped.is_none()
            && self.world.workers_by_backend
            && in_pod::fires_in_pod(p.kind)
            && p.target.is_worker();
        let mut fired_in_pod = None;
        let seen = match (stopped, feed) {
            (Some(s), _) => Some(s),
            (None, _) if in_pods => match self.fire_in_pods(p, a, armed_ns, last).await {
                Some((s, stopped_ns, detail)) => {
                    fired_in_pod = Some((stopped_ns, detail));
                    Some(s)
                }
                None => None,
            },
            (None, Some(feed)) => wait_for(feed, p, a, armed_ns, last).await,
            (None, None) => None,
        };
        let Some(seen) = seen else {
            let f = F::Fault(p.kind);
            let mut ev = self.event(p, EventType::Invoke, f);
            ev.detail = Some(
                serde_json::json!({ "aim": { "event": a.event, "armed_ms": p.at.as_millis() as u64 } }),
            );
            self.record(&ev);
            let mut end_ev = self.event(p, EventType::Fail, f);
            let waited = last.saturating_duration_since(armed);
            end_ev.error = Some(format!(
                "aimed at {}: no such event of {} seen in the {} it could still fit in the run",
                a.event,
                p.target,
                humantime::format_duration(std::time::Duration::from_millis(
                    waited.as_millis() as u64
                ))
            ));
            self.record(&end_ev);
            return tokio::time::Instant::now();
        };
        let fired_ns = match &fired_in_pod {
            Some((stopped_ns, _)) => *stopped_ns,
            None => {
                tokio::time::sleep(a.offset).await;
                crate::record::history::monotonic_ns()
            }
        };
        if let Ok(mut m) = self.aimed.lock() {
            let mut detail = serde_json::json!({
                "event": a.event,
                "offset_ms": a.offset.as_millis() as u64,
                "seen": seen,
                "after_ms": (fired_ns.saturating_sub(seen.time_ns)) as f64 / 1e6,
            });
            if let Some((_, d)) = fired_in_pod {
                detail["in_pod"] = d;
            }
            m.insert(p.id, detail);
        }
        let victim = aim::names_victim(p.target, &seen).then_some(seen);
        let holds_between = p.kind == FaultKind::Pause && a.event == AimEvent::Read;
        if let (true, Some(v), Ok(mut b)) = (holds_between, &victim, self.between.lock()) {
            b.push((p.id, v.clone()));
        }
        self.inject(p, victim.as_ref()).await;
        // A worker held in its pod for a fault that ended without releasing
        // it (its target could not be resolved, say) is not left stopped.
        if let Some(h) = self.release(p).await {
            tracing::warn!("fault {} ended with worker held in its pod: {h}", p.id);
        }
        if let (true, Ok(mut b)) = (holds_between, self.between.lock()) {
            b.retain(|(id, _)| *id != p.id);
        }
        tokio::time::Instant::now()
    }

    async fn inject(&self, p: &Planned, aimed: Option<&aim::Seen>) {
        let f = F::Fault(p.kind);
        let resolved = match aimed {
            Some(seen) => target::aimed(self, p.target, seen),
            None => target::resolve(self, p.target).await,
        };
        let resolved = match resolved {
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
        // An aimed fault's `invoke` says what it fired on.
        let aimed = (e.kind == EventType::Invoke)
            .then_some(e.fault_id)
            .flatten()
            .and_then(|id| self.aimed.lock().ok().and_then(|mut m| m.remove(&id)));
        let with_aim;
        let e = match aimed {
            Some(a) => {
                let mut c = e.clone();
                let mut d = c.detail.take().unwrap_or_else(|| serde_json::json!({}));
                if let Some(o) = d.as_object_mut() {
                    o.insert("aim".into(), a);
                }
                c.detail = Some(d);
                with_aim = c;
                &with_aim
            }
            None => e,
        };
        match self.log.lock() {
            Ok(mut w) => {
                if let Err(err) = w.write(e) {
                    tracing::error!("cannot record nemesis event: {err}");
                }
            }
            Err(_) => tracing::error!("nemesis log lock poisoned"),
        }
    }

    /// Continues every process this nemesis stopped and clears every link fault
    /// of the harness's own proxies. Safe to call any number of times, from any
    /// exit path (a `Drop` too). Links in a pod are healed by [`Nemesis::heal_all`],
    /// or go with their pod.
    pub fn heal(&self) {
        if let Ok(mut s) = self.stopped.lock() {
            for pid in s.drain() {
                let _ = pause::cont(pid);
            }
        }
        self.world.links.heal_here();
    }

    /// The heal phase: every fault removed, every process continued, every killed
    /// member restarted. Returns what had to be undone, for the record.
    pub async fn heal_all(&self) -> Vec<String> {
        self.heal();
        let mut undone = self.world.links.heal().await;
        undone.extend(self.world.backend.lock().await.heal().await);
        undone
    }
}

/// The first event after `armed_ns` that fits the fault, or `None` by `last`.
async fn wait_for(
    feed: &aim::Feed,
    p: &Planned,
    a: AimAt,
    armed_ns: u64,
    last: tokio::time::Instant,
) -> Option<aim::Seen> {
    let mut rx = feed.subscribe();
    loop {
        let got = tokio::time::timeout_at(last, rx.recv()).await.ok()?;
        match got {
            Ok(seen) if seen.event == a.event && seen.time_ns >= armed_ns => {
                if aim::fits(p.target, &seen) {
                    return Some(seen);
                }
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        }
    }
}

impl Drop for Nemesis {
    fn drop(&mut self) {
        self.heal();
    }
}
