//! `cluster up`: etcd, then the apiserver, then kubelet, each waited for with a
//! deadline (and failed as soon as its process exits), the state saved after each.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::down::{remove_entry, stop_all};
use super::state::{self, Component, State};
use super::status::status_of;
use super::{api, certs, kubelet, process};
use super::{
    APISERVER_PORT, APISERVER_READY, ETCD_CLIENT_PORT, ETCD_PEER_PORT, ETCD_READY, KUBELET_PORTS,
    MEMBERS_SCENARIO, NODE, NODE_READY,
};
use crate::systems::kubernetes::members::KubeDeploy;
use crate::systems::members::{Deploy, FilePlace, HostPort, PeerPlace, Placement};

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
            "{what} is not built here ({} missing): run ci/bootstrap.sh --system kubernetes (ci/kubernetes.sh \
             builds kubelet 1.20.2 and pause from Debian's kubernetes source package)",
            p.display()
        );
    }
    let deploy = tokio::task::block_in_place(|| KubeDeploy::find(say))?;
    for (port, what) in super::PORTS {
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            bail!(
                "port 127.0.0.1:{port} ({what}) is taken ({e}): another local cluster is up \
                 (`fencecheck cluster status --dir …` finds it; the default directory is {}) or \
                 another program holds it",
                super::state::default_dir().display()
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
    // Ctrl-C while it starts stops what has started: the components run in
    // sessions of their own (they outlive `up` on purpose), so the terminal's
    // SIGINT never reaches them. `start` records each one in the state before
    // its next wait, so the state names everything running when it is dropped.
    let at = [etcd_at, api_at];
    let result = tokio::select! {
        r = start(&mut st, &specs, &at, &kubelet_bin, say) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (Ctrl-C)")),
    };
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
    // It advertises 127.0.0.1, which an Endpoints object may not hold: the
    // `kubernetes` Service gets its Endpoints from whoever gives the cluster a
    // route to the API server that pods can take (`ci/second-node.sh`), not
    // from the API server's own reconciler, which would fight them.
    api_args.push("--endpoint-reconciler-type=none".into());
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
        how = exited(c.pid, dir) => bail!("{} exited while starting ({how})\n{}", c.name, log_tail(c)),
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
        how = exited(kubelet.pid, dir) => bail!("kubelet exited while starting ({how})\n{}", log_tail(kubelet)),
    }
}

/// Waits until the component has exited; says how (its exit status or the
/// signal that ended it), which its log alone cannot: a kubelet killed at
/// start leaves an empty log.
async fn exited(pid: u32, dir: &Path) -> String {
    loop {
        if let Some(how) = process::reap(pid) {
            return how;
        }
        if !process::alive(pid, dir) {
            return "gone; its exit status was not ours to read".into();
        }
        // The poll's interval, not a wait for the exit.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The end of a component's log: its stdout and stderr both go there.
fn log_tail(c: &Component) -> String {
    let tail = process::tail(&c.log, 15);
    if tail.trim().is_empty() {
        format!(
            "it printed nothing on stdout or stderr ({} is empty)",
            c.log.display()
        )
    } else {
        format!(
            "last lines of {} (stdout and stderr):\n{tail}",
            c.log.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ETCD_CLIENT_PORT;

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
