//! Evaluation, pure: (report, desired state) → verdict.
//!
//! Shared by `probe`, the `Check` RPC and `check`, so a node is judged the
//! same way wherever the question is asked.

use thiserror::Error;

use crate::{
    proto::v1::{
        Canary, CriRuntime, DesiredState, Finding, Gvisor, GvisorReadiness, Probe, ProbeOutcome,
        Report, SysctlExpectation, SysctlState, UserNamespaces, Verdict,
    },
    report::names::CANNOT_RUN_HERE,
    report::{find_sysctl, names::RUNSC_RUNTIME_TYPE, outcome_word},
    sysctl_name::{self as sysctl, MAX_VALUE_BYTES},
};

/// At most this many sysctl expectations in one desired state.
pub const MAX_SYSCTLS: usize = 64;
/// At most this many required runtime handlers.
pub const MAX_HANDLERS: usize = 16;

/// Why a desired state was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DesiredError {
    #[error("too many sysctls: {0} (at most {MAX_SYSCTLS})")]
    TooManySysctls(usize),
    #[error("too many runtime handlers: {0} (at most {MAX_HANDLERS})")]
    TooManyHandlers(usize),
    #[error(transparent)]
    Name(#[from] sysctl::NameError),
    #[error("value for {0} is longer than {MAX_VALUE_BYTES} bytes")]
    ValueTooLong(String),
    #[error("{0:?} is not NAME=VALUE")]
    NotAssignment(String),
    #[error("runtime handler name {0:?} is invalid (lowercase letters, digits, '.', '_', '-', at most 63)")]
    HandlerName(String),
}

/// Parses a `--sysctl NAME=VALUE` flag.
pub fn parse_sysctl_flag(s: &str) -> Result<SysctlExpectation, DesiredError> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| DesiredError::NotAssignment(s.chars().take(80).collect()))?;
    let exp = SysctlExpectation {
        name: name.trim().to_string(),
        value: value.to_string(),
    };
    sysctl::validate_name(&exp.name)?;
    if exp.value.len() > MAX_VALUE_BYTES {
        return Err(DesiredError::ValueTooLong(exp.name));
    }
    Ok(exp)
}

/// Validates a desired state from a flag or a request before anything reads
/// the host with it.
pub fn validate(desired: &DesiredState) -> Result<(), DesiredError> {
    if desired.sysctls.len() > MAX_SYSCTLS {
        return Err(DesiredError::TooManySysctls(desired.sysctls.len()));
    }
    let most = desired
        .require_runtime_handlers
        .len()
        .max(desired.require_pod_userns.len())
        .max(desired.require_canary.len());
    if most > MAX_HANDLERS {
        return Err(DesiredError::TooManyHandlers(most));
    }
    for s in &desired.sysctls {
        sysctl::validate_name(&s.name)?;
        if s.value.len() > MAX_VALUE_BYTES {
            return Err(DesiredError::ValueTooLong(s.name.clone()));
        }
    }
    for h in desired
        .require_runtime_handlers
        .iter()
        .chain(&desired.require_pod_userns)
        .chain(&desired.require_canary)
    {
        validate_handler_name(h)?;
    }
    Ok(())
}

/// Runtime handler names become RuntimeClass handlers (DNS labels).
pub fn validate_handler_name(h: &str) -> Result<(), DesiredError> {
    let ok = !h.is_empty()
        && h.len() <= 63
        && h.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(DesiredError::HandlerName(h.chars().take(80).collect()))
    }
}

/// True when the desired state asks for nothing.
pub fn is_empty(d: &DesiredState) -> bool {
    d.sysctls.is_empty()
        && !d.require_userns
        && !d.require_idmap_mounts
        && d.require_runtime_handlers.is_empty()
        && !d.require_gvisor
        && !d.require_sandbox_probe
        && d.require_pod_userns.is_empty()
        && d.require_canary.is_empty()
}

/// Sysctl values compare equal when their whitespace-separated fields do
/// (the kernel prints multi-value sysctls tab-separated; people type spaces).
pub fn values_equal(expected: &str, actual: &str) -> bool {
    expected.split_whitespace().eq(actual.split_whitespace())
}

