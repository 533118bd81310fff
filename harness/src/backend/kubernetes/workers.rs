//! The workers as pods: one pod per worker (`worker-<id>`), running this very
//! fencecheck binary's `worker` under the in-pod agent (`images::worker_image`),
//! on the host's network of the harness's node with the run directory mounted at
//! its own path — so it reaches the service and the storage through the
//! harness's own proxies, as a worker process does, and writes its events
//! straight into the run directory as they happen.
//!
//! The pods are created gated (`WorkerConfig::start_gate`): each worker waits for
//! the gate file before it opens a session, and the run opens it once every pod
//! runs, so all start together and the run's clock starts then.
//!
//! On a node that is not this machine (`connect::Remote`) the pods run this
//! fencecheck binary from their image, in a run directory of their own: each
//! worker's events are followed back into the run directory as they are
//! written (`pods::follow_file`), the gate is written into each pod by its
//! agent (`put`), with the offset of the harness's monotonic clock to the
//! node's (`pods::clock_offset`, which the worker adds to its own), and a
//! worker's pause is its agent's `stop` and `cont` (`Service::Worker`), read
//! back from the pod's `/proc`. What that cannot do keeps the workers
//! processes of this machine ([`on_remote`]).
//!
//! Faults on a worker are signals from the node, as Chaos Mesh's chaos-daemon
//! sends them: the worker's pid on this machine is found from its container
//! (the engine's pid of the agent, PID 1 in the pod, and the agent's child), and
//! the nemesis stops, continues and kills its process group as it does a worker
//! process's, confirmed from this machine's `/proc`. Not the agent's exec: an
//! aimed pause falls between a worker's read and its write, microseconds apart,
//! and an exec round trip through the API server takes 84–99 ms (docs/figures.md).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use super::{pods, KubernetesBackend};

/// Where a scenario's workers run on this backend: `None`, processes of this
/// machine (a `[client]` adapter without `pod_files`: what it needs in a pod is
/// not fencecheck's to guess); `Some(None)`, pods of fencecheck's worker;
/// `Some(Some((command, files)))`, pods with the adapter in them too.
pub fn in_pods(s: &crate::scenario::Scenario) -> Option<Option<(PathBuf, Vec<PathBuf>)>> {
    match &s.client {
        None => Some(None),
        Some(c) => {
            let files = c.pod_files.as_ref()?;
            let command = PathBuf::from(c.command.first()?);
            Some(Some((command, files.iter().map(PathBuf::from).collect())))
        }
    }
}

/// Whether the workers can be pods on a node that is not this machine, or
/// why they stay processes of this machine: what the agent beside a worker
/// cannot do as this machine's signals do.
pub fn on_remote(s: &crate::scenario::Scenario) -> Result<(), String> {
    for f in &s.faults {
        if !f.target.is_worker() {
            continue;
        }
        // An aimed fault at a worker is fired by the pods' agents themselves,
        // which stop the worker at its event (`nemesis::in_pod`); a fault kind
        // they cannot hold it for would act from this machine on events
        // followed back from the pods, too late for the moment it aims at.
        if f.aim().is_on() && !crate::nemesis::in_pod::fires_in_pod(f.kind) {
            return Err(format!(
                "an aimed {} at a worker lands a millisecond after its event by \
                 this machine's signals, and the workers' events reach this machine \
                 from pods there tens of ms late",
                f.kind
            ));
        }
    }
    Ok(())
}

/// How long the worker's process may take to appear under the agent.
const PID_DEADLINE: Duration = Duration::from_secs(10);
/// How long a read of the API server is retried while it times out or answers
/// 5xx/429 (a loaded server; retry.rs) before the run gives up.
const API_RETRY: Duration = Duration::from_secs(30);

