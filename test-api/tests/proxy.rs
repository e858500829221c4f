//! The fault proxy in front of a real kube-apiserver (scripts/control-plane.sh,
//! the pinned v1.36.3): what it forwards is decided by the real server's
//! authorizers with the caller's identity (front-proxy headers), and what it
//! does instead of forwarding reaches real clients (kube-rs, the pinned
//! kubectl) as the real server would send it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use test_api::proxy::{ClientCert, FaultProxy, RequestRecord, Scripted};

// ------------------------------------------------------------ the cluster

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One real cluster for this binary's tests. A static is never dropped, so
/// a watchdog shell in a session of its own runs `down` once this process
/// is gone (a panic, an abort or a SIGKILL included).
struct Cluster {
    dir: PathBuf,
    _watchdog: std::process::Child,
}

fn control_plane(args: &[&str], dir: &Path) -> Result<(), String> {
    let (cmd, rest) = args.split_first().unwrap();
    let out = Command::new(repo().join("scripts/control-plane.sh"))
        .arg(cmd)
        .arg(dir)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string())
    }
}

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("sr-proxy-cluster.")
            .tempdir()
            .unwrap()
            .keep();
        let watchdog = Command::new("setsid")
            .args([
                "sh",
                "-c",
                r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" down "$3" >/dev/null 2>&1; rm -rf "$3""#,
                "sr-proxy-watchdog",
            ])
            .arg(std::process::id().to_string())
            .arg(repo().join("scripts/control-plane.sh"))
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        control_plane(&["up"], &dir).unwrap_or_else(|e| panic!("real control plane: {e}"));
        eprintln!("real control plane up in {:?}", started.elapsed());
        Cluster {
            dir,
            _watchdog: watchdog,
        }
    })
}

static UNIQUE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Cluster {
    /// Registers a new Node as kubelet does; its name.
    fn new_node(&self, prefix: &str) -> String {
        let n = UNIQUE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}-{n}");
        control_plane(&["node", &name], &self.dir).unwrap_or_else(|e| panic!("node {name}: {e}"));
        name
    }

    fn kubectl_bin(&self) -> PathBuf {
        let env = std::fs::read_to_string(self.dir.join("control-plane.env")).unwrap();
        let bin = env
            .lines()
            .find_map(|l| l.strip_prefix("BIN="))
            .unwrap()
            .to_string();
        PathBuf::from(bin).join("kubectl")
    }

    fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(self.kubectl_bin())
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn admin(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    fn audit(&self) -> Vec<Value> {
        // Bytes, not a string: the server may be writing the last line, and
        // stop mid-character; only whole lines parse.
        String::from_utf8_lossy(&std::fs::read(self.dir.join("audit.log")).unwrap_or_default())
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .collect()
    }
}

// ------------------------------------------------------------ a raw client

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

fn tls_client(ca_pem: &str, cert: Option<&ClientCert>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let cfg = match cert {
        Some(c) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One request on a fresh connection; Err is what the client saw fail
/// (connect, TLS, the exchange) or "timeout".
fn request(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
    within: Duration,
) -> Result<Answer, String> {
    let tls = Arc::clone(tls);
    let go = async move {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("127.0.0.1:{port}"))
            .header("accept", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            )))
            .unwrap();
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| format!("exchange: {e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.to_vec(),
        })
    };
    rt().block_on(async {
        tokio::time::timeout(within, go)
            .await
            .unwrap_or_else(|_| Err("timeout".into()))
    })
}

fn json_of(a: &Answer) -> Value {
    serde_json::from_slice(&a.body).unwrap_or(Value::Null)
}

fn node_cert(p: &FaultProxy, node: &str) -> ClientCert {
    p.client_cert(&format!("system:node:{node}"), &["system:nodes"])
}

const T: Duration = Duration::from_secs(10);

// ------------------------------------------------------------ the tests

