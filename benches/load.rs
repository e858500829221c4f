//! Load client for the benchmark suite (`benches/run.sh`): drives a running
//! `sandbox-readiness serve` over loopback through the crate's generated
//! tonic client and prints one JSON object per run on stdout.
//!
//! Unlike h2load, which reports request times coarsely, this times every call
//! on its own, so the percentiles are true per-call latencies.
//!
//! `cargo test --all-targets` runs bench targets without arguments; this
//! binary then only prints its usage and exits 0.

use std::{
    error::Error,
    io::Write,
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand, ValueEnum};
use sandbox_readiness::{
    proto::v1::{
        readiness_service_client::ReadinessServiceClient, GetReportRequest, ProbeOutcome, Report,
        WatchRequest, WatchResponse,
    },
    report::find_sysctl,
};
use serde_json::json;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};

type BoxError = Box<dyn Error + Send + Sync>;

// The tests' private containerd (sid's 2.1 from the test cache, a pause
// image built with umoci), for the boot-to-first-verdict runs with a canary.
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/mod.rs"]
mod support;

#[derive(Debug, Parser)]
#[command(name = "load", about = "Load client for benches/run.sh")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Unary calls from concurrent callers; latency percentiles and rate.
    Unary(UnaryArgs),
    /// Opens many Watch streams and holds them (for the agent's RSS).
    Watch(WatchArgs),
    /// Time from writing user.max_user_namespaces in the agent's user
    /// namespace to a Watch message carrying the new value.
    Change(ChangeArgs),
    /// Opens many raw TCP connections that send a greeting (or nothing) and
    /// then stay silent, and holds them (for the agent's RSS and CPU under a
    /// connection flood; the functional side is tests/hostile.rs).
    Conns(ConnsArgs),
    /// In-memory sizes of the API types (why a Watch channel slot is boxed).
    Sizes,
    /// Time from the exec of `serve` to its first full report, or with
    /// --canary to the first report whose canary of that handler passed.
    Boot(BootArgs),
    /// The Node writer (`serve --kubeconfig`) against a real kube-apiserver
    /// this process starts (scripts/control-plane.sh): condition write
    /// latency over sysctl flips, exec → first condition write, GetReport
    /// latency with the writer on vs off.
    Node(NodeArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum NodePart {
    /// `--count` flips of user.max_user_namespaces (0 ↔ 11255) in the
    /// agent's user namespace: write → the condition's new status on the
    /// Node, and the agent's Watch report → the same.
    Flips,
    /// `--count` execs of `serve` against a freshly registered Node: exec →
    /// the condition on the Node.
    Starts,
    /// `--count` pairs of `load unary` GetReport runs against two agents,
    /// one writing its Node and one not, in alternating order, while both
    /// limits flip every second (so the writer writes during the runs).
    Cost,
}

#[derive(Debug, Parser)]
struct NodeArgs {
    /// The agent binary.
    #[arg(long)]
    bin: PathBuf,
    #[arg(long, value_enum)]
    part: NodePart,
    /// Flips, starts, or pairs.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// The agents' `--poll-interval`.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    poll_interval: Duration,
    /// Random wait before each flip, up to this long.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    jitter: Duration,
    /// Pin the agents to this CPU (`taskset -c`).
    #[arg(long)]
    agent_cpu: Option<usize>,
    /// Callers and measured time of each GetReport run (cost).
    #[arg(long, default_value_t = 64)]
    callers: usize,
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Give up on one flip or start after this long.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// More `serve` flags.
    #[arg(last = true)]
    serve_args: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Hello {
    /// Nothing: a silent TCP connection (shed at the 10 s preface deadline).
    None,
    /// The HTTP/2 preface and an empty SETTINGS frame: an idle HTTP/2 client.
    H2,
    /// The first 1..23 bytes of the preface: a preface that never completes.
    Partial,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Rpc {
    /// GetReport from the cache.
    GetReport,
    /// GetReport{refresh:true}: one full observation per call (with
    /// --min-refresh-interval 0s on the agent).
    Refresh,
    /// GetReport{sandbox_probe:true}: an observation plus `runsc do true`.
    Sandbox,
    /// grpc.health.v1.Health/Check: the floor of any call on this stack.
    Health,
}

#[derive(Debug, Parser)]
struct UnaryArgs {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, value_enum)]
    rpc: Rpc,
    /// Callers, each waiting for its answer before the next call.
    #[arg(long, default_value_t = 1)]
    callers: usize,
    /// Connections the callers share (default: one per caller).
    #[arg(long)]
    connections: Option<usize>,
    /// Measured time (ignored with --count).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured time first.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Exactly this many measured calls in all (no warm-up), instead of --duration.
    #[arg(long)]
    count: Option<u64>,
    /// Total calls per second over all callers (open loop); 0 = as fast as answers come.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Free text copied into the output.
    #[arg(long, default_value = "")]
    label: String,
}

#[derive(Debug, Parser)]
struct WatchArgs {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// Connections the streams share (the agent allows 128 streams per connection).
    #[arg(long, default_value_t = 10)]
    connections: usize,
    /// How long to hold the streams open after all got their first report.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    hold: Duration,
}

#[derive(Debug, Parser)]
struct ConnsArgs {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, default_value_t = 1000)]
    count: usize,
    #[arg(long, value_enum)]
    hello: Hello,
    /// How long to hold them after all are open (then they are closed).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    hold: Duration,
}

