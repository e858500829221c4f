//! `serve --metrics-listen`: the served text passes `promtool check metrics`,
//! a real Prometheus (Debian bookworm's, from the test cache) scrapes it over
//! plaintext on loopback and over mTLS and its queries show the values and
//! the flip when the limit changes under an agent in `unshare -U -r`;
//! `--metrics-client-name` keeps scrape and gRPC certificates apart;
//! non-loopback plaintext is refused at startup. The monitoring page's path
//! (docs/deployment/monitoring.md): upstream's Prometheus
//! (scripts/build-prometheus.sh, Kubernetes SD) discovers a Node on the real
//! kube-apiserver and scrapes its agent over mTLS at the Node's InternalIP.
//! The alert rules of deploy/alerts pass `promtool check rules` and their
//! unit tests (`promtool test rules`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::support;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{ca::Ca, check, run, wait_until, Agent, AgentSpec, BIN};
use rcgen::{ExtendedKeyUsagePurpose, SanType};
use support::{
    cluster::{poll, RealCluster},
    markdown::{fenced, root},
    testenv,
};

const LIMIT: &str = "user.max_user_namespaces";
const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
const POLL_INTERVAL: Duration = Duration::from_millis(300);

fn promtool() -> PathBuf {
    testenv::cached("prometheus-bookworm/usr/bin/promtool")
}

fn prometheus_bin() -> PathBuf {
    testenv::cached("prometheus-bookworm/usr/bin/prometheus")
}

/// Prometheus with Kubernetes service discovery, which Debian's is built
/// without (`kubernetes_sd_configs` "not found in type
/// config.ScrapeConfig"): upstream's, built by scripts/build-prometheus.sh
/// (`SR_PROMETHEUS_BIN`, which the test command exports).
fn prometheus_k8s_bin() -> PathBuf {
    let dir = std::env::var("SR_PROMETHEUS_BIN").unwrap_or_else(|_| {
        let out = Command::new(root().join("scripts/build-prometheus.sh"))
            .arg("path")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no Prometheus with Kubernetes SD: {} (scripts/build-prometheus.sh builds it; the test command exports SR_PROMETHEUS_BIN)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    });
    PathBuf::from(dir).join("prometheus")
}

// ------------------------------------------------------------ plain HTTP

/// One HTTP/1.1 request over a fresh connection: status, head, body.
fn http(addr: SocketAddr, method: &str, target: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {raw:?}"));
    (status, head.to_string(), body.to_string())
}

/// The value of the sample line `series VALUE` in an exposition.
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string)
}

