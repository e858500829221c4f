//! The CRI canary: the one thing the agent does that changes the node.
//!
//! It starts a pod sandbox through the CRI with one runtime handler, as
//! kubelet would, checks it is READY, then stops and removes it, all under
//! one deadline. Host networking, so no CNI is involved (a pod network would
//! mean a CNI ADD for a pod the API server does not know, which some CNIs
//! refuse), and no hostname (a host-network sandbox shares the host's UTS
//! namespace; runc refuses a hostname there).
//!
//! Every sandbox it starts carries [`LABEL`]; before each canary it removes
//! every sandbox with that label (a late `RunPodSandbox` of an earlier,
//! abandoned canary). A canary past its deadline keeps running in the
//! background until the runtime answers, then the label is swept until
//! nothing carries it. Canaries must run one at a time: the sweep would
//! remove a concurrent canary's sandbox.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::Value;
use tonic::{transport::Channel, Code, Status};
use tracing::{debug, info, warn};

use super::{cri, probe};
use crate::{
    proto::{
        cri::{
            image_service_client::ImageServiceClient, runtime_service_client::RuntimeServiceClient,
            ImageSpec, ImageStatusRequest, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
            ListImagesRequest, ListPodSandboxRequest, NamespaceMode, NamespaceOption,
            PodSandboxConfig, PodSandboxFilter, PodSandboxMetadata, PodSandboxState,
            PodSandboxStatusRequest, PullImageRequest, RemovePodSandboxRequest,
            RunPodSandboxRequest, StatusRequest, StopPodSandboxRequest,
        },
        v1::{Canary, ProbeOutcome},
    },
    text::{clean_capped, fmt_duration},
};

/// The label every canary sandbox carries (value `"true"`): the sweep
/// removes exactly the sandboxes with it.
pub const LABEL: &str = "io.sandbox-readiness/canary";
/// The handler the sandbox was started with, for people listing sandboxes.
pub const HANDLER_LABEL: &str = "io.sandbox-readiness/handler";
/// The pod namespace in the sandbox's metadata (no such Kubernetes
/// namespace needs to exist: the CRI only builds a name from it).
pub const NAMESPACE: &str = "sandbox-readiness";
/// The default deadline for one canary (`--canary-timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an abandoned canary and its sweep may keep trying.
const CLEANUP_LIMIT: Duration = Duration::from_secs(600);
/// The longest pause between two background sweeps.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

/// How the canary runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryConfig {
    /// The deadline for the whole exchange.
    pub timeout: Duration,
    /// Pull the sandbox image when the runtime's image store lacks it
    /// (`--canary-pull`; never from a request).
    pub pull: bool,
}

impl Default for CanaryConfig {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            pull: false,
        }
    }
}

/// What the exchange knows so far: read when the deadline passes.
#[derive(Debug, Default)]
struct Progress {
    step: &'static str,
    image: String,
    sandbox_id: String,
}

/// How an exchange ended.
#[derive(Debug)]
struct Ended {
    outcome: ProbeOutcome,
    message: String,
    runtime_error: String,
    /// A sandbox may still exist (the runtime did not confirm its removal).
    leftover: bool,
    /// Not run because the sandbox image is not in the runtime's store.
    image_missing: bool,
}

impl Ended {
    fn new(outcome: ProbeOutcome, message: String) -> Self {
        Self {
            outcome,
            message,
            runtime_error: String::new(),
            leftover: false,
            image_missing: false,
        }
    }

    fn not_run(why: &str) -> Self {
        Self::new(ProbeOutcome::Skipped, format!("not run: {why}"))
    }

    /// Not run for want of the sandbox image: worth running again as soon
    /// as the image is in the store ([`sandbox_image_present`]).
    fn image_missing(why: &str) -> Self {
        Self {
            image_missing: true,
            ..Self::not_run(why)
        }
    }
}

/// One canary's result, and whether it waits for the sandbox image.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryRun {
    pub canary: Canary,
    /// NOT_RUN (SKIPPED) because the sandbox image is not in the runtime's
    /// image store: the agent retries as soon as it appears.
    pub image_missing: bool,
}

/// The handler name `RunPodSandbox` takes: `default` is the empty one.
pub fn cri_handler(handler: &str) -> &str {
    if handler == "default" {
        ""
    } else {
        handler
    }
}

