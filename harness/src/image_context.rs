//! What an image is built from: a [`BuildContext`] (a Dockerfile and files) and
//! the ways a lock system's or a resource's deployment fills one with its
//! program and what that loads (`add_file`, `shared_libraries`, `sorted_entries`,
//! `program_context`). The systems' and resources' folders build their contexts
//! with these alone; `images.rs` builds the images from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// A build context: Dockerfile plus files (context path → (mode, bytes)).
pub struct BuildContext {
    pub(crate) dockerfile: &'static str,
    pub(crate) files: BTreeMap<String, (u32, Vec<u8>)>,
    /// Files whose modification time the image must keep (seconds since the
    /// epoch); every other entry gets 0, so a build is the same wherever it runs.
    /// An adapter's runtime keeps its own: Python trusts a `.pyc` only while its
    /// source's mtime is the one compiled, and would compile every module again
    /// at each start of a pod.
    pub(crate) mtimes: BTreeMap<String, u64>,
}

impl BuildContext {
    pub(super) fn hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"Dockerfile\0");
        h.update(self.dockerfile.as_bytes());
        for (path, (mode, bytes)) in &self.files {
            h.update(b"\0file\0");
            h.update(path.as_bytes());
            h.update(format!("\0{mode:o}\0{}\0", bytes.len()).as_bytes());
            h.update(bytes);
        }
        // Only when some are kept: the other images' hashes stay as they were.
        for (path, mtime) in &self.mtimes {
            h.update(format!("\0mtime\0{path}\0{mtime}").as_bytes());
        }
        let d = h.finalize();
        d.iter().take(6).map(|b| format!("{b:02x}")).collect()
    }

    pub(super) fn tar(&self) -> Result<Vec<u8>> {
        let mut b = tar::Builder::new(Vec::new());
        let add =
            |b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, bytes: &[u8]| -> Result<()> {
                let mut hdr = tar::Header::new_gnu();
                hdr.set_size(bytes.len() as u64);
                hdr.set_mode(mode);
                hdr.set_mtime(self.mtimes.get(path).copied().unwrap_or(0));
                hdr.set_cksum();
                b.append_data(&mut hdr, path, bytes)
                    .with_context(|| format!("tar {path}"))
            };
        add(&mut b, "Dockerfile", 0o644, self.dockerfile.as_bytes())?;
        for (path, (mode, bytes)) in &self.files {
            if *mode == LINK_MODE {
                add_link(&mut b, path, bytes)?;
            } else {
                add(&mut b, path, *mode, bytes)?;
            }
        }
        b.into_inner().context("tar")
    }
}

/// The mode of a symbolic link in a [`BuildContext`]'s files: its bytes are the
/// link's target (an adapter's tree keeps its links inside itself as links).
pub(crate) const LINK_MODE: u32 = 0o120777;

fn add_link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &[u8]) -> Result<()> {
    let target = std::str::from_utf8(target).with_context(|| format!("link {path}"))?;
    let mut hdr = tar::Header::new_gnu();
    hdr.set_entry_type(tar::EntryType::Symlink);
    hdr.set_size(0);
    hdr.set_mode(0o777);
    hdr.set_mtime(0);
    b.append_link(&mut hdr, path, target)
        .with_context(|| format!("tar link {path} -> {target}"))
}

/// `/a/bin/../lib/x` → `/a/lib/x`, without touching the file system (`ldd` prints
/// a library found through an `$ORIGIN/../lib` run path so).
pub(crate) fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `bin` at its path on this machine, plus, for a dynamic binary, what `ldd`
/// lists (etcd: the official static 3.5.1 needs nothing else, Debian's 3.4.23 its
/// ELF interpreter and libraries).
pub(crate) fn program_context(bin: &Path, dockerfile: &'static str) -> Result<BuildContext> {
    let mut files = BTreeMap::new();
    add_file(&mut files, bin, bin)?;
    for lib in shared_libraries(bin)? {
        add_file(&mut files, &lib, &lib)?;
    }
    Ok(BuildContext {
        dockerfile,
        files,
        mtimes: Default::default(),
    })
}

/// Puts the content of `from` (symlinks followed) at `at` under `rootfs/` in the
/// image, executable if `from` is; a path already there is kept.
pub(crate) fn add_file(
    files: &mut BTreeMap<String, (u32, Vec<u8>)>,
    at: &Path,
    from: &Path,
) -> Result<()> {
    let rel = at.to_string_lossy().trim_start_matches('/').to_string();
    let key = format!("rootfs/{rel}");
    if files.contains_key(&key) {
        return Ok(());
    }
    let meta =
        std::fs::metadata(from).with_context(|| format!("cannot stat {}", from.display()))?;
    let mode = if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0 {
        0o755
    } else {
        0o644
    };
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    files.insert(key, (mode, bytes));
    Ok(())
}

/// The paths of `dir`'s entries in name order.
pub(super) fn sorted_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    paths.sort();
    Ok(paths)
}

/// The entries of `dir` in name order, each with its name and metadata (symlinks
/// followed; a dangling one — e.g. to a package that is not installed — left out),
/// for the images that copy a whole directory tree.
pub(crate) fn sorted_entries(dir: &Path) -> Result<Vec<(PathBuf, String, std::fs::Metadata)>> {
    Ok(sorted_paths(dir)?
        .into_iter()
        .filter_map(|p| {
            let meta = std::fs::metadata(&p).ok()?;
            let name = p.file_name()?.to_string_lossy().to_string();
            Some((p, name, meta))
        })
        .collect())
}

/// The ELF interpreter and libraries a dynamic binary needs, as `ldd` lists them
/// (empty for a static binary). Paths as the binary asks for them; their contents are
/// read through any symlink.
pub(crate) fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    shared_libraries_but(bin, &[])
}

/// [`shared_libraries`], where the libraries named in `preloaded` may be missing:
/// the process has loaded them before it loads `bin` (the JRE's own libraries
/// need `libjvm.so`, which `ldd` cannot find, without being told where it is).
pub(crate) fn shared_libraries_but(bin: &Path, preloaded: &[&str]) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(bin).output();
    let out = match out {
        Ok(o) => o,
        // No ldd: only a static binary can be packaged.
        Err(_) => return Ok(Vec::new()),
    };
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!("ldd {} failed: {}", bin.display(), text.trim());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let path = match line.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        } else if line.contains("not found") {
            if preloaded.iter().any(|l| line.starts_with(&format!("{l} "))) {
                continue;
            }
            bail!("{} needs a library that is missing: {line}", bin.display());
        }
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_follows_content() {
        let mk = |b: &[u8]| {
            let mut files = BTreeMap::new();
            files.insert("x".to_string(), (0o755, b.to_vec()));
            BuildContext {
                dockerfile: "FROM scratch\n",
                files,
                mtimes: Default::default(),
            }
        };
        assert_eq!(mk(b"a").hash(), mk(b"a").hash());
        assert_ne!(mk(b"a").hash(), mk(b"b").hash());
        assert_eq!(mk(b"a").hash().len(), 12);
    }

    #[test]
    fn ldd_lists_absolute_paths() {
        // /proc/self/exe is this test binary: dynamic; its libraries exist.
        let libs = shared_libraries(Path::new("/proc/self/exe")).unwrap_or_default();
        assert!(libs.iter().all(|l| l.is_absolute()));
    }
}
