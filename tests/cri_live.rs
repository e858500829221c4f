//! The live CRI tier against a real containerd (Debian's 1.6.20, started
//! privately per test), against a containerd 2.x-shaped gRPC server, and
//! against broken endpoints: absent, refusing, hung, not a socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::{
    os::unix::net::UnixListener as StdUnixListener,
    path::Path,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::{Duration, Instant},
};

use sandbox_readiness::{
    observe::cri::{observe, DEFAULT_TIMEOUT, SOURCE_INFO_CONFIG, SOURCE_RUNTIME_HANDLERS},
    proto::{
        cri::{
            runtime_service_server::{RuntimeService, RuntimeServiceServer},
            RuntimeCondition, RuntimeFeatures, RuntimeHandler, RuntimeHandlerFeatures,
            RuntimeStatus, StatusRequest, StatusResponse, VersionRequest, VersionResponse,
        },
        v1::CriRuntime,
    },
};
use support::containerd::{leftovers, shim_socket, Containerd, Options};
use tokio::sync::oneshot;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

fn handler<'a>(
    cri: &'a CriRuntime,
    name: &str,
) -> Option<&'a sandbox_readiness::proto::v1::RuntimeHandler> {
    cri.handlers.iter().find(|h| h.name == name)
}

fn condition<'a>(
    cri: &'a CriRuntime,
    ty: &str,
) -> &'a sandbox_readiness::proto::v1::RuntimeCondition {
    cri.conditions
        .iter()
        .find(|c| c.r#type == ty)
        .unwrap_or_else(|| panic!("no {ty} condition in {:?}", cri.conditions))
}

fn elapsed(cri: &CriRuntime) -> Duration {
    let d = cri.duration.expect("duration is always set");
    Duration::new(d.seconds as u64, d.nanos as u32)
}

/// The version `containerd --version` prints (third word), which CRI's
/// Version must repeat.
fn installed_containerd_version() -> String {
    let out = Command::new("containerd")
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("unexpected containerd --version output {text:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_containerd_reports_runsc_handler_from_info_config() {
    let ctd = Containerd::start(Options::with_runsc());
    let cri = observe(&ctd.endpoint(), DEFAULT_TIMEOUT).await;

    assert_eq!(cri.error, "", "{cri:#?}\n{}", ctd.log());
    assert!(cri.reachable);
    assert_eq!(cri.endpoint, ctd.endpoint());
    assert_eq!(cri.runtime_name, "containerd");
    assert_eq!(cri.runtime_version, installed_containerd_version());
    assert_eq!(cri.runtime_api_version, "v1");
    // containerd 1.6 has no runtime_handlers field; the handlers must come
    // from the verbose info.
    assert_eq!(cri.handlers_source, SOURCE_INFO_CONFIG);

    let runsc = handler(&cri, "runsc").unwrap_or_else(|| panic!("runsc missing: {cri:#?}"));
    assert_eq!(runsc.runtime_type, "io.containerd.runsc.v1");
    // info.config carries no features: unset, not false.
    assert_eq!(runsc.user_namespaces, None);
    assert_eq!(runsc.recursive_read_only_mounts, None);
    let runc = handler(&cri, "runc").unwrap();
    assert_eq!(runc.runtime_type, "io.containerd.runc.v2");
    assert_eq!(cri.handlers.len(), 2, "{:?}", cri.handlers);

    // As containerd gives them: no CNI here, so the network is not ready.
    assert!(condition(&cri, "RuntimeReady").status);
    let net = condition(&cri, "NetworkReady");
    assert!(!net.status);
    assert_eq!(net.reason, "NetworkPluginNotReady");
    assert!(elapsed(&cri) < DEFAULT_TIMEOUT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_containerd_without_runsc_config_has_no_runsc_handler() {
    let ctd = Containerd::start(Options::runc_only());
    let cri = observe(ctd.socket().to_str().unwrap(), DEFAULT_TIMEOUT).await;

    assert_eq!(cri.error, "", "{cri:#?}");
    assert_eq!(cri.handlers_source, SOURCE_INFO_CONFIG);
    assert!(handler(&cri, "runsc").is_none(), "{:?}", cri.handlers);
    let names: Vec<&str> = cri.handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["runc"]);
}

/// Median wall time of a live `observe` against the real containerd; the
/// figure is printed for the readiness notes (`--nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_containerd_observe_is_fast() {
    let t = Instant::now();
    let ctd = Containerd::start(Options::with_runsc());
    println!("private containerd served CRI after {:?}", t.elapsed());
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        let cri = observe(&ctd.endpoint(), DEFAULT_TIMEOUT).await;
        times.push(t.elapsed());
        assert_eq!(cri.error, "");
        assert!(handler(&cri, "runsc").is_some());
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "live CRI observe against containerd 1.6: median {median:?}, min {:?}, max {:?} over {} runs",
        times[0],
        times[times.len() - 1],
        times.len()
    );
    assert!(median < Duration::from_millis(500), "median {median:?}");
}

