//! The kubernetes backend (issue #20) end to end on the local cluster, brought up
//! by each test in a temporary state directory (`fencecheck cluster up`) and
//! reached through `KUBECONFIG`, as a user without a cluster would:
//!
//! - the acceptance scenarios (`pause`, `zk-pause`, `redis-pause`, `kill` with 3
//!   members and leader kills, `k8s-lease-pause`) with `--backend kubernetes`,
//!   members, storage and workers as pods, meet every expectation of theirs — the process backend's verdicts, which the
//!   other test files check there — with `run.backend = "kubernetes"`, every
//!   fault confirmed in the pod, and nothing of a run left after it;
//! - Ctrl-C while a member's pod is frozen: exit 2, nothing of the run left
//!   within 60 s;
//! - SIGKILL of the harness: nothing left within 60 s (the reaper), and the run
//!   directory checks offline as incomplete, holding every event recorded up to
//!   the kill.
//!
//! Skipped (one line) only where no Docker engine answers and
//! FENCECHECK_REQUIRE_DOCKER is unset.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};
use serde_json::Value;

/// What is left of run `run_id` (empty: nothing): its namespace, any pod
/// labelled with it in any namespace, and the k8s_ containers of its namespace.
fn leftovers(rt: &tokio::runtime::Runtime, kubeconfig: &Path, run_id: &str) -> Vec<String> {
    let ns = format!("fencecheck-{run_id}");
    let mut left = rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        let mut left = Vec::new();
        let nss: Api<Namespace> = Api::all(client.clone());
        if nss.get_opt(&ns).await.expect("get namespace").is_some() {
            left.push(format!("namespace {ns}"));
        }
        // A namespace finalized with objects still in it leaves them in etcd,
        // listable by its name: what the run made there besides its pods.
        left.extend(in_namespace(&client, &ns).await);
        let pods: Api<Pod> = Api::all(client);
        let lp = ListParams::default().labels(&format!("fencecheck.run={run_id}"));
        for p in pods.list(&lp).await.expect("list pods").items {
            left.push(format!(
                "pod {}/{}",
                p.metadata.namespace.unwrap_or_default(),
                p.metadata.name.unwrap_or_default()
            ));
        }
        left
    });
    // dockershim names a pod's containers k8s_<container>_<pod>_<namespace>_…
    left.extend(
        k8s_containers(rt)
            .into_iter()
            .filter(|c| c.contains(&format!("_{ns}_")) || c.contains(run_id))
            .map(|c| format!("container {c}")),
    );
    left
}

/// The Leases, service accounts, Secrets, Roles and RoleBindings in `ns`.
async fn in_namespace(client: &kube::Client, ns: &str) -> Vec<String> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    async fn names<K>(client: &kube::Client, ns: &str, kind: &str) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list {kind} in {ns}: {e}"))
            .items
            .iter()
            .map(|o| format!("{kind} {ns}/{}", o.meta().name.clone().unwrap_or_default()))
            .collect()
    }
    let mut v = names::<Lease>(client, ns, "lease").await;
    v.extend(names::<ServiceAccount>(client, ns, "serviceaccount").await);
    v.extend(names::<Secret>(client, ns, "secret").await);
    v.extend(names::<Role>(client, ns, "role").await);
    v.extend(names::<RoleBinding>(client, ns, "rolebinding").await);
    v
}

