//! The cluster's processes: started detached (their own session, output to a log
//! file, nothing inherited from the command that started them), because they
//! outlive `fencecheck cluster up`; found again by pid, checked against the state
//! directory in their command line, and stopped with SIGTERM, then SIGKILL.
//!
//! Unlike `crate::proc`'s children (which die with the harness), nothing here
//! ties them to their parent: `cluster down` is what stops them.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Starts `program args` detached, its output appended to `log`; returns its pid.
pub fn spawn(
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> Result<u32> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let err = out
        .try_clone()
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe and touches only the child. A session
        // of its own: no Ctrl-C or hang-up of the terminal `up` ran in reaches it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {name} ({})", program.display()))?;
    // Not waited for: it outlives this command (re-parented when `up` exits), and
    // `alive` reads /proc rather than the exit status.
    Ok(child.id())
}

/// How `pid` ended, if it is a child of this process that has exited (it is
/// then reaped); `None` while it runs, or when it is not this process's child
/// (a component of an earlier `up`: only [`alive`] can tell of it).
pub fn reap(pid: u32) -> Option<String> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    match waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(format!("exit status {code}")),
        Ok(WaitStatus::Signaled(_, sig, core)) => Some(format!(
            "killed by {sig}{}",
            if core { ", core dumped" } else { "" }
        )),
        _ => None,
    }
}

/// Whether `pid` is a live (not zombie) process whose command line mentions
/// `dir`: a pid the kernel has since given to another program is not ours.
pub fn alive(pid: u32, dir: &Path) -> bool {
    let proc = Path::new("/proc").join(pid.to_string());
    let Ok(cmd) = std::fs::read(proc.join("cmdline")) else {
        return false;
    };
    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
    if !cmd.contains(&dir.display().to_string()) {
        return false;
    }
    let stat = std::fs::read_to_string(proc.join("stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next())
        .unwrap_or("?");
    state != "Z"
}

/// How a process was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It was not running (any more).
    WasNot,
    Terminated,
    Killed,
}

/// Stops `pid` (if it is still ours): SIGTERM, then SIGKILL after `grace`.
pub async fn stop(pid: u32, dir: &Path, grace: Duration) -> Result<Stopped> {
    if !alive(pid, dir) {
        return Ok(Stopped::WasNot);
    }
    let p = Pid::from_raw(pid as i32);
    // A process that went between the check and the signal: gone either way.
    let _ = kill(p, Signal::SIGCONT);
    let _ = kill(p, Signal::SIGTERM);
    if gone_within(pid, dir, grace).await {
        return Ok(Stopped::Terminated);
    }
    let _ = kill(p, Signal::SIGKILL);
    anyhow::ensure!(
        gone_within(pid, dir, Duration::from_secs(5)).await,
        "pid {pid} is still there 5 s after SIGKILL"
    );
    Ok(Stopped::Killed)
}

async fn gone_within(pid: u32, dir: &Path, deadline: Duration) -> bool {
    let until = tokio::time::Instant::now() + deadline;
    while alive(pid, dir) {
        if tokio::time::Instant::now() >= until {
            return false;
        }
        // The poll's interval, not a wait for the exit.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

/// The last `n` lines of a log, for an error message.
pub fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts `sh -c script` as a component would be, and waits (with a
    /// deadline) until `reap` says how it ended.
    fn ended(script: &str) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("c.log");
        let args = vec![
            "-c".to_string(),
            script.to_string(),
            dir.path().display().to_string(),
        ];
        let pid = spawn("c", Path::new("/bin/sh"), &args, &[], &log).expect("spawn");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(how) = reap(pid) {
                assert!(!alive(pid, dir.path()), "reaped, so gone");
                return how;
            }
            assert!(std::time::Instant::now() < until, "{script} did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn reap_says_the_exit_status_or_the_signal() {
        assert_eq!(ended("exit 3"), "exit status 3");
        assert_eq!(ended("kill -KILL $$"), "killed by SIGKILL");
    }

    #[test]
    fn reap_knows_nothing_of_a_process_that_is_not_its_child() {
        assert_eq!(reap(1), None);
    }
}