#[test]
fn harness_leaves_no_process_mount_or_file() {
    let ctd = Containerd::start(Options::with_runsc());
    let dir = ctd.dir().to_path_buf();
    let pid = ctd.pid().unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert!(
        !leftovers(&dir).is_empty(),
        "a running instance must be seen"
    );
    drop(ctd);
    assert_eq!(leftovers(&dir), Vec::<String>::new());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "containerd {pid} still exists"
    );
}

/// Starts a container through the instance with ctr (host rootfs, no image
/// needed), returning the container's pid and its shim socket.
fn run_sleeper(ctd: &Containerd, rootfs: &Path, id: &str) -> (u32, std::path::PathBuf) {
    let out = ctd
        .ctr()
        .args(["run", "-d", "--fifo-dir"])
        .arg(ctd.dir().join("fifo"))
        .arg("--runc-root")
        .arg(ctd.dir().join("runc"))
        .arg("--rootfs")
        .arg(rootfs)
        .args([id, "/sleep", "600"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ctr run failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        ctd.log()
    );
    let dir = ctd.dir();
    assert!(
        leftovers(dir)
            .iter()
            .any(|l| l.contains("containerd-shim-runc-v2")),
        "no shim seen: {:?}",
        leftovers(dir)
    );
    assert!(dir.join(format!("runc/default/{id}/state.json")).exists());
    let sock = shim_socket(ctd.socket(), "default", id);
    assert!(
        sock.exists(),
        "shim socket {} not where containerd 1.6 puts it",
        sock.display()
    );
    // ctr returns once the task started; the exec of /sleep may lag.
    let deadline = Instant::now() + Duration::from_secs(5);
    let pid = loop {
        if let Some(pid) = find_process("/sleep 600", dir) {
            break pid;
        }
        assert!(Instant::now() < deadline, "container process not found");
        thread::sleep(Duration::from_millis(20));
    };
    (pid, sock)
}

fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z"))
        .unwrap_or(true)
}

/// Shims outlive containerd by design; Drop must still remove the shim, the
/// container's process and the shim's socket in the global directory.
#[test]
fn harness_removes_containers_shims_and_shim_sockets() {
    let rootfs = tempfile::tempdir().unwrap();
    make_sleep_rootfs(rootfs.path());

    let ctd = Containerd::start(Options::runc_only());
    let dir = ctd.dir().to_path_buf();
    let (pid, sock) = run_sleeper(&ctd, rootfs.path(), "tidy");
    drop(ctd);
    assert_eq!(leftovers(&dir), Vec::<String>::new());
    assert!(gone(pid), "container process {pid} survived");
    assert!(!sock.exists(), "shim socket {} left behind", sock.display());
}