/// Runs one canary for `handler` on the CRI at `endpoint`. Never fails:
/// every problem is the canary's outcome and message.
pub async fn run(endpoint: &str, cfg: &CanaryConfig, handler: &str) -> CanaryRun {
    let started = Instant::now();
    let progress = Arc::new(Mutex::new(Progress::default()));
    let mut task = tokio::spawn(exchange(
        endpoint.to_string(),
        cfg.clone(),
        handler.to_string(),
        progress.clone(),
    ));
    let ended = match tokio::time::timeout(cfg.timeout, &mut task).await {
        Ok(Ok(ended)) => {
            if ended.leftover {
                clean_up_later(endpoint, None);
            }
            ended
        }
        Ok(Err(e)) => {
            clean_up_later(endpoint, None);
            Ended::new(ProbeOutcome::Error, format!("the canary task stopped: {e}"))
        }
        Err(_) => {
            let step = lock(&progress).step;
            // The exchange goes on: when the runtime answers it stops and
            // removes its own sandbox, and the sweep after it catches one
            // that a late RunPodSandbox left.
            clean_up_later(endpoint, Some(task));
            Ended::new(
                ProbeOutcome::Error,
                format!(
                    "did not finish within {} (still {step}); the agent removes the sandbox once the runtime answers",
                    fmt_duration(cfg.timeout)
                ),
            )
        }
    };
    let p = lock(&progress);
    let mut result = probe(ended.outcome, 0, ended.message, started.elapsed());
    if ended.outcome == ProbeOutcome::Skipped {
        // Nothing ran: no duration to show.
        result.duration = None;
    }
    CanaryRun {
        canary: Canary {
            handler: handler.to_string(),
            result: Some(result),
            image: p.image.clone(),
            sandbox_id: p.sandbox_id.clone(),
            runtime_error: ended.runtime_error,
        },
        image_missing: ended.image_missing,
    }
}

/// Whether the runtime's sandbox image is in its image store now: the
/// same questions the canary asks before it starts a sandbox (`Status`,
/// then `ImageStatus` of the image it names or, for containerd 2.x,
/// `ListImages` for a pinned one), and nothing else, so it is cheap enough
/// to ask every few seconds while a canary waits for the image.
pub async fn sandbox_image_present(endpoint: &str, timeout: Duration) -> Result<bool, String> {
    let ask = async {
        let (path, channel) = cri::connect(endpoint).await?;
        let mut rt = RuntimeServiceClient::new(channel.clone());
        let mut images = ImageServiceClient::new(channel);
        let image = sandbox_image(&mut rt, &mut images, &path).await?;
        Ok(matches!(image, SandboxImage::Present(_)))
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| format!("the CRI did not answer within {}", fmt_duration(timeout)))?
}

