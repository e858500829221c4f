//! The fields of Cluster API v1beta2 objects the controller reads, from
//! their JSON (Machines and MachineDeployments are custom resources with no
//! Rust types in k8s-openapi), and which Machines it looks after. Pure.
//!
//! Field paths follow `api/core/v1beta2/machine_types.go` and
//! `machinedeployment_types.go` (kubernetes-sigs/cluster-api v1.12.0):
//! `spec.clusterName`, `spec.readinessGates[].conditionType`,
//! `spec.bootstrap.dataSecretName`, `status.nodeRef.name`, and the label
//! `cluster.x-k8s.io/deployment-name` the MachineSet controller puts on the
//! Machines of a MachineDeployment.

use serde_json::Value;

/// The label naming a Machine's MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The MachineDeployment annotation that asks for the condition before the
/// gate is added (so adding the gate makes no Machine unavailable).
pub const MIRROR_ANNOTATION: &str = "sandbox-readiness.io/mirror";

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str().filter(|s| !s.is_empty())
}

/// What the controller needs from one Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineView<'a> {
    pub cluster: Option<&'a str>,
    pub node: Option<&'a str>,
    pub bootstrap_secret: Option<&'a str>,
    pub deployment: Option<&'a str>,
    pub gated: bool,
}

/// Reads a Machine's JSON (the whole object: metadata, spec, status).
pub fn view<'a>(m: &'a Value, condition_type: &str) -> MachineView<'a> {
    let gated = m
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .is_some_and(|gs| {
            gs.iter()
                .any(|g| g.get("conditionType").and_then(Value::as_str) == Some(condition_type))
        });
    MachineView {
        cluster: str_at(m, &["spec", "clusterName"]),
        node: str_at(m, &["status", "nodeRef", "name"]),
        bootstrap_secret: str_at(m, &["spec", "bootstrap", "dataSecretName"]),
        deployment: m
            .pointer("/metadata/labels")
            .and_then(|l| l.get(DEPLOYMENT_LABEL))
            .and_then(Value::as_str),
        gated,
    }
}

/// A MachineDeployment asks to be mirrored (`sandbox-readiness.io/mirror: "true"`).
pub fn mirrored(md: &Value) -> bool {
    md.pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

/// The controller looks after a Machine gated on its condition type, or
/// one whose MachineDeployment (in the same namespace) is mirrored.
pub fn selected(v: &MachineView<'_>, deployment_mirrored: impl Fn(&str) -> bool) -> bool {
    v.gated || v.deployment.is_some_and(deployment_mirrored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TY: &str = "sandbox-readiness.io/SandboxReady";

    #[test]
    fn table() {
        let gated = json!({"metadata":{"labels":{DEPLOYMENT_LABEL:"md-a"}},"spec":{"clusterName":"c1",
            "readinessGates":[{"conditionType":"Other"},{"conditionType":TY}],
            "bootstrap":{"dataSecretName":"m1-boot"}},"status":{"nodeRef":{"name":"w1"}}});
        let other_gate =
            json!({"spec":{"clusterName":"c1","readinessGates":[{"conditionType":"Other"}]}});
        let mirrored_md =
            json!({"metadata":{"labels":{DEPLOYMENT_LABEL:"md-m"}},"spec":{"clusterName":"c1"}});
        let plain =
            json!({"metadata":{"labels":{DEPLOYMENT_LABEL:"md-p"}},"spec":{"clusterName":"c1"}});
        let is_mirrored = |d: &str| d == "md-m";
        let cases = [
            ("gated", &gated, true),
            ("another gate", &other_gate, false),
            ("mirrored deployment", &mirrored_md, true),
            ("neither", &plain, false),
        ];
        for (name, m, want) in cases {
            assert_eq!(selected(&view(m, TY), is_mirrored), want, "{name}");
        }
        let v = view(&gated, TY);
        assert_eq!(
            v,
            MachineView {
                cluster: Some("c1"),
                node: Some("w1"),
                bootstrap_secret: Some("m1-boot"),
                deployment: Some("md-a"),
                gated: true
            }
        );
        let empty_ref = json!({"status":{"nodeRef":{"name":""}}});
        assert_eq!(view(&empty_ref, TY).node, None);
    }

    #[test]
    fn mirror_annotation() {
        assert!(mirrored(
            &json!({"metadata":{"annotations":{MIRROR_ANNOTATION:"true"}}})
        ));
        assert!(!mirrored(
            &json!({"metadata":{"annotations":{MIRROR_ANNOTATION:"yes"}}})
        ));
        assert!(!mirrored(&json!({"metadata":{}})));
    }
}
