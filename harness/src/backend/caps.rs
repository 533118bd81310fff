//! What each backend can do to the members it runs, declared here so nothing
//! outside the backend has to know it: the plan (`crate::plan`) asks these before
//! anything starts, and the nemesis asks how member links are cut.

use crate::scenario::BackendKind;

/// A backend's declared capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Freeze a member or the storage (SIGSTOP; `docker pause`).
    pub pause: bool,
    /// SIGKILL a member or the storage.
    pub kill: bool,
    /// Start a killed member or the storage again on its data.
    pub restart: bool,
    /// Cut every link into a member.
    pub cut_member_links: bool,
    /// Slow every link into a member (needs fencecheck's proxies in front of it).
    pub slow_member_links: bool,
    /// Members' peer links pass through fencecheck's proxies, so the nemesis cuts
    /// and slows them there; without, the backend cuts them itself (`isolate`).
    pub peer_proxies: bool,
    /// Step a member's wall clock (clockshim preloaded under it).
    pub step_clocks: bool,
}

/// Local processes: every member link has a proxy, every member runs under
/// clockshim where its system reads a wall clock.
pub fn process() -> Caps {
    Caps {
        pause: true,
        kill: true,
        restart: true,
        cut_member_links: true,
        slow_member_links: true,
        peer_proxies: true,
        step_clocks: true,
    }
}

/// Containers on a Docker network: a member is cut off by disconnecting it from
/// the member network, which cannot slow it; no clockshim in the images.
pub fn docker() -> Caps {
    Caps {
        pause: true,
        kill: true,
        restart: true,
        cut_member_links: true,
        slow_member_links: false,
        peer_proxies: false,
        step_clocks: false,
    }
}

/// Pods on the harness's own node, on the host's network: every member link has
/// a proxy of the harness's in front of it, as on the process backend; the
/// in-pod agent pauses, kills and restarts; clockshim is in the member and worker
/// images, preloaded where a scenario steps a clock, its offset file in the run
/// directory every pod mounts.
pub fn kubernetes() -> Caps {
    Caps {
        pause: true,
        kill: true,
        restart: true,
        cut_member_links: true,
        slow_member_links: true,
        peer_proxies: true,
        step_clocks: true,
    }
}

/// What `kind` can do; for `auto`, what either backend can (the run asks again
/// once it has chosen).
pub fn of(kind: BackendKind) -> Caps {
    match kind {
        BackendKind::Process => process(),
        BackendKind::Docker => docker(),
        BackendKind::Kubernetes => kubernetes(),
        BackendKind::Auto => either(process(), docker()),
    }
}

fn either(a: Caps, b: Caps) -> Caps {
    Caps {
        pause: a.pause || b.pause,
        kill: a.kill || b.kill,
        restart: a.restart || b.restart,
        cut_member_links: a.cut_member_links || b.cut_member_links,
        slow_member_links: a.slow_member_links || b.slow_member_links,
        peer_proxies: a.peer_proxies || b.peer_proxies,
        step_clocks: a.step_clocks || b.step_clocks,
    }
}

impl super::Backend {
    /// The capabilities of the backend that runs.
    pub fn caps(&self) -> Caps {
        match self {
            super::Backend::Process(_) => process(),
            super::Backend::Docker(_) => docker(),
            super::Backend::Kubernetes(_) => kubernetes(),
        }
    }
}