fn lock(p: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

fn set_step(p: &Mutex<Progress>, step: &'static str) {
    lock(p).step = step;
}

/// Waits for an abandoned exchange (if any), then sweeps until no sandbox
/// carries the label, all within [`CLEANUP_LIMIT`].
fn clean_up_later(endpoint: &str, task: Option<tokio::task::JoinHandle<Ended>>) {
    let endpoint = endpoint.to_string();
    tokio::spawn(async move {
        let work = async {
            if let Some(t) = task {
                let _ = t.await;
            }
            sweep_until_clean(&endpoint).await;
        };
        if tokio::time::timeout(CLEANUP_LIMIT, work).await.is_err() {
            warn!(
                "canary sandboxes (label {LABEL}) could not be removed within {}; the next canary tries again",
                fmt_duration(CLEANUP_LIMIT)
            );
        }
    });
}

/// Sweeps with a growing pause until a sweep finds nothing to remove.
async fn sweep_until_clean(endpoint: &str) {
    let mut pause = Duration::from_millis(250);
    loop {
        match sweep_endpoint(endpoint).await {
            Ok(0) => return,
            Ok(n) => {
                info!(removed = n, "removed canary sandboxes left behind");
                continue;
            }
            Err(e) => debug!("canary sweep failed, retrying in {pause:?}: {e}"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_BACKOFF);
    }
}

/// Removes every sandbox carrying [`LABEL`]; how many it removed.
pub async fn sweep_endpoint(endpoint: &str) -> Result<usize, String> {
    let (path, channel) = cri::connect(endpoint).await?;
    sweep(&mut RuntimeServiceClient::new(channel), &path).await
}

async fn sweep(rt: &mut RuntimeServiceClient<Channel>, path: &Path) -> Result<usize, String> {
    let filter = PodSandboxFilter {
        label_selector: [(LABEL.to_string(), "true".to_string())].into(),
        ..PodSandboxFilter::default()
    };
    let items = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await
        .map_err(|s| cri::status_error(path, "ListPodSandbox", &s))?
        .into_inner()
        .items;
    let mut removed = 0;
    let mut failed = None;
    // The filter is the runtime's; the label is checked again so that a
    // runtime ignoring filters cannot make the agent remove others' pods.
    for sb in items
        .iter()
        .filter(|s| s.labels.get(LABEL).map(String::as_str) == Some("true"))
    {
        match stop_and_remove(rt, path, &sb.id).await {
            Ok(()) => removed += 1,
            Err(e) => failed = Some(e),
        }
    }
    failed.map_or(Ok(removed), Err)
}

/// Stop then Remove; a sandbox already gone counts as removed.
async fn stop_and_remove(
    rt: &mut RuntimeServiceClient<Channel>,
    path: &Path,
    id: &str,
) -> Result<(), String> {
    let gone = |s: &Status| s.code() == Code::NotFound;
    match rt
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
    {
        Err(s) if !gone(&s) => return Err(cri::status_error(path, "StopPodSandbox", &s)),
        _ => {}
    }
    match rt
        .remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
    {
        Err(s) if !gone(&s) => Err(cri::status_error(path, "RemovePodSandbox", &s)),
        _ => Ok(()),
    }
}

/// The runtime's sandbox image, as far as it can be told.
#[derive(Debug, PartialEq, Eq)]
enum SandboxImage {
    Present(String),
    Absent(String),
    /// The runtime names none and none is pinned in its store.
    Unknown,
}

async fn exchange(
    endpoint: String,
    cfg: CanaryConfig,
    handler: String,
    progress: Arc<Mutex<Progress>>,
) -> Ended {
    set_step(&progress, "connecting to the CRI");
    let (path, channel) = match cri::connect(&endpoint).await {
        Ok(c) => c,
        Err(e) => return Ended::not_run(&e),
    };
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut images = ImageServiceClient::new(channel);
    set_step(&progress, "removing earlier canary sandboxes");
    if let Err(e) = sweep(&mut rt, &path).await {
        return Ended::not_run(&format!("cannot remove earlier canary sandboxes: {e}"));
    }
    set_step(&progress, "asking for the sandbox image");
    let image = match sandbox_image(&mut rt, &mut images, &path).await {
        Ok(i) => i,
        Err(e) => return Ended::not_run(&e),
    };
    match &image {
        SandboxImage::Present(name) => lock(&progress).image = name.clone(),
        SandboxImage::Absent(name) => {
            lock(&progress).image = name.clone();
            if !cfg.pull {
                return Ended::image_missing(&format!(
                    "sandbox image {name} is not in the runtime's image store (pull it, or start with --canary-pull)"
                ));
            }
            set_step(&progress, "pulling the sandbox image");
            let pulled = images
                .pull_image(PullImageRequest {
                    image: Some(ImageSpec {
                        image: name.clone(),
                    }),
                })
                .await;
            if let Err(s) = pulled {
                return Ended::image_missing(&format!(
                    "cannot pull sandbox image {name}: {}",
                    cri::status_error(&path, "PullImage", &s)
                ));
            }
        }
        // With --canary-pull the runtime pulls its own sandbox image.
        SandboxImage::Unknown if cfg.pull => {}
        SandboxImage::Unknown => {
            return Ended::image_missing(
                "the runtime names no sandbox image and none in its image store is pinned, so it may have to pull one (pull it, or start with --canary-pull)",
            )
        }
    }

    set_step(&progress, "starting the pod sandbox (RunPodSandbox)");
    let run = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config(&handler, &random_uid())),
            runtime_handler: cri_handler(&handler).to_string(),
        })
        .await;
    let id = match run {
        Ok(r) => r.into_inner().pod_sandbox_id,
        Err(s) => {
            let mut e = refused(&path, "RunPodSandbox", &handler, &s);
            // A broken connection says nothing of what the runtime did.
            e.leftover = std::error::Error::source(&s).is_some();
            return e;
        }
    };
    lock(&progress).sandbox_id = id.clone();

    set_step(&progress, "reading the sandbox's status");
    let state = rt
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await;
    let mut failure = match state {
        Ok(r) => {
            let ready =
                r.into_inner().status.map(|s| s.state()) == Some(PodSandboxState::SandboxReady);
            (!ready).then(|| {
                Ended::new(
                    ProbeOutcome::Failed,
                    format!("the pod sandbox with handler {handler} started but is not READY"),
                )
            })
        }
        Err(s) if s.code() == Code::NotFound => return vanished(&handler, "its status was read"),
        Err(s) => Some(refused(&path, "PodSandboxStatus", &handler, &s)),
    };

    set_step(&progress, "stopping the pod sandbox (StopPodSandbox)");
    let stopped = rt
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await;
    match stopped {
        Err(s) if s.code() == Code::NotFound => return vanished(&handler, "it was stopped"),
        Err(s) => {
            let mut e = failure.unwrap_or_else(|| refused(&path, "StopPodSandbox", &handler, &s));
            e.leftover = true;
            return e;
        }
        Ok(_) => {}
    }

    set_step(&progress, "removing the pod sandbox (RemovePodSandbox)");
    let removed = rt
        .remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await;
    match removed {
        Err(s) if s.code() == Code::NotFound => vanished(&handler, "it was removed"),
        Err(s) => {
            let mut e = failure
                .take()
                .unwrap_or_else(|| refused(&path, "RemovePodSandbox", &handler, &s));
            e.leftover = true;
            e
        }
        Ok(_) => failure.unwrap_or_else(|| {
            Ended::new(
                ProbeOutcome::Passed,
                format!("a host-network pod sandbox with handler {handler} started (READY), stopped and was removed"),
            )
        }),
    }
}

