//! An aimed pause at worker pods on a node that is not this machine, fired by
//! each pod's agent (`fencecheck-agent aim`) instead of by this machine's
//! signals.
//!
//! On this machine's node the nemesis reads every worker's events file each
//! millisecond and stops the group by signal: the pause lands a millisecond or
//! two after its event, between a holder's read and its write. Through exec a
//! stop takes 84–99 ms, longer than that gap. So each candidate worker's agent
//! is armed with the event (its events file in the pod, the event's fields, the
//! time it is armed at, the offset) and stops its own pod's group when the
//! event comes. The first to fire is the fault; the others are disarmed
//! through their exec's stdin, and one that fired in the same moment (two
//! workers reading at once: two holders) is continued at once and named in
//! the record. Every candidate is marked paused while armed, so a heal on any
//! exit path continues it.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::pods::{self, AGENT, CONTAINER};
use super::KubernetesBackend;
use crate::backend::Service;

/// How long a disarmed agent may take to say so.
const DISARM_DEADLINE: Duration = Duration::from_secs(10);

/// The worker pods to arm, taken out of the backend so that waiting for the
/// event holds no lock on it.
pub struct Armed {
    pods: Api<Pod>,
    /// (worker, its pod, its events file there).
    targets: Vec<(u32, String, PathBuf)>,
    /// This machine's monotonic clock minus the node's (ns).
    clock_offset: i64,
}

/// The pod that fired.
#[derive(Debug)]
pub struct Fired {
    pub worker: u32,
    pub pod: String,
    /// The event's line, as the worker recorded it (in this machine's clock).
    pub line: String,
    /// When the agent stopped the group, in this machine's monotonic clock.
    pub stopped_ns: u64,
    /// The agent's answer to its `stop`: the group's state read back.
    pub answer: serde_json::Value,
    /// Other pods that fired in the same moment, each continued at once.
    pub also: Vec<serde_json::Value>,
}

impl KubernetesBackend {
    /// The remote worker pods among `workers` to arm, each marked paused
    /// until [`KubernetesBackend::disarmed`]; `None` when the workers are not
    /// pods of a node that is not this machine.
    pub fn arm(&mut self, workers: &[u32]) -> Option<Armed> {
        if self.remote_workers.is_empty() {
            return None;
        }
        let mut targets = Vec::new();
        for &w in workers {
            let (Some(p), Some(events)) = (
                self.remote_workers.get(w as usize),
                self.remote_events.get(w as usize),
            ) else {
                continue;
            };
            if p.dead {
                continue;
            }
            self.paused.insert(Service::Worker(w));
            targets.push((w, p.pod.clone(), events.clone()));
        }
        Some(Armed {
            pods: self.pods.clone(),
            targets,
            clock_offset: self.node_clock.map_or(0, |c| c.0),
        })
    }

    /// The candidates are armed no longer; the one that fired stays marked
    /// paused (its pause continues it).
    pub fn disarmed(&mut self, workers: &[u32], fired: Option<u32>) {
        for &w in workers {
            if Some(w) != fired {
                self.paused.remove(&Service::Worker(w));
            }
        }
    }
}

