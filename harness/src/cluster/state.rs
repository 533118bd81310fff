//! The state directory of the local cluster: where each component keeps its data
//! and log, and `state.json` — what `up` started (pids, addresses, the token, the
//! CA, the pause image) — which `status` and `down` read, so they work from any
//! later command, long after `up` has exited.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

const STATE_FILE: &str = "state.json";
/// What `up` creates in the state directory, and all `down` removes: a `--dir`
/// given by a user may hold other files, which stay.
pub const ENTRIES: &[&str] = &[
    STATE_FILE,
    "kubeconfig",
    "etcd",
    "apiserver",
    "kubelet",
    "logs",
];

/// `$CACHE/cluster` (`~/.cache/fencecheck/cluster` unless FENCECHECK_CACHE or
/// XDG_CACHE_HOME say otherwise).
pub fn default_dir() -> PathBuf {
    crate::systems::etcd::provision::cache_dir().join("cluster")
}

/// One started process: its pid, and what it serves on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    pub pid: u32,
    pub address: String,
    pub log: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// The state directory (absolute): every component's command line names it,
    /// which is how a pid is told from a reused one.
    pub dir: PathBuf,
    pub etcd: Option<Component>,
    pub apiserver: Option<Component>,
    pub kubelet: Option<Component>,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    pub token: String,
    pub ca_pem: String,
    pub node: String,
    pub pause_image: String,
    pub kubeconfig: PathBuf,
}

impl State {
    pub fn file(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// The state in `dir`, or None when there is none (never started, or down).
    pub fn load(dir: &Path) -> Result<Option<State>> {
        let f = State::file(dir);
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", f.display())),
        };
        let s = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a cluster state file", f.display()))?;
        Ok(Some(s))
    }

    /// Written after each component starts, so a `down` after a failed `up`
    /// still finds what was started.
    pub fn save(&self) -> Result<()> {
        let f = State::file(&self.dir);
        let tmp = f.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self).context("cluster state as JSON")?;
        std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &f).with_context(|| format!("cannot write {}", f.display()))?;
        Ok(())
    }

    pub fn components(&self) -> impl Iterator<Item = &Component> {
        [&self.etcd, &self.apiserver, &self.kubelet]
            .into_iter()
            .flatten()
    }
}

/// `dir` as an absolute path (created if missing), so the path in every
/// component's command line is the same whichever directory a command runs in.
pub fn absolute(dir: &Path, create: bool) -> Result<PathBuf> {
    if create {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if dir.exists() {
        return dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()));
    }
    let cwd = std::env::current_dir().context("the current directory")?;
    Ok(cwd.join(dir))
}
