//! A misbehaving node under a real `serve` process: a CRI socket that
//! accepts and never answers, one that is absent, one that refuses; a `runsc`
//! that hangs, one that crashes; `/proc/sys` files that cannot be read (a
//! directory, a FIFO) and a host root with nothing in it. The agent must keep
//! answering from its cache at the usual latency, finish every refresh
//! within its timeouts with the failures as findings, and leak no process,
//! thread or file descriptor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::{ErrorKind, Read},
    os::unix::{fs::PermissionsExt, net::UnixListener, net::UnixStream},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{connect, fds, pct, Agent};
use sandbox_readiness::proto::v1::{
    readiness_service_client::ReadinessServiceClient, CheckRequest, CheckResponse, DesiredState,
    GetReportRequest, GvisorReadiness, ProbeOutcome, Report, SysctlState,
};
use tonic::transport::Channel;

/// The latency tests share two cores with everything else in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ------------------------------------------------------------- fixtures

/// Writes an executable shell script.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// A CRI socket that accepts every connection and never answers.
struct HungCri {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Vec<UnixStream>>>,
}

impl HungCri {
    fn start(path: &Path) -> HungCri {
        let listener = UnixListener::bind(path).expect("bind CRI socket");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (s, a) = (stop.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        held.push(conn);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
            held
        });
        HungCri {
            stop,
            accepted,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops accepting; returns (accepted, still open on the agent's side).
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let held = self.thread.take().expect("thread").join().expect("join");
        let mut buf = [0u8; 4096];
        let open = held
            .iter()
            .filter(|c| {
                c.set_nonblocking(true).expect("nonblocking");
                let mut r: &UnixStream = c;
                loop {
                    match r.read(&mut buf) {
                        Ok(0) => return false,
                        Ok(_) => continue,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(_) => return false,
                    }
                }
            })
            .count();
        (held.len(), open)
    }
}

impl Drop for HungCri {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ------------------------------------------------------------------ /proc

fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("Threads")
}

/// Processes (other than this one and the agent, whose own command line
/// names the script) whose command line contains `needle`.
fn processes_with(needle: &str, agent: u32) -> Vec<String> {
    let me = std::process::id().to_string();
    let agent = agent.to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.chars().all(|c| c.is_ascii_digit()) && n != me && n != agent
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(needle)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

// ---------------------------------------------------------------- clients

/// The report, or a failure if the agent does not answer within `within`.
async fn report_within(url: &str, within: Duration) -> Report {
    tokio::time::timeout(within, async {
        ReadinessServiceClient::new(connect(url).await)
            .get_report(GetReportRequest::default())
            .await
            .expect("GetReport")
            .into_inner()
            .report
            .expect("report")
    })
    .await
    .unwrap_or_else(|_| panic!("no report within {within:?}"))
}

/// Everything gVisor-related the agent can be asked for.
fn gvisor_desired() -> DesiredState {
    DesiredState {
        require_runtime_handlers: vec!["runsc".into()],
        require_gvisor: true,
        require_sandbox_probe: true,
        ..DesiredState::default()
    }
}

async fn check_refresh(c: &mut ReadinessServiceClient<Channel>) -> (CheckResponse, Duration) {
    let t = Instant::now();
    let r = c
        .check(CheckRequest {
            desired: Some(gvisor_desired()),
            refresh: true,
            ..CheckRequest::default()
        })
        .await
        .expect("Check")
        .into_inner();
    (r, t.elapsed())
}

fn codes(r: &CheckResponse) -> Vec<String> {
    r.verdict
        .as_ref()
        .expect("verdict")
        .findings
        .iter()
        .map(|f| f.code.clone())
        .collect()
}

fn finding<'a>(r: &'a CheckResponse, code: &str) -> &'a str {
    r.verdict
        .as_ref()
        .expect("verdict")
        .findings
        .iter()
        .find(|f| f.code == code)
        .map(|f| f.message.as_str())
        .unwrap_or_else(|| panic!("no {code} finding in {:?}", codes(r)))
}

fn runsc_binary(r: &Report) -> &sandbox_readiness::proto::v1::Binary {
    r.gvisor
        .as_ref()
        .expect("gvisor")
        .binaries
        .iter()
        .find(|b| b.name == "runsc")
        .expect("runsc entry")
}

