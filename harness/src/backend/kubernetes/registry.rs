//! `[cluster] registry`: the images of a run pushed to a registry the cluster's
//! node pulls from, for a node whose container runtime does not see this
//! machine's Docker engine (containerd, CRI-O: k3s, a kubeadm node).
//!
//! Each image, built on this machine's engine as always, is tagged
//! `<registry>/<repository>:<tag>` (its tags are content hashes, so a pushed
//! name never changes meaning), pushed through the engine, and that second name
//! is removed again from the engine: the engine keeps one name per image, and a
//! node on this engine (the local cluster) pulls the image from the registry
//! like any other node would, instead of finding it already there. The pods ask
//! for it with `imagePullPolicy: IfNotPresent`. Credentials are not built: the
//! push is anonymous (an `X-Registry-Auth` of `{}`, as `docker push` sends with
//! no login), so the registry must accept pushes from this machine as it is.

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use testcontainers::bollard::auth::DockerCredentials;
use testcontainers::bollard::query_parameters::{
    PushImageOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use testcontainers::bollard::Docker;

/// The name the pods use for `tag` (`fencecheck/etcd:<hash>`) in `registry`
/// (`host[:port][/path]`).
pub fn name_in(registry: &str, tag: &str) -> String {
    format!("{}/{tag}", registry.trim_end_matches('/'))
}

/// The name a pod asks for: the engine's own `tag` without a registry, else its
/// name in `registry`, pushed there.
pub async fn place(
    docker: &Docker,
    registry: Option<&str>,
    tag: &str,
    say: &dyn Fn(&str),
) -> Result<String> {
    match registry {
        None => Ok(tag.to_string()),
        Some(r) => push(docker, r, tag, say).await,
    }
}

/// Pushes the local image `tag` to `registry`; returns the name pods pull.
pub async fn push(
    docker: &Docker,
    registry: &str,
    tag: &str,
    say: &dyn Fn(&str),
) -> Result<String> {
    let (local_repo, version) = tag
        .rsplit_once(':')
        .with_context(|| format!("image {tag} has no tag"))?;
    let repo = name_in(registry, local_repo);
    let repo = repo.as_str();
    let remote = format!("{repo}:{version}");
    docker
        .tag_image(
            tag,
            Some(
                TagImageOptionsBuilder::default()
                    .repo(repo)
                    .tag(version)
                    .build(),
            ),
        )
        .await
        .with_context(|| format!("cannot tag image {tag} as {remote}"))?;
    say(&format!("pushing image {remote}"));
    let mut stream = docker.push_image(
        repo,
        Some(PushImageOptionsBuilder::default().tag(version).build()),
        Some(DockerCredentials::default()),
    );
    let mut failed = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(e) = info.error_detail.and_then(|d| d.message) {
                    failed = Some(e);
                }
            }
            Err(e) => failed = Some(e.to_string()),
        }
    }
    // The second name goes whether the push worked or not (untagging: the image
    // itself stays under its own name).
    let untag = docker
        .remove_image(
            &remote,
            Some(RemoveImageOptionsBuilder::default().noprune(true).build()),
            None,
        )
        .await;
    if let Some(e) = failed {
        bail!(
            "[cluster] registry: pushing {remote} failed: {e} (the push is anonymous: \
             the registry must accept it from this machine without a login)"
        );
    }
    untag.with_context(|| format!("cannot remove the pushed name {remote} from the engine"))?;
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_a_registry() {
        assert_eq!(
            name_in("127.0.0.1:5000", "fencecheck/etcd:3.4-ab"),
            "127.0.0.1:5000/fencecheck/etcd:3.4-ab"
        );
        assert_eq!(
            name_in("registry.example.com/team/", "fencecheck/reaper:ab"),
            "registry.example.com/team/fencecheck/reaper:ab"
        );
    }
}
