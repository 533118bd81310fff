//! The local single-node Kubernetes cluster end to end: `fencecheck cluster up` in
//! a temporary state directory brings a real etcd, kube-apiserver and kubelet
//! (built by `ci/bootstrap.sh`) to a Ready node; a pod running fencecheck's own
//! etcd image (built locally, `imagePullPolicy: Never`) is Running, answers on
//! its port and its log is read through the apiserver; `cluster down` leaves no
//! container, process or state behind.
//!
//! Skipped (one line) only where no Docker engine answers and
//! FENCECHECK_REQUIRE_DOCKER is unset; a missing kubelet is a failure, with
//! `cluster up`'s own message ("run ci/bootstrap.sh").

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, LogParams, PostParams};

use fencecheck::cluster;
use fencecheck::scenario::EtcdVersion;
use fencecheck::systems::etcd::members::EtcdDeploy;

#[test]
fn a_pod_runs_on_the_local_cluster_and_down_leaves_nothing() {
    if !docker::docker_or_skip("k8s_cluster") {
        return;
    }
    let _one = kube();
    if let Some(users) = TestCluster::users() {
        return beside_the_users_cluster(users, true);
    }
    let (_tmp, dir, mut guard) = state_dir();

    let t = Instant::now();
    let o = cluster_cmd("up", &dir);
    assert_eq!(o.status.code(), Some(0), "cluster up: {}", explain(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let kubeconfig = dir.join("kubeconfig");
    assert!(
        out.contains(&format!("kubeconfig: {}", kubeconfig.display())),
        "{out}"
    );
    eprintln!("cluster up: {:.1} s\n{out}", t.elapsed().as_secs_f64());

    // Up is idempotent: a second `up` starts nothing and says so.
    let o = cluster_cmd("up", &dir);
    assert_eq!(o.status.code(), Some(0), "second up: {}", explain(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("already up"),
        "{}",
        explain(&o)
    );
    let o = cluster_cmd("status", &dir);
    assert_eq!(o.status.code(), Some(0), "status: {}", explain(&o));
    let status = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(status.contains("Ready=True"), "{status}");
    assert_eq!(status.matches(" up ").count(), 3, "{status}");

    let rt = runtime();
    let port = rt.block_on(run_etcd_pod(&kubeconfig));

    let o = cluster_cmd("down", &dir);
    assert_eq!(o.status.code(), Some(0), "cluster down: {}", explain(&o));
    guard.armed = false;
    let down = String::from_utf8_lossy(&o.stdout).to_string();
    // The pod's sandbox and its container, removed by `down` (a stopped kubelet
    // removes nothing).
    assert!(down.contains("k8s_POD_etcd-probe_default_"), "{down}");
    assert!(down.contains("k8s_etcd_etcd-probe_default_"), "{down}");

    // Nothing left: no k8s_ container, no process naming the state directory,
    // no state, the pod's port closed, status says down.
    let names = k8s_containers(&rt);
    assert!(names.is_empty(), "containers left: {names:?}");
    assert_nothing_left(&dir);
    assert!(!dir.exists(), "{} still there", dir.display());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the pod's etcd still answers on {port}"
    );
    let o = cluster_cmd("status", &dir);
    assert_eq!(
        o.status.code(),
        Some(1),
        "status after down: {}",
        explain(&o)
    );
}

/// With the user's own cluster up in the default state directory (on the fixed
/// ports), `up` in another directory is refused before it starts anything,
/// naming the ports and where the running cluster is, and the user's cluster is
/// left as it was; `with_pod`: a pod of fencecheck's etcd image runs and answers
/// on the user's cluster, and goes with its containers once deleted. What `up`
/// and `down` themselves do is tested where no cluster is up (as in CI).
fn beside_the_users_cluster(users: TestCluster, with_pod: bool) {
    let (_tmp, dir, mut guard) = state_dir();
    let o = cluster_cmd("up", &dir);
    guard.armed = false;
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(
        o.status.code(),
        Some(2),
        "up beside the user's: {}",
        explain(&o)
    );
    assert!(
        err.contains("another local cluster is up")
            && err.contains(&users.dir.display().to_string()),
        "{err}"
    );
    assert!(
        !cluster::state::State::file(&dir).exists(),
        "a refused up wrote its state"
    );
    assert_nothing_left(&dir);
    if with_pod {
        let rt = runtime();
        let _pod = PodOnDrop {
            kubeconfig: users.kubeconfig.clone(),
            ns: "default".into(),
            name: "etcd-probe".into(),
            armed: true,
        };
        let port = rt.block_on(run_etcd_pod(&users.kubeconfig));
        rt.block_on(delete_pod(&users.kubeconfig, "default", "etcd-probe"));
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the pod's etcd still answers on {port}"
        );
    }
    users.finish();
}

/// Creates a pod running fencecheck's etcd 3.4 image on the node (host network,
/// local image only, no service-account token) and waits until it is Running and
/// its etcd answers `/version`; returns its client port.
async fn run_etcd_pod(kubeconfig: &Path) -> u16 {
    let say = |m: &str| eprintln!("· {m}");
    let engine = fencecheck::backend::docker::engine(Duration::from_secs(10))
        .await
        .expect("engine");
    let deploy = EtcdDeploy::find(EtcdVersion::V3_4, &say).expect("etcd 3.4");
    let image = fencecheck::images::system_image(&engine.docker, &deploy, &say)
        .await
        .expect("etcd image");
    let etcd = fencecheck::systems::etcd::provision::find(EtcdVersion::V3_4).expect("etcd 3.4");
    let port = fencecheck::proc::free_port("127.0.0.1").expect("port");
    let peer = fencecheck::proc::free_port("127.0.0.1").expect("port");
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let command: Vec<String> = [
        etcd.path.display().to_string().as_str(),
        "--name",
        "probe",
        "--data-dir",
        "/data",
        "--listen-client-urls",
        &client_url,
        "--advertise-client-urls",
        &client_url,
        "--listen-peer-urls",
        &peer_url,
        "--initial-advertise-peer-urls",
        &peer_url,
        "--initial-cluster",
        &format!("probe={peer_url}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let pod = local_pod(
        "etcd-probe",
        Container {
            name: "etcd".into(),
            command: Some(command),
            ..Default::default()
        },
        &image.tag,
    );
    let client = cluster::api::client(kubeconfig).await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("http");
    let until = Instant::now() + Duration::from_secs(120);
    let mut last;
    loop {
        let p = pods.get("etcd-probe").await.expect("get pod");
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Running" {
            if let Ok(r) = http.get(format!("{client_url}/version")).send().await {
                let body = r.text().await.unwrap_or_default();
                if body.contains("etcdserver") {
                    assert!(body.contains("3.4."), "{body}");
                    // Its log, through the apiserver: the apiserver reaches kubelet
                    // (Hostname address `localhost`) with its client certificate.
                    let log = pods
                        .logs("etcd-probe", &LogParams::default())
                        .await
                        .expect("the pod's log through the apiserver");
                    assert!(log.contains(&format!("127.0.0.1:{port}")), "{log}");
                    return port;
                }
                last = format!("Running; /version said {body}");
            } else {
                last = "Running; /version does not answer yet".into();
            }
        } else {
            assert_ne!(phase, "Failed", "{:?}", p.status);
            last = format!("{phase}: {:?}", p.status.and_then(|s| s.container_statuses));
        }
        assert!(
            Instant::now() < until,
            "the pod did not run and answer within 120 s: {last}"
        );
        // The poll's interval, not a wait for readiness.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Ctrl-C while `cluster up` waits for the node: the three components (in
/// sessions of their own, so the terminal's SIGINT does not reach them) are
/// stopped by `up` itself, which exits 2 saying it was interrupted; nothing of
/// the state directory keeps running, and no `k8s_` container is left.
#[test]
fn ctrl_c_during_up_stops_what_it_started() {
    if !docker::docker_or_skip("k8s_cluster") {
        return;
    }
    let _one = kube();
    if let Some(users) = TestCluster::users() {
        return beside_the_users_cluster(users, false);
    }
    let (_tmp, dir, mut guard) = state_dir();
    let child = bin()
        .args(["cluster", "up", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start cluster up");
    // Until kubelet is started (its pid in the state): `up` is then waiting for
    // the node, with all three components running.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state: serde_json::Value = std::fs::read_to_string(dir.join("state.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        if !state["kubelet"].is_null() {
            assert!(
                !state["etcd"].is_null() && !state["apiserver"].is_null(),
                "{state}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kubelet not started within 120 s: {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let o = child.wait_with_output().expect("wait for cluster up");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("interrupted"),
        "{}",
        explain(&o)
    );
    assert_nothing_left(&dir);
    let o = cluster_cmd("status", &dir);
    assert_eq!(o.status.code(), Some(1), "status: {}", explain(&o));
    let rt = runtime();
    // kubelet may have started the node's first containers before it stopped;
    // `down` (not run yet) is not what removed them, so none may be left.
    let names = k8s_containers(&rt);
    assert!(names.is_empty(), "containers left: {names:?}");
    // The logs stay for the reader of the error; `down` removes them.
    let o = cluster_cmd("down", &dir);
    assert_eq!(o.status.code(), Some(0), "down: {}", explain(&o));
    guard.armed = false;
    assert!(!dir.exists(), "{} still there", dir.display());
}
