//! What the agent does where it really runs on a Talos node: as PID 1 of its
//! own PID namespace, with 1,024 descriptors, under a seccomp filter, without
//! a cgroup mount. Each test starts the real binary; the ones that need root
//! (unshare, runsc) say so when they fail.
//!
//! Self-contained: its helpers are here, not in tests/common.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    fs,
    io::{BufRead, BufReader, Read},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
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