/// A 429 with Retry-After from the proxy reaches kube-rs as the real
/// server's Status (reason TooManyRequests), and the pinned kubectl
/// (client-go) waits the Retry-After and asks again, getting the real
/// server's answer.
#[test]
fn a_scripted_429_reaches_kube_clients_with_retry_after() {
    let c = cluster();
    let node = c.new_node("p429");
    let p = FaultProxy::http(&c.dir).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = p
        .kubeconfig_kubelet_style(dir.path(), &node_cert(&p, &node))
        .unwrap();
    let inline = p.kubeconfig_inline(&node_cert(&p, &node));
    let path = format!("/api/v1/nodes/{node}");

    p.faults()
        .script("GET", &path, vec![Scripted::too_many_requests(2)]);
    let raw = request(
        p.port(),
        &tls_client(&p.ca_pem(), Some(&node_cert(&p, &node))),
        "GET",
        &path,
        &[],
        None,
        T,
    )
    .unwrap();
    assert_eq!(raw.status, 429);
    assert_eq!(raw.headers["retry-after"], "2");

    // kube-rs retries it by itself and gets the real Node.
    p.faults()
        .script("GET", &path, vec![Scripted::too_many_requests(1)]);
    p.clear_requests();
    let got = rt().block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&inline).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        nodes.get(&node).await.unwrap()
    });
    assert_eq!(got.metadata.name.as_deref(), Some(node.as_str()));
    assert!(got.metadata.uid.is_some(), "the real server's Node");
    let statuses: Vec<u16> = p
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 200]);

    p.faults()
        .script("GET", &path, vec![Scripted::too_many_requests(1)]);
    p.clear_requests();
    let asked = Instant::now();
    let (code, out, err) = c.kubectl(&kc, &["get", "node", &node, "-o", "name"]);
    let took = asked.elapsed();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("node/{node}"));
    assert!(
        took >= Duration::from_secs(1),
        "kubectl did not wait: {took:?}"
    );
    let statuses: Vec<u16> = p
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 200]);
}

