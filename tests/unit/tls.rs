//! The TLS layer over real loopback sockets: a tonic server carrying the
//! standard health service behind `tls::incoming`, real rustls clients
//! (tonic's and a raw tokio-rustls one to look at the served certificate),
//! certificates from `tls::init` and from rcgen directly where a test needs
//! one `init` does not make (expired, from a test-only CA).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use sandbox_readiness::tls::{
    self, client_tls_config, incoming, init, render_instructions, AcceptLimits, AcceptStats,
    InitOptions, InitOutput, ReloadOptions, ServerTls, TlsError, TlsPaths,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::rustls;
use tonic::transport::{ClientTlsConfig, Endpoint, Server};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

// ---------------------------------------------------------------- helpers

/// A tonic server with the health service, behind our accept loop; stopped
/// and its socket closed on drop.
struct Served {
    addr: SocketAddr,
    stats: Arc<AcceptStats>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

async fn serve_tls_on(bind: &str, tls: ServerTls, limits: AcceptLimits) -> Served {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = incoming(listener, tls, limits);
    let stats = incoming.stats();
    let (stop, stopped) = oneshot::channel::<()>();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let task = tokio::spawn(async move {
        let _ = Server::builder()
            .add_service(health)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
    });
    Served {
        addr,
        stats,
        stop: Some(stop),
        task,
    }
}

async fn serve_tls(tls: ServerTls, limits: AcceptLimits) -> Served {
    serve_tls_on("127.0.0.1:0", tls, limits).await
}

/// One health check over a fresh connection: the status, or why not.
async fn ask(addr: SocketAddr, tls: ClientTlsConfig) -> Result<i32, String> {
    let host = match addr {
        SocketAddr::V4(_) => addr.to_string(),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    };
    let call = async move {
        let channel = Endpoint::from_shared(format!("https://{host}"))
            .map_err(|e| e.to_string())?
            .tls_config(tls)
            .map_err(|e| format!("tls_config: {e:?}"))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let response = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map_err(|e| format!("call: {e:?}"))?;
        Ok(response.into_inner().status)
    };
    tokio::time::timeout(Duration::from_secs(15), call)
        .await
        .map_err(|_| "no answer within 15 s".to_string())?
}

const SERVING: i32 = ServingStatus::Serving as i32;

/// Waits (up to 5 s) until `cond` holds on the server's counters.
async fn wait_stats(stats: &AcceptStats, what: &str, cond: impl Fn(&tls::AcceptCounts) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = stats.snapshot();
        if cond(&now) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: counters stuck at {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The certificate a server presents, seen by a raw rustls client trusting
/// `ca_pem` (no client certificate).
async fn served_cert(addr: SocketAddr, ca_pem: &str, name: &str) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| e.to_string())?;
    let (_, session) = stream.get_ref();
    assert_eq!(
        session.alpn_protocol(),
        Some(&b"h2"[..]),
        "ALPN must pick h2"
    );
    let chain = session.peer_certificates().ok_or("no certificate")?;
    Ok(chain[0].to_vec())
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// A CA made with rcgen directly, for certificates `init` never makes.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

struct Leaf {
    cert: String,
    key: String,
}

impl TestCa {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2090, 1, 1);
        let pem = params.self_signed(&key).unwrap().pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    fn leaf(&self, cn: &str, eku: ExtendedKeyUsagePurpose, from: i32, until: i32) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ];
        params.extended_key_usages = vec![eku];
        params.use_authority_key_identifier_extension = true;
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(until, 1, 1);
        Leaf {
            cert: params.signed_by(&key, &self.issuer).unwrap().pem(),
            key: key.serialize_pem(),
        }
    }

    fn server(&self, cn: &str) -> Leaf {
        self.leaf(cn, ExtendedKeyUsagePurpose::ServerAuth, 2020, 2090)
    }

    fn client(&self, cn: &str) -> Leaf {
        self.leaf(cn, ExtendedKeyUsagePurpose::ClientAuth, 2020, 2090)
    }
}