/// The same when containerd itself died first: no API to ask, so Drop
/// falls back to killing the shim tree and removing its socket itself.
#[test]
fn harness_cleans_up_after_containerd_crashed() {
    let rootfs = tempfile::tempdir().unwrap();
    make_sleep_rootfs(rootfs.path());

    let ctd = Containerd::start(Options::runc_only());
    let dir = ctd.dir().to_path_buf();
    let (pid, sock) = run_sleeper(&ctd, rootfs.path(), "crash");
    let status = Command::new("kill")
        .args(["-KILL", &ctd.pid().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let t = Instant::now();
    drop(ctd);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "teardown took {:?}",
        t.elapsed()
    );
    assert_eq!(leftovers(&dir), Vec::<String>::new());
    assert!(gone(pid), "container process {pid} survived");
    assert!(!sock.exists(), "shim socket {} left behind", sock.display());
}

/// A rootfs with a copy of `sleep` and the libraries it loads.
fn make_sleep_rootfs(root: &Path) {
    let sleep = Path::new("/usr/bin/sleep");
    std::fs::copy(sleep, root.join("sleep")).unwrap();
    let ldd = Command::new("ldd").arg(sleep).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let lib = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(Path::new);
        if let Some(lib) = lib {
            let dest = root.join(lib.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(lib, dest).unwrap();
        }
    }
}

/// A process with this command line whose parent's command line mentions
/// `dir` (the instance's shim), so parallel tests do not see each other's.
fn find_process(cmdline: &str, dir: &Path) -> Option<u32> {
    let read = |pid: &str| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .ok()
    };
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.to_string();
        if read(&pid)? != cmdline {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .to_string();
        read(&ppid)?.contains(&needle).then(|| pid.parse().ok())?
    })
}

#[tokio::test]
async fn absent_socket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nope.sock");
    let cri = observe(&format!("unix://{}", sock.display()), DEFAULT_TIMEOUT).await;
    assert_eq!(
        cri.error,
        format!("CRI socket {} does not exist", sock.display())
    );
    assert!(!cri.reachable);
    assert!(elapsed(&cri) < Duration::from_millis(500));
}

#[tokio::test]
async fn refused_connection_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("dead.sock");
    // The socket file stays after the listener is gone: connect is refused.
    drop(StdUnixListener::bind(&sock).unwrap());
    let cri = observe(sock.to_str().unwrap(), DEFAULT_TIMEOUT).await;
    assert!(
        cri.error.contains("refused the connection"),
        "{}",
        cri.error
    );
    assert!(cri.error.contains(sock.to_str().unwrap()), "{}", cri.error);
    assert!(!cri.reachable);
    assert!(elapsed(&cri) < Duration::from_millis(500));
}

#[tokio::test]
async fn regular_file_is_not_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("containerd.sock");
    std::fs::write(&file, "").unwrap();
    let cri = observe(file.to_str().unwrap(), DEFAULT_TIMEOUT).await;
    assert_eq!(
        cri.error,
        format!("CRI endpoint {} is not a socket", file.display())
    );
}

#[tokio::test]
async fn unsupported_endpoint_is_a_clear_error() {
    for bad in [
        "tcp://127.0.0.1:10010",
        "run/containerd/containerd.sock",
        "",
    ] {
        let cri = observe(bad, DEFAULT_TIMEOUT).await;
        assert!(
            cri.error.starts_with("unsupported CRI endpoint"),
            "{bad}: {}",
            cri.error
        );
        assert!(!cri.reachable);
    }
}

/// A peer that accepts connections and never says a word.
struct HungPeer {
    stop: Arc<AtomicBool>,
    path: std::path::PathBuf,
    thread: Option<thread::JoinHandle<usize>>,
    _dir: tempfile::TempDir,
}

