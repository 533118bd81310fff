//! Confirming that a fault took effect, from the system itself: a paused
//! process seen stopped in `/proc`, a killed one seen gone, bytes counted by the
//! proxies. The nemesis records the result in the fault's event as
//! `detail.effect` (a [`FaultEffect`]); assess tallies it (`check::faults`).
//! A session's end is confirmed at assess time from `service.jsonl` instead.

use std::time::Duration;

use fencecheck_reports::FaultEffect;

/// How long a stopped process may take to show state `T`, and a killed one to
/// be gone. Both are immediate in practice; the margin is for a loaded host.
pub const WITHIN: Duration = Duration::from_secs(2);

pub use crate::record::history::record_effect as record;

/// A process's state letter and process group, from `/proc/<pid>/stat`; `None`
/// when it is gone.
pub fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid pgrp …`: comm may hold spaces and parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let _ppid = it.next()?;
    let pgrp = it.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Every live process of group `pgid`, its leader first when it is alive.
pub fn group(pgid: u32) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&pid| proc_stat(pid).is_some_and(|(_, g)| g == pgid))
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable_by_key(|&p| (p != pgid, p));
    out
}

/// What one process looks like after SIGSTOP.
enum Seen {
    Stopped,
    Exited,
    Gone,
    Running(char),
}

fn look(pid: u32) -> Seen {
    match proc_stat(pid) {
        None => Seen::Gone,
        Some(('T' | 't', _)) => Seen::Stopped,
        Some(('Z' | 'X', _)) => Seen::Exited,
        Some((s, _)) => Seen::Running(s),
    }
}

/// One process (or, `group`, the whole group it leads) to be seen stopped.
#[derive(Debug, Clone, Copy)]
pub struct StopTarget {
    pub pid: u32,
    pub group: bool,
}

/// Waits until every target (with its group, where it leads one) is seen in
/// state `T` in `/proc`, up to `within`. Confirmed when all are; otherwise the
/// first that is not, and why: exited (a zombie), gone, or still running.
pub async fn stopped(targets: &[StopTarget], within: Duration) -> FaultEffect {
    if targets.is_empty() {
        return FaultEffect::unconfirmed("no process was stopped");
    }
    let t0 = tokio::time::Instant::now();
    loop {
        let mut seen = Vec::new();
        let mut pending = None;
        for t in targets {
            let pids = if t.group {
                let g = group(t.pid);
                if g.is_empty() {
                    vec![t.pid]
                } else {
                    g
                }
            } else {
                vec![t.pid]
            };
            for &pid in &pids {
                match look(pid) {
                    Seen::Stopped => {}
                    // A member of the group that has exited (an adapter's
                    // unreaped child) has nothing to stop; only the target's
                    // own exit means the pause missed.
                    Seen::Exited | Seen::Gone if pid != t.pid => {}
                    // Neither comes back: no point in waiting.
                    Seen::Exited => {
                        return FaultEffect::unconfirmed(format!(
                            "pid {pid} had exited (a zombie, state Z): there was nothing \
                             left to stop"
                        ))
                    }
                    Seen::Gone => {
                        return FaultEffect::unconfirmed(format!(
                            "pid {pid} was gone (no /proc/{pid}): there was nothing left \
                             to stop"
                        ))
                    }
                    Seen::Running(s) => {
                        pending.get_or_insert((pid, s));
                    }
                }
            }
            seen.push((t.pid, t.group, pids.len()));
        }
        let Some((pid, state)) = pending else {
            let what: Vec<String> = seen
                .iter()
                .map(|&(pid, group, n)| {
                    if group && n > 1 {
                        format!("pid {pid} and its group ({n} processes)")
                    } else {
                        format!("pid {pid}")
                    }
                })
                .collect();
            return FaultEffect::confirmed(format!(
                "{} seen stopped (state T in /proc) {} ms after SIGSTOP",
                what.join(", "),
                t0.elapsed().as_millis()
            ));
        };
        if t0.elapsed() >= within {
            return FaultEffect::unconfirmed(format!(
                "pid {pid} still in state {state}, not T, {} ms after SIGSTOP",
                within.as_millis()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `pid` is gone (or a zombie) after SIGKILL, up to `within`.
pub async fn gone(pid: u32, within: Duration) -> bool {
    let t0 = tokio::time::Instant::now();
    loop {
        if matches!(look(pid), Seen::Gone | Seen::Exited) {
            return true;
        }
        if t0.elapsed() >= within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Combines several targets' effects into the fault's one: confirmed when
/// every one is, else the first that is not (with how many there were).
pub fn all(effects: Vec<FaultEffect>) -> FaultEffect {
    use fencecheck_reports::EffectStatus;
    let n = effects.len();
    if n == 0 {
        return FaultEffect::unconfirmed("nothing was done");
    }
    if let Some(bad) = effects
        .iter()
        .find(|e| e.status == EffectStatus::Unconfirmed)
        .or_else(|| effects.iter().find(|e| e.status != EffectStatus::Confirmed))
    {
        let mut e = bad.clone();
        if n > 1 {
            e.how = format!("{} (one of {n} targets)", e.how);
        }
        return e;
    }
    let hows: Vec<String> = effects.into_iter().map(|e| e.how).collect();
    FaultEffect::confirmed(hows.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_stat() {
        let me = std::process::id();
        let (state, pgrp) = proc_stat(me).expect("own /proc entry");
        assert!(matches!(state, 'R' | 'S'), "{state}");
        assert!(group(pgrp).contains(&me));
        assert!(proc_stat(u32::MAX).is_none());
    }

    #[tokio::test]
    async fn a_stopped_child_is_confirmed_and_a_dead_one_is_not() {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
        let e = stopped(&[StopTarget { pid, group: false }], WITHIN).await;
        assert_eq!(
            e.status,
            fencecheck_reports::EffectStatus::Confirmed,
            "{e:?}"
        );
        kill(Pid::from_raw(pid as i32), Signal::SIGKILL).expect("SIGKILL");
        assert!(gone(pid, WITHIN).await);
        // Not reaped yet: a zombie, which no SIGSTOP can stop.
        let e = stopped(&[StopTarget { pid, group: false }], WITHIN).await;
        assert_eq!(e.status, fencecheck_reports::EffectStatus::Unconfirmed);
        assert!(e.how.contains("zombie"), "{}", e.how);
        let _ = child.wait();
        let e = stopped(&[StopTarget { pid, group: false }], WITHIN).await;
        assert!(e.how.contains("gone"), "{}", e.how);
    }
}
