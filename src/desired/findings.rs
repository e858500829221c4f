//! Three sources, one truth: the operator's intent (`--sysctl`), the pool's
//! configuration (its template) and the agent's own desired state (the
//! template's `ExtensionServiceConfig`). Pure: they in, the desired state
//! the verdict uses, one row per key with its source, and pool findings out.

use std::collections::BTreeSet;

use super::{covers, pool::PoolDesired};
use crate::proto::v1::{DesiredState, SysctlExpectation};

/// The sysctl this project is about; always shown, set or not.
pub const USERNS_KEY: &str = "user.max_user_namespaces";

/// `--sysctl` differs from the template, or the template lacks the key.
pub const TEMPLATE_DISAGREES: &str = "TEMPLATE_DISAGREES";
/// The template's own ExtensionServiceConfig for the agent does not cover
/// its sysctls.
pub const AGENT_DESIRED_DIFFERS: &str = "AGENT_DESIRED_DIFFERS";

/// A pool-level finding: stable code, the key, one line naming both values
/// and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFinding {
    pub code: &'static str,
    pub key: String,
    pub message: String,
}

/// One key as the pool's configuration has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    /// `None`: not set.
    pub value: Option<String>,
    /// Where it was set, or "not set: Talos's hardening default applies".
    pub source: String,
}

/// What `check` judges with and shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Combined {
    /// The intent, plus every template sysctl the intent does not name.
    pub desired: DesiredState,
    pub rows: Vec<Row>,
    pub findings: Vec<PoolFinding>,
}

/// The words for a key the configuration does not set.
pub fn not_set(key: &str) -> String {
    if key == USERNS_KEY {
        "not set: Talos's hardening default applies (0)".into()
    } else {
        "not set: Talos's hardening default applies".into()
    }
}

/// Combines the intent with the pool's configuration.
pub fn combine(intent: &DesiredState, pool: &PoolDesired) -> Combined {
    let mut desired = intent.clone();
    let named: BTreeSet<&str> = intent.sysctls.iter().map(|s| s.name.as_str()).collect();
    for (k, s) in &pool.sysctls {
        if !named.contains(k.as_str()) {
            desired.sysctls.push(SysctlExpectation {
                name: k.clone(),
                value: s.value.clone(),
            });
        }
    }
    let mut keys: BTreeSet<String> = pool.sysctls.keys().cloned().collect();
    keys.extend(named.iter().map(|s| s.to_string()));
    keys.insert(USERNS_KEY.into());
    let rows = keys
        .iter()
        .map(|k| match pool.sysctls.get(k) {
            Some(s) => Row {
                key: k.clone(),
                value: Some(s.value.clone()),
                source: format!("{}: {}", pool.origin, s.source),
            },
            None => Row {
                key: k.clone(),
                value: None,
                source: not_set(k),
            },
        })
        .collect();

    let template = pool.origin.starts_with("TalosConfig");
    let fix = if template {
        "a TalosConfigTemplate's spec is immutable: create a new template and point the MachineDeployment at it"
    } else {
        "change the machine config"
    };
    let mut findings = Vec::new();
    let mut seen = BTreeSet::new();
    for s in intent.sysctls.iter().rev() {
        if !seen.insert(s.name.as_str()) {
            continue;
        }
        let has = pool.sysctls.get(&s.name);
        if has.is_some_and(|h| covers::sysctl_values_equal(&h.value, &s.value)) {
            continue;
        }
        let theirs = match has {
            Some(h) => format!("{} sets {} ({})", pool.origin, h.value, h.source),
            None => format!("{} does not set it ({})", pool.origin, not_set(&s.name)),
        };
        findings.push(PoolFinding {
            code: TEMPLATE_DISAGREES,
            key: s.name.clone(),
            message: format!(
                "{}: --sysctl says {}, {theirs}: new Machines will not get {}; {fix}",
                s.name, s.value, s.value
            ),
        });
    }
    findings.reverse();
    if let Some(agent) = &pool.agent {
        if let Err(uncovered) = covers::covers(&agent.desired, &pool.desired()) {
            for u in uncovered {
                let agent_has = agent
                    .desired
                    .sysctls
                    .iter()
                    .rev()
                    .find(|s| s.name == u.key)
                    .map_or("nothing".to_string(), |s| s.value.clone());
                let src = pool
                    .sysctls
                    .get(&u.key)
                    .map_or(String::new(), |s| format!(" ({})", s.source));
                findings.push(PoolFinding {
                    code: AGENT_DESIRED_DIFFERS,
                    key: u.key.clone(),
                    message: format!(
                        "{}: {} sets {}{src}, its ExtensionServiceConfig sandbox-readiness asks the agent for {agent_has}: the agent on those nodes would judge against something else; set SANDBOX_READINESS_SYSCTL={}={} there",
                        u.key, pool.origin, u.pool, u.key, u.pool
                    ),
                });
            }
        }
    }
    Combined {
        desired,
        rows,
        findings,
    }
}

