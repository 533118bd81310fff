//! One run, in phases: prepare the run directory → start the service and the
//! storage (backend) → links → workers, observer and nemesis (main phase) → heal →
//! final reads → stop → check → report. Data flows one way: everything a phase
//! learns goes to files in the run directory, and the checks read only those.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use fencecheck_reports::{PlannedFault, Report, RunInfo};
use indicatif::{ProgressBar, ProgressStyle};

use crate::assess;
use crate::backend::{self, Backend, Deployment};
use crate::links::{self, Links};
use crate::nemesis::{self, Nemesis, Planned, World};
use crate::proc::{spawn, Child};
use crate::record::history::{monotonic_ns, Event, EventType, EventWriter, Process, F};
use crate::record::observe::ObservationWriter;
use crate::record::rundir;
use crate::resources::{self, Probed, Resource};
use crate::scenario::{BackendKind, EtcdVersion, Scenario};
use crate::systems::client::ClientConfig;
use crate::systems::external::ExternalConfig;
use crate::systems::service::LockService;
use crate::worker::WorkerConfig;

/// Command-line overrides of the scenario.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub seed: Option<u64>,
    pub backend: Option<BackendKind>,
    pub duration: Option<Duration>,
    pub workers: Option<u32>,
    pub etcd: Option<EtcdVersion>,
    pub out: Option<PathBuf>,
    /// `--aim[=EVENT]`: every fault aimed (by default at its kind's most
    /// damaging event).
    pub aim: Option<crate::scenario::Aim>,
    /// `--aim-count N`: at most N injections of each aimed fault.
    pub aim_count: Option<u32>,
}

/// Why a run did not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "interrupted (Ctrl-C); the recorded files are in {0}; `fencecheck check {0}` checks them"
    )]
    Interrupted(String),
    /// The scenario cannot run here (a fault the chosen backend cannot do): exit 2.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    #[error(transparent)]
    Harness(#[from] anyhow::Error),
}

/// How long workers get after the run's end to finish their current hold.
const WORKER_GRACE: Duration = Duration::from_secs(15);
/// The quiet period between the heal phase and the final reads.
const QUIET: Duration = Duration::from_millis(500);

pub fn apply_overrides(s: &mut Scenario, o: &Overrides) -> u64 {
    if let Some(d) = o.duration {
        s.duration = d;
    }
    if let Some(w) = o.workers {
        s.workload.workers = w;
    }
    if let Some(b) = o.backend {
        s.cluster.backend = b;
    }
    if let Some(e) = o.etcd {
        // `--etcd` picks etcd's version; other services keep theirs.
        if crate::systems::system(s.lock.service).etcd_versioned() {
            s.cluster.version = Some(e.to_string());
        }
    }
    if let Some(a) = o.aim {
        for f in &mut s.faults {
            f.fault.aim_at(a);
        }
    }
    if let Some(n) = o.aim_count {
        for f in &mut s.faults {
            f.fault.cap_count(n);
        }
    }
    let seed = o.seed.or(s.seed).unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    });
    s.seed = Some(seed);
    seed
}

/// One run's fixed facts, shared by its phases.
struct Run<'a> {
    path: &'a Path,
    s: &'a Scenario,
    seed: u64,
    dir: PathBuf,
    quiet: bool,
    /// Flags the reproduce command needs beyond the scenario's own (`--aim`).
    extra_flags: String,
    /// The fenced resource's harness side.
    resource: Box<dyn Resource>,
}

impl Run<'_> {
    fn say(&self, m: &str) {
        if !self.quiet {
            eprintln!("· {m}");
        }
    }
}

/// `--aim[=EVENT] [--aim-count N]` as given, for the reproduce command.
fn aim_flags(o: &Overrides) -> String {
    let mut f = match o.aim {
        None | Some(crate::scenario::Aim::Off) => String::new(),
        Some(crate::scenario::Aim::MostDamaging) => " --aim".into(),
        Some(crate::scenario::Aim::On(e)) => format!(" --aim={e}"),
    };
    if let Some(n) = o.aim_count {
        f += &format!(" --aim-count {n}");
    }
    f
}