/// The shim binary containerd resolves for a runtime type
/// (`io.containerd.runsc.v1` → `containerd-shim-runsc-v1`).
pub fn shim_binary(runtime_type: &str) -> Option<String> {
    let parts: Vec<&str> = runtime_type.split('.').collect();
    match parts.as_slice() {
        [.., name, version] if !name.is_empty() && !version.is_empty() => {
            Some(format!("containerd-shim-{name}-{version}"))
        }
        _ => None,
    }
}

/// The code of a finding. The strings are a wire promise (the proto lists
/// them and says they never change): clients match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FindingCode {
    SysctlMismatch,
    SysctlMissing,
    SysctlUnreadable,
    SysctlInvalidName,
    UsernsCreateFailed,
    IdmapMountFailed,
    /// Informational: never blocks convergence.
    NotInitialUserNamespace,
    RuntimeHandlerMissing,
    RuntimeShimMissing,
    CriUnreachable,
    GvisorNotReady,
    SandboxProbeFailed,
    SandboxProbeNotRun,
    /// A desired sysctl whose file others may not read: not served, so it
    /// cannot be confirmed.
    SysctlWithheld,
    /// An idmapped clone of the runtime's root directory failed.
    RuntimeStateIdmapFailed,
    /// The CRI does not report user namespace support for a handler.
    PodUsernsUnsupported,
    /// A handler's CRI canary ran and its pod sandbox did not start (or
    /// did not finish within the deadline).
    CanaryFailed,
    /// A required canary did not run (sandbox image absent, CRI
    /// unreachable): unknown, so blocking.
    CanaryNotRun,
    /// The canary's sandbox vanished under it: blocking (not proven), but
    /// nothing is known to be broken; run it again.
    CanaryInconclusive,
}

impl FindingCode {
    /// Every code, in the order the proto lists them.
    pub const ALL: [FindingCode; 19] = [
        Self::SysctlMismatch,
        Self::SysctlMissing,
        Self::SysctlUnreadable,
        Self::SysctlInvalidName,
        Self::UsernsCreateFailed,
        Self::IdmapMountFailed,
        Self::NotInitialUserNamespace,
        Self::RuntimeHandlerMissing,
        Self::RuntimeShimMissing,
        Self::CriUnreachable,
        Self::GvisorNotReady,
        Self::SandboxProbeFailed,
        Self::SandboxProbeNotRun,
        Self::SysctlWithheld,
        Self::RuntimeStateIdmapFailed,
        Self::PodUsernsUnsupported,
        Self::CanaryFailed,
        Self::CanaryNotRun,
        Self::CanaryInconclusive,
    ];

    /// The stable string sent in `Finding::code`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SysctlMismatch => "SYSCTL_MISMATCH",
            Self::SysctlMissing => "SYSCTL_MISSING",
            Self::SysctlUnreadable => "SYSCTL_UNREADABLE",
            Self::SysctlInvalidName => "SYSCTL_INVALID_NAME",
            Self::UsernsCreateFailed => "USERNS_CREATE_FAILED",
            Self::IdmapMountFailed => "IDMAP_MOUNT_FAILED",
            Self::NotInitialUserNamespace => "NOT_INITIAL_USER_NAMESPACE",
            Self::RuntimeHandlerMissing => "RUNTIME_HANDLER_MISSING",
            Self::RuntimeShimMissing => "RUNTIME_SHIM_MISSING",
            Self::CriUnreachable => "CRI_UNREACHABLE",
            Self::GvisorNotReady => "GVISOR_NOT_READY",
            Self::SandboxProbeFailed => "SANDBOX_PROBE_FAILED",
            Self::SandboxProbeNotRun => "SANDBOX_PROBE_NOT_RUN",
            Self::SysctlWithheld => "SYSCTL_WITHHELD",
            Self::RuntimeStateIdmapFailed => "RUNTIME_STATE_IDMAP_FAILED",
            Self::PodUsernsUnsupported => "POD_USERNS_UNSUPPORTED",
            Self::CanaryFailed => "CANARY_FAILED",
            Self::CanaryNotRun => "CANARY_NOT_RUN",
            Self::CanaryInconclusive => "CANARY_INCONCLUSIVE",
        }
    }
}

impl std::fmt::Display for FindingCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn finding(
    code: FindingCode,
    subject: &str,
    expected: &str,
    actual: &str,
    message: String,
) -> Finding {
    Finding {
        code: code.as_str().into(),
        subject: subject.into(),
        expected: expected.into(),
        actual: actual.into(),
        message,
        blocking: true,
    }
}

