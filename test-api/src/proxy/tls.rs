//! The proxy's certificates: a CA of its own for its serving certificate
//! (the kubeconfigs that point at the proxy trust it), client certificates
//! minted with the cluster's client CA (`DIR/client-ca.{crt,key}`, so the
//! same credential works on the real server directly), and the TLS client
//! that presents the front-proxy certificate to the real server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate generation: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("a client certificate carries at most two groups (O entries), {0} given")]
    TooManyGroups(usize),
}

fn gen_err(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate(format!("{what}: {e}"))
}

fn cfg_err(e: impl std::fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A client certificate of the cluster's client CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// Pass to `FaultProxy::revoke` to make the proxy refuse it.
    pub serial: u64,
}

fn leaf_params(
    dn: DistinguishedName,
    eku: ExtendedKeyUsagePurpose,
    sans: Vec<SanType>,
    serial: u64,
) -> CertificateParams {
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
    params
}

/// A positive serial that fits in 63 bits, unlikely to repeat.
fn new_serial() -> u64 {
    fastrand::u64(1..=i64::MAX as u64)
}

fn new_key() -> Result<KeyPair, TlsError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen_err("a key"))
}

/// The proxy's serving certificate and its own CA, made at start.
pub(crate) struct Serving {
    pub(crate) ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Serving {
    pub(crate) fn generate() -> Result<Serving, TlsError> {
        let ca_key = new_key()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("test-api fault proxy CA {:08x}", fastrand::u32(..)),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params
            .self_signed(&ca_key)
            .map_err(gen_err("the proxy's CA certificate"))?;
        let issuer = Issuer::new(params, ca_key);
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "test-api fault proxy");
        let sans = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            SanType::DnsName("localhost".try_into().map_err(gen_err("the DNS name"))?),
        ];
        let key = new_key()?;
        let cert = leaf_params(dn, ExtendedKeyUsagePurpose::ServerAuth, sans, new_serial())
            .signed_by(&key, &issuer)
            .map_err(gen_err("the serving certificate"))?;
        Ok(Serving {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Client certificates requested but optional (a bearer-token client
    /// sends none), verified against the cluster's client CA when sent.
    pub(crate) fn server_config(&self, client_ca_pem: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let certs =
            vec![CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).map_err(cfg_err)?];
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(cfg_err)?;
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
            roots.add(ca.map_err(cfg_err)?).map_err(cfg_err)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .allow_unauthenticated()
                .build()
                .map_err(cfg_err)?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(cfg_err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(cfg_err)?;
        // HTTP/1.1 only: kubectl and kube-rs both fall back to it; watches
        // are chunked responses the proxy streams through.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Mints client certificates with the cluster's client CA.
pub(crate) struct ClientCa {
    issuer: Issuer<'static, KeyPair>,
}

impl ClientCa {
    pub(crate) fn load(cert: &Path, key: &Path) -> Result<ClientCa, TlsError> {
        let key = KeyPair::from_pem(&read(key)?).map_err(gen_err("the client CA key"))?;
        let issuer =
            Issuer::from_ca_cert_pem(&read(cert)?, key).map_err(gen_err("the client CA"))?;
        Ok(ClientCa { issuer })
    }

    /// CN = `user`, one O per group. rcgen keeps one value per attribute
    /// type, so the second group goes in an attribute of the same OID
    /// (2.5.4.10) under a custom type: at most two groups.
    pub(crate) fn client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert, TlsError> {
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
        let serial = new_serial();
        let key = new_key()?;
        let cert = leaf_params(dn, ExtendedKeyUsagePurpose::ClientAuth, Vec::new(), serial)
            .signed_by(&key, &self.issuer)
            .map_err(gen_err("a client certificate"))?;
        Ok(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial,
        })
    }
}

/// The TLS client towards the real server: its CA (`DIR/ca.crt`), and the
/// front-proxy client certificate (`DIR/pki/front-proxy-client.{crt,key}`)
/// that makes kube-apiserver believe the X-Remote-* headers.
pub(crate) fn upstream_config(dir: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(read(&dir.join("ca.crt"))?.as_bytes()) {
        roots.add(ca.map_err(cfg_err)?).map_err(cfg_err)?;
    }
    let pki = dir.join("pki");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(read(&pki.join("front-proxy-client.crt"))?.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(cfg_err)?;
    let key = PrivateKeyDer::from_pem_slice(read(&pki.join("front-proxy-client.key"))?.as_bytes())
        .map_err(cfg_err)?;
    let mut cfg =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(cfg_err)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(cfg_err)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// What the proxy reads from a verified client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) user: String,
    pub(crate) groups: Vec<String>,
    /// Big-endian, leading zeros trimmed.
    pub(crate) serial: Vec<u8>,
    /// `X509SHA256=<hex>`, as kube-apiserver names the credential in its
    /// audit log (`authentication.kubernetes.io/credential-id`).
    pub(crate) credential_id: String,
}

pub(crate) fn trimmed_serial(raw: &[u8]) -> Vec<u8> {
    raw.iter().copied().skip_while(|b| *b == 0).collect()
}

pub(crate) fn peer(der: &[u8]) -> Option<Peer> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    let sum = ring::digest::digest(&ring::digest::SHA256, der);
    let hex: String = sum.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(Peer {
        user,
        groups,
        serial: trimmed_serial(cert.raw_serial()),
        credential_id: format!("X509SHA256={hex}"),
    })
}

/// The serial of a PEM certificate (for `FaultProxy::revoke_pem`).
pub(crate) fn pem_serial(pem: &str) -> Option<Vec<u8>> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(trimmed_serial(cert.raw_serial()))
}
