//! Aimed faults at worker pods on a node that is not this machine
//! (`backend::kubernetes::aim`). There the workers' events reach this machine
//! tens of ms after they happen, and an exec into a pod takes 84–99 ms: too
//! late for the moment an aim names (a holder's read and its write are
//! milliseconds apart). So the agent in each candidate pod watches its own
//! worker's events file and stops the worker's group itself, `offset` after
//! the event.
//!
//! A pause is then that stop, confirmed and later continued. Any other fault
//! at the worker (a revoke or an expiry of its session, a step of its clock)
//! is applied while the worker is held stopped there, and the worker is
//! continued once the fault is in place ([`Nemesis::release`], called by the
//! fault's `inject`): so the fault lands between the event and the worker's
//! next step, as this machine's signals land it on a local worker. The hold
//! (from the agent's stop to the continue, some 100–300 ms) is recorded as
//! `held` in the fault's detail: the worker did nothing in it, but its
//! session's keepalives were frozen that long too.

use crate::backend::Service;
use crate::record::history::Event;
use crate::scenario::{FaultKind, Target};

use super::{aim, AimAt, Nemesis, Planned};

/// The fault kinds an aim at worker pods fires in the pod: every fault a
/// worker can be the target of.
pub fn fires_in_pod(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::Pause | FaultKind::RevokeLease | FaultKind::ExpireSession | FaultKind::ClockJump
    )
}

impl Nemesis {
    /// An aimed fault at workers fired by the agents of the candidate worker
    /// pods (a worker named by the target, else every worker): the event it
    /// fired on, when the agent stopped the worker (this machine's clock), and
    /// what the pod's agent said (`in_pod` of the aim's record).
    /// The victim is left stopped: a pause then confirms and continues it;
    /// any other fault holds it (`held`) until [`Nemesis::release`].
    pub(super) async fn fire_in_pods(
        &self,
        p: &Planned,
        a: AimAt,
        armed_ns: u64,
        last: tokio::time::Instant,
    ) -> Option<(aim::Seen, u64, serde_json::Value)> {
        let needle = aim::needle(a.event)?;
        let mut workers: Vec<u32> = match p.target {
            Target::Worker(n) => vec![n],
            _ => self.world.workers.keys().copied().collect(),
        };
        workers.sort_unstable();
        let armed = self.world.backend.lock().await.arm_workers(&workers)?;
        let fired = armed.fire(&needle, armed_ns, a.offset, last).await;
        let mut backend = self.world.backend.lock().await;
        backend.disarmed(&workers, fired.as_ref().map(|f| f.worker));
        let f = fired?;
        let seen = serde_json::from_str::<Event>(&f.line)
            .ok()
            .and_then(|e| aim::classify(&e, f.worker));
        let Some(seen) = seen else {
            // Stopped on a line it cannot name: let it go.
            let _ = backend
                .resume(crate::backend::Service::Worker(f.worker))
                .await;
            tracing::warn!(
                "worker {} stopped on a line not understood: {}",
                f.worker,
                f.line
            );
            return None;
        };
        let mut detail = serde_json::json!({
            "pod": f.pod,
            "stopped_ns": f.stopped_ns,
            "answer": f.answer,
            "also_fired": f.also,
        });
        // A waiter's acquire names no victim: the target is looked up as at a
        // time, so the waiter its agent stopped goes on at once (every worker,
        // that one too, is paused anyway).
        let not_victim = !aim::names_victim(p.target, &seen) && p.target != Target::AllWorkers;
        if not_victim {
            let cont = backend
                .resume(crate::backend::Service::Worker(f.worker))
                .await;
            detail["continued_at_once"] = serde_json::json!(format!(
                "worker {} is not the fault's victim{}",
                f.worker,
                cont.err()
                    .map(|e| format!(" (its cont failed: {e:#})"))
                    .unwrap_or_default()
            ));
        }
        if p.kind != FaultKind::Pause && !not_victim {
            if let Ok(mut h) = self.held.lock() {
                h.insert(p.id, (f.worker, f.stopped_ns));
            }
        }
        Some((seen, f.stopped_ns, detail))
    }

    /// Continues the worker an aimed fault holds stopped in its pod, once the
    /// fault is in place; what the hold was, for the fault's record. `None`
    /// when this fault holds no worker (or it was released already).
    pub(super) async fn release(&self, p: &Planned) -> Option<serde_json::Value> {
        let (worker, stopped_ns) = self.held.lock().ok()?.remove(&p.id)?;
        let cont = self
            .world
            .backend
            .lock()
            .await
            .resume(Service::Worker(worker))
            .await;
        let continued_ns = crate::record::history::monotonic_ns();
        let mut held = serde_json::json!({
            "worker": worker,
            "stopped_ns": stopped_ns,
            "continued_ns": continued_ns,
            "held_ms": continued_ns.saturating_sub(stopped_ns) as f64 / 1e6,
        });
        if let Err(e) = cont {
            held["error"] = serde_json::json!(format!("its cont failed: {e:#}"));
        }
        Some(held)
    }
}
