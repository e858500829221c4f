//! The gVisor tiers against fixture host trees laid out like a Talos node
//! with the gVisor extension (reference/talos-extension.md §3.4), and the
//! process-handling faults: a runsc that hangs, one that leaves a setsid
//! child behind, one that floods stderr.
//!
//! The fixture `runsc` is a shell script printing a real release's version:
//! the extension's Go binary cannot run in a fixture tree. The real runsc is
//! exercised in tests/gvisor_runsc.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_readiness::host::HostPaths;
use sandbox_readiness::observe::gvisor::{
    default_runsc_path, default_shim_path, observe_binaries, observe_drop_ins, observe_kvm,
    sandbox_probe, GvisorObserver, PLUGIN_CRI_V1_RUNTIME, PLUGIN_GRPC_V1_CRI, PRECONDITION_KVM,
    RUNSC_RUNTIME_TYPE,
};
use sandbox_readiness::proto::v1::{
    CriRuntime, Gvisor, GvisorReadiness, ProbeOutcome, RuntimeHandler, Sysctl, SysctlState,
};
use sandbox_readiness::report::{gvisor::gvisor_readiness, preconditions::preconditions};
use tempfile::TempDir;

const EXEC_TIMEOUT: Duration = Duration::from_secs(2);

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A Talos node with the gVisor extension installed, as the extension's
/// pkg.yaml lays it out (modes set explicitly: a checkout may lose them).
fn talos_tree() -> TempDir {
    let dir = TempDir::new().unwrap();
    copy_tree(&fixtures().join("talos-gvisor"), dir.path());
    let bin = dir.path().join("usr/local/bin");
    chmod(&bin.join("runsc"), 0o755);
    chmod(&bin.join("containerd-shim-runsc-v1"), 0o755);
    dir
}

fn conf_d(root: &Path) -> PathBuf {
    root.join("etc/cri/conf.d")
}

fn sysctl(name: &str, value: &str) -> Sysctl {
    Sysctl {
        name: name.into(),
        state: SysctlState::Present as i32,
        value: value.into(),
        error: String::new(),
    }
}

/// What containerd 2 reports for the given handler names.
fn live_cri(handlers: &[&str]) -> CriRuntime {
    CriRuntime {
        endpoint: "unix:///run/containerd/containerd.sock".into(),
        reachable: true,
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.4".into(),
        handlers: handlers
            .iter()
            .map(|n| RuntimeHandler {
                name: (*n).into(),
                ..RuntimeHandler::default()
            })
            .collect(),
        handlers_source: "runtime_handlers".into(),
        ..CriRuntime::default()
    }
}

/// Every tier but the live CRI and the smoke probe, observed on `root`.
async fn observe_tree(root: &Path, max_userns: &str, cri: CriRuntime) -> Gvisor {
    let host = HostPaths::under(root);
    let binaries = observe_binaries(
        &default_runsc_path(&host),
        &default_shim_path(&host),
        EXEC_TIMEOUT,
    )
    .await;
    let (drop_ins, configured_handlers) = observe_drop_ins(&host.default_cri_conf_dir(), &host);
    let sysctls = [
        sysctl("user.max_user_namespaces", max_userns),
        sysctl("kernel.yama.ptrace_scope", "2"),
    ];
    let pre = preconditions(&sysctls, &configured_handlers, observe_kvm(&host));
    let mut g = Gvisor {
        binaries,
        drop_ins,
        configured_handlers,
        cri: Some(cri),
        preconditions: pre,
        ..Gvisor::default()
    };
    let (readiness, reasons) = gvisor_readiness(&g);
    g.readiness = readiness as i32;
    g.reasons = reasons;
    g
}

fn readiness(g: &Gvisor) -> GvisorReadiness {
    GvisorReadiness::try_from(g.readiness).unwrap()
}

fn has_reason(g: &Gvisor, needle: &str) -> bool {
    g.reasons.iter().any(|r| r.contains(needle))
}

