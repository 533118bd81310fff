//! `cluster down` (and the clean-up of a failed `up`): kubelet, its pods'
//! containers, the apiserver, etcd, the mounts and the state, in that order.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::state::{self, Component, State};
use super::{containers, process, GRACE};

/// Stops kubelet, removes its pods' containers (and their logs), stops the
/// apiserver and etcd; an error on the way does not stop the rest.
pub(super) async fn stop_all(st: &State, say: &dyn Fn(&str)) -> Result<Vec<String>> {
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

pub(super) fn remove_entry(p: &Path) -> Result<()> {
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
