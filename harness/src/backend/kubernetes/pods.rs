//! One pod per member and one for the storage: the program under fencecheck's
//! in-pod agent (`agent/`, the container's entry point), on the host's network of
//! the harness's node, with the run directory mounted at its own path — so a
//! member spec placed as on the process backend (loopback addresses, data and
//! config files in the run directory) runs unchanged, and the storage writes
//! `storage.jsonl` straight into the run directory. The agent stops, continues,
//! kills and restarts the program on the harness's command (exec through the API
//! server) and reads the effect back from `/proc`; the pod's output is streamed
//! into the run directory as it comes.
//!
//! On a node that is not the harness's machine (`connect::Remote`) the run
//! directory is not there: each pod gets an empty directory at the run
//! directory's path instead, the member's files come in a ConfigMap that the
//! agent puts in place before the program starts (`files_config_map`), and
//! what the harness needs back from it (the storage's journal) is followed
//! into the run directory through exec (`follow_file`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::AsyncReadExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, HostPathVolumeSource,
    LocalObjectReference, Pod, PodSecurityContext, PodSpec, SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, LogParams, PostParams};

use super::{ROLE_LABEL, RUN_LABEL};

/// The container's name in every pod of the run.
pub const CONTAINER: &str = "main";
/// The agent in every image of this backend.
pub const AGENT: &str = "/fencecheck-agent";
/// Where the agent's socket is: a directory every user may write (the pods run as
/// the harness's user, and `/` of a FROM scratch image is root's).
const AGENT_SOCKET: &str = "/tmp/fencecheck-agent.sock";
const TMP_VOLUME: &str = "tmp";
const RUN_VOLUME: &str = "run";
const FILES_VOLUME: &str = "files";
/// Where a pod's ConfigMap of files is mounted (the agent's `$FENCECHECK_AGENT_FILES`).
const FILES_DIR: &str = "/fencecheck-files";
/// How long a pod may take to have its container running.
const RUNNING_DEADLINE: Duration = Duration::from_secs(60);

/// What one pod runs.
pub struct PodSpecIn<'a> {
    pub name: String,
    pub run_id: &'a str,
    pub role: &'a str,
    pub node: &'a str,
    pub image: &'a str,
    /// The program and its arguments, run under the agent.
    pub program: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Mounted at its own path: the node's directory, or on a node that is not
    /// this machine (`remote`) an empty one of the pod's.
    pub run_dir: &'a Path,
    pub remote: bool,
    /// The ConfigMap of files the agent puts in place before the start
    /// (`files_config_map`).
    pub files: Option<String>,
    /// The uid and gid it runs as; `None`: the harness's own (PostgreSQL refuses
    /// root, and its image's files are its user's).
    pub user: Option<(i64, i64)>,
    /// Files of the node mounted read-only at their own paths (the worker pods'
    /// fencecheck binary: the node is this machine).
    pub host_files: Vec<PathBuf>,
    /// The Secret the node pulls the image with (`registry::PULL_SECRET`, with a
    /// registry login), in the pod's namespace.
    pub pull_secret: Option<&'a str>,
    /// Environment variables taken from a Secret of the pod's namespace:
    /// (variable, Secret, key). Their values are not in the pod's spec.
    pub secret_env: Vec<(String, String, String)>,
}

/// `Never` for an image of this machine's engine (`fencecheck/…`: the node is
/// this machine and has it); `IfNotPresent` for its name in `[cluster] registry`
/// (`registry.rs`): the tags are content hashes, so a node pulls each one once.
pub fn pull_policy(image: &str) -> &'static str {
    if image.starts_with("fencecheck/") {
        "Never"
    } else {
        "IfNotPresent"
    }
}