impl HungPeer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hung.sock");
        let listener = StdUnixListener::bind(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                held.extend(conn.ok());
            }
            held.len()
        });
        Self {
            stop,
            path,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Stops accepting and returns how many connections it held.
    fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[tokio::test]
async fn hung_peer_is_reported_within_the_timeout() {
    for (timeout, text) in [
        (DEFAULT_TIMEOUT, "2s"),
        (Duration::from_millis(300), "300ms"),
    ] {
        let peer = HungPeer::start();
        let t = Instant::now();
        let cri = observe(peer.path.to_str().unwrap(), timeout).await;
        let took = t.elapsed();
        assert_eq!(cri.error, format!("CRI did not answer within {text}"));
        assert!(!cri.reachable);
        assert!(took >= timeout, "gave up early: {took:?}");
        assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
        assert!(peer.stop() >= 1, "observe never connected to the peer");
    }
}

/// Answers like containerd 2.x does (reference notes §1.5–§1.7): version
/// `v2.x`, three conditions, `runtime_handlers` with features per handler
/// (unset when the shim could not be asked) plus the unnamed duplicate of the
/// default, and the 2.x `info["config"]` JSON next to non-JSON info values.
#[derive(Clone, Default)]
struct Containerd2 {
    fail_version: bool,
    fail_status: bool,
}

const CONTAINERD2_CONFIG: &str = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{
  "runc":{"runtimeType":"io.containerd.runc.v2","runtimePath":"","PodAnnotations":null,"ContainerAnnotations":null,
          "options":{"BinaryName":"","SystemdCgroup":true},"privileged_without_host_devices":false,
          "baseRuntimeSpec":"","cniConfDir":"","cniMaxConfNum":0,"snapshotter":"","sandboxer":"podsandbox","io_type":""},
  "runsc":{"runtimeType":"io.containerd.runsc.v1","runtimePath":"","PodAnnotations":null,"ContainerAnnotations":null,
          "options":{"TypeUrl":"io.containerd.runsc.v1.options","ConfigPath":"/etc/cri/conf.d/runsc.toml"},
          "privileged_without_host_devices":false,"baseRuntimeSpec":"","cniConfDir":"","cniMaxConfNum":0,
          "snapshotter":"","sandboxer":"podsandbox","io_type":""},
  "runsc-kvm":{"runtimeType":"io.containerd.runsc.v1","options":{"TypeUrl":"io.containerd.runsc.v1.options",
          "ConfigPath":"/etc/cri/conf.d/runsc-kvm.toml"},"sandboxer":"podsandbox"}},
  "ignoreBlockIONotEnabledErrors":false,"ignoreRdtNotEnabledErrors":false},
 "cni":{"binDir":"/opt/cni/bin","confDir":"/etc/cni/net.d"},"enableSelinux":false,"enableCDI":true,
 "containerdRootDir":"/var/lib/containerd","containerdEndpoint":"/run/containerd/containerd.sock",
 "rootDir":"/var/lib/containerd/io.containerd.grpc.v1.cri","stateDir":"/run/containerd/io.containerd.grpc.v1.cri"}"#;

#[tonic::async_trait]
impl RuntimeService for Containerd2 {
    async fn version(
        &self,
        req: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        if self.fail_version {
            return Err(Status::unimplemented(
                "unknown service runtime.v1.RuntimeService",
            ));
        }
        assert_eq!(req.into_inner().version, "0.1.0");
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: "v2.1.4".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn status(
        &self,
        req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        if self.fail_status {
            return Err(Status::internal("failed to get cni status\nsecond line"));
        }
        let verbose = req.into_inner().verbose;
        let cond = |t: &str, status: bool, reason: &str| RuntimeCondition {
            r#type: t.into(),
            status,
            reason: reason.into(),
            message: String::new(),
        };
        let features = |userns: bool, rro: bool| {
            Some(RuntimeHandlerFeatures {
                recursive_read_only_mounts: rro,
                user_namespaces: userns,
            })
        };
        let mut info = std::collections::HashMap::new();
        if verbose {
            info.insert("config".to_string(), CONTAINERD2_CONFIG.to_string());
            info.insert("golang".to_string(), "\"go1.23.8\"".to_string());
            info.insert("lastCNILoadStatus".to_string(), "OK".to_string());
            info.insert("lastCNILoadStatus.default".to_string(), "OK".to_string());
        }
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![
                    cond("RuntimeReady", true, ""),
                    cond("NetworkReady", true, ""),
                    cond("ContainerdHasNoDeprecationWarnings", true, ""),
                ],
            }),
            info,
            runtime_handlers: vec![
                RuntimeHandler {
                    name: "runc".into(),
                    features: features(true, true),
                },
                RuntimeHandler {
                    name: "runsc".into(),
                    features: features(true, false),
                },
                // Configured, but its shim could not be asked: no features.
                RuntimeHandler {
                    name: "runsc-kvm".into(),
                    features: None,
                },
                RuntimeHandler {
                    name: "".into(),
                    features: features(true, true),
                },
            ],
            features: Some(RuntimeFeatures {
                supplemental_groups_policy: true,
                ..RuntimeFeatures::default()
            }),
        }))
    }
}

