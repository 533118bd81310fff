//! `clock-jump`: steps a Redis instance's wall clock forward by `by`, through the
//! backend (`Backend::step_clock`; the process backend runs the instance under
//! clockshim, `clockshim/`, which adds the nanoseconds in the member's offset
//! file to every wall-clock read); Redis stamps and checks key
//! expiry with that clock (`mstime()` → `gettimeofday`), so every key set before
//! the step expires `by` early. The step is confirmed through the instance itself
//! (its `TIME` must have moved forward by about `by`), never assumed.
//!
//! The clock stays ahead afterwards, as after a real step (a later jump adds to
//! it); the fault's window (`duration`, by default the lock TTL) is the time in
//! which keys set before the step could expire early, so an overlap it caused
//! falls inside it.

use std::time::Duration;

use anyhow::{bail, Result};

use fencecheck_reports::FaultEffect;

use super::{effect, Ask, Nemesis, Planned, Resolved};
use crate::record::history::{EventType, F};
use crate::scenario::FaultKind;

/// The system's leases must expire by a member's wall clock, and the backend must
/// run its members under clockshim.
pub fn available(a: &Ask) -> Result<(), String> {
    if a.target.is_worker() {
        if !a.system.client_clock {
            return Err(format!(
                "clock-jump of a worker steps an elector's own wall clock, for a system \
                 whose clients judge expiry by it (kubernetes); {} is not one",
                a.service
            ));
        }
        if !a.backend.step_clocks {
            return Err(
                "clock-jump is done on the process and kubernetes backends (clockshim is \
                 preloaded into the workers' processes), not on docker; use backend = \
                 \"process\""
                    .into(),
            );
        }
        return Ok(());
    }
    if !a.system.clock_jump {
        return Err(format!(
            "clock-jump steps a member's wall clock (clockshim under it), for a \
             system whose leases expire by that clock; {} is not available for it",
            a.service
        ));
    }
    if !a.backend.step_clocks {
        return Err(
            "clock-jump is done on the process and kubernetes backends (clockshim is \
             preloaded into the members' processes), not on docker; use backend = \
             \"process\""
                .into(),
        );
    }
    Ok(())
}

/// How long the instance may take to show the step (clockshim reads its file
/// again at most once a millisecond).
const CONFIRM: Duration = Duration::from_secs(2);