fn wait_nothing_left(
    rt: &tokio::runtime::Runtime,
    kubeconfig: &Path,
    run_id: &str,
    what: &str,
) -> f64 {
    let t0 = Instant::now();
    loop {
        let left = leftovers(rt, kubeconfig, run_id);
        if left.is_empty() {
            return t0.elapsed().as_secs_f64();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}: 60 s on, run {run_id} still has {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn kubernetes_json(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("kubernetes.json")).expect("kubernetes.json");
    serde_json::from_str(&text).expect("kubernetes.json parses")
}

/// Runs `scenarios/NAME.toml` into `out` as a user does: from `out`'s parent
/// directory with `--out` relative to it, as the default `runs/<name>-<time>`
/// is. (A worker pod's working directory is not the harness's: a relative run
/// directory once reached the pods as it was and they recorded nothing.)
fn run_on_kubernetes(
    kubeconfig: &Path,
    name: &str,
    extra: &[&str],
    out: &Path,
) -> std::process::Output {
    let (Some(parent), Some(rel)) = (out.parent(), out.file_name()) else {
        panic!("{} has no parent directory", out.display());
    };
    std::fs::create_dir_all(parent).expect("the run's parent directory");
    bin()
        .current_dir(parent)
        .env("KUBECONFIG", kubeconfig)
        .arg("scenario")
        .arg(repo_root().join(format!("scenarios/{name}.toml")))
        .args(["--backend", "kubernetes", "--quiet", "--out"])
        .arg(rel)
        .args(extra)
        .output()
        .expect("run fencecheck")
}

/// Runs `file` into `out` (its wall time into `times`) and asserts it passed on
/// the kubernetes backend; returns its report.
fn passes_on_kubernetes(
    kubeconfig: &Path,
    name: &'static str,
    file: &Path,
    out: &Path,
    times: &mut BTreeMap<&'static str, f64>,
) -> Value {
    let t0 = Instant::now();
    let o = run_file_on_kubernetes(kubeconfig, file, out);
    times.insert(name, t0.elapsed().as_secs_f64());
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    let r = read_report(out);
    assert_eq!(r["passed"], true, "{name}");
    assert_eq!(r["run"]["backend"], "kubernetes", "{name}: {}", r["run"]);
    r
}

fn run_file_on_kubernetes(kubeconfig: &Path, file: &Path, out: &Path) -> std::process::Output {
    run_file_with_docker_config(kubeconfig, file, out, None)
}

/// [`run_file_on_kubernetes`] with `DOCKER_CONFIG` (where a Docker login is).
fn run_file_with_docker_config(
    kubeconfig: &Path,
    file: &Path,
    out: &Path,
    docker_config: Option<&Path>,
) -> std::process::Output {
    let mut cmd = bin();
    if let Some(d) = docker_config {
        cmd.env("DOCKER_CONFIG", d);
    }
    cmd.env("KUBECONFIG", kubeconfig)
        .arg("scenario")
        .arg(file)
        .args(["--backend", "kubernetes", "--quiet", "--out"])
        .arg(out)
        .output()
        .expect("run fencecheck")
}

/// A registry on loopback: Debian's docker-registry (distribution 2.8,
/// `ci/bootstrap.sh` installs it), storing in a temporary directory, its access
/// log in a file; stopped on drop. It takes only the user `fc` with its
/// password (htpasswd, which distribution serves only over TLS: a certificate
/// of its own, which Docker accepts on `127.0.0.0/8` without verifying it), as a
/// team's registry would.
struct Registry {
    child: Child,
    /// What `[cluster] registry` says: `127.0.0.1:<port>/fc` (a path too, as a
    /// team's registry would have).
    name: String,
    log: PathBuf,
    /// A `DOCKER_CONFIG` with the login, as `docker login` writes it.
    docker_config: PathBuf,
    /// A `DOCKER_CONFIG` with no login at all.
    no_login: PathBuf,
}

impl Registry {
    fn start(work: &Path) -> Registry {
        Registry::start_on(work, "127.0.0.1")
    }

    /// Listening on `host` (`0.0.0.0`: this machine's every address, so that a
    /// second node reaches it too), named `127.0.0.1:<port>` all the same.
    fn start_on(work: &Path, host: &str) -> Registry {
        use base64::Engine;
        let bin = Path::new("/usr/bin/docker-registry");
        assert!(
            bin.exists(),
            "{} missing: run ci/bootstrap.sh --tests",
            bin.display()
        );
        let port = std::net::TcpListener::bind((host, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = work.join("registry");
        std::fs::create_dir_all(dir.join("data")).expect("mkdir");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        std::fs::write(dir.join("cert.pem"), cert.pem()).expect("cert");
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("key");
        let password = format!("pw-{port}");
        let hash = bcrypt::hash(&password, 4).expect("bcrypt");
        std::fs::write(dir.join("htpasswd"), format!("fc:{hash}\n")).expect("htpasswd");
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {host}:{port}\n  tls:\n    certificate: {}\n    key: {}\n\
                 auth:\n  htpasswd:\n    realm: fencecheck\n    path: {}\n",
                dir.join("data").display(),
                dir.join("cert.pem").display(),
                dir.join("key.pem").display(),
                dir.join("htpasswd").display(),
            ),
        )
        .expect("write config");
        let docker_config = dir.join("docker");
        std::fs::create_dir_all(&docker_config).expect("mkdir");
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("fc:{password}"));
        std::fs::write(
            docker_config.join("config.json"),
            format!("{{\"auths\":{{\"127.0.0.1:{port}\":{{\"auth\":\"{auth}\"}}}}}}"),
        )
        .expect("docker config");
        let no_login = dir.join("no-login");
        std::fs::create_dir_all(&no_login).expect("mkdir");
        // Its access log goes to stdout, the rest to stderr: both to one file.
        let log = dir.join("registry.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = std::process::Command::new(bin)
            .args(["serve"])
            .arg(&config)
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start docker-registry");
        let reg = Registry {
            child,
            name: format!("127.0.0.1:{port}/fc"),
            log,
            docker_config,
            no_login,
        };
        // Ready when it says it listens (with TLS) and takes a connection.
        let t0 = Instant::now();
        loop {
            let said = std::fs::read_to_string(&reg.log).unwrap_or_default();
            if said.contains("listening on")
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                assert!(said.contains("tls"), "not serving TLS:\n{said}");
                return reg;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "docker-registry did not listen within 20 s: {said}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every image the run's pods asked for is named in this registry, and the
    /// node's engine pulled each one from it.
    fn pulled_every_image(&self, k: &Value, count: usize) {
        assert_eq!(k["registry"], self.name.as_str(), "{k}");
        let images: Vec<&str> = k["images"]
            .as_array()
            .expect("images")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(images.len(), count, "{k}");
        let log = std::fs::read_to_string(&self.log).expect("registry log");
        for image in images {
            let rest = image
                .strip_prefix(&format!("{}/", self.name))
                .unwrap_or_else(|| panic!("{image} is not in {}", self.name));
            let (repo, tag) = rest.rsplit_once(':').expect("a tag");
            // A pull resolves the tag (a HEAD of its manifest; then a GET by
            // digest, unless the engine already knows that digest); a push only
            // puts the manifest.
            let asked = format!("\"HEAD /v2/fc/{repo}/manifests/{tag} ");
            assert!(
                log.contains(&asked),
                "no {asked} in the registry's log:\n{log}"
            );
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The names the node's pulls left on this machine's engine (the images
        // stay under their own names).
        let host = self.name.split('/').next().unwrap_or_default().to_string();
        if let Ok(o) = std::process::Command::new("docker")
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
            .output()
        {
            let pulled: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with(&format!("{host}/")))
                .map(str::to_string)
                .collect();
            if !pulled.is_empty() {
                let _ = std::process::Command::new("docker")
                    .arg("rmi")
                    .args(&pulled)
                    .output();
            }
        }
    }
}

#[test]
fn the_acceptance_scenarios_on_kubernetes_meet_their_expectations_and_leave_nothing() {
    if !docker::docker_or_skip("k8s_backend") {
        return;
    }
    let _one = kube();
    let cluster = TestCluster::take("k8s_backend");
    let kubeconfig = cluster.kubeconfig.clone();
    let rt = runtime();
    let work = tempfile::tempdir().expect("tmp");
    if cluster.is_users() {
        // They make cluster-wide objects (nodes, a namespace, a ClusterRole and
        // its binding) that would change the user's cluster.
        eprintln!("k8s_backend: the refusals that need cluster-wide objects run on a cluster of the test's own only");
    } else {
        refusals_on_the_cluster(&rt, &kubeconfig, work.path());
    }
    let mut times = BTreeMap::new();
    for name in [
        "pause",
        "zk-pause",
        "redis-pause",
        "kill",
        "k8s-lease-pause",
        // The same, electing on the local cluster's own API server: no member pods,
        // the Leases in the run's namespace, a service account of the run's own.
        "kubernetes/k8s-cluster-lease-pause",
        // PostgreSQL as the storage's pod, crashed (agent kill) and recovered twice.
        "pg-crash",
        // Two Redis pods' clocks stepped (clockshim in the member image, its offset
        // file in the run directory), each step confirmed by the instance's TIME.
        "redlock-majority-clock-jump",
    ] {
        let out = work.path().join(name);
        let t0 = Instant::now();
        // `pause` through a registry (Debian's docker-registry, a process on
        // loopback): its images are pushed there and kubelet pulls them.
        let registry = (name == "pause").then(|| Registry::start(work.path()));
        let o = match &registry {
            None => run_on_kubernetes(&kubeconfig, name, &[], &out),
            Some(reg) => {
                let text = std::fs::read_to_string(repo_root().join("scenarios/pause.toml"))
                    .expect("pause.toml");
                let file = work.path().join("pause-registry.toml");
                let with = text.replacen(
                    "[cluster]\n",
                    &format!("[cluster]\nregistry = \"{}\"\n", reg.name),
                    1,
                );
                std::fs::write(&file, with).expect("write");
                // Without the login the registry refuses the push, and the run
                // stops before any pod: the login below is what lets it in.
                let refused = work.path().join("pause-no-login");
                let o =
                    run_file_with_docker_config(&kubeconfig, &file, &refused, Some(&reg.no_login));
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
                assert!(
                    err.contains("failed") && err.contains("no Docker login for 127.0.0.1:"),
                    "{}",
                    explain(&o)
                );
                assert!(!refused.join("kubernetes.json").exists());
                run_file_with_docker_config(&kubeconfig, &file, &out, Some(&reg.docker_config))
            }
        };
        times.insert(name, t0.elapsed().as_secs_f64());
        assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
        let r = read_report(&out);
        assert_eq!(r["passed"], true, "{name}");
        assert_eq!(r["run"]["backend"], "kubernetes", "{name}: {}", r["run"]);
        // Every fault took effect, as the pod's agent read it back (or, for a
        // worker, this machine's /proc).
        let counts = r["fault_counts"].as_array().expect("fault_counts");
        let sum = |k: &str| counts.iter().map(|c| n(&c[k])).sum::<u64>();
        let (injected, confirmed) = (sum("injected"), sum("confirmed"));
        assert!(injected > 0, "{name}: no fault injected: {counts:?}");
        assert_eq!(confirmed, injected, "{name}: {counts:?}");
        let k = kubernetes_json(&out);
        let run_id = k["run_id"].as_str().expect("run_id").to_string();
        assert!(
            k["pods"].as_array().is_some_and(|p| !p.is_empty()),
            "{name}: {k}"
        );
        // The workers ran as pods, one each, found on this machine by pid.
        let workers = k["workers"].as_array().cloned().unwrap_or_default();
        let want = history(&out)
            .iter()
            .filter_map(|e| e["process"].as_u64())
            .max()
            .map_or(0, |m| m + 1);
        assert!(want > 0, "{name}: no worker recorded anything");
        assert_eq!(workers.len() as u64, want, "{name}: {k}");
        for (i, w) in workers.iter().enumerate() {
            assert_eq!(w["pod"], format!("worker-{i}"), "{name}: {k}");
            assert!(n(&w["pid"]) > 1, "{name}: {w}");
        }
        if name.contains("cluster") {
            wait_nothing_left(&rt, &kubeconfig, &run_id, name);
            on_the_clusters_apiserver(&rt, &kubeconfig, &r, &k);
            assert_nothing_left(&out);
            continue;
        }
        // The members' output came through the API's log stream.
        let log = std::fs::read_dir(&out)
            .expect("run dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with("-0.log"))
            .map(|e| std::fs::metadata(e.path()).map(|m| m.len()).unwrap_or(0))
            .max()
            .unwrap_or(0);
        assert!(log > 0, "{name}: member 0's log is empty");
        if let Some(reg) = &registry {
            // The member's, the storage's and the workers'.
            reg.pulled_every_image(&k, 3);
        }
        wait_nothing_left(&rt, &kubeconfig, &run_id, name);
        assert_nothing_left(&out);
    }
    // The kill scenario hit the leader's pod and restarted it there.
    let nem = std::fs::read_to_string(work.path().join("kill/nemesis.jsonl")).expect("nemesis");
    assert!(
        nem.contains("agent kill (SIGKILL)") && nem.contains("agent start"),
        "{nem}"
    );
    // Workers' clocks, stepped back 10 s while the deposed leader wakes. The
    // Python adapter (`[client]` with `pod_files`) runs in each worker's pod,
    // Python, the venv and all, a child of the worker as on the other backends:
    // clockshim is mapped into both processes of each worker's group, and the
    // Python elector believes it leads about 10 s longer, as on the process
    // backend (`clients.rs`). Without the adapter, fencecheck's own elector runs
    // in worker pods, clockshim preloaded there from the worker image.
    let own = work.path().join("own-elector-clock-jump.toml");
    std::fs::write(&own, own_elector_clock_jump()).expect("write");
    let python = repo_root().join("scenarios/clients/python-leaselock-clock-jump.toml");
    for (name, file, pods) in [
        ("python-leaselock-clock-jump", python, 3),
        ("own-elector-clock-jump", own, 3),
    ] {
        let out = work.path().join(name);
        let r = passes_on_kubernetes(&kubeconfig, name, &file, &out, &mut times);
        let jumps = fault_count(&r, "clock-jump");
        assert!(n(&jumps["confirmed"]) > 0, "{name}: {jumps}");
        let k = kubernetes_json(&out);
        let workers = k["workers"].as_array().map_or(0, Vec::len);
        assert_eq!(workers, pods, "{name}: {k}");
        // Each stepped worker's group: the worker, and the adapter under it.
        let groups = if name.starts_with("python") { 2 } else { 1 };
        let nem = std::fs::read_to_string(out.join("nemesis.jsonl")).expect("nemesis");
        let stepped: Vec<serde_json::Value> = nem
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["f"] == "clock-jump" && e["type"] == "invoke")
            .flat_map(|e| e["detail"]["done"].as_array().cloned().unwrap_or_default())
            .collect();
        assert_eq!(stepped.len(), pods, "{name}: {nem}");
        for w in &stepped {
            assert_eq!(
                w["processes_with_clockshim"],
                format!("{groups} of {groups}"),
                "{name}: {w}"
            );
        }
        if name.starts_with("python") {
            assert!(
                k["images"].as_array().is_some_and(|i| i.iter().any(|i| i
                    .as_str()
                    .is_some_and(|i| i.contains("worker-python-leaselock-pod")))),
                "{name}: {k}"
            );
        }
        wait_nothing_left(
            &rt,
            &kubeconfig,
            k["run_id"].as_str().expect("run_id"),
            name,
        );
    }
    // An adapter without `pod_files` (nothing says what it needs in a pod): its
    // workers stay processes of this machine, the service and storage pods.
    let name = "adapter-without-pod-files";
    let file = work.path().join(format!("{name}.toml"));
    let text = client_go_pause_with_pod_files("[]").replace("pod_files = []", "");
    assert!(!text.contains("pod_files"), "{text}");
    std::fs::write(&file, text).expect("write");
    let out = work.path().join(name);
    let r = passes_on_kubernetes(&kubeconfig, name, &file, &out, &mut times);
    let pauses = fault_count(&r, "pause");
    assert!(n(&pauses["injected"]) > 0, "{name}: {pauses}");
    assert_eq!(pauses["confirmed"], pauses["injected"], "{name}: {pauses}");
    let k = kubernetes_json(&out);
    assert!(
        k["workers"].as_array().is_none_or(Vec::is_empty),
        "{name}: worker pods: {k}"
    );
    assert!(
        k["pods"].as_array().is_some_and(|p| p
            .iter()
            .all(|p| !p.as_str().unwrap_or("").starts_with("worker"))),
        "{name}: {k}"
    );
    // The adapter ran beside each worker here, and wrote its log here.
    for id in 0..5 {
        assert!(
            out.join(format!("worker-{id}.client.log")).exists(),
            "{name}: worker {id}'s adapter log"
        );
    }
    wait_nothing_left(
        &rt,
        &kubeconfig,
        k["run_id"].as_str().expect("run_id"),
        name,
    );
    // An adapter whose listed runtime cannot be packaged (a JRE library without
    // the libjvm.so it loads) stops the run before its namespace exists.
    let bad = work.path().join("unpackable-adapter.toml");
    let text =
        client_go_pause_with_pod_files("[\"/usr/lib/jvm/java-17-openjdk-amd64/lib/libjava.so\"]");
    std::fs::write(&bad, text).expect("write");
    let out = work.path().join("unpackable-adapter");
    let o = run_file_on_kubernetes(&kubeconfig, &bad, &out);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    assert!(
        err.contains("the workers' image") && err.contains("libjvm.so"),
        "{err}"
    );
    assert!(
        !out.join("kubernetes.json").exists(),
        "a namespace was made"
    );
    eprintln!("k8s_backend: wall time per scenario (s): {times:?}");
    cluster.finish();
}

/// A run that elected on the cluster's own API server (`[lock] apiserver =
/// "cluster"`): no member pod, the cluster's version in the report, the Leases
/// in the run's namespace as the elector's service account, and none of the
/// run's Leases left anywhere once its namespace has gone (`leftovers` looks in
/// the namespace itself).
fn on_the_clusters_apiserver(
    rt: &tokio::runtime::Runtime,
    kubeconfig: &Path,
    r: &Value,
    k: &Value,
) {
    use k8s_openapi::api::coordination::v1::Lease;
    assert_eq!(k["apiserver"], "the cluster's", "{k}");
    let pods: Vec<&str> = k["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| !p.starts_with("worker-"))
        .collect();
    assert_eq!(pods, ["storage"], "no member pod: {k}");
    assert!(
        k["images"]
            .as_array()
            .expect("images")
            .iter()
            .all(|i| !i.as_str().unwrap_or_default().contains("kubernetes-pod")),
        "no member image: {k}"
    );
    let version = r["run"]["service_version"].as_str().unwrap_or_default();
    assert!(version.starts_with("v1.20"), "the cluster's: {}", r["run"]);
    // The grants were judged from the Leases as the harness watched them in the
    // run's namespace (not from the workers' tokens).
    assert!(
        n(&r["checks"]["token"]["grants"]) >= 3,
        "grants observed: {}",
        r["checks"]["token"]
    );
    let left = rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        Api::<Lease>::all(client)
            .list(&Default::default())
            .await
            .expect("leases")
            .items
            .into_iter()
            .filter_map(|l| {
                let name = l.metadata.name.unwrap_or_default();
                let ns = l.metadata.namespace.unwrap_or_default();
                name.starts_with("fencecheck-k")
                    .then(|| format!("{ns}/{name}"))
            })
            .collect::<Vec<_>>()
    });
    assert!(left.is_empty(), "Leases left: {left:?}");
}

/// `client-go-pause.toml` with `[client] pod_files = <files>` and its command
/// absolute, to be written anywhere.
fn client_go_pause_with_pod_files(files: &str) -> String {
    let go = repo_root().join("clients/go-leaderelection/bin/go-leaderelection");
    std::fs::read_to_string(repo_root().join("scenarios/clients/client-go-pause.toml"))
        .expect("client-go-pause")
        .replace("pod_files = []", &format!("pod_files = {files}"))
        .replace(
            "../../clients/go-leaderelection/bin/go-leaderelection",
            go.to_str().expect("utf-8"),
        )
}

/// Nodes registered through the API as a kubelet would register them (Ready,
/// containerd), none with a kubelet behind it: name, boot id (`None`: this
/// machine's), InternalIP. `elsewhere` is another machine; `containerd-here` this
/// machine's containerd (loopback is this machine's address). A node that is this
/// kernel in a network of its own is a real one (`SecondNode`).
const FAKE_NODES: [(&str, Option<&str>, &str); 2] = [
    (
        "elsewhere",
        Some("00000000-0000-0000-0000-000000000000"),
        "192.0.2.1",
    ),
    ("containerd-here", None, "127.0.0.1"),
];

/// `ci/second-node.sh`'s node for the cluster in `dir`: this kernel in a network
/// namespace of its own with a Docker engine of its own, kubelet registered as
/// `10.251.0.2` (what a kind node is to the backend). Down on drop.
struct SecondNode {
    dir: PathBuf,
    registry_port: u16,
}

impl SecondNode {
    const NAME: &'static str = "10.251.0.2";

    /// Its engine pulls from this machine's registry at `registry_port`.
    fn up(dir: &Path, registry_port: u16) -> SecondNode {
        // A run killed half-way may have left one: `down` removes whatever is there.
        let node = SecondNode {
            dir: dir.to_path_buf(),
            registry_port,
        };
        node.script("down");
        let o = node.script("up");
        assert_eq!(
            o.status.code(),
            Some(0),
            "second-node.sh up: {}",
            explain(&o)
        );
        node
    }

    /// `wall on`: from here on the node may open connections to this machine
    /// only at the API server and the registry.
    fn wall(&self) {
        let o = self.script_args(&["wall", "on"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "second-node.sh wall on: {}",
            explain(&o)
        );
    }

    /// Connections the node tried to open to this machine that the wall
    /// refused, as its rule counts them.
    fn walled_off(&self) -> u64 {
        Self::refused("FC-WALL")
    }

    /// Connections this machine tried to open to the node (not to kubelet)
    /// that the wall refused.
    fn walled_in(&self) -> u64 {
        Self::refused("FC-WALL-IN")
    }

    fn refused(chain: &str) -> u64 {
        let o = std::process::Command::new("ip")
            .args([
                "netns", "exec", "fcn2", "iptables", "-L", chain, "-v", "-n", "-x",
            ])
            .output()
            .expect("iptables");
        let text = String::from_utf8_lossy(&o.stdout);
        text.lines()
            .find(|l| l.contains("REJECT"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no wall rule: {text}"))
    }

    fn script(&self, verb: &str) -> std::process::Output {
        self.script_args(&[verb])
    }

    fn script_args(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("bash")
            .arg(repo_root().join("ci/second-node.sh"))
            .args(args)
            .env("FENCECHECK_CLUSTER_DIR", &self.dir)
            .env(
                "FENCECHECK_NODE2_REGISTRY_PORT",
                self.registry_port.to_string(),
            )
            .output()
            .expect("run ci/second-node.sh")
    }
}

impl Drop for SecondNode {
    fn drop(&mut self) {
        let o = self.script("down");
        if !std::thread::panicking() {
            assert_eq!(
                o.status.code(),
                Some(0),
                "second-node.sh down: {}",
                explain(&o)
            );
        }
    }
}

/// `kill.toml` (3 etcd members, the leader killed and restarted) on a node that
/// is not this machine: `ci/second-node.sh`'s, this kernel in a network of its
/// own with a Docker engine of its own, which pulls the images from a registry
/// here. It passes as on the process backend; every member listened on the
/// node's address and advertised a proxy there (the links pod's, as every
/// worker's link is); the storage's
/// journal came back whole (each operation the checks counted is in it); the
/// node's engine pulled the member's and the storage's images; nothing of the
/// run is left. Then `pause` and `revoke` aimed at the holder's read there
/// (fired by the agent in the holder's pod; the revoke applied while the
/// holder is held stopped there), `redlock-majority-clock-jump` (every step of
/// two Redis pods' clocks seen in the instances' own `TIME`, the pods' offset
/// files replaced by the agent, and the overlaps it is there to show), an
/// elector's clock stepped back, and a Go adapter in each worker pod. Link
/// faults on members and workers there, through the links pod. All of it with
/// the node walled off from this machine but for the API server and the
/// registry (`second-node.sh wall on`), and the wall refused nothing.
#[test]
fn kill_on_a_node_that_is_not_this_machine_passes_and_leaves_nothing() {
    if !docker::docker_or_skip("k8s_backend") {
        return;
    }
    // Alone: the second node's engine pulling onto vfs starved the timed
    // partition scenarios that ran beside it (CI at 42a006f).
    let _one = kube_alone();
    let cluster = TestCluster::take("k8s_backend");
    let rt = runtime();
    let work = tempfile::tempdir().expect("tmp");
    on_a_second_node(&rt, &cluster.kubeconfig, &cluster.dir, work.path());
    cluster.finish();
}

fn on_a_second_node(rt: &tokio::runtime::Runtime, kubeconfig: &Path, dir: &Path, work: &Path) {
    let reg = Registry::start_on(&work.join("second"), "0.0.0.0");
    let port: u16 = reg
        .name
        .trim_start_matches("127.0.0.1:")
        .trim_end_matches("/fc")
        .parse()
        .expect("the registry's port");
    let second = SecondNode::up(dir, port);
    // A node in a cloud reaches its control plane and its registry, not the
    // machine the harness runs on: every run below is on such a node.
    second.wall();
    // A shipped scenario (or its text), set on the second node through the
    // registry.
    let run_text = |name: &str, text: String| {
        let file = work.join(format!("{name}-second-node.toml"));
        std::fs::write(
            &file,
            text.replacen(
                "[cluster]\n",
                &format!(
                    "[cluster]\nnode = \"{}\"\nregistry = \"{}\"\n",
                    SecondNode::NAME,
                    reg.name
                ),
                1,
            ),
        )
        .expect("write");
        let out = work.join(format!("{name}-second-node"));
        let refused_in = second.walled_in();
        let o = run_file_with_docker_config(kubeconfig, &file, &out, Some(&reg.docker_config));
        // What the faults did, for a failure's reader: the run directory goes
        // with the test's temporary one.
        let faults = std::fs::read_to_string(out.join("nemesis.jsonl")).unwrap_or_default();
        // And how the harness reached the pods (its port-forwards' counts):
        // a run whose observer missed grants there failed so, its directory
        // gone with the test's.
        let reached = std::fs::read_to_string(out.join("kubernetes.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|k| k["reach"].to_string())
            .unwrap_or_default();
        // Which acquisitions the exclusion check found no grant for, and when.
        let exclusion = std::fs::read_to_string(out.join("report.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|r| {
                format!(
                    "{} (run from {} to {} ns)",
                    r["checks"]["exclusion"], r["run"]["time_origin_ns"], r["run"]["time_end_ns"]
                )
            })
            .unwrap_or_default();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}\nnemesis.jsonl:\n{faults}\nreach: {reached}\nexclusion: {exclusion}",
            explain(&o)
        );
        let r = read_report(&out);
        assert_eq!(r["passed"], true, "{name}");
        assert_eq!(r["run"]["backend"], "kubernetes", "{}", r["run"]);
        let k = kubernetes_json(&out);
        assert_eq!(k["node"], SecondNode::NAME, "{k}");
        assert_eq!(k["remote"]["node_address"], "10.251.0.2", "{k}");
        assert_eq!(k["remote"]["harness_address"], "10.251.0.1", "{k}");
        // This machine cannot open a connection to the node but at kubelet's
        // port: the harness tried the node's address once (its probe, the
        // wall refused it) and reached the run's pods there through
        // port-forwards, each carrying connections (readiness, the observer,
        // the checks' reads).
        let reach = &k["reach"];
        assert_eq!(reach["mode"], "port-forward", "{name}: {reach}");
        assert_eq!(reach["asked"], "auto", "{name}: {reach}");
        assert_eq!(
            second.walled_in() - refused_in,
            1,
            "{name}: the harness went to the node's address more than its probe: {reach}"
        );
        let forwards = &reach["port_forwards"];
        assert!(n(&forwards["connections"]) > 0, "{name}: {reach}");
        assert_eq!(
            reach["through"]["ports"].as_array().map(Vec::len),
            forwards["forwards"].as_u64().map(|f| f as usize),
            "{name}: {reach}"
        );
        // The member's image, the storage's and the workers' (this fencecheck
        // binary in it), each pulled by the node's engine.
        reg.pulled_every_image(&k, 3);
        let said =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        // The workers ran as pods there, and every one's events came back.
        let resolved: toml::Value =
            toml::from_str(&std::fs::read_to_string(out.join("scenario.toml")).expect("scenario"))
                .expect("toml");
        let count = resolved["workload"]["workers"]
            .as_integer()
            .expect("workers") as u64;
        let workers = k["workers"].as_array().cloned().unwrap_or_default();
        assert_eq!(workers.len() as u64, count, "{name}: {k}");
        for (i, w) in workers.iter().enumerate() {
            assert_eq!(w["pod"], format!("worker-{i}"), "{name}: {w}");
            assert!(n(&w["pod_pid"]) > 1, "{name}: {w}");
        }
        let h = history(&out);
        for i in 0..count {
            assert!(
                h.iter().any(|e| e["process"].as_u64() == Some(i)),
                "{name}: nothing of worker {i} came back: {said}"
            );
        }
        // This kernel's monotonic clock on both sides: the measured offset is
        // 0 within its uncertainty (half the best round trip).
        let clock = &k["node_clock"];
        let offset = clock["offset_ns"].as_i64().expect("offset_ns");
        let within = clock["uncertainty_ns"].as_i64().expect("uncertainty_ns");
        assert!(within > 0 && offset.abs() <= within, "{name}: {clock}");
        (out, r, k, said)
    };
    let run = |name: &str| {
        let text = std::fs::read_to_string(repo_root().join(format!("scenarios/{name}.toml")))
            .expect("scenario");
        run_text(name, text)
    };

    let (out, r, k, said) = run("kill");
    let kills = &r["fault_counts"][0];
    assert_eq!(kills["kind"], "kill", "{}", r["fault_counts"]);
    assert!(kills["injected"].as_u64().unwrap_or(0) > 0, "{kills}");
    assert_eq!(kills["confirmed"], kills["injected"], "{kills}");
    for i in 0..3 {
        let log = std::fs::read_to_string(out.join(format!("etcd-{i}.log"))).expect("member log");
        assert!(
            log.contains("\"--listen-client-urls\",\"http://10.251.0.2:")
                && log.contains("\"--initial-advertise-peer-urls\",\"http://10.251.0.2:"),
            "member {i} did not listen on the node's address: {said}\n{}",
            &log[..log.len().min(2000)]
        );
    }
    // Each member's peer port and each worker's link to each member and to
    // the storage had its proxy in the links pod there.
    assert_eq!(k["links"]["pod"], "links", "{k}");
    assert_eq!(k["links"]["peer_links"], 3, "{k}");
    assert_eq!(k["links"]["worker_links"], 4 * (3 + 1), "{k}");
    // The journal, followed out of the storage's pod: one line per operation
    // the linearizability check read, every line whole.
    let journal = std::fs::read_to_string(out.join("storage.jsonl")).expect("storage.jsonl");
    let lines: Vec<&str> = journal.lines().collect();
    assert!(!lines.is_empty(), "empty journal");
    for l in &lines {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
    assert_eq!(
        r["checks"]["linearizable"]["operations"].as_u64(),
        Some(lines.len() as u64),
        "journal lines against the operations the linearizability check read"
    );
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's run");

    // Faults on links there, through the proxies of the links pod: the
    // leader cut off from its peers, every member's peer links slowed, the
    // workers' links to the members slowed. Each confirmed by the bytes the
    // pod's proxies counted, read back through the harness's exec.
    let (_out, r, k, said) = run_text("links-in-a-pod", LINKS_IN_A_POD.to_string());
    let faults = r["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 3, "{said}");
    for (f, links) in faults.iter().zip([1, 3, 12]) {
        assert_eq!(
            f["detail"]["proxies_in"],
            serde_json::json!(["pod links"]),
            "{f}"
        );
        assert_eq!(f["detail"]["links"], links, "{f}");
        assert_eq!(f["effect"]["status"], "confirmed", "{f}");
    }
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's link faults");

    // The holder's pause, aimed at its read: fired by the agent in the
    // holder's worker pod there (the harness's exec would land ~100 ms late),
    // each confirmed from the pod's /proc, and the stale writes it is there to
    // show were refused.
    let text = std::fs::read_to_string(repo_root().join("scenarios/pause.toml"))
        .expect("pause.toml")
        .replacen("every = \"5s\"\n", "every = \"5s\"\naim = \"read\"\n", 1);
    assert!(
        text.contains("aim = \"read\""),
        "pause.toml's fault changed"
    );
    let (out, r, k, said) = run_text("pause", text);
    let pauses = &r["fault_counts"][0];
    assert_eq!(pauses["kind"], "pause", "{}", r["fault_counts"]);
    assert!(n(&pauses["injected"]) > 0, "{pauses}: {said}");
    assert_eq!(pauses["confirmed"], pauses["injected"], "{pauses}");
    assert!(
        n(&r["checks"]["fencing"]["stale_rejected"]) > 0,
        "{}",
        r["checks"]["fencing"]
    );
    // Each stopped its worker between the read it was aimed at and that
    // worker's next event (its write), as the worker's own record shows.
    for f in r["faults"].as_array().expect("faults") {
        if f["outcome"] != "ok" {
            continue;
        }
        let aim = &f["detail"]["aim"];
        let seen = &aim["seen"];
        assert_eq!(aim["event"], "read", "{aim}");
        let stopped = n(&aim["in_pod"]["stopped_ns"]);
        assert!(stopped >= n(&seen["time_ns"]), "{aim}");
        let w = n(&seen["worker"]);
        assert_eq!(aim["in_pod"]["pod"], format!("worker-{w}"), "{aim}");
        let next = next_event(&out, w, n(&seen["time_ns"]));
        assert!(
            n(&next["time_ns"]) > stopped,
            "worker {w} went on before its pause: {next} / {aim}"
        );
    }
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's pause run");

    // The holder's lease revoked at its read, there: the agent in the holder's
    // pod stops it at the read, the harness revokes the lease while it is held
    // and then continues it, so the revoke lands between the read and the
    // write, as this machine's signals land it on a local worker.
    let text = std::fs::read_to_string(repo_root().join("scenarios/revoke.toml"))
        .expect("revoke.toml")
        .replacen("every = \"2s\"\n", "every = \"2s\"\naim = \"read\"\n", 1)
        + "\n[cluster]\n";
    assert!(
        text.contains("aim = \"read\""),
        "revoke.toml's fault changed"
    );
    let (out, r, k, said) = run_text("revoke", text);
    let revokes: Vec<&Value> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|f| f["kind"] == "revoke-lease" && f["outcome"] == "ok")
        .collect();
    assert!(!revokes.is_empty(), "no revoke: {said}");
    for f in revokes {
        assert_eq!(f["effect"]["status"], "confirmed", "{f}");
        let aim = &f["detail"]["aim"];
        let seen = &aim["seen"];
        let w = n(&seen["worker"]);
        assert_eq!(aim["in_pod"]["pod"], format!("worker-{w}"), "{f}");
        let held = &f["detail"]["held"];
        assert_eq!(n(&held["worker"]), w, "{f}");
        assert!(held.get("error").is_none(), "{f}");
        let stopped = n(&held["stopped_ns"]);
        assert!(stopped >= n(&seen["time_ns"]), "{f}");
        // Continued only after the fault began (its revoke is sent after
        // its start is stamped).
        assert!(n(&held["continued_ns"]) > n(&f["start_ns"]), "{f}");
        // The worker did nothing from its read until the revoke was on its
        // way: its next event is after the fault's start.
        let next = next_event(&out, w, n(&seen["time_ns"]));
        assert!(
            n(&next["time_ns"]) > n(&f["start_ns"]),
            "worker {w} went on before its revoke: {next} / {f}"
        );
    }
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's revoke run");

    // Two Redis masters' clocks stepped on the node: the pods' own offset files,
    // replaced by the agent's `put`; each step seen in the instance's TIME.
    let (_out, r, k, said) = run("redlock-majority-clock-jump");
    for d in clock_steps(&r, 2, &said) {
        let us = |k: &str| d[k].as_i64().unwrap_or_else(|| panic!("{k}: {d}"));
        let moved = us("instance_time_after_us") - us("instance_time_before_us");
        assert!(moved >= 9_000_000, "{d}");
    }
    assert!(
        n(&r["checks"]["mutex"]["overlaps"]) > 0,
        "{}",
        r["checks"]["mutex"]
    );
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's clock-jump run");

    // Electors' clocks stepped back there: fencecheck's own elector (Kubernetes
    // Lease, on the run's own API server in a pod there), each worker pod's
    // offset file replaced by its agent, and clockshim seen mapped in every
    // process of each worker's group by that agent.
    let (_out, r, k, said) = run_text("own-elector-clock-jump", own_elector_clock_jump());
    for d in clock_steps(&r, 3, &said) {
        assert_eq!(d["processes_with_clockshim"], "1 of 1", "{d}");
    }
    assert!(
        n(&r["checks"]["fencing"]["stale_accepted"]) > 0,
        "{}",
        r["checks"]["fencing"]
    );
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(
        rt,
        kubeconfig,
        &run_id,
        "the second node's elector clock-jump run",
    );

    // Last: its five worker pods' layers (the adapter and this binary) are the
    // heaviest for the node's engine to remove. Run before the elector's
    // clock jump, that timed run failed in 2 of 5 test runs (the deposed
    // elector wrote nothing after it woke), never in 4 by hand alone.
    // A Go application's lock client (etcd's concurrency.Mutex) in each
    // worker pod there, the worker's child: its image carries the adapter and
    // this binary, and each pause is confirmed on both processes of the
    // holder's group, as the pod's agent reads its /proc.
    let text =
        std::fs::read_to_string(repo_root().join("scenarios/clients/go-etcd-mutex-pause.toml"))
            .expect("go-etcd-mutex-pause.toml")
            .replace(
                "\"../../clients/",
                &format!("\"{}/clients/", repo_root().display()),
            );
    let (_out, r, k, said) = run_text("go-etcd-mutex-pause", text);
    assert!(
        k["images"].as_array().expect("images").iter().any(|i| i
            .as_str()
            .is_some_and(|i| i.contains("/fencecheck/worker-go-etcd-mutex-pod-remote:"))),
        "{k}"
    );
    let pauses: Vec<&Value> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|f| f["kind"] == "pause")
        .collect();
    assert!(!pauses.is_empty(), "no pause: {said}");
    for p in pauses {
        assert_eq!(p["effect"]["status"], "confirmed", "{p}");
        for d in p["detail"]["done"].as_array().expect("done") {
            assert_eq!(d["group_processes"], 2, "the worker and its adapter: {p}");
            assert_eq!(d["group_stopped"], 2, "{p}");
        }
    }
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    wait_nothing_left(rt, kubeconfig, &run_id, "the second node's adapter run");
    // The reaper in the node's pod network (`[cluster] reaper =
    // "in-cluster"`), as on a cluster no node of which is this machine: the
    // harness killed with SIGKILL mid-run, and nothing of the run is left
    // within 60 s. The reaper reached the API server through the `kubernetes`
    // Service's address (kube-proxy's rule on the node, to the Endpoints the
    // test bed publishes) and checked its certificate for that address.
    let text =
        std::fs::read_to_string(repo_root().join("scenarios/pause.toml")).expect("pause.toml");
    assert!(
        text.contains("[cluster]\n"),
        "pause.toml has no [cluster] table"
    );
    let file = work.join("reaper-in-cluster.toml");
    std::fs::write(
        &file,
        text.replacen(
            "[cluster]\n",
            &format!(
                "[cluster]\nnode = \"{}\"\nregistry = \"{}\"\nreaper = \"in-cluster\"\n",
                SecondNode::NAME,
                reg.name
            ),
            1,
        ),
    )
    .expect("write");
    let out = work.join("reaper-in-cluster");
    let mut child = bin()
        .env("DOCKER_CONFIG", &reg.docker_config)
        .env("KUBECONFIG", kubeconfig)
        .arg("scenario")
        .arg(&file)
        .args(["--backend", "kubernetes", "--quiet", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join("reaper-in-cluster.err")).expect("stderr file"))
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(600);
    while !std::fs::read_to_string(out.join("nemesis.jsonl"))
        .unwrap_or_default()
        .contains("\"invoke\"")
    {
        if let Some(s) = child.try_wait().expect("wait") {
            panic!(
                "fencecheck exited ({s}) before its first fault: {}",
                std::fs::read_to_string(work.join("reaper-in-cluster.err")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the in-cluster reaper's run never got there"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let k = kubernetes_json(&out);
    let reaper = &k["reaper"];
    assert_eq!(reaper["asked"], "in-cluster", "{k}");
    assert_eq!(reaper["network"], "pod", "{reaper}");
    assert_eq!(reaper["server"], "in-cluster", "{reaper}");
    assert_eq!(reaper["node"], SecondNode::NAME, "{reaper}");
    let pod_ip = reaper["pod_ip"].as_str().unwrap_or_default();
    assert!(
        pod_ip.starts_with("10.252.0."),
        "not in the node's pod network: {reaper}"
    );
    let run_id = k["run_id"].as_str().expect("run_id").to_string();
    let log = rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        Api::<Pod>::namespaced(client, "default")
            .logs(&format!("fencecheck-reaper-{run_id}"), &Default::default())
            .await
            .expect("the reaper's log")
    });
    assert!(
        log.contains("at https://10.0.0.1:443") && log.contains("lease seen"),
        "the reaper did not read the Lease through the Service: {log}"
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let gone = wait_nothing_left(
        rt,
        kubeconfig,
        &run_id,
        "after SIGKILL, the reaper in-cluster",
    );
    eprintln!("k8s_backend: SIGKILL, the reaper in the node's pod network: nothing left {gone:.1} s later");
    // No run needed the node to reach this machine but at the API server
    // and the registry (each run's probe of the other way is counted above).
    assert_eq!(
        second.walled_off(),
        0,
        "the node tried to reach this machine"
    );
}

/// Link faults on 3 members and on the workers' links (`on_a_second_node`).
const LINKS_IN_A_POD: &str = r#"name = "links-in-a-pod"
description = "3 members: the leader cut off from its peers, every member's peer links slowed, the workers' links to the members slowed."
duration = "30s"
seed = 29

[cluster]
etcd_members = 3

[lock]
ttl = "3s"

[workload]
workers = 4
ops_per_hold = 3
hold = "0ms..300ms"

[[fault]]
kind = "partition"
target = "leader"
at = "4s"
duration = "5s"

[[fault]]
kind = "delay"
target = "all-members"
at = "14s"
duration = "4s"
latency = "50ms"
latency_jitter = "10ms"

[[fault]]
kind = "delay"
target = "workers->etcd"
at = "21s"
duration = "4s"
latency = "100ms"
latency_jitter = "20ms"

[expect]
fencing_violations = 0
lost_updates = 0
"#;

/// Worker `w`'s first event after `after_ns`, as its own record in `out` has it.
fn next_event(out: &Path, w: u64, after_ns: u64) -> Value {
    let record = std::fs::read_to_string(out.join(format!("worker-{w}.jsonl")))
        .expect("the worker's events");
    record
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| n(&e["time_ns"]) > after_ns)
        .unwrap_or_else(|| panic!("nothing of worker {w} after {after_ns}"))
}

/// Each step of each clock jump in the report, every jump `ok` with `per`
/// steps, none unconfirmed.
fn clock_steps(r: &Value, per: usize, said: &str) -> Vec<Value> {
    let jumps: Vec<&Value> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|f| f["kind"] == "clock-jump")
        .collect();
    assert!(!jumps.is_empty(), "no clock jump: {said}");
    let mut out = Vec::new();
    for j in jumps {
        assert_eq!(j["outcome"], "ok", "{j}");
        assert!(j["detail"]["unconfirmed"].is_null(), "{j}");
        let done = j["detail"]["done"].as_array().expect("done");
        assert_eq!(done.len(), per, "{j}");
        for d in done {
            assert!(d["unconfirmed"].is_null(), "{j}");
            out.push(d.clone());
        }
    }
    out
}

/// `python-leaselock-clock-jump` without its `[client]` table: fencecheck's
/// own elector, its clock stepped the same way.
fn own_elector_clock_jump() -> String {
    let text = std::fs::read_to_string(
        repo_root().join("scenarios/clients/python-leaselock-clock-jump.toml"),
    )
    .expect("python-leaselock-clock-jump.toml");
    let (head, tail) = text.split_once("[client]\n").expect("a [client] table");
    let tail = tail.split_once("\n\n").expect("the table ends").1;
    format!("{head}{tail}")
}

/// The namespaces whose names start with `fencecheck-` (a run's).
fn run_namespaces(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> Vec<String> {
    rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        let nss: Api<Namespace> = Api::all(client);
        nss.list(&ListParams::default())
            .await
            .expect("list namespaces")
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .filter(|n| n.starts_with("fencecheck-"))
            .collect()
    })
}

/// Refusals that need a cluster, each exit 2 with its reason and nothing
/// created: a node that is not this machine (a Node object registered through
/// the API, as another machine's kubelet would: another boot id, containerd), a
/// real node of this kernel in a network of its own (`ci/second-node.sh`), and
/// one that does not exist, all named by `[cluster] node`; `[cluster] reach`
/// asking for what the node cannot give; `[cluster] reaper = "in-cluster"` on
/// a cluster whose `kubernetes` Service has no endpoints; a user whom RBAC
/// denies one verb the run needs (a service account of the cluster, its token
/// from the TokenRequest API, bound to a role with every needed verb but
/// `create pods/exec`).
fn refusals_on_the_cluster(rt: &tokio::runtime::Runtime, kubeconfig: &Path, work: &Path) {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::{Node, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Patch, PatchParams, PostParams};
    let before = run_namespaces(rt, kubeconfig);
    let token = rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        let pp = PostParams::default();
        let nodes: Api<Node> = Api::all(client.clone());
        let ours = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .expect("boot id")
            .trim()
            .to_string();
        for (name, boot, address) in FAKE_NODES {
            let boot = boot.unwrap_or(&ours);
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": { "name": name }
            }))
            .expect("node");
            nodes
                .create(&pp, &node)
                .await
                .unwrap_or_else(|e| panic!("create node {name}: {e}"));
            let status = serde_json::json!({ "status": {
                "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady" }],
                "addresses": [{ "type": "InternalIP", "address": address }],
                "nodeInfo": {
                    "bootID": boot,
                    "containerRuntimeVersion": "containerd://1.6.4",
                    "architecture": "amd64", "operatingSystem": "linux", "kernelVersion": "",
                    "osImage": "", "kubeletVersion": "v1.20.2", "kubeProxyVersion": "",
                    "machineID": "", "systemUUID": "",
                },
            }});
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap_or_else(|e| panic!("node {name} Ready: {e}"));
        }
        let nss: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": "limited" } }))
                .expect("ns");
        nss.create(&pp, &ns)
            .await
            .expect("create namespace limited");
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "limited");
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": "runner" } }))
                .expect("sa");
        sas.create(&pp, &sa).await.expect("create service account");
        // Every verb the backend asks for, but exec into its pods.
        let rules: Vec<Value> = fencecheck::backend::kubernetes::connect::NEEDED
            .iter()
            .filter(|(verb, _, _, sub, _)| !(*verb == "create" && *sub == "exec"))
            .map(|(verb, group, resource, sub, _)| {
                let r = if sub.is_empty() {
                    resource.to_string()
                } else {
                    format!("{resource}/{sub}")
                };
                serde_json::json!({ "apiGroups": [group], "resources": [r], "verbs": [verb] })
            })
            .collect();
        let role: ClusterRole = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "fencecheck-no-exec" }, "rules": rules
        }))
        .expect("role");
        Api::<ClusterRole>::all(client.clone())
            .create(&pp, &role)
            .await
            .expect("create role");
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "fencecheck-no-exec" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "fencecheck-no-exec" },
            "subjects": [{ "kind": "ServiceAccount", "name": "runner", "namespace": "limited" }],
        }))
        .expect("binding");
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&pp, &binding)
            .await
            .expect("create binding");
        let req: TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": { "audiences": [], "expirationSeconds": 3600 }
        }))
        .expect("token request");
        sas.create_token_request("runner", &pp, &req)
            .await
            .expect("token request")
            .status
            .expect("token")
            .token
    });
    let refused = |scenario: &Path, kc: &Path, extra: &[&str], want: &[&str]| {
        let out = work.join(format!("refused-{}", want[0].len()));
        let o = bin()
            .env("KUBECONFIG", kc)
            .arg("scenario")
            .arg(scenario)
            .args(extra)
            .args(["--quiet", "--out"])
            .arg(&out)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{want:?}: {}", explain(&o));
        for w in want {
            assert!(err.contains(w), "{w:?} not in {err}");
        }
        assert!(
            !out.join("worker-0.jsonl").exists(),
            "{want:?} started a run"
        );
    };
    for (node, registry, want) in [
        (
            "elsewhere",
            "",
            &[
                ":4:",
                "node elsewhere is not this machine",
                "set [cluster] registry",
            ][..],
        ),
        // With a registry it would do, but nothing answers at its address,
        // where the scenario asks to reach it (with worker pods there, `auto`
        // would go through port-forwards).
        (
            "elsewhere",
            "registry = \"127.0.0.1:5999\"\nreach = \"direct\"\n",
            &[
                ":4:",
                "node elsewhere is not this machine",
                "cannot reach its kubelet at 192.0.2.1:10250",
                "[cluster] reach = \"direct\"",
            ][..],
        ),
        // Port-forwards lead to the links pod, which runs only on a node that
        // is not this machine.
        (
            "localhost",
            "reach = \"port-forward\"\n",
            &[":5:", "cluster.reach", "node localhost is this machine"][..],
        ),
        // The local cluster's API server advertises loopback: no Endpoints
        // behind its `kubernetes` Service, so no pod reaches it through it
        // (the second node's test bed gives it some).
        (
            "localhost",
            "reaper = \"in-cluster\"\n",
            &[
                ":5:",
                "cluster.reaper",
                "Service default/kubernetes (10.0.0.1) has no endpoints",
            ][..],
        ),
        (
            "nowhere",
            "",
            &[":4:", "cluster.node", "no node \"nowhere\"", "localhost"][..],
        ),
        // This machine's containerd: the engine's images are not its images.
        (
            "containerd-here",
            "",
            &[":4:", "containerd://1.6.4", "set [cluster] registry"][..],
        ),
    ] {
        let file = work.join(format!("{node}.toml"));
        std::fs::write(
            &file,
            format!(
                "name = \"{node}\"\n[cluster]\nbackend = \"kubernetes\"\nnode = \"{node}\"\n{registry}"
            ),
        )
        .expect("write");
        refused(&file, kubeconfig, &[], want);
    }
    // The same cluster and CA, the service account's token.
    let admin = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let line = admin
        .lines()
        .find(|l| l.trim_start().starts_with("token:"))
        .expect("a token line");
    let limited = work.join("limited-kubeconfig");
    std::fs::write(
        &limited,
        admin.replace(line, &format!("    token: {token}")),
    )
    .expect("write");
    refused(
        Path::new("scenarios/pause.toml"),
        &limited,
        &["--backend", "kubernetes"],
        &["may not create pods/exec", "limited-kubeconfig"],
    );
    assert_eq!(
        run_namespaces(rt, kubeconfig),
        before,
        "a refused run created a namespace"
    );
    rt.block_on(async {
        let client = fencecheck::cluster::api::client(kubeconfig)
            .await
            .expect("client");
        for (name, _, _) in FAKE_NODES {
            let _ = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                .delete(name, &Default::default())
                .await;
        }
    });
}