fn probe_outcome(p: Option<&Probe>) -> ProbeOutcome {
    p.map(|p| p.outcome()).unwrap_or(ProbeOutcome::Unspecified)
}

/// Judges a report against a desired state: one part of the desired state
/// at a time, findings in that order.
pub fn evaluate(report: &Report, desired: &DesiredState) -> Verdict {
    let mut findings = Vec::new();
    findings.extend(namespace_note(report, desired));
    for exp in &desired.sysctls {
        findings.extend(sysctl_finding(report, exp));
    }
    let userns = report.user_namespaces.as_ref();
    let pod_userns = !desired.require_pod_userns.is_empty();
    if desired.require_userns || pod_userns {
        findings.extend(probe_finding(
            FindingCode::UsernsCreateFailed,
            "user namespace",
            userns.and_then(|u| u.userns_create.as_ref()),
            "cannot create a user namespace",
        ));
    }
    if desired.require_idmap_mounts || pod_userns {
        findings.extend(probe_finding(
            FindingCode::IdmapMountFailed,
            "idmapped mount",
            userns.and_then(|u| u.idmap_mount.as_ref()),
            "cannot create an idmapped mount",
        ));
    }
    if pod_userns {
        findings.extend(
            probe_finding(
                FindingCode::RuntimeStateIdmapFailed,
                "runtime root directory",
                userns.and_then(|u| u.runtime_state_idmap.as_ref()),
                "pods' volumes cannot be idmapped on the runtime's filesystem",
            )
            .map(|f| runtime_root_absent_fails(f, userns)),
        );
    }
    for name in &desired.require_pod_userns {
        findings.extend(pod_userns_finding(report.gvisor.as_ref(), name));
    }
    for name in &desired.require_runtime_handlers {
        findings.extend(handler_finding(report.gvisor.as_ref(), name));
    }
    if desired.require_gvisor {
        findings.extend(gvisor_finding(report.gvisor.as_ref()));
    }
    if desired.require_sandbox_probe {
        findings.extend(sandbox_finding(report));
    }
    for name in &desired.require_canary {
        findings.extend(canary_finding(report, name));
    }
    Verdict {
        converged: !findings.iter().any(|f| f.blocking),
        findings,
    }
}

/// Informational: user namespace facts asked of an agent outside the
/// initial user namespace are that namespace's, not the host's.
fn namespace_note(report: &Report, desired: &DesiredState) -> Option<Finding> {
    let asks_userns_facts = desired.require_userns
        || desired.require_idmap_mounts
        || !desired.require_pod_userns.is_empty()
        || desired.sysctls.iter().any(|s| s.name.starts_with("user."));
    let outside = report
        .user_namespaces
        .as_ref()
        .is_some_and(|u| !u.initial_user_namespace);
    (asks_userns_facts && outside).then(|| Finding {
        blocking: false,
        ..finding(
            FindingCode::NotInitialUserNamespace,
            "agent",
            "initial user namespace",
            "child user namespace",
            "the agent does not run in the initial user namespace: user.* values and probes are that namespace's, not the host's".into(),
        )
    })
}

fn sysctl_finding(report: &Report, exp: &SysctlExpectation) -> Option<Finding> {
    if let Err(e) = sysctl::validate_name(&exp.name) {
        return Some(finding(
            FindingCode::SysctlInvalidName,
            &exp.name,
            &exp.value,
            "",
            e.to_string(),
        ));
    }
    let Some(s) = find_sysctl(report, &exp.name) else {
        return Some(finding(
            FindingCode::SysctlMissing,
            &exp.name,
            &exp.value,
            "not observed",
            format!("{} was not observed", exp.name),
        ));
    };
    match s.state() {
        SysctlState::Present if values_equal(&exp.value, &s.value) => None,
        SysctlState::Present => Some(finding(
            FindingCode::SysctlMismatch,
            &exp.name,
            exp.value.trim(),
            s.value.trim(),
            format!(
                "{} is {}, expected {}",
                exp.name,
                s.value.trim(),
                exp.value.trim()
            ),
        )),
        SysctlState::Absent => Some(finding(
            FindingCode::SysctlMissing,
            &exp.name,
            &exp.value,
            "absent",
            format!("{} does not exist on this kernel", exp.name),
        )),
        SysctlState::Withheld => Some(finding(
            FindingCode::SysctlWithheld,
            &exp.name,
            &exp.value,
            "withheld",
            format!(
                "{} cannot be confirmed: {} (the agent serves only sysctls any user may read)",
                exp.name, s.error
            ),
        )),
        SysctlState::Unreadable | SysctlState::Unspecified => Some(finding(
            FindingCode::SysctlUnreadable,
            &exp.name,
            &exp.value,
            "unreadable",
            format!("{} could not be read: {}", exp.name, s.error),
        )),
    }
}

