//! Clean-up by label: what a run leaves behind is found through
//! `fencecheck.run=<id>`, never through names the harness remembers, so the same
//! code serves a normal stop, a dropped run (error, panic, Ctrl-C) and
//! `fencecheck clean` (leftovers of older harnesses, which had no reaper).

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use testcontainers::bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptionsBuilder,
    ListVolumesOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, RemoveVolumeOptionsBuilder,
};
use testcontainers::bollard::Docker;

use super::{engine, ROLE_LABEL, RUN_LABEL};
use crate::images;

/// What a removal did.
#[derive(Debug, Default)]
pub struct Removed {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub volumes: Vec<String>,
}

/// How long a removal keeps trying while the engine is still busy with the run's
/// objects (a container whose removal is already in progress, a volume still in
/// use by it, a network with an endpoint left): Ctrl-C can land while the run's
/// own stop is half-way through removing them.
const SETTLE: Duration = Duration::from_secs(20);

/// Removes the containers (forced), volumes and networks labelled
/// `fencecheck.run=<run_id>`, or of every run when `run_id` is None, trying again
/// until nothing is left or [`SETTLE`] has passed. A run's reaper container goes
/// last, and only once everything else is gone: while anything else of the run
/// exists, the reaper is what removes it should this harness die or give up.
pub async fn remove_run(d: &Docker, run_id: Option<&str>) -> Result<Removed> {
    remove_runs(d, run_id, &BTreeSet::new()).await
}

/// [`remove_run`], leaving alone every object of the runs in `keep`.
async fn remove_runs(d: &Docker, run_id: Option<&str>, keep: &BTreeSet<String>) -> Result<Removed> {
    let label = match run_id {
        Some(id) => format!("{RUN_LABEL}={id}"),
        None => RUN_LABEL.to_string(),
    };
    let filters = HashMap::from([("label".to_string(), vec![label])]);
    let mut removed = Removed::default();
    let deadline = tokio::time::Instant::now() + SETTLE;
    let (errors, reapers) = loop {
        let (errors, reapers) = remove_pass(d, &filters, keep, &mut removed).await?;
        if errors.is_empty() || tokio::time::Instant::now() >= deadline {
            break (errors, reapers);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    if !errors.is_empty() {
        // The reapers stay: they remove the rest once this harness is gone.
        bail!("{}", errors.join("; "));
    }
    for (id, name) in reapers {
        match remove_container(d, &id).await {
            // Auto-removed while we looked: gone either way.
            Ok(()) => removed.containers.push(name),
            Err(e) if is_not_found(&e) => removed.containers.push(name),
            Err(e) => bail!("docker rm {name}: {e}"),
        }
    }
    Ok(removed)
}

/// One pass over the run's objects: every container but the reapers, then the
/// volumes, then the networks. Returns what could not be removed yet, and the
/// reapers (id, name) found.
async fn remove_pass(
    d: &Docker,
    filters: &HashMap<String, Vec<String>>,
    keep: &BTreeSet<String>,
    removed: &mut Removed,
) -> Result<(Vec<String>, Vec<(String, String)>)> {
    let kept = |labels: Option<&HashMap<String, String>>| {
        labels
            .and_then(|l| l.get(RUN_LABEL))
            .is_some_and(|id| keep.contains(id))
    };
    let mut errors = Vec::new();
    let containers = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(filters)
                .build(),
        ))
        .await
        .context("docker ps")?;
    let is_reaper = |c: &testcontainers::bollard::models::ContainerSummary| {
        c.labels
            .as_ref()
            .and_then(|l| l.get(ROLE_LABEL))
            .is_some_and(|r| r == "reaper")
    };
    let mut reapers = Vec::new();
    for c in containers {
        if kept(c.labels.as_ref()) {
            continue;
        }
        let reaper = is_reaper(&c);
        let Some(id) = c.id else { continue };
        let name = c
            .names
            .and_then(|n| n.first().cloned())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_else(|| id.clone());
        if reaper {
            // After everything else (see remove_run).
            reapers.push((id, name));
            continue;
        }
        match remove_container(d, &id).await {
            Ok(()) => removed.containers.push(name),
            Err(e) if is_gone(&e) => removed.containers.push(name),
            Err(e) => errors.push(format!("docker rm {name}: {e}")),
        }
    }
    let volumes = d
        .list_volumes(Some(
            ListVolumesOptionsBuilder::default()
                .filters(filters)
                .build(),
        ))
        .await
        .context("docker volume ls")?;
    for v in volumes.volumes.unwrap_or_default() {
        if kept(Some(&v.labels)) {
            continue;
        }
        match d
            .remove_volume(
                &v.name,
                Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => removed.volumes.push(v.name),
            Err(e) if is_gone(&e) => removed.volumes.push(v.name),
            Err(e) => errors.push(format!("docker volume rm {}: {e}", v.name)),
        }
    }
    let networks = d
        .list_networks(Some(
            ListNetworksOptionsBuilder::default()
                .filters(filters)
                .build(),
        ))
        .await
        .context("docker network ls")?;
    for n in networks {
        if kept(n.labels.as_ref()) {
            continue;
        }
        let Some(name) = n.name else { continue };
        match d.remove_network(&name).await {
            Ok(()) => removed.networks.push(name),
            Err(e) if is_gone(&e) => removed.networks.push(name),
            Err(e) => errors.push(format!("docker network rm {name}: {e}")),
        }
    }
    Ok((errors, reapers))
}

