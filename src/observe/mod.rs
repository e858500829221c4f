//! Observation: the only part of the agent that touches the host.
//!
//! Each submodule returns plain report data and never panics: a failure to
//! read or probe becomes a reported error inside the data, so evaluation can
//! say "unknown" or "failed" instead of the whole request failing.

pub mod cri;
pub mod gvisor;
pub mod node;
pub mod sysctl;
pub mod userns;

use std::{
    path::PathBuf,
    time::{Duration, SystemTime},
};

use crate::{
    host::HostPaths,
    proto::v1::{AgentInfo, Gvisor, Probe, ProbeOutcome, Report, UserNamespaces},
};

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
}

/// What one observation includes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope {
    /// Run the sandbox smoke probe (seconds, so only on demand).
    pub sandbox: bool,
}

/// Observes everything once. Never fails: every problem is data in the report.
pub async fn observe(cfg: &ObserveConfig, scope: Scope) -> Report {
    let sysctls_all = sysctl::read_all(&cfg.paths.proc_sys(), &[]);
    let initial = userns::in_initial_user_namespace(&cfg.paths);
    let (userns_create, idmap_mount) = userns::observe(&cfg.helper_exe, cfg.probe_timeout).await;
    let namespace_note = match initial {
        Some(true) => String::new(),
        Some(false) => "the agent is not in the initial user namespace: user.* values and probes are this namespace's, not the host's".into(),
        None => "cannot tell whether the agent is in the initial user namespace (uid_map unreadable)".into(),
    };
    let gvisor = gvisor_tiers(cfg, &sysctls_all, initial.unwrap_or(true), scope).await;
    Report {
        node: Some(node::observe(&cfg.paths)),
        agent: Some(AgentInfo {
            version: node::AGENT_VERSION.to_string(),
            ..AgentInfo::default()
        }),
        observed_at: Some(pb_timestamp(SystemTime::now())),
        user_namespaces: Some(UserNamespaces {
            sysctls: sysctls_all,
            initial_user_namespace: initial.unwrap_or(false),
            namespace_note,
            userns_create: Some(userns_create),
            idmap_mount: Some(idmap_mount),
        }),
        gvisor: Some(gvisor),
        sysctls: read_extra(cfg, &cfg.extra_sysctls),
        ..Report::default()
    }
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

/// The cheap part of an observation: only the sysctls, to notice a change
/// between full observations.
pub fn sysctl_snapshot(cfg: &ObserveConfig) -> Vec<crate::proto::v1::Sysctl> {
    let mut all = sysctl::read_all(&cfg.paths.proc_sys(), &[]);
    all.extend(read_extra(cfg, &cfg.extra_sysctls));
    all
}

async fn gvisor_tiers(
    cfg: &ObserveConfig,
    sysctls: &[crate::proto::v1::Sysctl],
    initial: bool,
    scope: Scope,
) -> Gvisor {
    let g = &cfg.gvisor;
    let (binaries, cri) = tokio::join!(
        gvisor::observe_binaries(&g.runsc_path, &g.shim_path, g.exec_timeout),
        cri::observe(&g.cri_endpoint, g.cri_timeout),
    );
    let (drop_ins, configured_handlers) = gvisor::observe_drop_ins(&g.cri_conf_dir, &cfg.paths);
    let preconditions = gvisor::preconditions(
        sysctls,
        &configured_handlers,
        gvisor::observe_kvm(&cfg.paths),
    );
    let sandbox = if scope.sandbox {
        let platform = configured_handlers
            .iter()
            .find(|h| h.name == "runsc")
            .map(|h| h.platform.clone())
            .filter(|p| !p.is_empty());
        gvisor::sandbox_probe(
            &g.runsc_path,
            !initial,
            platform.as_deref(),
            g.sandbox_timeout,
        )
        .await
    } else {
        skipped("not run (ask for it with --sandbox-probe or --require-sandbox-probe)")
    };
    let mut out = Gvisor {
        binaries,
        drop_ins,
        configured_handlers,
        cri: Some(cri),
        preconditions,
        sandbox: Some(sandbox),
        ..Gvisor::default()
    };
    summarise(&mut out);
    out
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
pub fn skipped(message: impl Into<String>) -> Probe {
    Probe {
        outcome: ProbeOutcome::Skipped as i32,
        message: message.into(),
        ..Probe::default()
    }
}

/// Recomputes the gVisor summary from its tiers.
pub fn summarise(g: &mut Gvisor) {
    let (readiness, reasons) = crate::summary::gvisor_readiness(g);
    g.readiness = readiness as i32;
    g.reasons = reasons;
}
