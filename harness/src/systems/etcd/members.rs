//! etcd's members, for any backend: member `i` is etcd member `m<i>`, its peer URL
//! what the backend advertises (process: its peer proxy; docker: its container
//! name), its data in the placement's data directory.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::scenario::{EtcdVersion, Scenario};
use crate::systems::members::{Deploy, MemberSpec, Placement, Ports, Readiness};

/// The image's build file (`ci/images/`, included so the harness builds it).
pub const DOCKERFILE: &str = include_str!("../../../../ci/images/etcd.Dockerfile");
pub const PORTS: Ports = Ports {
    client: 2379,
    peers: &[2380],
};
/// Printed once the peer and client listeners are up, before the cluster has a
/// quorum; `/health` then tells when the cluster serves. Both 3.4 and 3.5 print it.
const READY_LINE: &str = "now serving peer/client/metrics";
/// Test hook (not a user option): extra arguments for every etcd member, e.g. a bad
/// flag, to exercise a failed start.
const EXTRA_ARGS_ENV: &str = "FENCECHECK_TEST_ETCD_EXTRA_ARGS";

pub struct EtcdDeploy {
    bin: PathBuf,
    version: String,
}

impl EtcdDeploy {
    pub fn find(want: EtcdVersion, say: &dyn Fn(&str)) -> Result<EtcdDeploy> {
        let b = tokio::task::block_in_place(|| {
            crate::systems::etcd::provision::find_or_provision(want, say)
        })?;
        say(&format!("etcd {} ({})", b.version, b.path.display()));
        Ok(EtcdDeploy {
            bin: b.path,
            version: b.version,
        })
    }
}

impl Deploy for EtcdDeploy {
    fn version(&self) -> &str {
        &self.version
    }
    fn image_name(&self) -> &'static str {
        "etcd"
    }
    fn members(&self, _s: &Scenario, at: &[Placement]) -> Result<Vec<MemberSpec>> {
        Ok(member_specs(&self.bin, at))
    }
    fn image(&self) -> Result<crate::image_context::BuildContext> {
        crate::image_context::program_context(&self.bin, DOCKERFILE)
    }
}

fn member_specs(bin: &Path, at: &[Placement]) -> Vec<MemberSpec> {
    let initial_cluster = at
        .iter()
        .map(|p| format!("m{}=http://{}", p.index, p.peers[0].advertise))
        .collect::<Vec<_>>()
        .join(",");
    let extra: Vec<String> = std::env::var(EXTRA_ARGS_ENV)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    at.iter()
        .map(|p| {
            let mut args: Vec<String> = [
                "--name",
                &format!("m{}", p.index),
                "--data-dir",
                &p.data_dir,
                "--listen-client-urls",
                &format!("http://{}", p.client_bind),
                "--advertise-client-urls",
                &format!("http://{}", p.client),
                "--listen-peer-urls",
                &format!("http://{}", p.peers[0].bind),
                "--initial-advertise-peer-urls",
                &format!("http://{}", p.peers[0].advertise),
                "--initial-cluster",
                &initial_cluster,
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &p.cluster_token,
                "--logger",
                "zap",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(extra.iter().cloned());
            MemberSpec {
                name: format!("etcd {}", p.index),
                program: bin.to_path_buf(),
                args,
                env: Vec::new(),
                files: Vec::new(),
                ready: Readiness {
                    line: READY_LINE,
                    http: Some("/health"),
                },
                clock_file: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker_like(n: usize) -> Vec<Placement> {
        crate::systems::members::docker_like(n, 2379, &[2380])
    }

    #[test]
    fn three_members_know_each_other_by_their_advertised_peer_names() {
        let s = member_specs(Path::new("/usr/local/bin/etcd"), &docker_like(3));
        assert_eq!(s.len(), 3);
        let cmd = s[1].args.join(" ");
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
        assert!(
            cmd.contains("--listen-client-urls http://0.0.0.0:2379 "),
            "{cmd}"
        );
        assert!(cmd.contains("--data-dir /data "), "{cmd}");
    }
}
