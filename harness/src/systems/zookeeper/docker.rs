//! ZooKeeper as cluster members: member `i`'s config file and `myid`, command line,
//! ports, ready line and health check, as a [`MemberSpec`] for the service-generic
//! member lifecycle.
//!
//! The image is `FROM scratch` (no shell to write a file with), so the harness
//! writes each member's config (`zk-N.cfg`) and `myid` (`zk-N.myid`) into the run
//! directory and bind-mounts them read-only: the config at /conf/zoo.cfg, `myid`
//! at /data/myid, inside the member's data volume at /data (its mount point is
//! made in the volume). A kill and a `docker start` of the same container keep
//! both mounts and the volume's snapshots and transaction logs.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};

use crate::backend::docker::container::{ContainerSpec, MountSpec};
use crate::backend::docker::member::{Health, MemberSpec};
use crate::scenario::ServiceKind;
use crate::systems::zookeeper::service::{base_config, jvm_args};

const CLIENT_PORT: u16 = 2181;
const QUORUM_PORT: u16 = 2888;
const ELECTION_PORT: u16 = 3888;
const CONFIG: &str = "/conf/zoo.cfg";
const DATA: &str = "/data";
/// Logged once the client port is bound, in standalone and quorum mode alike,
/// before the member has a quorum (so each member can be waited for while the
/// others are not started yet); `srvr` then tells when the ensemble serves.
const READY_LINE: &str = "binding to port";

/// The JVM flags the process backend uses, and, for the docker network, short DNS
/// caches: a member killed and started again, or disconnected and connected back,
/// may come back at another address, and the JVM would otherwise keep the old one
/// (or the failed look-up) for 30 s (10 s), long past a 2 s session.
fn docker_jvm_args(classpath: &str) -> Vec<String> {
    let mut args = vec![
        "-Dsun.net.inetaddr.ttl=1".to_string(),
        "-Dsun.net.inetaddr.negative.ttl=0".to_string(),
    ];
    args.extend(jvm_args(classpath));
    args
}

/// A member's config among `names` (the members' container names, in myid order). One member is
/// standalone, as on the process backend; more are a quorum that listens on every
/// address of the container, since a `docker network connect` after an isolation
/// may give it another one.
fn member_config(names: &[String]) -> String {
    let mut cfg = base_config(DATA, "0.0.0.0", CLIENT_PORT);
    if names.len() > 1 {
        cfg.push_str("standaloneEnabled=false\nquorumListenOnAllIPs=true\n");
        for (j, n) in names.iter().enumerate() {
            cfg.push_str(&format!(
                "server.{}={n}:{QUORUM_PORT}:{ELECTION_PORT}\n",
                j + 1
            ));
        }
    }
    cfg
}

/// The members of a new ensemble of `client_ports.len()` members, their config
/// files and `myid`s written into `run_dir`. `prefix` is `fencecheck-<run id>`;
/// member `i` (myid `i + 1`) is container `<prefix>-m<i>` (also its peer host
/// name), volume `<prefix>-m<i>-data`, client port `client_ports[i]` on 127.0.0.1.
/// `java` is the launcher's real path in the image, `classpath` the process
/// backend's.
pub(crate) fn member_specs(
    prefix: &str,
    image: &str,
    java: &Path,
    classpath: &str,
    run_dir: &Path,
    client_ports: &[u16],
) -> Result<Vec<MemberSpec>> {
    let names: Vec<String> = (0..client_ports.len())
        .map(|i| format!("{prefix}-m{i}"))
        .collect();
    let mut specs = Vec::new();
    for (i, (name, &port)) in names.iter().zip(client_ports).enumerate() {
        let cfg = run_dir.join(format!("zk-{i}.cfg"));
        std::fs::write(&cfg, member_config(&names))
            .with_context(|| format!("cannot write {}", cfg.display()))?;
        let myid = run_dir.join(format!("zk-{i}.myid"));
        std::fs::write(&myid, format!("{}\n", i + 1))
            .with_context(|| format!("cannot write {}", myid.display()))?;
        let volume = format!("{prefix}-m{i}-data");
        let cmd = std::iter::once(java.display().to_string())
            .chain(docker_jvm_args(classpath))
            .chain([CONFIG.to_string()])
            .collect();
        specs.push(MemberSpec {
            container: ContainerSpec {
                name: name.clone(),
                image: image.to_string(),
                role: "zookeeper",
                cmd,
                env: Vec::new(),
                // The run's peer network, set by the member lifecycle.
                network: None,
                ports: vec![(CLIENT_PORT, port)],
                // The volume first: the engine mounts by depth, so /data/myid lands
                // inside it.
                mounts: vec![
                    MountSpec::Volume {
                        name: volume.clone(),
                        target: DATA.into(),
                    },
                    MountSpec::BindReadOnly {
                        host: cfg.display().to_string(),
                        target: CONFIG.into(),
                    },
                    MountSpec::BindReadOnly {
                        host: myid.display().to_string(),
                        target: format!("{DATA}/myid"),
                    },
                ],
                user: None,
                ready_line: READY_LINE,
                auto_remove: false,
            },
            volume,
            client: SocketAddr::from(([127, 0, 0, 1], port)),
            health: Health::Service(ServiceKind::Zookeeper),
        });
    }
    Ok(specs)
}

/// The ZooKeeper version an image tag carries: `fencecheck/zookeeper:3.8.0-<hash>`
/// → 3.8.0.
pub(crate) fn version_of(tag: &str) -> String {
    crate::systems::etcd::docker::version_of(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_members_know_each_other_by_container_name() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = member_specs(
            "fencecheck-fc1",
            "fencecheck/zookeeper:3.8.0-abc",
            Path::new("/usr/lib/jvm/j/bin/java"),
            "/usr/share/java/zookeeper.jar",
            dir.path(),
            &[1, 2, 3],
        )
        .expect("specs");
        assert_eq!(s.len(), 3);
        let cfg = std::fs::read_to_string(dir.path().join("zk-1.cfg")).expect("cfg");
        for line in [
            "tickTime=1000",
            "dataDir=/data",
            "clientPort=2181",
            "admin.enableServer=false",
            "reconfigEnabled=false",
            "4lw.commands.whitelist=srvr,ruok,mntr,stat,dump",
            "quorumListenOnAllIPs=true",
            "server.1=fencecheck-fc1-m0:2888:3888",
            "server.3=fencecheck-fc1-m2:2888:3888",
        ] {
            assert!(cfg.lines().any(|l| l == line), "{line} not in:\n{cfg}");
        }
        let myid = std::fs::read_to_string(dir.path().join("zk-2.myid")).expect("myid");
        assert_eq!(myid.trim(), "3");
        let c = &s[1].container;
        assert_eq!(c.cmd[0], "/usr/lib/jvm/j/bin/java");
        assert_eq!(c.cmd.last().map(String::as_str), Some(CONFIG));
        assert!(c.cmd.iter().any(|a| a == "-XX:+UseSerialGC"), "{:?}", c.cmd);
        assert_eq!(c.ports, vec![(2181, 2)]);
        assert_eq!(s[0].volume, "fencecheck-fc1-m0-data");
        assert_eq!(
            version_of("fencecheck/zookeeper:3.8.0-43816b3acd0b"),
            "3.8.0"
        );
    }

    #[test]
    fn one_member_is_standalone() {
        let cfg = member_config(&["m0".to_string()]);
        assert!(!cfg.contains("server.1"), "{cfg}");
        assert!(!cfg.contains("standaloneEnabled"), "{cfg}");
    }
}