/// The record's window is set by arrival, not by answer: a request that
/// reached the proxy before `clear_requests` and is answered after it is
/// not in the new window (the race behind a CI failure: a write admitted
/// before the clear, recorded after it), and the record is in arrival order.
#[test]
fn the_record_window_is_by_arrival() {
    let c = cluster();
    let node = c.new_node("parrival");
    let p = FaultProxy::http(&c.dir).unwrap();
    let tls = tls_client(&p.ca_pem(), Some(&node_cert(&p, &node)));
    let path = format!("/api/v1/nodes/{node}");
    let port = p.port();
    p.faults().slow(Duration::from_secs(1));
    let before = p.arrived();
    let in_flight = {
        let (tls, path) = (Arc::clone(&tls), path.clone());
        std::thread::spawn(move || request(port, &tls, "GET", &path, &[], None, T))
    };
    // The request has reached the proxy's handler (it now waits out `slow`).
    let deadline = Instant::now() + T;
    while p.arrived() == before {
        assert!(Instant::now() < deadline, "the request never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mark = p.clear_requests();
    assert_eq!(mark, before + 1);
    // Not settled while that request waits; settled once it is answered.
    assert!(!p.settled_before(mark, Duration::from_millis(50)));
    p.faults().clear();
    let late = in_flight.join().unwrap().unwrap();
    assert_eq!(late.status, 200, "answered after the clear");
    assert!(p.settled_before(mark, T));
    assert!(p.requests().is_empty(), "{:?}", p.requests());
    let now = request(port, &tls, "GET", &path, &[], None, T).unwrap();
    assert_eq!(now.status, 200);
    let reqs = p.requests();
    assert_eq!(
        reqs.iter().map(|r| r.arrival).collect::<Vec<_>>(),
        [mark],
        "{reqs:?}"
    );
}

/// Through the proxy a node keeps its identity: the real Node authorizer
/// lets system:node:A read and write Node A, refuses it Node B, and the
/// audit log names A and the very certificate it presented. A caller cannot
/// claim an identity with the front-proxy headers itself.
#[test]
fn identity_reaches_the_real_authorizers_through_front_proxy_headers() {
    let c = cluster();
    let (a, b) = (c.new_node("pida"), c.new_node("pidb"));
    let p = FaultProxy::http(&c.dir).unwrap();
    let cert = node_cert(&p, &a);
    let tls = tls_client(&p.ca_pem(), Some(&cert));

    let own = request(
        p.port(),
        &tls,
        "GET",
        &format!("/api/v1/nodes/{a}"),
        &[],
        None,
        T,
    )
    .unwrap();
    assert_eq!(own.status, 200, "{}", String::from_utf8_lossy(&own.body));
    let other = request(
        p.port(),
        &tls,
        "GET",
        &format!("/api/v1/nodes/{b}"),
        &[],
        None,
        T,
    )
    .unwrap();
    assert_eq!(other.status, 403);
    let msg = json_of(&other)["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(msg.contains(&format!("system:node:{a}")), "{msg}");

    let patch = json!({"metadata": {"labels": {"proxy-test": "yes"}}});
    let ct = [("content-type", "application/merge-patch+json")];
    let wrote = request(
        p.port(),
        &tls,
        "PATCH",
        &format!("/api/v1/nodes/{a}"),
        &ct,
        Some(&patch),
        T,
    )
    .unwrap();
    assert_eq!(
        wrote.status,
        200,
        "{}",
        String::from_utf8_lossy(&wrote.body)
    );
    let refused = request(
        p.port(),
        &tls,
        "PATCH",
        &format!("/api/v1/nodes/{b}"),
        &ct,
        Some(&patch),
        T,
    )
    .unwrap();
    assert_eq!(refused.status, 403);

    // The audit log has the write as A's, with this certificate's id.
    let deadline = Instant::now() + T;
    let event = loop {
        let found = c.audit().into_iter().find(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["name"] == a.as_str()
                && e["requestObject"]["metadata"]["labels"]["proxy-test"] == "yes"
                && e["responseStatus"]["code"] == 200
        });
        if let Some(e) = found {
            break e;
        }
        assert!(Instant::now() < deadline, "no audit event of the write");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(event["user"]["username"], format!("system:node:{a}"));
    assert!(
        event["user"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:nodes"),
        "{event}"
    );
    let cred_id = p
        .requests()
        .iter()
        .find_map(|r| r.credential.clone())
        .unwrap();
    assert_eq!(
        event["user"]["extra"]["authentication.kubernetes.io/credential-id"][0],
        cred_id.as_str()
    );
    let recorded: Vec<(String, u16, Option<String>)> = p
        .requests()
        .into_iter()
        .map(|r| (r.method, r.status, r.user))
        .collect();
    let who = Some(format!("system:node:{a}"));
    assert_eq!(
        recorded,
        [
            ("GET".to_string(), 200, who.clone()),
            ("GET".to_string(), 403, who.clone()),
            ("PATCH".to_string(), 200, who.clone()),
            ("PATCH".to_string(), 403, who),
        ]
    );

    // No certificate, forged headers: stripped, the real server sees an
    // anonymous caller.
    let anon = tls_client(&p.ca_pem(), None);
    let forged = request(
        p.port(),
        &anon,
        "GET",
        &format!("/api/v1/nodes/{a}"),
        &[
            ("X-Remote-User", "system:admin"),
            ("X-Remote-Group", "system:masters"),
        ],
        None,
        T,
    )
    .unwrap();
    assert!(
        forged.status == 401 || forged.status == 403,
        "{}: {}",
        forged.status,
        String::from_utf8_lossy(&forged.body)
    );
}

/// A bearer token goes through unchanged: the real server authenticates it.
#[test]
fn a_bearer_token_is_passed_through() {
    let c = cluster();
    let ns = format!(
        "proxy-tok-{}",
        UNIQUE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (code, _, err) = c.kubectl(&c.admin(), &["create", "namespace", &ns]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = c.kubectl(
        &c.admin(),
        &["-n", &ns, "create", "serviceaccount", "reader"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, token, err) = c.kubectl(&c.admin(), &["-n", &ns, "create", "token", "reader"]);
    assert_eq!(code, 0, "{err}");
    let p = FaultProxy::http(&c.dir).unwrap();
    let tls = tls_client(&p.ca_pem(), None);
    let auth = format!("Bearer {}", token.trim());
    // Its ServiceAccount may not list nodes: the real RBAC says so by name.
    let a = request(
        p.port(),
        &tls,
        "GET",
        "/api/v1/nodes",
        &[("authorization", &auth)],
        None,
        T,
    )
    .unwrap();
    assert_eq!(a.status, 403);
    let msg = json_of(&a)["message"].as_str().unwrap_or("").to_string();
    assert!(
        msg.contains(&format!("system:serviceaccount:{ns}:reader")),
        "{msg}"
    );
    let bad = request(
        p.port(),
        &tls,
        "GET",
        "/api/v1/nodes",
        &[("authorization", "Bearer not-a-token")],
        None,
        T,
    )
    .unwrap();
    assert_eq!(bad.status, 401);
}

/// A revoked serial is refused with the real server's 401 Status; a new
/// certificate for the same node is accepted. The real server itself still
/// accepts the revoked one (it has no revocation list).
#[test]
fn a_revoked_certificate_is_refused_by_serial() {
    let c = cluster();
    let node = c.new_node("prev");
    let p = FaultProxy::http(&c.dir).unwrap();
    let (old, new) = (node_cert(&p, &node), node_cert(&p, &node));
    assert_ne!(old.serial, new.serial);
    let path = format!("/api/v1/nodes/{node}");
    let ask = |cert: &ClientCert| {
        request(
            p.port(),
            &tls_client(&p.ca_pem(), Some(cert)),
            "GET",
            &path,
            &[],
            None,
            T,
        )
        .unwrap()
        .status
    };
    assert_eq!(ask(&old), 200);
    p.revoke(old.serial);
    assert_eq!(ask(&old), 401);
    assert_eq!(ask(&new), 200);
    let cluster_ca = std::fs::read_to_string(c.dir.join("ca.crt")).unwrap();
    let port: u16 = std::fs::read_to_string(c.dir.join("control-plane.env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("APISERVER_PORT=")?.parse().ok())
        .unwrap();
    let direct = request(
        port,
        &tls_client(&cluster_ca, Some(&old)),
        "GET",
        &path,
        &[],
        None,
        T,
    )
    .unwrap();
    assert_eq!(direct.status, 200);
}

/// Hung: connections are accepted and never answered (HTTP: no TLS
/// handshake, no answer on an open connection; TCP: no bytes through), and
/// the proxy answers again once cleared.
#[test]
fn hung_modes_accept_and_never_answer() {
    let c = cluster();
    let node = c.new_node("phung");
    let path = format!("/api/v1/nodes/{node}");
    let cluster_ca = std::fs::read_to_string(c.dir.join("ca.crt")).unwrap();
    for (mode, p) in [
        ("http", FaultProxy::http(&c.dir).unwrap()),
        ("tcp", FaultProxy::tcp(&c.dir).unwrap()),
    ] {
        let tls = tls_client(&p.ca_pem(), Some(&node_cert(&p, &node)));
        if mode == "tcp" {
            assert_eq!(p.ca_pem(), cluster_ca);
        }
        assert_eq!(
            request(p.port(), &tls, "GET", &path, &[], None, T)
                .unwrap()
                .status,
            200,
            "{mode}"
        );
        p.faults().hung();
        let asked = Instant::now();
        let r = request(
            p.port(),
            &tls,
            "GET",
            &path,
            &[],
            None,
            Duration::from_secs(2),
        );
        assert_eq!(r.err().as_deref(), Some("timeout"), "{mode}");
        assert!(asked.elapsed() >= Duration::from_secs(2));
        // The TCP connection itself was accepted.
        assert!(std::net::TcpStream::connect(("127.0.0.1", p.port())).is_ok());
        p.faults().clear();
        assert_eq!(
            request(p.port(), &tls, "GET", &path, &[], None, T)
                .unwrap()
                .status,
            200,
            "{mode}"
        );
    }
}

/// Resets: a TCP-mode connection reset on accept, an HTTP-mode request
/// answered with a reset, live connections reset at once; and connection
/// refused while down, then answers on the same port once up.
#[test]
fn resets_and_refused_connections() {
    let c = cluster();
    let node = c.new_node("preset");
    let path = format!("/api/v1/nodes/{node}");

    let tcp = FaultProxy::tcp(&c.dir).unwrap();
    let tls = tls_client(&tcp.ca_pem(), Some(&node_cert(&tcp, &node)));
    tcp.faults().reset_next(1);
    let e = request(tcp.port(), &tls, "GET", &path, &[], None, T)
        .err()
        .unwrap();
    assert!(e.contains("reset") || e.contains("Connection reset"), "{e}");
    assert_eq!(
        request(tcp.port(), &tls, "GET", &path, &[], None, T)
            .unwrap()
            .status,
        200
    );

    let http = FaultProxy::http(&c.dir).unwrap();
    let tls = tls_client(&http.ca_pem(), Some(&node_cert(&http, &node)));
    http.faults().script("GET", &path, vec![Scripted::reset()]);
    let e = request(http.port(), &tls, "GET", &path, &[], None, T)
        .err()
        .unwrap();
    assert!(e.starts_with("exchange"), "{e}");
    assert_eq!(
        request(http.port(), &tls, "GET", &path, &[], None, T)
            .unwrap()
            .status,
        200
    );

    // A watch held open through the proxy, reset under it.
    let watch_path = format!("/api/v1/nodes?watch=true&fieldSelector=metadata.name%3D{node}");
    let (port, tls2) = (http.port(), Arc::clone(&tls));
    let watcher = std::thread::spawn(move || {
        request(
            port,
            &tls2,
            "GET",
            &watch_path,
            &[],
            None,
            Duration::from_secs(30),
        )
    });
    let deadline = Instant::now() + T;
    while !http
        .requests()
        .iter()
        .any(|r| r.query.contains("watch=true"))
    {
        assert!(Instant::now() < deadline, "the watch never got its answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    http.faults().reset_connections();
    let e = watcher.join().unwrap().err().unwrap();
    // Where the reset lands (the head or the body) is a race: any failure
    // but a wait is the reset.
    assert_ne!(e, "timeout");

    http.faults().down();
    let e = request(http.port(), &tls, "GET", &path, &[], None, T)
        .err()
        .unwrap();
    assert!(e.contains("refused"), "{e}");
    http.faults().up().unwrap();
    assert_eq!(
        request(http.port(), &tls, "GET", &path, &[], None, T)
            .unwrap()
            .status,
        200
    );
}

/// Hostile content the real server will not store or send: a 1 MiB
/// annotation injected into its answer (the real server refuses to store
/// it), an object of the wrong kind, malformed JSON, and a watch answered
/// 410 Expired.
#[test]
fn hostile_content_and_a_gone_watch() {
    let c = cluster();
    let node = c.new_node("phost");
    let p = FaultProxy::http(&c.dir).unwrap();
    let tls = tls_client(&p.ca_pem(), Some(&node_cert(&p, &node)));
    let path = format!("/api/v1/nodes/{node}");
    const MIB: usize = 1024 * 1024;

    // The real server refuses the annotation...
    let admin = c.admin();
    let big = "x".repeat(MIB);
    let patch = json!({"metadata": {"annotations": {"example.com/big": big}}}).to_string();
    let dir = tempfile::tempdir().unwrap();
    let patch_file = dir.path().join("patch.json");
    std::fs::write(&patch_file, patch).unwrap();
    let (code, _, err) = c.kubectl(
        &admin,
        &[
            "patch",
            "node",
            &node,
            "--type=merge",
            "--patch-file",
            patch_file.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{err}"
    );
    // ...the proxy serves it.
    p.faults()
        .inject_annotation("GET", &path, 1, "example.com/big", MIB);
    let got = request(p.port(), &tls, "GET", &path, &[], None, T).unwrap();
    assert_eq!(got.status, 200);
    let v = json_of(&got);
    assert_eq!(
        v["metadata"]["annotations"]["example.com/big"]
            .as_str()
            .map(str::len),
        Some(MIB)
    );
    assert_eq!(
        v["metadata"]["name"],
        node.as_str(),
        "the rest is the real Node"
    );
    let again = request(p.port(), &tls, "GET", &path, &[], None, T).unwrap();
    assert!(json_of(&again)["metadata"]["annotations"]["example.com/big"].is_null());

    p.faults().script(
        "GET",
        &path,
        vec![
            Scripted::json(
                200,
                &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": node}}),
            ),
            Scripted::raw(
                200,
                "application/json",
                b"{\"kind\": \"Node\", \"metad".to_vec(),
            ),
        ],
    );
    let wrong = request(p.port(), &tls, "GET", &path, &[], None, T).unwrap();
    assert_eq!(json_of(&wrong)["kind"], "Pod");
    let torn = request(p.port(), &tls, "GET", &path, &[], None, T).unwrap();
    assert!(serde_json::from_slice::<Value>(&torn.body).is_err());

    // A watch answered with 410 Expired, as from a compacted resourceVersion.
    p.faults()
        .script("GET", "/api/v1/nodes", vec![Scripted::watch_gone()]);
    let w = request(
        p.port(),
        &tls,
        "GET",
        &format!("/api/v1/nodes?watch=true&fieldSelector=metadata.name%3D{node}&resourceVersion=1"),
        &[],
        None,
        T,
    )
    .unwrap();
    let ev: Value = serde_json::from_slice(&w.body).unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
}

/// A watch streams through the proxy: an event the real server sends after
/// the watch started arrives while the watch is open, rewritten when asked.
#[test]
fn a_watch_streams_through_and_can_be_rewritten() {
    let c = cluster();
    let node = c.new_node("pwatch");
    let p = FaultProxy::http(&c.dir).unwrap();
    let cert = node_cert(&p, &node);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, p.kubeconfig_inline(&cert)).unwrap();
    p.faults()
        .inject_annotation("GET", "/api/v1/nodes", 1, "example.com/injected", 10);
    let mut watch = Command::new(c.kubectl_bin())
        .env("KUBECONFIG", &kc)
        .args([
            "get",
            "node",
            &node,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
            "--request-timeout=30s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first GET (kubectl's list) takes the rewrite; wait for the watch
    // itself to be open through the proxy before changing the Node.
    let watching = |reqs: &[RequestRecord]| reqs.iter().any(|r| r.query.contains("watch=true"));
    let reqs = p.requests_when(T, watching);
    assert!(watching(&reqs), "kubectl never watched: {reqs:?}");
    let (code, _, err) = c.kubectl(&c.admin(), &["label", "node", &node, "proxy-watch=seen"]);
    assert_eq!(code, 0, "{err}");
    let stdout = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        let mut stdout = stdout;
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            if text.contains("proxy-watch") {
                break;
            }
        }
        text
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let text = reader.join().unwrap();
    assert!(text.contains("\"proxy-watch\":\"seen\""), "{text}");
    assert!(
        text.contains("example.com/injected"),
        "the list was not rewritten: {text}"
    );
}