/// Writes via a temporary file and rename, as certificate rotators do.
fn put(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Writes a leaf's PEM pair under `dir` as `<stem>.pem` / `<stem>-key.pem`.
fn put_leaf(dir: &Path, stem: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}-key.pem"));
    put(&key, &leaf.key);
    put(&cert, &leaf.cert);
    (cert, key)
}

fn init_in(dir: &Path, sans: &[&str]) -> InitOutput {
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    init(dir, &sans, &InitOptions::default()).unwrap()
}

fn init_server(out: &InitOutput) -> ServerTls {
    ServerTls::load(TlsPaths {
        cert: out.server_cert.clone(),
        key: out.server_key.clone(),
        client_ca: Some(out.ca_cert.clone()),
    })
    .unwrap()
}

fn init_client(out: &InitOutput) -> ClientTlsConfig {
    client_tls_config(
        &out.ca_cert,
        Some(&out.client_cert),
        Some(&out.client_key),
        None,
    )
    .unwrap()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

// ---------------------------------------------------------------- init

#[test]
fn init_writes_six_private_files_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let out = init_in(&dir, &["*.pool.example", "10.0.0.7"]);
    let files = [
        &out.ca_cert,
        &out.ca_key,
        &out.server_cert,
        &out.server_key,
        &out.client_cert,
        &out.client_key,
    ];
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "ca.pem",
            "ca-key.pem",
            "server.pem",
            "server-key.pem",
            "client.pem",
            "client-key.pem"
        ]
    );
    for file in files {
        assert_eq!(file.parent(), Some(dir.as_path()));
        assert_eq!(mode_of(file), 0o600, "{}", file.display());
    }
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(out.sans, ["*.pool.example", "10.0.0.7"]);
    let first_ca = std::fs::read(&out.ca_cert).unwrap();

    let again = init(&dir, &["a.example".into()], &InitOptions::default());
    match again {
        Err(TlsError::Exists { path }) => assert_eq!(path, out.ca_cert),
        other => panic!("second init must refuse, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&out.ca_cert).unwrap(),
        first_ca,
        "refused init wrote anyway"
    );

    // A file someone loosened to 0644 must come back 0600 on --force: the
    // mode is set at creation, never inherited from the old file.
    std::fs::set_permissions(&out.server_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let forced = init(
        &dir,
        &["a.example".into()],
        &InitOptions {
            force: true,
            ..InitOptions::default()
        },
    )
    .unwrap();
    assert_ne!(std::fs::read(&forced.ca_cert).unwrap(), first_ca);
    for file in [&forced.server_key, &forced.ca_key, &forced.client_cert] {
        assert_eq!(mode_of(file), 0o600, "{}", file.display());
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn init_rejects_bad_sans_before_writing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    for (san, want) in [
        ("*.example", "at least two labels"),
        ("node.*.example", "leftmost label"),
        ("no_such host", "may only hold"),
        ("1.2.3", "all digits"),
    ] {
        let err = init(&dir, &[san.to_string()], &InitOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("invalid --san"), "{text}");
        assert!(text.contains(want), "{san}: {text}");
        assert!(!text.contains('\n'));
    }
    let err = init(&dir, &[], &InitOptions::default()).unwrap_err();
    assert!(matches!(err, TlsError::NoSan), "{err}");
    assert!(!dir.exists(), "a refused init created {}", dir.display());
}

/// The printed document must be the YAML Talos expects, carrying exactly
/// the files init wrote; parsed by a real YAML parser where one exists.
#[test]
fn instructions_are_an_extension_service_config() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["node1.pool.example", "fd00::7"]);
    let text = render_instructions(&out);
    // The client certificate is check's: the controller never dials an agent.
    let summary = sandbox_readiness::tls::render_summary(&out);
    for printed in [&text, &summary] {
        assert!(
            printed.contains("check's client certificate") && !printed.contains("controller"),
            "{printed}"
        );
    }
    let server_key = std::fs::read_to_string(&out.server_key).unwrap();
    let server_cert = std::fs::read_to_string(&out.server_cert).unwrap();
    let ca = std::fs::read_to_string(&out.ca_cert).unwrap();
    let client_key = std::fs::read_to_string(&out.client_key).unwrap();
    let ca_key = std::fs::read_to_string(&out.ca_key).unwrap();

    assert!(
        text.contains("PRIVATE KEY"),
        "the secret warning is missing"
    );
    assert!(text.to_lowercase().contains("secret"));
    for must in [
        "apiVersion: v1alpha1\n",
        "kind: ExtensionServiceConfig\n",
        "name: sandbox-readiness\n",
        "  - mountPath: /usr/local/etc/sandbox-readiness/tls/server.pem\n",
        "  - mountPath: /usr/local/etc/sandbox-readiness/tls/server-key.pem\n",
        "  - mountPath: /usr/local/etc/sandbox-readiness/tls/client-ca.pem\n",
        "  - SANDBOX_READINESS_TLS_CERT=/usr/local/etc/sandbox-readiness/tls/server.pem\n",
        "  - SANDBOX_READINESS_TLS_KEY=/usr/local/etc/sandbox-readiness/tls/server-key.pem\n",
        "  - SANDBOX_READINESS_CLIENT_CA=/usr/local/etc/sandbox-readiness/tls/client-ca.pem\n",
    ] {
        assert!(text.contains(must), "missing {must:?} in:\n{text}");
    }
    let check = format!(
        "sandbox-readiness check --tls-ca {} --tls-cert {} --tls-key {}",
        out.ca_cert.display(),
        out.client_cert.display(),
        out.client_key.display()
    );
    assert!(text.contains(&check), "missing {check:?}");
    // Only the server's key goes to nodes.
    let body = |pem: &str| pem.lines().nth(1).unwrap().to_string();
    assert!(text.contains(&body(&server_key)));
    assert!(
        !text.contains(&body(&client_key)),
        "client key leaked into the output"
    );
    assert!(
        !text.contains(&body(&ca_key)),
        "CA key leaked into the output"
    );
    assert!(
        !format!("{out:?}").contains(&body(&server_key)),
        "Debug shows the key"
    );

    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("the output is not valid YAML: {e}\n{text}"))
        })
        .filter(|d: &serde_json::Value| !d.is_null())
        .collect();
    assert_eq!(docs.len(), 1, "exactly one document: {docs:?}");
    let doc = &docs[0];
    assert_eq!(doc["apiVersion"], "v1alpha1");
    assert_eq!(doc["kind"], "ExtensionServiceConfig");
    assert_eq!(doc["name"], "sandbox-readiness");
    let files = doc["configFiles"].as_array().unwrap();
    let want = [
        ("server.pem", &server_cert),
        ("server-key.pem", &server_key),
        ("client-ca.pem", &ca),
    ];
    assert_eq!(files.len(), want.len());
    for (file, (name, contents)) in files.iter().zip(want) {
        assert_eq!(
            file["mountPath"],
            format!("/usr/local/etc/sandbox-readiness/tls/{name}")
        );
        assert_eq!(
            file["content"].as_str().unwrap(),
            contents.as_str(),
            "{name}"
        );
    }
    assert_eq!(doc["environment"].as_array().unwrap().len(), 3);
}

