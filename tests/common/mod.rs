//! The one test harness: real agent processes on loopback (optionally inside a
//! child user namespace, `unshare -U -r`, whose `user.max_user_namespaces`
//! the test sets and changes, and optionally with a boot id of their own),
//! `check` run under a watchdog, listeners that accept and never answer, and
//! the small helpers every tier shares: counted skips and waiting on a
//! condition instead of a fixed sleep.
//!
//! Ports are race-free: every agent listens on port 0 (unless a test names an
//! address) and the harness reads the bound address from the agent's log line
//! `listening addr=<address>`, one per listener.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod ca;

use std::{
    fmt::Display,
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// The agent binary: the test build's. Outside a test build — the test
/// providers as a program (`cargo build --example test-providers`,
/// tests/support/providers_bin.rs), which Cargo gives no `CARGO_BIN_EXE_*` —
/// the `sandbox-readiness` on PATH: scripts/playground puts the build's
/// first.
#[cfg(test)]
pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");
#[cfg(not(test))]
pub const BIN: &str = "sandbox-readiness";

// ------------------------------------------------------------------ skips

/// Records that the running test did not exercise what it is about, and why:
/// `SKIPPED <test>: <reason>` on stderr and one line in the file named by
/// `SR_SKIP_LOG`, which scripts/test.sh counts (libtest counts the test as
/// passed; the script moves it to "skipped"). The caller returns right after.
pub fn skip(reason: impl Display) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test thread>")
        .to_string();
    eprintln!("SKIPPED {test}: {reason}");
    if let Some(path) = std::env::var_os("SR_SKIP_LOG").filter(|p| !p.is_empty()) {
        // One short write with O_APPEND: lines from parallel tests and test
        // binaries never interleave.
        let line = format!("{test}: {reason}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "cannot record the skip in {}: {e}",
                Path::new(&path).display()
            );
        }
    }
}

// ---------------------------------------------------------------- waiting

/// Polls `cond` until it holds; fails the test with `what` after `within`.
/// For conditions that only time can make true, prefer the signal that
/// reports them (a log line, a file, a response).
pub fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`wait_until`] for async tests: yields to the runtime between polls.
pub async fn wait_until_async<F, Fut>(within: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------------------ child output

/// Lines a child writes to one of its pipes, collected by a thread as they
/// come, so a test can wait for a line while the child runs.
#[derive(Clone, Default)]
pub struct Lines {
    inner: Arc<(Mutex<LinesState>, Condvar)>,
}

#[derive(Default)]
struct LinesState {
    lines: Vec<String>,
    closed: bool,
}

impl Lines {
    /// Starts collecting from `pipe`; with `echo`, also copies each line to
    /// this process's stderr (shown by libtest for failed tests, or always
    /// with `--nocapture`).
    fn collect(pipe: impl Read + Send + 'static, echo: Option<&'static str>) -> Lines {
        let lines = Lines::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(prefix) = echo {
                    eprintln!("{prefix}{line}");
                }
                let (state, cv) = &*sink.inner;
                state.lock().unwrap().lines.push(line);
                cv.notify_all();
            }
            let (state, cv) = &*sink.inner;
            state.lock().unwrap().closed = true;
            cv.notify_all();
        });
        lines
    }

    /// Everything so far, one line each.
    pub fn text(&self) -> String {
        let state = self.inner.0.lock().unwrap();
        let mut s = state.lines.join("\n");
        if !s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Waits until `found` picks something out of the lines so far (all of
    /// them, each time), or the pipe closes, or `within` passes.
    pub fn wait_for<T>(
        &self,
        within: Duration,
        mut found: impl FnMut(&[String]) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        let (state, cv) = &*self.inner;
        let mut s = state.lock().unwrap();
        loop {
            if let Some(t) = found(&s.lines) {
                return Ok(t);
            }
            if s.closed {
                return Err(format!("the output ended:\n{}", s.lines.join("\n")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("not within {within:?}:\n{}", s.lines.join("\n")));
            }
            s = cv.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Waits for a line containing `needle`; fails the test otherwise.
    pub fn wait_line(&self, needle: &str, within: Duration) -> String {
        self.wait_for(within, |lines| {
            lines.iter().find(|l| l.contains(needle)).cloned()
        })
        .unwrap_or_else(|e| panic!("no line with {needle:?}: {e}"))
    }

    /// Waits until every needle is in some line.
    pub fn wait_lines(&self, needles: &[&str], within: Duration) {
        self.wait_for(within, |lines| {
            needles
                .iter()
                .all(|n| lines.iter().any(|l| l.contains(n)))
                .then_some(())
        })
        .unwrap_or_else(|e| panic!("not all of {needles:?}: {e}"));
    }

    /// Waits until the pipe closes (the child exited), then returns all.
    fn wait_closed(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let (state, cv) = &*self.inner;
        let mut s = state.lock().unwrap();
        while !s.closed && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            s = cv.wait_timeout(s, left).unwrap().0;
        }
        let mut text = s.lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        text
    }
}

/// The address in an agent's `listening addr=<address>` log line (text log
/// format, which the harness asks for); not the metrics port's
/// (`metrics listening addr=…`, see [`metrics_addr`]).
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening") || line.contains("metrics listening") {
        return None;
    }
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .and_then(|a| a.trim_matches('"').parse().ok())
}

/// `tls init DIR extra...` (e.g. `--san 127.0.0.1`): what it printed;
/// fails the test unless it succeeds.
pub fn tls_init(dir: &Path, extra: &[&str]) -> String {
    let out = run({
        let mut c = Command::new(BIN);
        c.args(["tls", "init"]).arg(dir).args(extra);
        c
    });
    assert!(
        out.status.success(),
        "tls init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `key=` in a text-format log line, quotes removed.
pub fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim_matches('"'))
}

/// The metrics port's address in an agent's `metrics listening addr=…` line.
pub fn metrics_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("metrics listening") {
        return None;
    }
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .and_then(|a| a.trim_matches('"').parse().ok())
}

