//! Shared by the local-cluster test files (`k8s_cluster`, `k8s_agent`): a
//! temporary state directory with a guard that runs `cluster down` on it (so a
//! failed assertion or a panic leaves nothing running), `fencecheck cluster …`,
//! and the `k8s_*` containers left on the engine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bin;

/// Runs `cluster down` on the state directory when dropped, unless disarmed.
pub struct DownOnDrop {
    pub dir: PathBuf,
    pub armed: bool,
}

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let o = bin()
                .args(["cluster", "down", "--dir"])
                .arg(&self.dir)
                .output();
            eprintln!("guard: cluster down: {o:?}");
        }
    }
}

/// A temporary state directory and the guard that runs `down` on it. Bind all
/// three (`let (_tmp, dir, mut guard) = …`): the guard, bound last, is dropped
/// first, before the directory goes.
pub fn state_dir() -> (tempfile::TempDir, PathBuf, DownOnDrop) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("cluster");
    let guard = DownOnDrop {
        dir: dir.clone(),
        armed: true,
    };
    (tmp, dir, guard)
}

pub fn cluster_cmd(action: &str, dir: &Path) -> std::process::Output {
    bin()
        .args(["cluster", action, "--dir"])
        .arg(dir)
        .output()
        .expect("run fencecheck cluster")
}

/// The `k8s_*` containers on the engine (the local cluster's pods).
pub fn k8s_containers(rt: &tokio::runtime::Runtime) -> Vec<String> {
    let left = rt.block_on(async {
        let e = fencecheck::backend::docker::engine(Duration::from_secs(10))
            .await
            .expect("engine");
        fencecheck::cluster::containers::list(&e.docker)
            .await
            .expect("docker ps")
    });
    left.into_iter().map(|c| c.name).collect()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A pod as the local cluster runs one: on its one node (no scheduler), on the
/// host's network, from a local image only, with no service-account token
/// (nothing makes tokens without a controller-manager). `container` is what the
/// caller fills in beyond its name and image (command, args).
pub fn local_pod(
    name: &str,
    mut container: k8s_openapi::api::core::v1::Container,
    image: &str,
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    container.image = Some(image.into());
    container.image_pull_policy = Some("Never".into());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(fencecheck::cluster::NODE.into()),
            host_network: Some(true),
            automount_service_account_token: Some(false),
            containers: vec![container],
            ..Default::default()
        }),
        ..Default::default()
    }
}
