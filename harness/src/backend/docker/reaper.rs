//! The harness's side of the reaper (see `reaper/`): its container is started
//! before anything else of a run exists, and the harness holds a connection to it
//! for the whole run. When that connection drops — the harness ended, even by
//! SIGKILL, since the kernel closes a dead process's sockets — the reaper removes
//! everything labelled with the run, then exits and is auto-removed. A run that
//! stops normally removes everything itself, the reaper container last.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::cleanup::InFlight;
use super::container::{ContainerSpec, MountSpec, HOST};
use super::engine::docker_host;
use super::{ROLE_LABEL, RUN_LABEL};
use crate::images::Image;
use crate::proc::free_port;

/// The reaper's port inside its container.
const PORT: u16 = 8080;
/// Printed by the reaper once it listens.
const READY_LINE: &str = "reaper listening";
/// If the harness dies before it connects, the reaper reaps after this long anyway
/// (short enough that even then nothing is left 30 s after the harness died; the
/// harness connects as soon as the reaper prints its ready line).
const CONNECT_TIMEOUT_SECS: u64 = 20;

/// A live reaper: dropping it closes the connection, which tells the reaper to reap.
pub(super) struct Reaper {
    pub name: String,
    /// Never read or written after the handshake: its only job is to stay open as
    /// long as this process lives. Sockets are close-on-exec, so the worker
    /// processes this harness spawns do not keep it open after the harness dies.
    _link: TcpStream,
}

/// The engine's unix socket, to mount into the reaper; None for a remote engine
/// (`tcp://`), whose socket is not on this machine.
fn socket_path() -> Option<String> {
    let host = docker_host();
    host.strip_prefix("unix://").map(str::to_string)
}

/// Starts the run's reaper and registers the run's label with it. None (with a
/// warning) when the engine is not reached through a local socket.
pub(super) async fn start(
    run_id: &str,
    image: &Image,
    inflight: &InFlight,
    say: &dyn Fn(&str),
) -> Result<Option<Reaper>> {
    let Some(socket) = socket_path() else {
        say(&format!(
            "no reaper: the engine at {} is not a local socket; a harness killed \
             outright leaves its containers (`fencecheck clean` removes them)",
            docker_host()
        ));
        return Ok(None);
    };
    let label = format!("{RUN_LABEL}={run_id}");
    let port = free_port(HOST)?;
    let spec = ContainerSpec {
        name: format!("fencecheck-{run_id}-reaper"),
        image: image.tag.clone(),
        role: "reaper",
        cmd: vec![
            "--listen".into(),
            format!("0.0.0.0:{PORT}"),
            "--label".into(),
            label.clone(),
            // Not itself: it exits and is auto-removed once done.
            "--spare".into(),
            format!("{ROLE_LABEL}=reaper"),
            "--connect-timeout".into(),
            CONNECT_TIMEOUT_SECS.to_string(),
        ],
        env: Vec::new(),
        network: None,
        ports: vec![(PORT, port)],
        mounts: vec![MountSpec::Bind {
            host: socket,
            target: "/var/run/docker.sock".into(),
        }],
        user: None,
        ready_line: READY_LINE,
        auto_remove: true,
    };
    let c = spec
        .start(run_id, inflight)
        .await
        .map_err(|f| f.error.context("the reaper did not start"))?;
    // Its lifetime is the connection's, not a handle's: testcontainers removing it
    // when the handle drops would only race with its own exit, or with the removal
    // of the run by label, which takes it last.
    let c = std::sync::Arc::try_unwrap(c).ok();
    std::mem::forget(c);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let link = tokio::task::spawn_blocking(move || handshake(addr, &label))
        .await
        .context("reaper handshake")??;
    Ok(Some(Reaper {
        name: spec.name,
        _link: link,
    }))
}

/// Connects, registers `label`, waits for the ACK.
fn handshake(addr: SocketAddr, label: &str) -> Result<TcpStream> {
    let timeout = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("cannot reach the reaper at {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("label={label}\n").as_bytes())
        .context("cannot register with the reaper")?;
    let mut line = String::new();
    BufReader::new(s.try_clone()?)
        .read_line(&mut line)
        .context("no answer from the reaper")?;
    if line.trim() != "ACK" {
        bail!("the reaper answered {:?} instead of ACK", line.trim());
    }
    s.set_read_timeout(None)?;
    Ok(s)
}
