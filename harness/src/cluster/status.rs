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
    lines.push(ports_line(up, &held_ports()));
    Status { up, lines }
}

/// The cluster's ports (all on 127.0.0.1; fixed, so one local cluster per
/// machine) that something listens on now.
fn held_ports() -> Vec<(u16, &'static str)> {
    super::PORTS
        .into_iter()
        .filter(|(port, _)| std::net::TcpListener::bind(("127.0.0.1", *port)).is_err())
        .collect()
}

/// Up, the ports are this cluster's; down, any still held are another's (or
/// another program's), which a new `up` would find taken.
fn ports_line(up: bool, held: &[(u16, &str)]) -> String {
    let list = held
        .iter()
        .map(|(p, what)| format!("127.0.0.1:{p} ({what})"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = match (up, held.is_empty()) {
        (true, _) => list,
        (false, true) => "none held".to_string(),
        (false, false) => format!("none of this cluster's; held by something else: {list}"),
    };
    format!("{:<15} {text}", "ports")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_line_names_each_held_port_and_what_holds_it() {
        let held = [(32379, "etcd client"), (32443, "kube-apiserver")];
        let line = ports_line(true, &held);
        assert!(line.starts_with("ports "), "{line}");
        assert!(
            line.ends_with("127.0.0.1:32379 (etcd client), 127.0.0.1:32443 (kube-apiserver)"),
            "{line}"
        );
        assert!(ports_line(false, &[]).ends_with("none held"));
        let other = ports_line(false, &held);
        assert!(
            other.contains("held by something else: 127.0.0.1:32379"),
            "{other}"
        );
    }
}
