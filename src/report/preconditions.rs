//! runsc's host preconditions, decided from observed data only. Pure.

use crate::proto::v1::{ConfiguredHandler, Precondition, Sysctl, SysctlState};
use crate::text::report_line;

use super::names::{PRECONDITION_KVM, PRECONDITION_MAX_USER_NAMESPACES, PRECONDITION_PTRACE_SCOPE};

/// runsc needs one user namespace for the gofer and one for the sandbox.
const MIN_USER_NAMESPACES: i64 = 2;
/// Scope 3 forbids ptrace entirely, which breaks the systrap and ptrace platforms.
const MAX_PTRACE_SCOPE: i64 = 2;

/// runsc's host preconditions, decided from observed data only.
///
/// The `/dev/kvm` entry is present only when some handler's platform is kvm.
pub fn preconditions(
    sysctls: &[Sysctl],
    handlers: &[ConfiguredHandler],
    kvm_present: Option<bool>,
) -> Vec<Precondition> {
    let mut out = vec![
        max_user_namespaces(find_sysctl(sysctls, PRECONDITION_MAX_USER_NAMESPACES)),
        ptrace_scope(find_sysctl(sysctls, PRECONDITION_PTRACE_SCOPE)),
    ];
    let mut kvm_handlers: Vec<&str> = handlers
        .iter()
        .filter(|h| h.platform == "kvm")
        .map(|h| h.name.as_str())
        .collect();
    kvm_handlers.sort_unstable();
    kvm_handlers.dedup();
    if !kvm_handlers.is_empty() {
        let who = format!(
            "handler{} {} use{} the kvm platform",
            if kvm_handlers.len() == 1 { "" } else { "s" },
            kvm_handlers.join(", "),
            if kvm_handlers.len() == 1 { "s" } else { "" },
        );
        out.push(match kvm_present {
            Some(true) => precondition(
                PRECONDITION_KVM,
                true,
                true,
                format!("{who}, and /dev/kvm is present"),
            ),
            Some(false) => precondition(
                PRECONDITION_KVM,
                false,
                true,
                format!("{who}, but /dev/kvm is absent"),
            ),
            None => precondition(
                PRECONDITION_KVM,
                false,
                false,
                format!("{who}; whether /dev/kvm exists could not be checked"),
            ),
        });
    }
    out
}

fn precondition(name: &str, satisfied: bool, known: bool, detail: String) -> Precondition {
    Precondition {
        name: name.to_string(),
        satisfied,
        known,
        detail,
    }
}

fn find_sysctl<'a>(sysctls: &'a [Sysctl], name: &str) -> Option<&'a Sysctl> {
    sysctls.iter().find(|s| s.name == name)
}

/// The integer value of a present sysctl, or why there is none.
fn sysctl_int(s: Option<&Sysctl>, name: &str) -> Result<i64, String> {
    let Some(s) = s else {
        return Err(format!("{name} was not observed"));
    };
    match s.state() {
        SysctlState::Present => s.value.trim().parse::<i64>().map_err(|_| {
            format!(
                "{name} has the value {:?}, which is not a number",
                report_line(&s.value)
            )
        }),
        SysctlState::Absent => Err(format!("{name} does not exist on this kernel")),
        SysctlState::Unreadable | SysctlState::Withheld => {
            Err(format!("{name} could not be read: {}", s.error))
        }
        SysctlState::Unspecified => Err(format!("{name} has no observed state")),
    }
}

fn max_user_namespaces(s: Option<&Sysctl>) -> Precondition {
    let name = PRECONDITION_MAX_USER_NAMESPACES;
    match sysctl_int(s, name) {
        Ok(v) if v >= MIN_USER_NAMESPACES => precondition(
            name,
            true,
            true,
            format!("{name} is {v}; runsc needs at least {MIN_USER_NAMESPACES} (one user namespace for the gofer, one for the sandbox)"),
        ),
        Ok(v) => precondition(
            name,
            false,
            true,
            format!("{name} is {v}; runsc needs at least {MIN_USER_NAMESPACES} (one user namespace for the gofer, one for the sandbox)"),
        ),
        Err(why) => precondition(name, false, false, why),
    }
}

