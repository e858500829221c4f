//! The one rule for "does this node's desired state cover the pool's?",
//! used by `check` (the template against its own ExtensionServiceConfig),
//! the agent's Node condition and the readiness gate. Pure.
//!
//! Every key the pool's configuration sets explicitly must be in the
//! node's desired state with an equal value; keys the pool does not set
//! impose nothing (the node may ask for more). Requirements the pool asks
//! for (`require`, `handlers`) must be asked for by the node too.

use std::fmt;

use crate::{
    evaluate::values_equal,
    proto::v1::{DesiredState, SysctlExpectation},
};

/// One key of the pool's desired state the node's does not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncovered {
    /// `user.max_user_namespaces`, `require userns`, `handler runsc canary`.
    pub key: String,
    /// What the pool sets (`required` for a requirement).
    pub pool: String,
    /// What the node's desired state has (`None`: nothing).
    pub node: Option<String>,
}

impl fmt::Display for Uncovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(
                f,
                "{}: the pool sets {}, the node's desired state {}",
                self.key, self.pool, n
            ),
            None => write!(
                f,
                "{}: the pool sets {}, the node's desired state does not",
                self.key, self.pool
            ),
        }
    }
}

/// Sysctl values as Talos writes them: the YAML scalar's text (a quoted
/// `"11255"` and a bare `11255` are the same string once decoded), then
/// compared field by field as the kernel prints multi-value sysctls.
pub fn sysctl_values_equal(a: &str, b: &str) -> bool {
    values_equal(a, b)
}

/// The last value a desired state gives `name` (a later entry wins, as in
/// Talos's merge).
fn last<'a>(sysctls: &'a [SysctlExpectation], name: &str) -> Option<&'a str> {
    sysctls
        .iter()
        .rev()
        .find(|s| s.name == name)
        .map(|s| s.value.as_str())
}

/// `Ok(())` when `node` covers `pool`, else every key it does not, in the
/// pool's order.
pub fn covers(node: &DesiredState, pool: &DesiredState) -> Result<(), Vec<Uncovered>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for s in pool.sysctls.iter().rev() {
        // The pool's last value for a name is the one it means.
        if !seen.insert(s.name.as_str()) {
            continue;
        }
        match last(&node.sysctls, &s.name) {
            Some(v) if sysctl_values_equal(v, &s.value) => {}
            Some(v) => out.push(Uncovered {
                key: s.name.clone(),
                pool: s.value.clone(),
                node: Some(format!("has {v}")),
            }),
            None => out.push(Uncovered {
                key: s.name.clone(),
                pool: s.value.clone(),
                node: None,
            }),
        }
    }
    out.reverse();
    for (p, n, word) in [
        (pool.require_userns, node.require_userns, "userns"),
        (
            pool.require_idmap_mounts,
            node.require_idmap_mounts,
            "idmap-mounts",
        ),
        (pool.require_gvisor, node.require_gvisor, "gvisor"),
        (
            pool.require_sandbox_probe,
            node.require_sandbox_probe,
            "sandbox-probe",
        ),
    ] {
        if p && !n {
            out.push(Uncovered {
                key: format!("require {word}"),
                pool: "required".into(),
                node: None,
            });
        }
    }
    for (p, n, word) in [
        (
            &pool.require_runtime_handlers,
            &node.require_runtime_handlers,
            "runtime-handler",
        ),
        (&pool.require_canary, &node.require_canary, "canary"),
        (
            &pool.require_pod_userns,
            &node.require_pod_userns,
            "pod-userns",
        ),
    ] {
        for h in p.iter().filter(|h| !n.contains(h)) {
            out.push(Uncovered {
                key: format!("handler {h} {word}"),
                pool: "required".into(),
                node: None,
            });
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sysctls(pairs: &[(&str, &str)]) -> DesiredState {
        DesiredState {
            sysctls: pairs
                .iter()
                .map(|(n, v)| SysctlExpectation {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..DesiredState::default()
        }
    }

    #[test]
    fn table() {
        let u = "user.max_user_namespaces";
        let cases: Vec<(DesiredState, DesiredState, Vec<&str>)> = vec![
            // Nothing set by the pool imposes nothing.
            (sysctls(&[]), sysctls(&[]), vec![]),
            (sysctls(&[(u, "11255")]), sysctls(&[]), vec![]),
            (sysctls(&[(u, "11255")]), sysctls(&[(u, "11255")]), vec![]),
            // Whitespace is not a difference (the kernel prints tabs).
            (
                sysctls(&[("net.ipv4.ip_local_port_range", "1024 65000")]),
                sysctls(&[("net.ipv4.ip_local_port_range", "1024\t65000")]),
                vec![],
            ),
            (
                sysctls(&[(u, "0")]),
                sysctls(&[(u, "11255")]),
                vec!["user.max_user_namespaces: the pool sets 11255, the node's desired state has 0"],
            ),
            (
                sysctls(&[("vm.swappiness", "1")]),
                sysctls(&[(u, "11255")]),
                vec!["user.max_user_namespaces: the pool sets 11255, the node's desired state does not"],
            ),
            // The last of a repeated name counts, on both sides.
            (
                sysctls(&[(u, "0"), (u, "11255")]),
                sysctls(&[(u, "1"), (u, "11255")]),
                vec![],
            ),
            (
                DesiredState::default(),
                DesiredState {
                    require_userns: true,
                    require_canary: vec!["runsc".into()],
                    ..DesiredState::default()
                },
                vec![
                    "require userns: the pool sets required, the node's desired state does not",
                    "handler runsc canary: the pool sets required, the node's desired state does not",
                ],
            ),
        ];
        for (node, pool, want) in cases {
            let got: Vec<String> = match covers(&node, &pool) {
                Ok(()) => vec![],
                Err(u) => u.iter().map(ToString::to_string).collect(),
            };
            assert_eq!(got, want, "node {node:?} pool {pool:?}");
        }
    }
}
