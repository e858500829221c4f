//! Test support: real agent processes on loopback, optionally inside a child
//! user namespace (`unshare -U -r`) whose `user.max_user_namespaces` the test
//! sets and changes — the real kernel, no fakes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");

/// A free loopback port (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
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

/// A running agent, killed on drop.
pub struct Agent {
    pub child: Child,
    pub port: u16,
    pub addr: SocketAddr,
}

impl Agent {
    /// `serve` on a free loopback port, in a child user namespace at `limit`
    /// (or directly, when `limit` is None; then from `SR_AGENT_BIN` when
    /// set), with extra flags.
    pub fn start(limit: Option<u32>, extra: &[&str]) -> Agent {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--listen", &listen];
        args.extend_from_slice(extra);
        let mut cmd = match limit {
            Some(l) => in_userns(Some(l), &args),
            // SR_AGENT_BIN measures the shipped static musl binary instead
            // of the test build (tests/hostile.rs, tests/faults.rs).
            None => {
                let bin = std::env::var_os("SR_AGENT_BIN")
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| BIN.into());
                let mut c = Command::new(bin);
                c.args(&args);
                c
            }
        };
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
        let addr: SocketAddr = listen.parse().expect("addr");
        let agent = Agent { child, port, addr };
        agent.wait_ready(Duration::from_secs(20));
        agent
    }

    fn wait_ready(&self, within: Duration) {
        let start = Instant::now();
        while start.elapsed() < within {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("agent on {} did not start within {within:?}", self.addr);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes `user.max_user_namespaces` in the agent's user namespace.
    pub fn set_limit(&self, limit: u32) {
        set_limit(self.child.id(), limit);
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

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `path` exists as an executable.
pub fn have(path: &str) -> bool {
    Path::new(path).exists()
}

/// Finds an executable on PATH.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
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

/// A gRPC channel to `url`.
pub async fn connect(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect")
}
