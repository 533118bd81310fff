//! `fencecheck-reaper kube`: the kubernetes backend's dead-man switch.
//!
//! It runs as a pod in namespace `default` (outside the run's namespace, so it can
//! see that namespace to its end and then remove itself) and polls the run's Lease
//! every second. The harness renews that Lease every ~2 s; when its
//! resourceVersion and renewTime have not changed for `--stale` by THIS process's
//! monotonic clock — the harness's timestamps are never compared with this clock,
//! the two may be skewed — the harness is taken for dead, and the reaper:
//!
//! 1. deletes every pod of the run's namespace with gracePeriodSeconds=0;
//! 2. deletes the namespace;
//! 3. if it is still there (Terminating) ~5 s later with no pods left and no
//!    namespace controller at work on it, deletes what it knows the run leaves in
//!    it and finalizes it itself (see [`finalize`]);
//! 4. deletes its Secret, then its own pod, the very last call.
//!
//! If the run's namespace is already gone, the harness cleaned up normally: the
//! reaper only deletes its Secret and its own pod. Every step is logged to stdout
//! (the pod's log). The API server is reached with the token and CA handed in the
//! environment (from the reaper's Secret), over rustls.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The namespace the reaper's own pod and Secret live in.
const HOME: &str = "default";
/// How often the Lease is read.
const POLL: Duration = Duration::from_secs(1);
/// How long a deleted namespace may stay Terminating before the reaper looks for
/// a namespace controller and, finding none, finalizes it itself.
const FINALIZE_AFTER: Duration = Duration::from_secs(5);
/// How long the reaping may take before the reaper gives up (and keeps its pod,
/// with this log, for someone to read).
const REAP_DEADLINE: Duration = Duration::from_secs(40);
/// One API call's limit: a hung API server must not stop the clock.
const CALL: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Args {
    namespace: String,
    lease: String,
    secret: String,
    pod: String,
    stale: Duration,
    /// The node's Docker engine, when it is reachable (the local cluster): the
    /// run's stopped containers are removed through it rather than left to
    /// kubelet's once-a-minute garbage collection, and this pod's own last.
    docker_socket: Option<String>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut namespace, mut lease, mut secret, mut pod) = (None, None, None, None);
    let mut docker_socket = None;
    let mut stale = Duration::from_secs(10);
    let mut it = args;
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--namespace" => namespace = Some(value()?),
            "--lease" => lease = Some(value()?),
            "--secret" => secret = Some(value()?),
            "--pod" => pod = Some(value()?),
            "--stale" => stale = parse_duration(&value()?)?,
            "--docker-socket" => docker_socket = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let need = |v: Option<String>, f: &str| v.ok_or(format!("{f} is required"));
    Ok(Args {
        namespace: need(namespace, "--namespace")?,
        lease: need(lease, "--lease")?,
        secret: need(secret, "--secret")?,
        pod: need(pod, "--pod")?,
        stale,
        docker_socket,
    })
}

/// `10s`, `500ms`, or whole seconds (`10`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s}: a duration like 10s or 500ms");
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().map(Duration::from_millis).map_err(|_| bad());
    }
    s.strip_suffix('s')
        .unwrap_or(s)
        .parse()
        .map(Duration::from_secs)
        .map_err(|_| bad())
}

/// What `FENCECHECK_REAPER_SERVER` says where the API server is: a URL, or
/// [`IN_CLUSTER`] for the address every pod is given, the `kubernetes` Service's
/// (`KUBERNETES_SERVICE_HOST`/`_PORT`, which kubelet sets in each container), as
/// client-go's in-cluster configuration has it: no cluster DNS needed, and the
/// certificate checked for that address (kubeadm's, k3s's and the clouds' API
/// servers list their Service's address; the local cluster's does too).
fn server(given: &str, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    if given != IN_CLUSTER {
        return Ok(given.trim_end_matches('/').to_string());
    }
    let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty());
    let port = env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty());
    match (host, port) {
        (Some(h), Some(p)) => {
            let h = if h.contains(':') { format!("[{h}]") } else { h };
            Ok(format!("https://{h}:{p}"))
        }
        _ => Err(
            "FENCECHECK_REAPER_SERVER is \"in-cluster\" but KUBERNETES_SERVICE_HOST and \
                  KUBERNETES_SERVICE_PORT are not both set: the cluster has no `kubernetes` \
                  Service in namespace default, or kubelet did not see it"
                .into(),
        ),
    }
}

/// `FENCECHECK_REAPER_SERVER`'s value for "the `kubernetes` Service's address".
pub const IN_CLUSTER: &str = "in-cluster";

