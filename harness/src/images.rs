//! The images of the docker backend, built locally `FROM scratch` (no registry is
//! ever asked: nothing is pulled, not even a base image).
//!
//! - each lock system's: what its deployment packages (`Deploy::image`, in its
//!   folder under `systems/`), its program at the path it has on this machine, so
//!   its backend-neutral member spec runs there unchanged.
//! - storage: the `fencecheck-storage` service built as a static binary
//!   (`-C target-feature=+crt-static`, target x86_64-unknown-linux-gnu) in a target
//!   directory under fencecheck's cache, so a rebuild is incremental.
//! - reaper: `fencecheck-reaper`, built the same way (see `reaper/`).
//! - a fenced resource's own server (`resources::container`): what its
//!   resource packages, in its folder under `resources/`.
//!
//! Every image is tagged by the SHA-256 of what goes into it (the Dockerfile and each
//! file of the build context with its path and mode): an unchanged binary reuses the
//! image, a changed one gets a new tag.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use testcontainers::bollard::query_parameters::BuildImageOptionsBuilder;
use testcontainers::bollard::Docker;

use crate::image_context::{
    add_file, lexical, shared_libraries, shared_libraries_but, sorted_paths, BuildContext,
    LINK_MODE,
};
use crate::resources::container::ContainerStorage;
use crate::systems::members::Deploy;

pub const STORAGE_DOCKERFILE: &str = include_str!("../../ci/images/storage.Dockerfile");
pub const REAPER_DOCKERFILE: &str = include_str!("../../ci/images/reaper.Dockerfile");
pub const AGENT_STORAGE_DOCKERFILE: &str = include_str!("../../ci/images/agent-storage.Dockerfile");

/// Label on every image fencecheck builds (`fencecheck clean --images` removes them).
pub const IMAGE_LABEL: &str = "fencecheck.image";

/// The static-target triple: explicit, so that build scripts and proc macros stay
/// dynamic while the storage binary is linked statically.
const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";

/// An image ready to run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Image {
    pub tag: String,
    pub id: String,
    /// false: built now; true: an image with this content hash was already there.
    pub reused: bool,
}

/// A lock system's image (`fencecheck/<name>:<version>-<hash>`), built when
/// missing from the context its deployment packages (its program and what it
/// loads, at their paths on this machine).
pub async fn system_image(
    docker: &Docker,
    deploy: &dyn Deploy,
    say: &dyn Fn(&str),
) -> Result<Image> {
    let ctx = tokio::task::block_in_place(|| deploy.image())?;
    let name = deploy.image_name();
    let tag = format!("fencecheck/{name}:{}-{}", deploy.version(), ctx.hash());
    ensure(docker, &tag, name, &ctx, say).await
}

/// A fenced resource's own server image (`fencecheck/<name>:<version>-<hash>`),
/// built when missing from the context its resource packages.
pub async fn resource_image(
    docker: &Docker,
    storage: &dyn ContainerStorage,
    say: &dyn Fn(&str),
) -> Result<Image> {
    let (version, ctx) = tokio::task::block_in_place(|| storage.image())?;
    let name = storage.name();
    let tag = format!("fencecheck/{name}:{version}-{}", ctx.hash());
    ensure(docker, &tag, name, &ctx, say).await
}

/// The storage image, built when missing (the static binary is built, or brought up
/// to date, first: cargo does nothing when the source has not changed).
pub async fn storage_image(docker: &Docker, say: &dyn Fn(&str)) -> Result<Image> {
    static_image(
        docker,
        "fencecheck-storage",
        "storage",
        STORAGE_DOCKERFILE,
        say,
    )
    .await
}

/// The reaper image, built when missing, like the storage image.
pub async fn reaper_image(docker: &Docker, say: &dyn Fn(&str)) -> Result<Image> {
    static_image(
        docker,
        "fencecheck-reaper",
        "reaper",
        REAPER_DOCKERFILE,
        say,
    )
    .await
}

