//! Where the node-faithful test environment keeps its parts: the Debian
//! packages scripts/test-env/fetch-debian.sh extracts into a cache outside the
//! checkout (kernels, containerd 2.1, runc 1.3), and the shipped static musl
//! binary and extension tree scripts/build-extension.sh builds before the slow
//! tier. A missing part fails the test with the command that provides it:
//! these tests exist to run in this environment, so they never skip for want
//! of it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cache fetch-debian.sh fills (`SR_TEST_CACHE`, default
/// `/var/cache/sandbox-readiness-tests`).
pub fn cache() -> PathBuf {
    std::env::var_os("SR_TEST_CACHE")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/sandbox-readiness-tests"))
}

/// A path inside the cache that must exist.
pub fn cached(rel: &str) -> PathBuf {
    let p = cache().join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/test-env/fetch-debian.sh (scripts/install-test-deps.sh runs it)",
        p.display()
    );
    p
}

/// A Debian amd64 kernel of `suite` (bookworm, trixie, sid): its image and
/// release.
pub fn kernel(suite: &str) -> (PathBuf, String) {
    kernel_in(&format!("kernels/{suite}"))
}

/// A Debian arm64 kernel of `suite`: its (uncompressed) Image and release.
pub fn kernel_arm64(suite: &str) -> (PathBuf, String) {
    kernel_in(&format!("kernels/arm64/{suite}"))
}

fn kernel_in(dir: &str) -> (PathBuf, String) {
    let image = cached(&format!("{dir}/vmlinuz"));
    let release = fs::read_to_string(cached(&format!("{dir}/release")))
        .unwrap()
        .trim()
        .to_string();
    (image, release)
}

/// bookworm's arm64 busybox-static, extracted (not installed).
pub fn busybox_arm64() -> PathBuf {
    cached("busybox-arm64/bin/busybox")
}

/// sid's containerd 2.1: the directory holding `containerd`, `ctr` and
/// `containerd-shim-runc-v2`.
pub fn containerd2_bin_dir() -> PathBuf {
    cached("containerd-sid/usr/bin")
}

/// sid's runc 1.3, repointed at sid's libc (idmapped mounts: runc
/// `features` says `idmap.enabled: true`).
pub fn runc13() -> PathBuf {
    cached("runc-sid/runc")
}

/// The cargo target dir of the extension build (`EXTENSION_TARGET_DIR`,
/// default `<repo>/target/extension`, as in scripts/test.sh).
pub fn extension_target_dir() -> PathBuf {
    std::env::var_os("EXTENSION_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/extension"))
}

/// The Cargo profile of the shipped static binaries (Cargo.toml).
pub const SHIP_PROFILE: &str = "ship";

/// The shipped static x86_64 musl binary.
pub fn musl_binary() -> PathBuf {
    musl_binary_for("x86_64-unknown-linux-musl")
}

/// The shipped static musl binary of a Rust target
/// (`x86_64-unknown-linux-musl`, `aarch64-unknown-linux-musl`).
pub fn musl_binary_for(target: &str) -> PathBuf {
    let bin = extension_target_dir().join(format!("{target}/{SHIP_PROFILE}/sandbox-readiness"));
    assert!(
        bin.is_file(),
        "no static musl binary at {}: run scripts/build-extension.sh first (scripts/test.sh does, before the slow tier)",
        bin.display()
    );
    bin
}

/// The controller's image build of a Rust target (`cargo build --profile
/// image -p sandbox-readiness-controller --target …`; scripts/test.sh's
/// shipped builds make both, scripts/build-controller-image.sh packs them).
pub fn controller_musl_binary_for(target: &str) -> PathBuf {
    let bin = extension_target_dir().join(format!("{target}/image/sandbox-readiness-controller"));
    assert!(
        bin.is_file(),
        "no controller musl binary at {}: scripts/test.sh's shipped builds make it",
        bin.display()
    );
    bin
}

/// The operator build (default features: every command) of a Rust target,
/// kept beside the shipped node build by `EXTENSION_OPERATOR=1
/// scripts/build-extension.sh` (scripts/test.sh's shipped builds make it).
pub fn operator_musl_binary_for(target: &str) -> PathBuf {
    let bin = extension_target_dir().join(format!(
        "{target}/{SHIP_PROFILE}/sandbox-readiness-operator"
    ));
    assert!(
        bin.is_file(),
        "no operator musl binary at {}: run EXTENSION_OPERATOR=1 scripts/build-extension.sh first (scripts/test.sh builds it with the shipped builds)",
        bin.display()
    );
    bin
}

/// The extension's amd64 container root (`SR_EXTENSION_OUT`, default
/// `<repo>/out`): `extension/amd64/rootfs/usr/local/lib/containers/sandbox-readiness`.
pub fn extension_container_root() -> PathBuf {
    let out = std::env::var_os("SR_EXTENSION_OUT")
        .filter(|o| !o.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("out"));
    let root = out.join("extension/amd64/rootfs/usr/local/lib/containers/sandbox-readiness");
    assert!(
        root.join("sandbox-readiness").is_file(),
        "no extension tree at {}: run scripts/build-extension.sh first (scripts/test.sh does, before the slow tier)",
        root.display()
    );
    root
}

/// An executable on PATH, or a failure naming the package that provides it.
pub fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not installed: scripts/install-test-deps.sh installs {package}")
        })
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.success()
    }
}

/// Runs `cmd` with output through files (a chatty child never blocks on a
/// pipe) and kills it at `limit`: `Err` then says so, with what it printed.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Finished, String> {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let start = Instant::now();
    let mut child: Child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stdout = String::from_utf8_lossy(&fs::read(&out_path).unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned();
    match status {
        Some(status) => Ok(Finished {
            status,
            stdout,
            stderr,
            took: start.elapsed(),
        }),
        None => Err(format!(
            "{cmd:?} did not finish within {limit:?}; stdout:\n{stdout}\nstderr:\n{stderr}"
        )),
    }
}
