//! The Node condition from a verdict, and when it must be written.
//!
//! `True`: the node meets the agent's desired state. `False`: a blocking
//! finding says something is wrong; `reason` is the first such finding's
//! code in CamelCase, `message` the findings' sentences. `Unknown`: no
//! verdict yet, or the only blocking findings say the agent could not tell
//! ([`could_not_tell`]), so a fresh node still waiting for its sandbox
//! image is `Unknown`, not `False`, and a MachineHealthCheck on `False`
//! leaves it alone.

use serde::{Deserialize, Serialize};

use crate::{proto::v1::Verdict, text};

/// The most characters a condition message keeps (kubectl and the
/// controller print it; the findings' sentences are bounded, their number
/// is not).
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// Reason of `True`.
pub const REASON_CONVERGED: &str = "Converged";
/// Reason of `Unknown` before the first complete verdict.
pub const REASON_NO_VERDICT: &str = "NoVerdictYet";
/// Reason of `Unknown` when the verdict's observation is older than the
/// writer's limit: a heartbeat proves the writer alive, not the observer.
pub const REASON_OBSERVATION_STALE: &str = "ObservationStale";
/// Reason of `Unknown` after a reboot, until the first complete verdict of
/// the new boot: the condition on the Node was made on another boot (or
/// does not say on which), so it is not left to speak for this one.
pub const REASON_NOT_CHECKED_THIS_BOOT: &str = "NotCheckedThisBoot";

/// The condition after a reboot, before the first complete verdict:
/// `made_on` is the Node's verdict-boot annotation (`None`: it has none),
/// `this_boot` this node's boot id. Both are in the message, so it stays the
/// same (no new write) until the verdict replaces it.
pub fn not_checked_this_boot(made_on: Option<&str>, this_boot: &str) -> Wanted {
    let made = match made_on {
        Some(b) => format!(
            "the condition present was made on boot {}",
            text::clean_capped(b, 64)
        ),
        None => format!(
            "the condition present does not say which boot it was made on (no {} annotation)",
            crate::nodestatus::VERDICT_BOOT_ANNOTATION
        ),
    };
    Wanted {
        status: Status::Unknown,
        reason: REASON_NOT_CHECKED_THIS_BOOT.into(),
        message: format!(
            "{made} and this node booted as {}: a verdict follows once the agent's first complete observation of this boot is done",
            text::clean_capped(this_boot, 64)
        ),
    }
}

/// What the writer puts on the Node before its first complete verdict of
/// this boot (`None`: the Node is left as it is). A Node without the
/// condition gets `NoVerdictYet`. One whose condition was made on another
/// boot, or does not say on which (`verdict_boot`, the Node's verdict-boot
/// annotation), gets `NotCheckedThisBoot` at once: a `True` kept from before
/// a reboot would otherwise speak for a boot nobody checked. One made on
/// this boot (a plain restart of the agent) is left, so a restart does not
/// flap; so is every condition when this node's boot id is unknown (empty),
/// since then no boot can be told from another.
pub fn before_first_verdict(
    existing: Option<&NodeCondition>,
    verdict_boot: Option<&str>,
    this_boot: &str,
) -> Option<Wanted> {
    if existing.is_none() {
        return Some(from_verdict(None));
    }
    if this_boot.is_empty() || verdict_boot == Some(this_boot) {
        return None;
    }
    Some(not_checked_this_boot(verdict_boot, this_boot))
}

/// The condition when the last observation is older than `limit`: the
/// verdict made on it is not re-asserted. No age in the message (it would
/// be a new write every heartbeat).
pub fn observation_stale(limit: std::time::Duration) -> Wanted {
    Wanted {
        status: Status::Unknown,
        reason: REASON_OBSERVATION_STALE.into(),
        message: format!(
            "the agent's last observation of this node is older than {}: its observer is stuck, and the verdict made on it is not re-asserted",
            humantime::format_duration(limit)
        ),
    }
}

/// Finding codes that say the agent could not tell, not that the node is
/// wrong: the condition is `Unknown` when every blocking finding is one of
/// these. The README lists them.
pub const COULD_NOT_TELL: [&str; 6] = [
    "CANARY_NOT_RUN",
    "CANARY_INCONCLUSIVE",
    "CRI_UNREACHABLE",
    "SANDBOX_PROBE_NOT_RUN",
    // The file could not be read (the agent's own resources, a transient
    // error): says nothing about the value.
    "SYSCTL_UNREADABLE",
    // Others may not read it, so the agent never reads it: unconfirmed.
    "SYSCTL_WITHHELD",
];