impl Armed {
    /// Arms every target's agent at `since_ns` (this machine's clock, as the
    /// events files are) for the first line holding `needle`, fired `offset`
    /// after it; waits until one fires or `until`, then disarms the rest.
    /// `None`: none fired in time (or none could be armed).
    pub async fn fire(
        self,
        needle: &str,
        since_ns: u64,
        offset: Duration,
        until: tokio::time::Instant,
    ) -> Option<Fired> {
        let (tx, mut rx) = mpsc::channel(self.targets.len().max(1));
        let mut disarms = Vec::new();
        let mut not_armed = Vec::new();
        for (w, pod, events) in &self.targets {
            let ap = AttachParams::default()
                .container(CONTAINER)
                .stdin(true)
                .stdout(true)
                .stderr(false);
            let path = events.display().to_string();
            let since = since_ns.to_string();
            let us = (offset.as_micros() as u64).to_string();
            let cmd = [
                AGENT,
                "aim",
                path.as_str(),
                needle,
                since.as_str(),
                us.as_str(),
            ];
            // A pod that cannot be armed cannot fire; the others still can,
            // and what is already armed must still be disarmed below.
            let proc = match self.pods.exec(pod, cmd, &ap).await {
                Ok(p) => p,
                Err(e) => {
                    not_armed.push((*w, serde_json::json!({ "error": format!("not armed: exec {AGENT} aim in pod {pod}: {e}") })));
                    continue;
                }
            };
            let (stop, disarm) = oneshot::channel();
            disarms.push(Some(stop));
            tokio::spawn(armed(*w, proc, disarm, tx.clone()));
        }
        drop(tx);
        let mut answers: Vec<(u32, serde_json::Value)> = not_armed;
        // The first answer, or none by `until`.
        if let Ok(Some(a)) = tokio::time::timeout_at(until, rx.recv()).await {
            answers.push(a);
        }
        for d in disarms.iter_mut().filter_map(Option::take) {
            let _ = d.send(());
        }
        // Every other agent's answer: disarmed, or fired in the same moment.
        let rest = async {
            while let Some(a) = rx.recv().await {
                answers.push(a);
            }
        };
        let _ = tokio::time::timeout(DISARM_DEADLINE, rest).await;
        let fired = |v: &serde_json::Value| v.get("stopped_ns").and_then(|n| n.as_u64());
        let first = answers
            .iter()
            .filter_map(|(w, v)| fired(v).map(|n| (n, *w)))
            .min()
            .map(|(_, w)| w);
        let pod_of = |w: u32| {
            self.targets
                .iter()
                .find(|t| t.0 == w)
                .map(|t| t.1.clone())
                .unwrap_or_default()
        };
        // Every other candidate that did not say it was disarmed (it fired
        // too, or its answer was lost) is continued: a `cont` of a running
        // group is nothing.
        let mut also = Vec::new();
        for (w, _, _) in &self.targets {
            if Some(*w) == first {
                continue;
            }
            let said = answers.iter().find(|(a, _)| a == w).map(|(_, v)| v);
            if said.is_some_and(|v| v.get("disarmed").is_some()) {
                continue;
            }
            let pod = pod_of(*w);
            let cont = pods::agent(&self.pods, &pod, "cont").await;
            also.push(serde_json::json!({
                "worker": w, "pod": pod,
                "stopped_ns": said.and_then(&fired).map(|n| self.shift(n)),
                "error": said.and_then(|v| v.get("error")).cloned(),
                "continued": cont.is_ok(),
            }));
        }
        let worker = first?;
        let first = answers
            .iter()
            .find(|(w, _)| *w == worker)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let stopped_ns = fired(&first).map_or(0, |n| self.shift(n));
        Some(Fired {
            worker,
            pod: pod_of(worker),
            line: first.get("line").map(|l| l.to_string()).unwrap_or_default(),
            stopped_ns,
            answer: first.get("answer").cloned().unwrap_or_default(),
            also,
        })
    }

    /// A node's monotonic time put in this machine's.
    fn shift(&self, node_ns: u64) -> u64 {
        (node_ns as i64).saturating_add(self.clock_offset).max(0) as u64
    }
}

/// The agent's answer: its first line only says it is armed.
async fn answer<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
) -> std::io::Result<Option<String>> {
    loop {
        match lines.next_line().await? {
            Some(l) if l.trim() == "{\"armed\":true}" => continue,
            other => return Ok(other),
        }
    }
}

/// One pod's armed agent: its answer line (parsed) goes to `tx`; `disarm`
/// writes a line to its stdin first.
async fn armed(
    worker: u32,
    mut proc: kube::api::AttachedProcess,
    disarm: oneshot::Receiver<()>,
    tx: mpsc::Sender<(u32, serde_json::Value)>,
) {
    let (Some(mut stdin), Some(stdout)) = (proc.stdin(), proc.stdout()) else {
        return;
    };
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::select! {
        l = answer(&mut lines) => l,
        // A dropped sender (the arming failed elsewhere) disarms it too.
        _ = disarm => {
            let _ = stdin.write_all(b"disarm\n").await;
            let _ = stdin.flush().await;
            match tokio::time::timeout(DISARM_DEADLINE, answer(&mut lines)).await {
                Ok(l) => l,
                Err(_) => Ok(None),
            }
        }
    };
    drop(stdin);
    let v = match line {
        Ok(Some(l)) => serde_json::from_str(&l)
            .unwrap_or_else(|_| serde_json::json!({ "error": format!("the agent said {l:?}") })),
        Ok(None) => serde_json::json!({ "error": "the agent's aim ended without a word" }),
        Err(e) => serde_json::json!({ "error": format!("reading the agent's aim: {e}") }),
    };
    let _ = tx.send((worker, v)).await;
    let _ = proc.join().await;
}
