//! The one error type of the TLS layer.

use std::path::PathBuf;

/// Everything that can go wrong loading, building or generating TLS material.
///
/// Every message is one line and names the file or flag at fault. No variant
/// ever carries key material: PEM parse failures are mapped to our own fixed
/// phrases instead of passing the parser's text (which may quote the input).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be opened or read.
    #[error("cannot read {what} {}: {reason}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// The path is a directory, a FIFO, a device...
    #[error("{what} {} is not a regular file", path.display())]
    NotAFile { what: &'static str, path: PathBuf },
    /// PEM files are a few KiB; anything bigger is a mistake (or /dev/zero).
    #[error("{what} {} is larger than {limit} bytes", path.display())]
    TooLarge {
        what: &'static str,
        path: PathBuf,
        limit: u64,
    },
    /// The file is not well-formed PEM.
    #[error("invalid PEM in {what} {}: {reason}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        reason: &'static str,
    },
    /// No `CERTIFICATE` section.
    #[error("no certificate found in {}", path.display())]
    NoCertificate { path: PathBuf },
    /// No `PRIVATE KEY` / `RSA PRIVATE KEY` / `EC PRIVATE KEY` section.
    #[error("no private key found in {}", path.display())]
    NoPrivateKey { path: PathBuf },
    /// The key parsed as PEM but the crypto provider cannot use it.
    #[error("unusable private key in {}: {reason}", path.display())]
    BadKey { path: PathBuf, reason: String },
    /// The leaf certificate is not valid DER / X.509.
    #[error("unusable certificate in {}: {reason}", path.display())]
    BadCertificate { path: PathBuf, reason: String },
    /// The key belongs to another certificate (a half-done rotation, usually).
    #[error("TLS key {} does not match certificate {}", key.display(), cert.display())]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    /// The CA file holds something that cannot be a trust anchor.
    #[error("unusable CA certificate in {}: {reason}", path.display())]
    BadCa { path: PathBuf, reason: String },
    /// A client certificate without its key, or the other way round.
    #[error("a client certificate and its key must be given together (--tls-cert with --tls-key)")]
    IncompleteIdentity,
    /// Not a DNS name or IP address rustls can verify against.
    #[error("invalid TLS server name {name:?}")]
    BadServerName { name: String },
    /// rustls refused the assembled configuration.
    #[error("cannot build TLS configuration: {0}")]
    Config(String),
    /// The reloader could not start.
    #[error("cannot start TLS reloader: {0}")]
    Reloader(String),
    /// A `--san` value that no TLS client would ever match.
    #[error("invalid --san {value:?}: {reason}")]
    BadSan { value: String, reason: &'static str },
    /// A `--node` value (or `--nodes-file` line) that cannot name a node.
    #[error("invalid --node {value:?}: {reason}")]
    BadNode { value: String, reason: String },
    /// A server certificate without names is useless to verifying clients.
    #[error("at least one --san is required (a DNS name or IP address check dials)")]
    NoSan,
    /// `init` does not overwrite unless forced.
    #[error("{} already exists (pass --force to replace the TLS material)", path.display())]
    Exists { path: PathBuf },
    /// Creating a directory or writing a file failed.
    #[error("cannot write {}: {reason}", path.display())]
    Write { path: PathBuf, reason: String },
    /// Key or certificate generation failed.
    #[error("cannot generate {what}: {reason}")]
    Generate { what: &'static str, reason: String },
}

/// The OS reason without Rust's " (os error N)" suffix, so messages read like
/// `cannot read TLS key /x: No such file or directory`.
pub(crate) fn io_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}
