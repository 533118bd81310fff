//! ZooKeeper's members, for any backend: Debian's ZooKeeper 3.8 jars on the
//! system JRE, one JVM per member, each with its own config (`zk-N.cfg`) and
//! `myid` (in its data directory). A member's config names its own server line
//! with the addresses it binds, and the other members' lines with what the backend
//! advertises (process: their peer proxies; docker: their container names):
//! ZooKeeper binds its quorum and election ports from its own line and connects to
//! a peer through that peer's line, and with dynamic reconfig off the lines need
//! not agree between members (the ensemble only compares configs when reconfig is
//! on). A member placed on every address of its host (docker, where a network
//! reconnect may change it) names itself as advertised and listens on all IPs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::scenario::Scenario;
use crate::systems::members::{
    Deploy, FilePlace, MemberFile, MemberSpec, Placement, Ports, Readiness,
};

pub const PORTS: Ports = Ports {
    client: 2181,
    peers: &[2888, 3888],
};
/// Debian's ZooKeeper jar: its manifest's Class-Path names its dependencies.
const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
/// An SLF4J binding (Debian's libslf4j-java, a dependency of zookeeper), so the
/// member logs to stderr, i.e. to its log file; without one it says nothing.
pub(crate) const SLF4J_SIMPLE: &str = "/usr/share/java/slf4j-simple.jar";
const MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// The JVM's arguments up to the config file. Small and quick to start: a 256 MB
/// heap, the serial collector, the C1 compiler only; IPv4 as every address here
/// is. Short DNS caches: a docker member killed and started again, or
/// disconnected and connected back, may come back at another address, and the JVM
/// would otherwise keep the old one (or the failed look-up) for 30 s (10 s), long
/// past a 2 s session (harmless for the IPs of the process backend).
pub(crate) fn jvm_args(classpath: &str) -> Vec<String> {
    [
        "-Dsun.net.inetaddr.ttl=1",
        "-Dsun.net.inetaddr.negative.ttl=0",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xss512k",
        "-Djava.net.preferIPv4Stack=true",
        "-Dzookeeper.jmx.log4j.disable=true",
        // Election connections to a dead or cut-off peer give up after 1 s
        // instead of 5 s: an election among live members is not held up.
        "-Dzookeeper.cnxTimeout=1000",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-cp",
        classpath,
        MAIN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Logged once the client port is bound, in standalone and quorum mode alike,
/// before the member has a quorum; `srvr` then tells when the ensemble serves.
const READY_LINE: &str = "binding to port";

pub struct ZkDeploy {
    java: PathBuf,
    classpath: String,
    version: String,
}

impl ZkDeploy {
    /// Finds Java and Debian's ZooKeeper jars (`ci/bootstrap.sh` installs them) and
    /// asks the jar for its version.
    pub fn find(say: &dyn Fn(&str)) -> Result<ZkDeploy> {
        let java = PathBuf::from("/usr/bin/java");
        if !java.exists() {
            bail!("no /usr/bin/java: run ci/bootstrap.sh --system zookeeper (Debian's zookeeper and JRE 17)");
        }
        // The launcher at its real path: that is where the image has it.
        let java = std::fs::canonicalize(&java)
            .with_context(|| format!("cannot resolve {}", java.display()))?;
        if !Path::new(ZK_JAR).exists() {
            bail!(
                "no {ZK_JAR}: run ci/bootstrap.sh --system zookeeper (apt-get install zookeeper)"
            );
        }
        let mut classpath = ZK_JAR.to_string();
        if Path::new(SLF4J_SIMPLE).exists() {
            classpath = format!("{classpath}:{SLF4J_SIMPLE}");
        }
        let out = std::process::Command::new(&java)
            .args([
                "-cp",
                ZK_JAR,
                "org.apache.zookeeper.version.VersionInfoMain",
            ])
            .output()
            .context("cannot run java to read ZooKeeper's version")?;
        // "Apache ZooKeeper, version 3.8.0 2024-12-29 17:54 UTC"
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split("version ")
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .with_context(|| format!("cannot read ZooKeeper's version from {text:?}"))?
            .to_string();
        say(&format!(
            "zookeeper {version} ({ZK_JAR}, {})",
            java.display()
        ));
        Ok(ZkDeploy {
            java,
            classpath,
            version,
        })
    }
}

/// What every member's config says, on either backend. `tickTime = 1000` allows
/// sessions of [2 s, 20 s]; `syncLimit = 2` lets a follower give up on a dead
/// leader after 2 s (the faults kill and cut off leaders; the default 5 ticks would
/// outlive a 2 s session twice over before an election even starts); the admin
/// server (its port 8080 would clash between members) and reconfig are off; the
/// four-letter words the harness uses are allowed (`dump`: which sessions the
/// leader still tracks, see `session_alive`).
pub(crate) fn base_config(data_dir: &str, client_ip: &str, client_port: u16) -> String {
    format!(
        "tickTime=1000\ninitLimit=5\nsyncLimit=2\ndataDir={data_dir}\n\
         clientPortAddress={client_ip}\nclientPort={client_port}\nmaxClientCnxns=0\n\
         admin.enableServer=false\nreconfigEnabled=false\n\
         4lw.commands.whitelist=srvr,ruok,mntr,stat,dump\n"
    )
}

/// Member `me`'s config among `all` (in myid order).
fn member_config(me: &Placement, all: &[Placement]) -> String {
    let mut cfg = base_config(
        &me.data_dir,
        &me.client_bind.ip().to_string(),
        me.client_bind.port(),
    );
    if all.len() > 1 {
        // Not standalone even with one member, and: a server line per member,
        // `server.<myid>=host:quorum:election`.
        cfg.push_str("standaloneEnabled=false\n");
        let all_ips = me.peers[0].bind.ip().is_unspecified();
        if all_ips {
            cfg.push_str("quorumListenOnAllIPs=true\n");
        }
        for p in all {
            let (host, q, e) = if p.index == me.index && !all_ips {
                let (q, e) = (p.peers[0].bind, p.peers[1].bind);
                (q.ip().to_string(), q.port(), e.port())
            } else {
                let (q, e) = (&p.peers[0].advertise, &p.peers[1].advertise);
                (q.host.clone(), q.port, e.port)
            };
            cfg.push_str(&format!("server.{}={host}:{q}:{e}\n", p.index + 1));
        }
    }
    cfg
}

impl Deploy for ZkDeploy {
    fn version(&self) -> &str {
        &self.version
    }
    fn image_name(&self) -> &'static str {
        "zookeeper"
    }
    fn members(&self, _s: &Scenario, at: &[Placement]) -> Result<Vec<MemberSpec>> {
        member_specs(&self.java, &self.classpath, at)
    }
    fn image(&self) -> Result<crate::image_context::BuildContext> {
        crate::systems::zookeeper::image::context(&self.java, &self.classpath)
            .with_context(|| format!("cannot package zookeeper {} for an image", self.version))
    }
}

fn member_specs(java: &Path, classpath: &str, at: &[Placement]) -> Result<Vec<MemberSpec>> {
    if at.iter().any(|p| p.peers.len() != 2) {
        bail!("a ZooKeeper member needs two peer ports (quorum, election)");
    }
    // ZooKeeper wants one host per server line.
    if at
        .iter()
        .any(|p| p.peers[0].advertise.host != p.peers[1].advertise.host)
    {
        bail!("a ZooKeeper member's quorum and election ports must share a host");
    }
    Ok(at
        .iter()
        .map(|p| {
            let cfg = format!("zk-{}.cfg", p.index);
            let mut args = jvm_args(classpath);
            args.push(p.config_file(&cfg));
            MemberSpec {
                name: format!("zookeeper {}", p.index),
                program: java.to_path_buf(),
                args,
                env: Vec::new(),
                files: vec![
                    MemberFile {
                        name: cfg,
                        place: FilePlace::Config,
                        contents: member_config(p, at),
                    },
                    MemberFile {
                        name: "myid".into(),
                        place: FilePlace::Data,
                        contents: format!("{}\n", p.index + 1),
                    },
                ],
                ready: Readiness {
                    line: READY_LINE,
                    http: None,
                },
                clock_file: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker_like(n: usize) -> Vec<Placement> {
        crate::systems::members::docker_like(n, 2181, &[2888, 3888])
    }

    #[test]
    fn three_members_know_each_other_by_their_advertised_names() {
        let at = docker_like(3);
        let s = member_specs(
            Path::new("/usr/lib/jvm/j/bin/java"),
            "/usr/share/java/zookeeper.jar",
            &at,
        )
        .expect("specs");
        assert_eq!(s.len(), 3);
        let cfg = &s[1].files[0];
        assert_eq!(
            (cfg.name.as_str(), cfg.place),
            ("zk-1.cfg", FilePlace::Config)
        );
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
            assert!(
                cfg.contents.lines().any(|l| l == line),
                "{line} not in:\n{}",
                cfg.contents
            );
        }
        let myid = &s[2].files[1];
        assert_eq!((myid.name.as_str(), myid.place), ("myid", FilePlace::Data));
        assert_eq!(myid.contents.trim(), "3");
        let m = &s[1];
        assert_eq!(m.program, Path::new("/usr/lib/jvm/j/bin/java"));
        assert_eq!(m.args.last().map(String::as_str), Some("/conf/zk-1.cfg"));
        assert!(
            m.args.iter().any(|a| a == "-XX:+UseSerialGC"),
            "{:?}",
            m.args
        );
    }

    #[test]
    fn one_member_is_standalone() {
        let at = docker_like(1);
        let cfg = member_config(&at[0], &at);
        assert!(!cfg.contains("server.1"), "{cfg}");
        assert!(!cfg.contains("standaloneEnabled"), "{cfg}");
    }
}