/// Whether a finding code is of the "could not tell" kind.
pub fn could_not_tell(code: &str) -> bool {
    COULD_NOT_TELL.contains(&code)
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// The status string as the API server holds it; anything else is
    /// `None` (a condition someone else wrote badly).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "True" => Some(Self::True),
            "False" => Some(Self::False),
            "Unknown" => Some(Self::Unknown),
            _ => None,
        }
    }
}

/// What the condition should say (without its times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub status: Status,
    pub reason: String,
    pub message: String,
}

/// `SYSCTL_MISMATCH` → `SysctlMismatch` (API conventions: a reason is one
/// CamelCase word).
pub fn camel_case(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for part in code.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars.map(|c| c.to_ascii_lowercase()));
        }
    }
    if out.is_empty() {
        out.push_str("Unknown");
    }
    out
}

/// The condition a verdict gives; `None`: no complete verdict yet.
pub fn from_verdict(verdict: Option<&Verdict>) -> Wanted {
    let Some(v) = verdict else {
        return Wanted {
            status: Status::Unknown,
            reason: REASON_NO_VERDICT.into(),
            message: "the agent has no complete verdict yet".into(),
        };
    };
    let blocking: Vec<_> = v.findings.iter().filter(|f| f.blocking).collect();
    if blocking.is_empty() {
        return Wanted {
            status: Status::True,
            reason: REASON_CONVERGED.into(),
            message: "the node meets the agent's desired state".into(),
        };
    }
    // Definite findings first: the reason is the first of them, and the
    // message leads with what is wrong, then what could not be told.
    let (definite, unsure): (Vec<_>, Vec<_>) =
        blocking.into_iter().partition(|f| !could_not_tell(&f.code));
    let status = if definite.is_empty() {
        Status::Unknown
    } else {
        Status::False
    };
    let ordered: Vec<_> = definite.into_iter().chain(unsure).collect();
    let reason = ordered
        .first()
        .map(|f| camel_case(&f.code))
        .unwrap_or_default();
    let joined = ordered
        .iter()
        .map(|f| f.message.trim())
        .filter(|m| !m.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    Wanted {
        status,
        reason,
        message: text::clean_capped(&joined, MAX_MESSAGE_CHARS),
    }
}

/// A Node condition as the API server holds it (core/v1 NodeCondition).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The condition to write at `now` (RFC 3339), given the one on the Node:
/// `lastTransitionTime` stays while the status does (also across agent
/// restarts, since it comes from the Node as read), `lastHeartbeatTime` is
/// `now`.
pub fn next(
    type_: &str,
    existing: Option<&NodeCondition>,
    wanted: &Wanted,
    now: &str,
) -> NodeCondition {
    let kept = existing
        .filter(|c| Status::parse(&c.status) == Some(wanted.status))
        .and_then(|c| c.last_transition_time.clone());
    NodeCondition {
        type_: type_.into(),
        status: wanted.status.as_str().into(),
        last_heartbeat_time: Some(now.into()),
        last_transition_time: Some(kept.unwrap_or_else(|| now.into())),
        reason: wanted.reason.clone(),
        message: wanted.message.clone(),
    }
}

/// Whether the Node's condition already says what is wanted (status,
/// reason and message): then only a heartbeat is due.
pub fn says(existing: Option<&NodeCondition>, wanted: &Wanted) -> bool {
    existing.is_some_and(|c| {
        Status::parse(&c.status) == Some(wanted.status)
            && c.reason == wanted.reason
            && c.message == wanted.message
    })
}

/// The condition of `type_` among a Node's `status.conditions`.
pub fn find<'a>(conditions: &'a [NodeCondition], type_: &str) -> Option<&'a NodeCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Checks a `--condition-type`: a qualified name (optional DNS subdomain
/// prefix, `/`, a name of at most 63 characters), as `kubectl wait
/// --for=condition=…` and a MachineHealthCheck accept it.
pub fn validate_type(t: &str) -> Result<(), String> {
    crate::nodestatus::validate_qualified_name(t).map_err(|why| {
        format!(
            "condition type {:?} is invalid: {why}",
            text::clean_capped(t, 80)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::Finding;

    fn f(code: &str, message: &str, blocking: bool) -> Finding {
        Finding {
            code: code.into(),
            message: message.into(),
            blocking,
            ..Finding::default()
        }
    }

    fn verdict(findings: Vec<Finding>) -> Verdict {
        Verdict {
            converged: !findings.iter().any(|f| f.blocking),
            findings,
        }
    }

    #[test]
    fn the_condition_follows_the_verdict() {
        let mismatch = f(
            "SYSCTL_MISMATCH",
            "user.max_user_namespaces is 0, expected 11255",
            true,
        );
        let not_run = f(
            "CANARY_NOT_RUN",
            "the CRI canary for handler runsc did not run",
            true,
        );
        let note = f(
            "NOT_INITIAL_USER_NAMESPACE",
            "the agent does not run in the initial user namespace",
            false,
        );
        let shim = f(
            "RUNTIME_SHIM_MISSING",
            "handler runsc is registered but its shim is missing",
            true,
        );
        let cases: Vec<(&str, Option<Verdict>, Status, &str, &str)> = vec![
            ("no verdict", None, Status::Unknown, "NoVerdictYet", "the agent has no complete verdict yet"),
            ("converged", Some(verdict(vec![])), Status::True, "Converged", "the node meets the agent's desired state"),
            ("informational only", Some(verdict(vec![note.clone()])), Status::True, "Converged", "the node meets the agent's desired state"),
            ("one definite", Some(verdict(vec![mismatch.clone()])), Status::False, "SysctlMismatch", "user.max_user_namespaces is 0, expected 11255"),
            ("could not tell only", Some(verdict(vec![not_run.clone()])), Status::Unknown, "CanaryNotRun", "the CRI canary for handler runsc did not run"),
            (
                "definite after unsure: the definite one is the reason",
                Some(verdict(vec![note, not_run.clone(), shim.clone()])),
                Status::False,
                "RuntimeShimMissing",
                "handler runsc is registered but its shim is missing; the CRI canary for handler runsc did not run",
            ),
            (
                "two definite in order",
                Some(verdict(vec![mismatch, shim])),
                Status::False,
                "SysctlMismatch",
                "user.max_user_namespaces is 0, expected 11255; handler runsc is registered but its shim is missing",
            ),
        ];
        for (name, v, status, reason, message) in cases {
            let w = from_verdict(v.as_ref());
            assert_eq!(w.status, status, "{name}");
            assert_eq!(w.reason, reason, "{name}");
            assert_eq!(w.message, message, "{name}");
        }
    }

    #[test]
    fn every_could_not_tell_code_is_a_finding_code() {
        let codes: Vec<&str> = crate::evaluate::FindingCode::ALL
            .iter()
            .map(|c| c.as_str())
            .collect();
        for c in COULD_NOT_TELL {
            assert!(codes.contains(&c), "{c}");
        }
        for c in [
            "CRI_UNREACHABLE",
            "SANDBOX_PROBE_NOT_RUN",
            "CANARY_INCONCLUSIVE",
        ] {
            let w = from_verdict(Some(&verdict(vec![f(c, "x", true)])));
            assert_eq!(w.status, Status::Unknown, "{c}");
        }
    }

    #[test]
    fn the_message_is_bounded_and_one_line() {
        let long = "x".repeat(500);
        let many: Vec<Finding> = (0..20)
            .map(|_| f("GVISOR_NOT_READY", &long, true))
            .collect();
        let w = from_verdict(Some(&verdict(many)));
        assert!(w.message.chars().count() <= MAX_MESSAGE_CHARS + 1);
        assert!(w.message.ends_with('…'));
        let w = from_verdict(Some(&verdict(vec![f(
            "GVISOR_NOT_READY",
            "a\nb\u{1b}[2J",
            true,
        )])));
        assert_eq!(w.message, "a b?[2J");
    }

    #[test]
    fn camel_case_of_codes() {
        for (code, want) in [
            ("SYSCTL_MISMATCH", "SysctlMismatch"),
            ("RUNTIME_SHIM_MISSING", "RuntimeShimMissing"),
            ("CRI_UNREACHABLE", "CriUnreachable"),
            ("X", "X"),
            ("", "Unknown"),
            ("__", "Unknown"),
        ] {
            assert_eq!(camel_case(code), want, "{code}");
        }
    }

    #[test]
    fn the_transition_time_changes_only_with_the_status() {
        let t = DEFAULT_TYPE;
        let old = NodeCondition {
            type_: t.into(),
            status: "False".into(),
            last_heartbeat_time: Some("2026-12-01T10:00:00Z".into()),
            last_transition_time: Some("2026-12-01T09:00:00Z".into()),
            reason: "SysctlMismatch".into(),
            message: "a".into(),
        };
        let false_other = Wanted {
            status: Status::False,
            reason: "RuntimeShimMissing".into(),
            message: "b".into(),
        };
        let n = next(t, Some(&old), &false_other, "2026-12-01T11:00:00Z");
        assert_eq!(
            n.last_transition_time.as_deref(),
            Some("2026-12-01T09:00:00Z")
        );
        assert_eq!(
            n.last_heartbeat_time.as_deref(),
            Some("2026-12-01T11:00:00Z")
        );
        assert_eq!(n.reason, "RuntimeShimMissing");
        let t_true = Wanted {
            status: Status::True,
            reason: REASON_CONVERGED.into(),
            message: String::new(),
        };
        let n = next(t, Some(&old), &t_true, "2026-12-01T11:00:00Z");
        assert_eq!(
            n.last_transition_time.as_deref(),
            Some("2026-12-01T11:00:00Z")
        );
        assert_eq!(n.status, "True");
        // No condition yet: the transition is now.
        let n = next(t, None, &t_true, "2026-12-01T11:00:00Z");
        assert_eq!(
            n.last_transition_time.as_deref(),
            Some("2026-12-01T11:00:00Z")
        );
        // A status someone wrote badly counts as a change.
        let bad = NodeCondition {
            status: "false".into(),
            ..old.clone()
        };
        let n = next(t, Some(&bad), &false_other, "2026-12-01T11:00:00Z");
        assert_eq!(
            n.last_transition_time.as_deref(),
            Some("2026-12-01T11:00:00Z")
        );
        assert!(says(
            Some(&old),
            &Wanted {
                status: Status::False,
                reason: "SysctlMismatch".into(),
                message: "a".into()
            }
        ));
        assert!(!says(Some(&old), &false_other));
        assert!(!says(None, &false_other));
    }

    #[test]
    fn before_the_first_verdict_only_another_boots_condition_is_replaced() {
        let true_before = NodeCondition {
            type_: DEFAULT_TYPE.into(),
            status: "True".into(),
            reason: REASON_CONVERGED.into(),
            message: "the node meets the agent's desired state".into(),
            ..NodeCondition::default()
        };
        let c = Some(&true_before);
        // Another boot's verdict: Unknown at once, naming both boots.
        let w = before_first_verdict(c, Some("boot-1"), "boot-2");
        let w = w.unwrap_or_else(|| panic!("another boot's condition left"));
        assert_eq!(w.status, Status::Unknown);
        assert_eq!(w.reason, "NotCheckedThisBoot");
        assert_eq!(
            w.message,
            "the condition present was made on boot boot-1 and this node booted as boot-2: a verdict follows once the agent's first complete observation of this boot is done"
        );
        // No annotation (an agent that never wrote it): the same.
        let w = before_first_verdict(c, None, "boot-2");
        let w = w.unwrap_or_else(|| panic!("an unattributed condition left"));
        assert_eq!(w.reason, REASON_NOT_CHECKED_THIS_BOOT);
        assert!(
            w.message
                .contains("no sandbox-readiness.io/verdict-boot annotation"),
            "{}",
            w.message
        );
        assert!(w.message.contains("booted as boot-2"), "{}", w.message);
        // This boot's (the agent restarted): left as it is, no flap.
        assert_eq!(before_first_verdict(c, Some("boot-2"), "boot-2"), None);
        // This node's boot id unknown: nothing to tell boots apart by.
        assert_eq!(before_first_verdict(c, Some("boot-1"), ""), None);
        // No condition: NoVerdictYet, whatever the annotation says.
        for ann in [None, Some("boot-1"), Some("boot-2")] {
            let w = before_first_verdict(None, ann, "boot-2");
            assert_eq!(w, Some(from_verdict(None)), "{ann:?}");
        }
        // The message is the same each time (no new write per attempt),
        // and an annotation someone wrote badly stays one short line.
        assert_eq!(
            before_first_verdict(c, Some("boot-1"), "boot-2"),
            before_first_verdict(c, Some("boot-1"), "boot-2")
        );
        let odd = format!("a\n{}", "x".repeat(200));
        let w = before_first_verdict(c, Some(&odd), "boot-2").unwrap_or_else(|| panic!("left"));
        assert!(!w.message.contains('\n'), "{}", w.message);
        assert!(w.message.len() < 400, "{}", w.message);
    }

    const DEFAULT_TYPE: &str = crate::nodestatus::DEFAULT_CONDITION_TYPE;

    #[test]
    fn condition_types_are_qualified_names() {
        for ok in [DEFAULT_TYPE, "SandboxReady", "example.com/Ready"] {
            assert!(validate_type(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/Ready",
            "a/b/c",
            "sandbox-readiness.io/",
            "Bad Type",
            "-x",
        ] {
            assert!(validate_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_node_condition_round_trips_as_the_api_writes_it() {
        let json = r#"{"type":"Ready","status":"True","lastHeartbeatTime":"2026-12-01T10:00:00Z","lastTransitionTime":"2026-12-01T09:00:00Z","reason":"KubeletReady","message":"kubelet is posting ready status"}"#;
        let c: NodeCondition = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.type_, "Ready");
        assert_eq!(serde_json::to_string(&c).unwrap_or_default(), json);
    }
}
