//! The agent's desired state as the Node annotation
//! `sandbox-readiness.io/desired` carries it: versioned JSON,
//! `{"v":1,"sysctls":{…},"require":[…],"handlers":{…}}`, converted from and
//! to the [`DesiredState`] that [`crate::evaluate`] judges with. Pure.
//!
//! The writer (the agent) and every reader (`check`, the readiness gate)
//! use these two functions, so the form cannot drift between them. The
//! output is canonical: keys sorted, requirements in a fixed order, so an
//! unchanged desired state writes a byte-identical annotation (no patch).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::{
    evaluate::{self, DesiredError},
    proto::v1::{DesiredState, SysctlExpectation},
};

/// The Node annotation that carries the agent's desired state.
pub const ANNOTATION: &str = "sandbox-readiness.io/desired";
/// The only version this build writes and reads.
pub const VERSION: u64 = 1;
/// Annotations larger than this are refused before parsing (Kubernetes
/// allows 256 KiB for all of a Node's annotations together).
pub const MAX_ANNOTATION_BYTES: usize = 64 * 1024;

/// A node-wide requirement, as the annotation's `require` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Require {
    Userns,
    IdmapMounts,
    Gvisor,
    SandboxProbe,
}

/// A per-runtime-handler requirement, as the annotation's `handlers` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerRequire {
    RuntimeHandler,
    Canary,
    PodUserns,
}

impl Require {
    pub const fn as_str(self) -> &'static str {
        match self {
            Require::Userns => "userns",
            Require::IdmapMounts => "idmap-mounts",
            Require::Gvisor => "gvisor",
            Require::SandboxProbe => "sandbox-probe",
        }
    }
}

impl HandlerRequire {
    pub const fn as_str(self) -> &'static str {
        match self {
            HandlerRequire::RuntimeHandler => "runtime-handler",
            HandlerRequire::Canary => "canary",
            HandlerRequire::PodUserns => "pod-userns",
        }
    }
}

/// The annotation's JSON, field for field. Unknown fields are refused: a
/// writer that adds one bumps `v`, and an old reader must not judge a node
/// by half of what it was told.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    sysctls: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    require: Vec<Require>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    handlers: BTreeMap<String, Vec<HandlerRequire>>,
}

/// Why an annotation was refused. One line each.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum AnnotationError {
    #[error("{ANNOTATION} is larger than {MAX_ANNOTATION_BYTES} bytes")]
    TooLarge,
    #[error("{ANNOTATION} is not JSON: {0}")]
    NotJson(String),
    #[error("{ANNOTATION} has no \"v\"")]
    NoVersion,
    #[error("{ANNOTATION} has version {0}; this build reads version {VERSION} only")]
    UnknownVersion(String),
    #[error("{ANNOTATION}: {0}")]
    Invalid(String),
}

/// The annotation's text for a desired state (validated first). Sysctls
/// named twice keep the last value, as Talos's own merge would.
pub fn to_annotation(d: &DesiredState) -> Result<String, DesiredError> {
    evaluate::validate(d)?;
    let mut w = Wire {
        v: VERSION,
        ..Wire::default()
    };
    for s in &d.sysctls {
        w.sysctls.insert(s.name.clone(), s.value.clone());
    }
    for (on, r) in [
        (d.require_userns, Require::Userns),
        (d.require_idmap_mounts, Require::IdmapMounts),
        (d.require_gvisor, Require::Gvisor),
        (d.require_sandbox_probe, Require::SandboxProbe),
    ] {
        if on {
            w.require.push(r);
        }
    }
    for (list, r) in [
        (&d.require_runtime_handlers, HandlerRequire::RuntimeHandler),
        (&d.require_canary, HandlerRequire::Canary),
        (&d.require_pod_userns, HandlerRequire::PodUserns),
    ] {
        for h in list {
            let e = w.handlers.entry(h.clone()).or_default();
            if !e.contains(&r) {
                e.push(r);
            }
        }
    }
    for v in w.handlers.values_mut() {
        v.sort();
    }
    // A struct of strings and enums: serialising cannot fail.
    Ok(serde_json::to_string(&w).unwrap_or_default())
}

