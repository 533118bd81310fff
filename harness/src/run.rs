//! One run: backend up → workers → nemesis → heal → collect → check → report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use fencecheck_reports::{PlannedFault, Report, RunInfo};
use indicatif::{ProgressBar, ProgressStyle};

use std::sync::Arc;

use crate::assess::{self, FINAL_EVENTS};
use crate::backend::{Backend, Deployment};
use crate::history::{monotonic_ns, Event, EventType, EventWriter, Process, F};
use crate::links::Links;
use crate::nemesis::{self, Nemesis, World};
use crate::proc::{spawn, Child};
use crate::scenario::{BackendKind, EtcdVersion, Scenario};
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
}

/// Why a run did not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "interrupted (Ctrl-C); the recorded files are in {0}; `fencecheck check {0}` checks them"
    )]
    Interrupted(String),
    #[error(transparent)]
    Harness(#[from] anyhow::Error),
}

/// How long workers get after the run's end to finish their current hold.
const WORKER_GRACE: Duration = Duration::from_secs(15);

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
        s.cluster.etcd = e;
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

fn default_run_dir(name: &str) -> PathBuf {
    let ts = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from("runs").join(format!("{name}-{ts}"))
}

fn reproduce_command(scenario_path: &Path, s: &Scenario, seed: u64) -> String {
    format!(
        "fencecheck scenario {} --seed {seed} --duration {} --workers {} --etcd {} --backend {}",
        scenario_path.display(),
        humantime::format_duration(s.duration),
        s.workload.workers,
        s.cluster.etcd,
        match s.cluster.backend {
            BackendKind::Auto => "auto",
            BackendKind::Process => "process",
            BackendKind::Docker => "docker",
        }
    )
}

pub async fn run(
    scenario_path: &Path,
    mut scenario: Scenario,
    o: &Overrides,
    quiet: bool,
) -> Result<(Report, PathBuf), RunError> {
    let seed = apply_overrides(&mut scenario, o);
    let run_dir = o
        .out
        .clone()
        .unwrap_or_else(|| default_run_dir(&scenario.name));
    std::fs::create_dir_all(&run_dir)
        .with_context(|| format!("cannot create run directory {}", run_dir.display()))?;
    std::fs::write(run_dir.join(assess::SCENARIO), scenario.to_toml())
        .context("cannot write the resolved scenario")?;
    let say = |m: &str| {
        if !quiet {
            eprintln!("· {m}");
        }
    };
    say(&format!(
        "scenario {} (seed {seed}) → {}",
        scenario.name,
        run_dir.display()
    ));

    let (backend, dep) =
        Backend::start(scenario.cluster.backend, &scenario, &run_dir, &say).await?;
    let backend = Arc::new(tokio::sync::Mutex::new(backend));
    let links = match Links::start(
        scenario.workload.workers,
        &dep.etcd_clients,
        dep.storage,
        dep.peer_proxies.clone(),
    )
    .await
    {
        Ok(l) => Arc::new(l),
        Err(e) => {
            backend.lock().await.stop().await;
            return Err(e.into());
        }
    };
    let outcome = drive(
        scenario_path,
        &scenario,
        seed,
        &run_dir,
        &dep,
        backend.clone(),
        links.clone(),
        quiet,
        &say,
    )
    .await;
    backend.lock().await.stop().await;
    links.shutdown().await;
    outcome?;
    say("checking the recorded history");
    let report = assess::assess(&run_dir)?;
    Ok((report, run_dir))
}