// ---------------------------------------------------------------- mTLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_admits_only_the_operators_client() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(
        &tmp.path().join("a"),
        &["127.0.0.1", "::1", "localhost", "*.pool.example"],
    );
    let other = init_in(&tmp.path().join("b"), &["127.0.0.1"]);
    let served = serve_tls(init_server(&out), AcceptLimits::default()).await;
    let addr = served.addr;

    // The client material of `tls init`, end to end.
    assert_eq!(ask(addr, init_client(&out)).await, Ok(SERVING));
    let ok_before = served.stats.snapshot().handshakes_ok;
    assert!(ok_before >= 1);

    let refusals: Vec<(&str, ClientTlsConfig)> = vec![
        (
            "no client certificate",
            client_tls_config(&out.ca_cert, None, None, None).unwrap(),
        ),
        (
            "a client certificate from another CA",
            client_tls_config(
                &out.ca_cert,
                Some(&other.client_cert),
                Some(&other.client_key),
                None,
            )
            .unwrap(),
        ),
        (
            "the server certificate (serverAuth only) as a client certificate",
            client_tls_config(
                &out.ca_cert,
                Some(&out.server_cert),
                Some(&out.server_key),
                None,
            )
            .unwrap(),
        ),
    ];
    for (what, config) in refusals {
        let failed = served.stats.snapshot().handshakes_failed;
        let answer = ask(addr, config).await;
        assert!(answer.is_err(), "{what}: answered {answer:?}");
        wait_stats(&served.stats, what, |c| c.handshakes_failed > failed).await;
    }
    assert_eq!(
        served.stats.snapshot().handshakes_ok,
        ok_before,
        "a refused client completed a handshake"
    );

    // Failed handshakes did not end the stream; names in the certificate
    // work, names outside it do not (checked by the client).
    assert_eq!(ask(addr, init_client(&out)).await, Ok(SERVING));
    let by_wildcard = client_tls_config(
        &out.ca_cert,
        Some(&out.client_cert),
        Some(&out.client_key),
        Some("node-9.pool.example"),
    )
    .unwrap();
    assert_eq!(ask(addr, by_wildcard).await, Ok(SERVING));
    let wrong_name = client_tls_config(
        &out.ca_cert,
        Some(&out.client_cert),
        Some(&out.client_key),
        Some("node-9.other.example"),
    )
    .unwrap();
    assert!(ask(addr, wrong_name).await.is_err());
    // A client trusting another CA does not trust this server.
    assert!(ask(addr, init_client(&other)).await.is_err());

    // IPv6 loopback with the ::1 SAN.
    let served6 = serve_tls_on("[::1]:0", init_server(&out), AcceptLimits::default()).await;
    assert_eq!(ask(served6.addr, init_client(&out)).await, Ok(SERVING));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_not_yet_valid_client_certificates_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let ca_file = tmp.path().join("ca.pem");
    put(&ca_file, &ca.pem);
    let (cert, key) = put_leaf(tmp.path(), "server", &ca.server("agent"));
    let tls = ServerTls::load(TlsPaths {
        cert,
        key,
        client_ca: Some(ca_file.clone()),
    })
    .unwrap();
    assert!(tls.requires_client_cert());
    let served = serve_tls(tls, AcceptLimits::default()).await;

    let config_for = |stem: &str, leaf: &Leaf| {
        let (c, k) = put_leaf(tmp.path(), stem, leaf);
        client_tls_config(&ca_file, Some(&c), Some(&k), None).unwrap()
    };
    // Same CA, valid now: the control that makes the refusals mean "expired".
    let valid = config_for("valid", &ca.client("controller"));
    assert_eq!(ask(served.addr, valid).await, Ok(SERVING));

    for (stem, from, until) in [("expired", 2020, 2021), ("future", 2080, 2090)] {
        let leaf = ca.leaf(
            "controller",
            ExtendedKeyUsagePurpose::ClientAuth,
            from,
            until,
        );
        let failed = served.stats.snapshot().handshakes_failed;
        let answer = ask(served.addr, config_for(stem, &leaf)).await;
        assert!(answer.is_err(), "{stem} certificate answered: {answer:?}");
        wait_stats(&served.stats, stem, |c| c.handshakes_failed > failed).await;
    }
}

