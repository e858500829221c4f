//! `sandbox-readiness tls init DIR`: a private CA, a server certificate for
//! the agents and a client certificate for the controller, plus the Talos
//! machine-config document that installs the server side on a node.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use super::error::{io_reason, TlsError};

/// The CA certificate: `--client-ca` of the agents, `--tls-ca` of `check`.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's key: signs further certificates; keep it off the nodes.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// The agents' certificate (`--tls-cert` of `serve`).
pub const SERVER_CERT_FILE: &str = "server.pem";
/// The agents' key (`--tls-key` of `serve`).
pub const SERVER_KEY_FILE: &str = "server-key.pem";
/// The controller's certificate (`--tls-cert` of `check`).
pub const CLIENT_CERT_FILE: &str = "client.pem";
/// The controller's key (`--tls-key` of `check`).
pub const CLIENT_KEY_FILE: &str = "client-key.pem";

/// Where the ExtensionServiceConfig mounts the server material on a node.
pub const NODE_TLS_DIR: &str = "/usr/local/etc/sandbox-readiness/tls";

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// Longer than anyone should keep a CA; also keeps date arithmetic far from
/// the limits of the date type.
const MAX_VALIDITY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
/// Backdating absorbs clock skew between the operator's machine and nodes.
const BACKDATE: Duration = Duration::from_secs(60 * 60);

/// Knobs of [`init`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// Replace existing files instead of refusing.
    pub force: bool,
    /// Lifetime of the CA (default 10 years).
    pub ca_validity: Duration,
    /// Lifetime of the server and client certificates (default 1 year,
    /// never beyond the CA's).
    pub cert_validity: Duration,
    /// Common name of the client certificate.
    pub client_name: String,
}

impl Default for InitOptions {
    fn default() -> Self {
        Self {
            force: false,
            ca_validity: 3650 * DAY,
            cert_validity: 365 * DAY,
            client_name: "sandbox-readiness-controller".to_string(),
        }
    }
}

/// What [`init`] wrote. Holds the server key for
/// [`render_instructions`]; its `Debug` output leaves it out.
pub struct InitOutput {
    /// The directory, made absolute.
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The server certificate's names, normalised (lower case, no brackets).
    pub sans: Vec<String>,
    pub ca_not_after: SystemTime,
    pub cert_not_after: SystemTime,
    ca_cert_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
}

impl std::fmt::Debug for InitOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitOutput")
            .field("dir", &self.dir)
            .field("sans", &self.sans)
            .field("ca_not_after", &self.ca_not_after)
            .field("cert_not_after", &self.cert_not_after)
            .finish_non_exhaustive()
    }
}

