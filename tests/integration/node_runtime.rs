//! What the agent does where it really runs on a Talos node: as PID 1 of its
//! own PID namespace, with 1,024 descriptors, under a seccomp filter, without
//! a cgroup mount. Each test starts the real binary; the ones that need root
//! (unshare, runsc) say so when they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Agent, AgentSpec};

use std::{
    fs,
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");
const RUNSC: &str = "/usr/bin/runsc";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fixture "self" root in which only the seccomp mode decides: its
/// sys/fs/cgroup and bin/true lead to this machine's (cgroup2, a real true).
fn self_root(seccomp: u8) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("proc/self")).unwrap();
    fs::create_dir_all(root.join("sys/fs")).unwrap();
    std::os::unix::fs::symlink("/sys/fs/cgroup", root.join("sys/fs/cgroup")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    std::os::unix::fs::symlink("/bin/true", root.join("bin/true")).unwrap();
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let status: String = status
        .lines()
        .map(|l| {
            if l.starts_with("Seccomp:") {
                format!("Seccomp:\t{seccomp}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    fs::write(root.join("proc/self/status"), status).unwrap();
    dir
}

fn probe_sandbox(self_root: &Path) -> (i32, serde_json::Value) {
    let out = Command::new(BIN)
        .args([
            "probe",
            "--sandbox-probe",
            "--require-sandbox-probe",
            "-o",
            "json",
        ])
        .arg("--runsc-path")
        .arg(RUNSC)
        .arg("--self-root-for-tests")
        .arg(self_root)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "probe printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

/// A seccomp filter on the agent (as containerd's default profile puts on
/// every Talos extension service) makes the sandbox probe SKIPPED with that
/// reason, not failed; a required probe that was skipped still blocks. The
/// same fixture without the filter runs runsc for real and passes, so the
/// skip is decided by the filter and nothing else.
#[test]
fn sandbox_probe_is_skipped_not_failed_under_a_seccomp_filter() {
    assert!(is_root(), "needs root (runsc do true as root)");
    assert!(
        Path::new(RUNSC).exists(),
        "needs {RUNSC} (apt-get install runsc)"
    );

    let filtered = self_root(2);
    let (code, json) = probe_sandbox(filtered.path());
    let sandbox = &json["report"]["gvisor"]["sandbox"];
    assert_eq!(sandbox["outcome"], "PROBE_OUTCOME_SKIPPED", "{sandbox}");
    let msg = sandbox["message"].as_str().unwrap();
    assert!(
        msg.contains("seccomp filter") && msg.contains("pivot_root"),
        "{msg}"
    );
    assert!(!msg.contains("cgroup") && !msg.contains("`true`"), "{msg}");
    let codes: Vec<&str> = json["verdict"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(codes.contains(&"SANDBOX_PROBE_NOT_RUN"), "{codes:?}");
    assert!(!codes.contains(&"SANDBOX_PROBE_FAILED"), "{codes:?}");
    assert_eq!(code, 1, "a required, skipped sandbox probe still blocks");

    let open = self_root(0);
    let (_, json) = probe_sandbox(open.path());
    let sandbox = &json["report"]["gvisor"]["sandbox"];
    assert_eq!(sandbox["outcome"], "PROBE_OUTCOME_PASSED", "{sandbox}");
}

/// `pid`'s parent and state, from /proc/<pid>/stat (`None`: gone).
fn stat(pid: u32) -> Option<(u32, char, String)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm is in parentheses and may hold spaces: split after the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((ppid, state, comm))
}

/// Every live process whose parent is `ppid`, with its state and comm.
fn children(ppid: u32) -> Vec<(u32, char, String)> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (pp, state, comm) = stat(pid)?;
            (pp == ppid).then_some((pid, state, comm))
        })
        .collect()
}

/// Polls `f` every 20 ms until it gives `Some`, for at most `limit`.
fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Started as PID 1 of a new PID namespace (as on a Talos node), the binary
/// forks: PID 1 stays a reaper and the agent is its child. An orphan
/// reparented to PID 1 is reaped once it exits, and SIGTERM to PID 1 ends
/// the agent, with exit status 0.
#[test]
fn as_pid_1_it_reaps_orphans_and_forwards_sigterm() {
    assert!(is_root(), "needs root (unshare --pid, nsenter)");
    let mut agent = Agent::spawn(AgentSpec::new(None, &[]).wrapped_in(&[
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
    ]));
    let unshare = agent.child.id();
    let pid1 = poll(Duration::from_secs(5), || {
        children(unshare).into_iter().map(|(p, _, _)| p).next()
    })
    .expect("unshare started no PID 1");
    let status = fs::read_to_string(format!("/proc/{pid1}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(
        nspid.ends_with("\t1"),
        "not PID 1 of its namespace: {nspid}"
    );
    // The agent is PID 1's child, not PID 1 itself.
    let kids = children(pid1);
    assert!(
        kids.iter()
            .any(|(_, _, comm)| comm.starts_with("sandbox-readine")),
        "PID 1 has no agent child: {kids:?}"
    );
    // The agent answers (it is the child that serves).
    TcpStream::connect_timeout(&agent.addr, Duration::from_secs(2)).expect("connect");

    // An orphan in the namespace: sh exits at once, its sleep is reparented
    // to PID 1 and exits a second later.
    let st = Command::new("nsenter")
        .args([
            "-t",
            &pid1.to_string(),
            "-p",
            "--",
            "sh",
            "-c",
            "sleep 1 & exit 0",
        ])
        .status()
        .expect("nsenter");
    assert!(st.success(), "nsenter: {st}");
    let orphan = poll(Duration::from_secs(5), || {
        children(pid1)
            .into_iter()
            .find(|(_, _, comm)| comm == "sleep")
            .map(|(p, _, _)| p)
    })
    .expect("the orphaned sleep was not reparented to PID 1");
    // Reaped: gone from /proc, not left as a zombie of PID 1.
    let reaped = poll(Duration::from_secs(10), || {
        stat(orphan).is_none().then_some(())
    });
    let zombies: Vec<_> = children(pid1)
        .into_iter()
        .filter(|(_, state, _)| *state == 'Z')
        .collect();
    assert!(
        reaped.is_some() && zombies.is_empty(),
        "orphan {orphan} not reaped: {:?}; zombies of PID 1: {zombies:?}",
        stat(orphan)
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid1).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = agent.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "SIGTERM to PID 1 did not end the agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status}");
}

/// `check -n ADDR -o json` with its default timeouts: the node's entry.
fn check(addr: SocketAddr) -> serde_json::Value {
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["check", "-n", &addr.to_string(), "-o", "json"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let node = json["nodes"][0].clone();
    assert!(
        node["error"].is_null() && out.status.success(),
        "check failed after {:?} ({}): {node}",
        started.elapsed(),
        out.status
    );
    node
}

/// Raises this test process's own soft open-file limit to its hard one
/// (the flood below needs more than 1,024).
fn raise_own_nofile() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    hard
}

/// `n` TCP connections from `from` to `to` (each bound to `from` before
/// connecting), made concurrently; the ones that connected.
fn connect_many(from: std::net::Ipv4Addr, to: SocketAddr, n: usize) -> Vec<std::net::TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            tasks.spawn(async move {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(SocketAddr::from((from, 0)))?;
                let stream =
                    tokio::time::timeout(Duration::from_secs(10), socket.connect(to)).await??;
                stream.into_std()
            });
        }
        let mut held = Vec::new();
        while let Some(r) = tasks.join_next().await {
            if let Ok(Ok(s)) = r {
                held.push(s);
            }
        }
        held
    })
}

