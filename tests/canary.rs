//! The CRI canary against a real runtime: sid's containerd 2.1 (and, for
//! the 1.x way of naming the sandbox image, bookworm's 1.6) with a pause
//! image built here from busybox-static (umoci), imported the way the CRI
//! would have pulled it. Every case lists the runtime's sandboxes through
//! the CRI afterwards: the canary must never leave one behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use sandbox_readiness::{
    observe::canary::LABEL,
    proto::{
        cri::{runtime_service_client::RuntimeServiceClient, ListPodSandboxRequest},
        v1::{
            readiness_service_client::ReadinessServiceClient, CheckRequest, DesiredState,
            ProbeOutcome,
        },
    },
};
use support::containerd::{Containerd, Options, Version};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");
const PAUSE: &str = "registry.k8s.io/pause:3.10";

/// The pause image as an OCI archive: busybox-static sleeping forever,
/// built once per test binary.
fn pause_archive() -> &'static Path {
    static ARCHIVE: OnceLock<PathBuf> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("pause-")
            .tempdir()
            .unwrap()
            .keep();
        let layout = dir.join("layout");
        let image = format!("{}:3.10", layout.display());
        let bundle = dir.join("bundle");
        let sh = |args: &[&str]| {
            let st = Command::new("umoci")
                .args(args)
                .status()
                .unwrap_or_else(|e| {
                    panic!("umoci: {e} (scripts/install-test-deps.sh installs it)")
                });
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
    })
}

/// Imports the pause image into the runtime's CRI namespace, labelled
/// pinned as containerd labels the sandbox image it pulls itself.
fn import_pause(ctd: &Containerd) {
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
    let out = cmd.arg(pause_archive()).output().unwrap();
    assert!(
        out.status.success(),
        "ctr import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// containerd 2.1 that can start pod sandboxes (runc, runsc registered
/// without its shim, as Debian ships none).
fn containerd2(with_image: bool) -> Containerd {
    let ctd = Containerd::start(Options::containerd2_with_runsc().pod_sandboxes(PAUSE));
    if with_image {
        import_pause(&ctd);
    }
    ctd
}

/// `probe --cri-endpoint … ARGS -o json`: exit code and the document.
fn probe(ctd: &Containerd, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(BIN)
        .args(["probe", "-o", "json", "--cri-endpoint", &ctd.endpoint()])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), doc)
}

fn canary<'a>(doc: &'a serde_json::Value, handler: &str) -> &'a serde_json::Value {
    doc["report"]["canaries"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["handler"] == handler))
        .unwrap_or_else(|| panic!("no canary for {handler}: {doc:#}"))
}

fn codes(doc: &serde_json::Value) -> Vec<String> {
    doc["verdict"]["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| f["code"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Sandboxes carrying the canary label, listed through the CRI without a
/// filter (a runtime ignoring filters must not hide one).
async fn labelled_sandboxes(ctd: &Containerd) -> Result<Vec<String>, String> {
    let socket = ctd.socket().to_path_buf();
    let channel = tonic::transport::Endpoint::try_from("http://[::]")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let s = socket.clone();
            async move {
                tokio::net::UnixStream::connect(s)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .map_err(|e| e.to_string())?;
    let mut client = RuntimeServiceClient::new(channel);
    let list = client.list_pod_sandbox(ListPodSandboxRequest::default());
    let items = tokio::time::timeout(Duration::from_secs(2), list)
        .await
        .map_err(|_| "ListPodSandbox did not answer".to_string())?
        .map_err(|s| s.to_string())?
        .into_inner()
        .items;
    Ok(items
        .into_iter()
        .filter(|s| s.labels.contains_key(LABEL))
        .map(|s| s.id)
        .collect())
}

fn assert_nothing_left(ctd: &Containerd) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let left = rt.block_on(labelled_sandboxes(ctd)).unwrap();
    assert!(left.is_empty(), "canary sandboxes left behind: {left:?}");
}

#[test]
fn runc_canary_starts_and_removes_a_pod_sandbox() {
    let ctd = containerd2(true);
    let (code, doc) = probe(&ctd, &["--require-canary", "runc"]);
    let c = canary(&doc, "runc");
    assert_eq!(code, 0, "{doc:#}\n{}", ctd.log());
    assert_eq!(c["result"]["outcome"], "PROBE_OUTCOME_PASSED", "{c:#}");
    assert_eq!(c["image"], PAUSE, "{c:#}");
    assert!(!c["sandboxId"].as_str().unwrap().is_empty(), "{c:#}");
    assert!(c["result"]["duration"].as_str().is_some(), "{c:#}");
    assert!(codes(&doc).is_empty(), "{doc:#}");
    assert_nothing_left(&ctd);
}

#[test]
fn runsc_canary_fails_naming_the_missing_shim() {
    let ctd = containerd2(true);
    let (code, doc) = probe(&ctd, &["--require-canary", "runsc"]);
    assert_eq!(code, 1, "{doc:#}");
    let c = canary(&doc, "runsc");
    assert_eq!(c["result"]["outcome"], "PROBE_OUTCOME_FAILED", "{c:#}");
    assert!(
        c["runtimeError"]
            .as_str()
            .unwrap()
            .contains("containerd-shim-runsc-v1"),
        "{c:#}"
    );
    let finding = &doc["verdict"]["findings"][0];
    assert_eq!(finding["code"], "CANARY_FAILED", "{doc:#}");
    let msg = finding["message"].as_str().unwrap();
    assert!(msg.contains("handler runsc"), "{msg}");
    assert!(msg.contains("containerd-shim-runsc-v1"), "{msg}");
    assert_nothing_left(&ctd);
}

#[test]
fn an_absent_sandbox_image_means_not_run_not_failed() {
    let ctd = containerd2(false);
    let (code, doc) = probe(&ctd, &["--require-canary", "runc"]);
    assert_eq!(code, 1, "{doc:#}");
    let c = canary(&doc, "runc");
    assert_eq!(c["result"]["outcome"], "PROBE_OUTCOME_SKIPPED", "{c:#}");
    let msg = c["result"]["message"].as_str().unwrap();
    assert!(msg.contains("--canary-pull"), "{msg}");
    assert_eq!(codes(&doc), ["CANARY_NOT_RUN"], "{doc:#}");
    assert_nothing_left(&ctd);
}

#[test]
fn containerd_1_6_names_its_sandbox_image_in_status() {
    // 1.x says `sandboxImage` in its verbose Status; absent from the store,
    // the canary names it.
    let ctd = Containerd::start(Options::runc_only().pod_sandboxes(PAUSE));
    let (code, doc) = probe(&ctd, &["--require-canary", "runc"]);
    assert_eq!(code, 1, "{doc:#}");
    let c = canary(&doc, "runc");
    assert_eq!(c["result"]["outcome"], "PROBE_OUTCOME_SKIPPED", "{c:#}");
    let msg = c["result"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("sandbox image {PAUSE} is not")),
        "{msg}"
    );
}
