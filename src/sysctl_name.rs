//! Sysctl names and values as the desired state and the observer both see
//! them. Pure: no I/O.
//!
//! A sysctl name becomes a path under `/proc/sys`, so every name that comes
//! from a flag or a request is validated first: no `..`, no empty parts, no
//! characters outside the kernel's naming habits.

use thiserror::Error;

/// Values longer than this are refused (every real sysctl is far shorter).
pub const MAX_VALUE_BYTES: usize = 4096;
/// Names longer than this are refused.
pub const MAX_NAME_BYTES: usize = 256;

/// Why a sysctl name was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("sysctl name is empty")]
    Empty,
    #[error("sysctl name {0:?} is longer than {MAX_NAME_BYTES} bytes")]
    TooLong(String),
    #[error("sysctl name {0:?} has an empty part")]
    EmptyPart(String),
    #[error("sysctl name {0:?} has a '.' or '..' part")]
    DotPart(String),
    #[error("sysctl name {name:?} has the character {ch:?}; allowed are letters, digits, '_', '-' and '.' separators")]
    BadChar { name: String, ch: char },
    #[error("sysctl {0} is write-only or reading it has side effects; it cannot be checked")]
    SideEffect(String),
}

/// Sysctls that are write-only triggers or change the kernel's state when
/// read: never read, whatever their mode says.
const SIDE_EFFECTS: &[&str] = &[
    "vm.drop_caches",
    "vm.compact_memory",
    "vm.stat_refresh",
    "net.ipv4.route.flush",
    "net.ipv6.route.flush",
];

/// Splits a sysctl name into its path parts, validating it.
///
/// Accepts the dotted form (`user.max_user_namespaces`) and, like sysctl(8),
/// the slashed form for names whose parts contain dots
/// (`net/ipv4/conf/eth0.100/rp_filter`).
pub fn name_parts(name: &str) -> Result<Vec<&str>, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.chars().take(64).collect()));
    }
    let slashed = name.contains('/');
    let parts: Vec<&str> = if slashed {
        name.split('/').collect()
    } else {
        name.split('.').collect()
    };
    for part in &parts {
        if part.is_empty() {
            return Err(NameError::EmptyPart(name.to_string()));
        }
        if *part == "." || *part == ".." {
            return Err(NameError::DotPart(name.to_string()));
        }
        if let Some(ch) = part.chars().find(|c| {
            !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || (slashed && *c == '.'))
        }) {
            return Err(NameError::BadChar {
                name: name.to_string(),
                ch,
            });
        }
    }
    let dotted = parts.join(".");
    if SIDE_EFFECTS.contains(&dotted.as_str()) {
        return Err(NameError::SideEffect(dotted));
    }
    Ok(parts)
}

/// Checks a sysctl name without reading anything.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    name_parts(name).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_side_effecting_names_in_either_form() {
        for n in ["vm.drop_caches", "vm/stat_refresh", "net.ipv6.route.flush"] {
            assert!(
                matches!(name_parts(n), Err(NameError::SideEffect(_))),
                "{n}"
            );
        }
        assert!(name_parts("vm.swappiness").is_ok());
    }

    #[test]
    fn accepts_real_names() {
        assert_eq!(
            name_parts("user.max_user_namespaces"),
            Ok(vec!["user", "max_user_namespaces"])
        );
        assert_eq!(
            name_parts("net/ipv4/conf/eth0.100/rp_filter"),
            Ok(vec!["net", "ipv4", "conf", "eth0.100", "rp_filter"])
        );
        assert!(validate_name("kernel.yama.ptrace_scope").is_ok());
        assert!(validate_name("net.ipv4.conf.all.rp_filter").is_ok());
    }

    #[test]
    fn refuses_hostile_names() {
        for bad in [
            "",
            "../etc/passwd",
            "user..max",
            "user.max/../../x",
            "user/../../etc/shadow",
            ".user",
            "user.",
            "user.max user",
            "user.max\0",
            "user.*",
            "/user/max",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(matches!(
            validate_name(&"a".repeat(MAX_NAME_BYTES + 1)),
            Err(NameError::TooLong(_))
        ));
    }
}
