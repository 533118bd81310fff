//! `pause`: SIGSTOP the target processes for the fault's duration, then SIGCONT. A
//! real stop: a worker's keepalives freeze with it, as in a GC pause or a VM
//! freeze; an etcd member or the storage stops answering without closing sockets.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Nemesis, Planned, Resolved};
use crate::history::{EventType, F};

pub fn stop(pid: u32) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP)
}

pub fn cont(pid: u32) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT)
}

pub async fn run(n: &Nemesis, p: &Planned, target: &Resolved) {
    let pids: Vec<u32> = match target {
        Resolved::Workers(v) => v.iter().map(|v| v.pid).collect(),
        Resolved::Members(m) => m.iter().filter_map(|m| m.pid).collect(),
        Resolved::Storage(pid) => vec![*pid],
        Resolved::Links { .. } => Vec::new(),
    };
    let mut stopped = Vec::new();
    let mut errors = Vec::new();
    for pid in pids {
        // Registered before the signal, so a cancelled run still continues it.
        if let Ok(mut s) = n.stopped.lock() {
            s.insert(pid);
        }
        match stop(pid) {
            Ok(()) => stopped.push(pid),
            Err(e) => errors.push(format!("SIGSTOP pid {pid}: {e}")),
        }
    }
    let mut start = n.event(p, EventType::Invoke, F::Pause);
    start.detail = Some(serde_json::json!({
        "action": "SIGSTOP",
        "target": target.describe(),
        "pids": stopped,
        "duration_ms": p.duration.as_millis() as u64,
    }));
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    for &pid in &stopped {
        if let Err(e) = cont(pid) {
            errors.push(format!("SIGCONT pid {pid}: {e}"));
        }
        if let Ok(mut s) = n.stopped.lock() {
            s.remove(&pid);
        }
    }
    let kind = if stopped.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, F::Pause);
    end.detail = Some(serde_json::json!({ "action": "SIGCONT" }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}
