//! A resource error of the agent itself (out of descriptors or memory while
//! opening a sysctl file or starting the probe helper) is not a fact about
//! the node. [`keep_last_good`] puts the last good value back in its place
//! and says what the observation missed, so a connection flood against the
//! agent can never change what it reports about the host. Pure.

use crate::proto::v1::{Probe, ProbeOutcome, Report, Sysctl, SysctlState};

/// Whether `errno` is the agent running out of its own resources: its
/// descriptors (EMFILE), the system's file table (ENFILE) or memory (ENOMEM).
pub fn is_agent_resource_errno(errno: i32) -> bool {
    matches!(errno, libc::EMFILE | libc::ENFILE | libc::ENOMEM)
}

/// Whether an error text (as `std::io::Error` prints it) names one of
/// those. Sysctl errors are carried as text only.
fn is_agent_resource_text(text: &str) -> bool {
    [libc::EMFILE, libc::ENFILE, libc::ENOMEM]
        .iter()
        .any(|e| text.contains(&format!("(os error {e})")))
}

fn sysctl_hit(s: &Sysctl) -> bool {
    s.state == SysctlState::Unreadable as i32 && is_agent_resource_text(&s.error)
}

/// Whether a freshly read sysctl failed because of the agent's own
/// resources (so a cheap poll must not take it for a change on the node).
pub fn sysctl_read_hit_agent_limits(s: &Sysctl) -> bool {
    sysctl_hit(s)
}

fn probe_hit(p: &Probe) -> bool {
    p.outcome == ProbeOutcome::Error as i32
        && (is_agent_resource_errno(p.errno) || is_agent_resource_text(&p.message))
}

/// Replaces every value of `report` that failed with the agent's own
/// resource error by the one in `previous` (the last published report), and
/// returns a line for each ("what: why"). A value with no earlier one stays
/// as observed, and is still listed.
pub fn keep_last_good(previous: &Report, report: &mut Report) -> Vec<String> {
    let mut notes = Vec::new();
    let prev_u = previous.user_namespaces.as_ref();
    if let Some(u) = report.user_namespaces.as_mut() {
        let prev = prev_u.map(|p| p.sysctls.as_slice()).unwrap_or_default();
        carry_sysctls(&mut u.sysctls, prev, &mut notes);
        carry_probe(
            "user namespace probe",
            &mut u.userns_create,
            prev_u.and_then(|p| p.userns_create.as_ref()),
            &mut notes,
        );
        carry_probe(
            "idmapped mount probe",
            &mut u.idmap_mount,
            prev_u.and_then(|p| p.idmap_mount.as_ref()),
            &mut notes,
        );
        carry_probe(
            "runtime root idmap probe",
            &mut u.runtime_state_idmap,
            prev_u.and_then(|p| p.runtime_state_idmap.as_ref()),
            &mut notes,
        );
    }
    carry_sysctls(&mut report.sysctls, &previous.sysctls, &mut notes);
    if let Some(g) = report.gvisor.as_mut() {
        carry_probe(
            "sandbox probe",
            &mut g.sandbox,
            previous.gvisor.as_ref().and_then(|p| p.sandbox.as_ref()),
            &mut notes,
        );
    }
    notes
}

fn carry_sysctls(now: &mut [Sysctl], previous: &[Sysctl], notes: &mut Vec<String>) {
    for s in now.iter_mut().filter(|s| sysctl_hit(s)) {
        notes.push(format!("{}: {}", s.name, s.error));
        if let Some(p) = previous.iter().find(|p| p.name == s.name) {
            *s = p.clone();
        }
    }
}