/// The storage behind the in-pod fault agent (`agent/`, issue #20), tagged
/// `fencecheck/agent-storage:<hash>`: both static binaries, the agent the entry
/// point (`run -- /fencecheck-storage`), the storage's flags the container's args.
pub async fn agent_storage_image(docker: &Docker, say: &dyn Fn(&str)) -> Result<Image> {
    let mut files = BTreeMap::new();
    for package in ["fencecheck-agent", "fencecheck-storage"] {
        let bin = tokio::task::block_in_place(|| static_binary(package, say))?;
        let bytes =
            std::fs::read(&bin).with_context(|| format!("cannot read {}", bin.display()))?;
        files.insert(package.to_string(), (0o755, bytes));
    }
    let ctx = BuildContext {
        dockerfile: AGENT_STORAGE_DOCKERFILE,
        files,
        mtimes: Default::default(),
    };
    let tag = format!("fencecheck/agent-storage:{}", ctx.hash());
    ensure(docker, &tag, "agent-storage", &ctx, say).await
}

/// A lock system's image for the kubernetes backend
/// (`fencecheck/<name>-pod:<version>-<hash>`): the system image's files and the
/// static in-pod agent (`agent/`) at `/fencecheck-agent`, which the pod runs as
/// its entry point with the member's program under it, and clockshim at its path
/// when it is built.
pub async fn pod_image(docker: &Docker, deploy: &dyn Deploy, say: &dyn Fn(&str)) -> Result<Image> {
    let mut ctx = tokio::task::block_in_place(|| deploy.image())?;
    let agent = tokio::task::block_in_place(|| static_binary("fencecheck-agent", say))?;
    let bytes =
        std::fs::read(&agent).with_context(|| format!("cannot read {}", agent.display()))?;
    ctx.files
        .insert("rootfs/fencecheck-agent".into(), (0o755, bytes));
    // clockshim at its path on this machine, where a member spec that steps a
    // clock preloads it from (Redis's; it needs only the C library, which every
    // system image holds).
    let shim = crate::clockshim::path();
    if shim.is_file() {
        add_file(&mut ctx.files, &shim, &shim)?;
    }
    let name = deploy.image_name();
    let tag = format!("fencecheck/{name}-pod:{}-{}", deploy.version(), ctx.hash());
    ensure(docker, &tag, name, &ctx, say).await
}

/// The kubernetes backend's worker image (`fencecheck/worker-pod:<hash>`): the
/// libraries `ldd` lists for this fencecheck binary, at their paths on this
/// machine, the static in-pod agent at `/fencecheck-agent` (the pod's entry
/// point, the worker under it), and clockshim at its path when it is built (a
/// worker's clock jump preloads it, as on the other backends). Not the binary
/// itself: the pod mounts it read-only from the node (which is this machine), so
/// the image does not change, and is not read whole, with every build — a debug
/// build's binary is 119 MB, a release one's 224 MB. With `binary` (a node that
/// is not this machine, which does not have it), the binary too, at its path
/// (`fencecheck/worker-pod-remote:<hash>`).
///
/// With `adapter` (a scenario's `[client]` command and its `pod_files`), the
/// adapter too, at its paths (`adapter_files`), tagged
/// `fencecheck/worker-<adapter>-pod:<hash>` (`adapter_name`; `…-pod-remote` with
/// the binary).
pub async fn worker_image(
    docker: &Docker,
    adapter: Option<(&Path, &[PathBuf])>,
    binary: bool,
    say: &dyn Fn(&str),
) -> Result<Image> {
    const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\n";
    let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
    let mut ctx = BuildContext {
        dockerfile: DOCKERFILE,
        files: BTreeMap::new(),
        mtimes: Default::default(),
    };
    for lib in tokio::task::block_in_place(|| shared_libraries(&exe))? {
        add_file(&mut ctx.files, &lib, &lib)?;
    }
    let agent = tokio::task::block_in_place(|| static_binary("fencecheck-agent", say))?;
    add_file(&mut ctx.files, Path::new(AGENT_PATH), &agent)?;
    let shim = crate::clockshim::path();
    if shim.is_file() {
        add_file(&mut ctx.files, &shim, &shim)?;
    }
    if binary {
        add_file(&mut ctx.files, &exe, &exe)?;
    }
    let name = match adapter {
        None if binary => "worker-pod-remote".to_string(),
        None => "worker-pod".to_string(),
        Some((command, files)) => {
            let before: std::collections::HashSet<String> = ctx.files.keys().cloned().collect();
            tokio::task::block_in_place(|| adapter_files(&mut ctx.files, command, files))?;
            keep_own_mtimes(&mut ctx, &before);
            // The name says whether the binary is in it (a node that is not
            // this machine), as `worker-pod-remote` does.
            let remote = if binary { "-remote" } else { "" };
            format!("worker-{}-pod{remote}", adapter_name(command))
        }
    };
    let tag = format!("fencecheck/{name}:{}", ctx.hash());
    ensure(docker, &tag, &name, &ctx, say).await
}

