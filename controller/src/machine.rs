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

use kube::api::DynamicObject;
use serde_json::{Map, Value};

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

/// Keeps of a Machine only what [`view`], the condition planner and the
/// Event reference read: its identity (name, namespace, uid,
/// resourceVersion, generation, deletionTimestamp, the deployment label),
/// `spec.clusterName`, `spec.readinessGates`, `spec.bootstrap.dataSecretName`,
/// `status.nodeRef` and the whole of `status.conditions` (the merge patch
/// replaces the list, so every writer's conditions must be kept). Applied
/// before the reflector stores a Machine and to each Machine a write
/// returns, so the controller's memory follows the number of Machines, not
/// what Cluster API and the providers put on them (managed fields, owner
/// references, addresses, nodeInfo, the v1beta1 conditions).
pub fn slim(o: &mut DynamicObject) {
    let md = &mut o.metadata;
    md.managed_fields = None;
    md.annotations = None;
    md.owner_references = None;
    md.finalizers = None;
    if let Some(labels) = md.labels.as_mut() {
        labels.retain(|k, _| k == DEPLOYMENT_LABEL);
    }
    let pick = |from: &Value, keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| Some(((*k).to_string(), from.get(*k)?.clone())))
            .collect()
    };
    let mut spec = pick(&o.data["spec"], &["clusterName", "readinessGates"]);
    if let Some(name) = o.data.pointer("/spec/bootstrap/dataSecretName") {
        spec.insert(
            "bootstrap".into(),
            Value::Object(Map::from_iter([("dataSecretName".into(), name.clone())])),
        );
    }
    let status = pick(&o.data["status"], &["nodeRef", "conditions"]);
    let mut data = Map::new();
    data.insert("spec".into(), Value::Object(spec));
    if !status.is_empty() {
        data.insert("status".into(), Value::Object(status));
    }
    o.data = Value::Object(data);
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
    fn slim_keeps_what_is_read() {
        let full = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "t1", "uid": "u1", "resourceVersion": "7",
                "generation": 3, "labels": {DEPLOYMENT_LABEL: "md-a", "other": "x"},
                "annotations": {"a": "b"}, "finalizers": ["machine.cluster.x-k8s.io"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "MachineSet", "name": "ms", "uid": "u0"}],
                "managedFields": [{"manager": "capi"}]},
            "spec": {"clusterName": "c1", "readinessGates": [{"conditionType": TY}],
                "bootstrap": {"dataSecretName": "m1-boot", "configRef": {"name": "tc"}},
                "infrastructureRef": {"name": "i"}, "providerID": "p", "version": "v1.33.0"},
            "status": {"nodeRef": {"name": "w1"}, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kernelVersion": "6.12"}, "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": TY, "status": "False"}],
                "deprecated": {"v1beta1": {"conditions": [{"type": "Ready"}]}}}
        });
        let mut o: DynamicObject = serde_json::from_value(full.clone()).unwrap();
        slim(&mut o);
        let slimmed = serde_json::to_value(&o).unwrap();
        // Everything read of the whole Machine reads the same of the slim one.
        assert_eq!(view(&slimmed, TY), view(&full, TY));
        assert_eq!(
            slimmed["status"]["conditions"],
            full["status"]["conditions"]
        );
        assert_eq!(
            slimmed["metadata"],
            json!({"name": "m1", "namespace": "t1", "uid": "u1", "resourceVersion": "7",
                "generation": 3, "labels": {DEPLOYMENT_LABEL: "md-a"}})
        );
        assert_eq!(slimmed["apiVersion"], full["apiVersion"]);
        for gone in [
            "/spec/infrastructureRef",
            "/spec/bootstrap/configRef",
            "/status/addresses",
            "/status/nodeInfo",
            "/status/deprecated",
        ] {
            assert!(slimmed.pointer(gone).is_none(), "{gone} kept");
        }
        // A Machine not yet provisioned (no status) stays without one.
        let mut bare: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "m2"}, "spec": {"clusterName": "c1"}}),
        )
        .unwrap();
        slim(&mut bare);
        assert_eq!(serde_json::to_value(&bare).unwrap()["status"], Value::Null);
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