/// The API server, as the reaper's token reaches it.
struct Api {
    agent: ureq::Agent,
    server: String,
    auth: String,
}

/// A call's answer: the status and the body as JSON (Null when it is not JSON).
type Answer = Result<(u16, Value), String>;

impl Api {
    fn from_env() -> Result<Api, String> {
        let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
        let server = server(&var("FENCECHECK_REAPER_SERVER")?, |k| std::env::var(k).ok())?;
        let token = var("FENCECHECK_REAPER_TOKEN")?;
        let ca = var("FENCECHECK_REAPER_CA")?;
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(ca.as_bytes()) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => roots.push(c),
                Ok(_) => {}
                Err(e) => return Err(format!("FENCECHECK_REAPER_CA: {e}")),
            }
        }
        if roots.is_empty() {
            return Err("FENCECHECK_REAPER_CA holds no PEM certificate".into());
        }
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(CALL))
            .build()
            .new_agent();
        Ok(Api {
            agent,
            server: server.trim_end_matches('/').to_string(),
            auth: format!("Bearer {}", token.trim()),
        })
    }

    fn answer(what: String, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut resp = r.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| format!("{what}: {e}"))?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    fn get(&self, path: &str) -> Answer {
        let r = self
            .agent
            .get(format!("{}{path}", self.server))
            .header("Authorization", &self.auth)
            .header("Accept", "application/json")
            .call();
        Api::answer(format!("GET {path}"), r)
    }

    fn delete(&self, path: &str) -> Answer {
        let r = self
            .agent
            .delete(format!("{}{path}", self.server))
            .header("Authorization", &self.auth)
            .header("Accept", "application/json")
            .call();
        Api::answer(format!("DELETE {path}"), r)
    }

    fn put(&self, path: &str, body: &Value) -> Answer {
        let r = self
            .agent
            .put(format!("{}{path}", self.server))
            .header("Authorization", &self.auth)
            .header("Accept", "application/json")
            .header("Content-Type", "application/json")
            .send(body.to_string());
        Api::answer(format!("PUT {path}"), r)
    }
}

/// The API's own message of a failed call, for the log.
fn message(status: u16, body: &Value) -> String {
    match body["message"].as_str() {
        Some(m) => format!("{status} {m}"),
        None => status.to_string(),
    }
}

/// Logs a deletion's outcome; `true` when the object is gone or going (2xx, 404).
fn deleted(what: &str, a: Answer) -> bool {
    match a {
        Ok((200..=299, _)) => {
            println!("deleted {what}");
            true
        }
        Ok((404, _)) => {
            println!("{what}: already gone");
            true
        }
        Ok((s, b)) => {
            println!("deleting {what} failed: {}", message(s, &b));
            false
        }
        Err(e) => {
            println!("deleting {what} failed: {e}");
            false
        }
    }
}