/// What changed between two rounds, one line per key
/// (`user.max_user_namespaces 0 → 11255`; `-` for not set).
pub fn changes(before: &[Row], after: &[Row]) -> Vec<String> {
    let value = |rows: &[Row], k: &str| {
        rows.iter()
            .find(|r| r.key == k)
            .and_then(|r| r.value.clone())
    };
    let mut keys: BTreeSet<&str> = before.iter().map(|r| r.key.as_str()).collect();
    keys.extend(after.iter().map(|r| r.key.as_str()));
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (value(before, k), value(after, k));
            let show = |v: &Option<String>| match v {
                Some(v) => v.clone(),
                None if k == USERNS_KEY => "0".into(),
                None => "-".into(),
            };
            (a != b).then(|| format!("{k} {} → {}", show(&a), show(&b)))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::desired::pool::parse;

    const COZY: &str = include_str!("../../tests/fixtures/desired/cozystack-tct.yaml");

    fn intent(v: &str) -> DesiredState {
        DesiredState {
            sysctls: vec![SysctlExpectation {
                name: USERNS_KEY.into(),
                value: v.into(),
            }],
            ..DesiredState::default()
        }
    }

    #[test]
    fn the_template_fills_in_and_disagreements_name_key_values_and_fix() {
        let pool = parse(COZY, "f", None).unwrap();
        let c = combine(&DesiredState::default(), &pool);
        assert_eq!(c.desired.sysctls, intent("11255").sysctls);
        assert!(c.findings.is_empty(), "{:?}", c.findings);
        assert_eq!(
            c.rows[0].source,
            "TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0: data (machine.sysctls)"
        );

        let c = combine(&intent("65536"), &pool);
        assert_eq!(
            c.desired.sysctls,
            intent("65536").sysctls,
            "the verdict uses the intent"
        );
        assert_eq!(c.findings.len(), 1);
        assert_eq!(c.findings[0].code, TEMPLATE_DISAGREES);
        assert_eq!(
            c.findings[0].message,
            "user.max_user_namespaces: --sysctl says 65536, TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0 sets 11255 (data (machine.sysctls)): new Machines will not get 65536; a TalosConfigTemplate's spec is immutable: create a new template and point the MachineDeployment at it"
        );

        let lacking = parse(
            &COZY.replace(
                "user.max_user_namespaces: \"11255\" # added",
                "vm.swappiness: 1",
            ),
            "f",
            None,
        )
        .unwrap();
        let c = combine(&intent("11255"), &lacking);
        let codes: Vec<&str> = c.findings.iter().map(|f| f.code).collect();
        assert_eq!(codes, [TEMPLATE_DISAGREES, AGENT_DESIRED_DIFFERS]);
        assert!(
            c.findings[0]
                .message
                .contains("does not set it (not set: Talos's hardening default applies (0))"),
            "{}",
            c.findings[0].message
        );
        assert_eq!(
            c.findings[1].message,
            "vm.swappiness: TalosConfigTemplate tenant-a/kubernetes-tenant-a-md0 sets 1 (data (machine.sysctls)), its ExtensionServiceConfig sandbox-readiness asks the agent for nothing: the agent on those nodes would judge against something else; set SANDBOX_READINESS_SYSCTL=vm.swappiness=1 there"
        );
        let row = c.rows.iter().find(|r| r.key == USERNS_KEY).unwrap();
        assert_eq!(
            (row.value.as_deref(), row.source.as_str()),
            (None, "not set: Talos's hardening default applies (0)")
        );
        assert_eq!(
            changes(
                &combine(&DesiredState::default(), &lacking).rows,
                &combine(&DesiredState::default(), &pool).rows
            ),
            ["user.max_user_namespaces 0 → 11255", "vm.swappiness 1 → -"]
        );
    }
}