/// The entries added since `before`, each copied from its own path, keep that
/// file's mtime (see [`BuildContext::mtimes`]).
fn keep_own_mtimes(ctx: &mut BuildContext, before: &std::collections::HashSet<String>) {
    for key in ctx.files.keys().filter(|k| !before.contains(*k)) {
        let Some(rel) = key.strip_prefix("rootfs/") else {
            continue;
        };
        if let Ok(m) = std::fs::metadata(format!("/{rel}")) {
            let secs = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            ctx.mtimes.insert(key.clone(), secs);
        }
    }
}

/// An adapter's name for its image's tag: its directory's (a `bin/` skipped)
/// and its program's (`kazoo-client`, `curator`, `go-leaderelection`), in the
/// characters a tag allows.
fn adapter_name(command: &Path) -> String {
    let name = |p: Option<&std::ffi::OsStr>| {
        p.map(|s| s.to_string_lossy().to_lowercase())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
    };
    let stem = name(command.file_stem());
    let mut dir = command.parent();
    if dir.and_then(Path::file_name).is_some_and(|d| d == "bin") {
        dir = dir.and_then(Path::parent);
    }
    let dir = name(dir.and_then(Path::file_name));
    if dir.is_empty() || dir == stem {
        stem
    } else {
        format!("{dir}-{stem}")
    }
}