/// Starts `scenario` on kubernetes and returns once `ready` holds of the run
/// directory.
fn start(kubeconfig: &Path, scenario: &str, out: &Path, ready: impl Fn(&Path) -> bool) -> Child {
    let mut child = bin()
        .env("KUBECONFIG", kubeconfig)
        .args([
            "scenario",
            &format!("scenarios/{scenario}.toml"),
            "--backend",
            "kubernetes",
            "--quiet",
            "--out",
        ])
        .arg(out)
        .args(["--duration", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // The first run may build images (minutes on a cold cache).
    let deadline = Instant::now() + Duration::from_secs(900);
    while !ready(out) {
        if let Some(s) = child.try_wait().expect("wait") {
            panic!("fencecheck exited ({s}) too early");
        }
        assert!(Instant::now() < deadline, "the run never got there");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("signal");
}

#[test]
fn ctrl_c_and_sigkill_leave_nothing_and_a_killed_run_checks_incomplete() {
    if !docker::docker_or_skip("k8s_backend_exits") {
        return;
    }
    let _one = kube();
    let cluster = TestCluster::take("k8s_backend_exits");
    let kubeconfig = cluster.kubeconfig.clone();
    let rt = runtime();
    let work = tempfile::tempdir().expect("tmp");

    // Ctrl-C while the leader's pod is frozen by its agent.
    let out = work.path().join("ctrl-c");
    let mut child = start(&kubeconfig, "leader-pause", &out, |out| {
        std::fs::read_to_string(out.join("nemesis.jsonl"))
            .unwrap_or_default()
            .contains("agent stop")
    });
    let run_id = kubernetes_json(&out)["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    assert!(
        !leftovers(&rt, &kubeconfig, &run_id).is_empty(),
        "the run has no pods"
    );
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no exit after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2), "{status}");
    let gone = wait_nothing_left(&rt, &kubeconfig, &run_id, "after Ctrl-C");
    eprintln!(
        "k8s_backend: Ctrl-C: exit after {:.1} s, nothing left {gone:.1} s later",
        t0.elapsed().as_secs_f64()
    );
    assert_nothing_left(&out);

    // SIGKILL of the harness once its workers have recorded something.
    let out = work.path().join("sigkill");
    let mut child = start(&kubeconfig, "pause", &out, |out| {
        std::fs::read_to_string(out.join("nemesis.jsonl"))
            .unwrap_or_default()
            .contains("\"invoke\"")
    });
    let run_id = kubernetes_json(&out)["run_id"]
        .as_str()
        .expect("run_id")
        .to_string();
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let gone = wait_nothing_left(&rt, &kubeconfig, &run_id, "after SIGKILL");
    eprintln!("k8s_backend: SIGKILL: nothing left {gone:.1} s later");
    assert_nothing_left(&out);
    // Every event recorded up to the kill, checked offline.
    let mut recorded: BTreeMap<String, usize> = BTreeMap::new();
    for e in std::fs::read_dir(&out)
        .expect("run dir")
        .filter_map(|e| e.ok())
    {
        let f = e.file_name().to_string_lossy().to_string();
        let process = match f.strip_suffix(".jsonl") {
            Some("nemesis") => "nemesis".to_string(),
            Some(w) if w.starts_with("worker-") => w["worker-".len()..].to_string(),
            _ => continue,
        };
        let text = std::fs::read_to_string(e.path()).expect("read");
        *recorded.entry(process).or_default() +=
            text.lines().filter(|l| !l.trim().is_empty()).count();
    }
    assert!(recorded.values().sum::<usize>() > 0, "nothing recorded");
    let o = bin().arg("check").arg(&out).output().expect("check");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert!(stdout.contains("INCOMPLETE"), "{stdout}");
    let r = read_report(&out);
    assert!(r["incomplete"].is_string(), "{}", r["incomplete"]);
    let mut in_history: BTreeMap<String, usize> = BTreeMap::new();
    for e in history(&out) {
        let p = match &e["process"] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        if p != "final" {
            *in_history.entry(p).or_default() += 1;
        }
    }
    assert_eq!(
        in_history, recorded,
        "the checked history is not every recorded event"
    );
    cluster.finish();
}

/// Bad input for the kubernetes backend is exit 2 with its reason, before anything
/// starts (no cluster is needed to be refused): a kubeconfig named in the scenario
/// that is not there (at its line), `KUBECONFIG` naming nothing, an API server that
/// does not answer, and a fault the backend cannot do (at the fault's line).
#[test]
fn bad_kubernetes_input_is_exit_2_with_its_reason_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tmp");
    let refused = |args: &[&str], env: Option<&Path>, want: &[&str]| {
        let out = dir.path().join(format!("run-{}", want[0].len()));
        let mut c = bin();
        if let Some(k) = env {
            c.env("KUBECONFIG", k);
        }
        let o = c.args(args).arg("--out").arg(&out).output().expect("run");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", explain(&o));
        for w in want {
            assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
        }
        // Nothing started: no worker or member ever wrote to the run directory.
        assert!(
            !out.join("worker-0.jsonl").exists(),
            "{args:?} started a run"
        );
    };
    let scenario = dir.path().join("kc.toml");
    std::fs::write(
        &scenario,
        "name = \"kc\"\n[cluster]\nbackend = \"kubernetes\"\nkubeconfig = \"/nonexistent/kubeconfig\"\n",
    )
    .expect("write");
    let s = scenario.to_str().expect("utf-8");
    refused(
        &["scenario", s],
        None,
        &[":4:", "cluster.kubeconfig", "/nonexistent/kubeconfig"],
    );
    let nowhere = dir.path().join("no-such-kubeconfig");
    refused(
        &[
            "scenario",
            "scenarios/pause.toml",
            "--backend",
            "kubernetes",
        ],
        Some(&nowhere),
        &["KUBECONFIG", "does not exist"],
    );
    // Port 9 (discard) on loopback: nothing listens there.
    let dead = dir.path().join("dead-kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\n    \
         insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  \
         context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
    )
    .expect("write");
    refused(
        &[
            "scenario",
            "scenarios/pause.toml",
            "--backend",
            "kubernetes",
        ],
        Some(&dead),
        &["https://127.0.0.1:9", "does not answer"],
    );
    // A fault the run cannot do (an etcd member's clock: etcd's leases do not
    // expire by it) is refused at its line before the API server is asked.
    let text = std::fs::read_to_string(repo_root().join("scenarios/pause.toml")).expect("pause");
    let file = dir.path().join("pause-clock.toml");
    std::fs::write(
        &file,
        format!("{text}\n[[fault]]\nkind = \"clock-jump\"\ntarget = \"member:0\"\nat = \"5s\"\nby = \"10s\"\n"),
    )
    .expect("write");
    // A scenario file on the kubernetes backend, refused before the dead API
    // server is asked.
    let refused_file = |file: &Path, want: &[&str]| {
        refused(
            &[
                "scenario",
                file.to_str().expect("utf-8"),
                "--backend",
                "kubernetes",
            ],
            Some(&dead),
            want,
        )
    };
    refused_file(&file, &["pause-clock.toml:", "clock-jump", "not available"]);
    // An adapter's pod file that is not there, at its line (relative to the
    // scenario file, as the command is).
    let text = client_go_pause_with_pod_files("[\"no-such-runtime\"]");
    let line = text
        .lines()
        .position(|l| l.starts_with("pod_files"))
        .expect("a pod_files line")
        + 1;
    let file = dir.path().join("pod-files.toml");
    std::fs::write(&file, &text).expect("write");
    refused_file(
        &file,
        &[
            &format!(":{line}:"),
            "client.pod_files",
            "no-such-runtime",
            "does not exist",
        ],
    );
}
