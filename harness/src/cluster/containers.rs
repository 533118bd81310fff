//! The containers kubelet's dockershim starts on the Docker engine: every pod's
//! sandbox and containers are named `k8s_<container>_<pod>_<namespace>_<uid>_<n>`.
//! `down` removes them once kubelet is stopped (a stopped kubelet removes
//! nothing), through the same engine connection the docker backend uses.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use testcontainers::bollard::query_parameters::{
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::bollard::Docker;

/// dockershim's name prefix (`pkg/kubelet/dockershim/naming.go`: `kubePrefix`).
pub const PREFIX: &str = "k8s_";

/// dockershim's label with the pod's UID on each of its containers.
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

/// One of dockershim's containers.
pub struct K8sContainer {
    pub id: String,
    pub name: String,
    pub pod_uid: Option<String>,
}

/// Every `k8s_*` container, running or not.
pub async fn list(d: &Docker) -> Result<Vec<K8sContainer>> {
    let all = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .context("docker ps -a")?;
    Ok(all
        .into_iter()
        .filter_map(|c| {
            let name = c
                .names?
                .into_iter()
                .map(|n| n.trim_start_matches('/').to_string())
                .find(|n| n.starts_with(PREFIX))?;
            let pod_uid = c.labels.and_then(|mut l| l.remove(POD_UID_LABEL));
            Some(K8sContainer {
                id: c.id?,
                name,
                pod_uid,
            })
        })
        .collect())
}

/// Removes (forced) every `k8s_*` container; returns their names and their pods'
/// UIDs. The engine may be busy with one (a removal already in progress): tried
/// again for a while.
pub async fn remove_all(d: &Docker) -> Result<(Vec<String>, BTreeSet<String>)> {
    let mut removed = Vec::new();
    let mut pods = BTreeSet::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = list(d).await?;
        if left.is_empty() {
            return Ok((removed, pods));
        }
        let mut errors = Vec::new();
        for K8sContainer { id, name, pod_uid } in left {
            pods.extend(pod_uid);
            let opts = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            match d.remove_container(&id, Some(opts)).await {
                Ok(()) => removed.push(name),
                Err(e) => errors.push(format!("docker rm {name}: {e}")),
            }
        }
        if tokio::time::Instant::now() >= until {
            anyhow::bail!(
                "{PREFIX}* containers still there after 20 s: {}",
                if errors.is_empty() {
                    "new ones keep appearing (is another kubelet running?)".to_string()
                } else {
                    errors.join("; ")
                }
            );
        }
        // The poll's interval while the engine finishes a removal.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Removes (forced) the stopped `k8s_*` containers whose name has one of
/// `needles` (`_<namespace>_`, `_<pod>_<namespace>_`): what is left of pods once
/// kubelet has stopped them, which it removes only in its once-a-minute garbage
/// collection. Running ones are left to kubelet. Returns the names removed.
pub async fn remove_stopped(d: &Docker, needles: &[String]) -> Result<Vec<String>> {
    remove_matching(d, needles, false).await
}

/// Removes (forced) the `k8s_*` containers whose name has one of `needles`,
/// running ones too when `running_too` (a pod deleted with grace 0, which kubelet
/// would only stop after its own delay). Returns the names removed.
pub async fn remove_matching(
    d: &Docker,
    needles: &[String],
    running_too: bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let all = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .context("docker ps -a")?;
    for c in all {
        let running = c
            .state
            .as_ref()
            .is_some_and(|s| format!("{s:?}").eq_ignore_ascii_case("running"));
        let Some(name) = c
            .names
            .into_iter()
            .flatten()
            .map(|n| n.trim_start_matches('/').to_string())
            .find(|n| n.starts_with(PREFIX) && needles.iter().any(|x| n.contains(x)))
        else {
            continue;
        };
        let Some(id) = c.id else { continue };
        if running && !running_too {
            continue;
        }
        let opts = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        if d.remove_container(&id, Some(opts)).await.is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Removes what kubelet wrote for pods `uids` where it writes it whatever its
/// root directory: `/var/log/pods/<ns>_<pod>_<uid>/` and the symlinks into it in
/// `/var/log/containers/`. Returns the directories removed.
pub fn remove_pod_logs(uids: &BTreeSet<String>) -> Result<Vec<String>> {
    remove_pod_logs_in(Path::new("/var/log"), uids)
}

fn remove_pod_logs_in(var_log: &Path, uids: &BTreeSet<String>) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let pods = var_log.join("pods");
    let Ok(entries) = std::fs::read_dir(&pods) else {
        return Ok(removed);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !uids.iter().any(|u| name.ends_with(&format!("_{u}"))) {
            continue;
        }
        let path = e.path();
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("cannot remove {}", path.display()))?;
        removed.push(path.display().to_string());
    }
    if let Ok(links) = std::fs::read_dir(var_log.join("containers")) {
        for l in links.flatten() {
            let target = std::fs::read_link(l.path()).unwrap_or_default();
            if removed.iter().any(|d| target.starts_with(d)) {
                std::fs::remove_file(l.path())
                    .with_context(|| format!("cannot remove {}", l.path().display()))?;
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_pods_logs_and_their_links_go() {
        let d = tempfile::tempdir().expect("tmp");
        let v = d.path();
        for p in ["pods/default_a_u1/c", "pods/default_b_u2/c"] {
            std::fs::create_dir_all(v.join(p)).expect("mkdir");
        }
        std::fs::create_dir_all(v.join("containers")).expect("mkdir");
        std::os::unix::fs::symlink(
            v.join("pods/default_a_u1/c/0.log"),
            v.join("containers/a.log"),
        )
        .expect("link");
        std::os::unix::fs::symlink(
            v.join("pods/default_b_u2/c/0.log"),
            v.join("containers/b.log"),
        )
        .expect("link");
        let gone = remove_pod_logs_in(v, &BTreeSet::from(["u1".to_string()])).expect("removes");
        assert_eq!(gone.len(), 1);
        assert!(!v.join("pods/default_a_u1").exists());
        assert!(v.join("pods/default_b_u2").exists());
        assert!(std::fs::symlink_metadata(v.join("containers/a.log")).is_err());
        assert!(std::fs::symlink_metadata(v.join("containers/b.log")).is_ok());
    }
}