// ---------------------------------------------------------------- reload

struct Rotating {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    ca: TestCa,
    tls: ServerTls,
}

fn rotating() -> Rotating {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let ca = TestCa::new("rotation CA");
    let (cert, key) = put_leaf(&dir, "server", &ca.server("agent-1"));
    let tls = ServerTls::load(TlsPaths {
        cert,
        key,
        client_ca: None,
    })
    .unwrap();
    Rotating {
        _tmp: tmp,
        dir,
        ca,
        tls,
    }
}

/// Polls new connections until they see `want` (up to 5 s).
async fn wait_served(addr: SocketAddr, ca_pem: &str, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = served_cert(addr, ca_pem, "localhost").await.unwrap();
        if seen == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "new connections still see the old certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_the_certificate_and_keeps_it_when_files_are_bad() {
    let r = rotating();
    let served = serve_tls(r.tls.clone(), AcceptLimits::default()).await;
    let first = std::fs::read_to_string(r.dir.join("server.pem")).unwrap();
    assert_eq!(
        served_cert(served.addr, &r.ca.pem, "localhost")
            .await
            .unwrap(),
        der_of(&first)
    );
    assert!(!r.tls.reload_if_changed().unwrap(), "nothing changed yet");

    let second = r.ca.server("agent-2");
    put_leaf(&r.dir, "server", &second);
    r.tls.reload().unwrap();
    assert_eq!(r.tls.generation(), 2);
    assert_eq!(
        served_cert(served.addr, &r.ca.pem, "localhost")
            .await
            .unwrap(),
        der_of(&second.cert)
    );

    // A half-done rotation (new certificate, old key): refused, old pair kept.
    let third = r.ca.server("agent-3");
    put(&r.dir.join("server.pem"), &third.cert);
    let err = r.tls.reload().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "TLS key {} does not match certificate {}",
            r.dir.join("server-key.pem").display(),
            r.dir.join("server.pem").display()
        )
    );
    // A vanished key: same.
    std::fs::remove_file(r.dir.join("server-key.pem")).unwrap();
    let err = r.tls.reload_if_changed().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read TLS key {}: No such file or directory",
            r.dir.join("server-key.pem").display()
        )
    );
    assert_eq!(r.tls.generation(), 2);
    assert_eq!(
        served_cert(served.addr, &r.ca.pem, "localhost")
            .await
            .unwrap(),
        der_of(&second.cert),
        "a failed reload changed the served certificate"
    );
    // The error is reported once, not on every poll.
    assert!(!r.tls.reload_if_changed().unwrap());

    put(&r.dir.join("server-key.pem"), &third.key);
    assert!(r.tls.reload_if_changed().unwrap());
    assert_eq!(
        served_cert(served.addr, &r.ca.pem, "localhost")
            .await
            .unwrap(),
        der_of(&third.cert)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_a_new_client_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let old_ca = TestCa::new("old CA");
    let new_ca = TestCa::new("new CA");
    let ca_file = tmp.path().join("client-ca.pem");
    put(&ca_file, &old_ca.pem);
    let (cert, key) = put_leaf(tmp.path(), "server", &old_ca.server("agent"));
    let tls = ServerTls::load(TlsPaths {
        cert,
        key,
        client_ca: Some(ca_file.clone()),
    })
    .unwrap();
    let served = serve_tls(tls.clone(), AcceptLimits::default()).await;
    // The client trusts the server through the old CA either way.
    let server_ca = tmp.path().join("server-ca.pem");
    put(&server_ca, &old_ca.pem);
    let client_of = |stem: &str, ca: &TestCa| {
        let (c, k) = put_leaf(tmp.path(), stem, &ca.client("controller"));
        client_tls_config(&server_ca, Some(&c), Some(&k), None).unwrap()
    };
    let old_client = client_of("old", &old_ca);
    let new_client = client_of("new", &new_ca);
    assert_eq!(ask(served.addr, old_client.clone()).await, Ok(SERVING));
    assert!(ask(served.addr, new_client.clone()).await.is_err());

    put(&ca_file, &new_ca.pem);
    tls.reload().unwrap();
    assert!(ask(served.addr, old_client).await.is_err());
    assert_eq!(ask(served.addr, new_client).await, Ok(SERVING));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads() {
    let r = rotating();
    let served = serve_tls(r.tls.clone(), AcceptLimits::default()).await;
    let reloader = r
        .tls
        .spawn_reloader(ReloadOptions {
            poll_interval: None,
            sighup: true,
        })
        .unwrap();
    let next = r.ca.server("agent-hup");
    put_leaf(&r.dir, "server", &next);
    let before = r.tls.generation();
    // SAFETY: kill(2) on our own pid with a signal whose handler
    // spawn_reloader installed before returning; no memory is involved.
    let rc = unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
    assert_eq!(rc, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.tls.generation() == before {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        served_cert(served.addr, &r.ca.pem, "localhost")
            .await
            .unwrap(),
        der_of(&next.cert)
    );
    drop(reloader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_files_are_picked_up_by_polling() {
    let r = rotating();
    let served = serve_tls(r.tls.clone(), AcceptLimits::default()).await;
    let reloader = r
        .tls
        .spawn_reloader(ReloadOptions {
            poll_interval: Some(Duration::from_millis(100)),
            sighup: false,
        })
        .unwrap();
    let next = r.ca.server("agent-polled");
    put_leaf(&r.dir, "server", &next);
    wait_served(served.addr, &r.ca.pem, &der_of(&next.cert)).await;

    // Dropping the reloader stops it: a later rotation is not picked up.
    drop(reloader);
    let generation = r.tls.generation();
    put_leaf(&r.dir, "server", &r.ca.server("agent-unpolled"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r.tls.generation(), generation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_needs_no_signal_or_poll_to_start() {
    let r = rotating();
    let reloader = r.tls.spawn_reloader(ReloadOptions {
        poll_interval: Some(Duration::ZERO),
        sighup: false,
    });
    assert!(reloader.is_ok());
}

// ---------------------------------------------------------------- hostile peers

/// Idle peers, a truncated ClientHello and garbage do not delay a good
/// client, are cut at the handshake timeout, and never end the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_garbage_peers_do_not_block_a_good_client() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let timeout = Duration::from_secs(1);
    let served = serve_tls(
        init_server(&out),
        AcceptLimits {
            handshake_timeout: timeout,
            // All 22 come from one address; this is about timeouts.
            max_handshakes_per_ip: 0,
            ..AcceptLimits::default()
        },
    )
    .await;
    let addr = served.addr;

    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // A TLS record header promising a 512-byte ClientHello, then silence.
    let mut truncated = TcpStream::connect(addr).await.unwrap();
    truncated
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    let noise: Vec<u8> = (0..4096).map(|_| fastrand::u8(..)).collect();
    let _ = garbage.write_all(&noise).await;
    wait_stats(&served.stats, "hostile peers accepted", |c| {
        c.accepted >= 22
    })
    .await;

    let started = Instant::now();
    assert_eq!(ask(addr, init_client(&out)).await, Ok(SERVING));
    let latency = started.elapsed();
    eprintln!("good client answered in {latency:?} beside 22 hostile connections");
    assert!(
        latency < timeout,
        "the good client waited {latency:?}, as long as the hostile peers' timeout"
    );
    wait_stats(&served.stats, "garbage refused", |c| {
        c.handshakes_failed >= 1
    })
    .await;

    // The server hangs up on the idle ones once the timeout passes.
    let mut buf = [0u8; 16];
    let cut = tokio::time::timeout(timeout * 4, idle[0].read(&mut buf)).await;
    assert!(
        matches!(cut, Ok(Ok(0)) | Ok(Err(_))),
        "idle peer not cut: {cut:?}"
    );
    wait_stats(&served.stats, "idle peers timed out", |c| {
        c.handshakes_timed_out >= 21 && c.in_flight == 0
    })
    .await;
    assert_eq!(ask(addr, init_client(&out)).await, Ok(SERVING));
    eprintln!("counters: {:?}", served.stats.snapshot());
}

/// A connection from another loopback address; `None` when the server
/// reset it before `connect` returned (a shed connection on loopback).
async fn connect_from(source: &str, addr: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(source.parse().unwrap()).unwrap();
    match socket.connect(addr).await {
        Ok(stream) => Some(stream),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(e) => panic!("connect from {source}: {e}"),
    }
}

/// One address flooding handshakes is capped on its own; others get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_address_cap_sheds_only_the_flooding_address() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let served = serve_tls(
        init_server(&out),
        AcceptLimits {
            handshake_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(30),
            max_handshakes: 64,
            max_handshakes_per_ip: 4,
        },
    )
    .await;
    let mut flood = Vec::new();
    for _ in 0..10 {
        flood.push(connect_from("127.0.0.2:0", served.addr).await);
    }
    // Counters move in two tasks; wait for both to settle, then be exact.
    wait_stats(&served.stats, "flood accepted", |c| {
        c.accepted >= 10 && c.shed + c.in_flight >= 10
    })
    .await;
    let counts = served.stats.snapshot();
    assert_eq!(counts.shed, 6, "{counts:?}");
    assert_eq!(counts.in_flight, 4, "{counts:?}");
    // The shed ones were closed at once, not left hanging.
    let mut closed = 0;
    for conn in &mut flood {
        let Some(conn) = conn else {
            closed += 1;
            continue;
        };
        let mut buf = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(500), conn.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 6);

    let started = Instant::now();
    assert_eq!(ask(served.addr, init_client(&out)).await, Ok(SERVING));
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// With the global cap reached by silent peers, a newcomer takes the place
/// of the oldest one still waiting for its ClientHello: silent sockets can
/// never lock a real client out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_of_silent_peers_makes_room_for_a_new_client() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let served = serve_tls(
        init_server(&out),
        AcceptLimits {
            handshake_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(30),
            max_handshakes: 3,
            max_handshakes_per_ip: 0,
        },
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(served.addr).await.unwrap());
        // One at a time, so "oldest" is well defined.
        let n = idle.len() as u64;
        wait_stats(&served.stats, "idle peer in flight", |c| c.in_flight == n).await;
    }
    assert_eq!(ask(served.addr, init_client(&out)).await, Ok(SERVING));
    let counts = served.stats.snapshot();
    assert_eq!((counts.evicted, counts.shed), (1, 0), "{counts:?}");
    // The oldest silent peer was cut, the younger ones were not.
    let mut buf = [0u8; 1];
    let cut = tokio::time::timeout(Duration::from_secs(2), idle[0].read(&mut buf)).await;
    assert!(matches!(cut, Ok(Ok(0) | Err(_))), "oldest not cut: {cut:?}");
    let kept = tokio::time::timeout(Duration::from_millis(300), idle[2].read(&mut buf)).await;
    assert!(kept.is_err(), "the youngest was cut too: {kept:?}");
}

/// Silent peers are cut at the ClientHello deadline, long before the
/// handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_hello_in_time_is_cut_at_the_hello_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let served = serve_tls(
        init_server(&out),
        AcceptLimits {
            handshake_timeout: Duration::from_secs(60),
            hello_timeout: Duration::from_millis(300),
            ..AcceptLimits::default()
        },
    )
    .await;
    let started = Instant::now();
    let mut idle = TcpStream::connect(served.addr).await.unwrap();
    let mut buf = [0u8; 1];
    let cut = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buf)).await;
    assert!(matches!(cut, Ok(Ok(0) | Err(_))), "not cut: {cut:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ask(served.addr, init_client(&out)).await, Ok(SERVING));
}