// ---------------------------------------------------------------- agents

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// `Some`: inside `unshare -U -r`, with `user.max_user_namespaces`
    /// written first. `None`: directly, from `SR_AGENT_BIN` when set (the
    /// shipped static binary) or else the test build.
    pub limit: Option<u32>,
    /// Port 0 unless a test needs a particular address.
    pub listens: Vec<SocketAddr>,
    /// A file bind-mounted over `/proc/sys/kernel/random/boot_id` in the
    /// agent's own mount namespace: a "replaced machine" (needs `limit`).
    pub boot_id_file: Option<PathBuf>,
    /// A command the agent runs under, as on a node (`unshare --pid …`,
    /// `prlimit --nofile=…`); only without `limit`.
    pub wrapper: Vec<String>,
    pub extra: Vec<String>,
    /// Environment the agent gets on top of the test's (an
    /// ExtensionServiceConfig's `environment`, as machined sets it).
    pub env: Vec<(String, String)>,
}

impl AgentSpec {
    /// One listener on 127.0.0.1, a port the kernel picks.
    pub fn new(limit: Option<u32>, extra: &[&str]) -> Self {
        AgentSpec {
            limit,
            listens: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            boot_id_file: None,
            wrapper: Vec::new(),
            extra: extra.iter().map(ToString::to_string).collect(),
            env: Vec::new(),
        }
    }

    /// Runs the agent as the last argument of `wrapper…`.
    pub fn wrapped_in(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(ToString::to_string).collect();
        self
    }

    /// An agent for the `check` tests: its own user namespace at `limit`,
    /// polling its sysctls every 300 ms so a change shows at once.
    pub fn pool_member(limit: u32) -> Self {
        Self::new(Some(limit), &["--poll-interval", "300ms"])
    }

    pub fn listening_on(mut self, listens: Vec<SocketAddr>) -> Self {
        self.listens = listens;
        self
    }
}

/// A running agent, killed on drop.
pub struct Agent {
    pub child: Child,
    pub spec: AgentSpec,
    /// The bound addresses, in `spec.listens` order.
    pub addrs: Vec<SocketAddr>,
    /// The first of `addrs`.
    pub addr: SocketAddr,
    pub port: u16,
    log: Lines,
}

impl Agent {
    /// `serve` with extra flags on 127.0.0.1 (port 0): in a child user
    /// namespace at `limit`, or directly when `limit` is None.
    pub fn start(limit: Option<u32>, extra: &[&str]) -> Agent {
        Agent::spawn(AgentSpec::new(limit, extra))
    }