/// The desired state an annotation describes, validated as a flag's would be.
pub fn from_annotation(text: &str) -> Result<DesiredState, AnnotationError> {
    if text.len() > MAX_ANNOTATION_BYTES {
        return Err(AnnotationError::TooLarge);
    }
    let raw: Value =
        serde_json::from_str(text).map_err(|e| AnnotationError::NotJson(e.to_string()))?;
    // The version first: a newer form must be refused as such, not as
    // "unknown field".
    match raw.get("v") {
        None => return Err(AnnotationError::NoVersion),
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            let shown: String = v.to_string().chars().take(40).collect();
            return Err(AnnotationError::UnknownVersion(shown));
        }
    }
    let w: Wire =
        serde_json::from_value(raw).map_err(|e| AnnotationError::Invalid(e.to_string()))?;
    let mut d = DesiredState {
        sysctls: w
            .sysctls
            .into_iter()
            .map(|(name, value)| SysctlExpectation { name, value })
            .collect(),
        ..DesiredState::default()
    };
    for r in w.require {
        match r {
            Require::Userns => d.require_userns = true,
            Require::IdmapMounts => d.require_idmap_mounts = true,
            Require::Gvisor => d.require_gvisor = true,
            Require::SandboxProbe => d.require_sandbox_probe = true,
        }
    }
    for (h, reqs) in w.handlers {
        for r in reqs {
            let list = match r {
                HandlerRequire::RuntimeHandler => &mut d.require_runtime_handlers,
                HandlerRequire::Canary => &mut d.require_canary,
                HandlerRequire::PodUserns => &mut d.require_pod_userns,
            };
            if !list.contains(&h) {
                list.push(h.clone());
            }
        }
    }
    evaluate::validate(&d).map_err(|e| AnnotationError::Invalid(e.to_string()))?;
    Ok(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255"},"require":["userns","idmap-mounts","gvisor","sandbox-probe"],"handlers":{"runsc":["runtime-handler","canary","pod-userns"]}}"#;

    fn full() -> DesiredState {
        DesiredState {
            sysctls: vec![SysctlExpectation {
                name: "user.max_user_namespaces".into(),
                value: "11255".into(),
            }],
            require_userns: true,
            require_idmap_mounts: true,
            require_runtime_handlers: vec!["runsc".into()],
            require_gvisor: true,
            require_sandbox_probe: true,
            require_pod_userns: vec!["runsc".into()],
            require_canary: vec!["runsc".into()],
        }
    }

    #[test]
    fn the_contract_example_round_trips_byte_for_byte() {
        assert_eq!(from_annotation(CONTRACT).unwrap(), full());
        assert_eq!(to_annotation(&full()).unwrap(), CONTRACT);
        assert_eq!(
            to_annotation(&DesiredState::default()).unwrap(),
            r#"{"v":1}"#
        );
        assert_eq!(
            from_annotation(r#"{"v":1}"#).unwrap(),
            DesiredState::default()
        );
    }

    #[test]
    fn output_is_canonical_whatever_the_input_order() {
        let mut d = full();
        d.sysctls.insert(
            0,
            SysctlExpectation {
                name: "vm.swappiness".into(),
                value: "1".into(),
            },
        );
        d.require_canary = vec!["runsc".into(), "default".into()];
        let a = to_annotation(&d).unwrap();
        assert_eq!(
            a,
            r#"{"v":1,"sysctls":{"user.max_user_namespaces":"11255","vm.swappiness":"1"},"require":["userns","idmap-mounts","gvisor","sandbox-probe"],"handlers":{"default":["canary"],"runsc":["runtime-handler","canary","pod-userns"]}}"#
        );
        let back = from_annotation(&a).unwrap();
        assert_eq!(to_annotation(&back).unwrap(), a);
    }

    #[test]
    fn refusals_are_one_line() {
        let cases = [
            ("", "is not JSON"),
            ("[]", "has no \"v\""),
            (r#"{"sysctls":{}}"#, "has no \"v\""),
            (r#"{"v":2,"sysctls":{"a.b":"1"}}"#, "has version 2"),
            (r#"{"v":"1"}"#, "has version \"1\""),
            (r#"{"v":1,"extra":true}"#, "unknown field `extra`"),
            (
                r#"{"v":1,"require":["userns","fly"]}"#,
                "unknown variant `fly`",
            ),
            (r#"{"v":1,"sysctls":{"a.b":11255}}"#, "invalid type"),
            (r#"{"v":1,"sysctls":{"../etc/passwd":"1"}}"#, "'..' part"),
            (
                r#"{"v":1,"handlers":{"Run sc":["canary"]}}"#,
                "runtime handler name",
            ),
        ];
        for (text, want) in cases {
            let e = from_annotation(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let big = format!(r#"{{"v":1,"sysctls":{{"a.b":"{}"}}}}"#, "x".repeat(70_000));
        assert_eq!(from_annotation(&big), Err(AnnotationError::TooLarge));
    }
}
