//! A command in a pod's container, run through the API server (kube-rs exec over
//! a websocket: the apiserver proxies it to kubelet, which runs it through
//! dockershim): no `kubectl`, no access to the node needed. The in-pod fault
//! agent (`agent/`) is driven this way: `fencecheck-agent ctl stop` and the like.

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;

/// What a command run in a container printed, and how it ended.
#[derive(Debug, Clone)]
pub struct Exec {
    pub stdout: String,
    pub stderr: String,
    /// Its exit code: 0 on success, the code the API server reports otherwise.
    pub code: i32,
}

/// Runs `command` in `container` of pod `pod` (no stdin, no tty) and waits for
/// it to end.
pub async fn exec(pods: &Api<Pod>, pod: &str, container: &str, command: &[&str]) -> Result<Exec> {
    let ap = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut p = pods
        .exec(pod, command.iter().copied(), &ap)
        .await
        .with_context(|| format!("exec {command:?} in pod {pod}, container {container}"))?;
    let mut out = p.stdout().context("exec: no stdout stream")?;
    let mut err = p.stderr().context("exec: no stderr stream")?;
    let status = p.take_status().context("exec: no status channel")?;
    let mut stdout = String::new();
    let mut stderr = String::new();
    let (o, e) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    o.with_context(|| format!("exec {command:?}: reading stdout"))?;
    e.with_context(|| format!("exec {command:?}: reading stderr"))?;
    let status = status.await;
    p.join()
        .await
        .with_context(|| format!("exec {command:?} in pod {pod}"))?;
    let code = match status {
        Some(s) if s.status.as_deref() == Some("Success") => 0,
        Some(s) => {
            // A non-zero exit: reason NonZeroExitCode, cause ExitCode = the code.
            let cause = s
                .details
                .as_ref()
                .and_then(|d| d.causes.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")));
            match cause.and_then(|c| c.message.as_deref()?.parse().ok()) {
                Some(c) => c,
                None => bail!(
                    "exec {command:?} in pod {pod} failed: {} ({})",
                    s.message.as_deref().unwrap_or("no message"),
                    s.reason.as_deref().unwrap_or("no reason")
                ),
            }
        }
        None => bail!("exec {command:?} in pod {pod}: the API server sent no status"),
    };
    Ok(Exec {
        stdout,
        stderr,
        code,
    })
}
