//! `pause`: SIGSTOP the victims for the fault's duration, then SIGCONT. A real
//! stop: the process's keepalives freeze with it, as in a GC pause or a VM freeze.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{victims_json, Nemesis, Planned, Victim};
use crate::history::{EventType, F};

pub fn stop(pid: u32) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP)
}

pub fn cont(pid: u32) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT)
}

pub async fn run(n: &Nemesis, p: &Planned, victims: &[Victim]) {
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for v in victims {
        // Registered before the signal, so a cancelled run still continues it.
        if let Ok(mut s) = n.stopped.lock() {
            s.insert(v.pid);
        }
        match stop(v.pid) {
            Ok(()) => done.push(v.clone()),
            Err(e) => errors.push(format!("SIGSTOP worker {} (pid {}): {e}", v.worker, v.pid)),
        }
    }
    let mut start = n.event(p, EventType::Invoke, F::Pause);
    start.detail = Some(serde_json::json!({
        "action": "SIGSTOP",
        "victims": victims_json(&done),
        "duration_ms": p.duration.as_millis() as u64,
    }));
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    for v in &done {
        if let Err(e) = cont(v.pid) {
            errors.push(format!("SIGCONT worker {} (pid {}): {e}", v.worker, v.pid));
        }
        if let Ok(mut s) = n.stopped.lock() {
            s.remove(&v.pid);
        }
    }
    let mut end = n.event(
        p,
        if done.is_empty() {
            EventType::Fail
        } else {
            EventType::Ok
        },
        F::Pause,
    );
    end.detail = Some(serde_json::json!({ "action": "SIGCONT" }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}