/// `callers` clients, each on its own connection, call GetReport all at
/// once, `rounds` times; returns every call's latency.
async fn burst(url: &str, callers: usize, rounds: usize) -> Vec<Duration> {
    let mut clients = Vec::new();
    for _ in 0..callers {
        clients.push(ReadinessServiceClient::new(connect(url).await));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(callers));
    let mut tasks = tokio::task::JoinSet::new();
    for mut c in clients {
        let barrier = barrier.clone();
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                barrier.wait().await;
                let t = Instant::now();
                let r = tokio::time::timeout(
                    Duration::from_secs(5),
                    c.get_report(GetReportRequest::default()),
                )
                .await
                .expect("GetReport not answered within 5 s")
                .expect("GetReport");
                assert!(r.into_inner().report.is_some());
                lat.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            lat
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.expect("caller"));
    }
    assert_eq!(all.len(), callers * rounds, "not every caller was answered");
    all
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_cri_and_hanging_runsc_do_not_slow_cached_reads_or_leak() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The fraction makes the hanging `sleep` findable among all processes.
    let nonce = format!("1000.{}", std::process::id());
    let runsc = script(dir.path(), "runsc", &format!("sleep {nonce}"));
    let sock = dir.path().join("cri.sock");
    let cri = HungCri::start(&sock);
    let endpoint = format!("unix://{}", sock.display());
    let empty = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        None,
        &[
            "--runsc-path",
            runsc.to_str().expect("utf-8"),
            "--cri-endpoint",
            &endpoint,
            "--cri-conf-dir",
            empty.path().to_str().expect("utf-8"),
            "--exec-timeout",
            "300ms",
            "--cri-timeout",
            "300ms",
            // Longer than the bound on a cached read below: a refresh that
            // blocked the agent's thread on the hung sandbox would stall
            // every caller past it.
            "--sandbox-timeout",
            "2s",
            "--min-refresh-interval",
            "100ms",
            // Every refresh reruns the hanging sandbox probe too.
            "--min-sandbox-interval",
            "0s",
            "--probe-interval",
            "1h",
            "--poll-interval",
            "1h",
        ],
    );
    let pid = agent.child.id();
    let url = agent.url();

    // The first observation already met both faults and finished.
    let first = report_within(&url, Duration::from_secs(10)).await;
    let b = runsc_binary(&first);
    assert!(
        b.error.contains("did not finish within 300ms"),
        "runsc --version: {b:?}"
    );
    let c = first
        .gvisor
        .as_ref()
        .and_then(|g| g.cri.as_ref())
        .expect("cri");
    assert!(
        !c.reachable && c.error.contains("did not answer within 300ms"),
        "{c:?}"
    );
    assert!(
        cri.accepted() >= 1,
        "the agent never dialled the hung CRI socket"
    );

    // Cached reads with nothing in flight.
    let quiet = burst(&url, 100, 20).await;

    // The same, while refreshes that meet the hung runsc (both --version and
    // the sandbox) and the hung CRI run back to back.
    let stop = Arc::new(AtomicBool::new(false));
    let refresher = {
        let stop = stop.clone();
        let mut c = ReadinessServiceClient::new(connect(&url).await);
        tokio::spawn(async move {
            let mut done = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                done.push(check_refresh(&mut c).await);
            }
            done
        })
    };
    let watcher = {
        // Proof the faults were live during the burst: hung runsc processes seen.
        let stop = stop.clone();
        let nonce = nonce.clone();
        tokio::task::spawn_blocking(move || {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                most = most.max(processes_with(&nonce, pid).len());
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    // The burst starts once a refresh is in flight and has met the faults.
    common::wait_until_async(
        Duration::from_secs(5),
        "a hanging runsc of a refresh",
        || {
            let live = !processes_with(&nonce, pid).is_empty();
            async move { live }
        },
    )
    .await;
    // A refresh spends most of its time in the hung sandbox (2 s), so the
    // burst repeats until one also met the hung CRI (bounded).
    let cri_before = cri.accepted();
    let mut faulted = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while faulted.is_empty() || (cri.accepted() == cri_before && std::time::Instant::now() < until)
    {
        faulted.extend(burst(&url, 100, 20).await);
    }
    let cri_during = cri.accepted() - cri_before;
    stop.store(true, Ordering::Relaxed);
    let refreshes = refresher.await.expect("refresher");
    let hung_seen = watcher.await.expect("watcher");

    let line = |name: &str, v: &[Duration]| {
        format!(
            "{name}: {} calls, p50 {:?}, p99 {:?}, max {:?}",
            v.len(),
            pct(v, 0.50),
            pct(v, 0.99),
            pct(v, 1.0)
        )
    };
    eprintln!(
        "{}",
        line("GetReport, 100 callers, no refresh in flight", &quiet)
    );
    eprintln!(
        "{}",
        line(
            "GetReport, 100 callers, hung CRI + hanging runsc refreshes in flight",
            &faulted
        )
    );
    eprintln!(
        "during the burst: {} refreshes ({:?} each at most), {cri_during} CRI connections held unanswered, up to {hung_seen} hung runsc processes alive",
        refreshes.len(),
        refreshes.iter().map(|r| r.1).max().unwrap_or_default()
    );
    assert!(
        hung_seen >= 1 && cri_during >= 1,
        "the faults were not live during the burst (runsc {hung_seen}, CRI {cri_during})"
    );
    assert!(!refreshes.is_empty(), "no refresh ran during the burst");
    // The faults add nothing to a cached read. Latency figures are printed,
    // not asserted (benches/ measures them): on a shared 2-core machine a
    // debug-build burst's p99 swings with the load. What is asserted is
    // the failure this guards against: a refresh that blocked the agent's
    // thread on the hung sandbox (2 s) would hold every caller past 1 s.
    assert!(
        pct(&faulted, 1.0) < Duration::from_secs(1),
        "slowest call under faults {:?}",
        pct(&faulted, 1.0)
    );

    // Each refresh ended within its timeouts (at worst it waited for the one
    // in flight, then ran its own: 2 x (300 ms + 2 s) plus the helper)
    // and says what failed.
    for (r, took) in &refreshes {
        assert!(*took < Duration::from_secs(6), "a refresh took {took:?}");
        let codes = codes(r);
        for code in [
            "CRI_UNREACHABLE",
            "GVISOR_NOT_READY",
            "SANDBOX_PROBE_FAILED",
        ] {
            assert!(codes.iter().any(|c| c == code), "{code} missing: {codes:?}");
        }
        assert!(
            finding(r, "SANDBOX_PROBE_FAILED").contains("did not finish within 2s"),
            "{}",
            finding(r, "SANDBOX_PROBE_FAILED")
        );
        assert!(
            finding(r, "CRI_UNREACHABLE").contains("did not answer within 300ms"),
            "{}",
            finding(r, "CRI_UNREACHABLE")
        );
        let report = r.report.as_ref().expect("report");
        let sandbox = report
            .gvisor
            .as_ref()
            .and_then(|g| g.sandbox.as_ref())
            .expect("sandbox");
        assert_eq!(sandbox.outcome, ProbeOutcome::Error as i32, "{sandbox:?}");
        assert_eq!(sandbox.errno_name, "ETIMEDOUT");
    }

    // Many more refreshes: no growth in fds or threads, nothing left running.
    let mut c = ReadinessServiceClient::new(connect(&url).await);
    check_refresh(&mut c).await;
    let reaped = || {
        let none = processes_with(&nonce, pid).is_empty();
        async move { none }
    };
    // Measured once the refresh's hanging runsc is killed and reaped.
    common::wait_until_async(Duration::from_secs(5), "the hanging runsc killed", reaped).await;
    let (fds0, threads0) = (fds(pid), threads(pid));
    let observed0 = report_within(&url, Duration::from_secs(5))
        .await
        .agent
        .expect("agent")
        .observations;
    let t = Instant::now();
    const MORE: u64 = 10;
    for _ in 0..MORE {
        // Past --min-refresh-interval, so every refresh is a new observation.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (r, took) = check_refresh(&mut c).await;
        assert!(took < Duration::from_secs(3), "a refresh took {took:?}");
        assert!(codes(&r).iter().any(|c| c == "SANDBOX_PROBE_FAILED"));
    }
    let took = t.elapsed();
    common::wait_until_async(Duration::from_secs(5), "the hanging runsc killed", reaped).await;
    // Observations read host files on the runtime's blocking pool, whose
    // idle threads exit after the agent's keep-alive (1 s): a leak is a
    // count that does not come back, not one caught mid-observation.
    common::wait_until_async(
        Duration::from_secs(10),
        "the blocking pool back to its idle size",
        || async { threads(pid) <= threads0 + 1 },
    )
    .await;
    let (fds1, threads1) = (fds(pid), threads(pid));
    let left = processes_with(&nonce, pid);
    let left_scripts = processes_with(runsc.to_str().expect("utf-8"), pid);
    drop(c);
    let observations = report_within(&url, Duration::from_secs(5))
        .await
        .agent
        .expect("agent")
        .observations;
    // While the agent runs: its exit would close everything anyway.
    let (accepted, still_open) = cri.finish();
    assert!(alive(pid), "the agent died");
    drop(agent);
    eprintln!(
        "{MORE} more refreshes in {took:?}: fds {fds0} → {fds1}, threads {threads0} → {threads1}; {observations} observations in all; hung CRI: {accepted} connections accepted, {still_open} still open when the agent stopped"
    );
    assert!(
        observations >= observed0 + MORE,
        "only {} observations for {MORE} spaced refreshes",
        observations - observed0
    );
    assert!(
        left.is_empty(),
        "hung runsc processes left behind: {left:?}"
    );
    assert!(
        left_scripts.is_empty(),
        "runsc scripts left behind: {left_scripts:?}"
    );
    assert!(fds1 <= fds0, "fds grew: {fds0} → {fds1}");
    assert!(
        threads1 <= threads0 + 1,
        "threads grew: {threads0} → {threads1}"
    );
    assert!(
        accepted as u64 >= observations,
        "{accepted} CRI dials for {observations} observations"
    );
    assert!(
        still_open <= 1,
        "the agent kept {still_open} connections to the hung CRI open"
    );
}

#[tokio::test]
async fn absent_or_refusing_cri_and_a_crashing_runsc_are_findings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segv = script(
        dir.path(),
        "runsc-segv",
        "echo 'runsc: about to crash' >&2\nkill -SEGV $$",
    );
    let exit139 = script(
        dir.path(),
        "runsc-139",
        "echo 'runsc: fatal error' >&2\nexit 139",
    );
    let absent = dir.path().join("absent.sock");
    let refusing = dir.path().join("refusing.sock");
    // A socket file nobody listens on: connect gets ECONNREFUSED.
    drop(UnixListener::bind(&refusing).expect("bind"));
    let empty = tempfile::tempdir().expect("tempdir");

    for (runsc, sock, runsc_says, cri_says) in [
        (&segv, &absent, "was killed by signal 11", "does not exist"),
        (
            &exit139,
            &refusing,
            "exited with status 139",
            "refused the connection",
        ),
    ] {
        let endpoint = format!("unix://{}", sock.display());
        let agent = Agent::start(
            None,
            &[
                "--runsc-path",
                runsc.to_str().expect("utf-8"),
                "--cri-endpoint",
                &endpoint,
                "--cri-conf-dir",
                empty.path().to_str().expect("utf-8"),
                "--sandbox-timeout",
                "5s",
            ],
        );
        let mut c = ReadinessServiceClient::new(connect(&agent.url()).await);
        let (r, took) = tokio::time::timeout(Duration::from_secs(10), check_refresh(&mut c))
            .await
            .expect("Check within 10 s");
        let report = r.report.as_ref().expect("report");
        let b = runsc_binary(report);
        assert!(b.error.contains(runsc_says), "{}: {b:?}", runsc.display());
        let cri = report
            .gvisor
            .as_ref()
            .and_then(|g| g.cri.as_ref())
            .expect("cri");
        assert!(!cri.reachable, "{cri:?}");
        assert!(cri.error.contains(cri_says), "{}", cri.error);
        assert!(!cri.error.contains('\n'), "{}", cri.error);
        let sandbox = finding(&r, "SANDBOX_PROBE_FAILED");
        assert!(sandbox.contains(runsc_says), "{sandbox}");
        assert!(
            finding(&r, "CRI_UNREACHABLE").contains(cri_says),
            "{}",
            finding(&r, "CRI_UNREACHABLE")
        );
        let g = report.gvisor.as_ref().expect("gvisor");
        assert_ne!(g.readiness, GvisorReadiness::Ready as i32);
        eprintln!(
            "{} + {}: answered in {took:?}; runsc: {}; CRI: {}; sandbox: {sandbox}",
            runsc.file_name().expect("name").to_string_lossy(),
            sock.file_name().expect("name").to_string_lossy(),
            b.error,
            cri.error
        );
        // Still serving, still alive.
        report_within(&agent.url(), Duration::from_secs(5)).await;
        assert!(alive(agent.child.id()), "the agent died");
    }
}

/// A `/proc` fixture: `sys/user/max_user_namespaces` is a directory (EISDIR;
/// chmod would not stop root), one readable sysctl, no boot id.
fn proc_fixture(root: &Path) {
    let sys = root.join("sys");
    std::fs::create_dir_all(sys.join("user/max_user_namespaces")).expect("mkdir");
    std::fs::write(sys.join("user/max_mnt_namespaces"), "100\n").expect("write");
    std::fs::create_dir_all(sys.join("kernel/random")).expect("mkdir");
    std::fs::write(sys.join("kernel/osrelease"), "6.0.0-fixture\n").expect("write");
}

fn sysctl<'a>(r: &'a Report, name: &str) -> &'a sandbox_readiness::proto::v1::Sysctl {
    sandbox_readiness::report::find_sysctl(r, name).unwrap_or_else(|| panic!("{name} not reported"))
}

