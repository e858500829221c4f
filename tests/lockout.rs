//! The agent's transport against hostile and long-lived clients, over real
//! sockets and the real binary: silent TLS handshakes from many addresses
//! cannot lock a controller out, every service decodes at most 64 KiB,
//! connections have a maximum age that `check --wait` rides through
//! without a word, and `--client-name` admits only the named clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::HashSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use common::{args, ca::Ca, check, Agent};
use rcgen::{ExtendedKeyUsagePurpose, SanType};

/// `tls init` material for 127.0.0.1 in `dir`.
fn tls_init(dir: &Path) -> PathBuf {
    let tls = dir.join("tls");
    common::tls_init(&tls, &["--san", "127.0.0.1"]);
    tls
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// The serve flags for mTLS with the files in `dir`.
fn mtls_flags(dir: &Path) -> Vec<String> {
    args(&[
        "--tls-cert",
        &path(dir, "server.pem"),
        "--tls-key",
        &path(dir, "server-key.pem"),
        "--client-ca",
        &path(dir, "ca.pem"),
    ])
}

/// `check` of one TLS node with a client certificate, JSON output; the node's entry.
fn check_tls(
    addr: SocketAddr,
    dir: &Path,
    cert: &str,
    key: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut a = args(&[
        "-n",
        &addr.to_string(),
        "-o",
        "json",
        "--tls-ca",
        &path(dir, "ca.pem"),
        "--tls-cert",
        &path(dir, cert),
        "--tls-key",
        &path(dir, key),
    ]);
    a.extend(args(extra));
    let r = check(&a, Duration::from_secs(60));
    assert!(r.code() == 0 || r.code() == 1, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json();
    doc["nodes"][0].clone()
}

/// The IPv4 TCP sockets of this network namespace, one row of
/// `/proc/net/tcp` each, split into its fields (local, remote, state,
/// tx_queue:rx_queue, …; the slot number dropped).
fn tcp_table() -> Vec<Vec<String>> {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect()
}

/// Silent connections accepted by the kernel but not yet by the agent, on
/// the listening socket at `addr` (the accept queue, from /proc/net/tcp).
fn accept_queue(addr: SocketAddr) -> usize {
    let want = format!("0100007F:{:04X}", addr.port());
    tcp_table()
        .iter()
        // local, remote, state (0A = LISTEN), tx_queue:rx_queue
        .filter(|f| f[0] == want && f[2] == "0A")
        .map(|f| {
            let rx = f[3].split(':').nth(1).unwrap();
            usize::from_str_radix(rx, 16).unwrap()
        })
        .sum()
}

/// Raises this process's open-file limit: 1,024 sockets of our own.
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < 4096 && hard > soft {
        setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard).unwrap();
    }
}

