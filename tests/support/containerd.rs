//! A private, real containerd for tests, in one of two versions:
//! - [`Version::V1`]: Debian's installed `containerd` (bookworm's 1.6.20),
//!   config `version = 2` (the containerd 1.x format), runsc registered
//!   inline under `io.containerd.grpc.v1.cri`;
//! - [`Version::V2`]: sid's containerd 2.1 from the test cache
//!   (scripts/test-env/fetch-debian.sh), config `version = 3` laid out the
//!   way Talos ≥ 1.8 has it: the socket at `<dir>/run/containerd/containerd.sock`
//!   and the gVisor drop-in at `<dir>/etc/cri/conf.d/10-gvisor.part`, pulled
//!   in by `imports` (Talos imports the merged `cri.toml` of that directory),
//!   so the instance directory doubles as a node's host tree. Its runc is
//!   the installed 1.1 unless [`Options::runc_binary`] names another
//!   (`BinaryName`, e.g. sid's runc 1.3, whose idmap support makes containerd
//!   report `userns true`).
//!
//! Both are started as root on their own socket, with root, state, CNI and
//! runc directories inside one temporary directory.
//!
//! ```ignore
//! mod support;
//! let ctd = support::containerd::Containerd::start(support::containerd::Options::with_runsc());
//! // ... ask ctd.endpoint() ...
//! drop(ctd); // containerd, its shims and their children are killed, mounts and files removed
//! ```
//!
//! What containerd 1.6.20's CRI plugin does at startup here (observed, not
//! assumed):
//! - Without `default_runtime_name`, or without a runtime entry of that name,
//!   containerd still starts and serves its socket but skips the CRI plugin
//!   with only a warning ("failed to load plugin io.containerd.grpc.v1.cri"
//!   … "`default_runtime_name` is empty" / "no corresponding runtime
//!   configured"); CRI calls then fail. The config therefore always
//!   registers `runc` as the default.
//! - Without CNI it still starts: it logs "failed to load cni during init"
//!   and reports the `NetworkReady` condition false with reason
//!   `NetworkPluginNotReady`; `RuntimeReady` is true. The CNI dirs point into
//!   the temporary directory so it neither reads nor creates `/etc/cni`.
//! - The socket appears a few milliseconds before the CRI service is
//!   initialized; until then every CRI call fails with "server is not
//!   initialized yet". Readiness is therefore "CRI Version answered", not
//!   "socket exists". Startup takes about 0.1 s on this machine.
//! - It fills no `runtime_handlers` (its vendored cri-api predates the
//!   field); the runtimes appear only in the verbose Status
//!   `info["config"]` JSON, with other `info` values (`lastCNILoadStatus` =
//!   `OK`) not being JSON.
//! - It creates nothing outside the paths in the config once `/opt`
//!   (`io.containerd.internal.v1.opt`) is disabled; with no debug or metrics
//!   address it opens no other socket, and the CRI stream server listens on
//!   an ephemeral 127.0.0.1 port. The snapshotters this machine cannot use
//!   (aufs, btrfs, devmapper, zfs) are disabled so they do not log failures.
//! - runc's state root defaults to the global `/run/containerd/runc`; the
//!   config sets the runc runtime's `Root` option into the temporary
//!   directory for containers the CRI plugin would start (not exercised
//!   here: a pod needs the pause image, and there is no registry offline).
//! - Shims outlive containerd by design: SIGTERM to containerd leaves them
//!   (and their containers) running. containerd 1.6 also puts every shim's
//!   socket in the global `/run/containerd/s/<sha256(address/ns/id)>`,
//!   whatever the config says, and `ctr` defaults its FIFOs and runc root to
//!   `/run/containerd` too (pass `--fifo-dir` and `--runc-root` under
//!   [`Containerd::dir`]). Drop therefore first deletes every task through
//!   containerd (`ctr tasks delete --force`, so shims exit the normal way),
//!   then stops containerd (SIGTERM, SIGKILL after 5 s), then kills whatever
//!   still has its command line or cwd in the directory plus all descendants
//!   (a crashed containerd cannot be asked), detaches mounts under the
//!   directory, removes leftover shim sockets of this instance (the hash
//!   names our private address, so they cannot be another containerd's) and
//!   the shared socket directories when empty, and deletes the directory.
//!   Measured here: a start until CRI answers takes 0.09–0.2 s.
//!
//! Tests run in parallel: every instance has its own directory, sockets and
//! config, so instances never collide with each other or with a system
//! containerd. Nothing here uses `PR_SET_PDEATHSIG` (it fires when the
//! spawning *thread* exits, which in a test harness is too early); a test
//! process killed with SIGKILL can therefore leave a containerd behind, whose
//! command line names its temporary directory.

