//! Observation: the only part of the agent that touches the host.
//!
//! Each submodule returns plain report data and never panics: a failure to
//! read or probe becomes a reported error inside the data, so evaluation can
//! say "unknown" or "failed" instead of the whole request failing.
//!
//! Observation returns raw facts only ([`Observation`]); every derived field
//! is computed once, by [`crate::report::derive()`]. Host files and child
//! processes are touched only through [`crate::hostio`].

pub mod canary;
pub mod cri;
pub mod gvisor;
pub mod node;
pub mod sysctl;
pub mod userns;

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use crate::{
    host::HostPaths,
    proto::v1::{AgentInfo, Probe, ProbeOutcome, Report, UserNamespaces},
    report::Facts,
};
use gvisor::GvisorObserver;

/// containerd's root directory when the CRI does not name one (Talos's too).
pub const DEFAULT_RUNTIME_ROOT: &str = "/var/lib/containerd";

/// Where and how to observe.
#[derive(Debug, Clone)]
pub struct ObserveConfig {
    pub paths: HostPaths,
    /// The binary that runs the userns probe helper (normally ourselves).
    pub helper_exe: PathBuf,
    pub probe_timeout: Duration,
    /// Sysctls to read besides the user namespace ones (from desired states).
    pub extra_sysctls: Vec<String>,
    pub gvisor: GvisorConfig,
    /// Report the raw machine id too (`serve --expose-machine-id`); its
    /// app-specific hash is always reported.
    pub expose_machine_id: bool,
    /// How a CRI canary runs (on the CRI at `gvisor.cri_endpoint`).
    pub canary: canary::CanaryConfig,
    /// A desired state of this agent's own needs the runtime's root
    /// directory (`--require-pod-userns`): its absence is a failure, not
    /// "not applicable" (see [`runtime_root_not_applicable`]).
    pub require_runtime_root: bool,
}

/// Where gVisor and the CRI runtime are, and how long to wait for them.
#[derive(Debug, Clone)]
pub struct GvisorConfig {
    pub runsc_path: PathBuf,
    pub shim_path: PathBuf,
    pub cri_conf_dir: PathBuf,
    pub cri_endpoint: String,
    pub cri_timeout: Duration,
    pub exec_timeout: Duration,
    pub sandbox_timeout: Duration,
    /// The agent's own view of what `runsc do` needs (not the host's:
    /// runsc runs as the agent's child); the default is the real one.
    pub sandbox_env: gvisor::SandboxEnv,
}

/// What one observation includes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope {
    /// Run the sandbox smoke probe (seconds, so only on demand).
    pub sandbox: bool,
}

/// Raw facts from one observation: the report with its derived fields
/// still empty, and what derive needs besides. [`Observation::into_report`]
/// (or [`crate::report::derive()`]) completes it.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub report: Report,
    pub facts: Facts,
}

impl Observation {
    /// Derives every derived field and returns the complete report.
    pub fn into_report(mut self) -> Report {
        crate::report::derive(&mut self.report, &self.facts);
        self.report
    }
}

/// Observes a node. Holds what outlives one observation (the gVisor
/// observer's `runsc --version` answer), so a long-lived caller keeps one.
#[derive(Debug)]
pub struct Observer {
    cfg: ObserveConfig,
    gvisor: GvisorObserver,
}

impl Observer {
    pub fn new(cfg: ObserveConfig) -> Self {
        Self {
            cfg,
            gvisor: GvisorObserver::default(),
        }
    }

    /// Where and how it observes.
    pub fn config(&self) -> &ObserveConfig {
        &self.cfg
    }

    /// Observes everything once and derives the complete report. Never
    /// fails: every problem is data in the report.
    pub async fn observe(&self, scope: Scope) -> Report {
        self.observe_raw(scope, &self.cfg.extra_sysctls)
            .await
            .into_report()
    }