#[tokio::test]
async fn unreadable_proc_sys_and_an_empty_host_root_are_reported_as_data() {
    let proc_root = tempfile::tempdir().expect("tempdir");
    proc_fixture(proc_root.path());
    let host = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        None,
        &[
            "--proc-root",
            proc_root.path().to_str().expect("utf-8"),
            "--host-root",
            host.path().to_str().expect("utf-8"),
            "--sys-root",
            host.path().to_str().expect("utf-8"),
            "--sysctl",
            "user.max_user_namespaces=11255",
            "--poll-interval",
            "100ms",
        ],
    );
    let r = report_within(&agent.url(), Duration::from_secs(10)).await;

    let s = sysctl(&r, "user.max_user_namespaces");
    assert_eq!(s.state, SysctlState::Unreadable as i32, "{s:?}");
    assert!(s.error.contains("Is a directory"), "{}", s.error);
    let s = sysctl(&r, "user.max_mnt_namespaces");
    assert_eq!(
        (s.state, s.value.as_str()),
        (SysctlState::Present as i32, "100")
    );
    let s = sysctl(&r, "kernel.yama.ptrace_scope");
    assert_eq!(s.state, SysctlState::Absent as i32, "{s:?}");

    let node = r.node.as_ref().expect("node");
    assert_eq!(node.boot_id, "", "boot id from nowhere");
    assert_eq!(node.machine_id, "");
    assert_eq!(node.os_name, "");
    assert_eq!(node.hostname, "");
    assert_eq!(node.kernel_release, "6.0.0-fixture");
    let u = r.user_namespaces.as_ref().expect("userns");
    assert!(!u.initial_user_namespace);
    assert!(
        u.namespace_note.contains("cannot tell"),
        "{}",
        u.namespace_note
    );
    let g = r.gvisor.as_ref().expect("gvisor");
    assert_eq!(g.readiness, GvisorReadiness::NotInstalled as i32, "{g:?}");
    let cri = g.cri.as_ref().expect("cri");
    assert!(cri.error.contains("does not exist"), "{}", cri.error);

    // The default desired state: a finding, not an error; then again after
    // a few poll intervals and a refresh (the owner task is alive).
    let mut c = ReadinessServiceClient::new(connect(&agent.url()).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for refresh in [false, true] {
        let v = tokio::time::timeout(
            Duration::from_secs(10),
            c.check(CheckRequest {
                desired: None,
                refresh,
                ..CheckRequest::default()
            }),
        )
        .await
        .expect("Check within 10 s")
        .expect("Check")
        .into_inner();
        let verdict = v.verdict.expect("verdict");
        assert!(!verdict.converged);
        let f = verdict
            .findings
            .iter()
            .find(|f| f.code == "SYSCTL_UNREADABLE")
            .unwrap_or_else(|| panic!("no SYSCTL_UNREADABLE: {:?}", verdict.findings));
        assert_eq!(f.subject, "user.max_user_namespaces");
        assert!(f.message.contains("Is a directory"), "{}", f.message);
    }
    assert!(alive(agent.child.id()), "the agent died");
}

