//! Hostile input on the agent's port, over real loopback sockets against a
//! real `serve` process: garbage bytes, truncated and broken HTTP/2, HTTP/1.1,
//! oversized gRPC messages, a flood of 10,000 idle connections, more watchers
//! than allowed and a watcher that never reads. Throughout, a well-behaved
//! client keeps asking and must keep getting answers. What these floods cost
//! (CPU, RSS) is measured, with its targets, by the benchmark suite
//! (benches/run.sh, "hostile"), not asserted here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::{ErrorKind, Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{connect, fds, pct, Agent};
use sandbox_readiness::proto::v1::{
    readiness_service_client::ReadinessServiceClient, CheckRequest, DesiredState, GetReportRequest,
    WatchRequest,
};
use tonic::transport::Endpoint;

/// The measuring tests share two cores: run them one at a time so one
/// test's flood does not show up as another's latency.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ------------------------------------------------------------------ limits

/// Lets this process hold as many sockets as the hard limit allows.
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid, initialised rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

// ------------------------------------------------------- the good client

/// What the well-behaved client saw.
#[derive(Debug, Default)]
struct Samples {
    /// GetReport over the long-lived connection.
    kept: Vec<Duration>,
    /// Connect + GetReport over a new connection (every tenth round).
    fresh: Vec<Duration>,
    errors: Vec<String>,
}

impl Samples {
    fn summary(&self) -> String {
        format!(
            "{} calls p50 {:?} p99 {:?} max {:?}; {} new connections p50 {:?} max {:?}; {} errors",
            self.kept.len(),
            pct(&self.kept, 0.50),
            pct(&self.kept, 0.99),
            pct(&self.kept, 1.0),
            self.fresh.len(),
            pct(&self.fresh, 0.50),
            pct(&self.fresh, 1.0),
            self.errors.len()
        )
    }

    /// Every call answered, none slow, and the prober really ran.
    fn assert_served(
        &self,
        what: &str,
        min_calls: usize,
        p99_under: Duration,
        max_under: Duration,
    ) {
        assert!(
            self.errors.is_empty(),
            "{what}: the good client failed: {:?}",
            &self.errors[..self.errors.len().min(5)]
        );
        assert!(
            self.kept.len() >= min_calls,
            "{what}: only {} calls",
            self.kept.len()
        );
        assert!(!self.fresh.is_empty(), "{what}: no new connection tried");
        let p99 = pct(&self.kept, 0.99);
        let max = pct(&self.kept, 1.0).max(pct(&self.fresh, 1.0));
        assert!(p99 < p99_under, "{what}: p99 {p99:?}");
        assert!(max < max_under, "{what}: slowest call {max:?}");
    }
}

/// A tonic client asking `GetReport` every 20 ms until stopped.
struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Samples>,
}

impl Prober {
    async fn start(url: String) -> Prober {
        let channel = connect(&url).await;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut c = ReadinessServiceClient::new(channel);
            let mut s = Samples::default();
            let mut round = 0u64;
            while !stopped.load(Ordering::Relaxed) {
                round += 1;
                let t = Instant::now();
                let r = tokio::time::timeout(
                    Duration::from_secs(5),
                    c.get_report(GetReportRequest::default()),
                )
                .await;
                match r {
                    Ok(Ok(resp)) if resp.get_ref().report.is_some() => s.kept.push(t.elapsed()),
                    Ok(Ok(_)) => s.errors.push("answer without a report".into()),
                    Ok(Err(e)) => s.errors.push(format!("GetReport: {e}")),
                    Err(_) => s.errors.push("GetReport: no answer within 5 s".into()),
                }
                if round.is_multiple_of(10) {
                    let t = Instant::now();
                    let r = tokio::time::timeout(Duration::from_secs(5), async {
                        let ch = Endpoint::from_shared(url.clone())?.connect().await?;
                        ReadinessServiceClient::new(ch)
                            .get_report(GetReportRequest::default())
                            .await
                            .map_err(|e| e.into())
                            .map(|_| ())
                    })
                    .await;
                    match r {
                        Ok(Ok(())) => s.fresh.push(t.elapsed()),
                        Ok(Err::<(), Box<dyn std::error::Error + Send + Sync>>(e)) => {
                            s.errors.push(format!("new connection: {e}"))
                        }
                        Err(_) => s.errors.push("new connection: no answer within 5 s".into()),
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            s
        });
        Prober { stop, task }
    }

    async fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("prober")
    }
}

