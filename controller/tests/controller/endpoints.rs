//! The component's endpoints on a running controller: /healthz, /readyz,
//! /metrics; the served text passes `promtool check metrics`, and a real
//! Prometheus scrapes it and sees a write counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{code, Env};
use serde_json::Value;

const SYSCTL: (&str, &str) = ("user.max_user_namespaces", "11255");

fn cached(rel: &str) -> PathBuf {
    let cache = std::env::var_os("SR_TEST_CACHE")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/sandbox-readiness-tests"));
    let p = cache.join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        p.display()
    );
    p
}

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
        .unwrap();
    (status, head.to_string(), body.to_string())
}

fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string)
}

/// The address the controller logged for its endpoints.
fn endpoints(ctl: &common::Controller) -> SocketAddr {
    let start = Instant::now();
    loop {
        if let Some(a) = ctl.log().lines().find_map(|l| {
            l.split("endpoints listening on http://")
                .nth(1)
                .and_then(|a| a.trim().parse().ok())
        }) {
            return a;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no endpoints: {}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn promtool_check(body: &str) {
    let mut child = Command::new(cached("prometheus-bookworm/usr/bin/promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
}

#[test]
fn endpoints_answer_and_metrics_pass_promtool() {
    // The workload cluster the test's own: it goes down at the end.
    let env = Env::with_private_workload();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let ctl = env.controller(&["--http-listen", "127.0.0.1:0"]);
    let addr = endpoints(&ctl);
    assert_eq!(http(addr, "GET", "/healthz").0, 200);
    env.wait_status("m1", "True", Duration::from_secs(10));
    let (status, _, body) = http(addr, "GET", "/readyz");
    assert_eq!(status, 200, "{body}");
    assert_eq!(http(addr, "POST", "/metrics").0, 405);
    assert_eq!(http(addr, "GET", "/nothing").0, 404);
    // The gauges come from the watch caches and the counters from the
    // controller's own writes, which the audit log holds once each write's
    // handler has finished: read until the metrics count the condition and
    // agree with the server's record (each read from its cause, not after a
    // fixed wait), then check them.
    let conflicts_on_server = || {
        env.status_writes("m1")
            .iter()
            .filter(|e| code(e) == 409)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (head, body) = loop {
        let (status, head, body) = http(addr, "GET", "/metrics");
        assert_eq!(status, 200);
        let s = |series: &str| sample(&body, series);
        let counted = s("sandbox_readiness_controller_conditions{status=\"True\"}").as_deref()
            == Some("1")
            && s("sandbox_readiness_controller_writes_total")
                == Some(env.patches("m1").to_string())
            && s("sandbox_readiness_controller_conflicts_total")
                == Some(conflicts_on_server().to_string());
        if counted {
            break (head, body);
        }
        assert!(
            Instant::now() < deadline,
            "the metrics never agreed with the server ({} patches, {} conflicts):\n{body}",
            env.patches("m1"),
            conflicts_on_server()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    promtool_check(&body);
    let s = |series: &str| sample(&body, series);
    // Unknown (no Node read yet) and True, or True alone: each write counted.
    let writes: u64 = s("sandbox_readiness_controller_writes_total")
        .unwrap()
        .parse()
        .unwrap();
    assert!(writes >= 1, "{body}");
    assert_eq!(
        s(&format!(
            "sandbox_readiness_controller_machines{{cluster=\"{}/c1\"}}",
            env.ns
        ))
        .as_deref(),
        Some("1"),
        "{body}"
    );
    assert_eq!(
        s("sandbox_readiness_controller_conditions{status=\"True\"}").as_deref(),
        Some("1"),
        "{body}"
    );
    assert_eq!(
        s("sandbox_readiness_controller_leader").as_deref(),
        Some("1"),
        "{body}"
    );
    assert_eq!(
        s("sandbox_readiness_controller_caches_synced").as_deref(),
        Some("1"),
        "{body}"
    );
    assert!(
        body.contains("sandbox_readiness_controller_build_info{version=\""),
        "{body}"
    );
    let rounds: u64 = s("sandbox_readiness_controller_reconcile_duration_seconds_count")
        .unwrap()
        .parse()
        .unwrap();
    assert!(rounds >= 1, "{body}");

    // A workload outage is counted for its cluster.
    env.wl.stop();
    let start = Instant::now();
    loop {
        let body = http(addr, "GET", "/metrics").2;
        if sample(
            &body,
            &format!(
                "sandbox_readiness_controller_workload_api_errors_total{{cluster=\"{}/c1\"}}",
                env.ns
            ),
        )
        .is_some_and(|v| v != "0")
        {
            promtool_check(&body);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no workload error counted:\n{body}\n{}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The port of the one IPv4 TCP socket `pid` listens on.
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
        if f.get(3) != Some(&"0A") || !inodes.iter().any(|i| Some(&i.as_str()) == f.get(9)) {
            return None;
        }
        u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()
    })
}

struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: controller\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let mut child = Command::new(cached("prometheus-bookworm/usr/bin/prometheus"))
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
            .unwrap();
        let start = Instant::now();
        let port = loop {
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "prometheus exited ({st}): {}",
                    std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
                );
            }
            if let Some(p) = listening_port(child.id()) {
                break p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        while http(addr, "GET", "/-/ready").0 != 200 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus not ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    fn query(&self, q: &str) -> Option<String> {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, _, body) = http(self.addr, "GET", &format!("/api/v1/query?query={enc}"));
        assert_eq!(status, 200, "{body}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        doc["data"]["result"].as_array()?.first()?["value"][1]
            .as_str()
            .map(str::to_string)
    }

    fn wait_for(&self, q: &str, want: &str, within: Duration) {
        let start = Instant::now();
        loop {
            let got = self.query(q);
            if got.as_deref() == Some(want) {
                return;
            }
            assert!(
                start.elapsed() < within,
                "{q} == {want}: not within {within:?} (last {got:?}); targets: {}",
                http(self.addr, "GET", "/api/v1/targets").2
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_and_sees_the_condition_flip() {
    let env = Env::start();
    env.deployment("md-a", false, true, 0);
    env.node("w1");
    env.machine("md-a", "m1", true, &[SYSCTL], Some("w1"));
    env.agent_writes("w1", "True", "Converged", &[SYSCTL]);
    let ctl = env.controller(&["--http-listen", "127.0.0.1:0"]);
    let addr = endpoints(&ctl);
    let prom = Prometheus::start(addr);
    let within = Duration::from_secs(30);
    prom.wait_for("up{job=\"controller\"}", "1", within);
    prom.wait_for(
        "sandbox_readiness_controller_conditions{status=\"True\"}",
        "1",
        within,
    );
    let before = prom
        .query("sandbox_readiness_controller_writes_total")
        .unwrap();
    let before: u64 = before.parse().unwrap();
    assert!(before >= 1);
    env.agent_writes("w1", "False", "SysctlMismatch", &[SYSCTL]);
    prom.wait_for(
        "sandbox_readiness_controller_conditions{status=\"False\"}",
        "1",
        within,
    );
    prom.wait_for(
        "sandbox_readiness_controller_conditions{status=\"True\"}",
        "0",
        within,
    );
    prom.wait_for(
        "sandbox_readiness_controller_writes_total",
        &(before + 1).to_string(),
        within,
    );
}

/// `--http-listen [::]:PORT` (the chart's default): one dual-stack socket
/// that serves `/healthz` on IPv6 (`[::1]`) and IPv4 (`127.0.0.1`, taken as
/// an IPv4-mapped address while `net.ipv6.bindv6only` is 0, the kernel's
/// default and what a pod's network namespace starts with).
#[test]
fn bound_to_the_ipv6_wildcard_it_serves_ipv6_and_ipv4() {
    let bindv6only = std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
        .expect("no /proc/sys/net/ipv6/bindv6only: this machine has no IPv6");
    assert_eq!(
        bindv6only.trim(),
        "0",
        "net.ipv6.bindv6only=1 here: a [::] socket would take IPv6 only"
    );
    let env = Env::start();
    let ctl = env.controller(&["--http-listen", "[::]:0"]);
    let bound = endpoints(&ctl);
    assert!(
        bound.ip().is_unspecified() && bound.is_ipv6(),
        "bound to {bound}"
    );
    for ip in ["::1", "127.0.0.1"] {
        let addr = SocketAddr::new(ip.parse().unwrap(), bound.port());
        let (status, head, body) = http(addr, "GET", "/healthz");
        assert_eq!(status, 200, "{addr}: {head}\n{body}");
    }
}

/// `--log-format json` (or SANDBOX_READINESS_LOG_FORMAT=json, as the chart
/// sets it): every line the controller writes is one JSON object with its
/// level and message.
#[test]
fn json_logs_are_one_object_per_line() {
    let env = Env::start();
    let ctl = env.controller_as(
        &env.mgmt_kubeconfig,
        &[],
        &[("SANDBOX_READINESS_LOG_FORMAT", "json")],
    );
    common::poll(
        Duration::from_secs(30),
        "the controller's start line",
        || {
            ctl.log()
                .contains("mirroring Node conditions onto Machines")
        },
    );
    let log = ctl.log();
    let mut n = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
        n += 1;
    }
    assert!(n >= 1, "{log}");
}
