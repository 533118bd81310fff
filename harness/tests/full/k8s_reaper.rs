//! The kubernetes backend's reaper (issue #20) on the local cluster: the user's
//! own when one is up in the default state directory, else one of the test's own
//! (`common::cluster::TestCluster`).
//!
//! - abandoned (the harness "SIGKILLed": renewing stops), the reaper deletes the
//!   run's namespace with its pod, the Lease, its Secret and its own pod, and no
//!   container of those pods is running, within 60 s — and not while the Lease is
//!   being renewed; with the node's Docker socket (the local cluster) the reaper
//!   removes their stopped containers too, its own last, rather than leave them to
//!   kubelet's once-a-minute garbage collection: none left within 60 s either;
//! - stopped (the normal end), the reaper pod and Secret go and the run's
//!   namespace is left as it was.
//!
//! Skipped (one line) only where no Docker engine answers and
//! FENCECHECK_REQUIRE_DOCKER is unset.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, LogParams, PostParams};

use fencecheck::backend::kubernetes::reaper::{self, ReaperAccess, HOME, LEASE, STALE};
use fencecheck::cluster;

/// The cluster at the default state directory, if one answers.
struct Cluster {
    client: kube::Client,
    state: cluster::state::State,
}

/// The cluster `tc` names, connected.
async fn connect(tc: &TestCluster) -> Cluster {
    let state = cluster::state::State::load(&tc.dir)
        .expect("cluster state")
        .expect("no cluster state");
    let client = cluster::api::client(&state.kubeconfig)
        .await
        .expect("client");
    Cluster { client, state }
}

/// `fc` and ten hex digits, like a run id.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let mixed = nanos ^ ((std::process::id() as u128) << 40);
    format!("fc{:010x}", mixed & 0xff_ffff_ffff)
}

fn meta(name: &str, ns: Option<&str>, run_id: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(String::from),
        labels: Some(BTreeMap::from([(
            reaper::RUN_LABEL.to_string(),
            run_id.to_string(),
        )])),
        ..Default::default()
    }
}

/// The run's namespace, labelled, with the `default` service account a pod needs
/// (no controller-manager makes it).
async fn make_namespace(c: &Cluster, ns: &str, run_id: &str) {
    let nss: Api<Namespace> = Api::all(c.client.clone());
    nss.create(
        &PostParams::default(),
        &Namespace {
            metadata: meta(ns, None, run_id),
            ..Default::default()
        },
    )
    .await
    .expect("create namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: meta("default", Some(ns), run_id),
            ..Default::default()
        },
    )
    .await
    .expect("create service account");
}

/// A pause pod in `ns`, waited for until Running.
async fn make_pod(c: &Cluster, ns: &str, name: &str, run_id: &str) {
    let mut pod = local_pod(
        name,
        Container {
            name: "pause".into(),
            ..Default::default()
        },
        &c.state.pause_image,
    );
    pod.metadata = meta(name, Some(ns), run_id);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = pods.get(name).await.expect("get pod");
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Running" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pod {ns}/{name} not Running in 60 s: {phase}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn reaper_image() -> String {
    let e = fencecheck::backend::docker::engine(Duration::from_secs(10))
        .await
        .expect("engine");
    let started = Instant::now();
    let say = |s: &str| eprintln!("{s}");
    let image = fencecheck::images::reaper_image(&e.docker, &say)
        .await
        .expect("reaper image");
    eprintln!(
        "reaper image {} ({}) in {:.1} s",
        image.tag,
        if image.reused { "reused" } else { "built" },
        started.elapsed().as_secs_f64()
    );
    image.tag
}

fn access(c: &Cluster) -> ReaperAccess {
    ReaperAccess {
        server: c.state.server.clone(),
        token: c.state.token.clone(),
        ca_pem: c.state.ca_pem.clone(),
        node: Some(cluster::NODE.into()),
        host_network: true,
        docker_socket: Some("/var/run/docker.sock".into()),
        pull: None,
    }
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_some()
}

/// The `k8s_*` containers whose name mentions `needle` (`_<pod>_<namespace>_`, or
/// `_<namespace>_`).
fn containers_of(all: &[(String, bool)], needle: &str) -> Vec<String> {
    all.iter()
        .filter(|(n, _)| n.contains(needle))
        .map(|(n, _)| n.clone())
        .collect()
}