/// One worker to start.
pub struct Launch {
    pub id: u32,
    /// The worker's program and arguments.
    pub program: Vec<String>,
    /// The service's access material (JSON, [`crate::worker::ACCESS_ENV`]),
    /// the same for every worker: in a Secret, not in the pod's spec.
    pub access: Option<String>,
    pub env: Vec<(String, String)>,
    /// Where its output goes.
    pub log: PathBuf,
    /// Its events file (absolute): followed back from a pod on a node that is
    /// not this machine.
    pub events: PathBuf,
    /// Its start gate (absolute): written into such a pod by its agent.
    pub gate: PathBuf,
}

/// A worker running in its pod.
pub struct PodWorker {
    pub name: String,
    pub pod: String,
    /// The worker's pid on this machine; it leads its process group. 0 on a
    /// node that is not this machine (`remote`).
    pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), so a reused pid is not it.
    start: u64,
    /// On a node that is not this machine: its pod, reached through the API
    /// (its agent, its status), not this machine's `/proc`.
    remote: Option<Api<Pod>>,
}

impl KubernetesBackend {
    /// Creates every worker's pod, then waits until each runs and its worker's
    /// pid on this machine is known. The workers wait at their start gate.
    /// The image is the one `start` built ([`in_pods`]): with a `[client]`
    /// adapter in it, each worker starts the adapter in its pod as a worker
    /// process starts it, a child in the worker's process group.
    pub async fn start_workers(
        &mut self,
        launches: Vec<Launch>,
        say: &dyn Fn(&str),
    ) -> Result<Vec<PodWorker>> {
        let image = self
            .worker_image
            .clone()
            .context("the scenario's workers are not pods on this backend")?;
        let remote = self.remote.is_some();
        // On this machine's node, the binary is the node's own; elsewhere, the
        // image's (`images::worker_image`).
        let host_files = if remote {
            Vec::new()
        } else {
            vec![std::env::current_exe().context("cannot find the fencecheck binary")?]
        };
        say(&format!(
            "starting {} worker pod(s) in namespace {}",
            launches.len(),
            self.ns
        ));
        // The service's access token, in a Secret the pods take it from
        // (`namespace::worker_access`).
        let access = launches.iter().find_map(|l| l.access.as_deref());
        if let Some(json) = access {
            super::namespace::worker_access(&self.client, &self.ns, &self.run_id, json).await?;
        }
        let secret_env: Vec<(String, String, String)> = access
            .map(|_| {
                (
                    crate::worker::ACCESS_ENV.to_string(),
                    super::namespace::WORKER_ACCESS.to_string(),
                    super::namespace::WORKER_ACCESS_KEY.to_string(),
                )
            })
            .into_iter()
            .collect();
        let mut created = Vec::new();
        for l in &launches {
            let name = format!("worker-{}", l.id);
            let mut env = l.env.clone();
            if remote {
                // Its events are followed to the last byte after it ends, which
                // needs the container still there (`pods::follow_file`).
                env.push(("FENCECHECK_AGENT_LINGER".into(), "1".into()));
            }
            let pod = pods::pod(&pods::PodSpecIn {
                name: name.clone(),
                run_id: &self.run_id,
                role: "worker",
                node: &self.node,
                image: &image,
                program: l.program.clone(),
                env,
                run_dir: &self.run_dir,
                remote,
                files: None,
                user: None,
                host_files: host_files.clone(),
                pull_secret: self.pull_secret.as_deref(),
                secret_env: secret_env.clone(),
            });
            pods::create(&self.pods, &pod)
                .await
                .with_context(|| format!("worker {} did not start", l.id))?;
            created.push((name, l));
        }
        let t0 = Instant::now();
        let mut out = Vec::new();
        let mut ready = Vec::new();
        for (pod, l) in created {
            pods::running(&self.pods, &pod)
                .await
                .with_context(|| format!("see {}", l.log.display()))?;
            self.logs.push(pods::stream_log(
                self.streams.clone(),
                self.ns.clone(),
                pod.clone(),
                l.log.clone(),
            ));
            if remote {
                let state = pods::agent(&self.pods, &pod, "state")
                    .await
                    .with_context(|| format!("worker {}'s process in pod {pod}", l.id))?;
                // Its events, here as the pod writes them.
                // In this machine's clock already: the worker adds the offset.
                self.follows.push(pods::follow_file(
                    self.streams.clone(),
                    self.ns.clone(),
                    pod.clone(),
                    l.events.display().to_string(),
                    l.events.clone(),
                    None,
                ));
                self.remote_workers.push(super::PodProc {
                    pod: pod.clone(),
                    what: format!("worker {}", l.id),
                    log: l.log.clone(),
                    dead: false,
                });
                self.remote_events.push(l.events.clone());
                self.worker_gate = Some(l.gate.clone());
                ready.push(serde_json::json!({
                    "pod": pod, "pod_pid": state.get("pid"),
                    "running_ms": t0.elapsed().as_millis() as u64,
                }));
                out.push(PodWorker {
                    name: format!("worker {}", l.id),
                    pod,
                    pid: 0,
                    start: 0,
                    remote: Some(self.pods.clone()),
                });
                continue;
            }
            let (pid, start) = self
                .worker_pid(&pod)
                .await
                .with_context(|| format!("worker {}'s process in pod {pod}", l.id))?;
            ready.push(serde_json::json!({
                "pod": pod, "pid": pid, "running_ms": t0.elapsed().as_millis() as u64,
            }));
            out.push(PodWorker {
                name: format!("worker {}", l.id),
                pod,
                pid,
                start,
                remote: None,
            });
        }
        if let Some(first) = out.first().filter(|_| remote) {
            let pod = first.pod.clone();
            let (offset, within) = self.node_clock(&pod).await?;
            say(&format!(
                "the node's monotonic clock is {:.3} ms behind this machine's (within \
                 {:.3} ms); the workers there add that to theirs",
                offset as f64 / 1e6,
                within as f64 / 1e6
            ));
        }
        self.record_workers(&image, ready);
        Ok(out)
    }

