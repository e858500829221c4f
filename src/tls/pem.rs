//! Reading PEM files defensively and turning them into rustls types.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::sign::CertifiedKey;

use super::error::{io_reason, TlsError};
use crate::hostio::ReadError;

/// Certificates, keys and CA bundles are a few KiB; a bigger file is a wrong
/// path, and reading it whole would only waste memory.
pub(crate) const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Reads a whole PEM file, refusing non-regular files (a FIFO would block
/// forever) and anything over [`MAX_PEM_BYTES`].
pub(crate) fn read_pem_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let cap = usize::try_from(MAX_PEM_BYTES).unwrap_or(usize::MAX);
    crate::hostio::read_capped_bytes(path, cap).map_err(|e| {
        let path = path.to_path_buf();
        if e.is_not_a_file() {
            return TlsError::NotAFile { what, path };
        }
        match e {
            ReadError::TooLarge { .. } => TlsError::TooLarge {
                what,
                path,
                limit: MAX_PEM_BYTES,
            },
            ReadError::Io { source, .. } => TlsError::Read {
                what,
                path,
                reason: io_reason(&source),
            },
            other => TlsError::Read {
                what,
                path,
                reason: other.reason(),
            },
        }
    })
}

/// Fixed phrases for PEM syntax errors: the parser's own text can quote the
/// offending line, which in a key file is key material.
fn pem_reason(err: &pem::Error) -> &'static str {
    match err {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line",
        pem::Error::IllegalSectionStart { .. } => "malformed BEGIN line",
        pem::Error::Base64Decode(_) => "invalid base64 inside a section",
        pem::Error::SectionTooLarge => "a section is too large",
        pem::Error::NoItemsFound => "no PEM section found",
        _ => "unreadable PEM",
    }
}

/// All `CERTIFICATE` sections of a PEM file, in order; at least one.
pub(crate) fn parse_certs(
    what: &'static str,
    path: &Path,
    bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            reason: pem_reason(&e),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub(crate) fn parse_key(
    what: &'static str,
    path: &Path,
    bytes: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => TlsError::Pem {
            what,
            path: path.to_path_buf(),
            reason: pem_reason(&other),
        },
    })
}

/// Checks that the key is usable and belongs to the chain's leaf, so a
/// half-rotated pair is caught at load time with a message naming both files
/// rather than as a handshake failure on every connection.
pub(crate) fn check_pair(
    provider: &CryptoProvider,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    cert_path: &Path,
    key_path: &Path,
) -> Result<(), TlsError> {
    let signing_key =
        provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::BadKey {
                path: key_path.to_path_buf(),
                reason: e.to_string(),
            })?;
    match CertifiedKey::new(certs, signing_key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            key: key_path.to_path_buf(),
            cert: cert_path.to_path_buf(),
        }),
        Err(other) => Err(TlsError::BadCertificate {
            path: cert_path.to_path_buf(),
            reason: other.to_string(),
        }),
    }
}

/// A root store from a CA bundle; every certificate in it must be usable.
pub(crate) fn root_store(
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The crypto provider every config of ours uses, picked explicitly so
/// nothing depends on a process-wide default being installed.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