pub fn main(args: impl Iterator<Item = String>) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fencecheck-reaper kube: {e}");
            return 2;
        }
    };
    let api = match Api::from_env() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fencecheck-reaper kube: {e}");
            return 2;
        }
    };
    let ns = &args.namespace;
    println!(
        "watching lease {ns}/{} at {} (stale after {:?} unchanged by this pod's clock)",
        args.lease, api.server, args.stale
    );
    let reaped = match watch(&api, &args) {
        Gone::Cleaned => {
            println!("namespace {ns} is gone: the harness cleaned up");
            true
        }
        Gone::Stale(for_) => {
            println!("lease unchanged for {for_:?}: the harness is gone; reaping namespace {ns}");
            reap(&api, ns, &args.lease)
        }
    };
    deleted(
        &format!("secret {HOME}/{}", args.secret),
        api.delete(&format!(
            "/api/v1/namespaces/{HOME}/secrets/{}",
            args.secret
        )),
    );
    if !reaped {
        println!(
            "giving up: namespace {ns} is not gone after {REAP_DEADLINE:?}; \
             keeping this pod for its log"
        );
        return 1;
    }
    let docker = args
        .docker_socket
        .as_deref()
        .map(crate::docker::Docker::new);
    if let Some(d) = &docker {
        // The run's pods are gone from the API; their stopped containers are not,
        // until kubelet's garbage collection (a minute).
        let needle = format!("_{ns}_");
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            match d.remove_named(&needle, None) {
                Ok(r) if r.is_empty() => break,
                Ok(r) => println!("removed containers {}", r.join(", ")),
                Err(e) => println!("{e}"),
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    println!("deleting this pod {HOME}/{}; exiting", args.pod);
    // The last calls: kubelet kills this container once the pod is deleted; with
    // the engine at hand, the pod's sandbox and then this very container are
    // removed at once instead of waiting for kubelet's garbage collection.
    deleted(
        &format!("pod {HOME}/{}", args.pod),
        api.delete(&format!(
            "/api/v1/namespaces/{HOME}/pods/{}?gracePeriodSeconds=0",
            args.pod
        )),
    );
    if let Some(d) = &docker {
        let mine = format!("_{}_{HOME}_", args.pod);
        let own = format!("k8s_reaper_{}_{HOME}_", args.pod);
        if let Err(e) = d.remove_named(&mine, Some(&own)) {
            println!("{e}");
        }
        // Removing this container ends this process: nothing may follow.
        if let Err(e) = d.remove_named(&own, None) {
            println!("{e}");
        }
    }
    0
}

enum Gone {
    /// The run's namespace does not exist: the harness deleted it.
    Cleaned,
    /// The Lease has not changed for this long.
    Stale(Duration),
}

/// Polls the Lease until the harness is gone, one way or the other.
///
/// The staleness clock runs only while the API server answers: after failed reads
/// the window restarts at the next good one, since a harness cannot renew through
/// an API server that does not answer either, and renewals nobody could see are
/// no evidence of death.
fn watch(api: &Api, a: &Args) -> Gone {
    let lease_path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
        a.namespace, a.lease
    );
    let mut last: Option<(String, String)> = None;
    let mut changed_at = Instant::now();
    let mut failing = false;
    loop {
        let seen = match api.get(&lease_path) {
            Ok((200, l)) => Some(Some((
                l["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                l["spec"]["renewTime"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ))),
            Ok((404, _)) => match api.get(&format!("/api/v1/namespaces/{}", a.namespace)) {
                Ok((404, _)) => return Gone::Cleaned,
                // The namespace is there without the Lease (deleted by someone, or
                // the namespace is being deleted): nothing renews it.
                Ok((200, _)) => Some(None),
                Ok((s, b)) => {
                    println!("reading namespace {}: {}", a.namespace, message(s, &b));
                    None
                }
                Err(e) => {
                    println!("{e}");
                    None
                }
            },
            Ok((s, b)) => {
                println!("reading lease {lease_path}: {}", message(s, &b));
                None
            }
            Err(e) => {
                println!("{e}");
                None
            }
        };
        let now = Instant::now();
        match seen {
            None => failing = true,
            Some(v) => {
                if failing {
                    println!("the API server answers again: the staleness window restarts");
                    failing = false;
                    changed_at = now;
                }
                if let Some(v) = v {
                    if last.as_ref() != Some(&v) {
                        if last.is_none() {
                            println!("lease seen (resourceVersion {}, renewTime {})", v.0, v.1);
                        }
                        last = Some(v);
                        changed_at = now;
                    }
                }
            }
        }
        let unchanged = now - changed_at;
        if !failing && unchanged >= a.stale {
            return Gone::Stale(unchanged);
        }
        std::thread::sleep(POLL);
    }
}

/// Deletes the run's pods and namespace and waits until the namespace is gone;
/// `false` if it is still there at [`REAP_DEADLINE`].
fn reap(api: &Api, ns: &str, lease: &str) -> bool {
    let start = Instant::now();
    let ns_path = format!("/api/v1/namespaces/{ns}");
    delete_pods(api, ns);
    deleted(&format!("namespace {ns}"), api.delete(&ns_path));
    let mut finalized = false;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let n = match api.get(&ns_path) {
            Ok((404, _)) => {
                println!("namespace {ns} is gone after {:?}", start.elapsed());
                return true;
            }
            Ok((200, n)) => n,
            Ok((s, b)) => {
                println!("reading namespace {ns}: {}", message(s, &b));
                Value::Null
            }
            Err(e) => {
                println!("{e}");
                Value::Null
            }
        };
        if start.elapsed() >= REAP_DEADLINE {
            return false;
        }
        if n.is_null() || start.elapsed() < FINALIZE_AFTER {
            continue;
        }
        let pods = match api.get(&format!("/api/v1/namespaces/{ns}/pods")) {
            Ok((200, l)) => l["items"].as_array().map(Vec::len),
            _ => None,
        };
        match pods {
            Some(0) if !finalized => {
                if controller_at_work(&n) {
                    continue;
                }
                finalized = finalize(api, ns, lease, n);
            }
            Some(0) => {
                // Finalized: the namespace goes with one more delete.
                deleted(&format!("namespace {ns}"), api.delete(&ns_path));
            }
            Some(left) => {
                println!("namespace {ns} still has {left} pod(s)");
                delete_pods(api, ns);
            }
            None => println!("cannot list the pods of namespace {ns}"),
        }
    }
}

fn delete_pods(api: &Api, ns: &str) {
    deleted(
        &format!("every pod of namespace {ns} (grace 0)"),
        api.delete(&format!(
            "/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0"
        )),
    );
}

/// Whether a namespace controller has started on the namespace's deletion: it
/// reports its progress in the namespace's status conditions
/// (NamespaceContentRemaining, NamespaceDeletionContentFailure, …, since 1.16).
fn controller_at_work(n: &Value) -> bool {
    let at_work = n["status"]["conditions"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    if at_work {
        println!("a namespace controller is deleting the namespace's content: leaving it to it");
    }
    at_work
}

/// Removes the `kubernetes` finalizer of a Terminating namespace, so the API
/// server can delete it.
///
/// On a real cluster the namespace controller (in kube-controller-manager) does
/// this itself, once it has deleted everything in the namespace; the reaper never
/// gets here there ([`controller_at_work`]). The local cluster (`fencecheck
/// cluster up`) has no controller-manager, so a deleted namespace would stay
/// Terminating forever: the reaper does the controller's work for what the run
/// leaves in it — its pods (gone by now), its Leases, the namespace's service
/// accounts, Secrets, Roles and RoleBindings — then PUTs `spec.finalizers: []`
/// to the namespace's `finalize` subresource. Returns whether that PUT went
/// through.
fn finalize(api: &Api, ns: &str, lease: &str, mut n: Value) -> bool {
    println!("namespace {ns} is still Terminating with no pods and no namespace controller: finalizing it");
    deleted(
        &format!("lease {ns}/{lease}"),
        api.delete(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease}"
        )),
    );
    for (kind, path) in [
        ("leases", "/apis/coordination.k8s.io/v1"),
        ("serviceaccounts", "/api/v1"),
        ("configmaps", "/api/v1"),
        ("secrets", "/api/v1"),
        // The electors' Role and binding (`[lock] apiserver = "cluster"`).
        ("roles", "/apis/rbac.authorization.k8s.io/v1"),
        ("rolebindings", "/apis/rbac.authorization.k8s.io/v1"),
    ] {
        deleted(
            &format!("every {kind} object of namespace {ns}"),
            api.delete(&format!("{path}/namespaces/{ns}/{kind}")),
        );
    }
    n["spec"]["finalizers"] = json!([]);
    match api.put(&format!("/api/v1/namespaces/{ns}/finalize"), &n) {
        Ok((200..=299, _)) => {
            println!("finalized namespace {ns}");
            true
        }
        Ok((s, b)) => {
            println!("finalizing namespace {ns} failed: {}", message(s, &b));
            false
        }
        Err(e) => {
            println!("finalizing namespace {ns} failed: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_the_server_is_the_kubernetes_service_kubelet_names() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let svc = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        assert_eq!(server(IN_CLUSTER, svc).unwrap(), "https://10.0.0.1:443");
        let v6 = env(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        assert_eq!(server(IN_CLUSTER, v6).unwrap(), "https://[fd00::1]:443");
        // A URL is taken as it is, whatever the environment says.
        assert_eq!(
            server("https://127.0.0.1:6443/", svc).unwrap(),
            "https://127.0.0.1:6443"
        );
        let e = server(IN_CLUSTER, env(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")])).unwrap_err();
        assert!(e.contains("KUBERNETES_SERVICE_PORT"), "{e}");
    }

    fn args(s: &str) -> Result<Args, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn the_flags_parse_with_stale_defaulting_to_ten_seconds() {
        let a = args("--namespace fencecheck-fc1 --lease l --secret s --pod p").unwrap();
        assert_eq!(
            (a.namespace.as_str(), a.lease.as_str(), a.secret.as_str()),
            ("fencecheck-fc1", "l", "s")
        );
        assert_eq!(a.pod, "p");
        assert_eq!(a.stale, Duration::from_secs(10));
        let a = args("--namespace n --lease l --secret s --pod p --stale 3s").unwrap();
        assert_eq!(a.stale, Duration::from_secs(3));
    }

    #[test]
    fn a_missing_flag_or_a_bad_duration_is_refused() {
        assert!(args("--namespace n --lease l --secret s")
            .unwrap_err()
            .contains("--pod"));
        assert!(args("--namespace n --lease l --secret s --pod p --stale soon").is_err());
        assert!(args("--namespace n --bogus x").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn a_namespace_with_deletion_conditions_has_a_controller_at_work() {
        assert!(!controller_at_work(
            &json!({"status": {"phase": "Terminating"}})
        ));
        assert!(controller_at_work(&json!({"status": {"conditions": [
            {"type": "NamespaceContentRemaining", "status": "False"}
        ]}})));
    }
}
