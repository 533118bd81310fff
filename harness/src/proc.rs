//! Child processes that can never outlive the harness or stay frozen.
//!
//! Every child (etcd, storage, workers) is spawned in its own process group, so a
//! Ctrl-C in the terminal reaches only the harness, which then cleans up in order;
//! and with `PR_SET_PDEATHSIG = SIGKILL`, so even a harness killed with SIGKILL
//! takes its children with it. [`Child`] continues and kills on drop, which covers
//! errors and panics.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub struct Child {
    pub name: String,
    inner: tokio::process::Child,
    pid: u32,
}

/// Makes `cmd`'s child get SIGKILL when the thread that spawned it dies
/// (`PR_SET_PDEATHSIG`), so even a SIGKILLed parent leaves no child behind.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Spawns `cmd` with stdout and stderr appended to `log`.
pub fn spawn(name: &str, mut cmd: std::process::Command, log: &Path) -> Result<Child> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    die_with_parent(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let inner = cmd
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    let pid = inner.id().context("child has no pid")?;
    Ok(Child {
        name: name.to_string(),
        inner,
        pid,
    })
}

impl Child {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn signal(&self, sig: Signal) -> nix::Result<()> {
        kill(Pid::from_raw(self.pid as i32), sig)
    }

    /// Has the process exited? (Reaps it if so.)
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.inner.try_wait().ok().flatten()
    }

    /// Waits for a voluntary exit up to `grace`, then continues and kills it.
    pub async fn stop(&mut self, grace: Duration) {
        let _ = self.signal(Signal::SIGCONT);
        if grace > Duration::ZERO {
            let _ = self.signal(Signal::SIGTERM);
            if tokio::time::timeout(grace, self.inner.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.inner.start_kill();
        let _ = self.inner.wait().await;
    }

    /// Waits up to `deadline` for the process to exit on its own.
    pub async fn wait_timeout(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(deadline, self.inner.wait())
            .await
            .ok()
            .and_then(|r| r.ok())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too; SIGCONT first anyway so that, should the
        // kill not land, nothing is ever left frozen.
        if self.exited().is_none() {
            let _ = self.signal(Signal::SIGCONT);
            let _ = self.inner.start_kill();
        }
    }
}

/// A free TCP port on `ip` (bound and released; the small race is acceptable on a
/// loopback address the harness owns).
pub fn free_port(ip: &str) -> Result<u16> {
    let l = std::net::TcpListener::bind((ip, 0)).with_context(|| format!("bind {ip}:0"))?;
    Ok(l.local_addr()?.port())
}

/// Polls `probe` until it succeeds or `deadline` passes.
pub async fn poll_until<F, Fut>(what: &str, deadline: Duration, mut probe: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    let mut wait = Duration::from_millis(20);
    loop {
        if probe().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= end {
            anyhow::bail!(
                "{what} not ready after {}",
                humantime::format_duration(deadline)
            );
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(250));
    }
}

/// Polls `http://addr/health` until it answers healthy: etcd with
/// `{"health":"true"}`, the storage with any 2xx.
pub async fn wait_http_healthy(
    what: &str,
    addr: std::net::SocketAddr,
    deadline: Duration,
) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://{addr}/health");
    poll_until(what, deadline, || {
        let http = http.clone();
        let url = url.clone();
        async move {
            let Ok(r) = http.get(&url).send().await else {
                return false;
            };
            let ok = r.status().is_success();
            let body = r.text().await.unwrap_or_default();
            ok && (!body.contains("health") || body.contains("true"))
        }
    })
    .await
}