// ---------------------------------------------------------------- errors, plain

#[test]
fn load_errors_are_one_line_and_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = TestCa::new("errors CA");
    let (cert, key) = put_leaf(dir, "server", &ca.server("agent"));
    let other = ca.server("other");
    let load = |cert: &Path, key: &Path, client_ca: Option<&Path>| {
        ServerTls::load(TlsPaths {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: client_ca.map(Path::to_path_buf),
        })
        .unwrap_err()
        .to_string()
    };
    let missing = dir.join("missing.pem");
    let d = |p: &Path| p.display().to_string();

    assert_eq!(
        load(&cert, &missing, None),
        format!(
            "cannot read TLS key {}: No such file or directory",
            d(&missing)
        )
    );
    assert_eq!(
        load(&missing, &key, None),
        format!(
            "cannot read TLS certificate {}: No such file or directory",
            d(&missing)
        )
    );
    assert_eq!(
        load(&key, &key, None),
        format!("no certificate found in {}", d(&key))
    );
    assert_eq!(
        load(&cert, &cert, None),
        format!("no private key found in {}", d(&cert))
    );
    let other_key = dir.join("other-key.pem");
    put(&other_key, &other.key);
    assert_eq!(
        load(&cert, &other_key, None),
        format!(
            "TLS key {} does not match certificate {}",
            d(&other_key),
            d(&cert)
        )
    );
    assert_eq!(
        load(&cert, &key, Some(dir)),
        format!("client CA {} is not a regular file", d(dir))
    );
    assert_eq!(
        load(&cert, &key, Some(&key)),
        format!("no certificate found in {}", d(&key))
    );

    // A broken key file: the message must not quote it.
    let broken = dir.join("broken-key.pem");
    let truncated: String = other.key.lines().take(2).collect::<Vec<_>>().join("\n");
    put(&broken, &truncated);
    let text = load(&cert, &broken, None);
    assert_eq!(
        text,
        format!(
            "invalid PEM in TLS key {}: a section has no END line",
            d(&broken)
        )
    );
    let secret_line = other.key.lines().nth(1).unwrap();
    assert!(!text.contains(secret_line));

    let big = dir.join("big.pem");
    std::fs::write(&big, vec![b'A'; 2 * 1024 * 1024]).unwrap();
    assert_eq!(
        load(&big, &key, None),
        format!("TLS certificate {} is larger than 1048576 bytes", d(&big))
    );
    for text in [load(&cert, &missing, None), load(&big, &key, None)] {
        assert!(!text.contains('\n'));
    }
}

