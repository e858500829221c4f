//! `sandbox-readiness tls init DIR`: a private CA, server certificates for
//! the agents (one per node with `--node`, or one shared with `--san`) and a
//! client certificate for `check`, plus the Talos machine-config
//! document that installs the server side on a node, each written to a 0600
//! file (never printed: it holds a private key).

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
/// `check`'s client certificate (its `--tls-cert`).
pub const CLIENT_CERT_FILE: &str = "client.pem";
/// `check`'s client key (its `--tls-key`).
pub const CLIENT_KEY_FILE: &str = "client-key.pem";
/// The ExtensionServiceConfig of the shared server certificate (`--san`).
pub const SERVER_CONFIG_FILE: &str = "server.yaml";
/// Per-node material (`--node`): `NAME.cert.pem`, `NAME.key.pem` and the
/// node's ExtensionServiceConfig `NAME.yaml`. The suffixes differ in their
/// last part, so no node's file can be another node's.
pub const NODES_DIR: &str = "nodes";
/// Node names become file names; `NAME.cert.pem` must fit in 255 bytes.
const MAX_NODE_NAME: usize = 240;

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
            client_name: "sandbox-readiness-check".to_string(),
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
    /// The shared server certificate's ExtensionServiceConfig (0600).
    pub server_config: PathBuf,
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

/// Creates `DIR/{ca,ca-key,server,server-key,client,client-key}.pem` and
/// `DIR/server.yaml` (the shared certificate's ExtensionServiceConfig), all
/// mode 0600, `DIR` itself 0700 if created. Refuses (before writing
/// anything) if one exists, unless `options.force`; forced files are
/// replaced by rename, never rewritten in place, so an old mode cannot
/// survive. Keys are ECDSA P-256. One key for every node lets any node
/// impersonate the others: [`init_nodes`] issues one per node.
pub fn init(dir: &Path, sans: &[String], options: &InitOptions) -> Result<InitOutput, TlsError> {
    let san_list = parse_sans(sans)?;
    let dir = dir_absolute(dir);
    let own = [SERVER_CERT_FILE, SERVER_KEY_FILE, SERVER_CONFIG_FILE].map(|f| dir.join(f));
    prepare(&dir, options, &own)?;
    let auth = Authority::generate(options)?;
    let (server_cert_pem, server_key_pem) =
        auth.server_leaf("sandbox-readiness agent", &san_list)?;
    auth.create_dir(&dir)?;
    let path = |name: &str| dir.join(name);
    let out = InitOutput {
        ca_cert: path(CA_CERT_FILE),
        ca_key: path(CA_KEY_FILE),
        server_cert: path(SERVER_CERT_FILE),
        server_key: path(SERVER_KEY_FILE),
        client_cert: path(CLIENT_CERT_FILE),
        client_key: path(CLIENT_KEY_FILE),
        server_config: path(SERVER_CONFIG_FILE),
        sans: san_list.into_iter().map(|(name, _)| name).collect(),
        ca_not_after: auth.ca_not_after(),
        cert_not_after: auth.cert_not_after(),
        ca_cert_pem: auth.ca_cert_pem.clone(),
        server_cert_pem,
        server_key_pem,
        dir,
    };
    auth.write_shared(
        &out.dir,
        options.force,
        &[(&out.server_key, &out.server_key_pem)],
    )?;
    write_private(
        &out.server_cert,
        out.server_cert_pem.as_bytes(),
        options.force,
    )?;
    write_private(
        &out.server_config,
        render_instructions(&out).as_bytes(),
        options.force,
    )?;
    Ok(out)
}

/// One node of [`init_nodes`]: `NAME[=SAN,SAN...]`. The name is the
/// certificate's first SAN (what `check --tls-server-name-from-node`
/// verifies), and names the node's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    /// Further names and addresses the node is dialled by.
    pub sans: Vec<String>,
}

impl std::str::FromStr for NodeSpec {
    type Err = TlsError;

    fn from_str(value: &str) -> Result<Self, TlsError> {
        let (name, sans) = value.split_once('=').unwrap_or((value, ""));
        let bad = |reason: String| TlsError::BadNode {
            value: value.chars().take(80).collect(),
            reason,
        };
        let (name, kind) = parse_san(name).map_err(|e| bad(e.to_string()))?;
        if name.starts_with('*') {
            return Err(bad("a node name cannot be a wildcard".into()));
        }
        if name.len() > MAX_NODE_NAME {
            return Err(bad(format!(
                "a node name is at most {MAX_NODE_NAME} characters (it names files)"
            )));
        }
        // An IPv6 name would put ':' in file names; name the node instead.
        if matches!(kind, SanType::IpAddress(IpAddr::V6(_))) {
            return Err(bad(
                "an IPv6 address cannot name a node: give NAME=ADDRESS".into()
            ));
        }
        let sans = sans
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Ok(NodeSpec { name, sans })
    }
}