    /// Lets the gated worker pods of a node that is not this machine go: the
    /// run's end and the clock offset written into each pod by its agent
    /// (`END OFFSET`), all at once. Elsewhere the pods read the run directory's
    /// gate, which `run.rs` writes.
    pub async fn open_remote_gate(&self, end_ns: u64) -> Result<()> {
        let (Some(gate), Some((offset, _))) = (&self.worker_gate, self.node_clock) else {
            return Ok(());
        };
        let text = format!("{end_ns} {offset}");
        let puts = self
            .remote_workers
            .iter()
            .map(|w| pods::put(&self.pods, &w.pod, gate, &text));
        for r in futures_util::future::join_all(puts).await {
            r?;
        }
        Ok(())
    }

    /// Steps worker `w`'s clock on a node that is not this machine: the run
    /// directory's offset file (the record) by `ns`, then the pod's own copy
    /// replaced by its agent (`put`), then how many of the worker's group's
    /// processes map clockshim, as its agent reads its pod's `/proc`. Returns
    /// the offsets before and after, and (processes, with clockshim).
    pub async fn step_worker_clock(
        &self,
        w: u32,
        file: &std::path::Path,
        ns: i64,
    ) -> Result<(i64, i64, Option<(u64, u64)>)> {
        let pod = self
            .remote_workers
            .get(w as usize)
            .map(|p| p.pod.clone())
            .context("no such worker pod")?;
        let (old, new) = crate::clockshim::step_ns(file, ns)?;
        if let Err(e) = pods::put(&self.pods, &pod, file, &new.to_string()).await {
            let _ = crate::clockshim::write_offset(file, old);
            return Err(e);
        }
        let shim = crate::clockshim::path().display().to_string();
        let a = pods::agent(&self.pods, &pod, &format!("mapped {shim}")).await?;
        let count = |k: &str| a.get(k).and_then(serde_json::Value::as_u64);
        let mapped = count("processes").zip(count("with"));
        Ok((old, new, mapped))
    }

    /// Adds the worker pods to `kubernetes.json`: each with its worker's pid on
    /// this machine and ms from the first creation until it ran.
    fn record_workers(&self, image: &str, ready: Vec<serde_json::Value>) {
        self.edit_record(|r| {
            if let Some(p) = r["pods"].as_array_mut() {
                p.extend(ready.iter().map(|w| w["pod"].clone()));
            }
            if let Some(i) = r["images"].as_array_mut() {
                i.push(image.into());
            }
            r["workers"] = ready.into();
        });
    }

