//! What the agent writes on its own Node, pure: the sandbox condition from a
//! verdict ([`condition`]), the per-handler labels ([`labels`]), the patch
//! bodies ([`patch`]) and the Node's name from a credential ([`identity`]).
//!
//! The I/O (the API server client) is in [`crate::kube`], the task that
//! writes in `agent::writer`. Written as Node Problem Detector writes its
//! conditions: a strategic merge patch of `status.conditions` on
//! `nodes/NAME/status`, merged by `type` so kubelet's conditions stay
//! (kubernetes/node-problem-detector
//! `pkg/exporters/k8sexporter/problemclient/problem_client.go`).

pub mod condition;
pub mod identity;
pub mod labels;
pub mod patch;
pub mod read;

/// The prefix of every label and annotation the agent owns.
pub const PREFIX: &str = "sandbox-readiness.io/";

/// The default condition type (`--condition-type`; the controller's flag
/// has the same name and default).
pub const DEFAULT_CONDITION_TYPE: &str = "sandbox-readiness.io/SandboxReady";

/// The annotation listing the labels the agent set, so a restarted agent
/// knows which ones to remove (Talos keeps its own labels the same way:
/// siderolabs/talos `internal/app/machined/pkg/controllers/k8s/node_apply.go`,
/// annotation `talos.dev/owned-labels`).
pub const OWNED_LABELS_ANNOTATION: &str = "sandbox-readiness.io/owned-labels";

/// The annotation holding the bootID (`/proc/sys/kernel/random/boot_id`)
/// of the observation the Node's condition was written from. Written after
/// the condition, in the same metadata patch as the labels, so a reader
/// that sees it equal to kubelet's `status.nodeInfo.bootID` knows the
/// condition is this boot's; a condition left from before a reboot (or a
/// Node another machine registered under the same name) carries another.
pub const VERDICT_BOOT_ANNOTATION: &str = "sandbox-readiness.io/verdict-boot";

/// The annotation holding the desired state the node was judged against
/// (written and parsed by the desired-state library).
pub const DESIRED_ANNOTATION: &str = crate::desired::ANNOTATION;

/// The label name rule (the part after the prefix): at most 63
/// characters, alphanumeric at both ends, `-`, `_`, `.` and alphanumerics
/// between (apimachinery `validation.IsQualifiedName`).
pub(crate) fn validate_name_part(n: &str) -> Result<(), String> {
    if n.is_empty() {
        return Err("the name is empty".into());
    }
    if n.len() > 63 {
        return Err(format!("the name is {} characters, at most 63", n.len()));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let first_last = n.chars().next().is_some_and(alnum) && n.chars().last().is_some_and(alnum);
    if !first_last || !n.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.')) {
        return Err("a name must start and end with a letter or digit and hold only letters, digits, '-', '_' and '.'".into());
    }
    Ok(())
}

/// A DNS subdomain (a qualified name's prefix): at most 253 characters of
/// lowercase DNS labels.
fn validate_prefix(p: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
        return Err(format!("the prefix {p:?} is not a DNS subdomain"));
    }
    Ok(())
}

/// `[prefix/]name`, as label keys and condition types are.
pub fn validate_qualified_name(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some((prefix, name)) => {
            validate_prefix(prefix)?;
            validate_name_part(name)
        }
        None => validate_name_part(s),
    }
}