/// Parses a `--nodes-file`: one `NAME[=SAN,...]` per line; `#` starts a
/// comment, blank lines are skipped.
pub fn parse_nodes_file(text: &str) -> Result<Vec<NodeSpec>, TlsError> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::parse)
        .collect()
}

/// What [`init_nodes`] wrote for one node.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    pub name: String,
    /// The certificate's names, the node's name first.
    pub sans: Vec<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The node's ExtensionServiceConfig, with its key (0600).
    pub config: PathBuf,
}

/// What [`init_nodes`] wrote. Holds no key material.
#[derive(Debug, Clone)]
pub struct NodesInitOutput {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub nodes: Vec<NodeFiles>,
    pub ca_not_after: SystemTime,
    pub cert_not_after: SystemTime,
}

/// [`init`] with one server certificate per node: the CA and client files
/// as there, and for each node `DIR/nodes/NAME.{cert.pem,key.pem,yaml}`,
/// all 0600 (`DIR/nodes` 0700 if created). A node's document carries only
/// its own key, so a compromised node cannot answer as another when the
/// `check` verifies names (`check --tls-server-name-from-node`).
pub fn init_nodes(
    dir: &Path,
    nodes: &[NodeSpec],
    options: &InitOptions,
) -> Result<NodesInitOutput, TlsError> {
    if nodes.is_empty() {
        return Err(TlsError::NoSan);
    }
    let mut parsed = Vec::with_capacity(nodes.len());
    for node in nodes {
        if parsed.iter().any(|(n, _): &(String, _)| *n == node.name) {
            return Err(TlsError::BadNode {
                value: node.name.clone(),
                reason: "given twice".into(),
            });
        }
        let names: Vec<String> = std::iter::once(node.name.clone())
            .chain(node.sans.iter().cloned())
            .collect();
        parsed.push((node.name.clone(), parse_sans(&names)?));
    }
    let dir = dir_absolute(dir);
    let node_dir = dir.join(NODES_DIR);
    let node_file = |name: &str, suffix: &str| node_dir.join(format!("{name}.{suffix}"));
    let mut own: Vec<PathBuf> = Vec::new();
    for (name, _) in &parsed {
        for suffix in ["cert.pem", "key.pem", "yaml"] {
            own.push(node_file(name, suffix));
        }
    }
    prepare(&dir, options, &own)?;
    let auth = Authority::generate(options)?;
    let mut leaves = Vec::with_capacity(parsed.len());
    for (name, sans) in &parsed {
        let (cert, key) = auth.server_leaf(&format!("sandbox-readiness agent {name}"), sans)?;
        leaves.push((cert, key));
    }
    auth.create_dir(&dir)?;
    auth.create_dir(&node_dir)?;
    let mut out = NodesInitOutput {
        ca_cert: dir.join(CA_CERT_FILE),
        ca_key: dir.join(CA_KEY_FILE),
        client_cert: dir.join(CLIENT_CERT_FILE),
        client_key: dir.join(CLIENT_KEY_FILE),
        nodes: Vec::with_capacity(parsed.len()),
        ca_not_after: auth.ca_not_after(),
        cert_not_after: auth.cert_not_after(),
        dir: dir.clone(),
    };
    for (name, sans) in parsed {
        out.nodes.push(NodeFiles {
            cert: node_file(&name, "cert.pem"),
            key: node_file(&name, "key.pem"),
            config: node_file(&name, "yaml"),
            sans: sans.into_iter().map(|(n, _)| n).collect(),
            name,
        });
    }
    let keys: Vec<(&Path, &str)> = out
        .nodes
        .iter()
        .zip(&leaves)
        .map(|(n, (_, key))| (n.key.as_path(), key.as_str()))
        .collect();
    auth.write_shared(&dir, options.force, &keys)?;
    for (node, (cert, key)) in out.nodes.iter().zip(&leaves) {
        write_private(&node.cert, cert.as_bytes(), options.force)?;
        let mut doc = String::new();
        let _ = writeln!(
            doc,
            "# sandbox-readiness for node {} only (certificate for {}, until {}).",
            node.name,
            node.sans.join(", "),
            humantime::format_rfc3339_seconds(out.cert_not_after)
        );
        doc.push_str(
            "# SECRET: it contains this node's PRIVATE KEY. Add it to this node's machine\n\
             # config only; check verifies it with --tls-server-name-from-node.\n",
        );
        doc.push_str(&service_config(cert, key, &auth.ca_cert_pem));
        write_private(&node.config, doc.as_bytes(), options.force)?;
    }
    Ok(out)
}