// ------------------------------------------------------------ raw HTTP/2

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const RST_STREAM: u8 = 3;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A header block of HPACK "literal without indexing, new name" fields
/// (no Huffman, no table): enough to write a gRPC request by hand.
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        assert!(name.len() < 127 && value.len() < 127);
        out.push(0x00);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn grpc_headers(addr: SocketAddr, method: &str) -> Vec<u8> {
    let path = format!("/sandbox_readiness.v1.ReadinessService/{method}");
    let authority = addr.to_string();
    hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", &path),
        (":authority", &authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ])
}

/// Frames parsed from what the server sent: (type, flags, stream).
fn frames_in(mut bytes: &[u8]) -> Vec<(u8, u8, u32)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len =
            (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
        out.push((bytes[3], bytes[4], stream));
        bytes = &bytes[(9 + len).min(bytes.len())..];
    }
    out
}

/// How a connection ended, seen from the client.
#[derive(Debug)]
struct Ended {
    /// Bytes the server sent before closing.
    got: Vec<u8>,
    /// Closed (EOF or reset) by the server before the deadline.
    closed: bool,
    after: Duration,
}

/// Reads until the server closes the connection or `within` passes.
fn read_until_closed(s: &TcpStream, within: Duration) -> Ended {
    let mut r = s;
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let left = within.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ended {
                got,
                closed: false,
                after: start.elapsed(),
            };
        }
        s.set_read_timeout(Some(left)).expect("timeout");
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break, // reset by the server: closed
        }
    }
    Ended {
        got,
        closed: true,
        after: start.elapsed(),
    }
}

/// Reads what the server sends until it ends stream 1 (trailers-only
/// HEADERS with END_STREAM, or RST_STREAM); fails after 3 s or on close.
fn first_frame_on_stream_1(s: &mut TcpStream, what: &str) -> ((u8, u8, u32), Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{what}: stream 1 not answered within 3 s: {:?}",
            frames_in(&got)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("{what}: connection closed instead of the stream being answered"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{what}: read: {e}"),
        }
        if let Some(f) = frames_in(&got)
            .into_iter()
            .find(|f| f.2 == 1 && ((f.0 == HEADERS && f.1 & END_STREAM != 0) || f.0 == RST_STREAM))
        {
            return (f, start.elapsed());
        }
    }
}

fn open(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Opens a connection and sends `hello`; `None` when the server reset it
/// before either returned (any other failure is the test's own).
fn open_or_reset(addr: SocketAddr, hello: &[u8]) -> Option<TcpStream> {
    let reset = |e: &std::io::Error| {
        matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
        )
    };
    let mut s = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) if reset(&e) => return None,
        Err(e) => panic!("connect: {e}"),
    };
    // Best effort: a socket already reset may refuse the option.
    let _ = s.set_nodelay(true);
    match s.write_all(hello) {
        Ok(()) => Some(s),
        Err(e) if reset(&e) => None,
        Err(e) => panic!("hello: {e}"),
    }
}