struct FakeServer {
    path: std::path::PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl FakeServer {
    fn start(svc: Containerd2) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("containerd.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(svc))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Self {
            path,
            shutdown: Some(tx),
            task,
            _dir: dir,
        }
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

#[tokio::test]
async fn containerd2_runtime_handlers_keep_features_set_and_unset() {
    let server = FakeServer::start(Containerd2::default());
    let cri = observe(&server.endpoint(), DEFAULT_TIMEOUT).await;
    server.stop().await;

    assert_eq!(cri.error, "", "{cri:#?}");
    assert!(cri.reachable);
    assert_eq!(cri.runtime_version, "v2.1.4");
    assert_eq!(cri.handlers_source, SOURCE_RUNTIME_HANDLERS);
    let names: Vec<&str> = cri.handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["runc", "runsc", "runsc-kvm", ""]);

    let runsc = handler(&cri, "runsc").unwrap();
    assert_eq!(runsc.user_namespaces, Some(true));
    assert_eq!(
        runsc.recursive_read_only_mounts,
        Some(false),
        "false must stay a set false"
    );
    assert_eq!(runsc.runtime_type, "io.containerd.runsc.v1");

    let kvm = handler(&cri, "runsc-kvm").unwrap();
    assert_eq!(kvm.user_namespaces, None, "unreported must stay unset");
    assert_eq!(kvm.recursive_read_only_mounts, None);
    assert_eq!(kvm.runtime_type, "io.containerd.runsc.v1");

    let default = handler(&cri, "").unwrap();
    assert_eq!(default.user_namespaces, Some(true));
    assert_eq!(default.runtime_type, "io.containerd.runc.v2");

    assert_eq!(cri.conditions.len(), 3);
    assert!(condition(&cri, "NetworkReady").status);
    assert!(condition(&cri, "ContainerdHasNoDeprecationWarnings").status);
}

#[tokio::test]
async fn grpc_error_status_is_a_clear_error() {
    let server = FakeServer::start(Containerd2 {
        fail_version: true,
        ..Containerd2::default()
    });
    let cri = observe(&server.endpoint(), DEFAULT_TIMEOUT).await;
    assert_eq!(
        cri.error,
        "CRI Version failed with gRPC status Unimplemented: unknown service runtime.v1.RuntimeService"
    );
    assert!(!cri.reachable);
    server.stop().await;

    let server = FakeServer::start(Containerd2 {
        fail_status: true,
        ..Containerd2::default()
    });
    let cri = observe(&server.endpoint(), DEFAULT_TIMEOUT).await;
    server.stop().await;
    assert_eq!(
        cri.error,
        "CRI Status failed with gRPC status Internal: failed to get cni status"
    );
    // Version answered, so the runtime is reachable and its version known.
    assert!(cri.reachable);
    assert_eq!(cri.runtime_version, "v2.1.4");
}

/// A peer that accepts and immediately hangs up (a crashing runtime).
#[tokio::test]
async fn peer_that_hangs_up_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rude.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((conn, _)) => drop(conn),
                Err(_) => return,
            }
        }
    });
    let cri = observe(path.to_str().unwrap(), DEFAULT_TIMEOUT).await;
    server.abort();
    assert!(!cri.reachable);
    assert!(cri.error.contains(path.to_str().unwrap()), "{}", cri.error);
    assert!(cri.error.contains("the connection broke"), "{}", cri.error);
    assert!(elapsed(&cri) < Duration::from_secs(1));
}