fn metrics_agent(limit: Option<u32>, extra: &[&str]) -> (Agent, SocketAddr) {
    let mut args = vec!["--metrics-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let agent = Agent::start(limit, &args);
    let addr = agent.metrics_addr();
    (agent, addr)
}

#[test]
fn served_text_passes_promtool_and_only_get_metrics_is_served() {
    let (agent, addr) = metrics_agent(
        Some(11255),
        &[
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--require-pod-userns",
            "runc",
        ],
    );
    let (status, head, body) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert_eq!(
        sample(
            &body,
            "sandbox_readiness_sysctl_value{name=\"user.max_user_namespaces\"}"
        )
        .as_deref(),
        Some("11255"),
        "{body}"
    );
    assert!(
        body.contains("sandbox_readiness_pod_userns_supported{handler=\"runc\"}"),
        "{body}"
    );

    let mut lint = Command::new(promtool());
    lint.args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = lint.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics ({}):\n{}{}\n{body}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Scraping reads the published report: no observation starts.
    let observations = |b: &str| -> u64 {
        sample(b, "sandbox_readiness_observations_total")
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = observations(&body);
    for _ in 0..20 {
        assert_eq!(http(addr, "GET", "/metrics").0, 200);
    }
    let after = observations(&http(addr, "GET", "/metrics").2);
    assert!(
        after <= before + 1,
        "20 scrapes started observations: {before} -> {after}"
    );

    assert_eq!(http(addr, "GET", "/").0, 404);
    assert_eq!(http(addr, "GET", "/metrics/x").0, 404);
    let (status, head, _) = http(addr, "POST", "/metrics");
    assert_eq!(status, 405);
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    assert_eq!(http(addr, "HEAD", "/metrics").0, 200);
    // The gRPC port is untouched by all this.
    assert_ne!(agent.addr, addr);
}

#[test]
fn a_silent_metrics_connection_is_cut_at_the_header_timeout() {
    let (_agent, addr) = metrics_agent(None, &[]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metr").unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "a half-sent request held the connection for {took:?}"
    );
}

// ------------------------------------------------------------ Prometheus

/// A Prometheus server on loopback, its data in a tempdir; killed on drop.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second with the extra
    /// scrape-config lines `extra` (TLS), and waits until it is ready.
    fn start(target: SocketAddr, extra: &str) -> Prometheus {
        Prometheus::start_with(&prometheus_bin(), &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: agent\n{extra}    static_configs:\n      - targets: ['{target}']\n"
        ))
    }

    /// Starts Prometheus `bin` with the configuration `config_text` and
    /// waits until it is ready.
    fn start_with(bin: &Path, config_text: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, config_text).unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let mut child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start prometheus");
        // Port 0: the kernel picks; the bound port is read from the
        // process's own listening socket.
        let mut port = None;
        let start = Instant::now();
        while port.is_none() {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
                panic!("prometheus exited ({status}):\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus did not listen within 30 s"
            );
            port = listening_port(child.id());
            std::thread::sleep(Duration::from_millis(20));
        }
        let url = format!("127.0.0.1:{}", port.unwrap());
        let p = Prometheus {
            child,
            url,
            _dir: dir,
        };
        let addr: SocketAddr = p.url.parse().unwrap();
        wait_until(Duration::from_secs(30), "prometheus ready", || {
            http(addr, "GET", "/-/ready").0 == 200
        });
        p
    }

    /// `query`'s single result value, if there is one now.
    fn query(&self, query: &str) -> Option<String> {
        let addr: SocketAddr = self.url.parse().unwrap();
        let (status, _, body) = http(
            addr,
            "GET",
            &format!("/api/v1/query?query={}", encode(query)),
        );
        assert_eq!(status, 200, "{body}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let result = doc["data"]["result"].as_array()?;
        assert!(result.len() <= 1, "{query}: several series: {body}");
        result.first()?["value"][1].as_str().map(str::to_string)
    }

    /// Waits until `query` gives `want`; returns how long it took.
    fn wait_for(&self, query: &str, want: &str, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let last = self.query(query);
            if last.as_deref() == Some(want) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{query} == {want}: not within {within:?} (last {last:?}); targets: {}",
                self.target_health()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The target's last scrape error, for failure messages.
    fn target_health(&self) -> String {
        let addr: SocketAddr = self.url.parse().unwrap();
        http(addr, "GET", "/api/v1/targets").2
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The port of the one IPv4 TCP socket `pid` listens on, from its file
/// descriptors and /proc/net/tcp.
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local_address st ... inode: fields 1, 3 and 9.
        if f.get(3) != Some(&"0A") || !inodes.iter().any(|i| Some(&i.as_str()) == f.get(9)) {
            return None;
        }
        u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()
    })
}

/// The converged series flips within the poll interval plus two scrape
/// intervals (and some slack for a busy machine) after the limit changes.
fn flip_deadline() -> Duration {
    POLL_INTERVAL + 2 * SCRAPE_INTERVAL + Duration::from_secs(4)
}