/// Creates `DIR/{ca,ca-key,server,server-key,client,client-key}.pem`, all
/// mode 0600, `DIR` itself 0700 if created. Refuses (before writing
/// anything) if one exists, unless `options.force`; forced files are
/// replaced by rename, never rewritten in place, so an old mode cannot
/// survive. Keys are ECDSA P-256.
pub fn init(dir: &Path, sans: &[String], options: &InitOptions) -> Result<InitOutput, TlsError> {
    let san_list = parse_sans(sans)?;
    for validity in [options.ca_validity, options.cert_validity] {
        if validity.is_zero() || validity > MAX_VALIDITY {
            return Err(TlsError::Config(format!(
                "certificate validity {} is out of range (1s to 100 years)",
                humantime::format_duration(validity)
            )));
        }
    }
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let path = |name: &str| dir.join(name);
    let names = [
        CA_CERT_FILE,
        CA_KEY_FILE,
        SERVER_CERT_FILE,
        SERVER_KEY_FILE,
        CLIENT_CERT_FILE,
        CLIENT_KEY_FILE,
    ];
    if !options.force {
        for name in names {
            let p = path(name);
            if std::fs::symlink_metadata(&p).is_ok() {
                return Err(TlsError::Exists { path: p });
            }
        }
    }

    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| TlsError::Config("the system clock is before 1970".to_string()))?;
    let not_before = now.saturating_sub(BACKDATE);
    let ca_until = now + options.ca_validity;
    let cert_until = now + options.cert_validity.min(options.ca_validity);

    let generate = |what: &'static str| {
        move |e: rcgen::Error| TlsError::Generate {
            what,
            reason: e.to_string(),
        }
    };

    let ca_key =
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate("the CA key"))?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name =
        distinguished_name(&format!("sandbox-readiness CA {:08x}", fastrand::u32(..)));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut ca_params, not_before, ca_until);
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(generate("the CA certificate"))?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(generate("the server key"))?;
    let mut server_params = leaf_params("sandbox-readiness agent", not_before, cert_until);
    server_params.subject_alt_names = san_list.iter().map(|(_, san)| san.clone()).collect();
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .map_err(generate("the server certificate"))?;

    let client_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(generate("the client key"))?;
    let mut client_params = leaf_params(&options.client_name, not_before, cert_until);
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params
        .signed_by(&client_key, &issuer)
        .map_err(generate("the client certificate"))?;

    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| TlsError::Write {
            path: dir.clone(),
            reason: io_reason(&e),
        })?;

    let out = InitOutput {
        ca_cert: path(CA_CERT_FILE),
        ca_key: path(CA_KEY_FILE),
        server_cert: path(SERVER_CERT_FILE),
        server_key: path(SERVER_KEY_FILE),
        client_cert: path(CLIENT_CERT_FILE),
        client_key: path(CLIENT_KEY_FILE),
        sans: san_list.into_iter().map(|(name, _)| name).collect(),
        ca_not_after: SystemTime::UNIX_EPOCH + ca_until,
        cert_not_after: SystemTime::UNIX_EPOCH + cert_until,
        ca_cert_pem: ca_cert.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
        dir,
    };
    // Keys first: a run that fails half-way leaves no certificate whose key
    // is missing.
    let client_key_pem = client_key.serialize_pem();
    let writes: [(&Path, &str); 6] = [
        (&out.ca_key, &ca_key_pem),
        (&out.server_key, &out.server_key_pem),
        (&out.client_key, &client_key_pem),
        (&out.ca_cert, &out.ca_cert_pem),
        (&out.server_cert, &out.server_cert_pem),
        (&out.client_cert, &client_cert.pem()),
    ];
    for (file, contents) in writes {
        write_private(file, contents.as_bytes(), options.force)?;
    }
    Ok(out)
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "sandbox-readiness");
    dn.push(DnType::CommonName, common_name);
    dn
}

fn leaf_params(common_name: &str, not_before: Duration, not_after: Duration) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, not_before, not_after);
    params
}

/// Both instants are durations since the Unix epoch, already checked to be
/// within 100 years of now, so the addition cannot overflow.
fn set_validity(params: &mut CertificateParams, not_before: Duration, not_after: Duration) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + not_before;
    params.not_after = epoch + not_after;
}

/// Creates `path` with mode 0600 from the start. Without `force` the file
/// must not exist (`O_EXCL`); with it, a fresh temporary file is renamed over
/// the old one.
fn write_private(path: &Path, contents: &[u8], force: bool) -> Result<(), TlsError> {
    let err = |p: &Path, e: std::io::Error| TlsError::Write {
        path: p.to_path_buf(),
        reason: io_reason(&e),
    };
    let target = if force {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        path.with_file_name(format!(".{name}.{:08x}.tmp", fastrand::u32(..)))
    } else {
        path.to_path_buf()
    };
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)?;
        file.write_all(contents)?;
        file.sync_all()
    })();
    if let Err(e) = result {
        if e.kind() == std::io::ErrorKind::AlreadyExists && !force {
            return Err(TlsError::Exists {
                path: path.to_path_buf(),
            });
        }
        let _ = std::fs::remove_file(&target);
        return Err(err(path, e));
    }
    if force {
        if let Err(e) = std::fs::rename(&target, path) {
            let _ = std::fs::remove_file(&target);
            return Err(err(path, e));
        }
    }
    Ok(())
}

