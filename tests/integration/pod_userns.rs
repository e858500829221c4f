//! Pod user-namespace readiness (`--require-pod-userns`) against real
//! runtimes: sid's containerd 2.1 with bookworm's runc 1.1 (which reports
//! `user_namespaces: false`) and with sid's runc 1.3 (`true`), and
//! bookworm's containerd 1.6 (no `runtime_handlers` at all). kubelet reads
//! the same field, so the agent's verdict must match what kubelet would do.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::process::{Command, Stdio};

use support::{
    containerd::{Containerd, Options, Version},
    testenv,
};

/// containerd 2.1 with runc alone (bookworm's unless `runc_binary`).
fn runc_only_v2() -> Options {
    Options {
        version: Version::V2,
        ..Options::default()
    }
}

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");

/// `probe --cri-endpoint … --require-pod-userns HANDLER`: exit code and text.
fn probe(ctd: &Containerd, handlers: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["probe", "--cri-endpoint", &ctd.endpoint()]);
    for h in handlers {
        cmd.args(["--require-pod-userns", h]);
    }
    let out = cmd
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    // Shown with --nocapture: the README's runs come from here.
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn containerd_2_1_with_runc_1_1_is_not_ready_and_says_runc_1_2() {
    let ctd = Containerd::start(runc_only_v2());
    let (code, text) = probe(&ctd, &["runc"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("POD_USERNS_UNSUPPORTED"), "{text}");
    assert!(text.contains("user_namespaces false"), "{text}");
    assert!(text.contains("runc >= 1.2 or crun >= 1.9"), "{text}");
    // The other parts hold on this kernel: only the handler blocks.
    assert!(!text.contains("RUNTIME_STATE_IDMAP_FAILED"), "{text}");
}

#[test]
fn containerd_2_1_with_runc_1_3_is_ready_for_runc_and_the_default_handler() {
    let ctd = Containerd::start(runc_only_v2().runc_binary(testenv::runc13()));
    let (code, text) = probe(&ctd, &["runc", "default"]);
    assert_eq!(code, 0, "{text}\n{}", ctd.log());
    // The runtime's own root directory, from its verbose Status, was
    // really cloned and idmapped.
    let root = ctd.dir().join("root");
    let line = text
        .lines()
        .find(|l| l.contains("idmapped mount (runtime root)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" passed "), "{line}");
    assert!(line.contains(&root.display().to_string()), "{line}");
}

#[test]
fn containerd_2_1_handler_without_features_is_unsupported() {
    // runsc's shim is not installed: containerd reports the handler without
    // features, which kubelet takes as "no user namespaces".
    let ctd = Containerd::start(Options::containerd2_with_runsc().runc_binary(testenv::runc13()));
    let (code, text) = probe(&ctd, &["runsc"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("POD_USERNS_UNSUPPORTED"), "{text}");
    assert!(text.contains("reports no features"), "{text}");
}

#[test]
fn containerd_1_6_is_not_ready_and_says_containerd_2_0() {
    let ctd = Containerd::start(Options::runc_only());
    let (code, text) = probe(&ctd, &["runc"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("POD_USERNS_UNSUPPORTED"), "{text}");
    assert!(text.contains("containerd >= 2.0"), "{text}");
}

/// `probe` (text) with a host root that holds no container runtime at all:
/// no /var/lib/containerd, no CRI socket, no gVisor.
fn probe_without_runtime(extra: &[&str]) -> (i32, String) {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["probe", "--host-root", root.path().to_str().unwrap()])
        .args(extra)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_bare_probe_without_a_runtime_shows_no_failure() {
    let (code, text) = probe_without_runtime(&[]);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains('✗'), "a red cross nobody asked for:\n{text}");
    let line = text
        .lines()
        .find(|l| l.contains("idmapped mount (runtime root)"))
        .unwrap();
    assert!(line.contains("skipped"), "{line}");
    assert!(line.contains("not applicable"), "{line}");
    assert!(line.contains("var/lib/containerd does not exist"), "{line}");
}

#[test]
fn without_a_runtime_root_require_pod_userns_still_fails() {
    let (code, text) = probe_without_runtime(&["--require-pod-userns", "runc"]);
    assert_eq!(code, 1, "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("idmapped mount (runtime root)"))
        .unwrap();
    assert!(line.contains('✗') && line.contains("failed"), "{line}");
    assert!(text.contains("RUNTIME_STATE_IDMAP_FAILED"), "{text}");
}
