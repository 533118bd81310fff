//! `fencecheck cluster up|down|status`: a local single-node Kubernetes cluster for
//! fencecheck's own tests and for users without a cluster — etcd 3.4, kube-apiserver
//! 1.20.2 (the same member specs as the `kubernetes` lock system) and kubelet
//! 1.20.2 with dockershim on this machine's Docker engine, all built or provisioned
//! by `ci/bootstrap.sh`. No scheduler and no controller-manager: a pod names its
//! node (`nodeName`), and `up` creates the one object a controller would have (the
//! `default` service account).
//!
//! The processes are detached and outlive `up`; [`state`] keeps what `status` and
//! `down` need. [`process`] starts and stops them, [`api`] talks to the apiserver
//! (kube-rs, through the kubeconfig `up` writes), [`kubelet`] is kubelet's command
//! line, [`containers`] the pods' containers on the engine.

pub mod api;
pub mod certs;
pub mod containers;
pub mod kubelet;
pub mod process;
pub mod state;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::systems::kubernetes::members::KubeDeploy;
use crate::systems::members::{Deploy, FilePlace, HostPort, PeerPlace, Placement};
use state::{Component, State};

/// Fixed ports, high and unusual so they clash with nothing that usually runs (a
/// real kubelet's 10250, etcd's 2379): one local cluster per machine.
pub const ETCD_CLIENT_PORT: u16 = 32379;
pub const ETCD_PEER_PORT: u16 = 32380;
pub const APISERVER_PORT: u16 = 32443;
pub const KUBELET_PORTS: kubelet::Ports = kubelet::Ports {
    kubelet: 32250,
    kubelet_healthz: 32248,
};
/// The node's name (`--hostname-override`): what a pod's `nodeName` says. It is
/// also the node's Hostname address, which the apiserver dials for a pod's logs
/// (`--kubelet-preferred-address-types=Hostname`): `localhost` resolves from
/// /etc/hosts to the loopback kubelet listens on, with no DNS.
pub const NODE: &str = "localhost";

/// How long each component may take to serve. The node's is the longest: kubelet
/// starts dockershim, registers, then reports Ready after its first sync (25 s
/// measured on a 2-core machine).
const ETCD_READY: Duration = Duration::from_secs(30);
const APISERVER_READY: Duration = Duration::from_secs(60);
const NODE_READY: Duration = Duration::from_secs(120);
/// SIGTERM to SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// The lock system's scenario that the apiserver's member specs are made for:
/// Kubernetes over one etcd member (nothing else of it is read).
const MEMBERS_SCENARIO: &str = "name = \"local-cluster\"\n[lock]\nservice = \"kubernetes\"\n";

/// What `up` did.
pub enum Up {
    Started {
        kubeconfig: PathBuf,
        ready_after: Duration,
        lines: Vec<String>,
    },
    AlreadyUp {
        kubeconfig: PathBuf,
    },
}

