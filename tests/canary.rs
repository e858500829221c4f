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
    time::{Duration, Instant},
};

use tonic::Code;

use sandbox_readiness::proto::v1::{
    readiness_service_client::ReadinessServiceClient, Canary, CheckRequest, DesiredState,
    ProbeOutcome,
};
use support::containerd::{
    canary_sandboxes as labelled_sandboxes, import_pause, import_pause_archive, pause_archive,
    runc_shim_as_runsc, Containerd, Options, PAUSE_IMAGE as PAUSE,
};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-readiness");

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

fn assert_nothing_left(ctd: &Containerd) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let left = rt.block_on(labelled_sandboxes(ctd)).unwrap();
    assert!(left.is_empty(), "canary sandboxes left behind: {left:?}");
}

fn require_canary(handler: &str) -> CheckRequest {
    CheckRequest {
        desired: Some(DesiredState {
            require_canary: vec![handler.to_string()],
            ..DesiredState::default()
        }),
        ..CheckRequest::default()
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    assert!(pid > 0);
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
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

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_only_allowed_canaries_and_at_most_once_per_interval() {
    let ctd = containerd2(true);
    let agent = common::Agent::start(
        None,
        &["--cri-endpoint", &ctd.endpoint(), "--allow-canary", "runc"],
    );
    let mut client = ReadinessServiceClient::new(common::connect(&agent.url()).await);

    let refused = client.check(require_canary("runsc")).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("--allow-canary runsc"),
        "{}",
        refused.message()
    );

    let first = client
        .check(require_canary("runc"))
        .await
        .unwrap()
        .into_inner();
    let verdict = first.verdict.unwrap();
    assert!(verdict.converged, "{verdict:?}");
    let report = first.report.unwrap();
    let c = report
        .canaries
        .iter()
        .find(|c| c.handler == "runc")
        .unwrap();
    let result = c.result.as_ref().unwrap();
    assert_eq!(result.outcome(), ProbeOutcome::Passed, "{c:?}");
    assert_eq!(report.agent.as_ref().unwrap().canaries, 1);

    // Within --canary-interval (10 min by default): the same run.
    let second = client
        .check(require_canary("runc"))
        .await
        .unwrap()
        .into_inner();
    let report2 = second.report.unwrap();
    let c2 = report2
        .canaries
        .iter()
        .find(|c| c.handler == "runc")
        .unwrap();
    assert_eq!(c2.result.as_ref().unwrap().ran_at, result.ran_at);
    assert_eq!(report2.agent.as_ref().unwrap().canaries, 1);
    // Nothing ran for runsc, and nothing is left.
    assert!(report2.canaries.iter().all(|c| c.handler != "runsc"));
    assert!(labelled_sandboxes(&ctd).await.unwrap().is_empty());
}

/// A runc that waits before `create` until the test lets it go: a
/// RunPodSandbox that is certainly in flight when containerd is stopped.
fn held_runc(dir: &Path) -> PathBuf {
    let runc = common::on_path("runc").expect("runc");
    let wrapper = dir.join("runc-held");
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" create \"*) : > {d}/waiting; while [ ! -e {d}/go ]; do sleep 0.05; done;; esac\nexec {runc} \"$@\"\n",
        d = dir.display(),
        runc = runc.display()
    );
    std::fs::write(&wrapper, script).unwrap();
    let mut perm = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&wrapper, perm).unwrap();
    wrapper
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_cri_gives_a_finding_in_time_and_nothing_is_left_after() {
    let hold = tempfile::tempdir().unwrap();
    let ctd = Containerd::start(
        Options::containerd2_with_runsc()
            .pod_sandboxes(PAUSE)
            .runc_binary(held_runc(hold.path())),
    );
    import_pause(&ctd);
    let agent = common::Agent::start(
        None,
        &[
            "--cri-endpoint",
            &ctd.endpoint(),
            "--allow-canary",
            "runc",
            "--canary-timeout",
            "3s",
        ],
    );
    let mut client = ReadinessServiceClient::new(common::connect(&agent.url()).await);
    let asked = Instant::now();
    let check = tokio::spawn(async move { client.check(require_canary("runc")).await });
    // RunPodSandbox is in flight (runc create waits); now the CRI stops.
    let waiting = hold.path().join("waiting");
    common::wait_until_async(Duration::from_secs(10), "runc create to start", || {
        let w = waiting.clone();
        async move { w.exists() }
    })
    .await;
    let pid = ctd.pid().unwrap();
    signal(pid, libc::SIGSTOP);
    std::fs::write(hold.path().join("go"), "").unwrap();

    let answer = tokio::time::timeout(Duration::from_secs(10), check)
        .await
        .expect("the Check did not answer while the CRI was stopped")
        .unwrap();
    let elapsed = asked.elapsed();
    signal(pid, libc::SIGCONT);
    let resp = answer.unwrap().into_inner();
    let verdict = resp.verdict.unwrap();
    assert!(!verdict.converged);
    let f = &verdict.findings[0];
    assert_eq!(f.code, "CANARY_FAILED", "{verdict:?}");
    assert!(
        f.message.contains("did not finish within 3s"),
        "{}",
        f.message
    );
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");

    // The runtime finishes the late RunPodSandbox; the agent then removes
    // that sandbox by itself.
    common::wait_until(
        Duration::from_secs(20),
        "the late RunPodSandbox to return",
        || ctd.log().contains("returns sandbox id"),
    );
    let mut left = Vec::new();
    for _ in 0..100 {
        left = labelled_sandboxes(&ctd).await.unwrap();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "left behind: {left:?}\n{}", ctd.log());
}

