//! The kubeconfig's credential, loaded: a rustls client configuration
//! trusting its CA and presenting its certificate, or a bearer token, and
//! the identity of every file it came from so a rotation is noticed
//! (kubelet rotates `kubelet-client-current.pem` by re-pointing an absolute
//! symlink: the target's inode changes).

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls;

use crate::{
    kube::kubeconfig::{self, Auth, Kubeconfig, KubeconfigError, Material},
    nodestatus::identity,
    tls::{
        pem::{check_pair, parse_certs, parse_key, provider, read_pem_file, root_store},
        TlsError,
    },
};

/// A kubeconfig is a few KiB.
const MAX_KUBECONFIG_BYTES: usize = 256 * 1024;
/// A token is a few hundred bytes (a JWT at most a few KiB).
const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// Why the credential is not usable (yet).
#[derive(Debug, thiserror::Error)]
pub enum CredError {
    /// Not there yet (kubelet has not bootstrapped): the writer waits.
    #[error("{} does not exist yet", .0.display())]
    Missing(PathBuf),
    #[error("cannot read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: KubeconfigError,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("the kubeconfig's server {0:?} is not a name or address TLS can verify")]
    ServerName(String),
}

impl CredError {
    /// Whether the files may simply not be there yet.
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Missing(_))
    }
}

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    // Follows symlinks: the target is what is read.
    std::fs::metadata(path).ok().map(|m| Stamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_ns: m.mtime_nsec(),
    })
}

/// A loaded credential.
#[derive(Clone)]
pub struct Loaded {
    pub host: String,
    pub port: u16,
    pub prefix: String,
    pub server_name: ServerName<'static>,
    pub tls: Arc<rustls::ClientConfig>,
    /// The bearer token, when the credential is one.
    pub token: Option<String>,
    /// The client certificate's subject common name (the user name the
    /// API server sees), when the credential is a certificate.
    pub cert_cn: Option<String>,
    stamps: Vec<(PathBuf, Option<Stamp>)>,
}

impl std::fmt::Debug for Loaded {
    // Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("cert_cn", &self.cert_cn)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Loaded {
    /// Whether any file the credential came from changed since it was read.
    pub fn changed_on_disk(&self) -> bool {
        self.stamps.iter().any(|(p, s)| stamp(p) != *s)
    }
}

fn read_text(path: &Path, cap: usize) -> Result<String, CredError> {
    if !path.exists() {
        return Err(CredError::Missing(path.to_path_buf()));
    }
    crate::hostio::read_capped(path, cap).map_err(|e| CredError::Read {
        path: path.to_path_buf(),
        reason: e.reason(),
    })
}

/// The PEM bytes of `m`; a file not there yet is [`CredError::Missing`].
fn pem_bytes(
    what: &'static str,
    m: &Material,
    files: &mut Vec<PathBuf>,
) -> Result<Vec<u8>, CredError> {
    match m {
        Material::Inline(b) => Ok(b.clone()),
        Material::File(p) => {
            if !p.exists() {
                return Err(CredError::Missing(p.clone()));
            }
            files.push(p.clone());
            Ok(read_pem_file(what, p)?)
        }
    }
}

fn label(m: &Material, inline: &'static str) -> PathBuf {
    match m {
        Material::File(p) => p.clone(),
        Material::Inline(_) => PathBuf::from(inline),
    }
}

