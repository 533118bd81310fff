//! How the apiserver and kubelet trust each other for the calls that go from the
//! apiserver to the node (a pod's logs, exec, port-forward): kubelet accepts a
//! client certificate signed by a CA of this cluster's own (`--client-ca-file`;
//! anonymous access and the token webhook stay off), and the apiserver presents
//! one (`--kubelet-client-certificate`). Made per `up`, like the lock system's
//! serving certificate and token.

use anyhow::{Context, Result};

pub struct KubeletClientCerts {
    /// For kubelet's `--client-ca-file`.
    pub ca_pem: String,
    /// For the apiserver's `--kubelet-client-certificate` and `-key`.
    pub cert_pem: String,
    pub key_pem: String,
}

impl KubeletClientCerts {
    pub fn generate() -> Result<KubeletClientCerts> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().context("kubelet client CA key")?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "fencecheck-kubelet-client-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).context("kubelet client CA")?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().context("kubelet client key")?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name
            .push(DnType::CommonName, "kube-apiserver-kubelet-client");
        p.distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        p.is_ca = IsCa::ExplicitNoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = p
            .signed_by(&key, &issuer)
            .context("kubelet client certificate")?;
        Ok(KubeletClientCerts {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_and_a_client_certificate_it_signs() {
        let c = KubeletClientCerts::generate().expect("certs");
        assert!(c.ca_pem.contains("BEGIN CERTIFICATE"));
        assert!(c.cert_pem.contains("BEGIN CERTIFICATE"));
        assert_ne!(c.ca_pem, c.cert_pem);
        assert!(c.key_pem.contains("PRIVATE KEY"));
    }
}
