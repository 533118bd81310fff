//! Kubernetes' members, for any backend: members `0..n` are etcd members (etcd's
//! own specs, etcd 3.4, the version 1.20 was released against), member `n` is
//! kube-apiserver over all of them. The run's TLS material and token are made
//! here, once per run, and written as the apiserver's config files (the run
//! directory on the process backend); [`KubeDeploy::access`] hands the token and
//! the CA to the harness and the workers.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::scenario::{EtcdVersion, Scenario};
use crate::systems::etcd::members::EtcdDeploy;
use crate::systems::members::{
    Deploy, FilePlace, MemberFile, MemberSpec, Placement, Ports, Readiness,
};
use crate::systems::service::ServiceAccess;

pub const PORTS: Ports = crate::systems::etcd::members::PORTS;
/// The version `ci/kubernetes.sh` builds (`--version` prints "Kubernetes v1.20.2").
pub const VERSION: &str = "1.20.2";
/// The name the serving certificate is for (clients reach it through proxies).
pub const SERVER_NAME: &str = "kubernetes";
/// The `kubernetes` Service's address: the first of `--service-cluster-ip-range`.
pub const SERVICE_IP: &str = "10.0.0.1";
/// Test hook (not a user option): extra arguments for the apiserver, e.g. a bad
/// flag, to exercise a failed start.
const EXTRA_ARGS_ENV: &str = "FENCECHECK_TEST_APISERVER_EXTRA_ARGS";
/// The etcd under the apiserver.
const ETCD: EtcdVersion = EtcdVersion::V3_4;

/// Where `ci/kubernetes.sh` puts the binary.
pub fn apiserver_path() -> PathBuf {
    crate::scenario::cache_dir().join("kubernetes/bin/kube-apiserver")
}

pub struct KubeDeploy {
    etcd: EtcdDeploy,
    apiserver: PathBuf,
    tls: Tls,
}

/// The run's CA, the serving certificate it signs, the service-account key and
/// the token.
struct Tls {
    ca_pem: String,
    serving_pem: String,
    serving_key: String,
    sa_key: String,
    /// Its public half: the verifying key file wants a public key (PKIX), the
    /// signing one takes the PKCS#8 private key.
    sa_pub: String,
    token: String,
}

impl Tls {
    fn generate() -> Result<Tls> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        // A CA of the run's own and a serving certificate it signs: rustls (the
        // harness's client) refuses a self-signed serving certificate that is
        // its own CA (`CaUsedAsEndEntity`), which curl and Go accept.
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "fencecheck-run-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        // The names and the Service address a pod reaches it by, as kubeadm's
        // API servers have them: the reaper's in-cluster path checks the
        // certificate for the `kubernetes` Service's address (the first of
        // `--service-cluster-ip-range`, below).
        let mut p = CertificateParams::new(vec![
            SERVER_NAME.to_string(),
            "127.0.0.1".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            "kubernetes.default.svc.cluster.local".into(),
            SERVICE_IP.into(),
        ])?;
        p.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        p.is_ca = IsCa::ExplicitNoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let serving = p.signed_by(&key, &issuer)?;
        let sa = KeyPair::generate()?;
        let token: String = (0..32)
            .map(|_| format!("{:x}", rand::random::<u8>() & 0xf))
            .collect();
        Ok(Tls {
            ca_pem: ca_cert.pem(),
            serving_pem: serving.pem(),
            serving_key: key.serialize_pem(),
            sa_key: sa.serialize_pem(),
            sa_pub: sa.public_key_pem(),
            token,
        })
    }
}

impl KubeDeploy {
    pub fn find(say: &dyn Fn(&str)) -> Result<KubeDeploy> {
        let apiserver = apiserver_path();
        anyhow::ensure!(
            apiserver.is_file(),
            "kube-apiserver {VERSION} is not built here ({} missing): run ci/bootstrap.sh --system kubernetes \
             (it builds it from Debian's kubernetes source package, ~6 min)",
            apiserver.display()
        );
        let etcd = EtcdDeploy::find(ETCD, say)?;
        say(&format!(
            "kube-apiserver {VERSION} ({})",
            apiserver.display()
        ));
        Ok(KubeDeploy {
            etcd,
            apiserver,
            tls: Tls::generate().context("the run's TLS material")?,
        })
    }

    pub fn access(&self) -> ServiceAccess {
        ServiceAccess {
            token: self.tls.token.clone(),
            ca_pem: self.tls.ca_pem.clone(),
            server_name: SERVER_NAME.into(),
            namespace: super::lease::NAMESPACE.into(),
        }
    }
}

