//! The one step that computes every derived field of a report, once, from
//! the raw facts the observer returned. Pure.
//!
//! Derived fields: the user namespace note and flag (from whether the agent
//! runs in the initial user namespace), runsc's host preconditions, and the
//! gVisor readiness with its reasons. Nothing else in the crate writes them.

use crate::proto::v1::Report;

use super::{gvisor::gvisor_readiness, preconditions::preconditions};

/// What was observed but is not itself a report field; [`derive()`] turns it
/// into report fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// Whether the agent runs in the initial user namespace; `None` when its
    /// uid_map could not be read.
    pub initial_user_namespace: Option<bool>,
    /// Whether the host has a kvm device; `None` when it could not be checked.
    pub kvm_present: Option<bool>,
}

/// Computes every derived field of `report` from its raw fields and `facts`.
/// Idempotent: deriving twice gives the same report.
pub fn derive(report: &mut Report, facts: &Facts) {
    if let Some(u) = report.user_namespaces.as_mut() {
        u.initial_user_namespace = facts.initial_user_namespace.unwrap_or(false);
        u.namespace_note = namespace_note(facts.initial_user_namespace).to_string();
    }
    let sysctls = report
        .user_namespaces
        .as_ref()
        .map(|u| u.sysctls.as_slice())
        .unwrap_or_default();
    if let Some(g) = report.gvisor.as_mut() {
        g.preconditions = preconditions(sysctls, &g.configured_handlers, facts.kvm_present);
        let (readiness, reasons) = gvisor_readiness(g);
        g.readiness = readiness as i32;
        g.reasons = reasons;
    }
}

fn namespace_note(initial: Option<bool>) -> &'static str {
    match initial {
        Some(true) => "",
        Some(false) => "the agent is not in the initial user namespace: user.* values and probes are this namespace's, not the host's",
        None => "cannot tell whether the agent is in the initial user namespace (uid_map unreadable)",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::proto::v1::{Gvisor, GvisorReadiness, Sysctl, SysctlState, UserNamespaces};

    fn raw() -> Report {
        Report {
            user_namespaces: Some(UserNamespaces {
                sysctls: vec![Sysctl {
                    name: "user.max_user_namespaces".into(),
                    state: SysctlState::Present as i32,
                    value: "0".into(),
                    error: String::new(),
                }],
                ..UserNamespaces::default()
            }),
            gvisor: Some(Gvisor::default()),
            ..Report::default()
        }
    }

    #[test]
    fn derives_every_field_and_is_idempotent() {
        let facts = Facts {
            initial_user_namespace: None,
            kvm_present: Some(false),
        };
        let mut once = raw();
        derive(&mut once, &facts);
        let u = once.user_namespaces.as_ref().unwrap();
        assert!(!u.initial_user_namespace);
        assert!(
            u.namespace_note.contains("uid_map unreadable"),
            "{}",
            u.namespace_note
        );
        let g = once.gvisor.as_ref().unwrap();
        assert_eq!(g.preconditions.len(), 2, "{:?}", g.preconditions);
        assert!(!g.preconditions[0].satisfied && g.preconditions[0].known);
        assert_eq!(g.readiness, GvisorReadiness::NotInstalled as i32);
        assert!(!g.reasons.is_empty());
        let mut twice = once.clone();
        derive(&mut twice, &facts);
        assert_eq!(once, twice);
    }

    #[test]
    fn initial_namespace_has_no_note() {
        let mut r = raw();
        derive(
            &mut r,
            &Facts {
                initial_user_namespace: Some(true),
                kvm_present: None,
            },
        );
        let u = r.user_namespaces.unwrap();
        assert!(u.initial_user_namespace && u.namespace_note.is_empty());
    }
}
