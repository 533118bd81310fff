//! The ZooKeeper image's build context: the host's JRE, the ZooKeeper jars and
//! everything they load, copied at their host paths into a `FROM scratch` image,
//! so the container runs the very command line the process backend runs.
//!
//! - The JRE (the home of `/usr/bin/java`): `bin/java`, `lib/` (the runtime image
//!   `modules`, the native libraries, `jvm.cfg`, `security/`, `server/`) and
//!   `conf/`, symlinks into /etc followed (Debian keeps the config there). Left out:
//!   the desktop natives (AWT, sound, fonts, images, smart cards, accessibility),
//!   which a headless server never loads and which would pull in X11, ALSA and
//!   GLib; and `ct.sym` and `src.zip`, which only the compiler and IDEs read.
//! - The libraries `ldd` lists for `java` and for every native library copied, and
//!   the ELF interpreter.
//! - The jars on the classpath and, transitively, every jar their manifests'
//!   `Class-Path` names (Debian's jars name their dependencies by absolute path);
//!   a named jar the host lacks is skipped, as the JVM itself skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::image_context::{add_file, lexical, shared_libraries_but, sorted_entries, BuildContext};

/// The image's build file (`ci/images/`, included so the harness builds it).
pub const ZOOKEEPER_DOCKERFILE: &str = include_str!("../../../../ci/images/zookeeper.Dockerfile");

/// Native libraries of the desktop modules (java.desktop, java.smartcardio,
/// jdk.accessibility): never loaded by a server without a display.
const DESKTOP_NATIVES: &[&str] = &[
    "libatk-wrapper.so",
    "libawt.so",
    "libawt_headless.so",
    "libawt_xawt.so",
    "libfontmanager.so",
    "libj2pcsc.so",
    "libjavajpeg.so",
    "libjawt.so",
    "libjsound.so",
    "liblcms.so",
    "libmlib_image.so",
    "libsplashscreen.so",
];
/// Files of `lib/` that only development tools read.
const TOOL_FILES: &[&str] = &["ct.sym", "src.zip"];

/// The build context for `java` (a path to the launcher, symlinks allowed) running
/// the jars of `classpath` (`:`-separated absolute paths).
pub(crate) fn context(java: &Path, classpath: &str) -> Result<BuildContext> {
    let launcher = std::fs::canonicalize(java)
        .with_context(|| format!("cannot resolve {}", java.display()))?;
    let home = launcher
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} is not in a JRE's bin/", launcher.display()))?
        .to_path_buf();
    let mut files: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    let mut natives = vec![launcher.clone()];
    add_file(&mut files, &launcher, &launcher)?;
    for dir in ["lib", "conf"] {
        add_tree(&mut files, &home.join(dir), &mut natives)?;
    }
    for bin in &natives {
        for lib in shared_libraries_but(bin, &["libjvm.so"])? {
            add_file(&mut files, &lexical(&lib), &lib)?;
        }
    }
    for jar in jar_closure(classpath)? {
        add_file(&mut files, &jar, &jar)?;
    }
    Ok(BuildContext {
        dockerfile: ZOOKEEPER_DOCKERFILE,
        files,
        mtimes: Default::default(),
    })
}

/// Every file under `dir` at its own path (symlinks followed, dangling ones and the
/// left-out files skipped); native libraries are also noted in `natives`.
fn add_tree(
    files: &mut BTreeMap<String, (u32, Vec<u8>)>,
    dir: &Path,
    natives: &mut Vec<PathBuf>,
) -> Result<()> {
    for (p, name, meta) in sorted_entries(dir)? {
        if DESKTOP_NATIVES.contains(&name.as_str()) || TOOL_FILES.contains(&name.as_str()) {
            continue;
        }
        if meta.is_dir() {
            add_tree(files, &p, natives)?;
        } else if meta.is_file() {
            add_file(files, &p, &p)?;
            if name.ends_with(".so") {
                natives.push(p);
            }
        }
    }
    Ok(())
}

/// The jars of `classpath` and every jar their manifests' `Class-Path` names,
/// transitively; the ones the host does not have are left out (the JVM ignores
/// them too).
fn jar_closure(classpath: &str) -> Result<BTreeSet<PathBuf>> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<PathBuf> = classpath
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    let first: BTreeSet<PathBuf> = todo.iter().cloned().collect();
    while let Some(jar) = todo.pop() {
        if seen.contains(&jar) {
            continue;
        }
        if !jar.is_file() {
            if first.contains(&jar) {
                bail!("{} is on the classpath but missing", jar.display());
            }
            tracing::debug!("{} is named by a manifest but missing", jar.display());
            continue;
        }
        let bytes =
            std::fs::read(&jar).with_context(|| format!("cannot read {}", jar.display()))?;
        let manifest = read_entry(&bytes, "META-INF/MANIFEST.MF")
            .with_context(|| format!("cannot read the manifest of {}", jar.display()))?;
        let dir = jar.parent().unwrap_or(Path::new("/")).to_path_buf();
        for entry in class_path(&String::from_utf8_lossy(&manifest.unwrap_or_default())) {
            // Relative entries are relative to the jar's directory.
            todo.push(lexical(&dir.join(entry)));
        }
        seen.insert(jar);
    }
    Ok(seen)
}

/// The entries of a manifest's `Class-Path` (continuation lines start with a space).
fn class_path(manifest: &str) -> Vec<String> {
    let mut value: Option<String> = None;
    for line in manifest.lines() {
        let line = line.trim_end_matches('\r');
        match &mut value {
            Some(v) if line.starts_with(' ') => v.push_str(&line[1..]),
            Some(_) => break,
            None => {
                if let Some(rest) = line.strip_prefix("Class-Path:") {
                    value = Some(rest.trim_start().to_string());
                }
            }
        }
    }
    value
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
}

