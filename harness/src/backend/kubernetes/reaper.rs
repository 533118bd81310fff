//! The harness's side of the kubernetes backend's reaper (`fencecheck-reaper kube`,
//! see `reaper/src/kube.rs`): the dead-man switch for a harness killed with
//! SIGKILL, which must leave nothing of its run within 60 s without anyone running
//! a command.
//!
//! [`start`] creates the run's Lease [`LEASE`] in the run's namespace, a Secret
//! with the reaper's credentials and the reaper's pod, both in namespace
//! [`HOME`] (outside the run's namespace, so the reaper can see that namespace to
//! its end and then remove itself), waits for the pod to run, and renews the Lease
//! every [`RENEW_EVERY`] from a tokio task. The reaper reads the Lease every
//! second; once it has not changed for [`STALE`] by the reaper's own clock, it
//! deletes the run's pods and namespace, its Secret and its own pod. A run that
//! ends normally calls [`Reaper::stop`] (and deletes its namespace itself).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, HostPathVolumeSource, LocalObjectReference, Pod, PodSpec, Secret, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

/// The Lease the harness renews, in the run's namespace.
pub const LEASE: &str = "fencecheck-harness";
/// The namespace of the reaper's pod and Secret.
pub const HOME: &str = "default";
/// How often the harness renews the Lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long the Lease may stay unchanged, by the reaper's clock, before the reaper
/// takes the harness for dead: five renewals missed.
pub const STALE: Duration = Duration::from_secs(10);
/// How long the reaper's pod may take to run (its image is local and tiny).
const RUNNING_DEADLINE: Duration = Duration::from_secs(60);
/// The labels of every object of a run, and the reaper's role.
pub const RUN_LABEL: &str = "fencecheck.run";
pub const ROLE_LABEL: &str = "fencecheck.role";
/// The reaper binary in its image (`ci/images/reaper.Dockerfile`).
const BINARY: &str = "/fencecheck-reaper";

/// How the reaper reaches the API server, and where its pod runs.
pub struct ReaperAccess {
    /// The API server's URL as the reaper's pod reaches it.
    pub server: String,
    /// A token allowed what the reaper does (docs/kubernetes.md lists the RBAC).
    pub token: String,
    /// The CA of the API server's certificate, PEM.
    pub ca_pem: String,
    /// The pod's `nodeName`: set on a cluster without a scheduler (the local one).
    pub node: Option<String>,
    /// `hostNetwork`: the local cluster's API server listens on the host's loopback.
    pub host_network: bool,
    /// The node's Docker socket, mounted at the same path, when the node's engine
    /// is this machine's (the local cluster): the reaper removes the run's stopped
    /// containers through it instead of leaving them to kubelet's garbage
    /// collection (a minute).
    pub docker_socket: Option<String>,
    /// `.dockerconfigjson` of the registry login the reaper's image is pulled
    /// with (`registry.rs`), when `[cluster] registry` has one.
    pub pull: Option<String>,
}

/// A started reaper whose Lease this process renews. Dropping it stops the
/// renewing, as [`Reaper::abandon`] does: the reaper then reaps the run.
pub struct Reaper {
    renew: tokio::task::JoinHandle<()>,
    /// The reaper's pod and its Secret, both named so, in [`HOME`].
    pub name: String,
    /// The run's namespace.
    pub namespace: String,
    /// Where it runs and how it reaches the API server, for `kubernetes.json`.
    pub record: serde_json::Value,
}

/// `fencecheck-reaper-<run_id>`: the reaper's pod and Secret.
pub fn name(run_id: &str) -> String {
    format!("fencecheck-reaper-{run_id}")
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn labels(run_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (RUN_LABEL.to_string(), run_id.to_string()),
        (ROLE_LABEL.to_string(), "reaper".to_string()),
    ])
}

/// Creates the run's Lease (in `ns`, which exists), the Secret and the reaper pod,
/// waits until the reaper pod is Running, and starts renewing. On an error,
/// whatever of it was made is deleted again.
pub async fn start(
    client: &kube::Client,
    ns: &str,
    run_id: &str,
    access: &ReaperAccess,
    image: &str,
    say: &dyn Fn(&str),
) -> Result<Reaper> {
    let name = name(run_id);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([(RUN_LABEL.into(), run_id.into())])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(format!("fencecheck-harness-{run_id}")),
            lease_duration_seconds: Some(STALE.as_secs() as i32),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            ..Default::default()
        }),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .with_context(|| format!("create lease {ns}/{LEASE}"))?;
    // Renewing starts now: the reaper's staleness clock starts at its first read,
    // and the harness must not look dead while the pod is coming up.
    let renew = tokio::spawn(renew(leases, ns.to_string()));
    let reaper = Reaper {
        renew,
        name: name.clone(),
        namespace: ns.to_string(),
        record: serde_json::Value::Null,
    };
    match make_pod(client, ns, run_id, &name, access, image, say).await {
        Ok(record) => {
            let mut reaper = reaper;
            reaper.record = record;
            Ok(reaper)
        }
        Err(e) => {
            reaper.stop(client).await;
            Err(e)
        }
    }
}

