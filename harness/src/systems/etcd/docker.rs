//! etcd as cluster members: the command line, ports, ready line and health check
//! of member `i`, as a [`MemberSpec`] for the service-generic member lifecycle.

use std::net::SocketAddr;

use crate::backend::docker::container::{ContainerSpec, MountSpec};
use crate::backend::docker::member::{Health, MemberSpec};

const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// Printed once the peer and client listeners are up, before the cluster has a
/// quorum (so each member can be waited for while the others are not started
/// yet); `/health` then tells when the cluster serves. Both 3.4 and 3.5 print it.
const READY_LINE: &str = "now serving peer/client/metrics";
/// Test hook (not a user option): extra arguments for every etcd member, e.g. a bad
/// flag, to exercise a failed start.
const EXTRA_ARGS_ENV: &str = "FENCECHECK_TEST_ETCD_EXTRA_ARGS";

/// The members of a new cluster of `client_ports.len()` members.
/// `prefix` is `fencecheck-<run id>`; member `i` is etcd member `m<i>` in container
/// `<prefix>-m<i>` (also its peer host name), volume `<prefix>-m<i>-data`, client
/// port `client_ports[i]` on 127.0.0.1.
pub(crate) fn member_specs(
    run_id: &str,
    prefix: &str,
    image: &str,
    client_ports: &[u16],
) -> Vec<MemberSpec> {
    let names: Vec<String> = (0..client_ports.len())
        .map(|i| format!("{prefix}-m{i}"))
        .collect();
    let initial_cluster = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("m{i}=http://{n}:{PEER_PORT}"))
        .collect::<Vec<_>>()
        .join(",");
    let extra: Vec<String> = std::env::var(EXTRA_ARGS_ENV)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    names
        .iter()
        .zip(client_ports)
        .enumerate()
        .map(|(i, (name, &port))| {
            let client: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
            let volume = format!("{prefix}-m{i}-data");
            let mut cmd: Vec<String> = [
                "--name",
                &format!("m{i}"),
                "--data-dir",
                "/data",
                "--listen-client-urls",
                &format!("http://0.0.0.0:{CLIENT_PORT}"),
                "--advertise-client-urls",
                &format!("http://{client}"),
                "--listen-peer-urls",
                &format!("http://0.0.0.0:{PEER_PORT}"),
                "--initial-advertise-peer-urls",
                &format!("http://{name}:{PEER_PORT}"),
                "--initial-cluster",
                &initial_cluster,
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &format!("fencecheck-{run_id}"),
                "--logger",
                "zap",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            cmd.extend(extra.iter().cloned());
            MemberSpec {
                container: ContainerSpec {
                    name: name.clone(),
                    image: image.to_string(),
                    role: "etcd",
                    cmd,
                    env: Vec::new(),
                    // The run's peer network, set by the member lifecycle.
                    network: None,
                    ports: vec![(CLIENT_PORT, port)],
                    mounts: vec![MountSpec::Volume {
                        name: volume.clone(),
                        target: "/data".into(),
                    }],
                    user: None,
                    ready_line: READY_LINE,
                    auto_remove: false,
                },
                volume,
                client,
                health: Health::Http("/health"),
            }
        })
        .collect()
}

/// The etcd version an image tag carries: `fencecheck/etcd:3.5.1-<hash>` → 3.5.1.
pub(crate) fn version_of(tag: &str) -> String {
    tag.rsplit_once(':')
        .and_then(|(_, t)| t.rsplit_once('-'))
        .map(|(v, _)| v.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_members_know_each_other_by_container_name() {
        let s = member_specs(
            "fc1",
            "fencecheck-fc1",
            "fencecheck/etcd:3.5.1-abc",
            &[1, 2, 3],
        );
        assert_eq!(s.len(), 3);
        let cmd = s[1].container.cmd.join(" ");
        assert!(cmd.contains("--name m1"), "{cmd}");
        assert!(
            cmd.contains(
                "--initial-cluster m0=http://fencecheck-fc1-m0:2380,\
                 m1=http://fencecheck-fc1-m1:2380,m2=http://fencecheck-fc1-m2:2380"
            ),
            "{cmd}"
        );
        assert!(
            cmd.contains("--advertise-client-urls http://127.0.0.1:2 "),
            "{cmd}"
        );
        assert_eq!(s[2].container.ports, vec![(2379, 3)]);
        assert_eq!(s[0].volume, "fencecheck-fc1-m0-data");
        assert_eq!(version_of("fencecheck/etcd:3.5.1-8e53ea868012"), "3.5.1");
    }
}