    /// Starts `spec` and waits until the agent logged every bound address
    /// (its sockets listen from then on).
    pub fn spawn(spec: AgentSpec) -> Agent {
        let mut serve: Vec<String> = vec!["--log-format".into(), "text".into(), "serve".into()];
        for l in &spec.listens {
            serve.push("--listen".into());
            serve.push(l.to_string());
        }
        serve.extend(spec.extra.iter().cloned());

        let mut cmd = match spec.limit {
            Some(limit) => {
                let mut script = format!("echo {limit} > /proc/sys/user/max_user_namespaces && ");
                let mut unshare = vec!["-U", "-r"];
                if let Some(f) = &spec.boot_id_file {
                    unshare.push("-m");
                    script.push_str(&format!(
                        "mount --bind '{}' /proc/sys/kernel/random/boot_id && ",
                        f.display()
                    ));
                }
                script.push_str("exec \"$0\" \"$@\"");
                let mut c = Command::new("unshare");
                c.args(&unshare).args(["sh", "-c", &script, BIN]);
                c
            }
            None => {
                assert!(spec.boot_id_file.is_none(), "a boot id file needs a limit");
                // SR_AGENT_BIN measures the shipped static musl binary
                // instead of the test build (tests/hostile.rs, tests/faults.rs).
                let bin = std::env::var_os("SR_AGENT_BIN")
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| BIN.into());
                match spec.wrapper.split_first() {
                    Some((first, rest)) => {
                        let mut c = Command::new(first);
                        c.args(rest).arg(bin);
                        c
                    }
                    None => Command::new(bin),
                }
            }
        };
        assert!(
            spec.limit.is_none() || spec.wrapper.is_empty(),
            "a wrapper runs the agent directly, without a limit"
        );
        let mut child = cmd
            .args(&serve)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start agent");
        let echo = std::env::var_os("SR_TEST_LOGS").map(|_| "agent: ");
        let log = Lines::collect(child.stderr.take().expect("piped"), echo);
        let want = spec.listens.len();
        let bound = log.wait_for(Duration::from_secs(30), |lines| {
            let found: Vec<SocketAddr> = lines.iter().filter_map(|l| listening_addr(l)).collect();
            if found.len() >= want {
                return Some(Ok(found));
            }
            // The agent logs "starting" once every listener is bound: an
            // agent that names none of them cannot be waited for.
            lines
                .iter()
                .find(|l| l.contains(" starting "))
                .map(|l| Err(format!("it logged {l:?} without them")))
        });
        let addrs = match bound.and_then(|b| b) {
            Ok(a) => a,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "agent {:?} did not log `listening addr=…` for each of its {want} listeners ({status:?}): {e}",
                    spec.listens
                );
            }
        };
        Agent {
            child,
            addr: addrs[0],
            port: addrs[0].port(),
            addrs,
            spec,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The agent's log so far.
    pub fn log(&self) -> &Lines {
        &self.log
    }

    /// A spec that starts this agent again on the same addresses (a
    /// restarted machine keeps its address).
    pub fn same_addresses(&self) -> AgentSpec {
        let mut spec = self.spec.clone();
        spec.listens = self.addrs.clone();
        spec
    }

    /// The metrics port (`--metrics-listen`), from the agent's log.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.log
            .wait_for(Duration::from_secs(10), |lines| {
                lines.iter().find_map(|l| metrics_addr(l))
            })
            .unwrap_or_else(|e| panic!("no `metrics listening addr=…` line: {e}"))
    }

    /// Writes `user.max_user_namespaces` in the agent's user namespace.
    pub fn set_limit(&self, limit: u32) {
        set_limit(self.pid(), limit);
    }

    /// Stops the agent (SIGKILL: a crash, not a clean shutdown).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes `user.max_user_namespaces` in the user namespace of `pid`.