/// With the 1,024 descriptors of a Talos extension service before 1.13,
/// the agent sizes its limits to them (and logs both), and 1,200 idle
/// connections from one other address change nothing it reports (same
/// fingerprint and generation while observations go on) and do not shut
/// out a good client.
#[test]
fn a_connection_flood_at_nofile_1024_changes_no_fact_and_shuts_out_no_one() {
    assert!(
        raise_own_nofile() > 1400,
        "the test needs more than 1,400 descriptors"
    );
    let agent = Agent::spawn(
        AgentSpec::new(
            None,
            &["--poll-interval", "200ms", "--probe-interval", "1s"],
        )
        .wrapped_in(&["prlimit", "--nofile=1024:1024", "--"]),
    );
    let limits = agent
        .log()
        .wait_line("connection limits", Duration::from_secs(5));
    let field = |key: &str| -> u64 {
        common::log_field(&limits, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key}= in {limits:?}"))
    };
    assert_eq!(field("open_files"), 1024, "{limits}");
    assert_eq!(field("max_connections_configured"), 16384, "{limits}");
    let max = field("max_connections");
    let handshakes = field("max_handshakes");
    let reserve = field("reserved_for_observation");
    assert!(max + handshakes + reserve <= 1024, "{limits}");
    assert!(field("max_connections_per_address") * 4 < max, "{limits}");

    let before = check(agent.addr)["report"].clone();
    let observations = |r: &serde_json::Value| -> u64 {
        r["agent"]["observations"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };

    // The agent keeps its per-address share of them and resets the rest
    // (a client whose connect had not completed sees the reset as failure).
    let per_address = field("max_connections_per_address");
    let held = connect_many(std::net::Ipv4Addr::new(127, 0, 0, 2), agent.addr, 1200);
    assert!(
        held.len() as u64 >= per_address,
        "only {} of 1,200 flood connections were accepted",
        held.len()
    );

    // While they are held, observations go on (at least two full ones) and
    // a good client is answered each time within check's default timeout.
    let start = observations(&before);
    let during = poll(Duration::from_secs(20), || {
        let r = check(agent.addr)["report"].clone();
        (observations(&r) >= start + 2).then_some(r)
    })
    .expect("no new observation during the flood");
    assert_eq!(during["fingerprint"], before["fingerprint"], "{during}");
    assert_eq!(during["generation"], before["generation"], "{during}");
    let incomplete = &during["agent"]["incomplete"];
    assert!(
        incomplete.is_null() || incomplete.as_array().is_some_and(Vec::is_empty),
        "the agent ran out of its own descriptors: {incomplete}"
    );
    drop(held);
}