fn default_run_dir(name: &str) -> PathBuf {
    let ts = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from("runs").join(format!("{name}-{ts}"))
}

fn reproduce_command(scenario_path: &Path, s: &Scenario, seed: u64) -> String {
    let version = if crate::systems::system(s.lock.service).etcd_versioned() {
        format!(" --etcd {}", s.etcd_version())
    } else {
        String::new()
    };
    format!(
        "fencecheck scenario {} --seed {seed} --duration {} --workers {}{version} --backend {}",
        scenario_path.display(),
        humantime::format_duration(s.duration),
        s.workload.workers,
        s.cluster.backend.as_str()
    )
}

pub async fn run(
    scenario_path: &Path,
    mut scenario: Scenario,
    o: &Overrides,
    quiet: bool,
) -> Result<(Report, PathBuf), RunError> {
    let seed = apply_overrides(&mut scenario, o);
    // A fault the backend cannot do is bad input: refused before anything starts,
    // and before a backend named in the scenario is even reached.
    if scenario.cluster.backend != BackendKind::Auto {
        crate::plan::check(&scenario, scenario.cluster.backend)?;
    }
    let chosen = backend::choose(&scenario).await?;
    crate::plan::check(&scenario, chosen.kind)?;
    let mut resource = resources::resource(&scenario);
    let (external, before) = match resource.probe(&scenario.source).await? {
        Some(Probed { addr, before }) => (Some(addr), Some(before)),
        None => (None, None),
    };
    let run = Run {
        path: scenario_path,
        s: &scenario,
        seed,
        resource,
        dir: o
            .out
            .clone()
            .unwrap_or_else(|| default_run_dir(&scenario.name)),
        quiet,
        extra_flags: aim_flags(o),
    };
    std::fs::create_dir_all(&run.dir)
        .with_context(|| format!("cannot create run directory {}", run.dir.display()))?;
    std::fs::write(run.dir.join(rundir::SCENARIO), scenario.to_toml())
        .context("cannot write the resolved scenario")?;
    if let Some(before) = before {
        // What the user's storage held before the run: a key it already held is a
        // problem that fails the run (assess reads this, as `check` does later).
        let text = serde_json::to_string_pretty(&before).context("storage-before")?;
        std::fs::write(run.dir.join(assess::STORAGE_BEFORE), text + "\n")
            .context("cannot write the pre-run storage state")?;
    }
    run.say(&format!(
        "scenario {} (seed {seed}) → {}",
        scenario.name,
        run.dir.display()
    ));

    if !scenario.network.is_empty() {
        run.say(&format!(
            "network, for the whole run (not a fault): {}",
            scenario.network.describe()
        ));
    }
    let say = |m: &str| run.say(m);
    let (backend, dep) = Backend::start(chosen, &scenario, external, &run.dir, &say).await?;
    let backend = Arc::new(tokio::sync::Mutex::new(backend));
    // The workers' links: proxies of this process, or, for worker pods on a
    // node that is not this machine, proxies in a pod on that node.
    let (members, storage) = dep.for_workers();
    let ups = links::upstreams(scenario.workload.workers, members, storage);
    let made = backend.lock().await.start_links(&ups, &say).await;
    let links = match made {
        Ok(made) => {
            Links::new(
                scenario.workload.workers,
                dep.clients.len(),
                made,
                dep.peer_proxies.clone(),
                scenario.network.cut_links(),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let outcome = match links {
        Ok(links) => {
            let links = Arc::new(links);
            let r = drive(&run, &dep, backend.clone(), links.clone()).await;
            if let Some(n) = links.standing_report().await {
                let text = serde_json::to_string_pretty(&n).unwrap_or_default();
                if let Err(e) = std::fs::write(run.dir.join(rundir::NETWORK_JSON), text + "\n") {
                    run.say(&format!("cannot write {}: {e}", rundir::NETWORK_JSON));
                }
            }
            links.shutdown().await;
            r
        }
        Err(e) => Err(e.into()),
    };
    // On every path that got this far (an interrupted run too), while the
    // storage is still up.
    if let Some(m) = run.resource.collect(dep.storage, &run.dir).await {
        run.say(&m);
    }
    backend.lock().await.stop().await;
    outcome?;
    run.say("checking the recorded history");
    let report = assess::assess(&run.dir)?;
    Ok((report, run.dir))
}

/// Workers, observer and nemesis against a started backend. Everything started
/// here is stopped here, on every path.
async fn drive(
    run: &Run<'_>,
    dep: &Deployment,
    backend: Arc<tokio::sync::Mutex<Backend>>,
    links: Arc<Links>,
) -> Result<(), RunError> {
    let plan = nemesis::plan(run.s, run.seed);
    let worker_clocks = worker_clocks(run)?;
    // Workers as pods are created before the run's clock starts, and wait at
    // their gate: a pod takes seconds to start.
    let pods = start_pod_workers(run, dep, &links, &backend, &worker_clocks).await?;
    let start_ns = monotonic_ns();
    let end_ns = start_ns + run.s.duration.as_nanos() as u64;
    write_run_info(run, dep, &plan, start_ns, end_ns)?;

    let service = crate::systems::system(dep.service)
        .connect(dep.service, &dep.clients, dep.access.as_ref())
        .await?;
    let observer = Observer::start(service.clone(), &run.dir).await?;
    let mut workers: Vec<WorkerProc> = match pods {
        Some(pods) => {
            open_gate(&run.dir, end_ns)?;
            open_remote_gate(&backend, end_ns).await?;
            pods.into_iter().map(WorkerProc::Pod).collect()
        }
        None => start_workers(run, dep, &links, end_ns, &worker_clocks)?
            .into_iter()
            .map(WorkerProc::Local)
            .collect(),
    };
    let world = World {
        service,
        members: dep.clients.len(),
        workers: workers
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c.pid()))
            .collect::<HashMap<u32, u32>>(),
        workers_by_backend: workers.iter().any(|w| w.pid() == 0),
        backend,
        links,
        worker_clocks,
    };
    let nem = Nemesis::new(world, &run.dir.join(rundir::NEMESIS_EVENTS), run.seed)?;
    run.say(&format!(
        "{} workers contending for {}, {} faults planned",
        run.s.workload.workers,
        humantime::format_duration(run.s.duration),
        plan.len()
    ));

    // Aimed faults, and pauses that end on the next grant, watch the workers'
    // own records as they are written.
    let feed = plan
        .iter()
        .any(|p| p.aim.is_some() || p.until_next_grant)
        .then(|| {
            Arc::new(nemesis::aim::Feed::start(
                (0..run.s.workload.workers)
                    .map(|i| (i, rundir::worker_events(&run.dir, i)))
                    .collect(),
            ))
        });
    let begin = tokio::time::Instant::now();
    let end = begin + Duration::from_nanos(end_ns.saturating_sub(monotonic_ns()));
    let nem_task = tokio::spawn(nem.clone().run(plan, begin, end, feed));
    if main_phase(run).await == Phase::Interrupted {
        nem_task.abort();
        nem.heal();
        for w in &mut workers {
            w.stop(Duration::ZERO).await;
        }
        observer.stop().await;
        return Err(RunError::Interrupted(run.dir.display().to_string()));
    }
    heal_phase(run, &nem, nem_task, &mut workers).await;
    observer.stop().await;
    // A short quiet period, then the final read of every key by a fresh client.
    tokio::time::sleep(QUIET).await;
    final_reads(run, dep).await?;
    Ok(())
}

fn write_run_info(
    run: &Run<'_>,
    dep: &Deployment,
    plan: &[Planned],
    start_ns: u64,
    end_ns: u64,
) -> Result<()> {
    let s = run.s;
    let info = RunInfo {
        scenario: s.name.clone(),
        description: s.description.clone(),
        seed: run.seed,
        command: reproduce_command(run.path, s, run.seed) + &run.extra_flags,
        run_dir: run.dir.display().to_string(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        duration_s: s.duration.as_secs_f64(),
        backend: dep.backend.clone(),
        backend_reason: dep.backend_reason.clone(),
        service: dep.service.to_string(),
        service_version: dep.version.clone(),
        etcd_version: if crate::systems::system(dep.service).etcd_versioned() {
            dep.version.clone()
        } else {
            String::new()
        },
        persistence: crate::systems::system(dep.service)
            .persistence(s)
            .unwrap_or_default()
            .to_string(),
        etcd_members: s.cluster.members.0,
        workers: s.workload.workers,
        keys: s.workload.keys,
        ttl_s: s.lock.ttl.as_secs(),
        fencing: s.storage.fencing.as_str().to_string(),
        token: s.storage.token.as_str().to_string(),
        behaviour: s.workload.behaviour.as_str().to_string(),
        resource: run.resource.describe(),
        network: s.network.describe(),
        time_origin_ns: start_ns,
        time_end_ns: end_ns,
        schedule: plan
            .iter()
            .map(|p| PlannedFault {
                id: p.id,
                kind: p.kind.to_string(),
                target: p.target.to_string(),
                at_ms: p.at.as_millis() as u64,
                duration_ms: p.duration.as_millis() as u64,
                aim: p.aim.map(|a| a.to_string()),
            })
            .collect(),
    };
    assess::write_run_info(&run.dir, &info)
}

/// The workers' clockshim offset files, when the scenario steps a worker's clock
/// (an elector's, `clock-jump` with a worker target): every worker runs under
/// clockshim then, so any can be the target; each file starts at 0.
fn worker_clocks(run: &Run<'_>) -> Result<HashMap<u32, PathBuf>> {
    let s = run.s;
    let jumps = s
        .faults
        .iter()
        .any(|f| f.kind == crate::scenario::FaultKind::ClockJump && f.target.is_worker());
    if !jumps {
        return Ok(HashMap::new());
    }
    let shim = crate::clockshim::path();
    anyhow::ensure!(
        shim.is_file(),
        "clock-jump of a worker needs clockshim at {}: run ci/bootstrap.sh --fault clock-jump (it builds \
         clockshim/clockshim.c with cc)",
        shim.display()
    );
    let mut out = HashMap::new();
    for id in 0..s.workload.workers {
        let file = run.dir.join(format!("worker-{id}.clock-offset-ns"));
        crate::clockshim::write_offset(&file, 0)?;
        // Absolute: a worker pod's run directory is at the same path, and a
        // pod's working directory is its image's.
        let file = std::fs::canonicalize(&file)
            .with_context(|| format!("cannot resolve {}", file.display()))?;
        out.insert(id, file);
    }
    Ok(out)
}

/// A worker: a process of this machine, or a pod's (the kubernetes backend).
enum WorkerProc {
    Local(Child),
    Pod(crate::backend::kubernetes::workers::PodWorker),
}

impl WorkerProc {
    fn pid(&self) -> u32 {
        match self {
            WorkerProc::Local(c) => c.pid(),
            WorkerProc::Pod(p) => p.pid(),
        }
    }

    fn name(&self) -> &str {
        match self {
            WorkerProc::Local(c) => &c.name,
            WorkerProc::Pod(p) => &p.name,
        }
    }

    async fn stop(&mut self, grace: Duration) {
        match self {
            WorkerProc::Local(c) => c.stop(grace).await,
            WorkerProc::Pod(p) => p.stop(grace).await,
        }
    }

    /// Did it end on its own within `deadline`?
    async fn wait_timeout(&mut self, deadline: Duration) -> bool {
        match self {
            WorkerProc::Local(c) => c.wait_timeout(deadline).await.is_some(),
            WorkerProc::Pod(p) => p.wait_timeout(deadline).await,
        }
    }
}

/// The environment a worker runs with: clockshim preloaded where the scenario
/// steps its clock (the adapter it starts inherits it).
fn worker_env(clocks: &HashMap<u32, PathBuf>, id: u32) -> Vec<(String, String)> {
    match clocks.get(&id) {
        Some(file) => vec![
            (
                "LD_PRELOAD".to_string(),
                crate::clockshim::path().display().to_string(),
            ),
            (
                crate::clockshim::OFFSET_ENV.to_string(),
                file.display().to_string(),
            ),
        ],
        None => Vec::new(),
    }
}

/// On the kubernetes backend, the workers as pods, gated (`None` elsewhere). A
/// scenario with a lock client of its own, `[client]`, puts its adapter into the
/// worker pods when it says what the adapter needs there (`pod_files`: its
/// runtime is not fencecheck's to guess); without, those workers stay processes
/// of this machine.
async fn start_pod_workers(
    run: &Run<'_>,
    dep: &Deployment,
    links: &Links,
    backend: &tokio::sync::Mutex<Backend>,
    clocks: &HashMap<u32, PathBuf>,
) -> Result<Option<Vec<crate::backend::kubernetes::workers::PodWorker>>> {
    let mut b = backend.lock().await;
    let Backend::Kubernetes(k) = &mut *b else {
        return Ok(None);
    };
    if let Some(r) = k.remote() {
        if let Err(why) = crate::backend::kubernetes::workers::on_remote(run.s) {
            run.say(&format!(
                "the workers run as processes of this machine: the node {}, and {why}",
                r.why
            ));
            return Ok(None);
        }
    }
    let Some(adapter) = crate::backend::kubernetes::workers::in_pods(run.s) else {
        run.say(
            "the workers run as processes of this machine: [client] has no pod_files \
             saying what its adapter needs in a pod",
        );
        return Ok(None);
    };
    let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
    // A pod's working directory is its image's, not the harness's: the paths a
    // worker pod writes to are absolute (the run directory is mounted at its
    // absolute path), or a run under the default relative `runs/` records nothing.
    let dir = std::fs::canonicalize(&run.dir)
        .with_context(|| format!("cannot resolve {}", run.dir.display()))?;
    let gate = dir.join(rundir::WORKER_GATE);
    let mut launches = Vec::new();
    for id in 0..run.s.workload.workers {
        let mut cfg = worker_config(run, &dir, dep, links, id, 0);
        cfg.start_gate = Some(gate.clone());
        let (config, access) = without_access(cfg)?;
        launches.push(crate::backend::kubernetes::workers::Launch {
            id,
            program: vec![
                exe.display().to_string(),
                "worker".into(),
                "--config".into(),
                config,
            ],
            // In a Secret of the run's namespace, not in the pod's spec
            // (which anyone who may read pods there reads).
            access,
            env: {
                let mut env = worker_env(clocks, id);
                // Where the shipped adapters' launchers find their runtimes
                // (`{cache}` in pod_files), as on this machine.
                if adapter.is_some() {
                    env.push((
                        "FENCECHECK_CACHE".into(),
                        crate::systems::etcd::provision::cache_dir()
                            .display()
                            .to_string(),
                    ));
                }
                env
            },
            log: rundir::worker_log(&run.dir, id),
            events: rundir::worker_events(&dir, id),
            gate: gate.clone(),
        });
    }
    let say = |m: &str| run.say(m);
    k.start_workers(launches, &say).await.map(Some)
}

/// A worker's config as its command line carries it, without the service's
/// access material, and that material apart (JSON), for its environment
/// ([`crate::worker::ACCESS_ENV`]).
fn without_access(mut cfg: crate::worker::WorkerConfig) -> Result<(String, Option<String>)> {
    let access = cfg
        .lock
        .access
        .take()
        .map(|a| serde_json::to_string(&a))
        .transpose()
        .context("worker access")?;
    Ok((
        serde_json::to_string(&cfg).context("worker config")?,
        access,
    ))
}

/// Lets the gated worker pods of a node that is not this machine go (their
/// run directory is their own: each gets it through its agent).
async fn open_remote_gate(backend: &tokio::sync::Mutex<Backend>, end_ns: u64) -> Result<()> {
    match &*backend.lock().await {
        Backend::Kubernetes(k) => k
            .open_remote_gate(end_ns)
            .await
            .context("opening the worker pods' gate"),
        _ => Ok(()),
    }
}

/// Lets the gated workers go: the run's end time, written whole at once.
fn open_gate(run_dir: &Path, end_ns: u64) -> Result<()> {
    let gate = run_dir.join(rundir::WORKER_GATE);
    let tmp = run_dir.join(format!("{}.tmp", rundir::WORKER_GATE));
    std::fs::write(&tmp, format!("{end_ns}\n"))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &gate).with_context(|| format!("cannot write {}", gate.display()))
}

/// `dir` is the run directory as the worker names it (`run.dir`, or its
/// absolute path for a worker pod).
fn worker_config(
    run: &Run<'_>,
    dir: &Path,
    dep: &Deployment,
    links: &Links,
    id: u32,
    end_ns: u64,
) -> WorkerConfig {
    let s = run.s;
    WorkerConfig {
        id,
        lock: ClientConfig {
            service: dep.service,
            endpoints: {
                let all = links.service_endpoints(id);
                let reach = crate::systems::system(dep.service).client_members(all.len());
                all.get(reach).map(<[String]>::to_vec).unwrap_or_default()
            },
            ttl: s.lock.ttl,
            worker: id,
            token: s.storage.token.mode(),
            behaviour: s
                .client
                .as_ref()
                .map(|c| c.behaviour)
                .unwrap_or(s.workload.behaviour),
            external: s.client.as_ref().map(|c| ExternalConfig {
                command: c.command.clone(),
                token: c.token.clone(),
                no_token: s.storage.token == crate::scenario::TokenName::None,
                log: rundir::client_log(dir, id),
            }),
            access: dep.access.clone(),
            renew_deadline: Some(s.lock.renew_deadline()),
            retry_period: Some(s.lock.retry_period()),
        },
        resource: run
            .resource
            .reach(links.worker_storage[id as usize].listen()),
        token: s.storage.token.mode(),
        keys: s.workload.keys,
        ops_per_hold: s.workload.ops_per_hold,
        hold_min_ms: s.workload.hold.min.as_millis() as u64,
        hold_max_ms: s.workload.hold.max.as_millis() as u64,
        rest_min_ms: s.workload.rest.min.as_millis() as u64,
        rest_max_ms: s.workload.rest.max.as_millis() as u64,
        seed: run.seed,
        events: rundir::worker_events(dir, id),
        end_ns,
        start_gate: None,
    }
}

fn start_workers(
    run: &Run<'_>,
    dep: &Deployment,
    links: &Links,
    end_ns: u64,
    clocks: &HashMap<u32, PathBuf>,
) -> Result<Vec<Child>> {
    let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
    let mut workers = Vec::new();
    for id in 0..run.s.workload.workers {
        let cfg = worker_config(run, &run.dir, dep, links, id, end_ns);
        let (cfg, access) = without_access(cfg)?;
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("worker").arg("--config").arg(cfg);
        // In its environment, not on its command line, which every user of
        // this machine can read (`ps`).
        if let Some(a) = access {
            cmd.env(crate::worker::ACCESS_ENV, a);
        }
        cmd.envs(worker_env(clocks, id));
        workers.push(spawn(
            &format!("worker {id}"),
            cmd,
            &rundir::worker_log(&run.dir, id),
        )?);
    }
    Ok(workers)
}

#[derive(PartialEq, Eq)]
enum Phase {
    Done,
    Interrupted,
}

/// The fault window: a progress bar until the run's duration is over, or Ctrl-C.
async fn main_phase(run: &Run<'_>) -> Phase {
    let bar = if run.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(run.s.duration.as_secs())
    };
    bar.set_style(
        ProgressStyle::with_template("  {spinner} {elapsed_precise} [{bar:40}] {pos}/{len}s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = tokio::time::Instant::now();
    let ticker = async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let el = started.elapsed();
            bar.set_position(el.as_secs().min(run.s.duration.as_secs()));
            if el >= run.s.duration {
                break;
            }
        }
    };
    let phase = tokio::select! {
        _ = ticker => Phase::Done,
        _ = tokio::signal::ctrl_c() => Phase::Interrupted,
    };
    bar.finish_and_clear();
    phase
}