/// One entry of a zip archive (stored or deflated), found through the central
/// directory; `None` when the archive has no such entry. Enough for a jar's
/// manifest, without a zip library.
fn read_entry(zip: &[u8], name: &str) -> Result<Option<Vec<u8>>> {
    // End of central directory: signature PK\5\6, within the last 64 KiB + 22 bytes.
    let from = zip.len().saturating_sub(65_557);
    let eocd = (from..zip.len().saturating_sub(21))
        .rev()
        .find(|&i| zip[i..].starts_with(b"PK\x05\x06"))
        .context("not a zip archive (no end of central directory)")?;
    let count = u16_at(zip, eocd + 10).context("truncated zip")?;
    let mut at = u32_at(zip, eocd + 16).context("truncated zip")?;
    for _ in 0..count {
        if !zip.get(at..).is_some_and(|r| r.starts_with(b"PK\x01\x02")) {
            bail!("corrupt zip central directory");
        }
        let method = u16_at(zip, at + 10).context("truncated zip")?;
        let size = u32_at(zip, at + 20).context("truncated zip")?;
        let name_len = u16_at(zip, at + 28).context("truncated zip")?;
        let extra_len = u16_at(zip, at + 30).context("truncated zip")?;
        let comment_len = u16_at(zip, at + 32).context("truncated zip")?;
        let local = u32_at(zip, at + 42).context("truncated zip")?;
        let entry_name = zip
            .get(at + 46..at + 46 + name_len)
            .context("truncated zip")?;
        at += 46 + name_len + extra_len + comment_len;
        if entry_name != name.as_bytes() {
            continue;
        }
        // The local header's own name and extra lengths place the data.
        let l_name = u16_at(zip, local + 26).context("truncated zip")?;
        let l_extra = u16_at(zip, local + 28).context("truncated zip")?;
        let start = local + 30 + l_name + l_extra;
        let data = zip.get(start..start + size).context("truncated zip")?;
        return match method {
            0 => Ok(Some(data.to_vec())),
            8 => {
                let mut out = Vec::new();
                flate2::read::DeflateDecoder::new(data)
                    .read_to_end(&mut out)
                    .context("cannot inflate")?;
                Ok(Some(out))
            }
            m => bail!("zip compression method {m} is not supported"),
        };
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_path_follows_continuation_lines() {
        let m = "Manifest-Version: 1.0\r\nClass-Path: /usr/share/java/a.j\r\n ar b.jar\r\n\
                 Created-By: x\r\n";
        assert_eq!(class_path(m), vec!["/usr/share/java/a.jar", "b.jar"]);
        assert!(class_path("Manifest-Version: 1.0\n").is_empty());
    }

    #[test]
    fn paths_are_normalized_lexically() {
        assert_eq!(
            lexical(Path::new("/usr/lib/jvm/j/bin/../lib/libjli.so")),
            PathBuf::from("/usr/lib/jvm/j/lib/libjli.so")
        );
    }

    #[test]
    fn a_stored_and_a_deflated_entry_are_read() {
        use std::io::Write;
        // A zip with two entries built by hand: "a" stored, "b" deflated.
        let mut deflated = flate2::write::DeflateEncoder::new(Vec::new(), Default::default());
        deflated.write_all(b"hello hello hello").expect("deflate");
        let deflated = deflated.finish().expect("deflate");
        let entries: [(&[u8], u16, Vec<u8>); 2] =
            [(b"a", 0, b"stored".to_vec()), (b"b", 8, deflated)];
        let (mut zip, mut central) = (Vec::new(), Vec::new());
        for (name, method, data) in &entries {
            let local = zip.len() as u32;
            zip.extend_from_slice(b"PK\x03\x04");
            zip.extend_from_slice(&[0; 4]);
            zip.extend_from_slice(&method.to_le_bytes());
            zip.extend_from_slice(&[0; 12]);
            zip.extend_from_slice(&(data.len() as u32).to_le_bytes());
            zip.extend_from_slice(&(name.len() as u16).to_le_bytes());
            zip.extend_from_slice(&[0; 2]);
            zip.extend_from_slice(name);
            zip.extend_from_slice(data);
            central.extend_from_slice(b"PK\x01\x02");
            central.extend_from_slice(&[0; 6]);
            central.extend_from_slice(&method.to_le_bytes());
            central.extend_from_slice(&[0; 8]);
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&[0; 4]);
            central.extend_from_slice(&(name.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0; 12]);
            central.extend_from_slice(&local.to_le_bytes());
            central.extend_from_slice(name);
        }
        let cd_at = zip.len() as u32;
        zip.extend_from_slice(&central);
        zip.extend_from_slice(b"PK\x05\x06");
        zip.extend_from_slice(&[0; 6]);
        zip.extend_from_slice(&2u16.to_le_bytes());
        zip.extend_from_slice(&(central.len() as u32).to_le_bytes());
        zip.extend_from_slice(&cd_at.to_le_bytes());
        zip.extend_from_slice(&[0; 2]);
        assert_eq!(read_entry(&zip, "a").expect("a"), Some(b"stored".to_vec()));
        assert_eq!(
            read_entry(&zip, "b").expect("b"),
            Some(b"hello hello hello".to_vec())
        );
        assert_eq!(read_entry(&zip, "c").expect("c"), None);
    }
}