/// A finding unless the probe passed.
fn probe_finding(
    code: FindingCode,
    subject: &str,
    p: Option<&Probe>,
    what: &str,
) -> Option<Finding> {
    let outcome = probe_outcome(p);
    (outcome != ProbeOutcome::Passed).then(|| {
        let detail = p
            .map(|p| p.message.as_str())
            .filter(|m| !m.is_empty())
            .unwrap_or("not run");
        finding(
            code,
            subject,
            "passed",
            outcome_word(p),
            format!("{what}: {detail}"),
        )
    })
}

/// "Not applicable" (no runtime root at all) is a failure once pod user
/// namespaces are required: they need that directory.
fn runtime_root_absent_fails(mut f: Finding, userns: Option<&UserNamespaces>) -> Finding {
    let p = userns.and_then(|u| u.runtime_state_idmap.as_ref());
    if p.is_some_and(|p| p.outcome() == ProbeOutcome::Skipped && p.errno == libc::ENOENT) {
        f.actual = "failed".into();
    }
    f
}

/// The live CRI, when it answered.
fn live_cri(gvisor: Option<&Gvisor>) -> Option<&CriRuntime> {
    gvisor.and_then(|g| g.cri.as_ref()).filter(|c| c.reachable)
}

/// `CRI_UNREACHABLE` about `subject`; `what` completes "cannot ask the CRI
/// runtime …".
fn cri_unreachable(gvisor: Option<&Gvisor>, subject: &str, expected: &str, what: &str) -> Finding {
    let why = gvisor
        .and_then(|g| g.cri.as_ref())
        .map(|c| c.error.as_str())
        .filter(|e| !e.is_empty())
        .unwrap_or("not observed");
    finding(
        FindingCode::CriUnreachable,
        subject,
        expected,
        "CRI unreachable",
        format!("cannot ask the CRI runtime {what}: {why}"),
    )
}

/// A required runtime handler: the live CRI must report it, and its shim
/// (when observed) must be executable.
fn handler_finding(gvisor: Option<&Gvisor>, name: &str) -> Option<Finding> {
    let Some(cri) = live_cri(gvisor) else {
        let what = format!("about handler {name}");
        return Some(cri_unreachable(
            gvisor,
            name,
            "handler reported by the CRI",
            &what,
        ));
    };
    let Some(handler) = cri.handlers.iter().find(|h| h.name == name) else {
        return Some(finding(
            FindingCode::RuntimeHandlerMissing,
            name,
            "reported by the CRI",
            "absent",
            format!(
                "the CRI runtime ({}) does not report the runtime handler {name}",
                cri.endpoint
            ),
        ));
    };
    // The shim: from the live runtime type, else from the drop-ins.
    let runtime_type = Some(handler.runtime_type.as_str())
        .filter(|t| !t.is_empty())
        .or_else(|| {
            gvisor?
                .configured_handlers
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.runtime_type.as_str())
        });
    let shim = runtime_type.and_then(shim_binary);
    let b = shim
        .as_deref()
        .and_then(|s| gvisor?.binaries.iter().find(|b| b.name == s))?;
    (!(b.present && b.regular_file && b.executable)).then(|| {
        finding(
            FindingCode::RuntimeShimMissing,
            name,
            &format!("{} executable", b.name),
            if b.present {
                "not executable"
            } else {
                "absent"
            },
            format!(
                "handler {name} is registered but its shim {} is missing or not executable at {}",
                b.name, b.path
            ),
        )
    })
}

/// The name a `--require-pod-userns` handler has in `runtime_handlers`:
/// `default` is the runtime's default handler, the unnamed entry.
fn cri_handler_name(name: &str) -> &str {
    if name == "default" {
        ""
    } else {
        name
    }
}

