//! The Redis image's build context: Debian's `redis-server` (the binary its
//! symlink names: Debian ships one binary under several names, and Redis picks its
//! role from the name it is run by, so it goes in as `/usr/bin/redis-server`), the
//! libraries `ldd` lists and the ELF interpreter, at their host paths. Redis runs
//! as root in its container (it needs no user entry); its config file is
//! bind-mounted by the run.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use crate::image_context::{add_file, shared_libraries, BuildContext};

/// The image's build file (`ci/images/`, included so the harness builds it).
pub const REDIS_DOCKERFILE: &str = include_str!("../../../../ci/images/redis.Dockerfile");

use super::members::REDIS_SERVER;

pub(crate) fn context() -> Result<BuildContext> {
    let bin = Path::new(REDIS_SERVER);
    let mut files: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    add_file(&mut files, bin, bin)?;
    for lib in shared_libraries(bin)? {
        add_file(&mut files, &lib, &lib)?;
    }
    Ok(BuildContext {
        dockerfile: REDIS_DOCKERFILE,
        files,
        mtimes: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_has_the_server_under_its_server_name() {
        if !Path::new(REDIS_SERVER).exists() {
            eprintln!("skipped: no redis-server on this machine");
            return;
        }
        let ctx = context().expect("context");
        assert!(ctx.files.contains_key("rootfs/usr/bin/redis-server"));
        assert!(ctx.files.contains_key("rootfs/lib64/ld-linux-x86-64.so.2"));
        // The member spec starts it by that name (the image has no entrypoint).
        assert!(!REDIS_DOCKERFILE
            .lines()
            .any(|l| l.starts_with("ENTRYPOINT")));
    }
}