/// Issue 13: 16 addresses × 64 silent handshakes filled the agent's 1,024
/// handshake slots for the 10 s timeout, and `check` was refused at once.
#[test]
fn silent_handshakes_from_16_addresses_do_not_lock_a_controller_out() {
    raise_nofile();
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_init(dir.path());
    let flags = mtls_flags(&tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = Agent::start(None, &flags);
    let addr = agent.addr;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let silent = rt.block_on(async {
        let mut held = Vec::new();
        for host in 2..=17u8 {
            for _ in 0..64 {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket
                    .bind(SocketAddr::from(([127, 0, 0, host], 0)))
                    .unwrap();
                // A connection shed at once may be reset before connect
                // returns; the others stay open and silent.
                if let Ok(s) = socket.connect(addr).await {
                    held.push(s);
                }
            }
        }
        held
    });
    eprintln!("{} silent connections open", silent.len());
    // Every connection made so far has been taken by the agent (and so
    // holds a handshake slot, or was shed) once the accept queue is empty.
    common::wait_until(
        Duration::from_secs(20),
        "the agent accepted the flood",
        || accept_queue(addr) == 0,
    );

    let started = Instant::now();
    let node = check_tls(addr, &tls, "client.pem", "client-key.pem", &[]);
    let took = started.elapsed();
    assert!(
        node["error"].is_null() && !node["report"].is_null(),
        "no report beside the stalled handshakes: {node}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    drop(silent);
}

/// Health and reflection decode at most 64 KiB, like the readiness
/// service (tonic's default is 4 MiB).
#[tokio::test]
async fn a_request_over_64_kib_to_health_is_refused() {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let agent = Agent::start(None, &[]);
    let channel = common::connect(&agent.url()).await;
    let mut health = HealthClient::new(channel);
    let small = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    assert!(small.is_ok(), "{small:?}");
    let big = health
        .check(HealthCheckRequest {
            service: "x".repeat(70 * 1024),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            big.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{big:?}"
    );
}

/// Client connections (ESTABLISHED, from the client's side) to `port`:
/// their local ports.
fn client_ports(port: u16) -> HashSet<u16> {
    let want = format!("0100007F:{port:04X}");
    tcp_table()
        .iter()
        // remote is the agent, state 01 = ESTABLISHED
        .filter(|f| f[1] == want && f[2] == "01")
        .map(|f| {
            let local = f[0].split(':').nth(1).unwrap();
            u16::from_str_radix(local, 16).unwrap()
        })
        .collect()
}

/// A connection past `--max-connection-age` ends its Watch stream cleanly;
/// `check --wait` reconnects on a new connection and reports nothing.
#[test]
fn check_wait_rides_through_the_maximum_connection_age() {
    let agent = Agent::start(None, &["--max-connection-age", "2s"]);
    // Never converges (pid_max cannot be 1), so check keeps watching.
    let mut proc = common::CheckProc::spawn(&args(&[
        "-n",
        &agent.addr.to_string(),
        "--sysctl=kernel.pid_max=1",
        "--wait",
        "7s",
    ]));
    let mut seen = HashSet::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) && proc.running() {
        seen.extend(client_ports(agent.port));
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = proc.finish(Duration::from_secs(30));
    let err = &run.stderr;
    let name = agent.addr.to_string();
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(&name)).collect();
    assert_eq!(
        lines.len(),
        1,
        "one line (not converged), nothing when connections aged out:\n{err}"
    );
    assert!(lines[0].contains("not converged"), "{err}");
    assert!(
        seen.len() >= 3,
        "the watch did not move to new connections every 2 s: ports {seen:?}\n{err}"
    );
}

/// `--client-name` admits a certificate with that DNS or URI name; one
/// from the same CA without it (even with it as the CN) is refused.
#[test]
fn client_name_admits_only_the_named_clients() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new(d);
    let server = ExtendedKeyUsagePurpose::ServerAuth;
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    ca.leaf(
        "server",
        "agent",
        vec![SanType::IpAddress([127, 0, 0, 1].into())],
        server,
    );
    let dns = |n: &str| SanType::DnsName(n.try_into().unwrap());
    ca.leaf("a", "a", vec![dns("controller-a.example")], client.clone());
    ca.leaf(
        "b",
        "b",
        vec![SanType::URI(
            "spiffe://pool/controller-b".try_into().unwrap(),
        )],
        client.clone(),
    );
    // The right name, but only as the CN.
    ca.leaf(
        "c",
        "controller-a.example",
        vec![dns("other.example")],
        client,
    );
    let mut flags = mtls_flags(d);
    flags.extend(args(&[
        "--client-name",
        "controller-a.example",
        "--client-name",
        "spiffe://pool/controller-b",
    ]));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = Agent::start(None, &flags);

    for who in ["a", "b"] {
        let node = check_tls(
            agent.addr,
            d,
            &format!("{who}.pem"),
            &format!("{who}-key.pem"),
            &[],
        );
        assert!(
            node["error"].is_null() && !node["report"].is_null(),
            "{who} refused: {node}"
        );
    }
    let node = check_tls(agent.addr, d, "c.pem", "c-key.pem", &[]);
    assert!(
        !node["error"].is_null() && node["report"].is_null(),
        "a certificate without the name was served: {node}"
    );
    agent
        .log()
        .wait_line("TLS client refused", Duration::from_secs(5));
}
