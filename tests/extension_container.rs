//! The agent where Talos really runs it: the built extension's amd64 container
//! root, run by real containerd 2.1 and runc with the OCI spec machined builds
//! for an extension service, against a fixture host tree whose
//! `/run/containerd/containerd.sock` is a live CRI (the same containerd 2.1,
//! with Talos's gVisor drop-in imported).
//!
//! The spec follows these upstream files (shared/reference/talos-node-runtime.md §B1–B2):
//! - siderolabs/talos `internal/app/machined/pkg/system/services/extension.go`:
//!   host network (`:129`), the rootfs overlaid rw and then read-only
//!   (`:52-70`, `:145-147`), the spec's mounts with missing sources created
//!   (`:173-184`), each ExtensionServiceConfig file bind-mounted `{ro, bind}`
//!   from `/system/overlays/extensions/<name>/<path with / → ->` (`:195-206`)
//!   and its environment appended after the spec's (`:208`); OOM score adj
//!   -600 (`:236-247`, not set here: see below).
//! - siderolabs/talos `internal/app/machined/pkg/system/runner/containerd/containerd.go`
//!   `newOCISpecOpts` (`:385-446`): containerd's default spec, WithEnv,
//!   WithHostHostsFile, WithHostResolvconf, WithNoNewPrivileges, the extension
//!   options, then `seccomp.WithDefaultProfile()` last, computed against the
//!   final capabilities.
//! - siderolabs/talos `internal/pkg/capability/capability.go` and
//!   `pkg/machinery/constants/constants.go` (`:1529-1533`): every capability
//!   of machined's bounding set except CAP_SYS_BOOT and CAP_SYS_MODULE.
//! - siderolabs/talos `internal/app/machined/pkg/controllers/runtime/extension_service_config_files.go`
//!   (`:82,91`): config files written 0644.
//! - containerd/containerd `pkg/oci/spec.go` (`populateDefaultUnixSpec`:
//!   pid, ipc, uts, mount namespaces; RLIMIT_NOFILE 1024:1024 at `:180-185`,
//!   which Talos clears only from v1.13.0), `pkg/oci/mounts.go` (`/proc`,
//!   `/dev`, `/sys` ro, `/run` tmpfs 64 MiB, no cgroup mount) and
//!   `contrib/seccomp/seccomp_default.go` (the default profile: no
//!   `pivot_root`, default action ERRNO).
//! - containerd/containerd `cmd/ctr/commands/run/run_unix.go` (v2.1.9): ctr
//!   builds the same spec from flags in the same order (default spec, env,
//!   mounts, read-only root, host network with hosts/resolv.conf,
//!   capabilities, then `--seccomp` last) and sets NoNewPrivileges, so no
//!   hand-written spec is needed. It adds `HOSTNAME` to the environment with
//!   `--net-host`, which machined does not.
//! - siderolabs/extensions `container-runtime/gvisor` (the drop-in, runsc and
//!   the shim at /usr/local/bin; fixtures here: static busybox scripts, since
//!   the container has no shell of its own).
//!
//! This VM's root lacks CAP_SYS_RESOURCE (bit 24 of its bounding set), so
//! the container cannot get it and the OOM score adjustment of -600 cannot be
//! applied; both are left out. Raising NOFILE past 1024 is therefore not
//! testable here; sizing the agent's limits to 1024 is.
//!
//! Each test runs its own containerd and container (about 2 s), so tests
//! share nothing and run in parallel.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    fs,
    net::SocketAddr,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use support::{
    containerd::{canary_sandboxes, import_pause, Containerd, Options, PAUSE_IMAGE},
    testenv,
};

const NAME: &str = "sandbox-readiness";
/// The containerd namespace machined runs extension services in.
const NAMESPACE: &str = "system";
/// Capability names by bit (linux/capability.h).
const CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];
/// What machined never grants an extension service.
const WITHHELD: [&str; 2] = ["SYS_BOOT", "SYS_MODULE"];

// ------------------------------------------------------------- host tree

/// The runsc fixture: answers `--version` like runsc/cli/cli.go. With
/// `runsc.hang` beside it, it starts a child in a session of its own (as
/// runsc's sandbox and gofer are: a kill of runsc's process group misses it)
/// that outlives it by a second, and hangs past the agent's exec timeout.
/// When the agent kills runsc, the child is orphaned to PID 1 of the
/// container's PID namespace, and when it then exits, only a reaping PID 1
/// keeps it from staying a zombie. The child marks its start and its end in
/// /run (the container's own tmpfs) so the test knows when to look.
const RUNSC_FIXTURE: &str = r#"#!/usr/local/bin/busybox sh
if [ -e /usr/local/bin/runsc.hang ]; then
	/usr/local/bin/busybox setsid /usr/local/bin/busybox sh -c \
		'echo $$ >/run/sr-orphan; /usr/local/bin/busybox sleep 2; echo $$ >/run/sr-orphan-exits' &
	exec /usr/local/bin/busybox sleep 600
fi
case "$1" in
--version) printf 'runsc version release-20260810.0\nspec: 1.1.0\n' ;;
*) echo "fixture runsc: only --version is implemented" >&2; exit 1 ;;
esac
"#;
const SHIM_FIXTURE: &str = "#!/usr/local/bin/busybox sh\nexit 0\n";