#![allow(dead_code)]

use std::{
    fs,
    io::{BufRead, BufReader},
    os::unix::{
        fs::{FileTypeExt, MetadataExt},
        process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use sandbox_readiness::proto::cri::{runtime_service_client::RuntimeServiceClient, VersionRequest};

/// How long containerd may take to serve CRI before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long containerd gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long one `ctr` call may take during teardown.
const CTR_TIMEOUT: Duration = Duration::from_secs(10);
/// Where containerd 1.6 puts shim sockets, whatever its config says
/// (`runtime/v2/shim` `SocketAddress`: `/run/containerd/s/<sha256>`).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";
/// sun_path is 108 bytes including the NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The runsc shim config the Talos gVisor extension ships (empty flags).
pub const DEFAULT_RUNSC_CONFIG: &str = "[runsc_config]\n";

/// Which containerd runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Version {
    /// The installed 1.x (Debian 12's 1.6.20).
    #[default]
    V1,
    /// sid's 2.1 from the test cache, config version 3.
    V2,
}

/// What the generated config registers.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub version: Version,
    /// Register the `runsc` handler (`io.containerd.runsc.v1`) with a
    /// `ConfigPath` file in the instance directory (for 2.x: as Talos's
    /// gVisor extension does, in an imported `10-gvisor.part`).
    pub runsc: bool,
    /// Contents of that `ConfigPath` file; [`DEFAULT_RUNSC_CONFIG`] if empty.
    pub runsc_config: String,
    /// The runc runtime's `BinaryName`; the installed runc when `None`.
    pub runc_binary: Option<PathBuf>,
    /// The runtime's sandbox (pause) image: 1.x `sandbox_image`, 2.x the
    /// pinned `sandbox` image. Unset: the runtime's default.
    pub sandbox_image: Option<String>,
    /// `restrict_oom_score_adj = true`: this VM's root lacks
    /// CAP_SYS_RESOURCE, so a sandbox's default oom_score_adj (-998) cannot
    /// be set and runc fails with "can't get final child's PID from pipe:
    /// EOF". A real node has the capability; pod sandboxes need this here.
    pub restrict_oom_score_adj: bool,
    /// A directory put first on containerd's PATH, where it looks for the
    /// shim of a runtime type (`containerd-shim-runsc-v1` for runsc): a
    /// test's own shim directory, whose shim it can remove and restore.
    pub shim_dir: Option<PathBuf>,
    /// Register runsc without its options table (`TypeUrl`, `ConfigPath`),
    /// for [`runc_shim_as_runsc`]: runc's shim refuses the options of
    /// another runtime type, and without any it starts the sandbox.
    pub runsc_without_options: bool,
}

impl Options {
    /// runc only: what a node without gVisor has.
    pub fn runc_only() -> Self {
        Self::default()
    }

    /// runc plus runsc, registered the way gVisor's docs say for 1.x.
    pub fn with_runsc() -> Self {
        Self {
            runsc: true,
            ..Self::default()
        }
    }

    /// containerd 2.1 with Talos's gVisor drop-in imported.
    pub fn containerd2_with_runsc() -> Self {
        Self {
            version: Version::V2,
            runsc: true,
            ..Self::default()
        }
    }

    /// The runc runtime runs this binary (`BinaryName`).
    pub fn runc_binary(mut self, runc: PathBuf) -> Self {
        self.runc_binary = Some(runc);
        self
    }

