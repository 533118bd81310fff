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
//! for it with `imagePullPolicy: IfNotPresent`.
//!
//! Credentials are the user's Docker login for the registry's host, found as
//! `docker push` finds them ([`login`]: `DOCKER_CONFIG` or `~/.docker/config.json`,
//! its `credHelpers`, `auths` and `credsStore`, through the `docker_credential`
//! crate). With one, the push carries it, and the run's pods pull with it: a
//! Secret of type `kubernetes.io/dockerconfigjson` in the run's namespace, named
//! in every pod's `imagePullSecrets` (and the reaper's own Secret carries it too,
//! for the reaper's pod in its namespace). Without one the push is anonymous (an
//! `X-Registry-Auth` of `{}`, as `docker push` sends with no login).

use anyhow::{bail, Context, Result};
use base64::Engine;
use docker_credential::{CredentialRetrievalError, DockerCredential};
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

/// The Secret in the run's namespace that the run's pods pull with.
pub const PULL_SECRET: &str = "fencecheck-pull";

/// The user's Docker login for a registry's host.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The registry's host (and port): what the login is for.
    pub server: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({} as {})", self.server, self.username)
    }
}

/// `registry`'s host: `host[:port]`, the part a Docker login is for.
pub fn host_of(registry: &str) -> &str {
    registry.split('/').next().unwrap_or(registry)
}

/// The user's Docker login for `registry`'s host, as `docker push` would use it;
/// `None` when there is none (no config file, or nothing for that host): the
/// push is then anonymous. A credential helper that fails, a config that cannot
/// be read or decoded, or an identity token (which a node's pull cannot use) is
/// an error that says so.
pub fn login(registry: &str) -> Result<Option<Login>> {
    let server = host_of(registry);
    // Where Docker keeps it; no file is no login (the crate would call that a
    // read error, as it does a file that is not JSON).
    let Some(dir) = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")))
    else {
        return Ok(None);
    };
    let path = dir.join("config.json");
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("[cluster] registry: cannot read {}: {e}", path.display()),
    };
    let found =
        docker_credential::get_credential_from_reader(std::io::BufReader::new(file), server);
    match found {
        Ok(DockerCredential::UsernamePassword(username, password)) => Ok(Some(Login {
            server: server.to_string(),
            username,
            password,
        })),
        Ok(DockerCredential::IdentityToken(_)) => bail!(
            "[cluster] registry: the Docker login for {server} is an identity token, which \
             the node cannot pull with (an imagePullSecret holds a user name and password); \
             log in with a user name and password (docker login {server})"
        ),
        Err(CredentialRetrievalError::NoCredentialConfigured)
        | Err(CredentialRetrievalError::ConfigNotFound) => Ok(None),
        Err(e) => bail!(
            "[cluster] registry: cannot read the Docker login for {server} from {}: {e}",
            path.display()
        ),
    }
}

/// `.dockerconfigjson` for the pods' pull Secret: the login for its host only.
pub fn docker_config_json(l: &Login) -> String {
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", l.username, l.password));
    serde_json::json!({
        "auths": { l.server.as_str(): {
            "username": l.username,
            "password": l.password,
            "auth": auth,
        }}
    })
    .to_string()
}

/// The name a pod asks for: the engine's own `tag` without a registry, else its
/// name in `registry`, pushed there (with `login` when there is one).
pub async fn place(
    docker: &Docker,
    registry: Option<&str>,
    login: Option<&Login>,
    tag: &str,
    say: &dyn Fn(&str),
) -> Result<String> {
    match registry {
        None => Ok(tag.to_string()),
        Some(r) => push(docker, r, login, tag, say).await,
    }
}

/// Pushes the local image `tag` to `registry`; returns the name pods pull.
pub async fn push(
    docker: &Docker,
    registry: &str,
    login: Option<&Login>,
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
    say(&format!(
        "pushing image {remote}{}",
        login.map_or(String::new(), |l| format!(" as {}", l.username))
    ));
    let credentials = match login {
        Some(l) => DockerCredentials {
            username: Some(l.username.clone()),
            password: Some(l.password.clone()),
            serveraddress: Some(l.server.clone()),
            ..Default::default()
        },
        None => DockerCredentials::default(),
    };
    let mut stream = docker.push_image(
        repo,
        Some(PushImageOptionsBuilder::default().tag(version).build()),
        Some(credentials),
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
        match login {
            Some(l) => bail!(
                "[cluster] registry: pushing {remote} as {} (the Docker login for {}) \
                 failed: {e}",
                l.username,
                l.server
            ),
            None => bail!(
                "[cluster] registry: pushing {remote} failed: {e} (no Docker login for {} \
                 in DOCKER_CONFIG or ~/.docker/config.json, so the push was anonymous)",
                host_of(registry)
            ),
        }
    }
    untag.with_context(|| format!("cannot remove the pushed name {remote} from the engine"))?;
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config of `auths` (as `docker login` writes it without a helper) gives the
    /// login for the registry's host, whatever path the registry name has; the
    /// pull Secret's JSON names that host with the same user.
    #[test]
    fn a_docker_login_for_the_registry_host_is_found_and_handed_to_the_pods() {
        let dir = tempfile::tempdir().expect("tmp");
        let auth = base64::engine::general_purpose::STANDARD.encode("fc:s3cret");
        std::fs::write(
            dir.path().join("config.json"),
            format!("{{\"auths\":{{\"127.0.0.1:5443\":{{\"auth\":\"{auth}\"}}}}}}"),
        )
        .expect("write");
        // No other test reads DOCKER_CONFIG.
        std::env::set_var("DOCKER_CONFIG", dir.path());
        let l = login("127.0.0.1:5443/team")
            .expect("read")
            .expect("a login");
        assert_eq!(
            (l.server.as_str(), l.username.as_str(), l.password.as_str()),
            ("127.0.0.1:5443", "fc", "s3cret")
        );
        let v: serde_json::Value = serde_json::from_str(&docker_config_json(&l)).expect("json");
        assert_eq!(v["auths"]["127.0.0.1:5443"]["auth"], auth.as_str());
        assert_eq!(v["auths"]["127.0.0.1:5443"]["username"], "fc");
        // Another host: no login, an anonymous push.
        assert_eq!(login("registry.example.com/team").expect("read"), None);
        // No config file at all (no `docker login` ever): no login either.
        let empty = tempfile::tempdir().expect("tmp");
        std::env::set_var("DOCKER_CONFIG", empty.path());
        assert_eq!(login("127.0.0.1:5443").expect("no file"), None);
        std::env::set_var("DOCKER_CONFIG", dir.path());
        // A config that is not JSON is said, not taken for "no login".
        std::fs::write(dir.path().join("config.json"), "{ not json").expect("write");
        let e = login("127.0.0.1:5443").expect_err("bad config");
        std::env::remove_var("DOCKER_CONFIG");
        assert!(
            e.to_string().contains("cannot read the Docker login"),
            "{e}"
        );
    }

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