fn with_kvm_device(root: &Path) {
    fs::create_dir_all(root.join("dev")).unwrap();
    fs::write(root.join("dev/kvm"), "").unwrap();
}

#[tokio::test]
async fn talos_tree_with_kvm_is_ready_and_every_tier_is_filled() {
    let tree = talos_tree();
    let root = tree.path();
    with_kvm_device(root);
    let g = observe_tree(root, "11255", live_cri(&["runc", "runsc", "runsc-kvm"])).await;
    assert_eq!(readiness(&g), GvisorReadiness::Ready, "{:?}", g.reasons);

    let runsc = &g.binaries[0];
    assert_eq!(runsc.name, "runsc");
    assert_eq!(
        runsc.path,
        root.join("usr/local/bin/runsc").display().to_string()
    );
    assert!(runsc.present && runsc.regular_file && runsc.executable && runsc.world_executable);
    assert_eq!(runsc.version, "release-20260810.0");
    assert_eq!(runsc.version_raw, "runsc version release-20260810.0");
    assert_eq!(runsc.error, "");
    let shim = &g.binaries[1];
    assert_eq!(shim.name, "containerd-shim-runsc-v1");
    assert!(shim.present && shim.executable);

    let names: Vec<_> = g
        .drop_ins
        .iter()
        .map(|d| {
            Path::new(&d.path)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "10-gvisor-kvm.part",
            "10-gvisor.part",
            "runsc-kvm.toml",
            "runsc.toml"
        ]
    );
    assert!(g.drop_ins.iter().all(|d| d.parsed), "{:?}", g.drop_ins);

    assert_eq!(
        g.configured_handlers.len(),
        2,
        "{:?}",
        g.configured_handlers
    );
    let kvm = &g.configured_handlers[0];
    assert_eq!(
        (
            kvm.name.as_str(),
            kvm.platform.as_str(),
            kvm.config_path.as_str()
        ),
        ("runsc-kvm", "kvm", "/etc/cri/conf.d/runsc-kvm.toml")
    );
    let runsc_h = &g.configured_handlers[1];
    assert_eq!(
        (
            runsc_h.name.as_str(),
            runsc_h.platform.as_str(),
            runsc_h.config_path.as_str()
        ),
        ("runsc", "", "/etc/cri/conf.d/runsc.toml")
    );
    for h in &g.configured_handlers {
        assert_eq!(h.plugin_key, PLUGIN_CRI_V1_RUNTIME);
        assert_eq!(h.runtime_type, RUNSC_RUNTIME_TYPE);
        assert!(h.config_path_exists, "{h:?}");
        assert!(
            h.source.starts_with(&conf_d(root).display().to_string()),
            "{h:?}"
        );
    }
    let kvm_pre = g
        .preconditions
        .iter()
        .find(|p| p.name == PRECONDITION_KVM)
        .unwrap();
    assert!(kvm_pre.satisfied && kvm_pre.known, "{kvm_pre:?}");
}

#[tokio::test]
async fn kvm_device_seen_through_sys_when_dev_is_private() {
    let tree = talos_tree();
    let root = tree.path();
    let host = HostPaths::under(root);
    assert_eq!(observe_kvm(&host), Some(false));
    fs::create_dir_all(root.join("sys/class/misc/kvm")).unwrap();
    assert_eq!(observe_kvm(&host), Some(true));
}

#[tokio::test]
async fn without_kvm_only_the_kvm_handler_is_noted() {
    let tree = talos_tree();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let kvm_pre = g
        .preconditions
        .iter()
        .find(|p| p.name == PRECONDITION_KVM)
        .unwrap();
    assert!(!kvm_pre.satisfied && kvm_pre.known, "{kvm_pre:?}");
    assert_eq!(readiness(&g), GvisorReadiness::Ready, "{:?}", g.reasons);
    assert!(
        has_reason(
            &g,
            "handler runsc-kvm uses the kvm platform, but /dev/kvm is absent"
        ),
        "{:?}",
        g.reasons
    );

    // With only the kvm handler installed, nothing can start a sandbox.
    fs::remove_file(conf_d(tree.path()).join("10-gvisor.part")).unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc-kvm"])).await;
    assert_eq!(readiness(&g), GvisorReadiness::NotReady, "{:?}", g.reasons);
}