/// A `[client]` adapter for a worker pod: `command` and each of `extra` at its
/// path — a directory whole — and, for every ELF file among them, the libraries
/// `ldd` lists (one it cannot find is fine when a file of that name is copied:
/// the JRE's libraries find `libjvm.so` by their own run path). A link stays a
/// link when it leads into what is copied anyway: to a place inside its own
/// directory as it is written (a venv's `lib64 -> lib`), into another listed
/// path as a link to where it ends (`/usr/bin/java` → the listed JRE, which finds
/// its home from where it runs); any other link is followed, a dangling one left
/// out.
pub(crate) fn adapter_files(
    files: &mut BTreeMap<String, (u32, Vec<u8>)>,
    command: &Path,
    extra: &[PathBuf],
) -> Result<()> {
    let tops: Vec<&Path> = std::iter::once(command)
        .chain(extra.iter().map(PathBuf::as_path))
        .collect();
    // Where each listed path ends (links resolved).
    let listed = tops
        .iter()
        .map(|t| {
            std::fs::canonicalize(t).with_context(|| format!("cannot resolve {}", t.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut walk = Walk {
        files,
        listed: listed.clone(),
        seen: std::collections::HashSet::new(),
        elves: Vec::new(),
    };
    for (i, (top, real)) in tops.iter().zip(&listed).enumerate() {
        let meta =
            std::fs::metadata(top).with_context(|| format!("cannot stat {}", top.display()))?;
        let link = std::fs::symlink_metadata(top).is_ok_and(|m| m.file_type().is_symlink());
        // A listed link into another listed path.
        let into_other = walk
            .listed
            .iter()
            .enumerate()
            .any(|(j, l)| j != i && real.starts_with(l));
        if link && into_other {
            walk.link(top, real);
        } else if meta.is_dir() {
            walk.tree(top, real)?;
        } else {
            walk.file(top)?;
        }
    }
    let Walk { files, elves, .. } = walk;
    let names: Vec<String> = files
        .keys()
        .filter_map(|k| k.rsplit('/').next())
        .filter(|n| n.contains(".so"))
        .map(str::to_string)
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for elf in &elves {
        for lib in shared_libraries_but(elf, &names)? {
            add_file(files, &lexical(&lib), &lib)?;
        }
    }
    Ok(())
}

/// [`adapter_files`]' walk over what is listed.
struct Walk<'a> {
    files: &'a mut BTreeMap<String, (u32, Vec<u8>)>,
    listed: Vec<PathBuf>,
    /// The directories already walked, so a link back up a tree ends.
    seen: std::collections::HashSet<PathBuf>,
    elves: Vec<PathBuf>,
}

impl Walk<'_> {
    /// `real` is a listed path or inside a listed directory other than `but`.
    fn inside_listed(&self, real: &Path, but: &Path) -> bool {
        self.listed
            .iter()
            .any(|l| l.as_path() != but && real.starts_with(l))
    }

    fn link(&mut self, at: &Path, to: &Path) {
        let rel = at.to_string_lossy().trim_start_matches('/').to_string();
        self.files.insert(
            format!("rootfs/{rel}"),
            (LINK_MODE, to.to_string_lossy().as_bytes().to_vec()),
        );
    }

    fn file(&mut self, p: &Path) -> Result<()> {
        add_file(self.files, p, p)?;
        if is_elf(p) {
            self.elves.push(p.to_path_buf());
        }
        Ok(())
    }

    /// `dir`'s entries at their paths; `root` is where the listed directory ends.
    fn tree(&mut self, dir: &Path, root: &Path) -> Result<()> {
        if let Ok(real) = std::fs::canonicalize(dir) {
            if !self.seen.insert(real) {
                return Ok(());
            }
        }
        for p in sorted_paths(dir)? {
            let link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
            if link {
                let Ok(target) = std::fs::canonicalize(&p) else {
                    continue; // dangling
                };
                if target.starts_with(root) {
                    let to = std::fs::read_link(&p)
                        .with_context(|| format!("cannot read link {}", p.display()))?;
                    self.link(&p, &to);
                    continue;
                }
                if self.inside_listed(&target, root) {
                    self.link(&p, &target);
                    continue;
                }
            }
            let Ok(meta) = std::fs::metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                self.tree(&p, root)?;
            } else if meta.is_file() {
                self.file(&p)?;
            }
        }
        Ok(())
    }
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// A resource's own server for the kubernetes backend
/// (`fencecheck/<name>-pod:<version>-<hash>`, PostgreSQL's): its docker image's
/// build context with the static in-pod agent added at `/fencecheck-agent`.
pub async fn own_storage_pod_image(
    docker: &Docker,
    own: &dyn crate::resources::container::ContainerStorage,
    say: &dyn Fn(&str),
) -> Result<Image> {
    let (version, mut ctx) = tokio::task::block_in_place(|| own.image())?;
    let agent = tokio::task::block_in_place(|| static_binary("fencecheck-agent", say))?;
    add_file(&mut ctx.files, Path::new(AGENT_PATH), &agent)?;
    let tag = format!("fencecheck/{}-pod:{version}-{}", own.name(), ctx.hash());
    ensure(docker, &tag, own.name(), &ctx, say).await
}

/// Where the in-pod agent is in the kubernetes backend's images.
const AGENT_PATH: &str = "/fencecheck-agent";

/// The pod sandbox image of the local Kubernetes cluster (`fencecheck cluster
/// up`): kubelet's `--pod-infra-container-image`, which it would otherwise pull
/// from a registry. It holds `bin`, the tree's `build/pause/linux/pause.c` built
/// static by `ci/kubernetes.sh`, as `/pause`; tagged `fencecheck/pause:<hash>`.
pub async fn pause_image(docker: &Docker, bin: &Path, say: &dyn Fn(&str)) -> Result<Image> {
    const DOCKERFILE: &str = "FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n";
    let bytes = std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?;
    let mut files = BTreeMap::new();
    files.insert("pause".to_string(), (0o755, bytes));
    let ctx = BuildContext {
        dockerfile: DOCKERFILE,
        files,
        mtimes: Default::default(),
    };
    let tag = format!("fencecheck/pause:{}", ctx.hash());
    ensure(docker, &tag, "pause", &ctx, say).await
}

/// An image holding one static binary of this workspace (package and binary
/// `package`), tagged `fencecheck/<what>:<hash>`.
async fn static_image(
    docker: &Docker,
    package: &str,
    what: &str,
    dockerfile: &'static str,
    say: &dyn Fn(&str),
) -> Result<Image> {
    let bin = tokio::task::block_in_place(|| static_binary(package, say))?;
    let bytes = std::fs::read(&bin).with_context(|| format!("cannot read {}", bin.display()))?;
    let mut files = BTreeMap::new();
    files.insert(package.to_string(), (0o755, bytes));
    let ctx = BuildContext {
        dockerfile,
        files,
        mtimes: Default::default(),
    };
    let tag = format!("fencecheck/{what}:{}", ctx.hash());
    ensure(docker, &tag, what, &ctx, say).await
}

async fn ensure(
    docker: &Docker,
    tag: &str,
    what: &str,
    ctx: &BuildContext,
    say: &dyn Fn(&str),
) -> Result<Image> {
    if let Ok(i) = docker.inspect_image(tag).await {
        say(&format!("reusing image {tag}"));
        return Ok(Image {
            tag: tag.to_string(),
            id: i.id.unwrap_or_default(),
            reused: true,
        });
    }
    say(&format!("building image {tag} (FROM scratch, no registry)"));
    let body = ctx.tar()?;
    let mut labels = std::collections::HashMap::new();
    labels.insert(IMAGE_LABEL.to_string(), what.to_string());
    // The classic builder: FROM scratch + COPY needs nothing else, and never pulls.
    let opts = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        // The builder's cache keys a COPY by content, not mtime: a context whose
        // kept mtimes changed would get the layer built with the old ones.
        .nocache(!ctx.mtimes.is_empty())
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(
        opts,
        None,
        Some(testcontainers::bollard::body_full(body.into())),
    );
    while let Some(item) = stream.next().await {
        let info = item.with_context(|| format!("docker build of {tag} failed"))?;
        if let Some(e) = info.error_detail.and_then(|d| d.message) {
            bail!("docker build of {tag} failed: {e}");
        }
        if let Some(s) = info.stream {
            let s = s.trim();
            if s.starts_with("Step ") {
                say(&format!("  {s}"));
            }
        }
    }
    let i = docker
        .inspect_image(tag)
        .await
        .with_context(|| format!("image {tag} was built but cannot be found"))?;
    say(&format!("built image {tag}"));
    Ok(Image {
        tag: tag.to_string(),
        id: i.id.unwrap_or_default(),
        reused: false,
    })
}

/// The fencecheck source tree this binary was built from (the storage and reaper
/// images are built from it).
fn source_root() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("FENCECHECK_SOURCE") {
        return Ok(PathBuf::from(d));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if !root.join("storage").join("Cargo.toml").is_file() {
        bail!(
            "the docker backend builds its storage and reaper images from the fencecheck source tree, \
             which is not at {} (set FENCECHECK_SOURCE to a checkout)",
            root.display()
        );
    }
    Ok(root)
}

/// Builds (or brings up to date) the static binary `package` of this workspace;
/// returns its path.
pub fn static_binary(package: &str, say: &dyn Fn(&str)) -> Result<PathBuf> {
    let root = source_root()?;
    let target_dir = crate::scenario::cache_dir().join("static-target");
    std::fs::create_dir_all(&target_dir)
        .with_context(|| format!("cannot create {}", target_dir.display()))?;
    say(&format!(
        "building the static {package} binary (cargo build --release -p {package} \
         --target {STATIC_TARGET}, +crt-static, in {}; minutes the first time)",
        target_dir.display()
    ));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            package,
            "--bin",
            package,
            "--target",
            STATIC_TARGET,
            "--color",
            "never",
        ])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run cargo to build the static {package} binary"))?;
    let mut tail: Vec<String> = Vec::new();
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines() {
            let line = line.unwrap_or_default();
            let t = line.trim();
            if t.starts_with("Compiling") || t.starts_with("Finished") {
                say(&format!("  {t}"));
            }
            tail.push(line);
            if tail.len() > 30 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().context("cargo build")?;
    if !status.success() {
        bail!(
            "building the static {package} binary failed ({status}):\n{}",
            tail.join("\n")
        );
    }
    let bin = target_dir.join(STATIC_TARGET).join("release").join(package);
    if !bin.is_file() {
        bail!("cargo built nothing at {}", bin.display());
    }
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_is_named_by_its_directory_and_program() {
        let n = |p: &str| adapter_name(Path::new(p));
        assert_eq!(n("/r/clients/kazoo/client.py"), "kazoo-client");
        assert_eq!(n("/r/clients/curator/curator"), "curator");
        assert_eq!(
            n("/r/clients/go-leaderelection/bin/go-leaderelection"),
            "go-leaderelection"
        );
        assert_eq!(n("/usr/bin/My_Adapter"), "usr-my-adapter");
    }

    #[test]
    fn an_adapters_tree_keeps_inner_links_follows_outer_ones_and_brings_its_libraries() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tmp");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let tree = root.join("venv");
        std::fs::create_dir_all(tree.join("lib/site")).expect("mkdir");
        std::fs::write(tree.join("lib/site/mod.py"), "x = 1\n").expect("write");
        symlink("lib", tree.join("lib64")).expect("inner link");
        std::fs::write(root.join("outside.cfg"), "cfg\n").expect("write");
        symlink(root.join("outside.cfg"), tree.join("cfg")).expect("outer link");
        symlink(root.join("gone"), tree.join("dangling")).expect("dangling link");
        // A real dynamic ELF program of this machine, as an interpreter would be.
        let elf = std::fs::canonicalize("/proc/self/exe").expect("this test");
        std::fs::copy(&elf, tree.join("python")).expect("copy");
        let command = root.join("launch");
        std::fs::write(&command, "#!/bin/sh\n").expect("write");
        // Another listed directory, a listed link into it (`/usr/bin/java` into
        // the JRE) and a link from the tree into it.
        let other = root.join("jre");
        std::fs::create_dir_all(other.join("bin")).expect("mkdir");
        std::fs::write(other.join("bin/java"), "jvm\n").expect("write");
        symlink(other.join("bin/java"), root.join("java")).expect("listed link");
        symlink(other.join("bin/java"), tree.join("java")).expect("tree link");

        let mut files = BTreeMap::new();
        let extra = [tree.clone(), other.join("bin/java"), root.join("java")];
        adapter_files(&mut files, &command, &extra).expect("adapter");
        let to_java = other.join("bin/java").display().to_string().into_bytes();
        assert_eq!(
            files.get(&format!("rootfs{}/java", root.display())),
            Some(&(LINK_MODE, to_java.clone()))
        );
        assert_eq!(
            files.get(&format!("rootfs{}/java", tree.display())),
            Some(&(LINK_MODE, to_java))
        );
        let at = |p: &Path| format!("rootfs{}", p.display());
        assert!(files.contains_key(&at(&command)));
        assert!(files.contains_key(&at(&tree.join("lib/site/mod.py"))));
        assert_eq!(
            files.get(&at(&tree.join("lib64"))),
            Some(&(LINK_MODE, b"lib".to_vec())),
            "a link inside the tree stays a link"
        );
        assert_eq!(
            files.get(&at(&tree.join("cfg"))).map(|f| f.1.clone()),
            Some(b"cfg\n".to_vec()),
            "a link out of the tree is followed"
        );
        assert!(!files.contains_key(&at(&tree.join("dangling"))));
        assert!(
            !files.contains_key(&at(&tree.join("lib64/site/mod.py"))),
            "not twice"
        );
        for lib in shared_libraries(&elf).expect("ldd") {
            assert!(
                files.contains_key(&at(&lexical(&lib))),
                "{} missing",
                lib.display()
            );
        }
        // The link is a symlink entry in the build context's tar.
        let ctx = BuildContext {
            dockerfile: "FROM scratch\n",
            files,
            mtimes: Default::default(),
        };
        let tar = ctx.tar().expect("tar");
        let mut a = tar::Archive::new(tar.as_slice());
        let link = a
            .entries()
            .expect("entries")
            .filter_map(|e| e.ok())
            .find(|e| e.path().is_ok_and(|p| p.ends_with("venv/lib64")))
            .expect("lib64 in the tar");
        assert_eq!(link.header().entry_type(), tar::EntryType::Symlink);
        assert_eq!(
            link.link_name().ok().flatten().as_deref(),
            Some(Path::new("lib"))
        );
    }
}