impl Deploy for KubeDeploy {
    fn version(&self) -> &str {
        VERSION
    }
    fn image_name(&self) -> &'static str {
        "kubernetes"
    }
    fn members(&self, s: &Scenario, at: &[Placement]) -> Result<Vec<MemberSpec>> {
        let (api, etcd_at) = at
            .split_last()
            .context("kubernetes needs its etcd members and the apiserver")?;
        let mut specs = self.etcd.members(s, etcd_at)?;
        specs.push(self.apiserver_spec(api, etcd_at));
        Ok(specs)
    }
    /// etcd's image with kube-apiserver (and what it loads, if anything) beside
    /// it, each at its path on this machine: the kubernetes backend's pods. The
    /// docker backend does not run this system yet (`runs_on_docker`).
    fn image(&self) -> Result<crate::image_context::BuildContext> {
        let mut ctx = self.etcd.image()?;
        crate::image_context::add_file(&mut ctx.files, &self.apiserver, &self.apiserver)?;
        for lib in crate::image_context::shared_libraries(&self.apiserver)? {
            crate::image_context::add_file(&mut ctx.files, &lib, &lib)?;
        }
        Ok(ctx)
    }
    fn access(&self) -> Option<ServiceAccess> {
        Some(KubeDeploy::access(self))
    }
}

impl KubeDeploy {
    fn apiserver_spec(&self, p: &Placement, etcd: &[Placement]) -> MemberSpec {
        let servers = etcd
            .iter()
            .map(|e| format!("http://{}", e.client))
            .collect::<Vec<_>>()
            .join(",");
        let ip = p.client_bind.ip().to_string();
        let port = p.client_bind.port().to_string();
        let file = |name: &str, contents: &str| MemberFile {
            name: name.into(),
            place: FilePlace::Config,
            contents: contents.into(),
        };
        let t = &self.tls;
        let args: Vec<String> = [
            "--etcd-servers",
            &servers,
            "--bind-address",
            &ip,
            "--advertise-address",
            &ip,
            "--secure-port",
            &port,
            // 1.20 refuses any other value.
            "--insecure-port",
            "0",
            "--tls-cert-file",
            &p.config_file("k8s-serving.crt"),
            "--tls-private-key-file",
            &p.config_file("k8s-serving.key"),
            // Not /var/run/kubernetes.
            "--cert-dir",
            &p.data_dir,
            "--token-auth-file",
            &p.config_file("k8s-tokens.csv"),
            "--authorization-mode",
            "RBAC",
            "--service-account-key-file",
            &p.config_file("k8s-sa.pub"),
            "--service-account-signing-key-file",
            &p.config_file("k8s-sa.key"),
            "--service-account-issuer",
            "https://kubernetes.default.svc",
            // The run's own API server: bookkeeping for Service objects only,
            // nothing is sent to it. The local cluster's: the `kubernetes`
            // Service's address is the first of it (SERVICE_IP), which the test
            // bed's second node carries to the API server (kube-proxy).
            "--service-cluster-ip-range",
            "10.0.0.0/24",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(
            std::env::var(EXTRA_ARGS_ENV)
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string),
        )
        .collect();
        MemberSpec {
            name: "kube-apiserver".into(),
            program: self.apiserver.clone(),
            args,
            env: Vec::new(),
            files: vec![
                file("k8s-ca.crt", &t.ca_pem),
                file("k8s-serving.crt", &t.serving_pem),
                file("k8s-serving.key", &t.serving_key),
                file("k8s-sa.key", &t.sa_key),
                file("k8s-sa.pub", &t.sa_pub),
                file(
                    "k8s-tokens.csv",
                    &format!("{},fencecheck,fencecheck,system:masters\n", t.token),
                ),
            ],
            ready: Readiness {
                line: "Serving securely on",
                http: None,
            },
            clock_file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_material_is_a_ca_a_certificate_it_signs_and_a_token() {
        let t = Tls::generate().expect("tls");
        assert!(t.ca_pem.contains("BEGIN CERTIFICATE"));
        assert!(t.serving_pem.contains("BEGIN CERTIFICATE"));
        assert_ne!(t.ca_pem, t.serving_pem);
        assert!(t.serving_key.contains("PRIVATE KEY"));
        assert_eq!(t.token.len(), 32);
        assert_ne!(t.token, Tls::generate().expect("tls").token);
    }
}
