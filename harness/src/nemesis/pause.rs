//! `pause`: SIGSTOP the target processes for the fault's duration, then SIGCONT. A
//! real stop: a worker's keepalives freeze with it, as in a GC pause or a VM
//! freeze; an etcd member or the storage stops answering without closing sockets.
//! A worker is stopped with its process group, so its external lock client
//! (`[client]`) freezes with it.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use tokio::sync::broadcast::error::RecvError;

use super::aim::Seen;
use super::effect::{self, StopTarget};
use super::{Ask, Nemesis, Planned, Resolved};
use fencecheck_reports::FaultEffect;

use crate::backend::Service;
use crate::record::history::{EventType, F};
use crate::scenario::{AimEvent, FaultKind, Target};

/// Workers are frozen by the nemesis itself; members and the storage by the
/// backend.
pub fn available(a: &Ask) -> Result<(), String> {
    if (a.target.is_members() || a.target == Target::Storage) && !a.backend.pause {
        return Err(format!("the backend cannot pause {}", a.target));
    }
    Ok(())
}

/// Signals `pid`'s whole process group when `pid` leads one — a worker does,
/// and an external lock client runs in it (`[client]`): the application freezes
/// as one, library threads included, as in a GC pause — else `pid` alone.
fn signal(pid: u32, sig: Signal) -> nix::Result<()> {
    // 0 would be this process's own group, 1 init: neither is ever a target.
    if pid <= 1 {
        return Err(nix::errno::Errno::ESRCH);
    }
    let p = Pid::from_raw(pid as i32);
    match nix::unistd::getpgid(Some(p)) {
        Ok(g) if g == p => nix::sys::signal::killpg(p, sig),
        _ => kill(p, sig),
    }
}

/// Does `pid` lead its own process group (so [`signal`] stops the group)?
fn leads_group(pid: u32) -> bool {
    let p = Pid::from_raw(pid as i32);
    nix::unistd::getpgid(Some(p)).is_ok_and(|g| g == p)
}

/// Was every stopped process seen stopped? Workers (with their groups) and
/// processes the backend stopped by signal through `/proc`; containers through
/// the engine's own paused state.
async fn confirm(
    n: &Nemesis,
    pids: &[u32],
    frozen: &[(Service, serde_json::Value)],
) -> FaultEffect {
    let mut targets: Vec<StopTarget> = pids
        .iter()
        .map(|&pid| StopTarget {
            pid,
            group: leads_group(pid),
        })
        .collect();
    let mut effects = Vec::new();
    for (svc, what) in frozen {
        let num = |k: &str| what.get(k).and_then(serde_json::Value::as_u64);
        if let Some(pid) = num("pid") {
            targets.push(StopTarget {
                pid: pid as u32,
                group: false,
            });
        } else if let Some(pid) = num("process_group") {
            targets.push(StopTarget {
                pid: pid as u32,
                group: true,
            });
        } else {
            let mut backend = n.world.backend.lock().await;
            let by = backend.pause_witness();
            effects.push(match backend.is_paused(*svc).await {
                Ok(Some(true)) => {
                    FaultEffect::confirmed(format!("{} seen paused by {by}", name(*svc)))
                }
                Ok(Some(false)) => {
                    FaultEffect::unconfirmed(format!("{} not paused, as {by} tells it", name(*svc)))
                }
                Ok(None) => {
                    FaultEffect::unchecked(format!("{}: the backend cannot tell", name(*svc)))
                }
                Err(e) => {
                    FaultEffect::unchecked(format!("{}: {by} did not say: {e:#}", name(*svc)))
                }
            });
        }
    }
    if !targets.is_empty() {
        effects.insert(0, effect::stopped(&targets, effect::WITHIN).await);
    }
    effect::all(effects)
}

fn name(svc: Service) -> String {
    match svc {
        Service::Member(i) => format!("member {i}"),
        Service::Storage => "the storage".into(),
        Service::Worker(w) => format!("worker {w}"),
    }
}

pub fn stop(pid: u32) -> nix::Result<()> {
    signal(pid, Signal::SIGSTOP)
}