#[test]
fn prometheus_scrapes_plaintext_and_sees_the_limit_flip() {
    let poll = format!("{}ms", POLL_INTERVAL.as_millis());
    let (agent, addr) = metrics_agent(
        Some(11255),
        &[
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--poll-interval",
            &poll,
        ],
    );
    let prom = Prometheus::start(addr, "");
    let converged = "sandbox_readiness_converged";
    let limit = format!("sandbox_readiness_sysctl_value{{name=\"{LIMIT}\"}}");
    let first = Duration::from_secs(30);
    prom.wait_for(converged, "1", first);
    prom.wait_for(&limit, "11255", first);
    assert_eq!(
        prom.query("sandbox_readiness_findings{code=\"SYSCTL_MISMATCH\"}")
            .as_deref(),
        Some("0")
    );

    agent.set_limit(0);
    let took = prom.wait_for(converged, "0", flip_deadline());
    eprintln!("converged 1 -> 0 seen by Prometheus after {took:?}");
    assert_eq!(prom.query(&limit).as_deref(), Some("0"));
    assert_eq!(
        prom.query("sandbox_readiness_findings{code=\"SYSCTL_MISMATCH\"}")
            .as_deref(),
        Some("1")
    );

    agent.set_limit(11255);
    let took = prom.wait_for(converged, "1", flip_deadline());
    eprintln!("converged 0 -> 1 seen by Prometheus after {took:?}");
    assert_eq!(prom.query(&limit).as_deref(), Some("11255"));
}

// ------------------------------------------------------------------ mTLS

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

#[test]
fn prometheus_scrapes_over_mtls_with_tls_init_material() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    common::tls_init(&tls, &["--san", "127.0.0.1", "--san", "agent.metrics.test"]);
    let (cert, key, ca) = (
        path(&tls, "server.pem"),
        path(&tls, "server-key.pem"),
        path(&tls, "ca.pem"),
    );
    let poll = format!("{}ms", POLL_INTERVAL.as_millis());
    let (agent, addr) = metrics_agent(
        Some(11255),
        &[
            "--poll-interval",
            &poll,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--client-ca",
            &ca,
            "--sysctl",
            "user.max_user_namespaces=11255",
        ],
    );
    // Plaintext gets nothing from a TLS port.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    assert!(!got.contains("sandbox_readiness_"), "{got}");

    let prom = Prometheus::start(
        addr,
        &format!(
            "    scheme: https\n    tls_config:\n      ca_file: {ca}\n      cert_file: {}\n      key_file: {}\n      server_name: agent.metrics.test\n",
            path(&tls, "client.pem"),
            path(&tls, "client-key.pem"),
        ),
    );
    let limit = format!("sandbox_readiness_sysctl_value{{name=\"{LIMIT}\"}}");
    let within = Duration::from_secs(30);
    prom.wait_for("sandbox_readiness_converged", "1", within);
    prom.wait_for(&limit, "11255", within);

    agent.set_limit(0);
    let took = prom.wait_for("sandbox_readiness_converged", "0", flip_deadline());
    eprintln!("over mTLS, converged 1 -> 0 seen by Prometheus after {took:?}");
    assert_eq!(prom.query(&limit).as_deref(), Some("0"));
}