fn ptrace_scope(s: Option<&Sysctl>) -> Precondition {
    let name = PRECONDITION_PTRACE_SCOPE;
    if s.is_some_and(|s| s.state == SysctlState::Absent as i32) {
        return precondition(
            name,
            true,
            true,
            "Yama is not enabled on this kernel, so ptrace is not restricted".to_string(),
        );
    }
    match sysctl_int(s, name) {
        Ok(v) if v <= MAX_PTRACE_SCOPE => precondition(
            name,
            true,
            true,
            format!("{name} is {v}; runsc's systrap platform needs at most {MAX_PTRACE_SCOPE}"),
        ),
        Ok(v) => precondition(
            name,
            false,
            true,
            format!("{name} is {v}; runsc's systrap platform needs at most {MAX_PTRACE_SCOPE} (3 forbids ptrace entirely)"),
        ),
        Err(why) => precondition(name, false, false, why),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn present(name: &str, value: &str) -> Sysctl {
        Sysctl {
            name: name.into(),
            state: SysctlState::Present as i32,
            value: value.into(),
            error: String::new(),
        }
    }

    fn with_state(name: &str, state: SysctlState) -> Sysctl {
        Sysctl {
            name: name.into(),
            state: state as i32,
            error: "EACCES".into(),
            ..Sysctl::default()
        }
    }

    fn decide(sysctls: &[Sysctl], name: &str) -> (bool, bool, String) {
        let p = preconditions(sysctls, &[], None)
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        (p.satisfied, p.known, p.detail)
    }

    #[test]
    fn precondition_table() {
        use SysctlState::*;
        let m = PRECONDITION_MAX_USER_NAMESPACES;
        let y = PRECONDITION_PTRACE_SCOPE;
        let cases: Vec<(Vec<Sysctl>, &str, bool, bool, &str)> = vec![
            (vec![present(m, "11255\n")], m, true, true, "is 11255"),
            (vec![present(m, "2")], m, true, true, "is 2"),
            (
                vec![present(m, "1")],
                m,
                false,
                true,
                "is 1; runsc needs at least 2",
            ),
            (vec![present(m, "0")], m, false, true, "one for the sandbox"),
            (vec![present(m, "lots")], m, false, false, "not a number"),
            (
                vec![with_state(m, Unreadable)],
                m,
                false,
                false,
                "could not be read: EACCES",
            ),
            (
                vec![with_state(m, Absent)],
                m,
                false,
                false,
                "does not exist",
            ),
            (vec![], m, false, false, "was not observed"),
            (vec![present(y, "0")], y, true, true, "is 0"),
            (vec![present(y, "2")], y, true, true, "is 2"),
            (vec![present(y, "3")], y, false, true, "3 forbids ptrace"),
            (
                vec![with_state(y, Absent)],
                y,
                true,
                true,
                "Yama is not enabled",
            ),
            (
                vec![with_state(y, Unreadable)],
                y,
                false,
                false,
                "could not be read",
            ),
            (vec![], y, false, false, "was not observed"),
        ];
        for (sysctls, name, satisfied, known, needle) in cases {
            let (s, k, detail) = decide(&sysctls, name);
            assert_eq!((s, k), (satisfied, known), "{name} {sysctls:?}: {detail}");
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
        }
    }

    #[test]
    fn kvm_precondition_only_for_kvm_handlers() {
        let h = |name: &str, platform: &str| ConfiguredHandler {
            name: name.into(),
            platform: platform.into(),
            ..ConfiguredHandler::default()
        };
        let kvm = |hs: &[ConfiguredHandler], present| {
            preconditions(&[], hs, present)
                .into_iter()
                .find(|p| p.name == PRECONDITION_KVM)
        };
        assert!(kvm(&[h("runsc", "")], Some(false)).is_none());
        let both = [h("runsc", ""), h("runsc-kvm", "kvm")];
        let p = kvm(&both, Some(true)).unwrap();
        assert!(p.satisfied && p.known, "{p:?}");
        let p = kvm(&both, Some(false)).unwrap();
        assert!(!p.satisfied && p.known, "{p:?}");
        assert!(
            p.detail
                .contains("handler runsc-kvm uses the kvm platform, but /dev/kvm is absent"),
            "{}",
            p.detail
        );
        let p = kvm(&both, None).unwrap();
        assert!(!p.satisfied && !p.known, "{p:?}");
    }
}
