//! The client process: started in the worker's process group with
//! `PR_SET_PDEATHSIG`, its stdout read line by line by a task of its own, and
//! the running-time clock every request is timed by.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};

use super::wire::{self, Incoming};
use super::{ClientError, ExternalConfig};

/// What the reader task passes on from the client's stdout.
pub enum FromClient {
    Hello(String),
    Answer(wire::Answer),
    Broken(ClientError),
    Closed,
}

/// The sender of the current session's `lost` flag, shared with the reader task.
pub type LostSlot = Arc<Mutex<Option<watch::Sender<Option<String>>>>>;

/// One running child.
pub struct Proc {
    pub child: Child,
    pub stdin: ChildStdin,
    pub from: mpsc::UnboundedReceiver<FromClient>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.child.start_kill();
    }
}

/// Starts `ext.command` with its stdin and stdout piped, its stderr to
/// `ext.log`, in the run directory, in the worker's process group (inherited:
/// no `process_group` call), killed if the worker dies.
pub fn spawn(ext: &ExternalConfig, worker: u32, lost: LostSlot) -> Result<Proc, ClientError> {
    let broken = |message: String| ClientError {
        message,
        line: None,
    };
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&ext.log)
        .map_err(|e| broken(format!("cannot open {}: {e}", ext.log.display())))?;
    let Some((program, args)) = ext.command.split_first() else {
        return Err(broken("empty client command".into()));
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env("FENCECHECK_WORKER", worker.to_string())
        // The worker's access token is not the adapter's environment's (the
        // adapter gets it in `open`).
        .env_remove(crate::systems::service::ACCESS_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    // The run directory (where its log is), whatever directory fencecheck was
    // started from.
    if let Some(dir) = ext.log.parent() {
        cmd.current_dir(dir);
    }
    // In the worker's process group (no process_group call): a pause of the
    // worker's group freezes its client too.
    crate::proc::die_with_parent(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| broken(format!("cannot start client {program}: {e}")))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(broken("client started without pipes".into()));
    };
    let (tx, from) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_lines(stdout, tx, lost));
    Ok(Proc {
        child,
        stdin,
        from,
        reader,
    })
}

/// The client closed its stdout: how it exited, with its last stderr line.
pub async fn exited(proc: Option<&mut Proc>, log: &Path) -> ClientError {
    let status = match proc {
        Some(p) => match tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => format!("unknown: {e}"),
            Err(_) => "stdout closed, still running; killed".into(),
        },
        None => "unknown".into(),
    };
    let last = std::fs::read_to_string(log).ok().and_then(|t| {
        t.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(wire::truncate)
    });
    ClientError {
        message: format!("client exited ({status})"),
        line: last.map(|l| format!("last stderr line: {l}")),
    }
}

/// Awaits `fut` for up to `limit` of **running** time: a stretch in which the
/// worker was stopped (its whole process group, the client included) counts as
/// at most half a second, so a pause never makes a request time out on its own.
pub async fn running_timeout<F: std::future::Future>(limit: Duration, fut: F) -> Option<F::Output> {
    tokio::pin!(fut);
    let step = Duration::from_millis(100);
    let mut counted = Duration::ZERO;
    loop {
        let t0 = tokio::time::Instant::now();
        tokio::select! {
            biased;
            v = &mut fut => return Some(v),
            _ = tokio::time::sleep(step) => {}
        }
        counted += t0.elapsed().min(step * 5);
        if counted >= limit {
            return None;
        }
    }
}

/// Reads the client's stdout: the hello, then answers (passed on) and
/// `session-lost` events (set on the current session at once, whatever the
/// worker is doing). Stops at the first broken line or at EOF.
async fn read_lines(
    stdout: tokio::process::ChildStdout,
    tx: mpsc::UnboundedSender<FromClient>,
    lost: LostSlot,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut said_hello = false;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => {
                let _ = tx.send(FromClient::Closed);
                return;
            }
            Err(e) => {
                let _ = tx.send(FromClient::Broken(ClientError {
                    message: format!("not a protocol line (unreadable: {e})"),
                    line: None,
                }));
                return;
            }
        };
        if !said_hello {
            said_hello = true;
            match wire::hello(&line) {
                Ok(lib) => {
                    let _ = tx.send(FromClient::Hello(lib));
                    continue;
                }
                Err(e) => {
                    let _ = tx.send(FromClient::Broken(e));
                    return;
                }
            }
        }
        match wire::incoming(&line) {
            Ok(Incoming::Answer(a)) => {
                let _ = tx.send(FromClient::Answer(a));
            }
            Ok(Incoming::SessionLost { reason, .. }) => {
                if let Ok(slot) = lost.lock() {
                    if let Some(s) = slot.as_ref() {
                        let _ = s.send(Some(reason));
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(FromClient::Broken(e));
                return;
            }
        }
    }
}