/// Sends `bytes` on new connections (`n` of them, at once) and checks the
/// server closes every one within `within`; returns what each got.
fn send_and_expect_close(
    addr: SocketAddr,
    what: &str,
    n: usize,
    within: Duration,
    bytes: impl Fn(usize) -> Vec<u8>,
) -> Vec<Ended> {
    let mut conns: Vec<TcpStream> = (0..n).map(|_| open(addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        // The server may close before everything is written: that is fine.
        let _ = c.write_all(&bytes(i));
    }
    let start = Instant::now();
    let ended: Vec<Ended> = conns
        .iter_mut()
        .map(|c| read_until_closed(c, within.saturating_sub(start.elapsed())))
        .collect();
    let open_left = ended.iter().filter(|e| !e.closed).count();
    assert_eq!(
        open_left, 0,
        "{what}: {open_left} of {n} connections still open after {within:?}"
    );
    let slowest = ended.iter().map(|e| e.after).max().unwrap_or_default();
    eprintln!("{what}: {n} connections, all closed by the agent (slowest after {slowest:?})");
    ended
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_port_is_shed_while_a_good_client_keeps_its_answers() {
    let _serial = SERIAL.lock().await;
    // Every connection comes from 127.0.0.1: lift the per-address cap.
    let agent = Agent::start(None, &["--max-connections-per-address", "0"]);
    let addr = agent.addr;
    let prober = Prober::start(agent.url()).await;
    let mut rng = fastrand::Rng::with_seed(0x5eed_0006);

    let flood = tokio::task::spawn_blocking(move || {
        // Random bytes: never an HTTP/2 preface (the first byte is not 'P').
        let random: Vec<Vec<u8>> = (0..200)
            .map(|_| {
                let len = rng.usize(1..4096);
                let mut b: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
                if b[0] == b'P' {
                    b[0] = b'Q';
                }
                b
            })
            .collect();
        let ended = send_and_expect_close(addr, "random bytes", 200, Duration::from_secs(3), |i| {
            random[i].clone()
        });
        assert!(
            ended.iter().all(|e| e.got.is_empty()),
            "the agent answered random bytes"
        );

        // HTTP/1.1, including an h2c upgrade: not served, closed unanswered.
        let h1 = [
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
            "POST /sandbox_readiness.v1.ReadinessService/GetReport HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc\r\nContent-Length: 5\r\n\r\n\0\0\0\0\0".to_string(),
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n".to_string(),
        ];
        let ended = send_and_expect_close(
            addr,
            "HTTP/1.1 requests",
            150,
            Duration::from_secs(3),
            |i| h1[i % h1.len()].clone().into_bytes(),
        );
        assert!(
            ended.iter().all(|e| e.got.is_empty()),
            "the agent answered HTTP/1.1"
        );

        // A valid preface, then broken frames: each must end in GOAWAY + close.
        let settings = frame(SETTINGS, 0, 0, &[]);
        let mut random_tail = fastrand::Rng::with_seed(7);
        let kinds: Vec<(&str, Vec<u8>)> = vec![
            (
                "DATA on stream 0",
                [settings.clone(), frame(DATA, 0, 0, b"xx")].concat(),
            ),
            (
                "a 16 MiB frame length",
                [
                    settings.clone(),
                    vec![0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1],
                    vec![0; 64],
                ]
                .concat(),
            ),
            (
                "HEADERS with a garbage HPACK block",
                [
                    settings.clone(),
                    frame(HEADERS, END_HEADERS, 1, &[0xff; 32]),
                ]
                .concat(),
            ),
            (
                "SETTINGS ENABLE_PUSH=2",
                frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]),
            ),
            (
                "WINDOW_UPDATE of 0 on the connection",
                [settings.clone(), frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0])].concat(),
            ),
            (
                "64 KiB of random frames",
                (0..65536).map(|_| random_tail.u8(..)).collect(),
            ),
        ];
        for (what, tail) in &kinds {
            let ended = send_and_expect_close(
                addr,
                &format!("preface + {what}"),
                20,
                Duration::from_secs(5),
                |_| [PREFACE, tail].concat(),
            );
            for e in &ended {
                let frames = frames_in(&e.got);
                assert!(
                    frames.iter().any(|f| f.0 == GOAWAY),
                    "preface + {what}: no GOAWAY before the close, frames {frames:?}"
                );
            }
        }

        // A malformed request (only `:method`): a stream error, answered
        // with RST_STREAM; the connection itself stays usable.
        let mut s = open(addr);
        let mut req = PREFACE.to_vec();
        req.extend(frame(SETTINGS, 0, 0, &[]));
        req.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &hpack(&[(":method", "POST")]),
        ));
        s.write_all(&req).expect("write");
        let (f, took) = first_frame_on_stream_1(&mut s, "a malformed request");
        assert_eq!(f.0, RST_STREAM, "a malformed request: {f:?}");
        eprintln!("malformed request headers: RST_STREAM after {took:?}");

        // A gRPC message claiming 4 GiB: answered at once (not buffered).
        let mut s = open(addr);
        let mut req = PREFACE.to_vec();
        req.extend(frame(SETTINGS, 0, 0, &[]));
        req.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &grpc_headers(addr, "GetReport"),
        ));
        req.extend(frame(DATA, 0, 1, &[0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3]));
        s.write_all(&req).expect("write");
        let (f, took) = first_frame_on_stream_1(&mut s, "a 4 GiB length claim");
        eprintln!(
            "4 GiB length claim: stream answered with frame type {} after {took:?}",
            f.0
        );
    });
    flood.await.expect("garbage");

    // Oversized messages through a real client: refused with OUT_OF_RANGE.
    let mut c = ReadinessServiceClient::new(connect(&agent.url()).await);
    for size in [1usize << 20, 16 << 20] {
        let huge = DesiredState {
            require_runtime_handlers: vec!["x".repeat(size)],
            ..DesiredState::default()
        };
        let err = c
            .check(CheckRequest {
                desired: Some(huge),
                refresh: false,
                ..CheckRequest::default()
            })
            .await
            .expect_err("oversized message accepted");
        assert_eq!(err.code(), tonic::Code::OutOfRange, "{size} bytes: {err}");
    }

    // Truncated prefaces held open: shed at the 10 s preface deadline.
    let truncated = tokio::task::spawn_blocking(move || {
        let mut conns: Vec<TcpStream> = (0..1000)
            .map(|i| {
                let mut s = open(addr);
                s.write_all(&PREFACE[..1 + i % (PREFACE.len() - 1)])
                    .expect("write");
                s
            })
            .collect();
        let sent = Instant::now();
        conns
            .iter_mut()
            .map(|c| read_until_closed(c, Duration::from_secs(12).saturating_sub(sent.elapsed())))
            .collect::<Vec<Ended>>()
    });
    let ended = truncated.await.expect("truncated");
    let still_open = ended.iter().filter(|e| !e.closed).count();
    let samples = prober.finish().await;

    eprintln!("good client during the garbage: {}", samples.summary());
    assert_eq!(
        still_open, 0,
        "{still_open} truncated-preface connections outlived the 10 s preface deadline"
    );
    samples.assert_served(
        "garbage",
        100,
        Duration::from_millis(250),
        Duration::from_secs(2),
    );
    assert!(agent_alive(&agent), "the agent died");
}

