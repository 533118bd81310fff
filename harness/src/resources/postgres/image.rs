//! The PostgreSQL image's build context: Debian's PostgreSQL 15 server at its host
//! paths in a `FROM scratch` image, with a database cluster made by `initdb` while
//! the image is built (the same `initdb` flags as the process backend's).
//!
//! - `postgres` and `initdb` (`/usr/lib/postgresql/15/bin`); the server modules a
//!   bare cluster loads (PL/pgSQL, the snowball dictionaries `initdb` installs, the
//!   encoding conversions, replication's two): no contrib extension, no JIT (its
//!   LLVM would triple the image).
//! - The share directory (`/usr/share/postgresql/15`: `postgres.bki`, the SQL
//!   `initdb` runs, timezone sets) without its manual pages, and the zoneinfo files
//!   of UTC (Debian builds against the system's tzdata).
//! - The libraries `ldd` lists for every binary and module, and the ELF
//!   interpreter.
//! - `/etc/passwd` and `/etc/group` with a `postgres` user (uid [`UID`]):
//!   PostgreSQL refuses to run as root. A `pg_hba.conf` that trusts every address:
//!   the harness and the workers come in through the engine's bridge, never from
//!   127.0.0.1 as `initdb`'s own file expects, and nothing but this machine can
//!   reach the published port (bound on 127.0.0.1).
//! - For the build stage alone: `/bin/sh`, which `initdb` runs `postgres` through
//!   (popen); the image that runs has no shell.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::image_context::{add_file, shared_libraries, sorted_entries, BuildContext};

/// The image's Dockerfile; the build context is assembled by [`context`].
pub const POSTGRES_DOCKERFILE: &str = include_str!("../../../../ci/images/postgres.Dockerfile");

const BIN: &str = "/usr/lib/postgresql/15/bin";
const PKGLIB: &str = "/usr/lib/postgresql/15/lib";
const SHARE: &str = "/usr/share/postgresql/15";
/// The port the server listens on inside its container.
pub const PG_PORT: u16 = 5432;
/// The data directory in the image (the Dockerfile's), where a run's volume goes.
pub const PG_DATA: &str = "/var/lib/postgresql/data";
/// The `postgres` user of the image (the Dockerfile's `--chown` and `USER`).
const UID: u32 = 999;
/// Server modules a cluster with nothing installed loads; besides these, every
/// encoding conversion (`*_and_*.so`).
const MODULES: &[&str] = &[
    "plpgsql.so",
    "dict_snowball.so",
    "libpqwalreceiver.so",
    "pgoutput.so",
];
const ZONES: &[&str] = &["UTC", "Etc/UTC", "GMT", "Etc/GMT"];
const HBA: &str = "# fencecheck: clients come in through the engine's bridge; the published\n\
                   # port is bound on 127.0.0.1 only.\n\
                   local all all trust\n\
                   host all all 0.0.0.0/0 trust\n\
                   host all all ::/0 trust\n";

/// The version of the host's PostgreSQL 15 server, e.g. "15.18".
pub fn version() -> Result<String> {
    let postgres = Path::new(BIN).join("postgres");
    if !postgres.exists() {
        bail!(
            "the PostgreSQL image needs PostgreSQL 15 at {}; install postgresql-15 \
             (ci/bootstrap.sh --system postgres does)",
            postgres.display()
        );
    }
    let out = Command::new(&postgres)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", postgres.display()))?;
    // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("(PostgreSQL)")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
        .with_context(|| format!("cannot read the PostgreSQL version from {text:?}"))
}