/// `fencecheck cluster up`: starts etcd, kube-apiserver and kubelet in `dir`,
/// waits until the node is Ready, creates the `default` service account. Already
/// up: says so and starts nothing. Partly up (a component died): stopped first.
pub async fn up(dir: &Path, say: &dyn Fn(&str)) -> Result<Up> {
    // Created only once everything needed is there: a refused `up` leaves nothing.
    let dir = state::absolute(dir, false)?;
    if let Some(st) = State::load(&dir)? {
        let s = status_of(&st).await;
        if s.up {
            return Ok(Up::AlreadyUp {
                kubeconfig: st.kubeconfig,
            });
        }
        say(&format!(
            "a cluster state in {} is not fully up ({}): stopping what is left of it first",
            dir.display(),
            s.summary()
        ));
        stop_all(&st, say).await?;
    }
    let started = Instant::now();
    // Binaries first: nothing starts unless all of it can.
    let kubelet_bin = kubelet::kubelet_path();
    let pause_bin = kubelet::pause_path();
    for (what, p) in [("kubelet", &kubelet_bin), ("the pause binary", &pause_bin)] {
        anyhow::ensure!(
            p.is_file(),
            "{what} is not built here ({} missing): run ci/bootstrap.sh (ci/kubernetes.sh \
             builds kubelet 1.20.2 and pause from Debian's kubernetes source package)",
            p.display()
        );
    }
    let deploy = tokio::task::block_in_place(|| KubeDeploy::find(say))?;
    for (port, what) in [
        (ETCD_CLIENT_PORT, "etcd client"),
        (ETCD_PEER_PORT, "etcd peer"),
        (APISERVER_PORT, "kube-apiserver"),
        (KUBELET_PORTS.kubelet, "kubelet"),
        (KUBELET_PORTS.kubelet_healthz, "kubelet healthz"),
    ] {
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            bail!(
                "port 127.0.0.1:{port} ({what}) is taken ({e}): another local cluster is up \
                 (`fencecheck cluster status --dir …` finds it) or another program holds it"
            );
        }
    }
    let engine = crate::backend::docker::engine(crate::backend::docker::ENGINE_TIMEOUT)
        .await
        .context("no Docker engine answers: kubelet runs the pods on it")?;
    let pause = crate::images::pause_image(&engine.docker, &pause_bin, say).await?;

    // Resolved again now that it exists: the path every command line names.
    let dir = state::absolute(&dir, true)?;
    // A fresh cluster: the data of an earlier one (its node, its objects, made
    // with another CA and token) is not kept.
    for e in state::ENTRIES {
        remove_entry(&dir.join(e))?;
    }
    for d in ["etcd", "apiserver/conf", "kubelet", "logs"] {
        let p = dir.join(d);
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
    }
    let (etcd_at, api_at) = placements(&dir);
    let scenario = crate::scenario::Scenario::parse(MEMBERS_SCENARIO, "local-cluster")
        .context("the local cluster's scenario")?;
    let specs = deploy.members(&scenario, &[etcd_at.clone(), api_at.clone()])?;
    let access = deploy.access();
    let server = format!("https://{}", api_at.client);
    let kubeconfig = dir.join("kubeconfig");
    let mut st = State {
        dir: dir.clone(),
        etcd: None,
        apiserver: None,
        kubelet: None,
        server: server.clone(),
        token: access.token.clone(),
        ca_pem: access.ca_pem.clone(),
        node: NODE.into(),
        pause_image: pause.tag.clone(),
        kubeconfig: kubeconfig.clone(),
    };
    st.save()?;
    let result = start(&mut st, &specs, &[etcd_at, api_at], &kubelet_bin, say).await;
    match result {
        Ok(lines) => Ok(Up::Started {
            kubeconfig,
            ready_after: started.elapsed(),
            lines,
        }),
        Err(e) => {
            // Nothing left running; the logs stay for the error's reader.
            if let Err(stop) = stop_all(&st, say).await {
                say(&format!("stopping after the failed start: {stop:#}"));
            }
            Err(e.context(format!(
                "the local cluster did not come up (logs in {}; `fencecheck cluster down \
                 --dir {}` removes them)",
                dir.join("logs").display(),
                dir.display()
            )))
        }
    }
}

fn placements(dir: &Path) -> (Placement, Placement) {
    let lo = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let etcd = Placement {
        index: 0,
        client_bind: lo(ETCD_CLIENT_PORT),
        client: lo(ETCD_CLIENT_PORT),
        peers: vec![PeerPlace {
            bind: lo(ETCD_PEER_PORT),
            advertise: HostPort::from(lo(ETCD_PEER_PORT)),
        }],
        data_dir: dir.join("etcd").display().to_string(),
        config_dir: dir.join("etcd").display().to_string(),
        cluster_token: "fencecheck-local-cluster".into(),
    };
    let api = Placement {
        index: 1,
        client_bind: lo(APISERVER_PORT),
        client: lo(APISERVER_PORT),
        peers: Vec::new(),
        data_dir: dir.join("apiserver").display().to_string(),
        config_dir: dir.join("apiserver/conf").display().to_string(),
        cluster_token: "fencecheck-local-cluster".into(),
    };
    (etcd, api)
}