    /// Observes everything once, with `extra` sysctls besides the user
    /// namespace ones, returning raw facts only (for a caller that merges in
    /// facts of its own before deriving once).
    pub async fn observe_raw(&self, scope: Scope, extra: &[String]) -> Observation {
        let cfg = &self.cfg;
        let files = {
            let (cfg, extra) = (cfg.clone(), extra.to_vec());
            off_thread(move || {
                let sysctls = sysctl::read_all(&cfg.paths.proc_sys(), &[]);
                let initial = userns::in_initial_user_namespace(&cfg.paths);
                (
                    sysctls,
                    initial,
                    node::observe(&cfg.paths, cfg.expose_machine_id),
                    read_extra(&cfg, &extra),
                )
            })
        };
        // Only a panic in the reader gets here (it never panics by design).
        let (sysctls_all, initial, node, extra_sysctls) = files.await.unwrap_or_default();
        let rootless = !initial.unwrap_or(true);
        let gvisor = self
            .gvisor
            .observe(&cfg.gvisor, &cfg.paths, rootless, scope)
            .await;
        // The idmap probe needs the runtime's root directory, which only
        // the CRI's verbose Status names.
        let named_root = gvisor
            .gvisor
            .cri
            .as_ref()
            .map(|c| c.root_dir.as_str())
            .filter(|d| !d.is_empty());
        let root_dir = cfg.paths.host(named_root.unwrap_or(DEFAULT_RUNTIME_ROOT));
        let mut probes = userns::observe(&cfg.helper_exe, cfg.probe_timeout, &root_dir).await;
        if named_root.is_none() && !cfg.require_runtime_root {
            probes.state = runtime_root_not_applicable(probes.state, &root_dir);
        }
        let report = Report {
            node: Some(node),
            agent: Some(AgentInfo {
                version: node::AGENT_VERSION.to_string(),
                ..AgentInfo::default()
            }),
            observed_at: Some(pb_timestamp(SystemTime::now())),
            user_namespaces: Some(UserNamespaces {
                sysctls: sysctls_all,
                userns_create: Some(probes.userns),
                idmap_mount: Some(probes.idmap),
                runtime_state_idmap: Some(probes.state),
                ..UserNamespaces::default()
            }),
            gvisor: Some(gvisor.gvisor),
            sysctls: extra_sysctls,
            ..Report::default()
        };
        Observation {
            report,
            facts: Facts {
                initial_user_namespace: initial,
                kvm_present: gvisor.kvm_present,
            },
        }
    }
}

/// Observes everything once with a fresh [`Observer`] (a one-shot caller
/// such as `probe`; nothing is cached between calls).
pub async fn observe(cfg: &ObserveConfig, scope: Scope) -> Report {
    Observer::new(cfg.clone()).observe(scope).await
}

/// Reads sysctls outside the user namespace set (validated names only).
pub fn read_extra(cfg: &ObserveConfig, names: &[String]) -> Vec<crate::proto::v1::Sysctl> {
    let userns = sysctl::userns_names(&cfg.paths.proc_sys());
    let mut seen = Vec::new();
    names
        .iter()
        .filter(|n| !userns.contains(n))
        .filter(|n| {
            let fresh = !seen.contains(n);
            seen.push(*n);
            fresh
        })
        .map(|n| sysctl::read(&cfg.paths.proc_sys(), n))
        .collect()
}

/// The cheap part of an observation: only the sysctls (the user namespace
/// ones and `extra`), to notice a change between full observations. Runs
/// synchronously: an async caller wraps it in [`off_thread`].
pub fn sysctl_snapshot(cfg: &ObserveConfig, extra: &[String]) -> Vec<crate::proto::v1::Sysctl> {
    let mut all = sysctl::read_all(&cfg.paths.proc_sys(), &[]);
    all.extend(read_extra(cfg, extra));
    all
}

/// Runs synchronous host I/O (file reads, `stat`, `statfs`) on the blocking
/// pool: the agent has one runtime thread, and a read that blocks (a hung
/// FUSE or NFS mount under a host path) must delay only the observation
/// that asked, never health or the cached answers. `Err` only if `f` panicked
/// or the runtime is shutting down.
pub async fn off_thread<T, F>(f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the host reader stopped: {e}"))
}

/// Converts a `std` duration to the protobuf one.
pub fn pb_duration(d: Duration) -> pbjson_types::Duration {
    pbjson_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Converts a wall-clock time to the protobuf timestamp.
pub fn pb_timestamp(t: SystemTime) -> pbjson_types::Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    pbjson_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The symbolic name of an errno, for reports people read.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        0 => "",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EUSERS => "EUSERS",
        _ => "E?",
    }
}

/// A probe result with the given outcome.
pub fn probe(
    outcome: ProbeOutcome,
    errno: i32,
    message: impl Into<String>,
    duration: Duration,
) -> Probe {
    Probe {
        outcome: outcome as i32,
        errno,
        errno_name: errno_name(errno).to_string(),
        message: message.into(),
        duration: Some(pb_duration(duration)),
        ran_at: Some(pb_timestamp(SystemTime::now())),
    }
}

/// A probe that did not run, with the reason.
/// The runtime-root idmap probe on a machine without a container runtime:
/// the default root does not exist and no CRI names another, so there is
/// nothing to idmap. SKIPPED ("not applicable"), errno ENOENT kept so that
/// a desired state needing it still judges it a failure
/// (`evaluate`, `--require-pod-userns`); any other result stands.
pub fn runtime_root_not_applicable(state: Probe, root: &Path) -> Probe {
    if state.outcome() != ProbeOutcome::Failed || state.errno != libc::ENOENT {
        return state;
    }
    Probe {
        errno: libc::ENOENT,
        ..skipped(format!(
            "{RUNTIME_ROOT_NOT_APPLICABLE}: no container runtime root here ({} does not exist, and no CRI names another); only --require-pod-userns needs it",
            root.display()
        ))
    }
}

/// How [`runtime_root_not_applicable`]'s message starts.
pub const RUNTIME_ROOT_NOT_APPLICABLE: &str = "not applicable";

pub fn skipped(message: impl Into<String>) -> Probe {
    Probe {
        outcome: ProbeOutcome::Skipped as i32,
        message: message.into(),
        ..Probe::default()
    }
}