async fn make_pod(
    client: &kube::Client,
    ns: &str,
    run_id: &str,
    name: &str,
    access: &ReaperAccess,
    image: &str,
    say: &dyn Fn(&str),
) -> Result<serde_json::Value> {
    make_secret(client, run_id, name, access).await?;
    let pod = pod_spec(ns, run_id, name, access, image);
    let pods: Api<Pod> = Api::namespaced(client.clone(), HOME);
    pods.create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("create pod {HOME}/{name}"))?;
    say(&format!(
        "reaper pod {HOME}/{name} created; waiting for it to run"
    ));
    wait_armed(&pods, name, access, say).await
}

/// The reaper's Secret: its token and CA, and with a registry login its pull
/// secret too (`registry.rs`): a `dockerconfigjson` Secret may hold other keys,
/// and the reaper already deletes this one.
async fn make_secret(
    client: &kube::Client,
    run_id: &str,
    name: &str,
    access: &ReaperAccess,
) -> Result<()> {
    let pull = access.pull.as_deref();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), HOME);
    let mut data = BTreeMap::from([
        ("token".to_string(), access.token.clone()),
        ("ca.crt".to_string(), access.ca_pem.clone()),
    ]);
    if let Some(json) = pull {
        data.insert(".dockerconfigjson".to_string(), json.to_string());
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(HOME.into()),
            labels: Some(labels(run_id)),
            ..Default::default()
        },
        string_data: Some(data),
        type_: pull.map(|_| "kubernetes.io/dockerconfigjson".to_string()),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .with_context(|| format!("create secret {HOME}/{name}"))?;
    Ok(())
}

