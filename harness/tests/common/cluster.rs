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

/// The local cluster a test runs on: the user's own when `fencecheck cluster
/// up` has one up in the default state directory, else one of the test's own in
/// a temporary directory, down when the test ends (or is dropped).
///
/// Why not a second cluster beside the user's: the ports are fixed (one local
/// cluster per machine, `cluster/mod.rs`), and two kubelets on one Docker engine
/// would each take the other's pods for orphans. On the user's cluster a test
/// works in pods and namespaces of its own, removes them, and leaves the cluster
/// as it found it: [`TestCluster::finish`] checks that.
pub struct TestCluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// The test's own cluster: its temporary directory and the guard that runs
    /// `down` on it. None on the user's cluster.
    own: Option<(tempfile::TempDir, DownOnDrop)>,
    /// The user's cluster's component pids when the test took it.
    users_pids: Vec<u32>,
}

impl TestCluster {
    /// The user's cluster if one is up, else `cluster up` in a temporary
    /// directory (asserted to succeed).
    pub fn take(test: &str) -> TestCluster {
        if let Some(c) = TestCluster::users() {
            eprintln!(
                "{test}: on the cluster that is up in {} (left as it is)",
                c.dir.display()
            );
            return c;
        }
        let (tmp, dir, guard) = state_dir();
        let o = cluster_cmd("up", &dir);
        assert_eq!(
            o.status.code(),
            Some(0),
            "cluster up: {}",
            super::explain(&o)
        );
        TestCluster {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            own: Some((tmp, guard)),
            users_pids: Vec::new(),
        }
    }

    /// The cluster up in the default state directory, when `cluster status`
    /// says so (every component running, the node Ready).
    pub fn users() -> Option<TestCluster> {
        let o = bin()
            .args(["cluster", "status"])
            .output()
            .expect("run fencecheck cluster status");
        if o.status.code() != Some(0) {
            return None;
        }
        let dir = fencecheck::cluster::state::default_dir();
        let st = fencecheck::cluster::state::State::load(&dir).ok()??;
        Some(TestCluster {
            kubeconfig: st.kubeconfig.clone(),
            users_pids: st.components().map(|c| c.pid).collect(),
            dir,
            own: None,
        })
    }

    pub fn is_users(&self) -> bool {
        self.own.is_none()
    }

    /// The test's own cluster: `cluster down` (asserted), and its output. The
    /// user's: asserts it is still up, with the same processes, and that its
    /// kubeconfig still answers; None.
    pub fn finish(mut self) -> Option<String> {
        match self.own.take() {
            Some((_tmp, mut guard)) => {
                let o = cluster_cmd("down", &self.dir);
                assert_eq!(
                    o.status.code(),
                    Some(0),
                    "cluster down: {}",
                    super::explain(&o)
                );
                guard.armed = false;
                Some(String::from_utf8_lossy(&o.stdout).to_string())
            }
            None => {
                let o = bin()
                    .args(["cluster", "status"])
                    .output()
                    .expect("run fencecheck cluster status");
                assert_eq!(
                    o.status.code(),
                    Some(0),
                    "the user's cluster is no longer up: {}",
                    super::explain(&o)
                );
                let st = fencecheck::cluster::state::State::load(&self.dir)
                    .expect("the user's cluster state")
                    .expect("the user's cluster state is gone");
                let pids: Vec<u32> = st.components().map(|c| c.pid).collect();
                assert_eq!(pids, self.users_pids, "the user's cluster was restarted");
                runtime().block_on(async {
                    let client = fencecheck::cluster::api::client(&self.kubeconfig)
                        .await
                        .expect("the user's kubeconfig");
                    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
                    nodes
                        .get(fencecheck::cluster::NODE)
                        .await
                        .expect("the user's cluster answers through its kubeconfig");
                });
                None
            }
        }
    }
}

/// Deletes pod `ns/name` when dropped (a test on the user's cluster that failed
/// half-way leaves no pod of its own there), unless disarmed.
pub struct PodOnDrop {
    pub kubeconfig: PathBuf,
    pub ns: String,
    pub name: String,
    pub armed: bool,
}

impl Drop for PodOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Its own thread and runtime: a drop may run inside another runtime.
        let (k, ns, name) = (self.kubeconfig.clone(), self.ns.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            runtime().block_on(async {
                if let Ok(client) = fencecheck::cluster::api::client(&k).await {
                    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                        kube::Api::namespaced(client, &ns);
                    let o = pods.delete(&name, &Default::default()).await;
                    eprintln!("guard: delete pod {ns}/{name}: {:?}", o.map(|_| ()));
                }
            })
        })
        .join();
    }
}

/// Deletes pod `ns/name` and waits (120 s at most) until it is gone and no
/// container of it is left on the engine (dockershim's `k8s_*_<pod>_<ns>_…`,
/// running or stopped, which are removed here rather than left to kubelet's
/// garbage collection).
pub async fn delete_pod(kubeconfig: &Path, ns: &str, name: &str) {
    use k8s_openapi::api::core::v1::Pod;
    let client = fencecheck::cluster::api::client(kubeconfig)
        .await
        .expect("client");
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, ns);
    pods.delete(name, &Default::default())
        .await
        .expect("delete the test's pod");
    let engine = fencecheck::backend::docker::engine(Duration::from_secs(10))
        .await
        .expect("engine");
    let mark = format!("_{name}_{ns}_");
    let until = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let pod_gone = pods.get_opt(name).await.expect("get pod").is_none();
        let left: Vec<_> = fencecheck::cluster::containers::list(&engine.docker)
            .await
            .expect("docker ps")
            .into_iter()
            .filter(|c| c.name.contains(&mark))
            .collect();
        if pod_gone {
            for c in &left {
                let opts = testcontainers::bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .build();
                let _ = engine.docker.remove_container(&c.id, Some(opts)).await;
            }
            if left.is_empty() {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < until,
            "pod {ns}/{name} not gone within 120 s (gone: {pod_gone}; containers: {:?})",
            left.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
        // The poll's interval, not a wait for readiness.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