fn dir_absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Checks the validity options and, without `force`, that none of the
/// CA and client files in `dir` nor the files `own` exists.
fn prepare(dir: &Path, options: &InitOptions, own: &[PathBuf]) -> Result<(), TlsError> {
    for validity in [options.ca_validity, options.cert_validity] {
        if validity.is_zero() || validity > MAX_VALIDITY {
            return Err(TlsError::Config(format!(
                "certificate validity {} is out of range (1s to 100 years)",
                humantime::format_duration(validity)
            )));
        }
    }
    if !options.force {
        let shared = [CA_CERT_FILE, CA_KEY_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE];
        for p in shared
            .iter()
            .map(|f| dir.join(f))
            .chain(own.iter().cloned())
        {
            if std::fs::symlink_metadata(&p).is_ok() {
                return Err(TlsError::Exists { path: p });
            }
        }
    }
    Ok(())
}

/// The CA, `check`'s client certificate and the validity window that every
/// server certificate of one run shares.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    ca_cert_pem: String,
    ca_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    not_before: Duration,
    ca_until: Duration,
    cert_until: Duration,
}

fn generate(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate {
        what,
        reason: e.to_string(),
    }
}

impl Authority {
    fn generate(options: &InitOptions) -> Result<Self, TlsError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|_| TlsError::Config("the system clock is before 1970".to_string()))?;
        let not_before = now.saturating_sub(BACKDATE);
        let ca_until = now + options.ca_validity;
        let cert_until = now + options.cert_validity.min(options.ca_validity);

        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(generate("the CA key"))?;
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

        let client_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(generate("the client key"))?;
        let mut client_params = leaf_params(&options.client_name, not_before, cert_until);
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &issuer)
            .map_err(generate("the client certificate"))?;
        Ok(Authority {
            issuer,
            ca_cert_pem: ca_cert.pem(),
            ca_key_pem,
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            not_before,
            ca_until,
            cert_until,
        })
    }

    /// A serverAuth certificate for `sans`: (certificate, key) as PEM.
    fn server_leaf(
        &self,
        common_name: &str,
        sans: &[(String, SanType)],
    ) -> Result<(String, String), TlsError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(generate("the server key"))?;
        let mut params = leaf_params(common_name, self.not_before, self.cert_until);
        params.subject_alt_names = sans.iter().map(|(_, san)| san.clone()).collect();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(generate("the server certificate"))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    fn ca_not_after(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + self.ca_until
    }

    fn cert_not_after(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + self.cert_until
    }

    fn create_dir(&self, dir: &Path) -> Result<(), TlsError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| TlsError::Write {
                path: dir.to_path_buf(),
                reason: io_reason(&e),
            })
    }

    /// Writes the CA and client files and the server keys given. Keys
    /// first: a run that fails half-way leaves no certificate whose key is
    /// missing.
    fn write_shared(
        &self,
        dir: &Path,
        force: bool,
        server_keys: &[(&Path, &str)],
    ) -> Result<(), TlsError> {
        write_private(&dir.join(CA_KEY_FILE), self.ca_key_pem.as_bytes(), force)?;
        for (file, pem) in server_keys {
            write_private(file, pem.as_bytes(), force)?;
        }
        for (name, pem) in [
            (CLIENT_KEY_FILE, &self.client_key_pem),
            (CA_CERT_FILE, &self.ca_cert_pem),
            (CLIENT_CERT_FILE, &self.client_cert_pem),
        ] {
            write_private(&dir.join(name), pem.as_bytes(), force)?;
        }
        Ok(())
    }
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