pub fn cont(pid: u32) -> nix::Result<()> {
    signal(pid, Signal::SIGCONT)
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    let by_backend = n.world.workers_by_backend;
    let services: Vec<Service> = match target {
        Resolved::Members(m) => m.iter().map(|m| Service::Member(m.member)).collect(),
        Resolved::Storage => vec![Service::Storage],
        Resolved::Workers(v) if by_backend => v.iter().map(|v| Service::Worker(v.worker)).collect(),
        _ => Vec::new(),
    };
    let pids: Vec<u32> = match target {
        Resolved::Workers(v) if !by_backend => v.iter().map(|v| v.pid).collect(),
        _ => Vec::new(),
    };
    // Listening before the stop, so no grant made while it lasts is missed.
    let until = NextGrant::listen(n, p, target);
    let mut done = Vec::new();
    let mut errors = Vec::new();
    // Workers are host processes the nemesis freezes itself (unless they are
    // pods of another node); etcd and the storage are the backend's to freeze
    // (a process, a container, a pod's program).
    let mut stopped = Vec::new();
    for pid in pids {
        // Registered before the signal, so a cancelled run still continues it.
        if let Ok(mut s) = n.stopped.lock() {
            s.insert(pid);
        }
        match stop(pid) {
            Ok(()) => {
                stopped.push(pid);
                done.push(serde_json::json!({ "action": "SIGSTOP", "pid": pid }));
            }
            Err(e) => errors.push(format!("SIGSTOP pid {pid}: {e}")),
        }
    }
    let mut frozen = Vec::new();
    for &svc in &services {
        match n.world.backend.lock().await.pause(svc).await {
            Ok(what) => {
                frozen.push((svc, what.clone()));
                done.push(what);
            }
            Err(e) => errors.push(format!("pause {svc:?}: {e:#}")),
        }
    }
    let mut start = n.event(p, EventType::Invoke, F::Fault(FaultKind::Pause));
    start.detail = Some(serde_json::json!({
        "action": "pause",
        "target": target.describe(),
        "done": done,
        "duration_ms": p.duration.as_millis() as u64,
    }));
    if !done.is_empty() {
        let e = confirm(n, &stopped, &frozen).await;
        effect::record(&mut start.detail, &e);
    }
    n.record(&start);
    let frozen: Vec<Service> = frozen.into_iter().map(|(svc, _)| svc).collect();
    let ended = match until {
        Some(u) => Some(u.wait(p.duration).await),
        None if p.until_next_grant => {
            tokio::time::sleep(p.duration).await;
            Some(serde_json::json!({
                "ended_by": "duration",
                "why": "no single worker paused whose lock the workers' records name",
            }))
        }
        None => {
            tokio::time::sleep(p.duration).await;
            None
        }
    };
    for &pid in &stopped {
        if let Err(e) = cont(pid) {
            errors.push(format!("SIGCONT pid {pid}: {e}"));
        }
        if let Ok(mut s) = n.stopped.lock() {
            s.remove(&pid);
        }
    }
    for &svc in &frozen {
        if let Err(e) = n.world.backend.lock().await.resume(svc).await {
            errors.push(format!("resume {svc:?}: {e:#}"));
        }
    }
    let kind = if done.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, F::Fault(FaultKind::Pause));
    let mut detail = serde_json::json!({ "action": "resume" });
    if let (Some(d), Some(serde_json::Value::Object(e))) = (detail.as_object_mut(), ended) {
        d.extend(e);
    }
    end.detail = Some(detail);
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

/// `until = "next-grant"`: the paused worker, the lock it held, and the
/// workers' records as they are written.
struct NextGrant {
    rx: tokio::sync::broadcast::Receiver<Seen>,
    worker: u32,
    key: Option<String>,
}

impl NextGrant {
    fn listen(n: &Nemesis, p: &Planned, target: &Resolved) -> Option<NextGrant> {
        let Resolved::Workers(v) = target else {
            return None;
        };
        let victim = match v.as_slice() {
            [one] if p.until_next_grant => one,
            _ => return None,
        };
        Some(NextGrant {
            rx: n.feed.get()?.subscribe(),
            worker: victim.worker,
            key: victim.key.clone(),
        })
    }

    /// Returns on the first grant to another worker of the same lock (any lock
    /// when the worker held none), or after `cap`: what ended the pause.
    async fn wait(mut self, cap: std::time::Duration) -> serde_json::Value {
        let next = async {
            loop {
                match self.rx.recv().await {
                    Ok(s) if self.ends(&s) => return s,
                    Ok(_) | Err(RecvError::Lagged(_)) => continue,
                    // The feed is gone: only the cap ends the pause.
                    Err(RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        tokio::select! {
            s = next => serde_json::json!({ "ended_by": "next-grant", "grant": s }),
            _ = tokio::time::sleep(cap) => serde_json::json!({ "ended_by": "duration" }),
        }
    }

    fn ends(&self, s: &Seen) -> bool {
        s.event == AimEvent::Grant
            && s.worker != self.worker
            && (self.key.is_none() || s.key == self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(event: AimEvent, worker: u32, key: &str) -> Seen {
        Seen {
            event,
            worker,
            key: Some(key.into()),
            grant: Some(9),
            session: None,
            time_ns: 1,
        }
    }

    #[test]
    fn a_pause_ends_on_another_workers_grant_of_the_same_lock_or_at_its_cap() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (tx, rx) = tokio::sync::broadcast::channel(16);
            let u = NextGrant {
                rx,
                worker: 1,
                key: Some("k0".into()),
            };
            for s in [
                seen(AimEvent::Read, 2, "k0"),
                seen(AimEvent::Grant, 2, "k1"),
                seen(AimEvent::Grant, 1, "k0"),
                seen(AimEvent::Grant, 3, "k0"),
            ] {
                tx.send(s).expect("send");
            }
            let ended = u.wait(std::time::Duration::from_secs(30)).await;
            assert_eq!(ended["ended_by"], "next-grant", "{ended}");
            assert_eq!(ended["grant"]["worker"], 3, "{ended}");

            let (_tx, rx) = tokio::sync::broadcast::channel::<Seen>(16);
            let u = NextGrant {
                rx,
                worker: 1,
                key: None,
            };
            let ended = u.wait(std::time::Duration::from_millis(10)).await;
            assert_eq!(ended["ended_by"], "duration", "{ended}");
        });
    }
}