fn write_exec(path: &Path, body: &str) {
    fs::write(path, body).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Fills the containerd 2.1 instance directory in as a Talos node's root:
/// os-release, machine-id, /usr/local/bin with the gVisor extension's two
/// binaries (fixtures) and a static busybox to interpret them.
fn lay_out_host_tree(host: &Path, hang: bool) {
    fs::create_dir_all(host.join("etc")).unwrap();
    fs::write(
        host.join("etc/os-release"),
        "NAME=\"Talos\"\nID=talos\nVERSION_ID=v1.11.5\nPRETTY_NAME=\"Talos (v1.11.5)\"\n",
    )
    .unwrap();
    fs::write(
        host.join("etc/machine-id"),
        "5c0fa2d1e7b84a6f9e3d2c1b0a998877\n",
    )
    .unwrap();
    let bin = host.join("usr/local/bin");
    fs::create_dir_all(&bin).unwrap();
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "/bin/busybox is missing: scripts/install-test-deps.sh installs busybox-static"
    );
    fs::copy(busybox, bin.join("busybox")).unwrap();
    write_exec(&bin.join("runsc"), RUNSC_FIXTURE);
    write_exec(&bin.join("containerd-shim-runsc-v1"), SHIM_FIXTURE);
    if hang {
        fs::write(bin.join("runsc.hang"), "").unwrap();
    }
}

/// The service spec the extension ships (extension/sandbox-readiness.yaml).
struct ServiceSpec {
    entrypoint: String,
    args: Vec<String>,
    environment: Vec<String>,
    /// (source, destination, options)
    mounts: Vec<(String, String, Vec<String>)>,
}

fn service_spec() -> ServiceSpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("extension/sandbox-readiness.yaml");
    let v: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let c = &v["container"];
    let strings = |v: &serde_yaml_ng::Value| -> Vec<String> {
        v.as_sequence()
            .map(|s| {
                s.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    ServiceSpec {
        entrypoint: c["entrypoint"].as_str().unwrap().to_string(),
        args: strings(&c["args"]),
        environment: strings(&c["environment"]),
        mounts: c["mounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| {
                assert_eq!(m["type"].as_str(), Some("bind"), "{m:?}");
                (
                    m["source"].as_str().unwrap().to_string(),
                    m["destination"].as_str().unwrap().to_string(),
                    strings(&m["options"]),
                )
            })
            .collect(),
    }
}

/// What `sandbox-readiness tls init` writes for the node: the
/// ExtensionServiceConfig's files and environment.
struct ServiceConfig {
    files: Vec<(String, String)>,
    environment: Vec<String>,
}

fn tls_init(dir: &Path) -> ServiceConfig {
    // An operator makes the certificates on a workstation with the operator
    // build (the test build here): the node build in the image has no
    // `tls init` (tests/extension.rs).
    let mut cmd = Command::new(common::BIN);
    cmd.args(["tls", "init", "--san", "127.0.0.1"]).arg(dir);
    let done = testenv::run_limited(&mut cmd, Duration::from_secs(30)).unwrap();
    assert!(done.ok(), "tls init failed: {}", done.stderr);
    // The document holds the server key: `tls init` writes it to a 0600
    // file, never to stdout.
    let text = fs::read_to_string(dir.join("server.yaml")).unwrap();
    let doc = text
        .split("\n---\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no YAML document in:\n{text}"));
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).unwrap();
    assert_eq!(v["kind"].as_str(), Some("ExtensionServiceConfig"));
    assert_eq!(v["name"].as_str(), Some(NAME));
    ServiceConfig {
        files: v["configFiles"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["mountPath"].as_str().unwrap().to_string(),
                    f["content"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
        environment: v["environment"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect(),
    }
}

/// Capabilities machined grants: its bounding set (here: this process's)
/// minus CAP_SYS_BOOT and CAP_SYS_MODULE.
fn granted_caps() -> Vec<String> {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    CAPS.iter()
        .enumerate()
        .filter(|(bit, name)| bnd & (1 << bit) != 0 && !WITHHELD.contains(name))
        .map(|(_, name)| format!("CAP_{name}"))
        .collect()
}

// ------------------------------------------------------------- the node

/// A fixture node: CRI containerd 2.1 (also running the service, as the
/// system containerd does on Talos), its host tree, and the extension
/// service's container.
struct Node {
    ctd: Containerd,
    id: String,
    /// The `tls init` directory (CA, client certificate), when the service
    /// has the TLS ExtensionServiceConfig.
    tls: Option<PathBuf>,
    log_path: PathBuf,
    /// Host pid of the container's PID 1.
    init_pid: u32,
    /// The agent's bound address (the ExtensionServiceConfig sets port 0 so
    /// parallel tests never collide).
    addr: SocketAddr,
    /// The environment as ctr passed it, in order.
    env: Vec<String>,
}

struct NodeOptions {
    /// runsc hangs on every call (the orphan case).
    hang: bool,
    /// The ExtensionServiceConfig from `tls init` (mTLS on `[::]`); without
    /// it the agent serves plaintext on 127.0.0.1 only.
    tls: bool,
    /// Extra ExtensionServiceConfig environment, after tls init's.
    env: Vec<String>,
    /// The host's containerd can start pod sandboxes (a pause image, and
    /// no OOM score it cannot set here): for the CRI canary.
    pod_sandboxes: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            hang: false,
            tls: true,
            env: Vec::new(),
            pod_sandboxes: false,
        }
    }
}