fn carry_probe(
    what: &str,
    now: &mut Option<Probe>,
    previous: Option<&Probe>,
    notes: &mut Vec<String>,
) {
    let Some(p) = now.as_ref().filter(|p| probe_hit(p)) else {
        return;
    };
    notes.push(format!("{what}: {}", p.message));
    if let Some(prev) = previous {
        *now = Some(prev.clone());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::proto::v1::{Gvisor, UserNamespaces};

    fn sysctl(value: &str) -> Sysctl {
        Sysctl {
            name: "user.max_user_namespaces".into(),
            state: SysctlState::Present as i32,
            value: value.into(),
            error: String::new(),
        }
    }

    fn unreadable(error: &str) -> Sysctl {
        Sysctl {
            state: SysctlState::Unreadable as i32,
            value: String::new(),
            error: error.into(),
            ..sysctl("")
        }
    }

    fn probe(outcome: ProbeOutcome, errno: i32, message: &str) -> Probe {
        Probe {
            outcome: outcome as i32,
            errno,
            message: message.into(),
            ..Probe::default()
        }
    }

    fn report(s: Sysctl, p: Probe) -> Report {
        Report {
            user_namespaces: Some(UserNamespaces {
                sysctls: vec![s],
                userns_create: Some(p.clone()),
                idmap_mount: Some(p.clone()),
                ..UserNamespaces::default()
            }),
            gvisor: Some(Gvisor {
                sandbox: Some(p),
                ..Gvisor::default()
            }),
            ..Report::default()
        }
    }

    const EMFILE: &str = "cannot read /proc/sys/user/max_user_namespaces: No file descriptors available (os error 24)";

    #[test]
    fn the_agents_own_resource_errors_keep_the_last_good_values() {
        let good = report(sysctl("96365"), probe(ProbeOutcome::Passed, 0, "ok"));
        let mut flooded = report(
            unreadable(EMFILE),
            probe(
                ProbeOutcome::Error,
                libc::EMFILE,
                "cannot start the probe helper /proc/self/exe: No file descriptors available (os error 24)",
            ),
        );
        let notes = keep_last_good(&good, &mut flooded);
        assert_eq!(flooded, good, "every value is the last good one");
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(
            notes[0].starts_with("user.max_user_namespaces: "),
            "{notes:?}"
        );
        assert!(notes.iter().all(|n| n.contains("os error 24")), "{notes:?}");
    }

    #[test]
    fn real_failures_on_the_node_are_kept_as_observed() {
        let good = report(sysctl("96365"), probe(ProbeOutcome::Passed, 0, "ok"));
        // EACCES on the file, ENOSPC from the kernel: facts about the node.
        let observed = report(
            unreadable("cannot read x: Permission denied (os error 13)"),
            probe(ProbeOutcome::Failed, libc::ENOSPC, "limit reached"),
        );
        let mut now = observed.clone();
        assert!(keep_last_good(&good, &mut now).is_empty());
        assert_eq!(now, observed);
        // A value that changed is a change.
        let mut changed = report(sysctl("0"), probe(ProbeOutcome::Passed, 0, "ok"));
        assert!(keep_last_good(&good, &mut changed).is_empty());
        assert_eq!(
            changed.user_namespaces.unwrap().sysctls[0].value,
            "0".to_string()
        );
    }

    #[test]
    fn without_an_earlier_value_the_error_stays_and_is_listed() {
        let mut first = report(
            unreadable(EMFILE),
            probe(
                ProbeOutcome::Error,
                libc::ENFILE,
                "too many open files in system",
            ),
        );
        let before = first.clone();
        let notes = keep_last_good(&Report::default(), &mut first);
        assert_eq!(first, before);
        assert_eq!(notes.len(), 4, "{notes:?}");
    }

    #[test]
    fn resource_errnos() {
        assert!(is_agent_resource_errno(libc::EMFILE));
        assert!(is_agent_resource_errno(libc::ENFILE));
        assert!(is_agent_resource_errno(libc::ENOMEM));
        assert!(!is_agent_resource_errno(libc::ENOSPC));
        assert!(!is_agent_resource_errno(0));
        assert!(sysctl_read_hit_agent_limits(&unreadable(EMFILE)));
        assert!(!sysctl_read_hit_agent_limits(&sysctl("1")));
    }
}