/// Whether kubelet would accept `hostUsers: false` for this handler: it
/// reads `features.user_namespaces` of the handler in `runtime_handlers`,
/// and takes absent features (or no `runtime_handlers`, containerd 1.x) as
/// "not supported". `None`: supported (the metrics serve this per handler).
pub fn pod_userns_finding(gvisor: Option<&Gvisor>, name: &str) -> Option<Finding> {
    let Some(cri) = live_cri(gvisor) else {
        let what = format!("whether handler {name} supports user namespaces");
        return Some(cri_unreachable(gvisor, name, "user_namespaces true", &what));
    };
    let unsupported = |actual: &str, why: String| {
        Some(finding(
            FindingCode::PodUsernsUnsupported,
            name,
            "user_namespaces true",
            actual,
            format!("kubelet will refuse hostUsers: false pods with handler {name}: {why}"),
        ))
    };
    let runtime = format!("{} {}", cri.runtime_name, cri.runtime_version)
        .trim()
        .to_string();
    if cri.handlers_source != crate::report::names::SOURCE_RUNTIME_HANDLERS {
        return unsupported(
            "no runtime_handlers",
            format!("the runtime ({runtime}) does not report handler features; upgrade to containerd >= 2.0"),
        );
    }
    let wanted = cri_handler_name(name);
    let Some(h) = cri.handlers.iter().find(|h| h.name == wanted) else {
        return unsupported(
            "absent",
            format!("the runtime ({runtime}) does not report this handler"),
        );
    };
    match h.user_namespaces {
        Some(true) => None,
        Some(false) => unsupported(
            "user_namespaces false",
            format!("the runtime ({runtime}) reports user_namespaces false for it: its OCI runtime lacks idmapped mounts; install runc >= 1.2 or crun >= 1.9"),
        ),
        None => unsupported(
            "features absent",
            format!("the runtime ({runtime}) reports no features for it (its shim could not be asked, or does not report them): install the shim, and a runtime that reports user namespaces (runc >= 1.2, crun >= 1.9)"),
        ),
    }
}

fn gvisor_finding(gvisor: Option<&Gvisor>) -> Option<Finding> {
    let readiness = gvisor
        .map(|g| g.readiness())
        .unwrap_or(GvisorReadiness::Unspecified);
    if readiness == GvisorReadiness::Ready {
        return None;
    }
    let reasons = gvisor.map(|g| g.reasons.join("; ")).unwrap_or_default();
    Some(finding(
        FindingCode::GvisorNotReady,
        "gvisor",
        "READY",
        crate::report::readiness_word(gvisor),
        if reasons.is_empty() {
            "gVisor is not ready".into()
        } else {
            format!("gVisor is not ready: {reasons}")
        },
    ))
}

fn sandbox_finding(report: &Report) -> Option<Finding> {
    let gvisor = report.gvisor.as_ref();
    let p = gvisor.and_then(|g| g.sandbox.as_ref());
    match probe_outcome(p) {
        ProbeOutcome::Passed => None,
        ProbeOutcome::Failed | ProbeOutcome::Error => probe_finding(
            FindingCode::SandboxProbeFailed,
            "runsc",
            p,
            "the gVisor sandbox did not start",
        ),
        _ if cannot_run_here(p) => canary_for_sandbox_probe(report),
        ProbeOutcome::Skipped | ProbeOutcome::Unspecified | ProbeOutcome::Inconclusive => {
            probe_finding(
                FindingCode::SandboxProbeNotRun,
                "runsc",
                p,
                "the gVisor sandbox probe did not run",
            )
        }
    }
}

/// Whether the sandbox probe was skipped because runsc cannot run where
/// the agent runs (inside the extension container), not for the node.
fn cannot_run_here(p: Option<&Probe>) -> bool {
    p.is_some_and(|p| {
        p.outcome() == ProbeOutcome::Skipped && p.message.starts_with(CANNOT_RUN_HERE)
    })
}

/// The configured gVisor handlers (runtime type `io.containerd.runsc.v1`).
fn gvisor_handlers(report: &Report) -> Vec<&str> {
    report
        .gvisor
        .iter()
        .flat_map(|g| &g.configured_handlers)
        .filter(|h| h.runtime_type == RUNSC_RUNTIME_TYPE)
        .map(|h| h.name.as_str())
        .collect()
}