#[tokio::test]
async fn shim_missing() {
    let tree = talos_tree();
    with_kvm_device(tree.path());
    let shim = tree.path().join("usr/local/bin/containerd-shim-runsc-v1");
    fs::remove_file(&shim).unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    assert!(!g.binaries[1].present);
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert_eq!(
        g.reasons,
        [format!(
            "containerd-shim-runsc-v1 is missing at {}",
            shim.display()
        )],
        "exactly one reason"
    );
}

#[tokio::test]
async fn runsc_not_executable_is_not_run() {
    let tree = talos_tree();
    let runsc = tree.path().join("usr/local/bin/runsc");
    chmod(&runsc, 0o644);
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let b = &g.binaries[0];
    assert!(
        b.present && b.regular_file && !b.executable && !b.world_executable,
        "{b:?}"
    );
    assert_eq!(b.version_raw, "", "a non-executable runsc must not be run");
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert!(
        has_reason(
            &g,
            &format!("runsc at {} is not executable", runsc.display())
        ),
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn runsc_executable_by_root_only() {
    let tree = talos_tree();
    let runsc = tree.path().join("usr/local/bin/runsc");
    chmod(&runsc, 0o750);
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let b = &g.binaries[0];
    assert!(b.executable && !b.world_executable, "{b:?}");
    assert_eq!(b.version, "release-20260810.0", "root can still run it");
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert!(has_reason(&g, "runsc needs mode a+rx"), "{:?}", g.reasons);
}

#[tokio::test]
async fn runsc_is_a_directory() {
    let tree = talos_tree();
    let runsc = tree.path().join("usr/local/bin/runsc");
    fs::remove_file(&runsc).unwrap();
    fs::create_dir(&runsc).unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    assert!(g.binaries[0].present && !g.binaries[0].regular_file);
    assert!(has_reason(&g, "is not a regular file"), "{:?}", g.reasons);
}

#[tokio::test]
async fn config_path_missing() {
    let tree = talos_tree();
    fs::remove_file(conf_d(tree.path()).join("runsc.toml")).unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let h = g
        .configured_handlers
        .iter()
        .find(|h| h.name == "runsc")
        .unwrap();
    assert!(!h.config_path_exists);
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert!(
        has_reason(&g, "handler runsc (declared in ")
            && has_reason(
                &g,
                "names ConfigPath /etc/cri/conf.d/runsc.toml, which does not exist"
            ),
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn malformed_drop_in_is_a_finding_and_the_rest_still_counts() {
    let tree = talos_tree();
    let broken = conf_d(tree.path()).join("20-broken.part");
    fs::write(
        &broken,
        "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.x]\nruntime_type = \"io.containerd.runc.v2\n",
    )
    .unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let d = g
        .drop_ins
        .iter()
        .find(|d| d.path == broken.display().to_string())
        .unwrap();
    assert!(!d.parsed);
    assert!(d.error.starts_with("TOML error at line 2"), "{}", d.error);
    assert_eq!(g.configured_handlers.len(), 2);
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert!(
        has_reason(&g, "20-broken.part cannot be used: TOML error at line 2"),
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn malformed_config_path_file_is_a_finding() {
    let tree = talos_tree();
    fs::write(
        conf_d(tree.path()).join("runsc-kvm.toml"),
        "[runsc_config\nplatform = \"kvm\"\n",
    )
    .unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let bad: Vec<_> = g.drop_ins.iter().filter(|d| !d.parsed).collect();
    assert_eq!(bad.len(), 1, "{:?}", g.drop_ins);
    assert!(bad[0].path.ends_with("runsc-kvm.toml"), "{bad:?}");
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
}

#[tokio::test]
async fn config_path_outside_the_drop_in_dir_is_read_under_the_host_root() {
    let tree = talos_tree();
    let root = tree.path();
    fs::create_dir_all(root.join("etc/containerd")).unwrap();
    fs::write(root.join("etc/containerd/runsc.toml"), "[runsc_config\n").unwrap();
    fs::write(
        conf_d(root).join("10-gvisor.part"),
        "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc.options]\nConfigPath = \"/etc/containerd/runsc.toml\"\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n",
    )
    .unwrap();
    let g = observe_tree(root, "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    let h = g
        .configured_handlers
        .iter()
        .find(|h| h.name == "runsc")
        .unwrap();
    assert!(h.config_path_exists, "{h:?}");
    let d = g
        .drop_ins
        .iter()
        .find(|d| d.path.ends_with("etc/containerd/runsc.toml"))
        .unwrap();
    assert!(
        !d.parsed
            && d.error
                .contains("ConfigPath /etc/containerd/runsc.toml is malformed"),
        "{d:?}"
    );
}

#[tokio::test]
async fn containerd_1x_key() {
    let tree = talos_tree();
    let d = conf_d(tree.path());
    fs::remove_file(d.join("10-gvisor.part")).unwrap();
    fs::remove_file(d.join("10-gvisor-kvm.part")).unwrap();
    copy_tree(&fixtures().join("containerd-1.x"), tree.path());
    let g = observe_tree(tree.path(), "11255", live_cri(&["runc", "runsc"])).await;
    assert_eq!(
        g.configured_handlers.len(),
        1,
        "{:?}",
        g.configured_handlers
    );
    let h = &g.configured_handlers[0];
    assert_eq!(
        (h.name.as_str(), h.plugin_key.as_str()),
        ("runsc", PLUGIN_GRPC_V1_CRI)
    );
    assert!(h.config_path_exists);
    assert!(h.source.ends_with("gvisor.part"));
    assert_eq!(readiness(&g), GvisorReadiness::Ready, "{:?}", g.reasons);
}

#[tokio::test]
async fn talos_merged_cri_toml_does_not_duplicate_handlers() {
    let tree = talos_tree();
    let d = conf_d(tree.path());
    let merged = fs::read_to_string(d.join("10-gvisor.part")).unwrap()
        + &fs::read_to_string(d.join("10-gvisor-kvm.part")).unwrap();
    fs::write(d.join("cri.toml"), merged).unwrap();
    let g = observe_tree(tree.path(), "11255", live_cri(&["runsc", "runsc-kvm"])).await;
    assert_eq!(g.drop_ins.len(), 5);
    assert_eq!(
        g.configured_handlers.len(),
        2,
        "{:?}",
        g.configured_handlers
    );
    assert!(g
        .configured_handlers
        .iter()
        .all(|h| h.source.ends_with(".part")));
}

#[tokio::test]
async fn containerd_not_restarted_after_the_extension_appeared() {
    let tree = talos_tree();
    with_kvm_device(tree.path());
    let g = observe_tree(tree.path(), "11255", live_cri(&["runc"])).await;
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert_eq!(g.reasons.len(), 2, "{:?}", g.reasons);
    assert!(
        has_reason(&g, "does not report the runsc handler configured in"),
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn talos_default_max_user_namespaces_is_not_ready() {
    let tree = talos_tree();
    let g = observe_tree(tree.path(), "0", live_cri(&["runsc", "runsc-kvm"])).await;
    assert_eq!(readiness(&g), GvisorReadiness::NotReady);
    assert!(
        has_reason(&g, "user.max_user_namespaces is 0; runsc needs at least 2"),
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn node_without_gvisor_is_not_installed() {
    let tree = TempDir::new().unwrap();
    let g = observe_tree(tree.path(), "0", live_cri(&["runc"])).await;
    assert!(g.drop_ins.is_empty() && g.configured_handlers.is_empty());
    assert_eq!(
        readiness(&g),
        GvisorReadiness::NotInstalled,
        "{:?}",
        g.reasons
    );
}

#[tokio::test]
async fn oversized_and_unreadable_drop_ins() {
    let tree = talos_tree();
    let d = conf_d(tree.path());
    fs::write(d.join("30-huge.toml"), "#".repeat(2 << 20)).unwrap();
    fs::write(d.join("31-binary.part"), [0xff, 0xfe, 0x00]).unwrap();
    fs::create_dir(d.join("40-dir.part")).unwrap();
    fs::write(d.join("README"), "not a drop-in").unwrap();
    let (drop_ins, handlers) = observe_drop_ins(&d, &HostPaths::under(tree.path()));
    assert_eq!(handlers.len(), 2);
    let err = |name: &str| {
        drop_ins
            .iter()
            .find(|x| x.path.ends_with(name))
            .map(|x| x.error.clone())
    };
    assert!(err("30-huge.toml")
        .unwrap()
        .contains("larger than 1048576 bytes"));
    assert!(err("31-binary.part").unwrap().contains("not valid UTF-8"));
    // What a drop-in's name promises but cannot be read is reported, not
    // skipped: the CRI would not read it either.
    assert!(
        err("40-dir.part").unwrap().contains("Is a directory"),
        "{drop_ins:?}"
    );
    assert_eq!(err("README"), None);
}

// ---------------------------------------------------------------------------
// Faults: hanging and misbehaving runsc
// ---------------------------------------------------------------------------

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, body).unwrap();
    chmod(&p, 0o755);
    p
}

fn read_pid(p: &Path) -> i32 {
    // The script writes it before hanging; give it a moment on a busy machine.
    for _ in 0..100 {
        if let Some(pid) = fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} was never written", p.display());
}

/// The process is gone, or dead and waiting for init to reap it.
fn dead(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

fn live_members_of_group(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields after the command: state, ppid, pgrp.
        if f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

fn assert_all_dead(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && !pids.iter().all(|p| dead(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pids {
        assert!(dead(*p), "process {p} is still running");
    }
}

/// A runsc that hangs forever, with a child in its process group.
fn hanging_runsc(dir: &Path) -> PathBuf {
    let d = dir.display();
    script(
        dir,
        "runsc",
        &format!(
            "#!/bin/sh\necho $$ > {d}/pid\nenv > {d}/env\necho \"$@\" > {d}/args\nsleep 1000 &\necho $! > {d}/child\nwait\n"
        ),
    )
}

#[tokio::test]
async fn hanging_runsc_version_is_killed_with_its_group() {
    let dir = TempDir::new().unwrap();
    let runsc = hanging_runsc(dir.path());
    let shim = script(dir.path(), "shim", "#!/bin/sh\n");
    let t0 = Instant::now();
    let b = observe_binaries(&runsc, &shim, Duration::from_millis(800)).await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(
        b[0].error.contains("--version did not finish within 800ms"),
        "{}",
        b[0].error
    );
    assert_eq!(b[0].version, "");

    let (pid, child) = (
        read_pid(&dir.path().join("pid")),
        read_pid(&dir.path().join("child")),
    );
    assert_all_dead(&[pid, child]);
    assert!(live_members_of_group(pid).is_empty());

    // The environment was cleared except for PATH.
    let env = fs::read_to_string(dir.path().join("env")).unwrap();
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(names.contains(&"PATH"), "{names:?}");
    for leaked in ["HOME", "CARGO_MANIFEST_DIR", "RUST_TEST_THREADS", "TMPDIR"] {
        assert!(
            !names.contains(&leaked),
            "{leaked} leaked into runsc's environment: {names:?}"
        );
    }
}

#[tokio::test]
async fn hanging_sandbox_probe_is_killed_and_its_directory_removed() {
    let dir = TempDir::new().unwrap();
    let runsc = hanging_runsc(dir.path());
    let t0 = Instant::now();
    let p = sandbox_probe(&runsc, true, Some("kvm"), Duration::from_secs(1)).await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(p.outcome, ProbeOutcome::Error as i32, "{p:?}");
    assert_eq!(p.errno_name, "ETIMEDOUT");
    assert!(
        p.message
            .contains("did not finish within 1s; its process group was killed"),
        "{}",
        p.message
    );
    assert!(
        p.message.contains("--rootless --platform=kvm do true"),
        "{}",
        p.message
    );

    let (pid, child) = (
        read_pid(&dir.path().join("pid")),
        read_pid(&dir.path().join("child")),
    );
    assert_all_dead(&[pid, child]);

    // The arguments named a private --root, and TMPDIR sat beside it: both gone.
    let args = fs::read_to_string(dir.path().join("args")).unwrap();
    let words: Vec<&str> = args.split_whitespace().collect();
    let root_at = words.iter().position(|w| *w == "--root").unwrap();
    let state = PathBuf::from(words[root_at + 1]);
    assert_eq!(
        &words[..root_at],
        ["--network=none", "--rootless", "--platform=kvm"]
    );
    assert_eq!(&words[root_at + 2..], ["do", "true"]);
    let private = state.parent().unwrap();
    assert!(!private.exists(), "{} was left behind", private.display());
    let env = fs::read_to_string(dir.path().join("env")).unwrap();
    let tmpdir = env.lines().find_map(|l| l.strip_prefix("TMPDIR=")).unwrap();
    assert!(Path::new(tmpdir).starts_with(private), "{tmpdir}");
}

#[tokio::test]
async fn setsid_sandbox_child_is_found_and_killed() {
    // runsc's sandbox calls setsid, leaving runsc's process group; the probe
    // must still kill it. Its command line names the private --root, as the
    // real runsc-sandbox's --root/--bundle flags do.
    let dir = TempDir::new().unwrap();
    let d = dir.path().display();
    let runsc = script(
        dir.path(),
        "runsc",
        &format!(
            "#!/bin/bash\necho $$ > {d}/pid\nwhile [ \"$1\" != --root ]; do shift; done\nsetsid bash -c 'echo $$ > {d}/child; exec -a \"runsc-sandbox --root=$0\" sleep 1000' \"$2\" &\nsleep 1000\n"
        ),
    );
    let p = sandbox_probe(&runsc, false, None, Duration::from_millis(800)).await;
    assert_eq!(p.outcome, ProbeOutcome::Error as i32, "{p:?}");
    let (pid, child) = (
        read_pid(&dir.path().join("pid")),
        read_pid(&dir.path().join("child")),
    );
    assert_all_dead(&[pid, child]);
    assert!(live_members_of_group(child).is_empty());
}

#[tokio::test]
async fn failing_runsc_surfaces_the_last_stderr_line_even_after_a_flood() {
    let dir = TempDir::new().unwrap();
    // 200 KiB of log lines, then the error runsc prints at limit 0.
    let runsc = script(
        dir.path(),
        "runsc",
        "#!/bin/sh\ni=0\nwhile [ $i -lt 2000 ]; do echo \"W1129 16:49:27.827416 8404 util.go:64] log line $i padding padding padding padding\" >&2; i=$((i+1)); done\necho 'creating container: cannot create sandbox: cannot create sandbox process: starting sandbox: fork/exec /proc/self/exe: no space left on device' >&2\necho >&2\nexit 128\n",
    );
    let p = sandbox_probe(&runsc, true, None, Duration::from_secs(10)).await;
    assert_eq!(p.outcome, ProbeOutcome::Failed as i32, "{p:?}");
    assert_eq!(p.errno_name, "ENOSPC");
    assert!(
        p.message.ends_with("exited with status 128: creating container: cannot create sandbox: cannot create sandbox process: starting sandbox: fork/exec /proc/self/exe: no space left on device (user.max_user_namespaces limit reached?)"),
        "{}",
        p.message
    );
}

#[tokio::test]
async fn runsc_that_cannot_be_executed_is_an_error() {
    let dir = TempDir::new().unwrap();
    let p = sandbox_probe(
        &dir.path().join("nope"),
        false,
        None,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(p.outcome, ProbeOutcome::Error as i32);
    assert_eq!(p.errno_name, "ENOENT");
    assert!(p.message.starts_with("could not execute "), "{}", p.message);

    let p = sandbox_probe(
        Path::new("/bin/true"),
        false,
        Some("--evil x"),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(p.outcome, ProbeOutcome::Error as i32);
    assert!(
        p.message
            .contains("refusing to run runsc with the platform"),
        "{}",
        p.message
    );
}

#[tokio::test]
async fn runsc_version_failures() {
    let dir = TempDir::new().unwrap();
    let shim = script(dir.path(), "shim", "#!/bin/sh\n");
    let runsc = script(
        dir.path(),
        "runsc",
        "#!/bin/sh\necho 'flag provided but not defined: -version' >&2\nexit 2\n",
    );
    let b = observe_binaries(&runsc, &shim, EXEC_TIMEOUT).await;
    assert_eq!(
        b[0].error,
        format!(
            "{} --version exited with status 2: flag provided but not defined: -version",
            runsc.display()
        )
    );

    let runsc = script(
        dir.path(),
        "runsc2",
        "#!/bin/sh\necho 'runsc version VERSION_MISSING'\necho 'spec: 1.1.0'\n",
    );
    let b = observe_binaries(&runsc, &shim, EXEC_TIMEOUT).await;
    assert_eq!(
        (b[0].version.as_str(), b[0].error.as_str()),
        ("VERSION_MISSING", "")
    );

    // A file with an execute bit that the kernel refuses to run.
    let runsc = script(dir.path(), "runsc3", "not a script\0\0");
    let b = observe_binaries(&runsc, &shim, EXEC_TIMEOUT).await;
    assert!(
        b[0].error.starts_with("could not execute"),
        "{}",
        b[0].error
    );
}

/// `runsc --version` runs once per binary identity: a second observation of
/// the same file reuses the answer; a rewritten file is asked again.
#[tokio::test]
async fn runsc_version_is_asked_once_per_binary() {
    let dir = tempfile::tempdir().unwrap();
    let runsc = dir.path().join("runsc");
    let calls = dir.path().join("calls");
    let script = |version: &str| {
        format!(
            "#!/bin/sh\necho x >> '{}'\necho 'runsc version {version}'\necho 'spec: 1.1.0'\n",
            calls.display()
        )
    };
    std::fs::write(&runsc, script("release-20260810.0")).unwrap();
    chmod(&runsc, 0o755);
    let shim = dir.path().join("shim");
    let count = || {
        std::fs::read_to_string(&calls)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };

    let observer = GvisorObserver::default();
    let first = observer
        .observe_binaries(&runsc, &shim, Duration::from_secs(2))
        .await;
    let second = observer
        .observe_binaries(&runsc, &shim, Duration::from_secs(2))
        .await;
    assert_eq!(first[0].version, "release-20260810.0");
    assert_eq!(second[0].version, "release-20260810.0");
    assert_eq!(count(), 1, "the unchanged binary was asked again");

    // An upgrade replaces the file: the new version is seen.
    let new = dir.path().join("runsc.new");
    std::fs::write(&new, script("release-20261101.0")).unwrap();
    chmod(&new, 0o755);
    std::fs::rename(&new, &runsc).unwrap();
    let third = observer
        .observe_binaries(&runsc, &shim, Duration::from_secs(2))
        .await;
    assert_eq!(third[0].version, "release-20261101.0");
    assert_eq!(count(), 2);
}