/// The longest runtime error text kept: containerd's wrap several layers,
/// and what names the cause (the missing shim) comes last.
const MAX_RUNTIME_ERROR_CHARS: usize = 600;

/// FAILED: the runtime refused a call; its own words are kept.
fn refused(path: &Path, rpc: &str, handler: &str, s: &Status) -> Ended {
    let runtime_error = clean_capped(&shorten_ids(s.message()), MAX_RUNTIME_ERROR_CHARS);
    let message = if std::error::Error::source(s).is_some() || runtime_error.is_empty() {
        cri::status_error(path, rpc, s)
    } else {
        format!("{rpc} failed: {runtime_error}")
    };
    Ended {
        runtime_error,
        ..Ended::new(
            ProbeOutcome::Failed,
            clean_capped(
                &format!("a pod sandbox with handler {handler} did not start: {message}"),
                MAX_RUNTIME_ERROR_CHARS + 100,
            ),
        )
    }
}

/// Runs of 32 or more hex digits (sandbox and container ids, digests)
/// shortened to their first 12, as `crictl` shows ids.
fn shorten_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 32 {
            out.push_str(&run[..12]);
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in s.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// INCONCLUSIVE: someone else (kubelet) removed the sandbox under it.
fn vanished(handler: &str, when: &str) -> Ended {
    Ended::new(
        ProbeOutcome::Inconclusive,
        format!(
            "the pod sandbox with handler {handler} started, but vanished before {when} (removed by someone else, e.g. kubelet): run the canary again"
        ),
    )
}

async fn sandbox_image(
    rt: &mut RuntimeServiceClient<Channel>,
    images: &mut ImageServiceClient<Channel>,
    path: &Path,
) -> Result<SandboxImage, String> {
    let status = rt
        .status(StatusRequest { verbose: true })
        .await
        .map_err(|s| cri::status_error(path, "Status", &s))?
        .into_inner();
    let named = status
        .info
        .get("config")
        .and_then(|c| sandbox_image_from_info_config(c));
    if let Some(name) = named {
        let found = images
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: name.clone(),
                }),
                verbose: false,
            })
            .await
            .map_err(|s| cri::status_error(path, "ImageStatus", &s))?
            .into_inner()
            .image
            .is_some();
        return Ok(if found {
            SandboxImage::Present(name)
        } else {
            SandboxImage::Absent(name)
        });
    }
    // containerd 2.x keeps its sandbox image out of the verbose Status,
    // but marks it pinned in its image store once the CRI pulled it.
    let listed = images
        .list_images(ListImagesRequest::default())
        .await
        .map_err(|s| cri::status_error(path, "ListImages", &s))?
        .into_inner()
        .images;
    Ok(listed
        .iter()
        .find(|i| i.pinned)
        .map(|i| i.repo_tags.first().unwrap_or(&i.id).clone())
        .map_or(SandboxImage::Unknown, SandboxImage::Present))
}