/// The reaper's pod: its binary watching the run's Lease, its token and CA from
/// its Secret, the node's Docker socket where the node's engine is this machine's.
fn pod_spec(ns: &str, run_id: &str, name: &str, access: &ReaperAccess, image: &str) -> Pod {
    let pull = access.pull.as_deref();
    let from_secret = |var: &str, key: &str| super::pods::from_secret(var, name, key);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(HOME.into()),
            labels: Some(labels(run_id)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: access.node.clone(),
            host_network: Some(access.host_network),
            automount_service_account_token: Some(false),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(0),
            image_pull_secrets: pull.map(|_| {
                vec![LocalObjectReference {
                    name: name.to_string(),
                }]
            }),
            volumes: access.docker_socket.as_ref().map(|s| {
                vec![Volume {
                    name: "docker".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: s.clone(),
                        type_: Some("Socket".into()),
                    }),
                    ..Default::default()
                }]
            }),
            containers: vec![Container {
                name: "reaper".into(),
                image: Some(image.into()),
                image_pull_policy: Some(super::pods::pull_policy(image).into()),
                command: Some(
                    [
                        BINARY,
                        "kube",
                        "--namespace",
                        ns,
                        "--lease",
                        LEASE,
                        "--secret",
                        name,
                        "--pod",
                        name,
                        "--stale",
                        &format!("{}s", STALE.as_secs()),
                    ]
                    .map(String::from)
                    .into_iter()
                    .chain(
                        access
                            .docker_socket
                            .iter()
                            .flat_map(|s| ["--docker-socket".to_string(), s.clone()]),
                    )
                    .collect(),
                ),
                volume_mounts: access.docker_socket.as_ref().map(|s| {
                    vec![VolumeMount {
                        name: "docker".into(),
                        mount_path: s.clone(),
                        ..Default::default()
                    }]
                }),
                env: Some(vec![
                    EnvVar {
                        name: "FENCECHECK_REAPER_SERVER".into(),
                        value: Some(access.server.clone()),
                        ..Default::default()
                    },
                    from_secret("FENCECHECK_REAPER_TOKEN", "token"),
                    from_secret("FENCECHECK_REAPER_CA", "ca.crt"),
                ]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Waits until the reaper's pod runs and has read the run's Lease; what it
/// took, for `kubernetes.json`.
async fn wait_armed(
    pods: &Api<Pod>,
    name: &str,
    access: &ReaperAccess,
    say: &dyn Fn(&str),
) -> Result<serde_json::Value> {
    let started = Instant::now();
    loop {
        // A loaded API server's timeout is retried within the deadline (retry.rs).
        let left = RUNNING_DEADLINE.saturating_sub(started.elapsed());
        let p = super::retry::call(&format!("get pod {HOME}/{name}"), left, || pods.get(name))
            .await
            .with_context(|| format!("get pod {HOME}/{name}"))?;
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        match phase.as_str() {
            "Running" => {
                let running = started.elapsed();
                say(&format!(
                    "reaper pod {HOME}/{name} running after {:.1} s",
                    running.as_secs_f64()
                ));
                armed(pods, name, say).await?;
                let armed = started.elapsed();
                return Ok(serde_json::json!({
                    "pod": format!("{HOME}/{name}"),
                    "node": p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    "network": if access.host_network { "host" } else { "pod" },
                    "pod_ip": p.status.as_ref().and_then(|s| s.pod_ip.clone()),
                    "server": access.server,
                    "running_ms": running.as_millis() as u64,
                    "armed_ms": armed.as_millis() as u64,
                }));
            }
            "Succeeded" | "Failed" => {
                bail!("the reaper pod {HOME}/{name} ended ({phase}) instead of running")
            }
            _ => {}
        }
        if started.elapsed() >= RUNNING_DEADLINE {
            bail!(
                "the reaper pod {HOME}/{name} is not running after {RUNNING_DEADLINE:?} \
                 (phase {phase:?}, status {:?})",
                p.status
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the reaper prints once it has read the run's Lease (`reaper/src/kube.rs`).
const SEEN: &str = "lease seen";
/// How long the reaper may take to read the Lease once it runs: it reads every
/// second, each call limited to 5 s.
const ARMED_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until the reaper's log says it read the run's Lease: a reaper that
/// runs but cannot reach the API server from where it is (its pod network
/// without a route to the `kubernetes` Service, a certificate that does not
/// name the address it went to) would never reap, and the run must not start
/// on a dead-man switch that is not there. Its log is in the error.
async fn armed(pods: &Api<Pod>, name: &str, say: &dyn Fn(&str)) -> Result<()> {
    let started = Instant::now();
    loop {
        let log = pods
            .logs(name, &kube::api::LogParams::default())
            .await
            .unwrap_or_default();
        if log.contains(SEEN) {
            say(&format!(
                "reaper pod {HOME}/{name} read the run's lease after {:.1} s",
                started.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        let ended = pods
            .get(name)
            .await
            .ok()
            .and_then(|p| p.status.and_then(|s| s.phase))
            .filter(|p| p == "Succeeded" || p == "Failed");
        if ended.is_some() || started.elapsed() >= ARMED_DEADLINE {
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "the reaper pod {HOME}/{name} {} without reading the run's lease: it cannot \
                 reach the API server from where it runs; its log:\n{}",
                match ended {
                    Some(p) => format!("ended ({p})"),
                    None => format!("ran for {ARMED_DEADLINE:?}"),
                },
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Renews the Lease every [`RENEW_EVERY`] until aborted. A failed renewal is
/// logged and tried again at the next tick: the reaper allows five to fail.
/// A Lease that is gone was deleted by the clean-up emptying the run's
/// namespace (`namespace::empty`), the one thing that deletes it: the
/// namespace is on its way out, and there is nothing left to renew.
async fn renew(leases: Api<Lease>, ns: String) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let patch = serde_json::json!({ "spec": { "renewTime": now() } });
        match leases
            .patch(LEASE, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                tracing::debug!("lease {ns}/{LEASE} is gone with the namespace's clean-up");
                return;
            }
            Err(e) => tracing::warn!("renewing lease {ns}/{LEASE}: {e}"),
        }
    }
}

impl Reaper {
    /// Normal end: stop renewing, then delete the reaper pod and its Secret (the
    /// harness deletes the namespace itself). Failures are logged: the reaper,
    /// left running, would reap the run's namespace, which is being deleted anyway.
    pub async fn stop(self, client: &kube::Client) {
        self.renew.abort();
        let pods: Api<Pod> = Api::namespaced(client.clone(), HOME);
        let grace0 = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match pods.delete(&self.name, &grace0).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => tracing::warn!("deleting the reaper pod {HOME}/{}: {e}", self.name),
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), HOME);
        match secrets.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => tracing::warn!("deleting the reaper secret {HOME}/{}: {e}", self.name),
        }
    }

    /// For tests: stop renewing only, as a SIGKILL of the harness would.
    pub fn abandon(self) {
        self.renew.abort();
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.renew.abort();
    }
}