#[derive(Debug, Parser)]
struct BootArgs {
    /// The agent binary.
    #[arg(long)]
    bin: PathBuf,
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Require, allow and wait for this handler's canary, on a private
    /// containerd 2.1 started here (one for all runs, holding the sandbox
    /// image; with --image-after, a fresh one per run without it).
    #[arg(long)]
    canary: Option<String>,
    /// Import the sandbox image this long after the exec of `serve`.
    #[arg(long, value_parser = humantime::parse_duration)]
    image_after: Option<Duration>,
    /// Give up on a run after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// More `serve` flags.
    #[arg(last = true)]
    serve_args: Vec<String>,
}

#[derive(Debug, Parser)]
struct ChangeArgs {
    #[arg(long)]
    addr: SocketAddr,
    /// The agent's pid; the write happens in its user namespace (nsenter -U).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 10)]
    samples: usize,
    /// Random wait before each write, up to this long, so writes land at
    /// every phase of the agent's poll timer.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    jitter: Duration,
    /// Give up on a sample after this long.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        println!("load: no command (see benches/README.md); nothing to do");
        return std::process::ExitCode::SUCCESS;
    };
    // One thread: run.sh pins the client to the core the agent does not use.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("load: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = rt.block_on(async move {
        match command {
            Command::Unary(a) => unary(a).await,
            Command::Watch(a) => watch(a).await,
            Command::Change(a) => change(a).await,
            Command::Conns(a) => conns(a),
            Command::Boot(a) => boot(a).await,
            Command::Node(a) => node(a).await,
            Command::Sizes => emit(&json!({
                "mode": "sizes",
                "Report": std::mem::size_of::<Report>(),
                "WatchResponse": std::mem::size_of::<WatchResponse>(),
                "Status": std::mem::size_of::<tonic::Status>(),
                "Result<WatchResponse, Status>":
                    std::mem::size_of::<Result<WatchResponse, tonic::Status>>(),
            })),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn connect(addr: SocketAddr) -> Result<Channel, BoxError> {
    let ch = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e:?}"))?;
    Ok(ch)
}

/// One call; returns the report where the RPC yields one.
async fn call(rpc: Rpc, ch: &Channel) -> Result<Option<Report>, tonic::Status> {
    match rpc {
        Rpc::Health => {
            HealthClient::new(ch.clone())
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await?;
            Ok(None)
        }
        _ => {
            let req = GetReportRequest {
                refresh: rpc == Rpc::Refresh,
                sandbox_probe: rpc == Rpc::Sandbox,
                ..GetReportRequest::default()
            };
            let resp = ReadinessServiceClient::new(ch.clone())
                .get_report(req)
                .await?;
            Ok(resp.into_inner().report)
        }
    }
}

#[derive(Default)]
struct CallerResult {
    latencies_ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    /// Durations (ms) of the probes the reports carry, for refresh/sandbox.
    probe_ms: Vec<(String, f64)>,
}

fn probe_durations(rpc: Rpc, r: &Report, out: &mut Vec<(String, f64)>) {
    let ms = |d: &Option<pbjson_types::Duration>| {
        d.as_ref()
            .map(|d| d.seconds as f64 * 1e3 + f64::from(d.nanos) / 1e6)
    };
    if let Some(u) = &r.user_namespaces {
        if let Some(v) = u.userns_create.as_ref().and_then(|p| ms(&p.duration)) {
            out.push(("userns_create".into(), v));
        }
        if let Some(v) = u.idmap_mount.as_ref().and_then(|p| ms(&p.duration)) {
            out.push(("idmap_mount".into(), v));
        }
    }
    if rpc == Rpc::Sandbox {
        if let Some(p) = r.gvisor.as_ref().and_then(|g| g.sandbox.as_ref()) {
            if let Some(v) = ms(&p.duration) {
                out.push(("sandbox".into(), v));
            }
            out.push((format!("sandbox_outcome_{}", p.outcome), 1.0));
        }
    }
}