fn ctr(ctd: &Containerd, args: &[&str]) -> testenv::Finished {
    let mut cmd = ctd.ctr();
    cmd.args(["-n", NAMESPACE]).args(args);
    testenv::run_limited(&mut cmd, Duration::from_secs(60)).unwrap()
}

impl Node {
    fn start(opts: NodeOptions) -> Node {
        let ctd = if opts.pod_sandboxes {
            let ctd =
                Containerd::start(Options::containerd2_with_runsc().pod_sandboxes(PAUSE_IMAGE));
            import_pause(&ctd);
            ctd
        } else {
            Containerd::start(Options::containerd2_with_runsc())
        };
        let host = ctd.dir().to_path_buf();
        lay_out_host_tree(&host, opts.hang);
        let spec = service_spec();
        let id = format!(
            "{NAME}-{}",
            host.file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("ctd-")
        );

        // machined overlays the read-only extension root rw (upper dir on
        // /system's tmpfs) so runc can create mount points, and runs it
        // read-only.
        let lower = testenv::extension_container_root();
        let overlay = host.join("system/overlays/rootfs");
        let (upper, work, merged) = (
            overlay.join("upper"),
            overlay.join("work"),
            overlay.join("merged"),
        );
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d).unwrap();
        }
        let mut mount = Command::new("mount");
        mount.args(["-t", "overlay", "overlay", "-o"]).arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        ));
        mount.arg(&merged);
        let done = testenv::run_limited(&mut mount, Duration::from_secs(30)).unwrap();
        assert!(
            done.ok(),
            "cannot mount the rootfs overlay: {}",
            done.stderr
        );

        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--rootfs".into(),
            "--fifo-dir".into(),
            host.join("fifo").display().to_string(),
            "--runc-root".into(),
            host.join("runc-system").display().to_string(),
            "--log-uri".into(),
            format!("file://{}", host.join("service.log").display()),
            "--pid-file".into(),
            host.join("service.pid").display().to_string(),
            "--net-host".into(),
            "--read-only".into(),
            "--cwd".into(),
            "/".into(),
        ];
        for cap in granted_caps() {
            args.push("--cap-add".into());
            args.push(cap);
        }
        // The spec's mounts, from the host tree; machined creates a missing
        // source with MkdirAll.
        for (src, dst, options) in &spec.mounts {
            let source = host.join(src.trim_start_matches('/'));
            if !source.exists() {
                fs::create_dir_all(&source).unwrap();
                fs::set_permissions(&source, fs::Permissions::from_mode(0o700)).unwrap();
            }
            args.push("--mount".into());
            args.push(format!(
                "type=bind,src={},dst={dst},options={}",
                source.display(),
                options.join(":")
            ));
        }
        // The ExtensionServiceConfig: files 0644 under
        // /system/overlays/extensions/<name>/, each bound {ro, bind}.
        let tls = opts.tls.then(|| host.join("tls"));
        let config = match &tls {
            Some(dir) => tls_init(dir),
            None => ServiceConfig {
                files: Vec::new(),
                environment: Vec::new(),
            },
        };
        let files = host.join(format!("system/overlays/extensions/{NAME}"));
        fs::create_dir_all(&files).unwrap();
        for (mount_path, content) in &config.files {
            let file = files.join(mount_path.trim_start_matches('/').replace('/', "-"));
            fs::write(&file, content).unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
            args.push("--mount".into());
            args.push(format!(
                "type=bind,src={},dst={mount_path},options=ro:bind",
                file.display()
            ));
        }
        // The spec's environment, then the config's (runc keeps the last of
        // a repeated name). Port 0: parallel tests on the host network.
        let mut env = spec.environment.clone();
        env.extend(config.environment.iter().cloned());
        env.push(if opts.tls {
            "SANDBOX_READINESS_LISTEN=[::]:0".into()
        } else {
            "SANDBOX_READINESS_LISTEN=127.0.0.1:0".into()
        });
        env.extend(opts.env.iter().cloned());
        for e in &env {
            args.push("--env".into());
            args.push(e.clone());
        }
        // `--seccomp` is applied after the capabilities, as machined does.
        args.push("--seccomp".into());
        args.push(merged.display().to_string());
        args.push(id.clone());
        args.push(spec.entrypoint.clone());
        args.extend(spec.args.iter().cloned());

        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = ctr(&ctd, &arg_refs);
        assert!(
            started.ok(),
            "ctr run failed: {}\n{}",
            started.stderr,
            ctd.log()
        );
        let init_pid: u32 = fs::read_to_string(host.join("service.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let log_path = host.join("service.log");
        let mut node = Node {
            ctd,
            id,
            tls,
            log_path,
            init_pid,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            env,
        };
        node.addr = node.wait_listening();
        node
    }

    /// The service's log (stdout and stderr), one JSON object per line.
    fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_events(&self) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|l| {
                // ctr's file logger writes the raw stream.
                let start = l.find('{')?;
                serde_json::from_str(&l[start..]).ok()
            })
            .collect()
    }

    fn wait_listening(&self) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self.log_events().iter().find_map(|e| {
                let f = &e["fields"];
                (f["message"].as_str() == Some("listening"))
                    .then(|| f["addr"].as_str()?.parse::<SocketAddr>().ok())
                    .flatten()
            });
            if let Some(addr) = found {
                // [::] takes IPv4 too (the host network is dual-stack);
                // 127.0.0.1 is the name the server certificate holds.
                return SocketAddr::from(([127, 0, 0, 1], addr.port()));
            }
            let running = Path::new(&format!("/proc/{}", self.init_pid)).exists();
            assert!(
                running && Instant::now() < deadline,
                "the service never logged `listening` (running: {running}):\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `check` over mTLS against the agent in the container, on 127.0.0.1.
    fn check(&self, extra: &[&str], limit: Duration) -> common::Run {
        let mut args = Vec::new();
        if let Some(tls) = &self.tls {
            let t = |f: &str| tls.join(f).display().to_string();
            args.extend([
                "--tls-ca".to_string(),
                t("ca.pem"),
                "--tls-cert".into(),
                t("client.pem"),
                "--tls-key".into(),
                t("client-key.pem"),
            ]);
        }
        args.extend([
            "-n".to_string(),
            format!("127.0.0.1:{}", self.addr.port()),
            "-o".into(),
            "json".into(),
        ]);
        args.extend(extra.iter().map(ToString::to_string));
        common::check(&args, limit)
    }

    /// The one node's report from a `check -o json` run.
    fn report(&self, run: &common::Run) -> Value {
        let json = run.json();
        let node = json["nodes"][0].clone();
        assert!(
            node["report"].is_object(),
            "no report from the agent in the container (exit {}): {node:#}\nservice log:\n{}",
            run.code(),
            self.log()
        );
        node
    }

    /// Host pids of the processes in the container's PID namespace.
    fn processes(&self) -> Vec<u32> {
        let ns = fs::read_link(format!("/proc/{}/ns/pid", self.init_pid)).unwrap();
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() == Some(&ns))
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The Containerd helper deletes every task (the shim kills the
        // container), stops containerd and unmounts the overlay under its
        // directory.
        let _ = ctr(&self.ctd, &["tasks", "kill", "-s", "KILL", &self.id]);
    }
}