/// The contents of `DIR/server.yaml` that [`init`] writes: a valid YAML
/// stream whose only document is the Talos `ExtensionServiceConfig` that
/// mounts the shared server certificate, key and client CA into the
/// extension service and points the agent's environment at them, with
/// comments around it (what the files are, that the document carries the
/// server's private key, the matching `check` flags). It is a secret: never
/// print or log it.
pub fn render_instructions(out: &InitOutput) -> String {
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
        "#   {CLIENT_CERT_FILE}, {CLIENT_KEY_FILE}: check's client certificate (until {})",
        until(out.cert_not_after)
    );
    s.push_str("#\n");
    s.push_str("# 1. Add the document below to the machine config of every worker that runs the\n");
    s.push_str("#    sandbox-readiness extension (for example as a config patch).\n");
    s.push_str(
        "#    SECRET: it contains the agents' PRIVATE KEY. Once applied, the machine config\n",
    );
    s.push_str("#    is a secret: store and share it as one.\n");
    s.push_str(&service_config(
        &out.server_cert_pem,
        &out.server_key_pem,
        &out.ca_cert_pem,
    ));
    s.push_str(
        "\n# 2. Ask the agents with check (on your workstation), dialling each node by a name\n",
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

/// The Talos `ExtensionServiceConfig` document (from its `---` through the
/// environment) mounting a server certificate, its key and the client CA
/// at [`NODE_TLS_DIR`] and pointing the agent's environment at them.
fn service_config(cert_pem: &str, key_pem: &str, ca_pem: &str) -> String {
    let node = |file: &str| format!("{NODE_TLS_DIR}/{file}");
    let (node_cert, node_key, node_ca) = (
        node("server.pem"),
        node("server-key.pem"),
        node("client-ca.pem"),
    );
    let mut s = String::new();
    s.push_str("---\n");
    s.push_str("apiVersion: v1alpha1\n");
    s.push_str("kind: ExtensionServiceConfig\n");
    s.push_str("name: sandbox-readiness\n");
    s.push_str("configFiles:\n");
    for (mount, pem) in [
        (&node_cert, cert_pem),
        (&node_key, key_pem),
        (&node_ca, ca_pem),
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
    s
}

fn until(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The first lines of both summaries: where the files went, and the CA.
fn summary_head(dir: &Path, ca_not_after: SystemTime) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "wrote (all 0600) in {}:", dir.display());
    let _ = writeln!(
        s,
        "  {CA_CERT_FILE}, {CA_KEY_FILE}: the CA (until {}); keep {CA_KEY_FILE} offline",
        until(ca_not_after)
    );
    s
}

/// What `tls init --san` prints: the files written, none of their contents.
pub fn render_summary(out: &InitOutput) -> String {
    let mut s = summary_head(&out.dir, out.ca_not_after);
    let _ = writeln!(
        s,
        "  {SERVER_CERT_FILE}, {SERVER_KEY_FILE}: ONE server certificate for every node ({}; until {})",
        out.sans.join(", "),
        until(out.cert_not_after)
    );
    let _ = writeln!(
        s,
        "  {CLIENT_CERT_FILE}, {CLIENT_KEY_FILE}: check's client certificate"
    );
    let _ = writeln!(
        s,
        "  {SERVER_CONFIG_FILE}: the ExtensionServiceConfig for every node (SECRET: holds the server key)"
    );
    s.push_str(
        "a node holding the shared key can answer as any other: prefer --node NAME=SAN,... (one certificate per node)\n",
    );
    let _ = writeln!(
        s,
        "add {SERVER_CONFIG_FILE} to each node's machine config; then:\n  sandbox-readiness check --tls-ca {} --tls-cert {} --tls-key {} --nodes NODE[,NODE...]",
        shell_quote(&out.ca_cert),
        shell_quote(&out.client_cert),
        shell_quote(&out.client_key)
    );
    s
}

/// What `tls init --node` prints: the files written, none of their contents.
pub fn render_nodes_summary(out: &NodesInitOutput) -> String {
    let mut s = summary_head(&out.dir, out.ca_not_after);
    let _ = writeln!(
        s,
        "  {CLIENT_CERT_FILE}, {CLIENT_KEY_FILE}: check's client certificate (until {})",
        until(out.cert_not_after)
    );
    for n in &out.nodes {
        let _ = writeln!(
            s,
            "  {NODES_DIR}/{0}.yaml: node {0}'s ExtensionServiceConfig (SECRET: holds its key; {1})",
            n.name,
            n.sans.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "add each nodes/NAME.yaml to that node's machine config only; then:\n  sandbox-readiness check --tls-ca {} --tls-cert {} --tls-key {} --tls-server-name-from-node --kube-nodes ...",
        shell_quote(&out.ca_cert),
        shell_quote(&out.client_cert),
        shell_quote(&out.client_key)
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