    /// containerd 2.1 whose runsc handler runs [`runc_shim_as_runsc`]'s
    /// stand-in shim from `shim_dir` (first on containerd's PATH), so a
    /// runsc canary can pass here although Debian ships no runsc shim.
    pub fn runsc_shim_in(mut self, shim_dir: PathBuf) -> Self {
        self.shim_dir = Some(shim_dir);
        self.runsc_without_options = true;
        self
    }

    /// Pod sandboxes can start: `image` is the sandbox image, and the
    /// oom_score_adj this VM cannot set is restricted (see the field).
    pub fn pod_sandboxes(mut self, image: &str) -> Self {
        self.sandbox_image = Some(image.to_string());
        self.restrict_oom_score_adj = true;
        self
    }
}

/// A running private containerd. Dropping it stops everything it started.
pub struct Containerd {
    child: Option<Child>,
    // Option so Drop can clean up before the directory is removed.
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    socket: PathBuf,
    config_path: PathBuf,
    runsc_config_path: Option<PathBuf>,
    log_path: PathBuf,
    /// The `ctr` matching this containerd.
    ctr_bin: PathBuf,
    version: Version,
}

impl Containerd {
    /// Starts containerd and waits until its CRI service answers Version.
    /// Panics (after cleaning up) with containerd's log if it does not.
    pub fn start(opts: Options) -> Self {
        ensure_root();
        let (binary, bin_dir) = match opts.version {
            Version::V1 => (ensure_installed(), None),
            Version::V2 => {
                let bin_dir = super::testenv::containerd2_bin_dir();
                (bin_dir.join("containerd"), Some(bin_dir))
            }
        };
        let ctr_bin = match &bin_dir {
            Some(d) => d.join("ctr"),
            None => which("ctr").unwrap_or_else(|| PathBuf::from("ctr")),
        };

        let dir = tempfile::Builder::new()
            .prefix("ctd-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let dir_path = dir.path().to_path_buf();
        let socket = match opts.version {
            Version::V1 => dir_path.join("containerd.sock"),
            // Where a Talos node has it, so the directory is a host tree.
            Version::V2 => dir_path.join("run/containerd/containerd.sock"),
        };
        if let Some(parent) = socket.parent() {
            fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        let ttrpc = socket.with_extension("sock.ttrpc");
        let socket_len = ttrpc.as_os_str().len();
        assert!(
            socket_len <= MAX_SOCKET_PATH,
            "socket path {} is {socket_len} bytes, over the unix limit; set TMPDIR to a shorter directory",
            ttrpc.display()
        );

        let conf_d = dir_path.join("etc/cri/conf.d");
        let runsc_config_path = opts.runsc.then(|| match opts.version {
            Version::V1 => dir_path.join("runsc.toml"),
            Version::V2 => conf_d.join("runsc.toml"),
        });
        if let Some(p) = &runsc_config_path {
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
            }
            let body = if opts.runsc_config.is_empty() {
                DEFAULT_RUNSC_CONFIG
            } else {
                opts.runsc_config.as_str()
            };
            write(p, body);
        }
        let config_path = dir_path.join("config.toml");
        let config = match opts.version {
            Version::V1 => config_toml(
                &dir_path,
                &socket,
                &ttrpc,
                runsc_config_path.as_deref(),
                &opts,
            ),
            Version::V2 => {
                let drop_in = runsc_config_path.as_deref().map(|cfg| {
                    let part = conf_d.join("10-gvisor.part");
                    let body = if opts.runsc_without_options {
                        GVISOR_PART_WITHOUT_OPTIONS.to_string()
                    } else {
                        gvisor_part(cfg)
                    };
                    write(&part, &body);
                    part
                });
                config_toml_v3(&dir_path, &socket, &ttrpc, drop_in.as_deref(), &opts)
            }
        };
        write(&config_path, &config);

        let log_path = dir_path.join("containerd.log");
        let log = fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log2 = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot dup the log file: {e}"));
        let mut cmd = Command::new(&binary);
        // containerd finds its shims on PATH: the test's shim directory
        // first, then containerd-shim-runc-v2 of its own.
        let first: Vec<PathBuf> = opts.shim_dir.iter().chain(&bin_dir).cloned().collect();
        if !first.is_empty() {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let joined =
                std::env::join_paths(first.into_iter().chain(std::env::split_paths(&path)))
                    .unwrap_or_else(|e| panic!("cannot build PATH: {e}"));
            cmd.env("PATH", joined);
        }
        let child = cmd
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a terminal's Ctrl-C goes to the test,
            // whose Drop then stops containerd in order.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));

        let mut me = Self {
            child: Some(child),
            dir: Some(dir),
            dir_path,
            socket,
            config_path,
            runsc_config_path,
            log_path,
            ctr_bin,
            version: opts.version,
        };
        // On panic `me` is dropped during unwinding, which cleans up.
        if let Err(why) = me.wait_ready() {
            panic!(
                "private containerd did not start: {why}\n--- containerd log (last lines) ---\n{}",
                me.log_tail(25)
            );
        }
        me
    }

    /// The socket, as a CRI endpoint (`unix:///...`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The instance's private directory (root, state, config, log). For
    /// [`Version::V2`] also a node's host tree: `run/containerd/containerd.sock`
    /// and `etc/cri/conf.d` are where Talos has them.
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// Which containerd this is.
    pub fn version(&self) -> Version {
        self.version
    }

    /// containerd's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The generated `config.toml`.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The `ConfigPath` file the runsc handler names, when registered.
    pub fn runsc_config_path(&self) -> Option<&Path> {
        self.runsc_config_path.as_deref()
    }

    /// containerd's whole log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("the socket never appeared");
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("containerd exited early with {status}"));
                }
            }
            if is_socket(&self.socket) {
                match cri_version(&self.socket) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = e,
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "CRI on {} did not answer Version within {START_TIMEOUT:?} (last: {last})",
                    self.socket.display()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ctr` bound to this instance (its address); add `-n`, a subcommand…
    /// Containers started with it should also get `--fifo-dir` and
    /// `--runc-root` under [`Containerd::dir`], or ctr puts those in the
    /// global `/run/containerd`.
    pub fn ctr(&self) -> Command {
        let mut c = Command::new(&self.ctr_bin);
        c.arg("--address").arg(&self.socket);
        c
    }

    /// Runs `ctr` with a timeout; stdout on success.
    fn ctr_output(&self, args: &[&str]) -> Option<String> {
        let mut child = self
            .ctr()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut stdout = child.stdout.take()?;
        // Read on a thread so a full pipe cannot stall the timeout loop.
        let reader = thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
            s
        });
        let status = wait_timeout(&mut child, CTR_TIMEOUT)?;
        let out = reader.join().ok()?;
        status.success().then_some(out)
    }

    /// Deletes every task through containerd, so the shims shut down the
    /// normal way: they kill their containers, unmount, and remove their
    /// sockets (which containerd 1.6 keeps in the global `/run/containerd/s`).
    fn delete_tasks(&self) {
        if !self.ctr_bin.is_file() {
            return;
        }
        let Some(namespaces) = self.ctr_output(&["namespaces", "ls", "-q"]) else {
            return;
        };
        for ns in namespaces.split_whitespace() {
            let Some(tasks) = self.ctr_output(&["-n", ns, "tasks", "ls", "-q"]) else {
                continue;
            };
            for id in tasks.split_whitespace() {
                let _ = self.ctr_output(&["-n", ns, "tasks", "delete", "--force", id]);
            }
        }
    }

    /// `(namespace, id)` of every shim bundle under the state directory.
    fn bundles(&self) -> Vec<(String, String)> {
        let root = self.dir_path.join("state/io.containerd.runtime.v2.task");
        let mut found = Vec::new();
        for ns in fs::read_dir(root).into_iter().flatten().flatten() {
            for id in fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                found.push((
                    ns.file_name().to_string_lossy().into_owned(),
                    id.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
        found
    }

    fn stop(&mut self) {
        let bundles = self.bundles();
        if self.child.is_some() && !bundles.is_empty() {
            self.delete_tasks();
        }
        if let Some(mut child) = self.child.take() {
            // Graceful first, so containerd closes its bolt database and
            // sockets; SIGKILL if it hangs.
            signal(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        // Whatever the API could not stop: shims that hung or were orphaned.
        kill_processes_under(&self.dir_path);
        unmount_under(&self.dir_path);
        for (ns, id) in &bundles {
            let sock = shim_socket(&self.socket, ns, id);
            // Only when no shim removed it; the name hashes our private
            // socket path, so it cannot be another containerd's.
            if fs::symlink_metadata(&sock).is_ok() {
                let _ = fs::remove_file(&sock);
            }
        }
        // The directories containerd 1.6 creates for shim sockets; kept when
        // anything else (a system containerd, another test) still uses it.
        let _ = fs::remove_dir(SHIM_SOCKET_DIR);
        let _ = fs::remove_dir("/run/containerd");
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                eprintln!("warning: cannot remove {}: {e}", self.dir_path.display());
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What an instance directory still has on the host: processes whose command
/// line or cwd is in it, mounts under it, and whether it still exists. Empty
/// after a clean stop.
pub fn leftovers(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = processes_under(dir)
        .into_iter()
        .map(|(pid, what)| format!("process {pid}: {what}"))
        .collect();
    found.extend(
        mounts_under(dir)
            .into_iter()
            .map(|m| format!("mount {}", m.display())),
    );
    if dir.exists() {
        found.push(format!("directory {} still exists", dir.display()));
    }
    found
}

/// containerd 1.6's shim socket for a task: the SHA-256 of
/// `<grpc address>/<namespace>/<id>` under [`SHIM_SOCKET_DIR`].
pub fn shim_socket(grpc_socket: &Path, ns: &str, id: &str) -> PathBuf {
    let key = format!("{}/{ns}/{id}", grpc_socket.display());
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Path::new(SHIM_SOCKET_DIR).join(hex)
}

fn config_toml(
    dir: &Path,
    socket: &Path,
    ttrpc: &Path,
    runsc_config: Option<&Path>,
    opts: &Options,
) -> String {
    let d = dir.display();
    let mut cri_extra = String::new();
    if let Some(image) = &opts.sandbox_image {
        cri_extra.push_str(&format!("  sandbox_image = \"{image}\"\n"));
    }
    if opts.restrict_oom_score_adj {
        cri_extra.push_str("  restrict_oom_score_adj = true\n");
    }
    let mut toml = format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{ttrpc}"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
{cri_extra}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/net.d"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
"#,
        socket = socket.display(),
        ttrpc = ttrpc.display(),
    );
    if let Some(runc) = &opts.runc_binary {
        toml.push_str(&format!("        BinaryName = \"{}\"\n", runc.display()));
    }
    if let Some(cfg) = runsc_config {
        toml.push_str(&format!(
            r#"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "{}"
"#,
            cfg.display()
        ));
    }
    toml
}

/// Talos's gVisor extension drop-in (`container-runtime/gvisor` in
/// siderolabs/extensions, `10-gvisor.part` since v1.10), with its
/// `ConfigPath` moved into the instance.
fn gvisor_part(runsc_config: &Path) -> String {
    format!(
        r#"[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "{}"
"#,
        runsc_config.display()
    )
}

/// [`gvisor_part`] without its options table, for the stand-in shim.
const GVISOR_PART_WITHOUT_OPTIONS: &str = r#"[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
"#;

/// A stand-in for `containerd-shim-runsc-v1` in `dir`: a copy of containerd
/// 2.1's `containerd-shim-runc-v2` under runsc's shim name (Debian ships no
/// runsc shim; gvisor_e2e.rs runs Debian's runsc itself). containerd starts
/// it for the runsc handler as it would gVisor's (by the runtime type's
/// binary name on PATH), and it starts the pod sandbox with runc: what is
/// real is containerd resolving, failing for want of, and later finding
/// the runsc handler's shim. Use with [`Options::runsc_shim_in`]. Returns
/// the shim's path.
pub fn runc_shim_as_runsc(dir: &Path) -> PathBuf {
    let runc_shim = super::testenv::containerd2_bin_dir().join("containerd-shim-runc-v2");
    let shim = dir.join("containerd-shim-runsc-v1");
    fs::copy(&runc_shim, &shim)
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", runc_shim.display()));
    shim
}

/// containerd 2.x's config (version 3): CRI split into
/// `io.containerd.cri.v1.runtime` / `.images` plus the `io.containerd.grpc.v1.cri`
/// server, the drop-in pulled in by `imports` as Talos's
/// `/etc/cri/containerd.toml` does (`hack/cri-containerd.toml`).
fn config_toml_v3(
    dir: &Path,
    socket: &Path,
    ttrpc: &Path,
    drop_in: Option<&Path>,
    opts: &Options,
) -> String {
    let d = dir.display();
    let imports = drop_in
        .map(|p| format!("\"{}\"", p.display()))
        .unwrap_or_default();
    let mut toml = format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"
imports = [{imports}]
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{ttrpc}"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = {restrict}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{d}/cni/bin"]
    conf_dir = "{d}/cni/net.d"

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "{d}/runc"
"#,
        socket = socket.display(),
        ttrpc = ttrpc.display(),
        restrict = opts.restrict_oom_score_adj,
    );
    if let Some(runc) = &opts.runc_binary {
        toml.push_str(&format!("        BinaryName = \"{}\"\n", runc.display()));
    }
    if let Some(image) = &opts.sandbox_image {
        toml.push_str(&format!(
            "\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"{image}\"\n"
        ));
    }
    toml
}

fn write(path: &Path, body: &str) {
    fs::write(path, body).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn is_socket(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

fn ensure_root() {
    let uid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    assert_eq!(
        uid, 0,
        "the containerd tests need root (containerd manages mounts and cgroups); running as uid {uid}"
    );
}

/// Finds containerd (scripts/install-test-deps.sh installs Debian's).
fn ensure_installed() -> PathBuf {
    which("containerd").unwrap_or_else(|| {
        panic!("containerd is not installed (scripts/install-test-deps.sh installs it)")
    })
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The sandbox image the runtimes of `Options::pod_sandboxes` are given.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The pause image as an OCI archive in `dir` (the runtime's own
/// directory, removed with it): busybox-static sleeping forever.
pub fn pause_archive(dir: &Path) -> PathBuf {
    let dir = dir.join("pause");
    let layout = dir.join("layout");
    let image = format!("{}:3.10", layout.display());
    let bundle = dir.join("bundle");
    let sh = |args: &[&str]| {
        let st = Command::new("umoci")
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("umoci: {e} (scripts/install-test-deps.sh installs it)"));
        assert!(st.success(), "umoci {args:?}: {st}");
    };
    sh(&["init", "--layout", layout.to_str().unwrap()]);
    sh(&["new", "--image", &image]);
    sh(&["unpack", "--image", &image, bundle.to_str().unwrap()]);
    std::fs::create_dir_all(bundle.join("rootfs/bin")).unwrap();
    std::fs::copy("/bin/busybox", bundle.join("rootfs/bin/busybox"))
        .expect("busybox-static (scripts/install-test-deps.sh installs it)");
    sh(&["repack", "--image", &image, bundle.to_str().unwrap()]);
    sh(&[
        "config",
        "--image",
        &image,
        "--config.entrypoint",
        "/bin/busybox",
        "--config.cmd",
        "sleep",
        "--config.cmd",
        "2147483647",
    ]);
    let archive = dir.join("pause.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(&archive)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    archive
}

/// Imports the pause image into the runtime's CRI namespace, labelled
/// pinned as containerd labels the sandbox image it pulls itself.
pub fn import_pause(ctd: &Containerd) {
    import_pause_archive(ctd, &pause_archive(ctd.dir()));
}

/// [`import_pause`] of an archive built beforehand ([`pause_archive`]), so
/// a test can time the import alone.
pub fn import_pause_archive(ctd: &Containerd, archive: &Path) {
    let mut cmd = ctd.ctr();
    cmd.args([
        "-n",
        "k8s.io",
        "images",
        "import",
        "--base-name",
        "registry.k8s.io/pause",
    ]);
    if ctd.version() == Version::V2 {
        cmd.args(["--label", "io.cri-containerd.pinned=pinned"]);
    }
    let out = cmd.arg(archive).output().unwrap();
    assert!(
        out.status.success(),
        "ctr import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sandboxes carrying the canary label, listed through the CRI without a
/// filter (a runtime ignoring filters must not hide one).
pub async fn canary_sandboxes(ctd: &Containerd) -> Result<Vec<String>, String> {
    let channel = cri_channel(ctd.socket()).await?;
    let mut client = RuntimeServiceClient::new(channel);
    let list =
        client.list_pod_sandbox(sandbox_readiness::proto::cri::ListPodSandboxRequest::default());
    let items = tokio::time::timeout(Duration::from_secs(2), list)
        .await
        .map_err(|_| "ListPodSandbox did not answer".to_string())?
        .map_err(|s| s.to_string())?
        .into_inner()
        .items;
    Ok(items
        .into_iter()
        .filter(|s| {
            s.labels
                .contains_key(sandbox_readiness::observe::canary::LABEL)
        })
        .map(|s| s.id)
        .collect())
}

/// A gRPC channel to the CRI socket at `socket`.
pub async fn cri_channel(socket: &Path) -> Result<tonic::transport::Channel, String> {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::try_from("http://[::]")
        .map_err(|e| e.to_string())?
        .connect_with_connector(tower::service_fn(move |_| {
            let s = socket.clone();
            async move {
                tokio::net::UnixStream::connect(s)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// One CRI Version call, on a private runtime in a private thread so this
/// works from sync tests and from inside `#[tokio::test]` alike.
fn cri_version(socket: &Path) -> Result<(), String> {
    let socket = socket.to_path_buf();
    thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        rt.block_on(async move {
            let call = async {
                let channel = cri_channel(&socket).await?;
                RuntimeServiceClient::new(channel)
                    .version(VersionRequest {
                        version: "0.1.0".into(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|s| format!("Version: {:?}: {}", s.code(), s.message()))
            };
            tokio::time::timeout(Duration::from_secs(2), call)
                .await
                .map_err(|_| "Version did not answer within 2s".to_string())?
        })
    })
    .join()
    .map_err(|_| "the readiness probe thread panicked".to_string())?
}

fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // Never 0 or negative, which would signal whole process groups.
    if pid > 0 {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Processes whose command line mentions `dir` or whose cwd is in it:
/// containerd itself, its shims (started with `-address <dir>/...` in a
/// bundle directory under the state dir).
fn processes_under(dir: &Path) -> Vec<(u32, String)> {
    // The trailing slash keeps /tmp/ctd-abc from matching /tmp/ctd-abcd.
    let needle = format!("{}/", dir.to_string_lossy());
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || is_zombie(pid) {
            continue;
        }
        let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
        if cmdline.contains(&needle) || cwd.starts_with(dir) {
            found.push((pid, cmdline.trim().to_string()));
        }
    }
    found
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return kids;
    };
    for t in tasks.flatten() {
        let path = t.path().join("children");
        if let Ok(s) = fs::read_to_string(path) {
            kids.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    kids
}

/// Kills the shims and everything below them (the containers' processes,
/// which the shim reaps as subreaper), waiting until they are gone.
fn kill_processes_under(dir: &Path) {
    let mut victims: Vec<u32> = processes_under(dir).into_iter().map(|(p, _)| p).collect();
    let mut i = 0;
    while i < victims.len() {
        for kid in children_of(victims[i]) {
            if !victims.contains(&kid) {
                victims.push(kid);
            }
        }
        i += 1;
    }
    for &pid in &victims {
        signal(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while victims.iter().any(|&p| !is_zombie(p)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
}

fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(f) = fs::File::open("/proc/self/mountinfo") else {
        return Vec::new();
    };
    BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| line.split(' ').nth(4).map(unescape_mountinfo))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let mut mounts = mounts_under(dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    for m in mounts {
        let Ok(c) = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call;
        // umount2 does not keep the pointer.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            eprintln!(
                "warning: cannot unmount {}: {}",
                m.display(),
                std::io::Error::last_os_error()
            );
        }
    }
}