    /// The pid on this machine of the program the agent runs in `pod`: the
    /// agent is the container's init, whose pid the engine knows; the program is
    /// its child.
    async fn worker_pid(&self, pod: &str) -> Result<(u32, u64)> {
        let p = super::retry::call(&format!("get pod {pod}"), API_RETRY, || self.pods.get(pod))
            .await
            .with_context(|| format!("get pod {pod}"))?;
        let id = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs.into_iter().find(|c| c.name == pods::CONTAINER))
            .and_then(|c| c.container_id)
            .context("no container id in the pod's status")?;
        let Some(id) = id.strip_prefix("docker://") else {
            bail!(
                "the container {id} is not Docker's: the worker's process cannot be found \
                 on this machine"
            );
        };
        let c = self
            .docker
            .inspect_container(
                id,
                None::<testcontainers::bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .with_context(|| format!("docker inspect {id}"))?;
        let agent = c
            .state
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .context("the container has no pid")? as u32;
        let t0 = Instant::now();
        loop {
            let children = std::fs::read_to_string(format!("/proc/{agent}/task/{agent}/children"))
                .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .find_map(|c| c.parse::<u32>().ok())
            {
                if let Some(start) = start_time(pid) {
                    return Ok((pid, start));
                }
            }
            if t0.elapsed() > PID_DEADLINE {
                bail!("no process under the agent (pid {agent}) after {PID_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks), and whether it
/// still runs (not a zombie).
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command is in parentheses and may hold spaces: fields after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // `rest` starts at field 3 (state): field 22 is index 19.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, s)| s)
}

impl PodWorker {
    /// The worker's pid on this machine (it leads its process group); 0 for a
    /// pod on a node that is not this machine, whose faults go through its
    /// agent instead (`Service::Worker`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Still running (a stopped one too), and still the process it was.
    fn alive(&self) -> bool {
        self.pid > 1
            && matches!(stat(self.pid), Some((s, start)) if s != 'Z' && s != 'X' && start == self.start)
    }

    fn signal(&self, sig: Signal) {
        if self.alive() {
            let _ = killpg(Pid::from_raw(self.pid as i32), sig);
        }
    }

    /// Still running, as its agent reads it (a pod on another node).
    async fn runs_there(&self, pods: &Api<Pod>) -> bool {
        match pods::agent(pods, &self.pod, "state").await {
            Ok(a) => a.get("running").and_then(|r| r.as_bool()) != Some(false),
            // Its agent lingers after the worker: no answer, no pod.
            Err(_) => false,
        }
    }

    /// Waits up to `deadline` for the worker to end on its own.
    pub async fn wait_timeout(&self, deadline: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            let alive = match &self.remote {
                None => self.alive(),
                Some(pods) => self.runs_there(pods).await,
            };
            if !alive {
                return true;
            }
            if t0.elapsed() >= deadline {
                return false;
            }
            let poll = if self.remote.is_some() { 200 } else { 50 };
            tokio::time::sleep(Duration::from_millis(poll)).await;
        }
    }

    /// Continues and ends it: SIGTERM and up to `grace`, then SIGKILL. A pod on
    /// another node: its agent's `cont`, up to `grace` to end on its own, then
    /// its agent's `kill`.
    pub async fn stop(&self, grace: Duration) {
        if let Some(pods) = &self.remote {
            let _ = pods::agent(pods, &self.pod, "cont").await;
            if grace > Duration::ZERO && self.wait_timeout(grace).await {
                return;
            }
            let _ = pods::agent(pods, &self.pod, "kill").await;
            return;
        }
        self.signal(Signal::SIGCONT);
        if grace > Duration::ZERO {
            self.signal(Signal::SIGTERM);
            if self.wait_timeout(grace).await {
                return;
            }
        }
        self.signal(Signal::SIGKILL);
        self.wait_timeout(Duration::from_secs(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{in_pods, stat};
    use crate::scenario::{FaultKind, Scenario};
    use std::path::PathBuf;

    #[test]
    fn workers_are_pods_with_the_adapter_only_when_it_lists_its_pod_files() {
        let parse = |t: &str| Scenario::parse(t, "s.toml").expect("valid");
        assert_eq!(
            in_pods(&parse("name = \"x\"\n")),
            Some(None),
            "fencecheck's own worker"
        );
        let bare = parse("name = \"x\"\n[client]\ncommand = [\"sh\"]\n");
        assert_eq!(in_pods(&bare), None, "an adapter whose runtime is not said");
        let listed = parse("name = \"x\"\n[client]\ncommand = [\"sh\"]\npod_files = [\"/bin\"]\n");
        let (command, files) = in_pods(&listed).flatten().expect("an adapter in the pods");
        // Resolved on PATH, links and all (`sh` is `/usr/bin/dash` on Debian).
        assert!(command.is_absolute(), "{command:?}");
        assert_eq!(files, vec![PathBuf::from("/bin")]);
        let static_binary = parse("name = \"x\"\n[client]\ncommand = [\"sh\"]\npod_files = []\n");
        assert_eq!(
            in_pods(&static_binary).flatten().map(|a| a.1),
            Some(Vec::new())
        );
    }

    #[test]
    fn on_a_remote_node_every_aimed_fault_a_worker_can_take_keeps_them_pods() {
        let parse = |t: &str| Scenario::parse(t, "s.toml").expect("valid");
        let fault = |f: &str| parse(&format!("name = \"x\"\n[[fault]]\n{f}\n"));
        assert_eq!(super::on_remote(&parse("name = \"x\"\n")), Ok(()));
        let client = parse("name = \"x\"\n[client]\ncommand = [\"sh\"]\npod_files = []\n");
        assert_eq!(
            super::on_remote(&client),
            Ok(()),
            "an adapter goes in the pods"
        );
        // Every kind a worker can be the target of, aimed at a worker: its
        // agent stops the worker at the event, and the fault is applied while
        // it is held there (`nemesis::in_pod`).
        let mut taken = Vec::new();
        for kind in FaultKind::ALL {
            let extra = match kind {
                FaultKind::RevokeLease | FaultKind::ExpireSession => "",
                FaultKind::ClockJump => "by = \"10s\"\n",
                _ => "duration = \"1s\"\n",
            };
            for target in ["holder", "worker:1", "all-workers"] {
                let text = format!(
                    "name = \"x\"\n[[fault]]\nkind = \"{kind}\"\ntarget = \"{target}\"\n\
                     at = \"2s\"\n{extra}aim = \"read\"\n"
                );
                let Ok(s) = Scenario::parse(&text, "s.toml") else {
                    continue; // not a target this kind takes
                };
                assert!(
                    crate::nemesis::in_pod::fires_in_pod(kind),
                    "{kind} at {target}"
                );
                assert_eq!(super::on_remote(&s), Ok(()), "{kind} at {target}");
                taken.push(kind);
            }
        }
        for kind in [
            FaultKind::Pause,
            FaultKind::RevokeLease,
            FaultKind::ExpireSession,
            FaultKind::ClockJump,
        ] {
            assert!(taken.contains(&kind), "{kind} aimed at a worker: {taken:?}");
        }
        let revoke =
            fault("kind = \"revoke-lease\"\ntarget = \"holder\"\nat = \"2s\"\naim = \"write\"");
        assert_eq!(super::on_remote(&revoke), Ok(()));
    }

    #[test]
    fn this_process_reads_back_running_with_a_start_time() {
        let (state, start) = stat(std::process::id()).expect("own stat");
        // Running or asleep in any way (`D` too: seen under the disk load of a
        // parallel test), never stopped or dead.
        assert!(matches!(state, 'R' | 'S' | 'D' | 'I'), "{state}");
        assert!(start > 0);
    }
}