/// Parses `--san` values: IP addresses (v4, v6, v6 in brackets) become IP
/// SANs, the rest must be DNS names a TLS client can match — letters,
/// digits, `-`, `_`, labels of 1–63 characters, a last label that is not all
/// digits, and a wildcard only as the whole leftmost label followed by at
/// least two labels (`*.pool.example`), which is what webpki accepts.
/// Duplicates are dropped.
fn parse_sans(values: &[String]) -> Result<Vec<(String, SanType)>, TlsError> {
    let mut out: Vec<(String, SanType)> = Vec::new();
    for value in values {
        let parsed = parse_san(value)?;
        if !out.iter().any(|(name, _)| *name == parsed.0) {
            out.push(parsed);
        }
    }
    if out.is_empty() {
        return Err(TlsError::NoSan);
    }
    Ok(out)
}

fn parse_san(value: &str) -> Result<(String, SanType), TlsError> {
    let bad = |reason: &'static str| TlsError::BadSan {
        value: value.to_string(),
        reason,
    };
    let trimmed = value.trim();
    let bare = trimmed
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(trimmed);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        let ip = ip.to_canonical();
        return Ok((ip.to_string(), SanType::IpAddress(ip)));
    }
    if bare.is_empty() {
        return Err(bad("empty"));
    }
    let name = bare.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name).to_string();
    if name.len() > 253 {
        return Err(bad("longer than 253 characters"));
    }
    let labels: Vec<&str> = name.split('.').collect();
    let (wildcard, rest) = match labels.split_first() {
        Some((&"*", rest)) => (true, rest),
        _ => (false, &labels[..]),
    };
    if wildcard && rest.len() < 2 {
        return Err(bad(
            "a wildcard needs at least two labels after it (*.pool.example, not *.example)",
        ));
    }
    for label in rest {
        if label.is_empty() {
            return Err(bad("empty label (two dots in a row, or a leading dot)"));
        }
        if label.contains('*') {
            return Err(bad(
                "a wildcard must be the whole leftmost label, as in *.pool.example",
            ));
        }
        if label.len() > 63 {
            return Err(bad("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad(
                "not an IP address, and a DNS name may only hold letters, digits, '-', '_' and '.'",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label starts or ends with '-'"));
        }
    }
    if rest
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad(
            "the last label is all digits (not a valid IP address either)",
        ));
    }
    let ia5 = rcgen::string::Ia5String::try_from(name.as_str())
        .map_err(|_| bad("not representable as an IA5 string"))?;
    Ok((name, SanType::DnsName(ia5)))
}