/// Every `k8s_*` container with whether it is running. Exited containers of
/// deleted pods stay until kubelet's container garbage collection, which runs once
/// a minute (`ContainerGCPeriod`, not configurable in kubelet 1.20).
async fn k8s_containers_now() -> (Vec<(String, bool)>, Vec<(String, bool)>) {
    use testcontainers::bollard::query_parameters::ListContainersOptionsBuilder;
    let e = fencecheck::backend::docker::engine(Duration::from_secs(10))
        .await
        .expect("engine");
    let all: Vec<(String, bool)> = e
        .docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .expect("docker ps -a")
        .into_iter()
        .filter_map(|c| {
            let name = c
                .names?
                .into_iter()
                .map(|n| n.trim_start_matches('/').to_string())
                .find(|n| n.starts_with(cluster::containers::PREFIX))?;
            let state = c.state.map(|s| s.to_string()).unwrap_or_default();
            Some((
                name,
                matches!(state.as_str(), "running" | "paused" | "restarting"),
            ))
        })
        .collect();
    let running = all.iter().filter(|c| c.1).cloned().collect();
    (all, running)
}

/// Deletes `ns` as the reaper would on this cluster (no namespace controller):
/// its pods with grace 0, then the namespace, what it holds, and its finalizer.
async fn remove_namespace(client: &kube::Client, ns: &str) {
    let grace0 = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = pods.delete_collection(&grace0, &Default::default()).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let _ = leases
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let _ = sas
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(ns, &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let Some(mut n) = nss.get_opt(ns).await.expect("get namespace") else {
            return;
        };
        n.metadata.managed_fields = None;
        if let Some(spec) = n.spec.as_mut() {
            spec.finalizers = Some(vec![]);
        }
        let _ = nss
            .replace_subresource("finalize", ns, &PostParams::default(), &n)
            .await;
        let _ = nss.delete(ns, &DeleteParams::default()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("cleanup: namespace {ns} still there after 30 s");
}

/// Runs `body`, then always the clean-up of what it may have left; a panic in
/// `body` is raised again after the clean-up.
fn with_cleanup<F>(rt: &tokio::runtime::Runtime, c: &Cluster, ns: &str, run_id: &str, body: F)
where
    F: std::future::Future<Output = ()>,
{
    use futures_util::FutureExt;
    let result = rt.block_on(std::panic::AssertUnwindSafe(body).catch_unwind());
    rt.block_on(async {
        let name = reaper::name(run_id);
        let grace0 = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), HOME);
        let _ = pods.delete(&name, &grace0).await;
        let secrets: Api<Secret> = Api::namespaced(c.client.clone(), HOME);
        let _ = secrets.delete(&name, &DeleteParams::default()).await;
        remove_namespace(&c.client, ns).await;
    });
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn an_abandoned_reaper_removes_the_run_namespace_and_then_itself() {
    if !docker::docker_or_skip("k8s_reaper") {
        return;
    }
    let _one = kube();
    let tc = TestCluster::take("k8s_reaper");
    let rt = runtime();
    let c = rt.block_on(connect(&tc));
    let id = run_id();
    let ns = format!("fencecheck-{id}");
    with_cleanup(&rt, &c, &ns, &id, abandoned(&c, &ns, &id));
    tc.finish();
}

async fn abandoned(c: &Cluster, ns: &str, id: &str) {
    let image = reaper_image().await;
    make_namespace(c, ns, id).await;
    make_pod(c, ns, "member", id).await;
    let say = |s: &str| eprintln!("{s}");
    let r = reaper::start(&c.client, ns, id, &access(c), &image, &say)
        .await
        .expect("start the reaper");
    let name = r.name.clone();
    let nss: Api<Namespace> = Api::all(c.client.clone());
    let run_pods: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    let home_pods: Api<Pod> = Api::namespaced(c.client.clone(), HOME);
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), HOME);
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), ns);

    // Renewed, the Lease keeps the run alive past the staleness limit.
    tokio::time::sleep(STALE + Duration::from_secs(4)).await;
    let n = nss
        .get(ns)
        .await
        .expect("the run's namespace while renewing");
    assert!(
        n.metadata.deletion_timestamp.is_none(),
        "the reaper deleted the namespace while the Lease was renewed"
    );
    assert!(
        exists(&run_pods, "member").await,
        "the run's pod went while renewing"
    );
    assert!(
        exists(&home_pods, &name).await,
        "the reaper pod went while renewing"
    );

    r.abandon();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(60);
    let mut gone: BTreeMap<&str, f64> = BTreeMap::new();
    let mut log = String::new();
    loop {
        let (_, names) = k8s_containers_now().await;
        let left = [
            ("namespace", !exists(&nss, ns).await),
            ("run pod", !exists(&run_pods, "member").await),
            ("lease", !exists(&leases, LEASE).await),
            ("reaper pod", !exists(&home_pods, &name).await),
            ("secret", !exists(&secrets, &name).await),
            (
                "running run containers",
                containers_of(&names, &format!("_{ns}_")).is_empty(),
            ),
            (
                "running reaper containers",
                containers_of(&names, &format!("_{name}_{HOME}_")).is_empty(),
            ),
        ];
        let at = t0.elapsed().as_secs_f64();
        for (what, is_gone) in left {
            if is_gone {
                gone.entry(what).or_insert(at);
            } else {
                gone.remove(what);
            }
        }
        if gone.len() == left.len() {
            break;
        }
        if let Ok(l) = home_pods.logs(&name, &LogParams::default()).await {
            log = l;
        }
        assert!(
            Instant::now() < deadline,
            "not everything gone 60 s after the harness stopped renewing: gone {gone:?}, \
             containers {names:?}\nreaper log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("gone, seconds after abandon: {gone:?}\nreaper log:\n{log}");
    // The stopped containers too, by the reaper through the node's engine: within
    // the same 60 s, not at kubelet's next garbage collection.
    let gc_deadline = deadline;
    loop {
        let (all, _) = k8s_containers_now().await;
        let mut left = containers_of(&all, &format!("_{ns}_"));
        left.extend(containers_of(&all, &format!("_{name}_{HOME}_")));
        if left.is_empty() {
            eprintln!(
                "exited containers removed {:.1} s after abandon",
                t0.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            Instant::now() < gc_deadline,
            "containers left 60 s after the harness stopped renewing: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Not before the Lease went stale: renewed at most RENEW_EVERY before the
    // abandon, the reaper waits STALE from its last change (its polls are 1 s apart).
    let ns_gone = gone["namespace"];
    assert!(
        ns_gone >= (STALE - reaper::RENEW_EVERY - Duration::from_secs(1)).as_secs_f64(),
        "the namespace went {ns_gone:.1} s after the abandon, before the Lease was stale"
    );
}

#[test]
fn a_stopped_reaper_goes_and_leaves_the_run_namespace_alone() {
    if !docker::docker_or_skip("k8s_reaper") {
        return;
    }
    let _one = kube();
    let tc = TestCluster::take("k8s_reaper");
    let rt = runtime();
    let c = rt.block_on(connect(&tc));
    let id = run_id();
    let ns = format!("fencecheck-{id}");
    with_cleanup(&rt, &c, &ns, &id, stopped(&c, &ns, &id));
    tc.finish();
}

async fn stopped(c: &Cluster, ns: &str, id: &str) {
    let image = reaper_image().await;
    make_namespace(c, ns, id).await;
    let say = |s: &str| eprintln!("{s}");
    let r = reaper::start(&c.client, ns, id, &access(c), &image, &say)
        .await
        .expect("start the reaper");
    let name = r.name.clone();
    let nss: Api<Namespace> = Api::all(c.client.clone());
    let home_pods: Api<Pod> = Api::namespaced(c.client.clone(), HOME);
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), HOME);
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), ns);
    assert!(exists(&home_pods, &name).await);
    assert!(exists(&secrets, &name).await);

    r.stop(&c.client).await;
    let t0 = Instant::now();
    // Until the reaper's container has stopped too: from then on it cannot reap.
    loop {
        let (_, names) = k8s_containers_now().await;
        let pod = exists(&home_pods, &name).await;
        let secret = exists(&secrets, &name).await;
        let containers = containers_of(&names, &format!("_{name}_{HOME}_"));
        if !pod && !secret && containers.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "30 s after stop: pod {pod}, secret {secret}, running containers {containers:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "reaper pod and secret gone, its containers exited, {:.1} s after stop",
        t0.elapsed().as_secs_f64()
    );
    let n = nss.get(ns).await.expect("the run's namespace after stop");
    assert!(
        n.metadata.deletion_timestamp.is_none(),
        "the stopped reaper deleted the namespace"
    );
    assert!(
        exists(&leases, LEASE).await,
        "the stopped reaper deleted the Lease"
    );
    remove_namespace(&c.client, ns).await;
    assert!(!exists(&nss, ns).await, "namespace {ns} left by the test");
}