/// Starts etcd, the apiserver, kubelet, each once the one before serves; the
/// state is saved after each start.
async fn start(
    st: &mut State,
    specs: &[crate::systems::members::MemberSpec],
    at: &[Placement],
    kubelet_bin: &Path,
    say: &dyn Fn(&str),
) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let [etcd, api] = specs else {
        bail!(
            "expected an etcd member and the apiserver, got {} specs",
            specs.len()
        );
    };
    for (spec, p) in [etcd, api].into_iter().zip(at) {
        for f in &spec.files {
            let d = match f.place {
                FilePlace::Config => &p.config_dir,
                FilePlace::Data => &p.data_dir,
            };
            let path = Path::new(d).join(&f.name);
            std::fs::write(&path, &f.contents)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    // The apiserver's calls to kubelet (logs, exec), authenticated both ways.
    let certs = certs::KubeletClientCerts::generate()?;
    let conf = Path::new(&at[1].config_dir);
    let mut api_args = api.args.clone();
    for (name, contents, flag) in [
        (
            "kubelet-client.crt",
            &certs.cert_pem,
            "kubelet-client-certificate",
        ),
        ("kubelet-client.key", &certs.key_pem, "kubelet-client-key"),
    ] {
        let path = conf.join(name);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
        api_args.push(format!("--{flag}={}", path.display()));
    }
    api_args.push("--kubelet-preferred-address-types=Hostname".into());
    let ca = st.dir.join("kubelet").join(kubelet::CLIENT_CA);
    std::fs::write(&ca, &certs.ca_pem).with_context(|| format!("cannot write {}", ca.display()))?;

    let t = Instant::now();
    let c = launch(
        st,
        "etcd",
        &etcd.program,
        &etcd.args,
        &etcd.env,
        at[0].client,
    )?;
    st.etcd = Some(c.clone());
    st.save()?;
    ready(&c, &st.dir, ETCD_READY, say).await?;
    lines.push(format!(
        "etcd {} ready in {:.1} s",
        c.address,
        t.elapsed().as_secs_f64()
    ));

    let t = Instant::now();
    let c = launch(
        st,
        "kube-apiserver",
        &api.program,
        &api_args,
        &api.env,
        at[1].client,
    )?;
    st.apiserver = Some(c.clone());
    st.save()?;
    ready(&c, &st.dir, APISERVER_READY, say).await?;
    lines.push(format!(
        "kube-apiserver {} ready in {:.1} s",
        st.server,
        t.elapsed().as_secs_f64()
    ));

    let kc = api::kubeconfig(&st.server, &st.ca_pem, &st.token);
    std::fs::write(&st.kubeconfig, kc)
        .with_context(|| format!("cannot write {}", st.kubeconfig.display()))?;
    let t = Instant::now();
    let args = kubelet::args(
        &st.dir,
        &st.kubeconfig,
        &st.pause_image,
        NODE,
        KUBELET_PORTS,
    );
    let address = SocketAddr::from(([127, 0, 0, 1], KUBELET_PORTS.kubelet));
    let c = launch(st, "kubelet", kubelet_bin, &args, &[], address)?;
    st.kubelet = Some(c.clone());
    st.save()?;
    let client = api::client(&st.kubeconfig).await?;
    node_ready(&client, &c, &st.dir, say).await?;
    lines.push(format!(
        "node {NODE} Ready in {:.1} s (kubelet {})",
        t.elapsed().as_secs_f64(),
        c.address
    ));
    if api::ensure_default_service_account(&client).await? {
        lines.push("created serviceaccount default/default".into());
    }
    Ok(lines)
}

fn launch(
    st: &State,
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    address: SocketAddr,
) -> Result<Component> {
    let log = st.dir.join("logs").join(format!("{name}.log"));
    let pid = process::spawn(name, program, args, env, &log)?;
    Ok(Component {
        name: name.into(),
        pid,
        address: address.to_string(),
        log,
    })
}

/// Waits until `c` serves (etcd's `/health`, the apiserver's `/readyz`), or fails
/// as soon as it exits, with the end of its log.
async fn ready(c: &Component, dir: &Path, deadline: Duration, say: &dyn Fn(&str)) -> Result<()> {
    say(&format!(
        "waiting for {} (pid {}, {})",
        c.name, c.pid, c.address
    ));
    let addr: SocketAddr = c.address.parse().context("component address")?;
    let probe = crate::systems::kubernetes::service::wait_ready(&c.name, addr, deadline);
    tokio::select! {
        r = probe => r.map_err(|e| e.context(log_tail(c))),
        _ = exited(c.pid, dir) => bail!("{} exited while starting\n{}", c.name, log_tail(c)),
    }
}

/// Polls the node's Ready condition until True, with a deadline; fails as soon
/// as kubelet exits.
async fn node_ready(
    client: &kube::Client,
    kubelet: &Component,
    dir: &Path,
    say: &dyn Fn(&str),
) -> Result<()> {
    say(&format!(
        "waiting for node {NODE} to be Ready (kubelet pid {})",
        kubelet.pid
    ));
    let poll = async {
        let until = Instant::now() + NODE_READY;
        let mut last;
        loop {
            match api::node_ready(client, NODE).await {
                Ok(Some((s, _))) if s == "True" => return Ok(()),
                Ok(Some((s, why))) => last = format!("Ready={s} ({why})"),
                Ok(None) => last = "not registered yet".into(),
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= until {
                bail!("node {NODE} is not Ready after {NODE_READY:?}: {last}");
            }
            // The poll's interval, not a wait for readiness.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        r = poll => r.map_err(|e| e.context(log_tail(kubelet))),
        _ = exited(kubelet.pid, dir) => bail!("kubelet exited while starting\n{}", log_tail(kubelet)),
    }
}

async fn exited(pid: u32, dir: &Path) {
    while process::alive(pid, dir) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn log_tail(c: &Component) -> String {
    format!(
        "last lines of {}:\n{}",
        c.log.display(),
        process::tail(&c.log, 15)
    )
}

/// What `status` found.
pub struct Status {
    /// Every component running and the node Ready.
    pub up: bool,
    pub lines: Vec<String>,
}

impl Status {
    fn summary(&self) -> String {
        // The three components' lines (the node's and the kubeconfig's follow).
        self.lines
            .iter()
            .take(3)
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `fencecheck cluster status`.
pub async fn status(dir: &Path) -> Result<Status> {
    let dir = state::absolute(dir, false)?;
    match State::load(&dir)? {
        Some(st) => Ok(status_of(&st).await),
        None => Ok(Status {
            up: false,
            lines: vec![format!("cluster down (no state in {})", dir.display())],
        }),
    }
}

async fn status_of(st: &State) -> Status {
    let mut lines = Vec::new();
    let mut up = true;
    for (name, c) in [
        ("etcd", &st.etcd),
        ("kube-apiserver", &st.apiserver),
        ("kubelet", &st.kubelet),
    ] {
        match c {
            Some(c) if process::alive(c.pid, &st.dir) => {
                lines.push(format!("{name:<15} up    pid {} {}", c.pid, c.address))
            }
            Some(c) => {
                up = false;
                lines.push(format!(
                    "{name:<15} down  (pid {} is gone; log {})",
                    c.pid,
                    c.log.display()
                ))
            }
            None => {
                up = false;
                lines.push(format!("{name:<15} down  (not started)"))
            }
        }
    }
    let api_alive = st
        .apiserver
        .as_ref()
        .is_some_and(|c| process::alive(c.pid, &st.dir));
    let node = if api_alive {
        match api::client(&st.kubeconfig).await {
            Ok(client) => match api::node_ready(&client, &st.node).await {
                Ok(Some((s, why))) => {
                    up &= s == "True";
                    format!("Ready={s} ({why})")
                }
                Ok(None) => {
                    up = false;
                    "not registered".into()
                }
                Err(e) => {
                    up = false;
                    format!("unknown ({e:#})")
                }
            },
            Err(e) => {
                up = false;
                format!("unknown ({e:#})")
            }
        }
    } else {
        up = false;
        "unknown (the apiserver is down)".into()
    };
    lines.push(format!("{:<15} {}    {node}", "node", st.node));
    lines.push(format!("{:<15} {}", "kubeconfig", st.kubeconfig.display()));
    Status { up, lines }
}

/// Stops kubelet, removes its pods' containers (and their logs), stops the
/// apiserver and etcd; an error on the way does not stop the rest.
async fn stop_all(st: &State, say: &dyn Fn(&str)) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let stop = |c: &Option<Component>| {
        let c = c.clone();
        async move {
            match c {
                Some(c) => match process::stop(c.pid, &st.dir, GRACE).await {
                    Ok(process::Stopped::WasNot) => {
                        Ok(Some(format!("{} (pid {}) was not running", c.name, c.pid)))
                    }
                    Ok(how) => Ok(Some(format!(
                        "stopped {} (pid {}{})",
                        c.name,
                        c.pid,
                        if how == process::Stopped::Killed {
                            ", SIGKILL after 10 s"
                        } else {
                            ""
                        }
                    ))),
                    Err(e) => Err(format!("{} (pid {}): {e:#}", c.name, c.pid)),
                },
                None => Ok(None),
            }
        }
    };
    // kubelet first: once it is gone nothing restarts a container removed below.
    match stop(&st.kubelet).await {
        Ok(l) => lines.extend(l),
        Err(e) => errors.push(e),
    }
    match crate::backend::docker::engine(crate::backend::docker::ENGINE_TIMEOUT).await {
        Ok(e) => match containers::remove_all(&e.docker).await {
            Ok((names, pods)) => {
                if !names.is_empty() {
                    lines.push(format!(
                        "removed {} container(s): {}",
                        names.len(),
                        names.join(" ")
                    ));
                }
                match containers::remove_pod_logs(&pods) {
                    Ok(dirs) if !dirs.is_empty() => {
                        lines.push(format!("removed pod logs {}", dirs.join(" ")))
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(format!("pod logs: {e:#}")),
                }
            }
            Err(e) => errors.push(format!("{e:#}")),
        },
        // Started without an engine there can be no pod; with one that has gone
        // away, the containers cannot be checked: say so.
        Err(e) if st.kubelet.is_some() => errors.push(format!(
            "cannot check for {}* containers: {e:#}",
            containers::PREFIX
        )),
        Err(_) => {}
    }
    for c in [&st.apiserver, &st.etcd] {
        match stop(c).await {
            Ok(l) => lines.extend(l),
            Err(e) => errors.push(e),
        }
    }
    unmount_under(&st.dir, &mut lines, &mut errors);
    for l in &lines {
        say(l);
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(lines)
}

/// Unmounts whatever kubelet left mounted under `dir` (a pod's volumes), deepest
/// first, so removing the directory cannot reach into a mount.
fn unmount_under(dir: &Path, lines: &mut Vec<String>, errors: &mut Vec<String>) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|p| p.starts_with(&prefix))
        .map(str::to_string)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let Ok(c) = std::ffi::CString::new(p.clone()) else {
            continue;
        };
        // SAFETY: a plain system call on a NUL-terminated path we own.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            lines.push(format!("unmounted {p}"));
        } else {
            errors.push(format!("umount {p}: {}", std::io::Error::last_os_error()));
        }
    }
}

fn remove_entry(p: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    r.with_context(|| format!("cannot remove {}", p.display()))
}

/// `fencecheck cluster down`: stops everything `up` started in `dir`, removes the
/// pods' containers and the state. Nothing there: says so.
pub async fn down(dir: &Path, say: &dyn Fn(&str)) -> Result<Vec<String>> {
    let dir = state::absolute(dir, false)?;
    let mut lines = match State::load(&dir)? {
        Some(st) => stop_all(&st, say).await?,
        None => vec![format!(
            "no cluster state in {}: nothing to stop",
            dir.display()
        )],
    };
    for e in state::ENTRIES {
        remove_entry(&dir.join(e))?;
    }
    // The directory itself only when nothing else is in it (a `--dir` may be shared).
    if std::fs::remove_dir(&dir).is_ok() {
        lines.push(format!("removed {}", dir.display()));
    } else if dir.exists() {
        lines.push(format!(
            "removed the cluster's files from {}",
            dir.display()
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_members_scenario_parses_and_makes_etcd_then_the_apiserver() {
        let s =
            crate::scenario::Scenario::parse(MEMBERS_SCENARIO, "local-cluster").expect("parses");
        assert_eq!(s.lock.service, crate::scenario::ServiceKind::Kubernetes);
        let (etcd, api) = placements(Path::new("/s"));
        assert_eq!(etcd.client.port(), ETCD_CLIENT_PORT);
        assert_eq!(
            api.config_file("k8s-ca.crt"),
            "/s/apiserver/conf/k8s-ca.crt"
        );
    }
}
