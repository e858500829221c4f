//! Per-handler labels for RuntimeClass scheduling:
//! `sandbox-readiness.io/<handler>=ready|not-ready|unknown`.
//!
//! A handler is `ready` when no blocking finding concerns it or the
//! node-wide requirements it depends on: the desired state's sysctls and
//! user namespace probes for every handler, and for a gVisor handler
//! (runtime type `io.containerd.runsc.v1`) gVisor readiness READY too, so
//! `user.max_user_namespaces` 0 makes `runsc` `not-ready`.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    nodestatus::{condition::could_not_tell, OWNED_LABELS_ANNOTATION, PREFIX},
    proto::v1::{DesiredState, GvisorReadiness, Report, Verdict},
    report::names::RUNSC_RUNTIME_TYPE,
};

/// A handler's label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerState {
    Ready,
    NotReady,
    Unknown,
}

impl HandlerState {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::NotReady => "not-ready",
            Self::Unknown => "unknown",
        }
    }
}

/// Findings about the node as a whole: every handler depends on them.
const NODE_WIDE: [&str; 8] = [
    "SYSCTL_MISMATCH",
    "SYSCTL_MISSING",
    "SYSCTL_UNREADABLE",
    "SYSCTL_INVALID_NAME",
    "SYSCTL_WITHHELD",
    "USERNS_CREATE_FAILED",
    "IDMAP_MOUNT_FAILED",
    "RUNTIME_STATE_IDMAP_FAILED",
];

/// Findings about gVisor as a whole: gVisor handlers depend on them.
const GVISOR_WIDE: [&str; 3] = [
    "GVISOR_NOT_READY",
    "SANDBOX_PROBE_FAILED",
    "SANDBOX_PROBE_NOT_RUN",
];

/// Why a name cannot be a label key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("runtime handler {handler:?} cannot be a label key {PREFIX}<handler>: {why}")]
pub struct LabelError {
    pub handler: String,
    pub why: String,
}

/// The label key for `handler`.
pub fn label_key(handler: &str) -> Result<String, LabelError> {
    super::validate_name_part(handler).map_err(|why| LabelError {
        handler: crate::text::clean_capped(handler, 80),
        why,
    })?;
    Ok(format!("{PREFIX}{handler}"))
}