/// Workers and nemesis against a started backend. Everything started here is
/// stopped here, on every path.
#[allow(clippy::too_many_arguments)]
async fn drive(
    scenario_path: &Path,
    s: &Scenario,
    seed: u64,
    run_dir: &Path,
    dep: &Deployment,
    backend: Arc<tokio::sync::Mutex<Backend>>,
    links: Arc<Links>,
    quiet: bool,
    say: &dyn Fn(&str),
) -> Result<(), RunError> {
    let plan = nemesis::plan(s, seed);
    let start_ns = monotonic_ns();
    let end_ns = start_ns + s.duration.as_nanos() as u64;
    let info = RunInfo {
        scenario: s.name.clone(),
        description: s.description.clone(),
        seed,
        command: reproduce_command(scenario_path, s, seed),
        run_dir: run_dir.display().to_string(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        duration_s: s.duration.as_secs_f64(),
        backend: dep.backend.clone(),
        backend_reason: dep.backend_reason.clone(),
        etcd_version: dep.etcd_version.clone(),
        etcd_members: s.cluster.etcd_members.0,
        workers: s.workload.workers,
        keys: s.workload.keys,
        ttl_s: s.lock.ttl.as_secs(),
        fencing: s.storage.fencing.as_str().to_string(),
        token: serde_json::to_value(s.storage.token)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
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
            })
            .collect(),
    };
    assess::write_run_info(run_dir, &info)?;

    let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
    let mut workers: Vec<Child> = Vec::new();
    for id in 0..s.workload.workers {
        let cfg = WorkerConfig {
            id,
            etcd_endpoints: links.etcd_endpoints(id),
            storage_url: links.storage_url(id),
            ttl_s: s.lock.ttl.as_secs() as i64,
            token: s.storage.token,
            keys: s.workload.keys,
            ops_per_hold: s.workload.ops_per_hold,
            hold_min_ms: s.workload.hold.min.as_millis() as u64,
            hold_max_ms: s.workload.hold.max.as_millis() as u64,
            seed,
            events: run_dir.join(format!("worker-{id}.jsonl")),
            end_ns,
        };
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("worker")
            .arg("--config")
            .arg(serde_json::to_string(&cfg).context("worker config")?);
        workers.push(spawn(
            &format!("worker {id}"),
            cmd,
            &run_dir.join(format!("worker-{id}.log")),
        )?);
    }
    let pids: HashMap<u32, u32> = workers
        .iter()
        .enumerate()
        .map(|(i, c)| (i as u32, c.pid()))
        .collect();
    let world = World {
        etcd_endpoints: dep.etcd_endpoints(),
        workers: pids,
        backend,
        links,
    };
    let nem = Nemesis::new(world, &run_dir.join("nemesis.jsonl"), seed).await?;
    say(&format!(
        "{} workers contending for {}, {} faults planned",
        s.workload.workers,
        humantime::format_duration(s.duration),
        plan.len()
    ));

    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(s.duration.as_secs())
    };
    bar.set_style(
        ProgressStyle::with_template("  {spinner} {elapsed_precise} [{bar:40}] {pos}/{len}s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = tokio::time::Instant::now();
    let nem_task = tokio::spawn(nem.clone().run(plan, started));
    let ticker = async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let el = started.elapsed();
            bar.set_position(el.as_secs().min(s.duration.as_secs()));
            if el >= s.duration {
                break;
            }
        }
    };
    let interrupted = tokio::select! {
        _ = ticker => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    bar.finish_and_clear();

    if interrupted {
        nem_task.abort();
        nem.heal();
        for w in &mut workers {
            w.stop(Duration::ZERO).await;
        }
        return Err(RunError::Interrupted(run_dir.display().to_string()));
    }
    // Heal phase. Faults all end before the run does; wait for the nemesis, then
    // remove every fault, continue every process, restart every dead member anyway.
    let _ = tokio::time::timeout(Duration::from_secs(10), nem_task).await;
    let restarted = nem.heal_all().await;
    if !restarted.is_empty() {
        tracing::warn!("heal phase restarted members {restarted:?}");
    }
    say("run over: healed; waiting for workers to finish their holds");
    let grace_end = tokio::time::Instant::now() + WORKER_GRACE;
    for w in &mut workers {
        let left = grace_end.saturating_duration_since(tokio::time::Instant::now());
        if w.wait_timeout(left).await.is_none() {
            tracing::warn!("{} did not finish in time; killing it", w.name);
            w.stop(Duration::ZERO).await;
        }
    }
    // A short quiet period, then the final read of every key by a fresh client.
    tokio::time::sleep(QUIET).await;
    final_reads(s, dep, run_dir).await?;
    Ok(())
}

const QUIET: Duration = Duration::from_millis(500);

/// Reads every key once through a fresh client, straight to the storage, and
/// records it as process `final`: the value the checkers compare against.
async fn final_reads(s: &Scenario, dep: &Deployment, run_dir: &Path) -> Result<()> {
    let mut log = EventWriter::create(&run_dir.join(FINAL_EVENTS))?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = format!("http://{}/", dep.storage);
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
        let res = async {
            let r = http
                .post(&url)
                .json(&req)
                .send()
                .await?
                .error_for_status()?;
            anyhow::Ok(r.json::<fencecheck_storage::Answer>().await?)
        }
        .await;
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