/// Steps member `m` by `by`; returns what was done and seen.
async fn jump(n: &Nemesis, m: usize, by: Duration) -> Result<serde_json::Value> {
    let before_us = n.world.service.member_time_us(m).await?;
    let (old, new) = n.world.backend.lock().await.step_clock(m, by).await?;
    let t0 = tokio::time::Instant::now();
    // The instance's clock must show at least the step, less a little for the
    // time two TIME calls apart cannot account for.
    let want = before_us + (by.as_micros() as i64) * 9 / 10;
    // What was done and read, whether or not the instance was seen to move.
    let detail = |now: i64| {
        serde_json::json!({
            "member": m,
            "offset_ms_before": old / 1_000_000,
            "offset_ms_after": new / 1_000_000,
            "instance_time_before_us": before_us,
            "instance_time_after_us": now,
        })
    };
    loop {
        match n.world.service.member_time_us(m).await {
            Ok(now) if now >= want => {
                let mut d = detail(now);
                d["seen_after_ms"] = (t0.elapsed().as_millis() as u64).into();
                return Ok(d);
            }
            // Stepped, but not seen: injected, unconfirmed.
            Ok(now) if t0.elapsed() >= CONFIRM => {
                let mut d = detail(now);
                d["unconfirmed"] = format!(
                    "member {m}'s clock did not move by {by:?} within {CONFIRM:?} \
                     (is clockshim loaded? see its log)"
                )
                .into();
                return Ok(d);
            }
            _ if t0.elapsed() >= CONFIRM => {
                bail!("member {m}'s clock could not be read back within {CONFIRM:?} after the step")
            }
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Steps worker `w`'s clock (and its adapter's: a child, under the same shim) by
/// `by`. Confirmed when the offset reads back and clockshim is mapped into every
/// process of the worker's group (the worker, and the adapter it started): the
/// worker's own clock is not one the harness can ask, and clockshim rereads the
/// file at most a millisecond later. A worker that is gone, or runs without the
/// shim, is a step that cannot take effect: unconfirmed, with the reason.
///
/// A worker pod on a node that is not this machine (`workers_by_backend`):
/// its pod's copy of the offset file is replaced by its agent, which also
/// reads back which processes of the worker's group map clockshim.
async fn jump_worker(n: &Nemesis, w: u32, ns: i64) -> Result<serde_json::Value> {
    let Some(file) = n.world.worker_clocks.get(&w) else {
        bail!("worker {w} runs without clockshim");
    };
    let (old, new, mapped) = if n.world.workers_by_backend {
        let b = n.world.backend.lock().await;
        let crate::backend::Backend::Kubernetes(k) = &*b else {
            bail!("worker {w}'s clock is its pod's, on a backend without pods");
        };
        let (old, new, mapped) = k.step_worker_clock(w, file, ns).await?;
        // None: no process of its group is running.
        let mapped = mapped
            .map(|(all, with)| (all as usize, with as usize))
            .filter(|(all, _)| *all > 0);
        (old, new, Some(mapped))
    } else {
        let (old, new) = crate::clockshim::step_ns(file, ns)?;
        let mapped = n
            .world
            .workers
            .get(&w)
            .map(|&pid| shim_mapped(pid, &crate::clockshim::path()));
        (old, new, mapped)
    };
    let read = crate::clockshim::read_offset(file);
    let mut d = serde_json::json!({
        "worker": w,
        "offset_ms_before": old / 1_000_000,
        "offset_ms_after": new / 1_000_000,
    });
    if let Some(Some((all, with))) = mapped {
        d["processes_with_clockshim"] = format!("{with} of {all}").into();
    }
    let why = if read != new {
        Some(format!(
            "worker {w}'s offset file reads {read} ns after writing {new} ns"
        ))
    } else {
        match mapped {
            None => None,
            Some(None) => Some(format!("worker {w}'s process is not running")),
            Some(Some((_, 0))) => Some(format!(
                "clockshim is not mapped into worker {w}'s processes"
            )),
            Some(Some((all, with))) if with < all => Some(format!(
                "clockshim is mapped into {with} of the {all} processes of worker {w}'s group"
            )),
            Some(Some(_)) => None,
        }
    };
    match why {
        Some(why) => d["unconfirmed"] = why.into(),
        None if mapped.is_some() => {
            d["confirmed"] =
                "offset file read back; clockshim mapped in the worker's processes".into()
        }
        None => d["confirmed"] = "offset file read back".into(),
    }
    Ok(d)
}

/// The processes of `pid`'s group (`pid` alone when it leads none) on this
/// machine, and how many have `shim` mapped; `None` when `pid` is not running.
fn shim_mapped(pid: u32, shim: &std::path::Path) -> Option<(usize, usize)> {
    let (state, pgrp) = effect::proc_stat(pid)?;
    // A zombie (exited, not yet reaped) has no mappings: not running.
    if matches!(state, 'Z' | 'X') {
        return None;
    }
    let group = if pgrp == pid {
        effect::group(pid)
    } else {
        vec![pid]
    };
    let shim = shim.to_string_lossy();
    let with = group
        .iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/maps"))
                .is_ok_and(|m| m.contains(shim.as_ref()))
        })
        .count();
    Some((group.len(), with))
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    let members: Vec<usize> = match target {
        Resolved::Members(m) => m.iter().map(|m| m.member).collect(),
        _ => Vec::new(),
    };
    let workers: Vec<u32> = match target {
        Resolved::Workers(v) => v.iter().map(|v| v.worker).collect(),
        _ => Vec::new(),
    };
    // Stamped before the first step, so the window covers every early expiry.
    let mut start = n.event(p, EventType::Invoke, F::Fault(FaultKind::ClockJump));
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for &m in &members {
        match jump(n, m, p.by).await {
            Ok(what) => done.push(what),
            Err(e) => errors.push(format!("member {m}: {e:#}")),
        }
    }
    // Forward `by`, or backward `back` (an elector's clock only).
    let ns = if p.back.is_zero() {
        i64::try_from(p.by.as_nanos()).unwrap_or(i64::MAX)
    } else {
        -i64::try_from(p.back.as_nanos()).unwrap_or(i64::MAX)
    };
    for &w in &workers {
        match jump_worker(n, w, ns).await {
            Ok(what) => done.push(what),
            Err(e) => errors.push(format!("worker {w}: {e:#}")),
        }
    }
    start.detail = Some(serde_json::json!({
        "action": if p.back.is_zero() { "step the wall clock forward" } else { "step the wall clock backward" },
        "by_ms": ns / 1_000_000,
        "target": target.describe(),
        "done": done,
        "window_ms": p.duration.as_millis() as u64,
    }));
    if !errors.is_empty() {
        start.error = Some(errors.join("; "));
    }
    if !done.is_empty() {
        effect::record(&mut start.detail, &confirm(&done));
    }
    // A worker held stopped in its pod for this step goes on now that its
    // clock has moved (`in_pod.rs`).
    if let (Some(h), Some(d)) = (n.release(p).await, start.detail.as_mut()) {
        d["held"] = h;
    }
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    let kind = if done.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, F::Fault(FaultKind::ClockJump));
    end.detail = Some(serde_json::json!({
        "action": if workers.is_empty() {
            "window ends: every key set before the step would have expired by now; \
             the clock stays ahead"
        } else {
            "window ends: a lease the stepped elector judged expired early has expired \
             by now; its clock stays ahead"
        },
    }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

/// The clock read back after each step: a member's own `TIME` moved forward by
/// the step, or a worker's offset file reads what was written with clockshim
/// mapped into each of its processes.
fn confirm(done: &[serde_json::Value]) -> FaultEffect {
    let effects = done
        .iter()
        .map(|d| {
            if let Some(why) = d.get("unconfirmed").and_then(serde_json::Value::as_str) {
                return FaultEffect::unconfirmed(why);
            }
            let num = |k: &str| d.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0);
            let offset = num("offset_ms_after") - num("offset_ms_before");
            if let Some(m) = d.get("member").and_then(serde_json::Value::as_u64) {
                let moved = (num("instance_time_after_us") - num("instance_time_before_us")) / 1000;
                FaultEffect::confirmed(format!(
                    "member {m}'s clock read back {moved} ms ahead after a step of {offset} ms \
                     (seen after {} ms)",
                    num("seen_after_ms")
                ))
            } else {
                let mapped = d
                    .get("processes_with_clockshim")
                    .and_then(serde_json::Value::as_str)
                    .map(|m| format!(", clockshim in {m} of its processes"))
                    .unwrap_or_default();
                FaultEffect::confirmed(format!(
                    "worker {}'s clock offset read back: {offset:+} ms{mapped}",
                    num("worker")
                ))
            }
        })
        .collect();
    effect::all(effects)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process: what it maps is found in it, what it does not is not, and
    /// a pid that runs nothing is not running.
    #[test]
    fn a_shim_is_found_mapped_only_where_it_is() {
        let me = std::process::id();
        let exe = std::env::current_exe().expect("exe");
        let (all, with) = shim_mapped(me, &exe).expect("running");
        assert!(all >= 1 && with >= 1 && with <= all, "{all} {with}");
        let (all, with) =
            shim_mapped(me, std::path::Path::new("/nowhere/libclockshim.so")).expect("running");
        assert!(all >= 1 && with == 0, "{all} {with}");
        assert_eq!(shim_mapped(u32::MAX - 1, &exe), None);
    }
}
