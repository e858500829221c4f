//! `check`'s side: a tonic client TLS configuration from PEM files.

use std::path::Path;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::error::TlsError;
use super::pem::{check_pair, parse_certs, parse_key, provider, read_pem_file, root_store};

/// Handshake timeout on the client side: the server gives up after 10 s too.
pub const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A tonic client TLS configuration that trusts the CA bundle `ca`, presents
/// `cert`/`key` when given (both or neither) and, with `server_name`,
/// verifies the server against that name instead of the host of the URL
/// dialled (for nodes dialled by an address the certificate does not list).
///
/// Everything is read and checked now, so a wrong path or a mismatched pair
/// fails here with a message naming the file, not later at connect time.
pub fn client_tls_config(
    ca: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
    server_name: Option<&str>,
) -> Result<ClientTlsConfig, TlsError> {
    let ca_pem = read_pem_file("TLS CA", ca)?;
    // tonic skips certificates it cannot parse; catch them here instead.
    root_store(ca, parse_certs("TLS CA", ca, &ca_pem)?)?;
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .timeout(CLIENT_HANDSHAKE_TIMEOUT);

    match (cert, key) {
        (Some(cert_path), Some(key_path)) => {
            let cert_pem = read_pem_file("TLS certificate", cert_path)?;
            let certs = parse_certs("TLS certificate", cert_path, &cert_pem)?;
            let key_pem = read_pem_file("TLS key", key_path)?;
            let parsed_key = parse_key("TLS key", key_path, &key_pem)?;
            check_pair(&provider(), certs, parsed_key, cert_path, key_path)?;
            config = config.identity(Identity::from_pem(cert_pem, key_pem));
        }
        (None, None) => {}
        _ => return Err(TlsError::IncompleteIdentity),
    }

    if let Some(name) = server_name {
        ServerName::try_from(name).map_err(|_| TlsError::BadServerName {
            name: name.to_string(),
        })?;
        config = config.domain_name(name);
    }
    Ok(config)
}