fn agent_alive(agent: &Agent) -> bool {
    std::path::Path::new(&format!("/proc/{}", agent.child.id())).exists()
        && std::fs::read_to_string(format!("/proc/{}/stat", agent.child.id()))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Opens `n` connections in batches of 100, each sending `hello` (maybe
/// nothing), pacing each batch to the agent's accept loop (its fd count):
/// a full accept queue silently drops a handshake's last ACK, and such a
/// connection never reaches the agent. Fails when the agent stops taking
/// connections (or closes some) instead of flooding on past it.
fn open_many(addr: SocketAddr, pid: u32, n: usize, hello: &[u8]) -> Vec<TcpStream> {
    let base = fds(pid);
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        for _ in 0..100.min(n - conns.len()) {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connection {}: {e}", conns.len() + 1));
            if !hello.is_empty() {
                s.write_all(hello).expect("hello");
            }
            conns.push(s);
        }
        let start = Instant::now();
        // A little slack: the good client's own connections come and go.
        while fds(pid) + 5 < base + conns.len() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "after {} connections the agent holds {} fds ({base} before): it stopped taking them, or closed some",
                conns.len(),
                fds(pid)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    conns
}

/// Waits until the agent holds at least (or, with `fewer`, at most) `n` fds.
async fn wait_fds(pid: u32, n: usize, fewer: bool, within: Duration) -> usize {
    let start = Instant::now();
    loop {
        let now = fds(pid);
        if (fewer && now <= n) || (!fewer && now >= n) || start.elapsed() > within {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many of `conns` the server has closed (EOF or reset), without waiting.
fn closed_by_peer(conns: &[TcpStream]) -> usize {
    let mut buf = [0u8; 4096];
    conns
        .iter()
        .filter(|c| {
            c.set_nonblocking(true).expect("nonblocking");
            let mut r: &TcpStream = c;
            loop {
                match r.read(&mut buf) {
                    Ok(0) => return true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return true,
                }
            }
        })
        .count()
}

/// Opens `n` connections sending `hello`, checks the agent holds them, closes
/// them from this side and checks the agent lets go of them.
async fn round(agent: &Agent, n: usize, hello: Vec<u8>, base_fds: usize) -> Duration {
    let (addr, pid) = (agent.addr, agent.pid());
    let t = Instant::now();
    let conns = tokio::task::spawn_blocking(move || open_many(addr, pid, n, &hello))
        .await
        .expect("open");
    let opened_in = t.elapsed();
    // A client's connect() completes once the kernel queues the connection,
    // before the agent accepts it; on a loaded machine the agent may need a
    // few seconds to drain the queue.
    let held_fds = wait_fds(pid, base_fds + n, false, Duration::from_secs(20)).await;
    assert!(
        held_fds >= base_fds + n,
        "the agent holds {held_fds} fds, expected at least {}: the flood did not reach it",
        base_fds + n
    );
    drop(conns);
    let left = wait_fds(pid, base_fds + 20, true, Duration::from_secs(10)).await;
    assert!(
        left <= base_fds + 20,
        "closed connections still held: {left} fds"
    );
    opened_in
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_are_held_then_shed_while_a_good_client_is_served() {
    const N: usize = 10_000;
    let _serial = SERIAL.lock().await;
    let nofile = raise_nofile();
    assert!(
        nofile as usize > N + 1000,
        "RLIMIT_NOFILE hard limit {nofile} is too low for {N} connections"
    );
    // Every connection comes from 127.0.0.1: lift the per-address cap.
    let agent = Agent::start(None, &["--max-connections-per-address", "0"]);
    let addr = agent.addr;
    let pid = agent.pid();
    // The first observation (and its helper's pipes) is over: the fd count
    // is the agent's own from here on.
    agent
        .log()
        .wait_line("first observation", Duration::from_secs(30));
    let prober = Prober::start(agent.url()).await;
    let base_fds = fds(pid);

    // Phase 1: raw TCP connections that never send a byte. The agent holds
    // them until the 10 s preface deadline, then closes them itself.
    let t = Instant::now();
    let idle = tokio::task::spawn_blocking(move || open_many(addr, pid, N, &[]))
        .await
        .expect("open");
    let opened1 = t.elapsed();
    assert!(
        opened1 < Duration::from_secs(9),
        "opening {N} connections took {opened1:?}: the first would meet the preface deadline"
    );
    let held1 = wait_fds(pid, base_fds + N, false, Duration::from_secs(5)).await;
    assert!(
        held1 >= base_fds + N,
        "the agent holds {held1} fds, expected at least {}: the flood did not reach it",
        base_fds + N
    );
    let shed1 = wait_fds(pid, base_fds + 20, true, Duration::from_secs(15)).await;
    let shed1_at = t.elapsed();
    let closed1 = closed_by_peer(&idle);
    drop(idle);

    // Phase 2: HTTP/2 connections (preface + SETTINGS), then silence. They
    // pass the preface check and are held by the HTTP/2 server.
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    let opened2 = round(&agent, N, hello, base_fds).await;
    let samples = prober.finish().await;

    eprintln!(
        "agent {}; RLIMIT_NOFILE {nofile}; agent fds at baseline {base_fds}",
        std::env::var("SR_AGENT_BIN").unwrap_or_else(|_| "test build".into())
    );
    eprintln!(
        "phase 1, {N} silent TCP connections opened in {opened1:?}: agent fds {held1}; the agent closed {closed1} at its preface deadline, fds {shed1} after {shed1_at:?}"
    );
    eprintln!(
        "phase 2, {N} idle HTTP/2 connections opened in {opened2:?}, held, and let go once closed"
    );
    eprintln!("good client during the flood: {}", samples.summary());

    assert_eq!(
        closed1, N,
        "silent connections outlived the preface deadline"
    );
    assert!(
        shed1 <= base_fds + 20,
        "the agent still holds {shed1} fds after the preface deadline"
    );
    // The agent has one runtime thread: setting up or tearing down thousands
    // of HTTP/2 connections at once stalls it for a moment (up to ~2 s in the
    // unoptimised test build, ~0.5 s in the release build), and a new
    // client's SYN can meet a full 128-entry backlog (1 s retransmit).
    samples.assert_served(
        "connection flood",
        300,
        Duration::from_millis(500),
        Duration::from_secs(4),
    );
    assert!(agent_alive(&agent), "the agent died");
}

/// HTTP/2 keepalive of the agent under test: short, so dead peers are found
/// in seconds (the agent's defaults are a ping every 30 s, 10 s to answer).
const KEEPALIVE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_http2_peers_are_dropped_by_the_keepalive() {
    // Cheap (100 idle sockets), so it runs beside the others.
    let secs = format!("{}s", KEEPALIVE.as_secs());
    let agent = Agent::start(
        None,
        &["--keepalive-interval", &secs, "--keepalive-timeout", &secs],
    );
    let (addr, pid) = (agent.addr, agent.pid());
    // The first observation (and its helper's pipes) is over.
    agent
        .log()
        .wait_line("first observation", Duration::from_secs(30));
    let base_fds = fds(pid);
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    let t = Instant::now();
    let conns = tokio::task::spawn_blocking(move || open_many(addr, pid, 100, &hello))
        .await
        .expect("open");
    let held = wait_fds(pid, base_fds + 100, false, Duration::from_secs(10)).await;
    assert!(held >= base_fds + 100, "agent holds {held} fds");
    // A ping after an idle interval, then the timeout to answer: gone after
    // about two intervals, and not much later.
    let left = wait_fds(pid, base_fds + 5, true, 10 * KEEPALIVE).await;
    let took = t.elapsed();
    let (closed, frames) = tokio::task::spawn_blocking(move || {
        let mut conns = conns;
        let mut kinds = Vec::new();
        let closed = conns
            .iter_mut()
            .filter(|c| {
                let e = read_until_closed(c, Duration::from_millis(100));
                kinds.extend(frames_in(&e.got).into_iter().map(|f| f.0));
                e.closed
            })
            .count();
        (closed, kinds)
    })
    .await
    .expect("read");
    eprintln!(
        "100 dead HTTP/2 peers: fds {held} → {left} after {took:?}; {closed} closed by the agent"
    );
    assert_eq!(closed, 100, "dead peers still connected after {took:?}");
    assert!(
        took >= KEEPALIVE,
        "dropped after {took:?}: before the keepalive could have found them dead"
    );
    assert!(
        frames.contains(&6),
        "no PING (type 6) was sent to the dead peers: {frames:?}"
    );
}

#[tokio::test]
async fn connections_beyond_max_connections_are_closed_at_once() {
    let _serial = SERIAL.lock().await;
    let agent = Agent::start(None, &["--max-connections", "50"]);
    let (addr, pid) = (agent.addr, agent.pid());
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    let (held, closed) = tokio::task::spawn_blocking(move || {
        // A connection beyond the cap is reset as it is accepted, which can
        // reach this side before connect() or the hello returns: it counts
        // as closed at once, like one whose reset is read later.
        let mut reset_early = 0;
        let conns: Vec<TcpStream> = (0..200)
            .filter_map(|_| {
                let opened = open_or_reset(addr, &hello);
                reset_early += usize::from(opened.is_none());
                opened
            })
            .collect();
        // The 150 beyond the cap are closed as they are accepted.
        let start = Instant::now();
        let mut closed = reset_early + closed_by_peer(&conns);
        while closed < 150 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            closed = reset_early + closed_by_peer(&conns);
        }
        eprintln!("{reset_early} of them reset before connect() or the hello returned");
        (fds(pid), closed)
    })
    .await
    .expect("flood");
    eprintln!(
        "--max-connections 50, 200 HTTP/2 connections: {closed} closed at once, agent fds {held}"
    );
    assert_eq!(
        closed, 150,
        "expected exactly the 150 beyond the cap to be closed"
    );
    assert!(held < 50 + 20, "agent holds {held} fds");
    // The cap is on connections, not a wedge: with the flood gone, a client gets in.
    let mut c = ReadinessServiceClient::new(connect(&agent.url()).await);
    c.get_report(GetReportRequest::default())
        .await
        .expect("GetReport after the flood");
}

/// The `user.max_user_namespaces` value a report shows.
fn limit_of(report: &sandbox_readiness::proto::v1::Report) -> String {
    sandbox_readiness::report::find_sysctl(report, "user.max_user_namespaces")
        .map(|s| s.value.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_are_capped_and_one_that_never_reads_is_dropped() {
    let _serial = SERIAL.lock().await;
    let agent = Agent::start(
        Some(11255),
        &[
            "--max-watchers",
            "3",
            "--poll-interval",
            "50ms",
            "--min-refresh-interval",
            "50ms",
            "--heartbeat",
            "1h",
        ],
    );

    // The slow watcher: a real client whose HTTP/2 window is tiny and that
    // never polls its stream, so the agent's send buffer for it fills up.
    let slow_channel = Endpoint::from_shared(agent.url())
        .expect("url")
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(65535))
        .connect()
        .await
        .expect("connect");
    let mut slow = ReadinessServiceClient::new(slow_channel)
        .watch(WatchRequest::default())
        .await
        .expect("slow Watch")
        .into_inner();

    // Two watchers that read everything.
    let mut readers = Vec::new();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    for i in 0..2 {
        let mut s = ReadinessServiceClient::new(connect(&agent.url()).await)
            .watch(WatchRequest::default())
            .await
            .expect("Watch")
            .into_inner();
        let tx = seen_tx.clone();
        readers.push(tokio::spawn(async move {
            let mut n = 0;
            while let Ok(Some(m)) = s.message().await {
                n += 1;
                let _ = tx.send((i, limit_of(&m.report.expect("report"))));
            }
            n
        }));
    }

    // The fourth: refused, and the message says why.
    let err = ReadinessServiceClient::new(connect(&agent.url()).await)
        .watch(WatchRequest::default())
        .await
        .expect_err("a fourth watcher was admitted");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert!(
        err.message().contains("too many watchers") && err.message().contains('3'),
        "unclear message: {}",
        err.message()
    );

    // Make reports change under the slow watcher: flip the real limit in
    // the agent's user namespace and wait until the readers saw each flip.
    const FLIPS: usize = 30;
    let started = Instant::now();
    for k in 0..FLIPS {
        let value = if k % 2 == 0 { "0" } else { "11255" };
        agent.set_limit(value.parse().expect("n"));
        let mut saw = [false, false];
        let deadline = Instant::now() + Duration::from_secs(5);
        while saw != [true, true] {
            let (i, limit) = tokio::time::timeout_at(deadline.into(), seen_rx.recv())
                .await
                .unwrap_or_else(|_| panic!("flip {k} to {value} not seen within 5 s"))
                .expect("readers alive");
            if limit == value {
                saw[i] = true;
            }
        }
    }
    let flipping = started.elapsed();

    // The slow watcher was dropped, so its slot is free again.
    let mut fourth = ReadinessServiceClient::new(connect(&agent.url()).await)
        .watch(WatchRequest::default())
        .await
        .expect("the slow watcher's slot was not freed")
        .into_inner();
    fourth.message().await.expect("first").expect("report");

    // What the slow watcher gets when it finally reads: a bounded backlog,
    // then RESOURCE_EXHAUSTED saying it was too slow.
    let mut backlog = 0;
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(5), slow.message()).await {
            Ok(Ok(Some(_))) => backlog += 1,
            Ok(Ok(None)) => break None,
            Ok(Err(status)) => break Some(status),
            Err(_) => panic!("the slow watcher's stream neither ended nor sent within 5 s"),
        }
    };
    eprintln!(
        "{FLIPS} report changes in {flipping:?}; slow watcher got {backlog} buffered reports, then {end:?}"
    );
    assert!(
        backlog < FLIPS / 2,
        "the slow watcher was sent {backlog} of {FLIPS} changes: not dropped"
    );
    let status = end.expect("the slow watcher's stream ended without saying why");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("too slow"), "{status}");
    drop(fourth);
    drop(agent);
    for r in readers {
        let n = r.await.expect("reader");
        assert!(n > FLIPS, "a reading watcher got only {n} reports");
    }
}