/// Forced removal with anonymous volumes; a paused container is thawed first, so
/// nothing is ever left frozen.
async fn remove_container(
    d: &Docker,
    id: &str,
) -> Result<(), testcontainers::bollard::errors::Error> {
    let _ = d.unpause_container(id).await;
    d.remove_container(
        id,
        Some(
            RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build(),
        ),
    )
    .await
}

/// 404 alone: the object is gone. (A 409 "removal already in progress" or "in
/// use" means not yet: the next pass tries again.)
fn is_gone(e: &testcontainers::bollard::errors::Error) -> bool {
    matches!(
        e,
        testcontainers::bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub(super) fn is_not_found(e: &testcontainers::bollard::errors::Error) -> bool {
    matches!(
        e,
        testcontainers::bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            ..
        }
    )
}

/// Removes the images fencecheck built (label `fencecheck.image`).
pub async fn remove_images(d: &Docker) -> Result<Vec<String>> {
    let filters = HashMap::from([("label".to_string(), vec![images::IMAGE_LABEL.to_string()])]);
    let list = d
        .list_images(Some(
            ListImagesOptionsBuilder::default()
                .all(false)
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker images")?;
    let mut out = Vec::new();
    for i in list {
        let name = i.repo_tags.first().cloned().unwrap_or_else(|| i.id.clone());
        d.remove_image(
            &i.id,
            Some(RemoveImageOptionsBuilder::default().force(true).build()),
            None,
        )
        .await
        .with_context(|| format!("docker rmi {name}"))?;
        out.push(name);
    }
    Ok(out)
}

/// `fencecheck clean`: removes what earlier runs left (label `fencecheck.run`), and
/// with `images` the images fencecheck built. A run whose reaper is still running
/// is in progress (its harness holds the reaper's connection; a harness that dies
/// has its run removed by that reaper within seconds), so it is left alone unless
/// `force`: a `clean` beside a suite must not pull the suite's containers away.
pub async fn clean(images: bool, force: bool) -> Result<Vec<String>> {
    let e = engine::engine(engine::ENGINE_TIMEOUT)
        .await
        .context("no Docker engine answers: nothing to clean")?;
    let kept = if force {
        BTreeSet::new()
    } else {
        live_runs(&e.docker).await?
    };
    let r = remove_runs(&e.docker, None, &kept).await?;
    let mut lines = vec![format!(
        "removed {} container(s), {} network(s), {} volume(s) labelled {RUN_LABEL}",
        r.containers.len(),
        r.networks.len(),
        r.volumes.len()
    )];
    for (kind, names) in [
        ("container", &r.containers),
        ("network", &r.networks),
        ("volume", &r.volumes),
    ] {
        lines.extend(names.iter().map(|n| format!("  {kind} {n}")));
    }
    if !kept.is_empty() {
        lines.push(format!(
            "left {} run(s) in progress (their reaper is running; --force removes them too): {}",
            kept.len(),
            kept.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if images {
        let imgs = remove_images(&e.docker).await?;
        lines.push(format!("removed {} image(s)", imgs.len()));
        lines.extend(imgs.iter().map(|n| format!("  image {n}")));
    }
    Ok(lines)
}

/// The runs whose reaper container is running: in progress.
async fn live_runs(d: &Docker) -> Result<BTreeSet<String>> {
    let filters = HashMap::from([
        ("label".to_string(), vec![format!("{ROLE_LABEL}=reaper")]),
        ("status".to_string(), vec!["running".to_string()]),
    ]);
    let reapers = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker ps (reapers)")?;
    Ok(reapers
        .into_iter()
        .filter_map(|c| c.labels?.remove(RUN_LABEL))
        .collect())
}

/// A container's output so far (stdout and stderr, interleaved as written); empty
/// when the container does not exist.
pub(super) async fn container_logs(d: &Docker, container: &str) -> Vec<u8> {
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .build();
    let mut out = Vec::new();
    let mut s = d.logs(container, Some(opts));
    while let Some(Ok(chunk)) = s.next().await {
        out.extend_from_slice(&chunk.into_bytes());
    }
    out
}

/// Saves each container's output to its file (a container that no longer exists or
/// printed nothing leaves the file as it is).
pub(super) async fn save_logs(d: &Docker, logs: &[(String, PathBuf)]) {
    for (name, file) in logs {
        let bytes = container_logs(d, name).await;
        if !bytes.is_empty() {
            if let Err(e) = std::fs::write(file, bytes) {
                tracing::warn!(
                    "cannot save the output of {name} to {}: {e}",
                    file.display()
                );
            }
        }
    }
}

/// Engine calls under way that create something (see [`tracked`]).
#[derive(Clone, Default)]
pub(super) struct InFlight(Arc<(Mutex<usize>, Condvar)>);

pub(super) struct InFlightToken(InFlight);

impl InFlight {
    fn enter(&self) -> InFlightToken {
        if let Ok(mut n) = self.0 .0.lock() {
            *n += 1;
        }
        InFlightToken(self.clone())
    }

    /// Waits until no call is under way, up to `deadline`.
    fn wait_idle(&self, deadline: Duration) {
        let (lock, cv) = &*self.0;
        if let Ok(n) = lock.lock() {
            let _ = cv.wait_timeout_while(n, deadline, |n| *n > 0);
        }
    }
}

impl Drop for InFlightToken {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0 .0;
        if let Ok(mut n) = lock.lock() {
            *n = n.saturating_sub(1);
        }
        cv.notify_all();
    }
}

/// Runs one engine call that creates or changes something as a task of its own: if
/// the run is dropped mid-call (Ctrl-C), the call still completes on our side as it
/// does on the engine's, and the clean-up guard waits for it before removing by
/// label, so nothing is created after the clean-up has looked.
pub(super) async fn tracked<T, Fut>(inflight: &InFlight, fut: Fut) -> Result<T>
where
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let token = inflight.enter();
    tokio::spawn(async move {
        let _token = token;
        fut.await
    })
    .await
    .context("docker engine call")
}

/// Removes a run's containers, networks and volumes by label when the run is
/// dropped without a clean stop: on an error, a panic, or a Ctrl-C that drops the
/// run. Blocking, on a thread of its own with a fresh runtime and a fresh engine
/// connection (a drop may happen inside an async context, or while the run's
/// runtime shuts down).
pub(super) struct CleanupGuard {
    run_id: String,
    armed: bool,
    pub(super) inflight: InFlight,
    /// Container → the file its output is saved to before it is removed.
    pub(super) logs: Vec<(String, PathBuf)>,
}

impl CleanupGuard {
    pub(super) fn new(run_id: &str) -> CleanupGuard {
        CleanupGuard {
            run_id: run_id.to_string(),
            armed: true,
            inflight: InFlight::default(),
            logs: Vec::new(),
        }
    }

    pub(super) fn armed(&self) -> bool {
        self.armed
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Saves the containers' output and removes everything of the run, now.
    pub(super) fn clean_up_now(&mut self) {
        self.armed = false;
        // A call the engine is still completing would create something after the
        // removal below has listed what exists.
        self.inflight.wait_idle(Duration::from_secs(30));
        let run_id = self.run_id.clone();
        let logs = std::mem::take(&mut self.logs);
        let t = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("fencecheck: cannot clean up docker run {run_id}: {e}");
                    return;
                }
            };
            let r = rt.block_on(async {
                let d = engine::fresh(Duration::from_secs(10)).await?;
                save_logs(&d, &logs).await;
                remove_run(&d, Some(&run_id)).await
            });
            if let Err(e) = r {
                eprintln!(
                    "fencecheck: docker clean-up of run {run_id} failed ({e:#}); \
                     its reaper or `fencecheck clean` removes what is left"
                );
            }
        });
        let _ = t.join();
    }
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.clean_up_now();
        }
    }
}