fn stat_field(pid: u32, index: usize) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(index).map(String::from)
}

fn state(pid: u32) -> Option<String> {
    stat_field(pid, 0)
}

fn ppid(pid: u32) -> Option<u32> {
    stat_field(pid, 1)?.parse().ok()
}

fn status_line(pid: u32, key: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

/// Socket inodes a process holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let t = fs::read_link(e.path()).ok()?;
                    let t = t.to_str()?;
                    t.strip_prefix("socket:[")
                        .and_then(|s| s.strip_suffix(']'))
                        .map(String::from)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The inode of the TCP socket listening on `port` (IPv4 or IPv6 table).
fn listening_inode(port: u16) -> Option<String> {
    let hex = format!("{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|t| {
        fs::read_to_string(t).ok()?.lines().skip(1).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            (local_port == hex && f.get(3) == Some(&"0A"))
                .then(|| f.get(9).map(|s| s.to_string()))?
        })
    })
}

fn userns_outcome(node: &Value, probe: &str) -> String {
    node["report"]["userNamespaces"][probe]["outcome"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

// ------------------------------------------------------------------ tests

/// The container really has what machined gives an extension service.
#[test]
fn the_container_gets_the_spec_machined_builds() {
    let node = Node::start(NodeOptions::default());
    let info = ctr(&node.ctd, &["containers", "info", &node.id]);
    assert!(info.ok(), "{}", info.stderr);
    let info: Value = serde_json::from_str(&info.stdout).unwrap();
    let spec = &info["Spec"];
    let process = &spec["process"];

    assert_eq!(
        process["rlimits"],
        serde_json::json!([{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}])
    );
    assert_eq!(process["noNewPrivileges"], true);
    let bounding: Vec<&str> = process["capabilities"]["bounding"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(bounding.contains(&"CAP_SYS_ADMIN"), "{bounding:?}");
    for cap in ["CAP_SYS_BOOT", "CAP_SYS_MODULE"] {
        assert!(!bounding.contains(&cap), "{cap} granted: {bounding:?}");
    }
    assert_eq!(spec["root"]["readonly"], true);
    let namespaces: Vec<&str> = spec["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["type"].as_str())
        .collect();
    assert_eq!(
        namespaces,
        ["pid", "ipc", "uts", "mount"],
        "host network only"
    );
    let mounts = spec["mounts"].as_array().unwrap();
    assert!(
        !mounts.iter().any(|m| m["destination"]
            .as_str()
            .is_some_and(|d| d.starts_with("/sys/fs/cgroup"))),
        "no cgroup mount in an extension service: {mounts:#?}"
    );
    let run = mounts
        .iter()
        .find(|m| m["destination"] == "/run")
        .expect("/run");
    assert_eq!(run["type"], "tmpfs");
    let seccomp = &spec["linux"]["seccomp"];
    assert_eq!(seccomp["defaultAction"], "SCMP_ACT_ERRNO");
    let allowed: Vec<&str> = seccomp["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["names"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert!(!allowed.contains(&"pivot_root"));
    for needed in ["unshare", "mount_setattr", "fsmount", "open_tree"] {
        assert!(allowed.contains(&needed), "{needed} not allowed");
    }
    // The spec's environment, then the config's (runc keeps the last of a
    // repeated name); ctr adds HOSTNAME with --net-host.
    let env: Vec<&str> = process["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|e| !e.starts_with("HOSTNAME="))
        .collect();
    assert_eq!(env, node.env, "environment order");
    assert!(node.env[0].starts_with("SANDBOX_READINESS_LOG_FORMAT="));

    // And the running process has it.
    let pid = node.init_pid;
    assert_eq!(status_line(pid, "Seccomp:"), "2");
    assert_eq!(status_line(pid, "NoNewPrivs:"), "1");
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let nofile = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        nofile.split_whitespace().collect::<Vec<_>>()[3..5],
        ["1024", "1024"],
        "{nofile}"
    );
    let mountinfo = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    assert!(
        !mountinfo.contains(" cgroup2 ") && !mountinfo.contains(" cgroup "),
        "{mountinfo}"
    );
}

/// `serve` answers `check` over mTLS from outside the container, and its
/// report's CRI tier reached containerd 2.1 through the read-only bind.
#[test]
fn serve_answers_check_over_mtls_and_reaches_the_cri() {
    let node = Node::start(NodeOptions::default());
    let run = node.check(
        &[
            "--require-userns",
            "--require-idmap-mounts",
            "--require-runtime-handler",
            "runsc",
        ],
        Duration::from_secs(30),
    );
    let n = node.report(&run);
    let cri = &n["report"]["gvisor"]["cri"];
    assert_eq!(cri["reachable"], true, "{cri:#}");
    assert_eq!(cri["endpoint"], "unix:///run/containerd/containerd.sock");
    assert!(
        cri["runtimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("2.1.")),
        "{cri:#}"
    );
    assert_eq!(cri["handlersSource"], "runtime_handlers", "{cri:#}");
    assert!(
        cri["handlers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == "runsc"),
        "{cri:#}"
    );
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);

    // Without a client certificate the agent refuses to answer.
    let tls = node.tls.as_ref().unwrap();
    let plain = common::check(
        &common::args(&[
            "--tls-ca",
            tls.join("ca.pem").to_str().unwrap(),
            "-n",
            &format!("127.0.0.1:{}", node.addr.port()),
            "-o",
            "json",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        plain.json()["nodes"][0]["report"].is_null(),
        "answered a client without a certificate: {}",
        plain.stdout
    );
}

/// PID 1 of the container is a reaper whose only job is its child, the
/// agent: the listening socket is the child's.
#[test]
fn the_agent_runs_as_the_child_of_a_reaping_pid_1() {
    let node = Node::start(NodeOptions::default());
    let init = node.init_pid;
    assert!(
        status_line(init, "NSpid:").ends_with("\t1") || status_line(init, "NSpid:").ends_with(" 1"),
        "{}",
        status_line(init, "NSpid:")
    );
    let exe = fs::read_link(format!("/proc/{init}/exe")).unwrap();
    let agents: Vec<u32> = node
        .processes()
        .into_iter()
        .filter(|&p| p != init && ppid(p) == Some(init))
        .filter(|&p| fs::read_link(format!("/proc/{p}/exe")).ok().as_ref() == Some(&exe))
        .collect();
    assert_eq!(
        agents.len(),
        1,
        "PID 1 ({}) must have exactly one child running the agent; processes: {:?}",
        exe.display(),
        node.processes()
    );
    let inode = listening_inode(node.addr.port()).expect("listening socket");
    assert!(
        socket_inodes(agents[0]).contains(&inode),
        "the listening socket belongs to the child"
    );
}

/// A probe child that hangs is killed at the exec timeout; the zombie it
/// leaves behind is orphaned to PID 1, which must reap it.
#[test]
fn no_zombie_after_a_probe_child_is_orphaned() {
    let node = Node::start(NodeOptions {
        hang: true,
        env: vec!["SANDBOX_READINESS_EXEC_TIMEOUT=1s".into()],
        ..NodeOptions::default()
    });
    let run_dir = PathBuf::from(format!("/proc/{}/root/run", node.init_pid));
    // The first observation already ran runsc --version; a refresh runs it
    // again, so runsc has been killed by the time check answers. The refresh
    // may wait for the first observation, and each meets the 1 s hang: more
    // than check's default 5 s on a loaded machine, and this test is about
    // zombies, not latency.
    let run = node.check(&["--refresh", "--timeout", "20s"], Duration::from_secs(30));
    let n = node.report(&run);
    let runsc = n["report"]["gvisor"]["binaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "runsc")
        .cloned()
        .unwrap();
    assert!(
        runsc["error"]
            .as_str()
            .is_some_and(|e| e.contains("did not finish")),
        "{runsc:#}"
    );
    assert!(
        run_dir.join("sr-orphan").exists(),
        "the runsc fixture never started its child"
    );
    // The orphan ends about 2 s after it started.
    common::wait_until(
        Duration::from_secs(15),
        "the orphaned child of runsc to exit",
        || run_dir.join("sr-orphan-exits").exists(),
    );
    let zombies = || -> Vec<u32> {
        node.processes()
            .into_iter()
            .filter(|&p| state(p).as_deref() == Some("Z"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !zombies().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = zombies();
    assert!(
        left.is_empty(),
        "zombies in the container's PID namespace: {:?} (parents {:?})",
        left,
        left.iter().map(|&p| ppid(p)).collect::<Vec<_>>()
    );
}

/// Where runsc cannot work (no cgroup fs, the default seccomp profile has no
/// pivot_root, no `true` in the root), the sandbox probe says SKIPPED and
/// why; the userns and idmap probes pass on this kernel.
#[test]
fn no_false_failure_inside_the_extension_container() {
    let node = Node::start(NodeOptions::default());
    let run = node.check(&["--require-sandbox-probe"], Duration::from_secs(60));
    let n = node.report(&run);
    assert_eq!(
        userns_outcome(&n, "usernsCreate"),
        "PROBE_OUTCOME_PASSED",
        "{n:#}"
    );
    assert_eq!(
        userns_outcome(&n, "idmapMount"),
        "PROBE_OUTCOME_PASSED",
        "{n:#}"
    );
    let sandbox = &n["report"]["gvisor"]["sandbox"];
    assert_eq!(
        sandbox["outcome"], "PROBE_OUTCOME_SKIPPED",
        "the sandbox probe must be skipped here, not failed: {sandbox:#}"
    );
    let why = sandbox["message"].as_str().unwrap_or("").to_lowercase();
    assert!(
        ["cgroup", "seccomp", "pivot_root", "true"]
            .iter()
            .any(|w| why.contains(w)),
        "the skip must say why: {why:?}"
    );
    let codes: Vec<&str> = n["verdict"]["findings"]
        .as_array()
        .map(|f| f.iter().filter_map(|x| x["code"].as_str()).collect())
        .unwrap_or_default();
    assert!(!codes.contains(&"SANDBOX_PROBE_FAILED"), "{codes:?}");
}

/// The CRI canary from inside the extension container, under the spec
/// machined builds (its seccomp profile, no cgroup mount, NOFILE 1024):
/// it asks the host's containerd for a real pod sandbox and removes it.
/// And `--require-sandbox-probe`, whose `runsc do` cannot run there, stands
/// on the gVisor handler's canary, which fails here for want of the shim —
/// a failure about the node, named as such, not SANDBOX_PROBE_NOT_RUN.
#[test]
fn the_canary_runs_from_inside_the_extension_container() {
    let node = Node::start(NodeOptions {
        pod_sandboxes: true,
        env: vec!["SANDBOX_READINESS_ALLOW_CANARY=runc,runsc".into()],
        ..NodeOptions::default()
    });
    let canary = |n: &Value, handler: &str| -> Value {
        n["report"]["canaries"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["handler"] == handler).cloned())
            .unwrap_or_else(|| panic!("no {handler} canary: {n:#}\nservice log:\n{}", node.log()))
    };
    let codes = |n: &Value| -> Vec<String> {
        n["verdict"]["findings"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter_map(|x| Some(x["code"].as_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };

    let run = node.check(&["--require-canary", "runc"], Duration::from_secs(60));
    let n = node.report(&run);
    let runc = canary(&n, "runc");
    assert_eq!(
        runc["result"]["outcome"], "PROBE_OUTCOME_PASSED",
        "{runc:#}"
    );
    assert_eq!(runc["image"], PAUSE_IMAGE, "{runc:#}");
    assert_eq!(run.code(), 0, "{:?}\n{}", codes(&n), run.stderr);

    let run = node.check(&["--require-sandbox-probe"], Duration::from_secs(60));
    let n = node.report(&run);
    let runsc = canary(&n, "runsc");
    assert_eq!(
        runsc["result"]["outcome"], "PROBE_OUTCOME_FAILED",
        "{runsc:#}"
    );
    assert!(
        runsc.to_string().contains("containerd-shim-runsc-v1"),
        "{runsc:#}"
    );
    let codes = codes(&n);
    assert!(
        codes.iter().any(|c| c == "SANDBOX_PROBE_FAILED"),
        "{codes:?}"
    );
    assert!(
        !codes.iter().any(|c| c == "SANDBOX_PROBE_NOT_RUN"),
        "{codes:?}"
    );
    assert_eq!(run.code(), 1);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let left = rt.block_on(canary_sandboxes(&node.ctd)).unwrap();
    assert!(left.is_empty(), "canary sandboxes left behind: {left:?}");
}

/// NOFILE is 1024 before Talos 1.13: the agent sizes its connection and
/// watcher limits to it and says so.
#[test]
fn the_agent_logs_its_limits_sized_to_nofile_1024() {
    let node = Node::start(NodeOptions::default());
    let sized = node.log_events().into_iter().find(|e| {
        let text = e["fields"].to_string().to_lowercase();
        text.contains("1024") && text.contains("connections") && text.contains("watchers")
    });
    assert!(
        sized.is_some(),
        "no log line gives the sized connection and watcher limits for NOFILE 1024:\n{}",
        node.log()
    );
}

/// 1,200 idle connections from 127.0.0.2 change nothing the agent reports
/// about the host and do not shut out a good client on 127.0.0.1: on the
/// mTLS listener (unauthenticated peers never finish a handshake)...
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_on_the_mtls_listener_changes_nothing() {
    idle_flood_changes_nothing(true).await;
}

/// ...and on a plaintext loopback listener, where every idle connection is
/// an accepted HTTP/2 connection holding a descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_on_a_plaintext_listener_changes_nothing() {
    idle_flood_changes_nothing(false).await;
}

async fn idle_flood_changes_nothing(tls: bool) {
    const FLOOD: usize = 1200;
    raise_nofile(FLOOD as u64 + 512);
    let node = Node::start(NodeOptions {
        hang: false,
        tls,
        // Observations often, so a shortage would show within the test.
        env: vec![
            "SANDBOX_READINESS_POLL_INTERVAL=200ms".into(),
            "SANDBOX_READINESS_PROBE_INTERVAL=1s".into(),
        ],
        ..NodeOptions::default()
    });
    let before = node.report(&node.check(&[], Duration::from_secs(30)));
    let key = |n: &Value| {
        (
            n["report"]["fingerprint"].clone(),
            n["report"]["generation"].clone(),
        )
    };

    // Connect in batches; the agent may refuse or close what is over its
    // per-address cap, which is its right: only the attempt matters.
    let target = node.addr;
    let mut held = Vec::new();
    let mut failed = 0usize;
    let mut other_errors = Vec::new();
    for _ in 0..FLOOD / 100 {
        let batch: Vec<_> = (0..100)
            .map(|_| {
                tokio::spawn(async move {
                    let s = tokio::net::TcpSocket::new_v4()?;
                    s.bind(SocketAddr::from(([127, 0, 0, 2], 0)))?;
                    tokio::time::timeout(Duration::from_secs(2), s.connect(target))
                        .await
                        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
                })
            })
            .collect();
        for t in batch {
            match t.await.unwrap() {
                Ok(c) => held.push(c),
                Err(e) => {
                    failed += 1;
                    // The agent's own answers to a flood: shed (reset),
                    // refused, or not accepted in time.
                    use std::io::ErrorKind::*;
                    if !matches!(e.kind(), ConnectionReset | ConnectionRefused | TimedOut) {
                        other_errors.push(e);
                    }
                }
            }
        }
    }
    eprintln!(
        "flood: {} connections held, {failed} refused, reset or not accepted by the agent",
        held.len()
    );
    // A flood that never reached the agent would prove nothing.
    assert!(
        other_errors.is_empty() && !held.is_empty(),
        "the flood did not reach the agent: {other_errors:?}"
    );
    eprintln!(
        "agent fds under the flood: {}",
        fs::read_dir(format!("/proc/{}/fd", node.init_pid))
            .map(|d| d.count())
            .unwrap_or(0)
    );
    // Let several observations run under the flood, then ask as a good
    // client with check's default timeout.
    let observations = |n: &Value| {
        n["report"]["agent"]["observations"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let start = observations(&before);
    let deadline = Instant::now() + Duration::from_secs(20);
    let during = loop {
        let run = tokio::task::block_in_place(|| node.check(&[], Duration::from_secs(30)));
        assert_eq!(
            run.code(),
            0,
            "a good client got no report under the flood: {}\n{}",
            run.stdout,
            run.stderr
        );
        let n = node.report(&run);
        if observations(&n) >= start + 4 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        observations(&during) >= start + 4,
        "the agent did not observe under the flood"
    );
    assert_eq!(
        key(&during),
        key(&before),
        "the report changed under the flood:\nbefore {:#}\nduring {:#}",
        before["report"]["userNamespaces"],
        during["report"]["userNamespaces"]
    );
    let refreshed = node.report(&tokio::task::block_in_place(|| {
        node.check(&["--refresh"], Duration::from_secs(30))
    }));
    assert_eq!(
        key(&refreshed),
        key(&before),
        "a fresh observation under the flood differs"
    );
    assert_eq!(
        userns_outcome(&refreshed, "usernsCreate"),
        "PROBE_OUTCOME_PASSED"
    );
    drop(held);
}

fn raise_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid, initialised rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    assert!(
        lim.rlim_cur >= want,
        "RLIMIT_NOFILE {} < {want}",
        lim.rlim_cur
    );
}

/// The pool-wide configuration (README "One configuration for a whole
/// pool"): one ExtensionServiceConfig for every Machine — gRPC on loopback
/// only, no TLS keys, the kubelet's kubeconfig, the desired state as
/// environment. Kubelet bootstraps after the service started: its
/// kubeconfig and client certificate appear under the bound
/// /etc/kubernetes and /var/lib/kubelet later, laid out as on Talos (the
/// absolute `kubelet-client-current.pem` symlink), and the agent in the
/// container writes its Node's condition onto the real kube-apiserver
/// (tests/support/cluster.rs) over the host network, where the pinned
/// kubectl waits for it.
#[test]
fn the_pool_wide_configuration_reports_through_the_node() {
    use base64::Engine;
    const TYPE: &str = "sandbox-readiness.io/SandboxReady";
    let c = support::cluster::RealCluster::shared();
    // Registered as kubelet registers it, with kubelet's own certificate
    // (DIR/nodes/NAME.{crt,key}), which the container's kubelet layout
    // below carries.
    let (name, _) = c.new_node("pool-worker");
    let mark = c.audit_mark();
    let limit = fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .unwrap()
        .trim()
        .to_string();
    let node = Node::start(NodeOptions {
        tls: false,
        env: vec![
            "SANDBOX_READINESS_KUBECONFIG=/etc/kubernetes/kubeconfig-kubelet".into(),
            "SANDBOX_READINESS_HANDLER_LABELS=true".into(),
            format!("SANDBOX_READINESS_SYSCTL=user.max_user_namespaces={limit}"),
            "SANDBOX_READINESS_REQUIRE_RUNTIME_HANDLER=runsc".into(),
        ],
        ..NodeOptions::default()
    });
    // gRPC on loopback only, no key: nothing of tls init's in the config.
    assert!(
        node.env
            .iter()
            .any(|e| e == "SANDBOX_READINESS_LISTEN=127.0.0.1:0"),
        "{:?}",
        node.env
    );
    assert!(
        !node.env.iter().any(|e| e.contains("TLS")),
        "{:?}",
        node.env
    );
    let listening: Vec<String> = node
        .log_events()
        .iter()
        .filter(|e| e["fields"]["message"] == "listening")
        .filter_map(|e| e["fields"]["addr"].as_str().map(String::from))
        .collect();
    assert!(
        !listening.is_empty() && listening.iter().all(|a| a.starts_with("127.0.0.1:")),
        "{listening:?}"
    );

    // Kubelet bootstraps: its credential, as on Talos, under the binds.
    let host = node.ctd.dir().to_path_buf();
    let nodes = c.dir().join("nodes");
    let cert_pem = fs::read_to_string(nodes.join(format!("{name}.crt"))).unwrap();
    let key_pem = fs::read_to_string(nodes.join(format!("{name}.key"))).unwrap();
    let pki = host.join("var/lib/kubelet/pki");
    fs::create_dir_all(&pki).unwrap();
    let pem_name = "kubelet-client-2026-12-01-00-00-00.pem";
    fs::write(pki.join(pem_name), format!("{cert_pem}{key_pem}")).unwrap();
    std::os::unix::fs::symlink(
        Path::new("/var/lib/kubelet/pki").join(pem_name),
        pki.join("kubelet-client-current.pem"),
    )
    .unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .encode(fs::read_to_string(c.dir().join("ca.crt")).unwrap());
    fs::create_dir_all(host.join("etc/kubernetes")).unwrap();
    fs::write(
        host.join("etc/kubernetes/kubeconfig-kubelet"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: kubelet\n  user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\ncontexts:\n- name: kubelet@local\n  context:\n    cluster: local\n    user: kubelet\ncurrent-context: kubelet@local\n",
            c.server_url()
        ),
    )
    .unwrap();

    // The pinned kubectl, as an operator after a rollout.
    let kubectl = |args: &[&str]| c.kubectl_cmd(args).output().unwrap();
    let out = kubectl(&[
        "wait",
        &format!("--for=condition={TYPE}"),
        &format!("node/{name}"),
        "--timeout=60s",
    ]);
    assert!(
        out.status.success(),
        "kubectl wait: {}\nservice log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.log()
    );
    // The condition (nodes/status) and the labels and annotation (the Node
    // itself) are two writes, as the API has them: read until both landed.
    let read = || {
        let out = kubectl(&["get", "node", &name, "-o", "json"]);
        assert!(out.status.success());
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = read();
    while n["metadata"]["annotations"]["sandbox-readiness.io/desired"].is_null()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        n = read();
    }
    let cond = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == TYPE)
        .cloned()
        .unwrap();
    assert_eq!(cond["status"], "True", "{cond}");
    assert_eq!(cond["reason"], "Converged", "{cond}");
    // kubelet's own condition is untouched.
    assert!(
        n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"),
        "{n:#}"
    );
    let ann = n["metadata"]["annotations"]["sandbox-readiness.io/desired"]
        .as_str()
        .unwrap_or_else(|| panic!("no desired-state annotation: {n:#}"));
    let desired = sandbox_readiness::desired::from_annotation(ann).unwrap();
    assert_eq!(desired.sysctls.len(), 1, "{ann}");
    assert!(
        n["metadata"]["labels"]["sandbox-readiness.io/runsc"].is_string(),
        "{n:#}"
    );
    // Written as the kubelet's identity, from inside the container: the
    // real server's audit log has the agent's writes under that user.
    let who = format!("system:node:{name}");
    let writes = c.audit_wait(
        Duration::from_secs(10),
        mark,
        |e| {
            e["objectRef"]["resource"] == "nodes"
                && e["objectRef"]["name"] == name.as_str()
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("sandbox-readiness/"))
        },
        |w| w.iter().any(|e| e["responseStatus"]["code"] == 200),
    );
    assert!(
        writes.iter().all(|e| e["user"]["username"] == who.as_str()),
        "{writes:#?}"
    );
}