/// `curl` of the metrics port with a client certificate: its exit code and
/// what it printed.
fn curl_metrics(addr: SocketAddr, dir: &Path, who: &str) -> (i32, String) {
    let out = run({
        let mut c = Command::new(testenv::tool("curl", "curl"));
        c.args(["-sS", "--max-time", "10", "--cacert"])
            .arg(dir.join("ca.pem"))
            .arg("--cert")
            .arg(dir.join(format!("{who}.pem")))
            .arg("--key")
            .arg(dir.join(format!("{who}-key.pem")))
            .arg(format!("https://{addr}/metrics"));
        c
    });
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `check` of the gRPC port with a client certificate: whether it got a
/// report.
fn grpc_served(addr: SocketAddr, dir: &Path, who: &str) -> bool {
    let args: Vec<String> = [
        "-n",
        &addr.to_string(),
        "-o",
        "json",
        "--timeout",
        "5s",
        "--tls-ca",
        &path(dir, "ca.pem"),
        "--tls-cert",
        &path(dir, &format!("{who}.pem")),
        "--tls-key",
        &path(dir, &format!("{who}-key.pem")),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let r = check(&args, Duration::from_secs(60));
    assert!(r.code() == 0 || r.code() == 1, "{}\n{}", r.stdout, r.stderr);
    let node = r.json()["nodes"][0].clone();
    node["error"].is_null() && !node["report"].is_null()
}

#[test]
fn metrics_client_names_keep_scrape_and_grpc_certificates_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new(d);
    let dns = |n: &str| SanType::DnsName(n.try_into().unwrap());
    ca.leaf(
        "server",
        "server",
        vec![SanType::IpAddress([127, 0, 0, 1].into())],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    ca.leaf(
        "scraper",
        "scraper",
        vec![dns("prometheus.scrape.test")],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    ca.leaf(
        "controller",
        "controller",
        vec![dns("controller.test")],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (agent, addr) = metrics_agent(
        None,
        &[
            "--tls-cert",
            &path(d, "server.pem"),
            "--tls-key",
            &path(d, "server-key.pem"),
            "--client-ca",
            &path(d, "ca.pem"),
            "--client-name",
            "controller.test",
            "--metrics-client-name",
            "prometheus.scrape.test",
        ],
    );

    let (code, out) = curl_metrics(addr, d, "scraper");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sandbox_readiness_converged "), "{out}");

    let (code, out) = curl_metrics(addr, d, "controller");
    assert_ne!(
        code, 0,
        "the gRPC client's certificate scraped the metrics: {out}"
    );
    assert!(!out.contains("sandbox_readiness_"), "{out}");
    agent
        .log()
        .wait_for(Duration::from_secs(5), |lines| {
            lines
                .iter()
                .find(|l| l.contains("TLS client refused") && l.contains("--metrics-client-name"))
                .cloned()
        })
        .unwrap();

    assert!(grpc_served(agent.addr, d, "controller"));
    assert!(
        !grpc_served(agent.addr, d, "scraper"),
        "the scrape certificate called the gRPC API"
    );
}

// ------------------------------------------------------------ refusals

#[test]
fn non_loopback_metrics_without_tls_is_refused_at_startup() {
    for (extra, needle) in [
        (
            vec!["--metrics-listen", "0.0.0.0:0"],
            "refusing plaintext metrics on 0.0.0.0:0",
        ),
        (
            vec!["--metrics-listen", "[::1]:0", "--metrics-listen", "x"],
            "--metrics-listen",
        ),
        (
            vec![
                "--metrics-listen",
                "0.0.0.0:0",
                "--tls-cert",
                "/nonexistent/c.pem",
                "--tls-key",
                "/nonexistent/k.pem",
            ],
            "refusing TLS metrics without client certificates on 0.0.0.0:0",
        ),
        (
            vec![
                "--metrics-client-name",
                "x",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            "--client-ca",
        ),
    ] {
        let start = Instant::now();
        let out = run({
            let mut c = Command::new(BIN);
            c.args(["serve", "--listen", "127.0.0.1:0"]).args(&extra);
            c
        });
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.iter().any(|l| l.contains(needle)), "{extra:?}: {err}");
        assert!(
            !err.contains("listening"),
            "{extra:?}: it listened before refusing: {err}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn metrics_are_off_by_default() {
    let agent = Agent::spawn(AgentSpec::new(None, &[]));
    agent.log().wait_line(" starting ", Duration::from_secs(10));
    assert!(
        !agent.log().text().contains("metrics listening"),
        "{}",
        agent.log().text()
    );
}

#[test]
fn the_plaintext_refusal_is_one_line() {
    let out = run({
        let mut c = Command::new(BIN);
        c.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "192.0.2.1:9100",
        ]);
        c
    });
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("refusing plaintext metrics on 192.0.2.1:9100")
            && lines[0].contains("--insecure-plaintext"),
        "{err}"
    );
}

// ------------------------------------------- the monitoring page's path

/// docs/deployment/monitoring.md.
fn monitoring_page() -> String {
    std::fs::read_to_string(root().join("docs/deployment/monitoring.md")).unwrap()
}

/// The page's one fenced `lang` block that contains `needle`.
fn page_block(page: &str, lang: &str, needle: &str) -> String {
    let blocks: Vec<String> = fenced(page, lang)
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.contains(needle))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "monitoring.md: {} {lang} blocks with {needle:?}",
        blocks.len()
    );
    blocks.into_iter().next().unwrap()
}

/// The body of an HTTP/1.0 GET (no chunked encoding to undo).
fn http10_get(addr: SocketAddr, target: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{raw}"
    );
    body.to_string()
}