/// Every runtime handler the desired state names, each once, in order.
pub fn handlers(desired: &DesiredState) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in desired
        .require_runtime_handlers
        .iter()
        .chain(&desired.require_pod_userns)
        .chain(&desired.require_canary)
    {
        if !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

/// Checks every handler's label key up front (`serve` refuses a desired
/// state whose handler cannot be a label when `--handler-labels` is on).
pub fn validate_handlers(desired: &DesiredState) -> Result<(), LabelError> {
    handlers(desired)
        .iter()
        .try_for_each(|h| label_key(h).map(|_| ()))
}

/// Whether the report says `handler` is a gVisor one (its drop-in's or the
/// live runtime's type is runsc's).
fn is_gvisor(report: &Report, handler: &str) -> bool {
    let Some(g) = report.gvisor.as_ref() else {
        return false;
    };
    g.configured_handlers
        .iter()
        .any(|h| h.name == handler && h.runtime_type == RUNSC_RUNTIME_TYPE)
        || g.cri.as_ref().is_some_and(|c| {
            c.handlers
                .iter()
                .any(|h| h.name == handler && h.runtime_type == RUNSC_RUNTIME_TYPE)
        })
}

/// One handler's state from the report and its verdict (both `None`: no
/// complete verdict yet).
pub fn handler_state(
    report: Option<&Report>,
    verdict: Option<&Verdict>,
    handler: &str,
) -> HandlerState {
    let (Some(report), Some(verdict)) = (report, verdict) else {
        return HandlerState::Unknown;
    };
    let gvisor = is_gvisor(report, handler);
    let mut unsure = false;
    for f in verdict.findings.iter().filter(|f| f.blocking) {
        let concerns = f.subject == handler
            || NODE_WIDE.contains(&f.code.as_str())
            || (gvisor && GVISOR_WIDE.contains(&f.code.as_str()));
        if !concerns {
            continue;
        }
        if could_not_tell(&f.code) {
            unsure = true;
        } else {
            return HandlerState::NotReady;
        }
    }
    if gvisor {
        match report.gvisor.as_ref().map(|g| g.readiness()) {
            Some(GvisorReadiness::Ready) => {}
            Some(GvisorReadiness::NotReady | GvisorReadiness::NotInstalled) => {
                return HandlerState::NotReady
            }
            _ => unsure = true,
        }
    }
    if unsure {
        HandlerState::Unknown
    } else {
        HandlerState::Ready
    }
}

/// The labels the agent wants: one per handler the desired state names
/// (skipping names that cannot be keys; `serve` refused them at start).
pub fn wanted(
    report: Option<&Report>,
    verdict: Option<&Verdict>,
    desired: &DesiredState,
) -> BTreeMap<String, String> {
    handlers(desired)
        .iter()
        .filter_map(|h| {
            let key = label_key(h).ok()?;
            Some((key, handler_state(report, verdict, h).as_str().to_string()))
        })
        .collect()
}

/// The label keys the owned-labels annotation lists. Only keys under the
/// agent's prefix count, so an annotation someone edited can never make
/// the agent remove another owner's label; anything unreadable is none.
pub fn owned(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .and_then(|a| serde_json::from_str::<Vec<String>>(a).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|k| k.starts_with(PREFIX) && k != OWNED_LABELS_ANNOTATION)
        .collect()
}

/// The owned-labels annotation's value for `keys`.
pub fn owned_annotation(keys: &BTreeSet<String>) -> String {
    serde_json::to_string(keys).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::{ConfiguredHandler, Finding, Gvisor};

    fn report(readiness: GvisorReadiness) -> Report {
        Report {
            gvisor: Some(Gvisor {
                readiness: readiness as i32,
                configured_handlers: vec![ConfiguredHandler {
                    name: "runsc".into(),
                    runtime_type: RUNSC_RUNTIME_TYPE.into(),
                    ..ConfiguredHandler::default()
                }],
                ..Gvisor::default()
            }),
            ..Report::default()
        }
    }

    fn finding(code: &str, subject: &str) -> Finding {
        Finding {
            code: code.into(),
            subject: subject.into(),
            blocking: true,
            ..Finding::default()
        }
    }

    fn verdict(findings: Vec<Finding>) -> Verdict {
        Verdict {
            converged: findings.is_empty(),
            findings,
        }
    }

    #[test]
    fn handler_states() {
        use HandlerState::*;
        let ready = report(GvisorReadiness::Ready);
        let not_ready = report(GvisorReadiness::NotReady);
        let unknown = report(GvisorReadiness::Unknown);
        type Case<'a> = (
            &'a str,
            Option<&'a Report>,
            Option<Verdict>,
            &'a str,
            HandlerState,
        );
        let cases: Vec<Case> = vec![
            ("no verdict yet", None, None, "runsc", Unknown),
            (
                "all good",
                Some(&ready),
                Some(verdict(vec![])),
                "runsc",
                Ready,
            ),
            (
                "all good, runc",
                Some(&ready),
                Some(verdict(vec![])),
                "runc",
                Ready,
            ),
            // max_user_namespaces 0: gVisor is NOT_READY even without require_gvisor.
            (
                "gvisor not ready",
                Some(&not_ready),
                Some(verdict(vec![])),
                "runsc",
                NotReady,
            ),
            (
                "gvisor not ready leaves runc",
                Some(&not_ready),
                Some(verdict(vec![])),
                "runc",
                Ready,
            ),
            (
                "gvisor unknown",
                Some(&unknown),
                Some(verdict(vec![])),
                "runsc",
                Unknown,
            ),
            (
                "a sysctl is node-wide",
                Some(&ready),
                Some(verdict(vec![finding(
                    "SYSCTL_MISMATCH",
                    "user.max_user_namespaces",
                )])),
                "runc",
                NotReady,
            ),
            (
                "its own shim",
                Some(&ready),
                Some(verdict(vec![finding("RUNTIME_SHIM_MISSING", "runsc")])),
                "runsc",
                NotReady,
            ),
            (
                "another handler's shim",
                Some(&ready),
                Some(verdict(vec![finding("RUNTIME_SHIM_MISSING", "runsc")])),
                "runc",
                Ready,
            ),
            (
                "its canary did not run",
                Some(&ready),
                Some(verdict(vec![finding("CANARY_NOT_RUN", "runsc")])),
                "runsc",
                Unknown,
            ),
            (
                "unsure then definite",
                Some(&ready),
                Some(verdict(vec![
                    finding("CANARY_NOT_RUN", "runsc"),
                    finding("CANARY_FAILED", "runsc"),
                ])),
                "runsc",
                NotReady,
            ),
            (
                "sandbox probe concerns gvisor handlers",
                Some(&ready),
                Some(verdict(vec![finding("SANDBOX_PROBE_FAILED", "runsc-kvm")])),
                "runsc",
                NotReady,
            ),
            (
                "sandbox probe not runc",
                Some(&ready),
                Some(verdict(vec![finding("SANDBOX_PROBE_FAILED", "runsc")])),
                "runc",
                Ready,
            ),
            (
                "informational findings do not count",
                Some(&ready),
                Some(verdict(vec![Finding {
                    blocking: false,
                    ..finding("NOT_INITIAL_USER_NAMESPACE", "agent")
                }])),
                "runsc",
                Ready,
            ),
        ];
        for (name, r, v, h, want) in cases {
            assert_eq!(handler_state(r, v.as_ref(), h), want, "{name}");
        }
    }

    #[test]
    fn label_keys_are_validated() {
        assert_eq!(
            label_key("runsc").as_deref(),
            Ok("sandbox-readiness.io/runsc")
        );
        assert_eq!(
            label_key("runsc.kvm_1").as_deref(),
            Ok("sandbox-readiness.io/runsc.kvm_1")
        );
        for bad in ["", "-runsc", "runsc-", "run sc", "a/b", &"x".repeat(64)] {
            assert!(label_key(bad).is_err(), "{bad}");
        }
        let d = DesiredState {
            require_runtime_handlers: vec!["runsc".into(), "runc-".into()],
            ..DesiredState::default()
        };
        let e = validate_handlers(&d)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("runc-"), "{e}");
    }

    #[test]
    fn handlers_named_once_and_wanted_labels() {
        let d = DesiredState {
            require_runtime_handlers: vec!["runsc".into(), "runc".into()],
            require_pod_userns: vec!["runc".into()],
            require_canary: vec!["runsc".into(), "kata".into()],
            ..DesiredState::default()
        };
        assert_eq!(handlers(&d), ["runsc", "runc", "kata"]);
        let r = report(GvisorReadiness::NotReady);
        let w = wanted(Some(&r), Some(&verdict(vec![])), &d);
        assert_eq!(
            w.get("sandbox-readiness.io/runsc").map(String::as_str),
            Some("not-ready")
        );
        assert_eq!(
            w.get("sandbox-readiness.io/runc").map(String::as_str),
            Some("ready")
        );
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn owned_keys_stay_under_the_prefix() {
        let a = r#"["sandbox-readiness.io/runsc","node-role.kubernetes.io/worker","sandbox-readiness.io/owned-labels"]"#;
        let o = owned(Some(a));
        assert_eq!(
            o.into_iter().collect::<Vec<_>>(),
            ["sandbox-readiness.io/runsc"]
        );
        assert!(owned(Some("not json")).is_empty());
        assert!(owned(None).is_empty());
        let keys: BTreeSet<String> = ["sandbox-readiness.io/runc".to_string()].into();
        assert_eq!(owned(Some(&owned_annotation(&keys))), keys);
    }
}
