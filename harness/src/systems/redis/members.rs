//! Redis's instances, for any backend: Debian's `redis-server` (7.0), one
//! instance per member, each with its own config (`redis-N.conf`): the address it
//! binds, its data directory, no RDB snapshots (`save ""`), the AOF as `[lock]
//! persistence` says, and keyspace events for expired keys, which the observer
//! needs. Redlock's instances are independent masters: no replication, no peers
//! (so no peer ports). With the AOF on, a killed instance started again finds it
//! in its data directory; with it off, nothing, on either backend.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::scenario::{Persistence, Scenario};
use crate::systems::members::{
    Deploy, FilePlace, MemberFile, MemberSpec, Placement, Ports, Readiness,
};

pub const PORTS: Ports = Ports {
    client: 6379,
    peers: &[],
};
/// Logged once the instance serves (after it has loaded its AOF, if any).
const READY_LINE: &str = "Ready to accept connections";
pub(super) const REDIS_SERVER: &str = "/usr/bin/redis-server";
use crate::clockshim::{path as clockshim_path, OFFSET_ENV as CLOCK_OFFSET_ENV};

pub struct RedisDeploy {
    version: String,
    /// clockshim, when the scenario steps a clock: preloaded into every instance
    /// (so any member can be the target, and a restarted one keeps its clock).
    clockshim: Option<PathBuf>,
}

impl RedisDeploy {
    /// Finds Debian's redis-server (`ci/bootstrap.sh` installs it) and asks it for
    /// its version.
    pub fn find(say: &dyn Fn(&str)) -> Result<RedisDeploy> {
        if !Path::new(REDIS_SERVER).exists() {
            bail!("no {REDIS_SERVER}: run ci/bootstrap.sh --system redis (apt-get install redis-server)");
        }
        let out = std::process::Command::new(REDIS_SERVER)
            .arg("--version")
            .output()
            .context("cannot run redis-server --version")?;
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 ..."
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split("v=")
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .with_context(|| format!("cannot read redis-server's version from {text:?}"))?
            .to_string();
        say(&format!("redis-server {version} ({REDIS_SERVER})"));
        Ok(RedisDeploy {
            version,
            clockshim: None,
        })
    }

    /// With clockshim under every instance when the scenario steps a clock.
    pub fn with_clock_jumps(mut self, s: &Scenario, say: &dyn Fn(&str)) -> Result<RedisDeploy> {
        let jumps = s
            .faults
            .iter()
            .any(|f| f.kind == crate::scenario::FaultKind::ClockJump);
        let clockshim = if jumps {
            let shim = clockshim_path();
            if !shim.is_file() {
                bail!(
                    "clock-jump needs clockshim at {}: run ci/bootstrap.sh --fault clock-jump (it builds \
                     clockshim/clockshim.c with cc)",
                    shim.display()
                );
            }
            say(&format!(
                "clockshim under every instance ({})",
                shim.display()
            ));
            Some(shim)
        } else {
            None
        };
        self.clockshim = clockshim;
        Ok(self)
    }

    /// e.g. "7.0.15" (the docker backend tags its image with it).
    pub fn version(&self) -> &str {
        &self.version
    }
}

/// Instance `i`'s config. `appendfsync always` fsyncs before the reply, so every
/// acknowledged INCR survives a SIGKILL; `everysec` may lose the last second;
/// `appendonly no` with `save ""` keeps nothing.
pub fn instance_config(client: SocketAddr, data: &Path, p: Persistence) -> String {
    let aof = match p {
        Persistence::None => "appendonly no\n",
        Persistence::AofEverysec => "appendonly yes\nappendfsync everysec\n",
        Persistence::AofAlways => "appendonly yes\nappendfsync always\n",
    };
    format!(
        "bind {}\nport {}\nprotected-mode no\ndaemonize no\nlogfile \"\"\n\
         dir {}\nsave \"\"\n{aof}notify-keyspace-events E$gx\n",
        client.ip(),
        client.port(),
        data.display(),
    )
}

impl Deploy for RedisDeploy {
    fn version(&self) -> &str {
        &self.version
    }
    fn image_name(&self) -> &'static str {
        "redis"
    }
    fn members(&self, s: &Scenario, at: &[Placement]) -> Result<Vec<MemberSpec>> {
        let persistence = s.lock.persistence.unwrap_or_default();
        Ok(member_specs(self.clockshim.as_deref(), persistence, at))
    }
    fn image(&self) -> Result<crate::image_context::BuildContext> {
        crate::systems::redis::image::context()
            .with_context(|| format!("cannot package redis-server {} for an image", self.version))
    }
}

fn member_specs(
    clockshim: Option<&Path>,
    persistence: Persistence,
    at: &[Placement],
) -> Vec<MemberSpec> {
    at.iter()
        .map(|p| {
            let i = p.index;
            let cfg = format!("redis-{i}.conf");
            let config = instance_config(p.client_bind, Path::new(&p.data_dir), persistence);
            let mut files = vec![MemberFile {
                name: cfg.clone(),
                place: FilePlace::Config,
                contents: config,
            }];
            // The offset file starts at 0 (no step yet); the nemesis rewrites it.
            let mut env = Vec::new();
            let mut clock_file = None;
            if let Some(shim) = clockshim {
                let clock = format!("redis-{i}.clock-offset-ns");
                env.push(("LD_PRELOAD".to_string(), shim.display().to_string()));
                env.push((CLOCK_OFFSET_ENV.to_string(), p.config_file(&clock)));
                files.push(MemberFile {
                    name: clock.clone(),
                    place: FilePlace::Config,
                    contents: "0\n".into(),
                });
                clock_file = Some(clock);
            }
            MemberSpec {
                name: format!("redis {i}"),
                program: PathBuf::from(REDIS_SERVER),
                args: vec![p.config_file(&cfg)],
                env,
                files,
                ready: Readiness {
                    line: READY_LINE,
                    http: None,
                },
                clock_file,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker_like(n: usize) -> Vec<Placement> {
        crate::systems::members::docker_like(n, 6379, &[])
    }

    #[test]
    fn each_instance_listens_everywhere_and_keeps_its_data_in_its_data_dir() {
        let s = member_specs(None, Persistence::AofAlways, &docker_like(3));
        assert_eq!(s.len(), 3);
        let cfg = &s[2].files[0];
        assert_eq!(
            (cfg.name.as_str(), cfg.place),
            ("redis-2.conf", FilePlace::Config)
        );
        for line in [
            "bind 0.0.0.0",
            "port 6379",
            "dir /data",
            "appendonly yes",
            "appendfsync always",
            "notify-keyspace-events E$gx",
        ] {
            assert!(
                cfg.contents.lines().any(|l| l == line),
                "{line} not in:\n{}",
                cfg.contents
            );
        }
        // By its server name: Redis picks its role from the name it is run by.
        assert_eq!(s[2].program, Path::new(REDIS_SERVER));
        assert_eq!(s[2].args, vec!["/conf/redis-2.conf".to_string()]);
        assert!(s[2].env.is_empty() && s[2].clock_file.is_none());
    }

    #[test]
    fn under_clockshim_each_instance_has_its_offset_file() {
        let s = member_specs(
            Some(Path::new("/x/libclockshim.so")),
            Persistence::None,
            &docker_like(1),
        );
        assert_eq!(s[0].clock_file.as_deref(), Some("redis-0.clock-offset-ns"));
        assert!(s[0].env.contains(&(
            CLOCK_OFFSET_ENV.into(),
            "/conf/redis-0.clock-offset-ns".into()
        )));
    }
}