/// The environment variable `var` taken from key `key` of Secret `secret` in
/// the pod's namespace: the pod's spec names the Secret, not the value.
pub fn from_secret(var: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn pod(p: &PodSpecIn) -> Pod {
    let mut command = vec![AGENT.to_string(), "run".into(), "--".into()];
    command.extend(p.program.iter().cloned());
    let mut env: Vec<EnvVar> = p
        .env
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..Default::default()
        })
        .collect();
    env.extend(
        p.secret_env
            .iter()
            .map(|(var, secret, key)| from_secret(var, secret, key)),
    );
    env.push(EnvVar {
        name: "FENCECHECK_AGENT_SOCKET".into(),
        value: Some(AGENT_SOCKET.into()),
        ..Default::default()
    });
    if p.files.is_some() {
        env.push(EnvVar {
            name: "FENCECHECK_AGENT_FILES".into(),
            value: Some(FILES_DIR.into()),
            ..Default::default()
        });
    }
    let run_dir = p.run_dir.display().to_string();
    let mut mounts = vec![
        VolumeMount {
            name: RUN_VOLUME.into(),
            mount_path: run_dir.clone(),
            ..Default::default()
        },
        VolumeMount {
            name: TMP_VOLUME.into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    ];
    let mut volumes = vec![
        match p.remote {
            false => Volume {
                name: RUN_VOLUME.into(),
                host_path: Some(HostPathVolumeSource {
                    path: run_dir,
                    type_: Some("Directory".into()),
                }),
                ..Default::default()
            },
            true => Volume {
                name: RUN_VOLUME.into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            },
        },
        Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        },
    ];
    if let Some(cm) = &p.files {
        mounts.push(VolumeMount {
            name: FILES_VOLUME.into(),
            mount_path: FILES_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: FILES_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    for (i, f) in p.host_files.iter().enumerate() {
        let name = format!("host-file-{i}");
        mounts.push(VolumeMount {
            name: name.clone(),
            mount_path: f.display().to_string(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name,
            host_path: Some(HostPathVolumeSource {
                path: f.display().to_string(),
                type_: Some("File".into()),
            }),
            ..Default::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(p.name.clone()),
            labels: Some(BTreeMap::from([
                (RUN_LABEL.to_string(), p.run_id.to_string()),
                (ROLE_LABEL.to_string(), p.role.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(p.node.to_string()),
            host_network: Some(true),
            automount_service_account_token: Some(false),
            restart_policy: Some("Never".into()),
            // The files in the run directory are the harness user's.
            security_context: Some(PodSecurityContext {
                run_as_user: Some(
                    p.user
                        .map_or_else(|| i64::from(nix::unistd::getuid().as_raw()), |(u, _)| u),
                ),
                run_as_group: Some(
                    p.user
                        .map_or_else(|| i64::from(nix::unistd::getgid().as_raw()), |(_, g)| g),
                ),
                ..Default::default()
            }),
            termination_grace_period_seconds: Some(2),
            image_pull_secrets: p.pull_secret.map(|name| {
                vec![LocalObjectReference {
                    name: name.to_string(),
                }]
            }),
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(p.image.to_string()),
                image_pull_policy: Some(pull_policy(p.image).into()),
                command: Some(command),
                env: Some(env),
                volume_mounts: Some(mounts),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod's files as a ConfigMap named `name`, for the agent to put in place
/// before the program starts: `dirs` created (mode 0700), each `(path,
/// contents)` of `files` written. Its `manifest` says which is where.
pub fn files_config_map(
    name: &str,
    run_id: &str,
    dirs: &[String],
    files: &[(String, String)],
) -> ConfigMap {
    let mut manifest = String::new();
    let mut data = BTreeMap::new();
    for d in dirs {
        manifest.push_str(&format!("dir\t{d}\n"));
    }
    for (i, (path, contents)) in files.iter().enumerate() {
        let key = format!("f{i}");
        manifest.push_str(&format!("file\t{key}\t{path}\n"));
        data.insert(key, contents.clone());
    }
    data.insert("manifest".into(), manifest);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                RUN_LABEL.to_string(),
                run_id.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// Creates the pod (kubelet starts it on its own; [`running`] waits for it).
pub async fn create(pods: &Api<Pod>, pod: &Pod) -> Result<()> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), pod)
        .await
        .with_context(|| format!("create pod {name}"))?;
    Ok(())
}

/// Waits until the pod's container runs. A container that cannot start (an image
/// not on the node, a program that exits) fails at once with kubelet's reason.
pub async fn running(pods: &Api<Pod>, name: &str) -> Result<()> {
    let name = name.to_string();
    let t0 = Instant::now();
    loop {
        // Polled until the deadline: a loaded API server that times out one
        // read must not end the run (retry.rs).
        let left = RUNNING_DEADLINE.saturating_sub(t0.elapsed());
        let p = super::retry::call(&format!("get pod {name}"), left, || pods.get(&name))
            .await
            .with_context(|| format!("get pod {name}"))?;
        let st = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.clone());
        if let Some(st) = st {
            if st.running.is_some() {
                return Ok(());
            }
            if let Some(t) = st.terminated {
                // Its last words, in the error itself: the run directory the
                // error points to may be a test's temporary one, gone by the
                // time anyone reads it.
                let last = pods
                    .logs(
                        &name,
                        &kube::api::LogParams {
                            tail_lines: Some(6),
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap_or_default();
                bail!(
                    "pod {name}: its container ended at once (exit {}{}){}",
                    t.exit_code,
                    t.message.map(|m| format!(": {m}")).unwrap_or_default(),
                    if last.trim().is_empty() {
                        String::new()
                    } else {
                        format!("; the end of its log:\n{}", last.trim_end())
                    }
                );
            }
            if let Some(w) = st.waiting {
                let reason = w.reason.unwrap_or_default();
                if matches!(
                    reason.as_str(),
                    "ErrImageNeverPull"
                        | "ErrImagePull"
                        | "ImagePullBackOff"
                        | "InvalidImageName"
                        | "CreateContainerError"
                        | "CreateContainerConfigError"
                        | "RunContainerError"
                ) {
                    bail!("pod {name}: {reason}: {}", w.message.unwrap_or_default());
                }
            }
        }
        if t0.elapsed() > RUNNING_DEADLINE {
            bail!("pod {name}: its container did not run within {RUNNING_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Has the pod's container ended (the program under the agent exited on its own,
/// and the agent with it)?
pub async fn ended(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get(name).await.ok()?;
    let t = p
        .status?
        .container_statuses?
        .into_iter()
        .next()?
        .state?
        .terminated?;
    Some(format!("exit {}", t.exit_code))
}

/// The agent's answer to one command: `{"pid":12,"state":"T"}`,
/// `{"running":false}`, or `{"error":"..."}` (an error here).
pub async fn agent(pods: &Api<Pod>, pod: &str, cmd: &str) -> Result<serde_json::Value> {
    let out = crate::cluster::exec::exec(pods, pod, CONTAINER, &[AGENT, "ctl", cmd]).await?;
    let answer: serde_json::Value = serde_json::from_str(out.stdout.trim()).with_context(|| {
        format!(
            "pod {pod}: the agent's answer to {cmd:?} is not JSON: {:?} {:?}",
            out.stdout, out.stderr
        )
    })?;
    if out.code != 0 {
        bail!(
            "pod {pod}: the agent refused {cmd:?}: {}",
            answer
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or(out.stderr.trim())
        );
    }
    Ok(answer)
}

/// Streams the pod's output into `log` (appended, flushed as it comes) until
/// the container ends or the pod is deleted.
pub fn stream_log(
    client: kube::Client,
    ns: String,
    pod: String,
    log: PathBuf,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let lp = LogParams {
            follow: true,
            container: Some(CONTAINER.into()),
            ..Default::default()
        };
        let mut file = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("cannot open {}: {e}", log.display());
                return;
            }
        };
        let mut stream = match pods.log_stream(&pod, &lp).await {
            Ok(s) => Box::pin(s),
            Err(e) => {
                let _ = writeln!(file, "[fencecheck: no log stream of pod {pod}: {e}]");
                return;
            }
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    if file.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    let _ = file.flush();
                }
                Err(e) => {
                    let _ = writeln!(file, "[fencecheck: the log stream of pod {pod} broke: {e}]");
                    break;
                }
            }
        }
    })
}

/// Follows `path` in the pod's container (the agent's `follow`, exec through
/// the API server) into `local`, line by line, appended and flushed as each
/// line comes whole. A stream that breaks is opened again after the last whole
/// line. `finish` ends it with every byte the file has by then (a last line
/// cut short too: nothing is dropped). With `shift`, each line's `time_ns` (a
/// JSON line's) has it added: a journal stamped with a node's monotonic clock,
/// put in this machine's (`clock_offset`).
pub fn follow_file(
    client: kube::Client,
    ns: String,
    pod: String,
    path: String,
    local: PathBuf,
    shift: Option<i64>,
) -> Follow {
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let task = tokio::spawn(async move {
        let mut file = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&local)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("cannot open {}: {e}", local.display());
                return;
            }
        };
        // Bytes of whole lines written here; what follows them, not yet whole.
        let mut done: u64 = 0;
        let mut pending: Vec<u8> = Vec::new();
        let mut last = false;
        loop {
            pending.clear();
            let at = done.to_string();
            let mut cmd = vec![AGENT, "follow", path.as_str(), at.as_str()];
            if last {
                cmd.push("--once");
            }
            let ap = kube::api::AttachParams::default()
                .container(CONTAINER)
                .stdin(false)
                .stdout(true)
                .stderr(false);
            let copied = async {
                let mut p = pods.exec(&pod, cmd.iter().copied(), &ap).await?;
                let mut out = p.stdout().context("exec: no stdout stream")?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = tokio::io::AsyncReadExt::read(&mut out, &mut buf).await?;
                    if n == 0 {
                        return Ok::<_, anyhow::Error>(());
                    }
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        file.write_all(&shifted(&line, shift))?;
                        done += line.len() as u64;
                    }
                    file.flush()?;
                }
            };
            if last {
                if let Err(e) = copied.await {
                    tracing::warn!("the last of {path} in pod {pod}: {e:#}");
                }
                // A last line cut short (its writer killed), as it is.
                if !pending.is_empty() {
                    let _ = file.write_all(&pending);
                    let _ = file.flush();
                }
                return;
            }
            tokio::select! {
                r = copied => {
                    if let Err(e) = r {
                        tracing::debug!("following {path} in pod {pod}: {e:#}; again from byte {done}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ = &mut rx => last = true,
            }
        }
    });
    Follow { task, finish: tx }
}

/// `line` (ending in its newline) with `shift` added to its `time_ns`; as it
/// is when there is no shift or it is not a JSON object with one.
fn shifted(line: &[u8], shift: Option<i64>) -> std::borrow::Cow<'_, [u8]> {
    let Some(by) = shift.filter(|&b| b != 0) else {
        return line.into();
    };
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(line) else {
        return line.into();
    };
    let Some(t) = v.get("time_ns").and_then(serde_json::Value::as_u64) else {
        return line.into();
    };
    v["time_ns"] = t.saturating_add_signed(by).into();
    match serde_json::to_vec(&v) {
        Ok(mut out) => {
            out.push(b'\n');
            out.into()
        }
        Err(_) => line.into(),
    }
}

/// A file followed out of a pod (`follow_file`).
pub struct Follow {
    task: tokio::task::JoinHandle<()>,
    finish: tokio::sync::oneshot::Sender<()>,
}

impl Follow {
    /// The file's bytes up to now, then the end (at most `within`).
    pub async fn finish(self, within: Duration) {
        let _ = self.finish.send(());
        let abort = self.task.abort_handle();
        if tokio::time::timeout(within, self.task).await.is_err() {
            abort.abort();
        }
    }
}

/// How many times `clock_offset` asks the node's clock.
const CLOCK_SAMPLES: usize = 16;
/// How long `clock_offset` may take in all.
const CLOCK_DEADLINE: Duration = Duration::from_secs(20);

/// The node's monotonic clock against this machine's, as NTP measures it: the
/// agent's `clock` in `pod`, asked [`CLOCK_SAMPLES`] times through one exec;
/// from the answer with the shortest round trip, the offset (this machine's
/// clock minus the node's, at the middle of that round trip, ns) and its
/// uncertainty (half that round trip). A node's `CLOCK_MONOTONIC` counts from
/// its own boot: a worker there adds the offset to its clock, so its events
/// compare with the harness's.
pub async fn clock_offset(pods: &Api<Pod>, pod: &str) -> Result<(i64, u64)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let ask = async {
        let ap = kube::api::AttachParams::default()
            .container(CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(false);
        let mut p = pods
            .exec(pod, [AGENT, "clock"], &ap)
            .await
            .with_context(|| format!("exec {AGENT} clock in pod {pod}"))?;
        let mut stdin = p.stdin().context("exec: no stdin stream")?;
        let mut lines =
            tokio::io::BufReader::new(p.stdout().context("exec: no stdout stream")?).lines();
        let now = fencecheck_storage::raw_monotonic_ns;
        // (round trip, offset) of the best sample.
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..CLOCK_SAMPLES {
            let t0 = now();
            stdin
                .write_all(b"?\n")
                .await
                .context("asking the node's clock")?;
            stdin.flush().await.context("asking the node's clock")?;
            let line = lines
                .next_line()
                .await
                .context("reading the node's clock")?
                .context("the agent's clock ended")?;
            let t1 = now();
            let theirs: u64 = line
                .trim()
                .parse()
                .with_context(|| format!("the agent's clock said {line:?}"))?;
            let rtt = t1.saturating_sub(t0);
            let mid = (i128::from(t0) + i128::from(t1)) / 2;
            let offset = i64::try_from(mid - i128::from(theirs))
                .context("the node's clock is out of range")?;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        drop(stdin);
        let _ = p.join().await;
        let (rtt, offset) = best.context("no sample of the node's clock")?;
        Ok::<_, anyhow::Error>((offset, rtt / 2))
    };
    tokio::time::timeout(CLOCK_DEADLINE, ask)
        .await
        .with_context(|| {
            format!("pod {pod}: the node's clock did not answer within {CLOCK_DEADLINE:?}")
        })?
}

/// Replaces `path` in `pod` with `text`, whole (the agent's `put`).
pub async fn put(pods: &Api<Pod>, pod: &str, path: &Path, text: &str) -> Result<()> {
    let path = path.display().to_string();
    let out = crate::cluster::exec::exec(pods, pod, CONTAINER, &[AGENT, "put", &path, text])
        .await
        .with_context(|| format!("pod {pod}: the agent's put of {path}"))?;
    if out.code != 0 {
        bail!(
            "pod {pod}: the agent's put of {path}: {}",
            out.stderr.trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{pod, shifted, PodSpecIn};

    /// A value taken from a Secret is a reference in the pod's spec, never the
    /// value: the workers' access token is not in the spec anyone who may read
    /// pods reads.
    #[test]
    fn a_secret_env_is_a_reference_not_its_value() {
        let p = pod(&PodSpecIn {
            name: "worker-0".into(),
            run_id: "r",
            role: "worker",
            node: "n",
            image: "fencecheck/worker-pod:x",
            program: vec![
                "/fencecheck".into(),
                "worker".into(),
                "--config".into(),
                "{}".into(),
            ],
            env: vec![("PLAIN".into(), "shown".into())],
            run_dir: std::path::Path::new("/runs/r"),
            remote: false,
            files: None,
            user: None,
            host_files: Vec::new(),
            pull_secret: None,
            secret_env: vec![(
                "FENCECHECK_WORKER_ACCESS".into(),
                "worker-access".into(),
                "access".into(),
            )],
        });
        let spec = serde_json::to_value(&p).expect("json");
        let env = spec["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .clone();
        let var = env
            .iter()
            .find(|e| e["name"] == "FENCECHECK_WORKER_ACCESS")
            .expect("the access variable");
        assert!(var.get("value").is_none(), "{var}");
        assert_eq!(var["valueFrom"]["secretKeyRef"]["name"], "worker-access");
        assert_eq!(var["valueFrom"]["secretKeyRef"]["key"], "access");
        assert!(env
            .iter()
            .any(|e| e["name"] == "PLAIN" && e["value"] == "shown"));
    }

    #[test]
    fn a_journal_line_is_put_in_this_machines_clock() {
        let line = b"{\"seq\":1,\"time_ns\":1000}\n";
        let out = shifted(line, Some(-400));
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["time_ns"], 600);
        assert_eq!(v["seq"], 1);
        assert!(out.ends_with(b"\n"));
        assert_eq!(&*shifted(line, None), &line[..]);
        assert_eq!(&*shifted(b"not json\n", Some(5)), b"not json\n");
    }
}