/// The canaries that stand in for `--require-sandbox-probe` in this
/// report: the gVisor handlers' when `runsc do` cannot run where the agent
/// runs, else none. The agent runs them where it may (`serve`: handlers in
/// `--allow-canary`; `probe`: always).
pub fn sandbox_probe_canaries(report: &Report) -> Vec<String> {
    let p = report.gvisor.as_ref().and_then(|g| g.sandbox.as_ref());
    if !cannot_run_here(p) {
        return Vec::new();
    }
    gvisor_handlers(report)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Every canary `desired` needs for `report`, each once: the required
/// ones, then those standing in for `--require-sandbox-probe`
/// ([`sandbox_probe_canaries`]).
pub fn canaries_needed(report: &Report, desired: &DesiredState) -> Vec<String> {
    let mut handlers = desired.require_canary.clone();
    if desired.require_sandbox_probe {
        handlers.extend(sandbox_probe_canaries(report));
    }
    let mut seen = Vec::new();
    handlers.retain(|h| {
        let fresh = !seen.contains(h);
        seen.push(h.clone());
        fresh
    });
    handlers
}

/// `--require-sandbox-probe` where runsc cannot run where the agent runs:
/// satisfied by a passed canary of every gVisor handler.
fn canary_for_sandbox_probe(report: &Report) -> Option<Finding> {
    let p = report.gvisor.as_ref().and_then(|g| g.sandbox.as_ref());
    let why = p.map(|p| p.message.as_str()).unwrap_or_default();
    let handlers = gvisor_handlers(report);
    if handlers.is_empty() {
        return Some(finding(
            FindingCode::SandboxProbeNotRun,
            "runsc",
            "passed",
            "skipped",
            format!("the gVisor sandbox probe did not run: {why}; no handler with runtime type {RUNSC_RUNTIME_TYPE} is configured, so no CRI canary can stand in for it"),
        ));
    }
    let mut failed = Vec::new();
    let mut missing = Vec::new();
    for h in handlers {
        match find_canary(report, h).and_then(|c| c.result.as_ref()) {
            Some(r) if r.outcome() == ProbeOutcome::Passed => {}
            Some(r) if matches!(r.outcome(), ProbeOutcome::Failed | ProbeOutcome::Error) => {
                failed.push(format!("{h}: {}", r.message));
            }
            Some(r) => missing.push(format!("{h} ({})", r.message)),
            None => missing.push(h.to_string()),
        }
    }
    if !failed.is_empty() {
        return Some(finding(
            FindingCode::SandboxProbeFailed,
            "runsc",
            "passed",
            "canary failed",
            format!(
                "the gVisor sandbox did not start through the CRI (the canary stands in for runsc do, which cannot run where the agent runs): {}",
                failed.join("; ")
            ),
        ));
    }
    (!missing.is_empty()).then(|| {
        finding(
            FindingCode::SandboxProbeNotRun,
            "runsc",
            "passed",
            "skipped",
            format!(
                "the gVisor sandbox probe did not run: {why}; the CRI canary stands in for it, but did not pass for {}: allow it (serve --allow-canary HANDLER) or run probe --require-canary HANDLER",
                missing.join(", ")
            ),
        )
    })
}

fn find_canary<'a>(report: &'a Report, handler: &str) -> Option<&'a Canary> {
    report.canaries.iter().find(|c| c.handler == handler)
}

/// A required canary: it must have passed.
fn canary_finding(report: &Report, handler: &str) -> Option<Finding> {
    let result = find_canary(report, handler).and_then(|c| c.result.as_ref());
    let outcome = probe_outcome(result);
    let message = result.map(|r| r.message.as_str()).unwrap_or_default();
    let (code, text) = match outcome {
        ProbeOutcome::Passed => return None,
        ProbeOutcome::Failed | ProbeOutcome::Error => (
            FindingCode::CanaryFailed,
            format!("the CRI canary for handler {handler} failed: {message}"),
        ),
        ProbeOutcome::Inconclusive => (
            FindingCode::CanaryInconclusive,
            format!("the CRI canary for handler {handler} was inconclusive (not broken; run it again): {message}"),
        ),
        ProbeOutcome::Skipped | ProbeOutcome::Unspecified => (
            FindingCode::CanaryNotRun,
            if message.is_empty() {
                format!("the CRI canary for handler {handler} did not run")
            } else {
                format!("the CRI canary for handler {handler} did not run: {message}")
            },
        ),
    };
    Some(finding(code, handler, "passed", outcome_word(result), text))
}

#[cfg(test)]
mod tests;