/// Faults all end before the run does; wait for the nemesis, then remove every
/// fault, continue every process, restart every dead member anyway, and let the
/// workers finish their holds.
async fn heal_phase(
    run: &Run<'_>,
    nem: &Nemesis,
    nem_task: tokio::task::JoinHandle<()>,
    workers: &mut [WorkerProc],
) {
    let _ = tokio::time::timeout(Duration::from_secs(10), nem_task).await;
    let restarted = nem.heal_all().await;
    if !restarted.is_empty() {
        tracing::warn!("heal phase restarted members {restarted:?}");
    }
    run.say("run over: healed; waiting for workers to finish their holds");
    let grace_end = tokio::time::Instant::now() + WORKER_GRACE;
    for w in workers.iter_mut() {
        let left = grace_end.saturating_duration_since(tokio::time::Instant::now());
        if !w.wait_timeout(left).await {
            tracing::warn!("{} did not finish in time; killing it", w.name());
            w.stop(Duration::ZERO).await;
        }
    }
}

/// How long the run waits for the observer's feed before it starts the workers.
const OBSERVER_UP: Duration = Duration::from_secs(10);

/// The harness's own watch on the lock service, writing `service.jsonl`.
struct Observer {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    /// Starts the observer and returns once its feed is up, so that no grant of
    /// the run comes before it (the workers start after this). A feed not up
    /// within OBSERVER_UP is recorded as a gap: acquisitions near it are then
    /// unobserved, never judged phantoms.
    async fn start(service: Arc<dyn LockService>, run_dir: &Path) -> Result<Observer> {
        let out = ObservationWriter::create(&run_dir.join(rundir::SERVICE_OBSERVATIONS))
            .context("cannot create the service observation file")?;
        let mut up = out.readiness();
        let started = std::time::Instant::now();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let feed = out.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = service.observe(feed, rx).await {
                tracing::warn!("service observer stopped: {e:#}");
            }
        });
        if tokio::time::timeout(OBSERVER_UP, up.wait_for(|u| *u))
            .await
            .is_err()
        {
            let error = format!(
                "the observer's feed was not up {}s after it started",
                OBSERVER_UP.as_secs()
            );
            tracing::warn!("{error}");
            out.write(&crate::record::observe::Observation::Gap {
                time_ns: monotonic_ns(),
                error,
            });
        } else {
            tracing::debug!("the observer's feed was up after {:?}", started.elapsed());
        }
        Ok(Observer { stop, task })
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        // Room for the observer to settle (its watch's last events, a list: up
        // to 3 s each), then it is cut off.
        if tokio::time::timeout(Duration::from_secs(8), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// Reads every key once through a fresh client, straight to the storage, and
/// records it as process `final`: the value the checkers compare against.
async fn final_reads(run: &Run<'_>, dep: &Deployment) -> Result<()> {
    let s = run.s;
    let mut log = EventWriter::create(&run.dir.join(rundir::FINAL_EVENTS))?;
    let mut storage = run
        .resource
        .reach(dep.storage)
        .open(Duration::from_secs(5))?;
    for k in 0..s.workload.keys {
        let key = format!("k{k}");
        let mut inv = Event::new(
            Process::Named("final".into()),
            EventType::Invoke,
            F::FinalRead,
        );
        inv.key = Some(key.clone());
        log.write(&inv)?;
        let req = fencecheck_storage::Request {
            op: fencecheck_storage::OpKind::Read,
            key: key.clone(),
            val: None,
            token: None,
            revision: None,
            lease: None,
            client: "final".into(),
            request_id: u64::from(k) + 1,
        };
        let res = storage.call(&req).await;
        let mut e = Event::new(Process::Named("final".into()), EventType::Ok, F::FinalRead);
        e.key = Some(key);
        match res {
            Ok(a) => e.value = a.value,
            Err(err) => {
                e.kind = EventType::Fail;
                e.error = Some(format!("{err:#}"));
            }
        }
        log.write(&e)?;
    }
    Ok(())
}