/// The sandbox image named in a verbose Status' `info["config"]`:
/// `sandboxImage` (containerd 1.x), or a pinned `sandbox` image should a
/// runtime put its image config there (containerd 2.1 does not).
pub fn sandbox_image_from_info_config(json: &str) -> Option<String> {
    let root: Value = serde_json::from_str(json).ok()?;
    let pinned = |key: &str| root.get(key)?.get("sandbox")?.as_str();
    root.get("sandboxImage")
        .and_then(Value::as_str)
        .or_else(|| pinned("pinned_images"))
        .or_else(|| pinned("pinnedImages"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The sandbox kubelet would ask for with `hostNetwork: true`, marked as
/// the agent's.
fn sandbox_config(handler: &str, uid: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: format!("sandbox-readiness-canary-{handler}"),
            uid: uid.to_string(),
            namespace: NAMESPACE.to_string(),
            attempt: 0,
        }),
        labels: [
            (LABEL.to_string(), "true".to_string()),
            (HANDLER_LABEL.to_string(), handler.to_string()),
        ]
        .into(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                }),
            }),
            ..LinuxPodSandboxConfig::default()
        }),
        ..PodSandboxConfig::default()
    }
}

/// 16 random hex digits: every canary's sandbox has a name of its own.
fn random_uid() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // Only uniqueness matters here, not secrecy.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        b = u64::try_from(t.as_nanos() & u128::from(u64::MAX))
            .unwrap_or_default()
            .to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// containerd 1.6.20's verbose Status config (abridged, real keys).
    const CONTAINERD_16: &str = r#"{"containerd":{"snapshotter":"overlayfs","defaultRuntimeName":"runc",
        "runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2"}}},"cni":{"binDir":"/opt/cni/bin"},
        "sandboxImage":"registry.k8s.io/pause:3.10","statsCollectPeriod":10,
        "containerdRootDir":"/var/lib/containerd"}"#;
    /// containerd 2.1.9's (abridged, real keys): no image configuration.
    const CONTAINERD_21: &str = r#"{"containerd":{"defaultRuntimeName":"runc",
        "runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","sandboxer":"podsandbox"}}},
        "cni":{"binDirs":["/opt/cni/bin"]},"restrictOOMScoreAdj":false,"enableCDI":true,
        "containerdRootDir":"/var/lib/containerd","rootDir":"/var/lib/containerd/io.containerd.grpc.v1.cri"}"#;

    #[test]
    fn sandbox_image_of_1_x_and_2_x() {
        assert_eq!(
            sandbox_image_from_info_config(CONTAINERD_16).as_deref(),
            Some("registry.k8s.io/pause:3.10")
        );
        assert_eq!(sandbox_image_from_info_config(CONTAINERD_21), None);
        // The image config's own JSON shape, should a runtime include it.
        assert_eq!(
            sandbox_image_from_info_config(r#"{"pinned_images":{"sandbox":"p:1"}}"#).as_deref(),
            Some("p:1")
        );
        assert_eq!(
            sandbox_image_from_info_config(r#"{"sandboxImage":" "}"#),
            None
        );
        assert_eq!(sandbox_image_from_info_config("{"), None);
        assert_eq!(
            sandbox_image_from_info_config(r#"{"sandboxImage":3}"#),
            None
        );
    }

    #[test]
    fn the_sandbox_is_host_network_without_hostname_and_labelled() {
        let c = sandbox_config("runsc", "00ff");
        assert!(c.hostname.is_empty());
        let ns = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network(), NamespaceMode::Node);
        assert_eq!(c.labels.get(LABEL).map(String::as_str), Some("true"));
        let m = c.metadata.unwrap();
        assert_eq!(m.name, "sandbox-readiness-canary-runsc");
        assert_eq!((m.uid.as_str(), m.namespace.as_str()), ("00ff", NAMESPACE));
        assert_eq!(cri_handler("default"), "");
        assert_eq!(cri_handler("runc"), "runc");
        let (a, b) = (random_uid(), random_uid());
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }

    #[test]
    fn long_ids_are_shortened() {
        let id = "d6b7b4e2d3c45010f890e88a4483533c6f146062b15a2e94634a9e61fe839ede";
        assert_eq!(
            shorten_ids(&format!("failed to start sandbox \"{id}\": cafe")),
            "failed to start sandbox \"d6b7b4e2d3c4\": cafe"
        );
    }

    #[tokio::test]
    async fn an_absent_socket_means_not_run() {
        let c = run(
            "unix:///nonexistent/cri.sock",
            &CanaryConfig::default(),
            "runc",
        )
        .await;
        // Nothing to wait for in the image store: the CRI is not there.
        assert!(!c.image_missing);
        let c = c.canary;
        let r = c.result.unwrap();
        assert_eq!(r.outcome(), ProbeOutcome::Skipped);
        assert!(
            r.message.starts_with("not run: CRI socket"),
            "{}",
            r.message
        );
        assert_eq!(c.handler, "runc");
    }
}