/// The Node condition's status on the real server.
fn node_condition(c: &RealCluster, node: &str) -> Option<String> {
    c.get_node(node)["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == "sandbox-readiness.io/SandboxReady")?["status"]
        .as_str()
        .map(str::to_string)
}

/// The monitoring page's path, as written: the agent's metrics on `[::]`
/// with the per-node server certificate `tls init --node NAME=IP` makes and
/// the page's environment lines; the scraper's certificate made by the
/// page's openssl commands; the page's `kubernetes_sd_configs` job run by
/// upstream's Prometheus (Debian's has no Kubernetes SD) against the real kube-apiserver as a ServiceAccount
/// that may only get, list and watch Nodes. Prometheus discovers the Node,
/// dials its InternalIP at the agent's port with the client certificate,
/// and reads the Node writer's counter after the agent rewrote its Node.
#[test]
fn prometheus_discovers_the_node_and_scrapes_its_agent_as_the_monitoring_page_says() {
    let c = RealCluster::shared();
    let (node, kubeconfig) = c.new_node("scrape");
    let page = monitoring_page();
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    // The control plane registers every Node with InternalIP 127.0.0.1.
    common::tls_init(&pki, &["--node", &format!("{node}=127.0.0.1")]);

    // The scraper's certificate: the page's openssl commands, run as written
    // from pki's parent directory.
    let recipe = page_block(&page, "sh", "extendedKeyUsage=clientAuth");
    let out = run({
        let mut c = Command::new("bash");
        c.args(["-euo", "pipefail", "-c", &recipe])
            .current_dir(dir.path());
        c
    });
    assert!(
        out.status.success(),
        "{recipe}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The agent: the page's environment lines (the port made 0), the
    // per-node certificate, the Node writer.
    let env_block = page_block(&page, "yaml", "SANDBOX_READINESS_METRICS_LISTEN=");
    let env_doc: serde_json::Value = serde_yaml_ng::from_str(&env_block).unwrap();
    let env: Vec<(String, String)> = env_doc["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
            (k.to_string(), v.replace(":9150", ":0"))
        })
        .collect();
    assert!(
        env.iter()
            .any(|(k, v)| k == "SANDBOX_READINESS_METRICS_LISTEN" && v == "[::]:0"),
        "{env:?}"
    );
    let client_name = env
        .iter()
        .find(|(k, _)| k == "SANDBOX_READINESS_METRICS_CLIENT_NAME")
        .map(|(_, v)| v.clone())
        .unwrap();
    let (cert, key, ca) = (
        path(&pki, &format!("nodes/{node}.cert.pem")),
        path(&pki, &format!("nodes/{node}.key.pem")),
        path(&pki, "ca.pem"),
    );
    let mut spec = AgentSpec::new(
        Some(11255),
        &[
            "--poll-interval",
            "300ms",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-resync",
            "1s",
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--client-ca",
            &ca,
        ],
    );
    spec.env = env;
    let agent = Agent::spawn(spec);
    let bound = agent.metrics_addr();
    assert!(bound.ip().is_unspecified() && bound.is_ipv6(), "{bound}");
    let port = bound.port();
    // The address Prometheus will dial: the Node's InternalIP.
    let at_node = SocketAddr::from(([127, 0, 0, 1], port));
    // The scraper's certificate carries the name the agent asks for.
    let (code, text) = curl_metrics(at_node, &pki, "scraper");
    assert_eq!(code, 0, "{text}");
    // `check`'s certificate (no SAN) is refused: the page's client name holds.
    let (code, text) = curl_metrics(at_node, &pki, "client");
    assert_ne!(
        code, 0,
        "with {client_name} required, check's certificate scraped: {text}"
    );

    // Prometheus's identity: a ServiceAccount that may only read Nodes.
    let ns = c.unique("sr-scrape");
    c.kubectl_ok(&["create", "namespace", &ns], None);
    c.kubectl_ok(&["-n", &ns, "create", "serviceaccount", "prometheus"], None);
    c.kubectl_ok(
        &[
            "create",
            "clusterrole",
            &ns,
            "--verb=get,list,watch",
            "--resource=nodes",
        ],
        None,
    );
    c.kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &ns,
            &format!("--clusterrole={ns}"),
            &format!("--serviceaccount={ns}:prometheus"),
        ],
        None,
    );
    let token = c.service_account_token(&ns, "prometheus");
    let sd_kubeconfig = c.token_kubeconfig(&token, &dir.path().join("prometheus.kubeconfig"));

    // The page's job: only the files' paths, the port, the API server and
    // a keep of this test's Node (the shared cluster has others) changed.
    let job_block = page_block(&page, "yaml", "job_name: sandbox-readiness-agents");
    let mut config: serde_json::Value = serde_yaml_ng::from_str(&job_block).unwrap();
    let job = &mut config["scrape_configs"][0];
    assert_eq!(job["job_name"], "sandbox-readiness-agents");
    job["kubernetes_sd_configs"][0]["kubeconfig_file"] = sd_kubeconfig.to_str().unwrap().into();
    let files = [
        ("ca.pem", "ca.pem"),
        ("tls.crt", "scraper.pem"),
        ("tls.key", "scraper-key.pem"),
    ];
    for field in ["ca_file", "cert_file", "key_file"] {
        let f = &mut job["tls_config"][field];
        let name = f.as_str().unwrap().rsplit('/').next().unwrap().to_string();
        let (_, local) = files.iter().find(|(k, _)| *k == name).unwrap();
        *f = path(&pki, local).into();
    }
    let relabels = job["relabel_configs"].as_array_mut().unwrap();
    let mut ported = 0;
    for r in relabels.iter_mut() {
        if r["replacement"] == "${1}:9150" {
            r["replacement"] = format!("${{1}}:{port}").into();
            ported += 1;
        }
    }
    assert_eq!(ported, 1, "{job_block}");
    relabels.insert(
        0,
        serde_json::json!({
            "source_labels": ["__meta_kubernetes_node_name"],
            "regex": node,
            "action": "keep",
        }),
    );
    config["global"] = serde_json::json!({"scrape_interval": "1s", "scrape_timeout": "1s"});
    let prom = Prometheus::start_with(
        &prometheus_k8s_bin(),
        &serde_yaml_ng::to_string(&config).unwrap(),
    );

    // Discovered, dialled at the InternalIP with the agent's port, over
    // mTLS. The node role names the target after the Node (`instance`).
    let up = format!("up{{job=\"sandbox-readiness-agents\",node=\"{node}\",instance=\"{node}\"}}");
    let within = Duration::from_secs(60);
    prom.wait_for(&up, "1", within);
    let targets: serde_json::Value =
        serde_json::from_str(&http10_get(prom.url.parse().unwrap(), "/api/v1/targets")).unwrap();
    let urls: Vec<&str> = targets["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["scrapeUrl"].as_str())
        .collect();
    assert_eq!(urls, [format!("https://{at_node}/metrics")], "{targets}");

    // The agent's act: its Node writer keeps the condition; then the limit
    // changes, and it writes False. Prometheus's counter must reach what the
    // agent counted once that write is on the server.
    poll(within, "the agent's condition True on its Node", || {
        node_condition(c, &node).as_deref() == Some("True")
    });
    let writes = format!(
        "sandbox_readiness_node_writes_total{{job=\"sandbox-readiness-agents\",node=\"{node}\"}}"
    );
    let converged =
        format!("sandbox_readiness_converged{{job=\"sandbox-readiness-agents\",node=\"{node}\"}}");
    prom.wait_for(&converged, "1", within);
    let before: u64 = prom.query(&writes).unwrap().parse().unwrap();
    agent.set_limit(0);
    poll(within, "the agent's condition False on its Node", || {
        node_condition(c, &node).as_deref() == Some("False")
    });
    let (code, text) = curl_metrics(at_node, &pki, "scraper");
    assert_eq!(code, 0, "{text}");
    let counted: u64 = sample(&text, "sandbox_readiness_node_writes_total")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        counted > before,
        "the False write was not counted: Prometheus had {before}, the agent says {counted}"
    );
    let start = Instant::now();
    loop {
        let seen = prom.query(&writes).and_then(|v| v.parse::<u64>().ok());
        if seen.is_some_and(|v| v >= counted) {
            break;
        }
        assert!(
            start.elapsed() < within,
            "{writes}: {seen:?}, not {counted} within {within:?}; targets: {}",
            prom.target_health()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    prom.wait_for(&converged, "0", within);
    eprintln!(
        "Prometheus saw the agent's write {counted} (it had {before}) after {:?}",
        start.elapsed()
    );
}

// ------------------------------------------------------------ alert rules

fn alerts_dir() -> PathBuf {
    root().join("deploy/alerts")
}

/// `promtool ARGS` in deploy/alerts: its output; fails the test unless it
/// succeeds.
fn promtool_in_alerts(args: &[&str]) -> String {
    let out = run({
        let mut c = Command::new(promtool());
        c.args(args).current_dir(alerts_dir());
        c
    });
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// deploy/alerts' workload rules: `promtool check rules`, their unit tests
/// (`promtool test rules`: the Node writer alert fires on failures without
/// a success and not otherwise; a stale observation; the Node condition),
/// and the PrometheusRule form carries the same groups and
/// kube-prometheus-stack's selector label.
#[test]
fn the_workload_rules_pass_promtool_and_the_prometheusrule_agrees() {
    let checked = promtool_in_alerts(&["check", "rules", "workload.rules.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool_in_alerts(&["test", "rules", "workload.rules.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let tests = std::fs::read_to_string(alerts_dir().join("workload.rules.test.yaml")).unwrap();
    assert!(
        tests.contains("alertname: SandboxReadinessNodeWriterFailing"),
        "the Node writer alert has no unit test"
    );

    let read = |name: &str| -> serde_json::Value {
        serde_yaml_ng::from_str(&std::fs::read_to_string(alerts_dir().join(name)).unwrap()).unwrap()
    };
    let file = read("workload.rules.yaml");
    let rule = read("workload.prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        rule["spec"]["groups"], file["groups"],
        "workload.prometheusrule.yaml's groups differ from workload.rules.yaml's"
    );
    let alerts: Vec<&str> = file["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    // The page's table lists every workload alert.
    let page = monitoring_page();
    for a in &alerts {
        assert!(
            page.contains(&format!("`{a}`")),
            "monitoring.md does not list {a}"
        );
    }
    assert!(
        alerts.contains(&"SandboxReadinessNodeWriterFailing"),
        "{alerts:?}"
    );
}