#[test]
fn client_config_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let err = client_tls_config(&out.ca_cert, Some(&out.client_cert), None, None).unwrap_err();
    assert!(matches!(err, TlsError::IncompleteIdentity), "{err}");
    let err = client_tls_config(
        &out.ca_cert,
        Some(&out.client_cert),
        Some(&out.server_key),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");
    let err = client_tls_config(&out.client_key, None, None, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("no certificate found in {}", out.client_key.display())
    );
    let err = client_tls_config(&out.ca_cert, None, None, Some("not a name")).unwrap_err();
    assert_eq!(err.to_string(), "invalid TLS server name \"not a name\"");
    assert!(client_tls_config(&out.ca_cert, None, None, Some("fd00::1")).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_closes_the_port() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init_in(tmp.path(), &["127.0.0.1"]);
    let served = serve_tls(init_server(&out), AcceptLimits::default()).await;
    let addr = served.addr;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    wait_stats(&served.stats, "idle accepted", |c| c.in_flight == 1).await;
    let stats = Arc::clone(&served.stats);
    drop(served);
    let mut buf = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(2), idle.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0) | Err(_))),
        "handshake not aborted: {r:?}"
    );
    wait_stats(&stats, "in-flight cleared", |c| c.in_flight == 0).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "port still open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
