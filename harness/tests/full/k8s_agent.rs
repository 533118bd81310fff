//! The in-pod fault agent (issue #20) end to end on the local cluster: `fencecheck
//! cluster up` in a temporary state directory; a pod of the agent-storage image
//! (the agent as entry point, running fencecheck's storage) is Running and its
//! storage answers; through the API server's exec, `fencecheck-agent ctl stop`
//! freezes it (state T, said by the agent and by an independent `ctl state`, and
//! the storage stops answering), `cont` resumes it, `kill` ends it (port closed,
//! the agent stays), `start` runs it again (a new pid, answering); `cluster down`
//! leaves no container, process or state behind.
//!
//! Skipped (one line) only where no Docker engine answers and
//! FENCECHECK_REQUIRE_DOCKER is unset.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, PostParams};

use fencecheck::cluster;

const POD: &str = "agent-probe";
const CONTAINER: &str = "storage";

#[test]
fn the_agent_stops_resumes_kills_and_restarts_the_storage_in_a_pod() {
    if !docker::docker_or_skip("k8s_agent") {
        return;
    }
    let _one = kube();
    let cluster = TestCluster::take("k8s_agent");
    let rt = runtime();
    let _pod = cluster.is_users().then(|| PodOnDrop {
        kubeconfig: cluster.kubeconfig.clone(),
        ns: "default".into(),
        name: POD.into(),
        armed: true,
    });
    let port = rt.block_on(drive(&cluster.kubeconfig));
    if cluster.is_users() {
        rt.block_on(delete_pod(&cluster.kubeconfig, "default", POD));
    }
    let dir = cluster.dir.clone();
    let own = !cluster.is_users();
    if let Some(down) = cluster.finish() {
        assert!(
            down.contains(&format!("k8s_{CONTAINER}_{POD}_default_")),
            "{down}"
        );
    }
    let names: Vec<_> = k8s_containers(&rt)
        .into_iter()
        .filter(|n| own || n.contains(&format!("_{POD}_default_")))
        .collect();
    assert!(names.is_empty(), "containers left: {names:?}");
    if own {
        assert_nothing_left(&dir);
        assert!(!dir.exists(), "{} still there", dir.display());
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the pod's storage still answers on {port}"
    );
}

/// Whether the storage answers `/health` within 500 ms.
async fn answers(http: &reqwest::Client, port: u16) -> bool {
    match http
        .get(format!("http://127.0.0.1:{port}/health"))
        .send()
        .await
    {
        Ok(r) => r.text().await.map(|t| t == "ok").unwrap_or(false),
        Err(_) => false,
    }
}

/// Polls `f` until it holds, up to `secs`; panics naming `what` otherwise.
async fn within<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(secs);
    let t = Instant::now();
    while !f().await {
        assert!(Instant::now() < until, "{what}: not within {secs} s");
        // The poll's interval, not a wait for readiness.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("{what}: {} ms", t.elapsed().as_millis());
}

fn field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let rest = json.split(&format!("\"{key}\":")).nth(1)?;
    Some(rest.split([',', '}']).next()?.trim_matches('"'))
}

async fn drive(kubeconfig: &Path) -> u16 {
    let say = |m: &str| eprintln!("· {m}");
    let engine = fencecheck::backend::docker::engine(Duration::from_secs(10))
        .await
        .expect("engine");
    let image = fencecheck::images::agent_storage_image(&engine.docker, &say)
        .await
        .expect("agent-storage image");
    let port = fencecheck::proc::free_port("127.0.0.1").expect("port");
    let pod = local_pod(
        POD,
        Container {
            name: CONTAINER.into(),
            args: Some(vec![
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--log".into(),
                "/storage.jsonl".into(),
            ]),
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
        .timeout(Duration::from_millis(500))
        .build()
        .expect("http");
    within(120, "pod Running and the storage answering", || async {
        let p = pods.get(POD).await.expect("get pod");
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        assert_ne!(phase, "Failed");
        phase == "Running" && answers(&http, port).await
    })
    .await;

    let mut times: Vec<Duration> = Vec::new();
    let mut ctl = async |cmd: &str| -> (i32, String) {
        let t = Instant::now();
        let e = cluster::exec::exec(&pods, POD, CONTAINER, &["/fencecheck-agent", "ctl", cmd])
            .await
            .expect("exec through the API server");
        times.push(t.elapsed());
        eprintln!(
            "ctl {cmd}: {} -> {} {}",
            e.code,
            e.stdout.trim(),
            e.stderr.trim()
        );
        (e.code, e.stdout.trim().to_string())
    };

    let (code, s) = ctl("state").await;
    assert_eq!(code, 0, "{s}");
    let pid = field(&s, "pid").expect("pid").to_string();
    assert!(matches!(field(&s, "state"), Some("S" | "R")), "{s}");

    // stop: T in the answer and in an independent read; the storage frozen.
    let (code, s) = ctl("stop").await;
    assert_eq!(code, 0, "{s}");
    // One process in the storage's group, stopped.
    assert_eq!(
        s,
        format!("{{\"pid\":{pid},\"state\":\"T\",\"processes\":1,\"stopped\":1}}")
    );
    let (code, s) = ctl("state").await;
    assert_eq!((code, field(&s, "state")), (0, Some("T")), "{s}");
    within(10, "stopped storage silent", || async {
        !answers(&http, port).await
    })
    .await;

    // cont: running again, answering.
    let (code, s) = ctl("cont").await;
    assert_eq!(code, 0, "{s}");
    assert!(matches!(field(&s, "state"), Some("S" | "R")), "{s}");
    within(10, "resumed storage answering", || answers(&http, port)).await;

    // kill: gone, its port closed; the agent (and so the pod) stays.
    let (code, s) = ctl("kill").await;
    assert_eq!((code, s.as_str()), (0, "{\"running\":false}"));
    within(10, "killed storage's port closed", || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    })
    .await;
    let (code, s) = ctl("state").await;
    assert_eq!((code, s.as_str()), (0, "{\"running\":false}"));
    let (code, s) = ctl("stop").await;
    assert_eq!(code, 1, "stop with nothing running: {s}");

    // start: a new pid, answering again.
    let (code, s) = ctl("start").await;
    assert_eq!(code, 0, "{s}");
    let new = field(&s, "pid").expect("pid").to_string();
    assert_ne!(new, pid);
    within(10, "restarted storage answering", || answers(&http, port)).await;
    let p = pods.get(POD).await.expect("get pod");
    let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
    assert_eq!(phase, "Running");

    times.sort();
    eprintln!(
        "exec round trip through the API server ({} ctl calls): min {} ms, median {} ms, max {} ms",
        times.len(),
        times[0].as_millis(),
        times[times.len() / 2].as_millis(),
        times[times.len() - 1].as_millis()
    );
    port
}