pub(crate) fn context() -> Result<BuildContext> {
    let mut files: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    let mut elves = Vec::new();
    for b in ["postgres", "initdb"] {
        let p = Path::new(BIN).join(b);
        add_file(&mut files, &p, &p)?;
        elves.push(p);
    }
    let mut modules: Vec<_> = std::fs::read_dir(PKGLIB)
        .with_context(|| format!("cannot list {PKGLIB}"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {PKGLIB}"))?;
    modules.retain(|p| {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        MODULES.contains(&name.as_ref()) || (name.contains("_and_") && name.ends_with(".so"))
    });
    modules.sort();
    for m in modules {
        add_file(&mut files, &m, &m)?;
        elves.push(m);
    }
    add_tree(&mut files, Path::new(SHARE), &["man"])?;
    for z in ZONES {
        let p = Path::new("/usr/share/zoneinfo").join(z);
        add_file(&mut files, &p, &p)?;
    }
    for elf in &elves {
        for lib in shared_libraries(elf)? {
            add_file(&mut files, &lib, &lib)?;
        }
    }
    let sh = Path::new("/bin/sh");
    for lib in shared_libraries(sh)? {
        add_file(&mut files, &lib, &lib)?;
    }
    let sh_bytes =
        std::fs::read(sh).context("cannot read /bin/sh (initdb runs postgres through it)")?;
    files.insert("initdb/bin/sh".into(), (0o755, sh_bytes));
    // glibc looks users up through NSS; `files` is built into Debian 12's libc,
    // the module is copied where an older one still loads it.
    let nss = Path::new("/lib/x86_64-linux-gnu/libnss_files.so.2");
    if nss.exists() {
        add_file(&mut files, nss, nss)?;
    }
    for (path, text) in [
        (
            "etc/passwd",
            format!("postgres:x:{UID}:{UID}:PostgreSQL:/var/lib/postgresql:/nonexistent\n"),
        ),
        ("etc/group", format!("postgres:x:{UID}:\n")),
        ("etc/nsswitch.conf", "passwd: files\ngroup: files\n".into()),
        ("etc/fencecheck/pg_hba.conf", HBA.into()),
    ] {
        files.insert(format!("rootfs/{path}"), (0o644, text.into_bytes()));
    }
    // The home directory, owned by the postgres user (COPY --chown): initdb
    // creates the data directory in it.
    files.insert(
        "home/README".into(),
        (
            0o644,
            b"The data directory of fencecheck's PostgreSQL image.\n".to_vec(),
        ),
    );
    Ok(BuildContext {
        dockerfile: POSTGRES_DOCKERFILE,
        files,
        mtimes: Default::default(),
    })
}

/// Every file under `dir` at its own path (symlinks followed; directories named in
/// `skip` left out).
fn add_tree(files: &mut BTreeMap<String, (u32, Vec<u8>)>, dir: &Path, skip: &[&str]) -> Result<()> {
    for (p, name, meta) in sorted_entries(dir)? {
        if meta.is_dir() {
            if !skip.contains(&name.as_str()) {
                add_tree(files, &p, skip)?;
            }
        } else if meta.is_file() {
            add_file(files, &p, &p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_has_the_server_its_libraries_and_a_user() {
        if !Path::new(BIN).join("postgres").exists() {
            eprintln!("skipped: no PostgreSQL 15 on this machine");
            return;
        }
        let ctx = context().expect("context");
        for key in [
            "rootfs/usr/lib/postgresql/15/bin/postgres",
            "rootfs/usr/lib/postgresql/15/bin/initdb",
            "rootfs/usr/lib/postgresql/15/lib/plpgsql.so",
            "rootfs/usr/share/postgresql/15/postgres.bki",
            "rootfs/usr/share/zoneinfo/UTC",
            "rootfs/lib64/ld-linux-x86-64.so.2",
            "rootfs/etc/fencecheck/pg_hba.conf",
            "initdb/bin/sh",
        ] {
            assert!(ctx.files.contains_key(key), "{key} missing");
        }
        assert!(!ctx.files.keys().any(|k| k.contains("/man/")));
        assert!(!ctx.files.keys().any(|k| k.contains("llvmjit")));
        let passwd = String::from_utf8_lossy(&ctx.files["rootfs/etc/passwd"].1).to_string();
        assert!(
            passwd.starts_with(&format!("postgres:x:{UID}:{UID}:")),
            "{passwd}"
        );
        // The Dockerfile's owner and user are this uid.
        assert!(POSTGRES_DOCKERFILE.contains(&format!("--chown={UID}:{UID}")));
        assert!(POSTGRES_DOCKERFILE.contains(&format!("USER {UID}:{UID}")));
        assert!(POSTGRES_DOCKERFILE.contains(PG_DATA));
        assert!(version().expect("version").starts_with("15."));
    }
}
