//! The run's namespace: created labelled with the run, deleted with everything in
//! it on every way out (`stop`, the drop guard; the reaper after a SIGKILL).
//!
//! A deleted namespace waits in `Terminating` until the namespace controller (in
//! kube-controller-manager) has emptied it and removed its `kubernetes` finalizer.
//! The local cluster runs no controller-manager, so the pods are deleted here
//! first, and a namespace still there once they are gone is finalized here too
//! (`PUT …/finalize` with no finalizers), which is what that controller does last.
//! On a cluster with a controller-manager it has usually gone before that.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, NamespaceSpec, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use super::RUN_LABEL;

/// How long pods get to end on SIGTERM before kubelet kills them.
const POD_GRACE: u32 = 2;
/// How long the whole deletion may take (the bound for "nothing left").
pub const DELETE_DEADLINE: Duration = Duration::from_secs(60);
/// How long a deleted, empty namespace is left to its controller, where one runs,
/// before it is finalized here.
const CONTROLLER_WAIT: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(250);

/// `fencecheck-<run id>`.
pub fn name(run_id: &str) -> String {
    format!("fencecheck-{run_id}")
}

pub async fn create(client: &kube::Client, ns: &str, run_id: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_string()),
            labels: Some(BTreeMap::from([(
                RUN_LABEL.to_string(),
                run_id.to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    // The pods ask for no token, but the ServiceAccount admission plugin still
    // wants their account to exist, and without a controller-manager (the local
    // cluster) nothing makes it. Where one runs, it may be there already.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match sas.create(&PostParams::default(), &sa).await {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("create serviceaccount {ns}/default")),
        Ok(_) => Ok(()),
    }
}

/// The run's pull Secret ([`super::registry::PULL_SECRET`]): the user's login for
/// `[cluster] registry`, which every pod of the run names in `imagePullSecrets`.
/// It goes with the namespace.
pub async fn pull_secret(client: &kube::Client, ns: &str, run_id: &str, json: &str) -> Result<()> {
    let data = BTreeMap::from([(".dockerconfigjson".to_string(), json.to_string())]);
    let kind = Some("kubernetes.io/dockerconfigjson");
    secret(client, ns, run_id, super::registry::PULL_SECRET, kind, data).await
}

/// Creates the Secret `name` of the run in `ns`, of type `kind` (`Opaque`
/// when `None`), holding `data`.
async fn secret(
    client: &kube::Client,
    ns: &str,
    run_id: &str,
    name: &str,
    kind: Option<&str>,
    data: BTreeMap<String, String>,
) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let obj = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                RUN_LABEL.to_string(),
                run_id.to_string(),
            )])),
            ..Default::default()
        },
        type_: kind.map(str::to_string),
        string_data: Some(data),
        ..Default::default()
    };
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("create secret {ns}/{name}"))?;
    Ok(())
}

/// The workers' access material for the service (JSON, key
/// [`WORKER_ACCESS_KEY`]) in the Secret [`WORKER_ACCESS`] of the run's
/// namespace: each worker pod takes it as an environment variable by
/// reference, so its spec (which anyone who may read pods there reads) holds
/// no token. It goes with the namespace.
pub async fn worker_access(
    client: &kube::Client,
    ns: &str,
    run_id: &str,
    json: &str,
) -> Result<()> {
    let data = BTreeMap::from([(WORKER_ACCESS_KEY.to_string(), json.to_string())]);
    secret(client, ns, run_id, WORKER_ACCESS, None, data).await
}

/// The Secret holding the workers' access material ([`worker_access`]).
pub const WORKER_ACCESS: &str = "worker-access";
pub const WORKER_ACCESS_KEY: &str = "access";

