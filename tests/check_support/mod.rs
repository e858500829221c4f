//! Support for the `check` tests: real agent processes on loopback (in a
//! child user namespace whose `user.max_user_namespaces` the test sets, and
//! optionally with a boot id of its own), listeners that accept and never
//! answer, and running `check` itself under a watchdog.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Read,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");

/// A free loopback port on `ip` (bound and released).
pub fn free_port_on(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// `n` distinct free ports on `ip`: all are held until every one is
/// chosen, since the kernel may hand a just-released port out again.
pub fn free_ports_on(ip: &str, n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((ip, 0)).expect("no free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect()
}

pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// `user.max_user_namespaces` in the agent's own user namespace.
    pub limit: u32,
    pub listens: Vec<SocketAddr>,
    /// A file bind-mounted over `/proc/sys/kernel/random/boot_id` in the
    /// agent's own mount namespace: a "replaced machine".
    pub boot_id_file: Option<PathBuf>,
    pub extra: Vec<String>,
}

impl AgentSpec {
    pub fn new(limit: u32, listens: Vec<SocketAddr>) -> Self {
        AgentSpec {
            limit,
            listens,
            boot_id_file: None,
            extra: vec!["--poll-interval".into(), "300ms".into()],
        }
    }

    pub fn on_port(limit: u32, port: u16) -> Self {
        Self::new(limit, vec![SocketAddr::from(([127, 0, 0, 1], port))])
    }
}

/// A running agent, killed on drop.
pub struct Agent {
    pub child: Child,
    pub spec: AgentSpec,
}

impl Agent {
    /// Starts `serve` inside `unshare -U -r [-m]`, and waits until every
    /// listen address accepts.
    pub fn start(spec: AgentSpec) -> Agent {
        let mut script = format!(
            "echo {} > /proc/sys/user/max_user_namespaces && ",
            spec.limit
        );
        let mut unshare = vec!["-U", "-r"];
        if let Some(f) = &spec.boot_id_file {
            unshare.push("-m");
            script.push_str(&format!(
                "mount --bind '{}' /proc/sys/kernel/random/boot_id && ",
                f.display()
            ));
        }
        script.push_str("exec \"$0\" \"$@\"");
        let mut cmd = Command::new("unshare");
        cmd.args(&unshare).args(["sh", "-c", &script, BIN, "serve"]);
        for l in &spec.listens {
            cmd.arg("--listen").arg(l.to_string());
        }
        cmd.args(&spec.extra);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("SR_TEST_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("cannot start agent");
        let mut agent = Agent { child, spec };
        agent.wait_ready(Duration::from_secs(30));
        agent
    }

    fn wait_ready(&mut self, within: Duration) {
        let start = Instant::now();
        for addr in &self.spec.listens {
            loop {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("agent on {addr} exited at start: {status}");
                }
                if TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                assert!(
                    start.elapsed() < within,
                    "agent on {addr} did not listen within {within:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> SocketAddr {
        self.spec.listens[0]
    }

    /// Writes `user.max_user_namespaces` in the agent's user namespace.
    pub fn set_limit(&self, limit: u32) {
        let out = Command::new("nsenter")
            .args(["-U", "-t", &self.pid().to_string(), "sh", "-c"])
            .arg(format!("echo {limit} > /proc/sys/user/max_user_namespaces"))
            .stdin(Stdio::null())
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "nsenter: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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

/// A `check` process running in the background.
pub struct CheckProc {
    child: Child,
    started: Instant,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
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
        let err = child.stderr.take().map(drain);
        CheckProc {
            child,
            started: Instant::now(),
            out,
            err,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
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
                let err = self
                    .err
                    .take()
                    .map(|t| t.join().unwrap())
                    .unwrap_or_default();
                panic!("check still running after {limit:?}; stderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = self.started.elapsed();
        let stdout = self
            .out
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default();
        let stderr = self
            .err
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default();
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
        .map(|a| a.addr().to_string())
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