#[tokio::test]
async fn a_fifo_in_place_of_a_sysctl_does_not_hang_the_agent() {
    let proc_root = tempfile::tempdir().expect("tempdir");
    proc_fixture(proc_root.path());
    let sys = proc_root.path().join("sys");
    std::fs::create_dir_all(sys.join("kernel/yama")).expect("mkdir");
    // No writer will ever open these: a blocking open for reading never returns.
    for fifo in [
        sys.join("user/max_net_namespaces"),
        sys.join("kernel/yama/ptrace_scope"),
        sys.join("kernel/random/boot_id"),
    ] {
        let out = common::run({
            let mut c = std::process::Command::new("mkfifo");
            c.arg(&fifo);
            c
        });
        assert!(out.status.success(), "mkfifo {}", fifo.display());
    }
    let host = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(
        None,
        &[
            "--proc-root",
            proc_root.path().to_str().expect("utf-8"),
            "--host-root",
            host.path().to_str().expect("utf-8"),
            "--sysctl",
            "kernel.yama.ptrace_scope=1",
            "--poll-interval",
            "100ms",
            "--min-refresh-interval",
            "100ms",
        ],
    );
    let r = report_within(&agent.url(), Duration::from_secs(10)).await;
    for name in ["user.max_net_namespaces", "kernel.yama.ptrace_scope"] {
        let s = sysctl(&r, name);
        assert_eq!(s.state, SysctlState::Unreadable as i32, "{s:?}");
        assert!(
            s.error.contains("a FIFO, not a regular file"),
            "{}",
            s.error
        );
    }
    assert_eq!(r.node.as_ref().expect("node").boot_id, "");

    // The cheap poll and full refreshes read the FIFOs again and again.
    let mut c = ReadinessServiceClient::new(connect(&agent.url()).await);
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let v = tokio::time::timeout(
            Duration::from_secs(5),
            c.check(CheckRequest {
                desired: None,
                refresh: true,
                ..CheckRequest::default()
            }),
        )
        .await
        .expect("a refresh hung on the FIFO")
        .expect("Check")
        .into_inner();
        let codes: Vec<_> = v
            .verdict
            .expect("verdict")
            .findings
            .into_iter()
            .map(|f| f.code)
            .collect();
        assert!(
            codes.contains(&"SYSCTL_UNREADABLE".to_string()),
            "{codes:?}"
        );
    }
    assert!(alive(agent.child.id()), "the agent died");
}

/// `probe --timeout` bounds the whole probe, whatever the steps' own
/// deadlines: a CRI that accepts and never answers, given 60 s of its own,
/// ends `probe` at its 1 s deadline with one line and exit 2.
#[test]
fn probe_stops_at_its_own_deadline_when_a_step_hangs_longer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("hung.sock");
    // Bound and listening, never accepted: connect succeeds, nothing answers.
    let _hung = UnixListener::bind(&socket).expect("bind");
    let started = Instant::now();
    let out = common::run({
        let mut c = std::process::Command::new(common::BIN);
        c.args([
            "probe",
            "--timeout",
            "1s",
            "--cri-timeout",
            "60s",
            "--cri-endpoint",
        ])
        .arg(format!("unix://{}", socket.display()));
        c
    });
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(took < Duration::from_secs(10), "probe took {took:?}");
    assert_eq!(
        stderr.trim(),
        "sandbox-readiness probe: did not finish within 1s (--timeout): a host read, the CRI or a child hung"
    );
    assert!(out.stdout.is_empty(), "printed a partial report");
}
