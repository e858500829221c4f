//! The test server's own CA: a serving certificate for 127.0.0.1/localhost/::1
//! and client certificates whose subject carries the Kubernetes identity
//! (CN = user name, O = groups), as kube-apiserver's x509 authenticator reads
//! it (k8s.io/apiserver `pkg/authentication/request/x509/x509.go`, `CommonNameUserConversion`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate generation: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("a client certificate carries at most two groups (O entries), {0} given")]
    TooManyGroups(usize),
}

fn gen_err(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate(format!("{what}: {e}"))
}

/// A client certificate (the same type as the fault proxy's).
pub use crate::proxy::ClientCert;

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    next_serial: AtomicU64,
}

impl Ca {
    pub fn generate() -> Result<Ca, TlsError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen_err("the CA key"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("test-api CA {:08x}", fastrand::u32(..)),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(gen_err("the CA certificate"))?;
        Ok(Ca {
            issuer: Issuer::new(params, key),
            ca_pem: cert.pem(),
            next_serial: AtomicU64::new(1000),
        })
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    fn leaf(
        &self,
        dn: DistinguishedName,
        eku: ExtendedKeyUsagePurpose,
        sans: Vec<SanType>,
    ) -> Result<ClientCert, TlsError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen_err("a leaf key"))?;
        let serial = self.next_serial.fetch_add(1, Ordering::Relaxed);
        let mut params = CertificateParams::default();
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![eku];
        params.subject_alt_names = sans;
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(gen_err("a leaf certificate"))?;
        Ok(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial,
        })
    }

    /// CN = `user`, one O per group. rcgen keeps one value per attribute
    /// type, so the second group goes in an attribute of the same OID
    /// (2.5.4.10) under a custom type: at most two groups.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert, TlsError> {
        if groups.len() > 2 {
            return Err(TlsError::TooManyGroups(groups.len()));
        }
        let mut dn = DistinguishedName::new();
        if let Some(g) = groups.first() {
            dn.push(DnType::OrganizationName, *g);
        }
        if let Some(g) = groups.get(1) {
            dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *g);
        }
        dn.push(DnType::CommonName, user);
        self.leaf(dn, ExtendedKeyUsagePurpose::ClientAuth, Vec::new())
    }

    /// TLS for the server: its serving certificate, and client certificates
    /// requested but optional (a bearer-token client sends none), verified
    /// against this CA when sent.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        let sans = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            SanType::DnsName("localhost".try_into().map_err(gen_err("the DNS name"))?),
        ];
        let leaf = self.leaf(dn, ExtendedKeyUsagePurpose::ServerAuth, sans)?;
        let cfg = |e: rustls::pki_types::pem::Error| TlsError::Config(e.to_string());
        let certs = vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).map_err(cfg)?];
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).map_err(cfg)?;
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).map_err(cfg)?)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        // HTTP/1.1 only: kubectl and kube-rs both fall back to it; watches
        // are chunked responses.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