#[cfg(test)]
mod mtime_tests {
    use super::*;

    /// An entry with a kept mtime has it in the build context's tar; the others 0.
    #[test]
    fn kept_mtimes_reach_the_tar_and_the_hash() {
        let mut ctx = BuildContext {
            dockerfile: "FROM scratch\n",
            files: BTreeMap::from([
                ("rootfs/a.py".to_string(), (0o644, b"a".to_vec())),
                ("rootfs/b".to_string(), (0o644, b"b".to_vec())),
            ]),
            mtimes: Default::default(),
        };
        let before = ctx.hash();
        ctx.mtimes.insert("rootfs/a.py".to_string(), 1_700_000_000);
        assert_ne!(
            ctx.hash(),
            before,
            "a kept mtime is part of what the image is"
        );
        let tar = ctx.tar().expect("tar");
        let mut a = tar::Archive::new(tar.as_slice());
        let got: BTreeMap<String, u64> = a
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.path().expect("path").display().to_string(),
                    e.header().mtime().expect("mtime"),
                )
            })
            .collect();
        assert_eq!(got["rootfs/a.py"], 1_700_000_000, "{got:?}");
        assert_eq!(got["rootfs/b"], 0, "{got:?}");
    }

    /// An adapter's files keep their own mtimes; what was there before does not.
    #[test]
    fn an_adapters_files_keep_their_mtimes() {
        let dir = tempfile::tempdir().expect("tmp");
        let py = dir.path().join("lib/m.py");
        std::fs::create_dir_all(py.parent().expect("parent")).expect("mkdir");
        std::fs::write(&py, "x = 1\n").expect("write");
        let cmd = dir.path().join("run.sh");
        std::fs::write(&cmd, "#!/bin/sh\n").expect("write");
        let mut ctx = BuildContext {
            dockerfile: "FROM scratch\n",
            files: BTreeMap::from([("rootfs/x".to_string(), (0o644, b"x".to_vec()))]),
            mtimes: Default::default(),
        };
        let before = ctx.files.keys().cloned().collect();
        adapter_files(&mut ctx.files, &cmd, &[dir.path().join("lib")]).expect("files");
        keep_own_mtimes(&mut ctx, &before);
        let want = std::fs::metadata(&py)
            .and_then(|m| m.modified())
            .expect("mtime")
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let key = format!("rootfs{}", py.display());
        assert_eq!(ctx.mtimes.get(&key), Some(&want), "{:?}", ctx.mtimes);
        assert!(!ctx.mtimes.contains_key("rootfs/x"));
    }
}