async fn unary(a: UnaryArgs) -> Result<(), BoxError> {
    emit(&unary_run(a).await?)
}

async fn unary_run(a: UnaryArgs) -> Result<serde_json::Value, BoxError> {
    let callers = a.callers.max(1);
    let conns = a.connections.unwrap_or(callers).clamp(1, callers);
    let mut channels = Vec::with_capacity(conns);
    for _ in 0..conns {
        channels.push(connect(a.addr).await?);
    }
    // One call per connection first, so connection setup is not measured.
    for ch in &channels {
        call(a.rpc, ch)
            .await
            .map_err(|e| format!("first call failed: {e}"))?;
    }
    let start = Instant::now();
    let measure_from = if a.count.is_some() {
        start
    } else {
        start + a.warmup
    };
    let end = measure_from + a.duration;
    // --count splits the calls over the callers.
    let per_caller = a.count.map(|n| {
        let base = n / callers as u64;
        let extra = n % callers as u64;
        (base, extra)
    });
    let interval = (a.rate > 0.0).then(|| Duration::from_secs_f64(callers as f64 / a.rate));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..callers {
        let ch = channels[i % conns].clone();
        let rpc = a.rpc;
        let quota = per_caller.map(|(base, extra)| base + u64::from((i as u64) < extra));
        // Spread the open-loop callers' first calls over one interval.
        let offset = interval.map(|iv| iv.mul_f64(i as f64 / callers as f64));
        tasks.spawn(async move {
            let mut res = CallerResult::default();
            let mut next = start + offset.unwrap_or_default();
            let mut done = 0u64;
            loop {
                match quota {
                    Some(q) if done >= q => break,
                    None if Instant::now() >= end => break,
                    _ => {}
                }
                if let Some(iv) = interval {
                    tokio::time::sleep_until(next.into()).await;
                    next += iv;
                }
                let t0 = Instant::now();
                let r = call(rpc, &ch).await;
                let t1 = Instant::now();
                done += 1;
                match r {
                    Ok(report) => {
                        if t0 >= measure_from && (quota.is_some() || t1 <= end) {
                            res.latencies_ns
                                .push(u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX));
                            if let Some(rep) = report.as_ref() {
                                if matches!(rpc, Rpc::Refresh | Rpc::Sandbox) {
                                    probe_durations(rpc, rep, &mut res.probe_ms);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        res.errors += 1;
                        if res.first_error.is_none() {
                            res.first_error = Some(e.to_string());
                        }
                    }
                }
            }
            res
        });
    }
    let mut all = CallerResult::default();
    while let Some(r) = tasks.join_next().await {
        let r = r?;
        all.latencies_ns.extend(r.latencies_ns);
        all.errors += r.errors;
        all.probe_ms.extend(r.probe_ms);
        if all.first_error.is_none() {
            all.first_error = r.first_error;
        }
    }
    let window = if a.count.is_some() {
        start.elapsed()
    } else {
        a.duration
    };
    let mut lat = all.latencies_ns;
    lat.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut probes = serde_json::Map::new();
    let mut names: Vec<&String> = all.probe_ms.iter().map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    for n in names {
        let mut v: Vec<f64> = all
            .probe_ms
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .collect();
        v.sort_by(f64::total_cmp);
        probes.insert(n.clone(), summary_f(&v));
    }
    let out = json!({
        "mode": "unary",
        "label": a.label,
        "rpc": format!("{:?}", a.rpc),
        "callers": callers,
        "connections": conns,
        "offered_rate": a.rate,
        "calls": lat.len(),
        "errors": all.errors,
        "first_error": all.first_error,
        "seconds": window.as_secs_f64(),
        "rate": lat.len() as f64 / window.as_secs_f64(),
        "min_ms": lat.first().copied().map(ms),
        "p10_ms": pct(&lat, 10.0).map(ms),
        "p50_ms": pct(&lat, 50.0).map(ms),
        "p90_ms": pct(&lat, 90.0).map(ms),
        "p99_ms": pct(&lat, 99.0).map(ms),
        "max_ms": lat.last().copied().map(ms),
        "probes_ms": probes,
        // Every sample, for runs small enough to pool across rounds.
        "samples_ms": (lat.len() <= 1000).then(|| lat.iter().map(|&n| ms(n)).collect::<Vec<_>>()),
    });
    Ok(out)
}

/// Nearest-rank percentile of sorted values.
fn pct<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn summary_f(sorted: &[f64]) -> serde_json::Value {
    json!({
        "n": sorted.len(),
        "min": sorted.first(),
        "p10": pct(sorted, 10.0),
        "p50": pct(sorted, 50.0),
        "p90": pct(sorted, 90.0),
        "max": sorted.last(),
    })
}

fn emit(v: &serde_json::Value) -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    out.flush()?;
    Ok(())
}

async fn watch(a: WatchArgs) -> Result<(), BoxError> {
    let conns = a.connections.clamp(1, a.streams.max(1));
    let mut channels = Vec::with_capacity(conns);
    for _ in 0..conns {
        channels.push(connect(a.addr).await?);
    }
    let t0 = Instant::now();
    let mut streams = Vec::with_capacity(a.streams);
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..a.streams {
        let ch = channels[i % conns].clone();
        opening.spawn(async move {
            let mut s = ReadinessServiceClient::new(ch)
                .watch(WatchRequest::default())
                .await?
                .into_inner();
            // The first message is the current report: the stream is live.
            match s.message().await? {
                Some(_) => Ok::<_, tonic::Status>(s),
                None => Err(tonic::Status::unavailable("stream ended at once")),
            }
        });
    }
    let mut failed = 0usize;
    let mut first_error = None;
    while let Some(r) = opening.join_next().await {
        match r? {
            Ok(s) => streams.push(s),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let open = streams.len();
    emit(&json!({
        "mode": "watch",
        "streams_open": open,
        "failed": failed,
        "first_error": first_error,
        "connections": conns,
        "open_ms": t0.elapsed().as_secs_f64() * 1e3,
    }))?;
    // Keep reading (heartbeats, changes) so the agent never sees a slow watcher.
    let mut readers = tokio::task::JoinSet::new();
    for mut s in streams {
        readers.spawn(async move { while let Ok(Some(_)) = s.message().await {} });
    }
    tokio::time::sleep(a.hold).await;
    readers.abort_all();
    if open < a.streams {
        return Err(format!("only {open} of {} Watch streams opened", a.streams).into());
    }
    Ok(())
}

const LIMIT: &str = "user.max_user_namespaces";

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Blocking on purpose: plain sockets, no runtime, nothing but the greeting.
fn conns(a: ConnsArgs) -> Result<(), BoxError> {
    // An empty SETTINGS frame: length 0, type 4, flags 0, stream 0.
    let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
    let started = Instant::now();
    let mut held = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let mut s = std::net::TcpStream::connect_timeout(&a.addr, Duration::from_secs(5))
            .map_err(|e| format!("connection {}: {e}", i + 1))?;
        match a.hello {
            Hello::None => {}
            Hello::H2 => {
                s.write_all(PREFACE)?;
                s.write_all(&settings)?;
            }
            Hello::Partial => s.write_all(&PREFACE[..1 + i % (PREFACE.len() - 1)])?,
        }
        held.push(s);
    }
    emit(&json!({
        "mode": "conns",
        "hello": format!("{:?}", a.hello).to_lowercase(),
        "opened": held.len(),
        "open_ms": started.elapsed().as_secs_f64() * 1000.0,
    }))?;
    std::thread::sleep(a.hold);
    Ok(())
}

async fn change(a: ChangeArgs) -> Result<(), BoxError> {
    let ch = connect(a.addr).await?;
    let mut stream = ReadinessServiceClient::new(ch)
        .watch(WatchRequest::default())
        .await?
        .into_inner();
    let first = stream
        .message()
        .await?
        .and_then(|m| m.report)
        .ok_or("Watch sent no first report")?;
    let start_value: u64 = find_sysctl(&first, LIMIT)
        .ok_or("the report has no user.max_user_namespaces")?
        .value
        .parse()?;
    // Reports arrive in their own task so none waits in the buffer while we sleep.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, String)>();
    let reader = tokio::spawn(async move {
        while let Ok(Some(m)) = stream.message().await {
            if let Some(v) = m.report.as_ref().and_then(|r| find_sysctl(r, LIMIT)) {
                if tx.send((Instant::now(), v.value.clone())).is_err() {
                    return;
                }
            }
        }
    });
    let mut samples_ms = Vec::with_capacity(a.samples);
    let mut result = Ok(());
    for i in 0..a.samples {
        // Alternate between two values; the first differs from the start.
        let a_value = if start_value == 11255 { 11257 } else { 11255 };
        let value = if i % 2 == 0 { a_value } else { 11256 };
        tokio::time::sleep(a.jitter.mul_f64(fastrand::f64())).await;
        while rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        if let Err(e) = write_limit(a.pid, value).await {
            result = Err(e);
            break;
        }
        let wanted = value.to_string();
        let seen = tokio::time::timeout(a.timeout, async {
            while let Some((t, v)) = rx.recv().await {
                if v == wanted {
                    return Some(t);
                }
            }
            None
        })
        .await;
        match seen {
            Ok(Some(t)) => samples_ms.push((t - t0).as_secs_f64() * 1e3),
            Ok(None) => {
                result = Err("the Watch stream ended".into());
                break;
            }
            Err(_) => {
                result =
                    Err(format!("no report with {LIMIT}={value} within {:?}", a.timeout).into());
                break;
            }
        }
    }
    reader.abort();
    let mut sorted = samples_ms.clone();
    sorted.sort_by(f64::total_cmp);
    emit(&json!({
        "mode": "change",
        "samples_ms": samples_ms,
        "summary_ms": summary_f(&sorted),
        "error": result.as_ref().err().map(|e| e.to_string()),
    }))?;
    result
}

async fn write_limit(pid: u32, value: u64) -> Result<(), BoxError> {
    let out = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::process::Command::new("nsenter")
            .args(["-U", "-t", &pid.to_string(), "sh", "-c"])
            .arg(format!(
                "echo {value} > /proc/sys/user/{}",
                "max_user_namespaces"
            ))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| "nsenter took over 5 s")??;
    if !out.status.success() {
        return Err(format!(
            "nsenter failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// What a boot run waits for in the agent's reports.
fn boot_done(r: &Report, canary: Option<&str>) -> bool {
    match canary {
        None => r.observed_at.is_some(),
        Some(h) => r.canaries.iter().any(|c| {
            c.handler == h && c.result.as_ref().map(|p| p.outcome()) == Some(ProbeOutcome::Passed)
        }),
    }
}

/// One run: exec `serve`, then ask it (a connection every millisecond
/// until one is accepted; GetReport every 10 ms once connected) until
/// `boot_done`; the time from just before the exec, in ms.
async fn boot_once(
    a: &BootArgs,
    endpoint: Option<&str>,
    importer: Option<Box<dyn FnOnce() + Send>>,
) -> Result<f64, BoxError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = tokio::process::Command::new(&a.bin);
    cmd.args(["serve", "--listen", &addr.to_string()]);
    if let (Some(h), Some(ep)) = (a.canary.as_deref(), endpoint) {
        cmd.args([
            "--cri-endpoint",
            ep,
            "--allow-canary",
            h,
            "--require-canary",
            h,
        ]);
    }
    cmd.args(&a.serve_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let import = importer.map(|f| {
        let due = started + a.image_after.unwrap_or_default();
        std::thread::spawn(move || {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            f();
        })
    });
    let result = async {
        let mut client = None;
        loop {
            if started.elapsed() > a.timeout {
                return Err(format!("not done within {:?}", a.timeout).into());
            }
            if client.is_none() {
                let ep = Endpoint::from_shared(format!("http://{addr}"))?
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_millis(100));
                match ep.connect().await {
                    Ok(ch) => client = Some(ReadinessServiceClient::new(ch)),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                }
            }
            if let Some(c) = client.as_mut() {
                match c.get_report(GetReportRequest::default()).await {
                    Ok(r) => {
                        if r.into_inner()
                            .report
                            .is_some_and(|r| boot_done(&r, a.canary.as_deref()))
                        {
                            return Ok::<f64, BoxError>(started.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    Err(_) => client = None,
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    .await;
    let _ = child.kill().await;
    if let Some(t) = import {
        let _ = t.join();
    }
    result
}

async fn boot(a: BootArgs) -> Result<(), BoxError> {
    use support::containerd::{
        import_pause_archive, pause_archive, Containerd, Options, PAUSE_IMAGE,
    };
    let opts = || Options::containerd2_with_runsc().pod_sandboxes(PAUSE_IMAGE);
    let mut samples = Vec::with_capacity(a.runs);
    let mut errors = Vec::new();
    if a.canary.is_none() {
        for _ in 0..a.runs {
            match boot_once(&a, None, None).await {
                Ok(ms) => samples.push(ms),
                Err(e) => errors.push(e.to_string()),
            }
        }
    } else if a.image_after.is_none() {
        // A node that has the image: one runtime for every run.
        let ctd = Containerd::start(opts());
        support::containerd::import_pause(&ctd);
        for _ in 0..a.runs {
            match boot_once(&a, Some(&ctd.endpoint()), None).await {
                Ok(ms) => samples.push(ms),
                Err(e) => errors.push(e.to_string()),
            }
        }
    } else {
        // A fresh node: a runtime without the image each run; the image
        // (built once) arrives --image-after the exec.
        let scratch = tempfile::tempdir()?;
        let archive = pause_archive(scratch.path());
        for _ in 0..a.runs {
            let ctd = std::sync::Arc::new(Containerd::start(opts()));
            let (c, ar) = (ctd.clone(), archive.clone());
            let importer: Box<dyn FnOnce() + Send> =
                Box::new(move || import_pause_archive(&c, &ar));
            match boot_once(&a, Some(&ctd.endpoint()), Some(importer)).await {
                Ok(ms) => samples.push(ms),
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    samples.sort_by(f64::total_cmp);
    emit(&json!({
        "mode": "boot",
        "canary": a.canary,
        "image_after_s": a.image_after.map(|d| d.as_secs_f64()),
        "runs": a.runs,
        "ms": samples,
        "summary": summary_f(&samples),
        "errors": errors,
    }))
}

// ------------------------------------------------------------ Node writer

const NODE: &str = "bench-node";
const COND: &str = "sandbox-readiness.io/SandboxReady";

/// A real kube-apiserver of the bench's own (tests/support/cluster.rs:
/// etcd, kube-apiserver v1.36.3 with Node,RBAC and NodeRestriction) with
/// one Node registered as kubelet does, and kubelet's credential for it
/// laid out as on Talos. Its calls block (processes, a fresh HTTPS
/// connection per read), so they run on the blocking pool: the bench's
/// runtime has one thread.
struct Api {
    cluster: std::sync::Arc<support::cluster::RealCluster>,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Api {
    async fn start() -> Result<Api, BoxError> {
        let dir = tempfile::tempdir()?;
        let kubelet = dir.path().join("kubelet");
        let (cluster, kubeconfig) = tokio::task::spawn_blocking(move || {
            let c = support::cluster::RealCluster::private();
            c.node(NODE);
            let (kc, _) = c.kubelet_credential(NODE, &kubelet);
            (std::sync::Arc::new(c), kc)
        })
        .await?;
        Ok(Api {
            cluster,
            _dir: dir,
            kubeconfig,
        })
    }

    /// A fresh Node: deleted, then registered again as kubelet does
    /// (`Ready`, this boot's bootID, no condition of ours).
    async fn register(&self) -> Result<(), BoxError> {
        let c = std::sync::Arc::clone(&self.cluster);
        tokio::task::spawn_blocking(move || {
            let (code, _, err) = c.kubectl(&["delete", "node", NODE, "--ignore-not-found"]);
            if code != 0 {
                return Err(format!("cannot delete the Node: {err}"));
            }
            c.node(NODE);
            Ok(())
        })
        .await??;
        Ok(())
    }

    /// The condition's status on the Node now (what a GET returns).
    async fn status(&self) -> Result<Option<String>, BoxError> {
        let c = std::sync::Arc::clone(&self.cluster);
        let node = tokio::task::spawn_blocking(move || c.try_get(&format!("/api/v1/nodes/{NODE}")))
            .await??;
        Ok(node.and_then(|n| {
            n["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == COND)
                .and_then(|c| c["status"].as_str().map(String::from))
        }))
    }

    /// Successful status PATCHes so far (the writer's writes), from the
    /// real server's audit log. kube-apiserver logs a write after its
    /// answer went out: a count taken right after a write may miss it by a
    /// few milliseconds.
    fn writes(&self) -> usize {
        self.cluster
            .audit_writes(|e| {
                e["verb"] == "patch"
                    && e["objectRef"]["resource"] == "nodes"
                    && e["objectRef"]["subresource"] == "status"
                    && e["objectRef"]["name"] == NODE
                    && e["responseStatus"]["code"] == 200
            })
            .len()
    }

    /// Polls the Node until its condition is `want` (`None`: any); the
    /// instant it was seen. Each poll is a GET on a fresh connection (a few
    /// milliseconds), which bounds the resolution of what is measured.
    async fn until(&self, want: Option<&str>, within: Duration) -> Result<Instant, BoxError> {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status().await.unwrap_or(None);
            if s.is_some() && (want.is_none() || s.as_deref() == want) {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(
                    format!("the condition is {s:?}, not {want:?}, after {within:?}").into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `serve` on 127.0.0.1:port (pinned with --agent-cpu), inside `unshare -U
/// -r` at `limit` when given, writing the Node when `kubeconfig` is.
fn node_agent(
    a: &NodeArgs,
    port: u16,
    limit: Option<u32>,
    desired: &str,
    kubeconfig: Option<&std::path::Path>,
) -> Result<tokio::process::Child, BoxError> {
    let mut argv: Vec<String> = Vec::new();
    if let Some(cpu) = a.agent_cpu {
        argv.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
    }
    if let Some(l) = limit {
        argv.extend(
            [
                "unshare",
                "-U",
                "-r",
                "sh",
                "-c",
                &format!("echo {l} > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\""),
            ]
            .map(String::from),
        );
    }
    argv.push(a.bin.display().to_string());
    argv.extend(
        [
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--poll-interval",
            &humantime::format_duration(a.poll_interval).to_string(),
            "--sysctl",
            desired,
        ]
        .map(String::from),
    );
    if let Some(k) = kubeconfig {
        argv.push("--kubeconfig".into());
        argv.push(k.display().to_string());
    }
    argv.extend(a.serve_args.iter().cloned());
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}

/// Connects to an agent that is starting (every 10 ms, at most 10 s).
async fn connect_starting(port: u16) -> Result<Channel, BoxError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match connect(addr).await {
            Ok(ch) => return Ok(ch),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// The limit the agents of `flips` and `cost` are asked to have.
const LIMIT_OK: u32 = 11255;

async fn node(a: NodeArgs) -> Result<(), BoxError> {
    let api = Api::start().await?;
    let desired = format!("{LIMIT}={LIMIT_OK}");
    let out = match a.part {
        NodePart::Flips => node_flips(&a, &api, &desired).await?,
        NodePart::Starts => node_starts(&a, &api).await?,
        NodePart::Cost => node_cost(&a, &api, &desired).await?,
    };
    emit(&out)
}

async fn node_flips(a: &NodeArgs, api: &Api, desired: &str) -> Result<serde_json::Value, BoxError> {
    let port = free_port()?;
    let mut child = node_agent(a, port, Some(LIMIT_OK), desired, Some(&api.kubeconfig))?;
    let pid = child.id().ok_or("the agent exited at once")?;
    api.until(Some("True"), a.timeout).await?;
    // The agent's own reports, timestamped as they arrive.
    let mut stream = ReadinessServiceClient::new(connect_starting(port).await?)
        .watch(WatchRequest::default())
        .await?
        .into_inner();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, String)>();
    let reader = tokio::spawn(async move {
        while let Ok(Some(m)) = stream.message().await {
            if let Some(v) = m.report.as_ref().and_then(|r| find_sysctl(r, LIMIT)) {
                if tx.send((Instant::now(), v.value.clone())).is_err() {
                    return;
                }
            }
        }
    });
    let mut write_ms = Vec::with_capacity(a.count);
    let mut report_ms = Vec::with_capacity(a.count);
    let mut result = Ok(());
    let writes0 = api.writes();
    for i in 0..a.count {
        let (value, want) = if i % 2 == 0 {
            (0, "False")
        } else {
            (LIMIT_OK, "True")
        };
        tokio::time::sleep(a.jitter.mul_f64(fastrand::f64())).await;
        while rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        if let Err(e) = write_limit(pid, u64::from(value)).await {
            result = Err(e);
            break;
        }
        let seen = match api.until(Some(want), a.timeout).await {
            Ok(t) => t,
            Err(e) => {
                result = Err(format!("flip {}: {e}", i + 1).into());
                break;
            }
        };
        write_ms.push((seen - t0).as_secs_f64() * 1e3);
        // The report carrying the new value (it may arrive just after the
        // condition was seen: the Watch and the writer are told at once).
        let wanted = value.to_string();
        let reported = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some((t, v)) = rx.recv().await {
                if v == wanted {
                    return Some(t);
                }
            }
            None
        })
        .await;
        if let Ok(Some(t)) = reported {
            report_ms.push(if seen >= t {
                (seen - t).as_secs_f64() * 1e3
            } else {
                -((t - seen).as_secs_f64() * 1e3)
            });
        }
    }
    let writes = api.writes() - writes0;
    reader.abort();
    let _ = child.kill().await;
    let sorted = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s
    };
    let (ws, rs) = (sorted(&write_ms), sorted(&report_ms));
    Ok(json!({
        "mode": "node_flips",
        "poll_interval_ms": a.poll_interval.as_secs_f64() * 1e3,
        "jitter_ms": a.jitter.as_secs_f64() * 1e3,
        "flips": write_ms.len(),
        "writes": writes,
        "write_to_condition_ms": summary_f(&ws),
        "write_p99_ms": pct(&ws, 99.0),
        "report_to_condition_ms": summary_f(&rs),
        "report_p99_ms": pct(&rs, 99.0),
        "samples_ms": write_ms,
        "error": result.as_ref().err().map(|e| e.to_string()),
    }))
}

async fn node_starts(a: &NodeArgs, api: &Api) -> Result<serde_json::Value, BoxError> {
    // The host's own limit: the condition is True at the first write.
    let host = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")?;
    let desired = format!("{LIMIT}={}", host.trim());
    let mut samples = Vec::with_capacity(a.count);
    let mut errors = Vec::new();
    for _ in 0..a.count {
        api.register().await?;
        let port = free_port()?;
        let t0 = Instant::now();
        let mut child = node_agent(a, port, None, &desired, Some(&api.kubeconfig))?;
        // The verdict on the Node (a fresh Node may get `Unknown` first).
        match api.until(Some("True"), a.timeout).await {
            Ok(t) => samples.push((t - t0).as_secs_f64() * 1e3),
            Err(e) => errors.push(e.to_string()),
        }
        let _ = child.kill().await;
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(json!({
        "mode": "node_starts",
        "starts": a.count,
        "ms": samples,
        "summary": summary_f(&sorted),
        "errors": errors,
    }))
}

async fn node_cost(a: &NodeArgs, api: &Api, desired: &str) -> Result<serde_json::Value, BoxError> {
    let (p_off, p_on) = (free_port()?, free_port()?);
    let mut off = node_agent(a, p_off, Some(LIMIT_OK), desired, None)?;
    let mut on = node_agent(a, p_on, Some(LIMIT_OK), desired, Some(&api.kubeconfig))?;
    let pids = [
        off.id().ok_or("the agent exited at once")?,
        on.id().ok_or("the agent exited at once")?,
    ];
    api.until(Some("True"), a.timeout).await?;
    connect_starting(p_off).await?;
    // Both limits flip every second, so the writer writes during the runs
    // and both agents observe the same changes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for pid in pids {
                    let _ = std::process::Command::new("nsenter")
                        .args(["-U", "-t", &pid.to_string(), "sh", "-c"])
                        .arg(format!("echo {v} > /proc/sys/user/max_user_namespaces"))
                        .status();
                }
                v = if v == 0 { LIMIT_OK } else { 0 };
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let run = |port: u16, label: &str| UnaryArgs {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        rpc: Rpc::GetReport,
        callers: a.callers,
        connections: None,
        duration: a.duration,
        warmup: Duration::from_millis(500),
        count: None,
        rate: 0.0,
        label: label.to_string(),
    };
    let mut pairs = Vec::with_capacity(a.count);
    let mut result = Ok(());
    for i in 0..a.count {
        // Alternate which goes first, so drift favours neither.
        let order = if i % 2 == 0 {
            ["off", "on"]
        } else {
            ["on", "off"]
        };
        let mut got = serde_json::Map::new();
        for which in order {
            let port = if which == "on" { p_on } else { p_off };
            let w0 = api.writes();
            match unary_run(run(port, which)).await {
                Ok(mut r) => {
                    if let Some(o) = r.as_object_mut() {
                        o.remove("samples_ms");
                        if which == "on" {
                            o.insert("node_writes".into(), json!(api.writes() - w0));
                        }
                    }
                    got.insert(which.into(), r);
                }
                Err(e) => result = Err(e),
            }
        }
        if result.is_err() {
            break;
        }
        pairs.push(serde_json::Value::Object(got));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flipper.join();
    let _ = off.kill().await;
    let _ = on.kill().await;
    Ok(json!({
        "mode": "node_cost",
        "callers": a.callers,
        "seconds": a.duration.as_secs_f64(),
        "pairs": pairs,
        "error": result.as_ref().err().map(|e| e.to_string()),
    }))
}