/// Loads the kubeconfig at `path` and everything it names.
pub fn load(path: &Path) -> Result<Loaded, CredError> {
    let text = read_text(path, MAX_KUBECONFIG_BYTES)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let k: Kubeconfig = kubeconfig::parse(&text, dir).map_err(|source| CredError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })?;
    let mut files = vec![path.to_path_buf()];
    let ca = k.ca.as_ref().ok_or(CredError::Kubeconfig {
        path: path.to_path_buf(),
        source: KubeconfigError::NoCa,
    })?;
    let ca_label = label(ca, "certificate-authority-data");
    let ca_pem = pem_bytes("kubeconfig CA", ca, &mut files)?;
    let roots = root_store(&ca_label, parse_certs("kubeconfig CA", &ca_label, &ca_pem)?)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let mut token = None;
    let mut cert_cn = None;
    let mut tls = match &k.auth {
        Auth::Certificate { cert, key } => {
            let cert_label = label(cert, "client-certificate-data");
            let key_label = label(key, "client-key-data");
            let cert_pem = pem_bytes("kubeconfig client certificate", cert, &mut files)?;
            let key_pem = pem_bytes("kubeconfig client key", key, &mut files)?;
            let certs: Vec<CertificateDer<'static>> =
                parse_certs("kubeconfig client certificate", &cert_label, &cert_pem)?;
            let key: PrivateKeyDer<'static> =
                parse_key("kubeconfig client key", &key_label, &key_pem)?;
            check_pair(
                &provider(),
                certs.clone(),
                key.clone_key(),
                &cert_label,
                &key_label,
            )?;
            cert_cn = certs.first().and_then(|c| identity::subject_common_name(c));
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| TlsError::Config(e.to_string()))?
        }
        Auth::Token(t) => {
            token = Some(t.clone());
            builder.with_no_client_auth()
        }
        Auth::TokenFile(p) => {
            let t = read_text(p, MAX_TOKEN_BYTES)?;
            files.push(p.clone());
            token = Some(t.trim().to_string());
            builder.with_no_client_auth()
        }
        Auth::Anonymous => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = k.tls_server_name.clone().unwrap_or_else(|| k.host.clone());
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| CredError::ServerName(crate::text::clean_capped(&name, 120)))?;
    let stamps = files.into_iter().map(|p| {
        let s = stamp(&p);
        (p, s)
    });
    Ok(Loaded {
        host: k.host,
        port: k.port,
        prefix: k.prefix,
        server_name,
        tls: Arc::new(tls),
        token,
        cert_cn,
        stamps: stamps.collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        p
    }

    fn node_cert(cn: &str) -> (String, String) {
        let mut p =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = p.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), key.serialize_pem())
    }

    fn kubeconfig(ca: &str, user: &str) -> String {
        format!("clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: {ca}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user}")
    }

    #[test]
    fn late_files_then_a_rotation_is_seen() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        let cfg = d.join("kubeconfig");
        // Nothing yet: missing, not an error to stop on.
        assert!(load(&cfg).err().is_some_and(|e| e.is_missing()));
        write(
            d,
            "kubeconfig",
            &kubeconfig(
                "ca.pem",
                "    client-certificate: pki/current.pem\n    client-key: pki/current.pem\n",
            ),
        );
        assert!(load(&cfg).err().is_some_and(|e| e.is_missing()));
        let (ca, _) = node_cert("ca");
        write(d, "ca.pem", &ca);
        std::fs::create_dir(d.join("pki")).unwrap_or_else(|e| panic!("{e}"));
        let (c1, k1) = node_cert("system:node:worker-1");
        write(&d.join("pki"), "a.pem", &format!("{c1}{k1}"));
        // kubelet's layout: an absolute symlink to the dated file.
        std::os::unix::fs::symlink(d.join("pki/a.pem"), d.join("pki/current.pem"))
            .unwrap_or_else(|e| panic!("{e}"));
        let l = load(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.cert_cn.as_deref(), Some("system:node:worker-1"));
        assert!(!l.changed_on_disk());
        let (c2, k2) = node_cert("system:node:worker-1");
        write(&d.join("pki"), "b.pem", &format!("{c2}{k2}"));
        std::fs::remove_file(d.join("pki/current.pem")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(d.join("pki/b.pem"), d.join("pki/current.pem"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(l.changed_on_disk());
        assert!(!load(&cfg)
            .unwrap_or_else(|e| panic!("{e}"))
            .changed_on_disk());
    }

    #[test]
    fn a_token_file_is_read_and_never_printed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        let (ca, _) = node_cert("ca");
        write(d, "ca.pem", &ca);
        write(d, "token", "sekrit-token\n");
        let cfg = write(
            d,
            "kubeconfig",
            &kubeconfig("ca.pem", "    tokenFile: token\n"),
        );
        let l = load(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.token.as_deref(), Some("sekrit-token"));
        assert_eq!(l.cert_cn, None);
        assert!(!format!("{l:?}").contains("sekrit"));
        write(d, "token", "rotated-token-longer\n");
        assert!(l.changed_on_disk());
    }

    #[test]
    fn a_mismatched_pair_is_refused_naming_the_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = dir.path();
        let (ca, _) = node_cert("ca");
        write(d, "ca.pem", &ca);
        let (c1, _) = node_cert("system:node:a");
        let (_, k2) = node_cert("system:node:a");
        write(d, "c.pem", &c1);
        write(d, "k.pem", &k2);
        let cfg = write(
            d,
            "kubeconfig",
            &kubeconfig(
                "ca.pem",
                "    client-certificate: c.pem\n    client-key: k.pem\n",
            ),
        );
        let e = load(&cfg).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("does not match"), "{e}");
    }
}