/// The text `tls init` prints: a valid YAML stream whose only document is
/// the Talos `ExtensionServiceConfig` that mounts the server certificate,
/// key and client CA into the extension service and points the agent's
/// environment at them, with comments around it (what the files are, that
/// the document carries the server's private key, the matching `check`
/// flags). Print it; never log it.
pub fn render_instructions(out: &InitOutput) -> String {
    let node = |file: &str| format!("{NODE_TLS_DIR}/{file}");
    let node_cert = node("server.pem");
    let node_key = node("server-key.pem");
    let node_ca = node("client-ca.pem");
    let until = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();

    let mut s = String::new();
    let _ = writeln!(
        s,
        "# sandbox-readiness TLS material in {}",
        out.dir.display()
    );
    let _ = writeln!(
        s,
        "#   {CA_CERT_FILE}, {CA_KEY_FILE}: the CA (until {}); keep {CA_KEY_FILE} offline, it signs new certificates",
        until(out.ca_not_after)
    );
    let _ = writeln!(
        s,
        "#   {SERVER_CERT_FILE}, {SERVER_KEY_FILE}: the agents' certificate for {} (until {})",
        out.sans.join(", "),
        until(out.cert_not_after)
    );
    let _ = writeln!(
        s,
        "#   {CLIENT_CERT_FILE}, {CLIENT_KEY_FILE}: the controller's client certificate (until {})",
        until(out.cert_not_after)
    );
    s.push_str("#\n");
    s.push_str("# 1. Add the document below to the machine config of every worker that runs the\n");
    s.push_str("#    sandbox-readiness extension (for example as a config patch).\n");
    s.push_str(
        "#    SECRET: it contains the agents' PRIVATE KEY. Once applied, the machine config\n",
    );
    s.push_str("#    is a secret: store and share it as one.\n");
    s.push_str("---\n");
    s.push_str("apiVersion: v1alpha1\n");
    s.push_str("kind: ExtensionServiceConfig\n");
    s.push_str("name: sandbox-readiness\n");
    s.push_str("configFiles:\n");
    for (mount, pem) in [
        (&node_cert, &out.server_cert_pem),
        (&node_key, &out.server_key_pem),
        (&node_ca, &out.ca_cert_pem),
    ] {
        let _ = writeln!(s, "  - mountPath: {mount}");
        s.push_str("    content: |\n");
        for line in pem.lines() {
            let _ = writeln!(s, "      {line}");
        }
    }
    s.push_str("environment:\n");
    let _ = writeln!(s, "  - SANDBOX_READINESS_TLS_CERT={node_cert}");
    let _ = writeln!(s, "  - SANDBOX_READINESS_TLS_KEY={node_key}");
    let _ = writeln!(s, "  - SANDBOX_READINESS_CLIENT_CA={node_ca}");
    s.push_str(
        "\n# 2. Ask the agents from the controller's machine, dialling each node by a name\n",
    );
    let _ = writeln!(
        s,
        "#    or address the server certificate holds ({}):",
        out.sans.join(", ")
    );
    let _ = writeln!(
        s,
        "#      sandbox-readiness check --tls-ca {} --tls-cert {} --tls-key {} --nodes NODE[,NODE...]",
        shell_quote(&out.ca_cert),
        shell_quote(&out.client_cert),
        shell_quote(&out.client_key)
    );
    s.push_str(
        "#    (dialling a node by an address the certificate does not hold? add\n\
         #    --tls-server-name with a name it does.)\n",
    );
    s
}

/// Quotes a path for a shell command line only when it needs it.
fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@=".contains(&b));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn sans_accepted_and_normalised() {
        let cases = [
            ("node-1.pool.example", "node-1.pool.example"),
            ("*.pool.example", "*.pool.example"),
            ("Node.Example.", "node.example"),
            ("10.0.0.1", "10.0.0.1"),
            ("[fd00::1]", "fd00::1"),
            ("::ffff:10.1.2.3", "10.1.2.3"),
            ("localhost", "localhost"),
        ];
        for (input, want) in cases {
            let (name, _) = parse_san(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(name, want, "{input}");
        }
    }

    #[test]
    fn sans_rejected() {
        for bad in [
            "",
            " ",
            "*.com",
            "*",
            "a*.example.com",
            "foo.*.example",
            "foo..bar",
            ".foo",
            "-x.example",
            "x-.example",
            "1.2.3",
            "fe80::1%eth0",
            "exa mple.com",
            "ex@mple.com",
            &"a".repeat(64),
            &format!("{}.com", "a.".repeat(130)),
        ] {
            assert!(parse_san(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn san_list_deduplicated_and_required() {
        let sans = parse_sans(&["a.example".into(), "A.example".into(), "10.0.0.1".into()])
            .expect("valid");
        assert_eq!(sans.len(), 2);
        assert!(matches!(parse_sans(&[]), Err(TlsError::NoSan)));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote(Path::new("/a/b.pem")), "/a/b.pem");
        assert_eq!(shell_quote(Path::new("/a b/c")), "'/a b/c'");
        assert_eq!(shell_quote(Path::new("/it's")), r"'/it'\''s'");
    }
}