pub fn set_limit(pid: u32, limit: u32) {
    let out = run({
        let mut c = Command::new("nsenter");
        c.args(["-U", "-t", &pid.to_string(), "sh", "-c"])
            .arg(format!("echo {limit} > /proc/sys/user/max_user_namespaces"));
        c
    });
    assert!(
        out.status.success(),
        "nsenter failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the agent binary inside `unshare -U -r` with the given
/// `user.max_user_namespaces` written first (None: leave it).
pub fn in_userns(limit: Option<u32>, args: &[&str]) -> Command {
    let mut script = String::new();
    if let Some(l) = limit {
        script.push_str(&format!(
            "echo {l} > /proc/sys/user/max_user_namespaces && "
        ));
    }
    script.push_str("exec \"$0\" \"$@\"");
    let mut cmd = Command::new("unshare");
    cmd.args(["-U", "-r", "sh", "-c", &script, BIN]).args(args);
    cmd
}

/// Output of a finished command, with a readable panic on spawn failure.
pub fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .expect("cannot run command")
}

/// A loopback port that refuses connections: a TCP socket bound to it that
/// never listens, kept open for the rest of the test process. A port bound
/// and released at once could be taken by a neighbouring test's listener
/// (tests run side by side), and the address would then answer.
pub fn refused_port() -> u16 {
    use nix::sys::socket::{
        bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::new(127, 0, 0, 1, 0),
    )
    .expect("bind 127.0.0.1:0");
    let port = getsockname::<SockaddrIn>(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .expect("getsockname")
        .port();
    // Held until the process exits: the port stays bound and refusing.
    std::mem::forget(fd);
    port
}

/// Finds an executable on PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// Open file descriptors of a process.
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count()
}

/// The `p` quantile (nearest rank) of some durations.
pub fn pct(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut s = v.to_vec();
    s.sort();
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// `handler`'s canary and the canary count in the agent's latest report
/// (GetReport without refresh: what any caller sees now).
pub async fn served_canary(
    url: &str,
    handler: &str,
) -> (Option<sandbox_readiness::proto::v1::Canary>, u64) {
    use sandbox_readiness::proto::v1::{
        readiness_service_client::ReadinessServiceClient, GetReportRequest,
    };
    let mut client = ReadinessServiceClient::new(connect(url).await);
    let report = client
        .get_report(GetReportRequest::default())
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    let runs = report.agent.as_ref().map_or(0, |a| a.canaries);
    let c = report.canaries.into_iter().find(|c| c.handler == handler);
    (c, runs)
}

/// A gRPC channel to `url`.
pub async fn connect(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

// ------------------------------------------------------------ hung peers

/// A listener that accepts every connection and never sends a byte: the
/// "hung agent" (a wedged process, or a port that is not HTTP/2).
pub struct HungListener {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HungListener {
    pub fn start(ip: &str) -> HungListener {
        let l = TcpListener::bind((ip, 0)).unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HungListener {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HungListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ check

/// What a finished `check` printed.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// A `check` process running in the background; its stderr (one line per
/// change while it waits) can be waited on as it comes.
pub struct CheckProc {
    child: Child,
    started: Instant,
    out: Option<JoinHandle<String>>,
    err: Lines,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

impl CheckProc {
    pub fn spawn(args: &[String]) -> CheckProc {
        let mut child = Command::new(BIN)
            .arg("check")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start check");
        let out = child.stdout.take().map(drain);
        let err: ChildStderr = child.stderr.take().expect("piped");
        CheckProc {
            child,
            started: Instant::now(),
            out,
            err: Lines::collect(err, None),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its stderr so far, to wait on.
    pub fn stderr(&self) -> &Lines {
        &self.err
    }

    /// Waits for the exit; kills it and fails the test after `limit`.
    pub fn finish(mut self, limit: Duration) -> Run {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "check still running after {limit:?}; stderr:\n{}",
                    self.err.text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = self.started.elapsed();
        let stdout = self
            .out
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default();
        let stderr = self.err.wait_closed(Duration::from_secs(5));
        Run {
            status,
            stdout,
            stderr,
            took,
        }
    }
}

impl Drop for CheckProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `check` to completion (at most `limit`).
pub fn check(args: &[String], limit: Duration) -> Run {
    CheckProc::spawn(args).finish(limit)
}

/// `a,b,c` of the agents' first addresses.
pub fn node_list(agents: &[&Agent]) -> String {
    agents
        .iter()
        .map(|a| a.addr.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Converts `&str`s to the owned args `check` takes.
pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(ToString::to_string).collect()
}

/// Writes `text` to `path` atomically (rename), so a concurrent reader
/// never sees half a file.
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A Node as kubelet registers it (what the Node writer's tests start
/// from): `Ready`, the hostname label and `nodeInfo.bootID` = `boot_id`,
/// no condition of the agent's.
pub fn kubelet_node(name: &str, boot_id: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                "lastTransitionTime": "2026-12-01T00:00:00Z"
            }],
            "nodeInfo": {"kubeletVersion": "v1.32.4", "bootID": boot_id}
        }
    })
}

/// GET over plain HTTP/1.1 (a metrics port): the body.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(raw)
}
