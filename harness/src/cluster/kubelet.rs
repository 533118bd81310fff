//! kubelet 1.20.2 with dockershim on this machine's Docker engine: where
//! `ci/kubernetes.sh` puts it (patched, see `ci/kubelet-sandbox-oom-adj.patch`),
//! and its command line. Everything it writes goes under the state directory but
//! for what dockershim fixes itself (container logs under /var/log/pods).

use std::path::{Path, PathBuf};

/// Where `ci/kubernetes.sh` builds kubelet.
pub fn kubelet_path() -> PathBuf {
    crate::systems::etcd::provision::cache_dir().join("kubernetes/bin/kubelet")
}

/// Where `ci/kubernetes.sh` builds the pod sandbox's program (`pause.c`, static).
pub fn pause_path() -> PathBuf {
    crate::systems::etcd::provision::cache_dir().join("kubernetes/bin/pause")
}

/// The CA kubelet trusts for clients, in its root directory.
pub const CLIENT_CA: &str = "client-ca.crt";

/// kubelet's arguments. `dir` is the state directory, `kubeconfig` the cluster's
/// (the static token), `pause` the local sandbox image, `node` the node's name.
pub fn args(dir: &Path, kubeconfig: &Path, pause: &str, node: &str, ports: Ports) -> Vec<String> {
    let root = dir.join("kubelet");
    let at = |p: &str| root.join(p).display().to_string();
    let mut a: Vec<String> = Vec::new();
    let mut flag = |k: &str, v: String| a.push(format!("--{k}={v}"));
    flag("kubeconfig", kubeconfig.display().to_string());
    flag("root-dir", root.display().to_string());
    flag("cert-dir", at("pki"));
    // The node's name is also its Hostname address, which the apiserver dials
    // for logs and exec (see `NODE`). No `--node-ip=127.0.0.1`: 1.20 refuses a
    // loopback node IP ("failed to validate nodeIP: nodeIP can't be loopback
    // address") and the node is left with no address at all.
    flag("hostname-override", node.into());
    flag("container-runtime", "docker".into());
    // dockershim's own CRI socket and checkpoints, in the state directory rather
    // than /var/run/dockershim.sock and /var/lib/dockershim.
    flag(
        "container-runtime-endpoint",
        format!("unix://{}", at("dockershim.sock")),
    );
    flag("experimental-dockershim-root-directory", at("dockershim"));
    flag("volume-plugin-dir", at("volume-plugins"));
    // The device-plugin manager's socket is a fixed path
    // (/var/lib/kubelet/device-plugins/kubelet.sock, whatever --root-dir says);
    // without the feature kubelet uses a stub and writes nothing there.
    flag("feature-gates", "DevicePlugins=false".into());
    // Local images only: no registry is reachable here.
    flag("pod-infra-container-image", pause.into());
    // This machine's Docker: cgroup v1 with the cgroupfs driver; swap may be on.
    flag("cgroup-driver", "cgroupfs".into());
    flag("fail-swap-on", "false".into());
    // No QoS cgroup tree and no node-allocatable enforcement: the kubelet shares
    // the machine with everything else and must not reshape its cgroups.
    flag("cgroups-per-qos", "false".into());
    flag("enforce-node-allocatable", String::new());
    // No evictions and no image garbage collection: a test machine's disk is often
    // fuller than kubelet's defaults allow, and fencecheck's images cannot be pulled
    // back once removed.
    flag("eviction-hard", String::new());
    flag("image-gc-high-threshold", "100".into());
    // Its own API on loopback only, no anonymous access, no webhook (no
    // controller-manager signs anything), and fixed ports of its own.
    flag("address", "127.0.0.1".into());
    flag("port", ports.kubelet.to_string());
    flag("healthz-port", ports.kubelet_healthz.to_string());
    flag("read-only-port", "0".into());
    flag("anonymous-auth", "false".into());
    // The apiserver's client certificate is signed by this CA (`certs.rs`).
    flag("client-ca-file", at(CLIENT_CA));
    flag("authentication-token-webhook", "false".into());
    flag("authorization-mode", "AlwaysAllow".into());
    a
}

/// kubelet's ports.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub kubelet: u16,
    pub kubelet_healthz: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_it_writes_is_under_the_state_directory() {
        let a = args(
            Path::new("/s"),
            Path::new("/s/kubeconfig"),
            "fencecheck/pause:1",
            "n",
            Ports {
                kubelet: 1,
                kubelet_healthz: 2,
            },
        );
        for f in [
            "root-dir",
            "cert-dir",
            "experimental-dockershim-root-directory",
        ] {
            let v = a
                .iter()
                .find_map(|x| x.strip_prefix(&format!("--{f}=")))
                .expect(f);
            assert!(v.starts_with("/s/kubelet"), "{f}={v}");
        }
        assert!(
            a.contains(&"--container-runtime-endpoint=unix:///s/kubelet/dockershim.sock".into())
        );
        assert!(a.contains(&"--enforce-node-allocatable=".into()));
    }
}