/// Deletes every pod of `ns`, waits until kubelet has stopped them, then deletes
/// `ns` (finalizing it where no controller does). Returns what it removed.
pub async fn delete(client: &kube::Client, ns: &str) -> Result<Vec<String>> {
    let t0 = Instant::now();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await?.is_none() {
        return Ok(Vec::new());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(POD_GRACE),
        ..Default::default()
    };
    let mut done = Vec::new();
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list pods in {ns}"))?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for n in &names {
        match pods.delete(n, &dp).await {
            Ok(_) => done.push(format!("pod {ns}/{n}")),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e).with_context(|| format!("delete pod {ns}/{n}")),
        }
    }
    // Kubelet says a container has terminated within a second or so, but removes
    // the pod's object only some 8 s later (its status sync), or not for over a
    // minute (below): a pod none of whose containers runs is deleted at once
    // (grace 0) instead, so an empty list means no container of the run runs. Their stopped containers are
    // kubelet's garbage (the backend removes them where the node's engine is
    // this machine's).
    let grace0 = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    loop {
        let listed = pods.list(&ListParams::default()).await?.items;
        let left = listed.len();
        if left == 0 {
            break;
        }
        for p in listed.iter().filter(|p| none_running(p)) {
            if let Some(n) = &p.metadata.name {
                match pods.delete(n, &grace0).await {
                    Err(e) if !not_found(&e) => {
                        return Err(e).with_context(|| format!("delete pod {ns}/{n} (grace 0)"))
                    }
                    _ => {}
                }
            }
        }
        if t0.elapsed() > DELETE_DEADLINE {
            bail!("{left} pod(s) of namespace {ns} still there after {DELETE_DEADLINE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    match namespaces.delete(ns, &DeleteParams::default()).await {
        Err(e) if !not_found(&e) => {
            return Err(e).with_context(|| format!("delete namespace {ns}"));
        }
        _ => {}
    }
    let deleted_at = Instant::now();
    let wait = if controller_manager_runs(client).await {
        CONTROLLER_WAIT
    } else {
        Duration::ZERO
    };
    let mut finalized = false;
    while namespaces.get_opt(ns).await?.is_some() {
        if !finalized && deleted_at.elapsed() >= wait {
            // What the controller would have deleted first: finalizing a
            // namespace that still holds objects leaves them behind in etcd,
            // where nothing ever deletes them.
            done.extend(empty(client, ns).await);
            finalize(&namespaces, ns).await?;
            finalized = true;
        }
        if t0.elapsed() > DELETE_DEADLINE {
            bail!("namespace {ns} still there after {DELETE_DEADLINE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    done.push(format!(
        "namespace {ns}{}",
        if finalized {
            " (finalized: no namespace controller)"
        } else {
            ""
        }
    ));
    Ok(done)
}

/// Is `p` being deleted with none of its containers running, as kubelet last
/// said? Terminated, or gone: kubelet removes every container of a pod being
/// deleted as soon as one dies (`cleanUpContainersInPod`), and a container that
/// dies just as the deletion comes (a worker ending its run) is then reported
/// "could not be located", waiting, not terminated — and such a pod stayed over
/// 60 s. A deleted pod's containers are never started again.
fn none_running(p: &Pod) -> bool {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    p.metadata.deletion_timestamp.is_some()
        && statuses.is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none()))
        })
}

/// Does a kube-controller-manager (which runs the namespace controller) hold its
/// leader Lease? Without one (the local cluster) nothing will finalize a deleted
/// namespace, so the harness does it at once instead of waiting for it.
async fn controller_manager_runs(client: &kube::Client) -> bool {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    match leases.get_opt("kube-controller-manager").await {
        Ok(Some(l)) => l.spec.and_then(|s| s.holder_identity).is_some(),
        // Not there, or not ours to read: wait for a controller as if it ran.
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Deletes every object of the kinds a run makes in `ns` besides its pods — the
/// reaper's Lease and the electors' (`elect.rs`), the service accounts, the pull
/// Secret, the electors' Role and binding — as the namespace controller would
/// before it finalizes. Best effort, as the controller's: what cannot be
/// deleted is said in what it returns.
async fn empty(client: &kube::Client, ns: &str) -> Vec<String> {
    async fn all<K>(client: &kube::Client, ns: &str, kind: &str) -> String
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        match api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
        {
            Ok(_) => format!("every {kind} of {ns}"),
            Err(e) => format!("not every {kind} of {ns}: {e}"),
        }
    }
    vec![
        all::<Lease>(client, ns, "lease").await,
        all::<ServiceAccount>(client, ns, "serviceaccount").await,
        all::<Secret>(client, ns, "secret").await,
        // The members' files on a node that is not this machine (`pods.rs`).
        all::<ConfigMap>(client, ns, "configmap").await,
        all::<Role>(client, ns, "role").await,
        all::<RoleBinding>(client, ns, "rolebinding").await,
    ]
}

/// What the namespace controller does once a namespace is empty: clears its
/// `spec.finalizers`, after which the apiserver removes it.
async fn finalize(namespaces: &Api<Namespace>, ns: &str) -> Result<()> {
    let Some(mut obj) = namespaces.get_opt(ns).await? else {
        return Ok(());
    };
    obj.spec = Some(NamespaceSpec {
        finalizers: Some(Vec::new()),
    });
    match namespaces
        .replace_subresource("finalize", ns, &PostParams::default(), &obj)
        .await
    {
        Err(e) if !not_found(&e) => Err(e).with_context(|| format!("finalize namespace {ns}")),
        _ => Ok(()),
    }
}

/// The API's 404: already gone.
pub fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(deleted: bool, state: serde_json::Value) -> Pod {
        let mut meta = serde_json::json!({ "name": "worker-1" });
        if deleted {
            meta["deletionTimestamp"] = "2026-12-04T13:54:00Z".into();
        }
        serde_json::from_value(serde_json::json!({
            "metadata": meta,
            "status": { "containerStatuses": [{
                "name": "main", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": state,
            }]},
        }))
        .expect("pod")
    }

    #[test]
    fn a_deleted_pod_whose_container_ended_or_vanished_runs_nothing() {
        let running = serde_json::json!({ "running": { "startedAt": "2026-12-04T13:53:00Z" } });
        let ended = serde_json::json!({ "terminated": { "exitCode": 0 } });
        // What kubelet said of a worker's container it had removed itself.
        let vanished = serde_json::json!({ "waiting": { "reason": "ContainerCreating" } });
        assert!(!none_running(&pod(true, running)));
        assert!(none_running(&pod(true, ended.clone())));
        assert!(none_running(&pod(true, vanished)));
        assert!(!none_running(&pod(false, ended)), "not being deleted");
    }
}
