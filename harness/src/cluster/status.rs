//! `cluster status`: each component's process, and the node's Ready condition as
//! the apiserver has it.

use std::path::Path;

use anyhow::Result;

use super::state::{self, State};
use super::{api, process};

/// What `status` found.
pub struct Status {
    /// Every component running and the node Ready.
    pub up: bool,
    pub lines: Vec<String>,
}

impl Status {
    pub(super) fn summary(&self) -> String {
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

pub(super) async fn status_of(st: &State) -> Status {
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
