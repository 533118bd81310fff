//! Redis instances as members: instance `i`'s config, command line, port, ready
//! line and health check, as a [`MemberSpec`] for the service-generic member
//! lifecycle. One instance for `redis`; for `redlock`, 3 or 5 independent masters,
//! each a member of its own (they never talk to each other: the peer network only
//! holds them, nothing crosses it).
//!
//! The image is `FROM scratch` (no shell to write a file with), so the harness
//! writes each instance's config (`redis-N.conf`, the process backend's, listening
//! on every address of the container and keeping its data in /data) into the run
//! directory and bind-mounts it read-only. The data directory is the member's
//! volume: a kill and a `docker start` of the same container find the AOF there
//! when `[lock] persistence` keeps one, and nothing when it does not, as a
//! restarted process does.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};

use crate::backend::docker::container::{ContainerSpec, MountSpec};
use crate::backend::docker::member::{Health, MemberSpec};
use crate::scenario::{Persistence, ServiceKind};
use crate::systems::redis::service::instance_config;

const CLIENT_PORT: u16 = 6379;
const CONFIG: &str = "/conf/redis.conf";
const DATA: &str = "/data";
/// Logged once the instance serves (after it has loaded its AOF, if any).
const READY_LINE: &str = "Ready to accept connections";

/// The instances of one run, `client_ports.len()` of them. `prefix` is
/// `fencecheck-<run id>`; instance `i` is container `<prefix>-m<i>`, volume
/// `<prefix>-m<i>-data`, client port `client_ports[i]` on 127.0.0.1.
pub(crate) fn member_specs(
    prefix: &str,
    image: &str,
    persistence: Persistence,
    run_dir: &Path,
    client_ports: &[u16],
) -> Result<Vec<MemberSpec>> {
    let listen = SocketAddr::from(([0, 0, 0, 0], CLIENT_PORT));
    let config = instance_config(listen, Path::new(DATA), persistence);
    let mut specs = Vec::new();
    for (i, &port) in client_ports.iter().enumerate() {
        let cfg = run_dir.join(format!("redis-{i}.conf"));
        std::fs::write(&cfg, &config).with_context(|| format!("cannot write {}", cfg.display()))?;
        let volume = format!("{prefix}-m{i}-data");
        specs.push(MemberSpec {
            container: ContainerSpec {
                name: format!("{prefix}-m{i}"),
                image: image.to_string(),
                role: "redis",
                cmd: vec![CONFIG.to_string()],
                env: Vec::new(),
                // The run's peer network, set by the member lifecycle.
                network: None,
                ports: vec![(CLIENT_PORT, port)],
                mounts: vec![
                    MountSpec::Volume {
                        name: volume.clone(),
                        target: DATA.into(),
                    },
                    MountSpec::BindReadOnly {
                        host: cfg.display().to_string(),
                        target: CONFIG.into(),
                    },
                ],
                user: None,
                ready_line: READY_LINE,
                auto_remove: false,
            },
            volume,
            client: SocketAddr::from(([127, 0, 0, 1], port)),
            health: Health::Service(ServiceKind::Redis),
        });
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instance_listens_everywhere_and_keeps_its_data_on_its_volume() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = member_specs(
            "fencecheck-fc1",
            "fencecheck/redis:7.0.15-abc",
            Persistence::AofAlways,
            dir.path(),
            &[1, 2, 3],
        )
        .expect("specs");
        assert_eq!(s.len(), 3);
        let cfg = std::fs::read_to_string(dir.path().join("redis-2.conf")).expect("cfg");
        for line in [
            "bind 0.0.0.0",
            "port 6379",
            "dir /data",
            "appendonly yes",
            "appendfsync always",
            "notify-keyspace-events E$gx",
        ] {
            assert!(cfg.lines().any(|l| l == line), "{line} not in:\n{cfg}");
        }
        let c = &s[2].container;
        assert_eq!(c.name, "fencecheck-fc1-m2");
        assert_eq!(c.cmd, vec![CONFIG.to_string()]);
        assert_eq!(c.ports, vec![(6379, 3)]);
        assert_eq!(s[2].volume, "fencecheck-fc1-m2-data");
        assert_eq!(s[2].client, SocketAddr::from(([127, 0, 0, 1], 3)));
    }
}