/// Flags that make `runsc do` unable to run where the agent runs (an empty
/// self root: no cgroup filesystem, no `true`), as inside the extension
/// container, with the runtime's directory as the host tree (its gVisor
/// drop-in registers runsc with runtime type io.containerd.runsc.v1).
fn runsc_cannot_run_here(ctd: &Containerd, self_root: &Path) -> Vec<String> {
    [
        "--host-root",
        ctd.dir().to_str().unwrap(),
        "--cri-endpoint",
        &ctd.endpoint(),
        "--runsc-path",
        "/usr/bin/runsc",
        "--self-root-for-tests",
        self_root.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn probe_lets_the_gvisor_canary_stand_in_for_the_sandbox_probe() {
    let ctd = containerd2(true);
    let self_root = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["probe", "-o", "json", "--require-sandbox-probe"])
        .args(runsc_cannot_run_here(&ctd, self_root.path()))
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    // runsc's canary ran (runc's did not: not a gVisor handler) and its
    // failure is the sandbox probe's.
    let handlers: Vec<&str> = doc["report"]["canaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["handler"].as_str().unwrap())
        .collect();
    assert_eq!(handlers, ["runsc"], "{doc:#}");
    let f = &doc["verdict"]["findings"][0];
    assert_eq!(f["code"], "SANDBOX_PROBE_FAILED", "{doc:#}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("containerd-shim-runsc-v1"),
        "{f:#}"
    );
    assert_nothing_left(&ctd);
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_the_stand_in_canary_only_when_allowed() {
    let ctd = containerd2(true);
    let self_root = tempfile::tempdir().unwrap();
    let args = runsc_cannot_run_here(&ctd, self_root.path());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ask = |agent: &common::Agent| {
        let url = agent.url();
        async move {
            let mut client = ReadinessServiceClient::new(common::connect(&url).await);
            let req = CheckRequest {
                desired: Some(DesiredState {
                    require_sandbox_probe: true,
                    ..DesiredState::default()
                }),
                ..CheckRequest::default()
            };
            client.check(req).await.unwrap().into_inner()
        }
    };

    let not_allowed = common::Agent::start(None, &args);
    let resp = ask(&not_allowed).await;
    let report = resp.report.unwrap();
    assert!(report.canaries.is_empty(), "{:?}", report.canaries);
    let f = &resp.verdict.unwrap().findings[0];
    assert_eq!(f.code, "SANDBOX_PROBE_NOT_RUN", "{f:?}");
    assert!(f.message.contains("--allow-canary"), "{}", f.message);
    assert!(f.message.contains("runsc"), "{}", f.message);

    args.extend(["--allow-canary", "runsc"]);
    let allowed = common::Agent::start(None, &args);
    let resp = ask(&allowed).await;
    let report = resp.report.unwrap();
    assert_eq!(report.canaries.len(), 1, "{:?}", report.canaries);
    assert_eq!(
        report.canaries[0].result.as_ref().unwrap().outcome(),
        ProbeOutcome::Failed
    );
    let f = &resp.verdict.unwrap().findings[0];
    assert_eq!(f.code, "SANDBOX_PROBE_FAILED", "{f:?}");
    assert!(labelled_sandboxes(&ctd).await.unwrap().is_empty());
}

/// Polls the agent every 100 ms until `handler`'s canary has `outcome`;
/// how long that took, and the canary.
async fn until_served(
    agent: &common::Agent,
    handler: &str,
    outcome: ProbeOutcome,
    within: Duration,
) -> (Duration, Canary) {
    let from = Instant::now();
    loop {
        let (c, _) = common::served_canary(&agent.url(), handler).await;
        if let Some(c) = c.filter(|c| c.result.as_ref().map(|r| r.outcome()) == Some(outcome)) {
            return (from.elapsed(), c);
        }
        assert!(
            from.elapsed() < within,
            "no {outcome:?} canary for {handler} within {within:?}\n{}",
            agent.log().text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `serve` canarying its own desired state's `runc` on `ctd`.
fn serve_requiring_runc(ctd: &Containerd) -> common::Agent {
    common::Agent::start(
        None,
        &[
            "--cri-endpoint",
            &ctd.endpoint(),
            "--allow-canary",
            "runc",
            "--require-canary",
            "runc",
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_the_canary_as_soon_as_the_sandbox_image_arrives() {
    // A fresh node: the runtime is up, kubelet has not pulled the sandbox
    // image yet. The archive is built first so that only the import is timed.
    let ctd = containerd2(false);
    let archive = pause_archive(ctd.dir());
    let agent = serve_requiring_runc(&ctd);
    let started = Instant::now();
    let (_, first) = until_served(
        &agent,
        "runc",
        ProbeOutcome::Skipped,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        first.result.unwrap().message.contains("--canary-pull"),
        "not run for want of the image"
    );
    tokio::time::sleep(
        (started + Duration::from_secs(5)).saturating_duration_since(Instant::now()),
    )
    .await;
    import_pause_archive(&ctd, &archive);
    let imported = Instant::now();
    let (took, passed) = until_served(
        &agent,
        "runc",
        ProbeOutcome::Passed,
        Duration::from_secs(10),
    )
    .await;
    eprintln!(
        "image imported {:.1?} after the agent listened; the canary passed {took:.1?} after the import",
        imported - started
    );
    assert_eq!(passed.image, PAUSE);
    // The image store was asked, not the canary rerun: one run without the
    // image, one with it.
    let (_, runs) = common::served_canary(&agent.url(), "runc").await;
    assert_eq!(runs, 2, "{}", agent.log().text());
    assert!(agent
        .log()
        .text()
        .contains("the canary waits for the sandbox image"));
    assert!(labelled_sandboxes(&ctd).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_retries_a_failed_canary_soon_until_the_runtime_is_mended() {
    // The handler's OCI runtime is missing (its `BinaryName` names nothing,
    // as a node whose runtime binary is not installed yet), then restored
    // after the canary's second run.
    let bin = tempfile::tempdir().unwrap();
    let runc = bin.path().join("runc");
    let ctd = Containerd::start(
        Options::containerd2_with_runsc()
            .pod_sandboxes(PAUSE)
            .runc_binary(runc.clone()),
    );
    import_pause(&ctd);
    let agent = serve_requiring_runc(&ctd);
    let (failed, _) = fails_until_restored_after_run_2(&agent, &ctd, "runc", || {
        std::os::unix::fs::symlink(common::on_path("runc").expect("runc"), &runc).unwrap()
    })
    .await;
    let msg = failed.result.unwrap().message;
    assert!(msg.contains("RunPodSandbox failed"), "{msg}");
    assert!(agent
        .log()
        .text()
        .contains("the canary did not pass: running it again in 15s"));
}

/// The retry schedule as both restore tests play it: the `handler` canary
/// fails at the agent's start and again at its first retry (15 s later);
/// once the agent has served that second failure, `restore` mends the node,
/// and the canary passes at its third run (30 s after the second), leaving
/// no sandbox behind. The mend follows the agent's report of run 2's
/// result, not a clock: on a slow machine the second run may come late, and
/// a mend made before it ends would pass at run 2. Returns the failed and
/// the passed canary.
async fn fails_until_restored_after_run_2(
    agent: &common::Agent,
    ctd: &Containerd,
    handler: &str,
    restore: impl FnOnce(),
) -> (Canary, Canary) {
    let started = Instant::now();
    let (_, failed) = until_served(
        agent,
        handler,
        ProbeOutcome::Failed,
        Duration::from_secs(15),
    )
    .await;
    // Run 2 has finished when the served canary is no longer run 1's (its
    // ranAt moved): the run counter counts a run as it starts, so a mend
    // made when the counter says 2 can still make run 2 pass.
    let first_ran_at = failed.result.as_ref().and_then(|r| r.ran_at);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (c, runs) = common::served_canary(&agent.url(), handler).await;
        if let Some(r) = c
            .and_then(|c| c.result)
            .filter(|r| r.ran_at != first_ran_at)
        {
            assert_eq!(runs, 2, "{}", agent.log().text());
            assert_eq!(r.outcome(), ProbeOutcome::Failed, "{}", agent.log().text());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no second canary run within 60 s\n{}",
            agent.log().text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    restore();
    let restored = Instant::now();
    let (took, passed) = until_served(
        agent,
        handler,
        ProbeOutcome::Passed,
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "{handler} restored {:.1?} after the agent listened; the canary passed {took:.1?} after that",
        restored - started
    );
    let (_, runs) = common::served_canary(&agent.url(), handler).await;
    assert_eq!(runs, 3, "{}", agent.log().text());
    assert!(labelled_sandboxes(ctd).await.unwrap().is_empty());
    (failed, passed)
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_retries_a_failed_runsc_canary_until_its_shim_is_restored() {
    // The runsc handler's shim (containerd-shim-runsc-v1, a stand-in: see
    // runc_shim_as_runsc) is removed when the agent starts, as on a node
    // whose gVisor extension has not laid it down yet, and restored after
    // the canary's second run.
    let shims = tempfile::tempdir().unwrap();
    let stash = tempfile::tempdir().unwrap();
    let stashed = runc_shim_as_runsc(stash.path());
    let shim = shims.path().join("containerd-shim-runsc-v1");
    let ctd = Containerd::start(
        Options::containerd2_with_runsc()
            .pod_sandboxes(PAUSE)
            .runsc_shim_in(shims.path().to_path_buf()),
    );
    import_pause(&ctd);
    let agent = common::Agent::start(
        None,
        &[
            "--cri-endpoint",
            &ctd.endpoint(),
            "--allow-canary",
            "runsc",
            "--require-canary",
            "runsc",
        ],
    );
    let (failed, passed) = fails_until_restored_after_run_2(&agent, &ctd, "runsc", || {
        std::fs::rename(&stashed, &shim).unwrap()
    })
    .await;
    assert!(
        failed.runtime_error.contains("containerd-shim-runsc-v1"),
        "{failed:?}"
    );
    assert!(!passed.sandbox_id.is_empty(), "{passed:?}");
}
