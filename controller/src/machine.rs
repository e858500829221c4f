//! The fields of Cluster API v1beta2 objects the controller reads, from
//! their JSON (Machines, MachineDeployments and Clusters are custom
//! resources with no Rust types in k8s-openapi), and which Machines it
//! looks after. Pure.
//!
//! Field paths follow `api/core/v1beta2/machine_types.go`,
//! `machinedeployment_types.go` and `cluster_types.go`
//! (kubernetes-sigs/cluster-api v1.13): `spec.clusterName`,
//! `spec.readinessGates[].{conditionType,polarity}`,
//! `spec.bootstrap.configRef.{apiGroup,kind,name}`, `status.nodeRef.name`,
//! the label `cluster.x-k8s.io/deployment-name` the MachineSet controller
//! puts on the Machines of a MachineDeployment, and pausing as CAPI's
//! `annotations.IsPaused` reads it (the annotation `cluster.x-k8s.io/paused`
//! on the object, whatever its value, or the Cluster's `spec.paused`).

use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// The label naming a Machine's MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The MachineDeployment annotation that asks for the condition before the
/// gate is added (so adding the gate makes no Machine unavailable).
pub const MIRROR_ANNOTATION: &str = "sandbox-readiness.io/mirror";
/// Cluster API's pause annotation (`clusterv1.PausedAnnotation`): present
/// on a Cluster or a Machine, every controller leaves the object alone.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str().filter(|s| !s.is_empty())
}

fn has_annotation(o: &Value, key: &str) -> bool {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .is_some()
}

/// `spec.bootstrap.configRef` (v1beta2: a contract reference, no version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRef<'a> {
    pub api_group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

/// How a Machine gates on the controller's condition type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// No readiness gate on the type.
    None,
    /// `polarity` absent or `Positive`: `True` means ready.
    Positive,
    /// `polarity: Negative`: Cluster API would count our `True` as a
    /// failure and our `False` as healthy. A misconfiguration, reported as
    /// such: the condition is never inverted (`kubectl wait`,
    /// MachineHealthChecks and node-readiness-controller read the same type
    /// with its one meaning).
    Negative,
}

/// What the controller needs from one Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineView<'a> {
    pub cluster: Option<&'a str>,
    pub node: Option<&'a str>,
    /// `spec.providerID`: the machine the Machine is. Cluster API matches
    /// Nodes to Machines by it; a Node under `node`'s name with another
    /// providerID is another machine's (a name reused).
    pub provider_id: Option<&'a str>,
    pub config_ref: Option<ConfigRef<'a>>,
    pub deployment: Option<&'a str>,
    pub gate: Gate,
    pub paused: bool,
}

impl MachineView<'_> {
    pub fn gated(&self) -> bool {
        self.gate != Gate::None
    }
}

/// Reads a Machine's JSON (the whole object: metadata, spec, status).
pub fn view<'a>(m: &'a Value, condition_type: &str) -> MachineView<'a> {
    let gates = m.pointer("/spec/readinessGates").and_then(Value::as_array);
    let ours = gates
        .into_iter()
        .flatten()
        .filter(|g| g.get("conditionType").and_then(Value::as_str) == Some(condition_type));
    // Two gates on one type cannot pass CAPI's list-map validation; if one
    // ever says Negative, that is what CAPI would act on.
    let gate = ours.fold(Gate::None, |acc, g| {
        match (acc, g.get("polarity").and_then(Value::as_str)) {
            (Gate::Negative, _) | (_, Some("Negative")) => Gate::Negative,
            _ => Gate::Positive,
        }
    });
    let config_ref = m.pointer("/spec/bootstrap/configRef").and_then(|r| {
        Some(ConfigRef {
            api_group: r.get("apiGroup").and_then(Value::as_str).unwrap_or(""),
            kind: r.get("kind").and_then(Value::as_str)?,
            name: r
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())?,
        })
    });
    MachineView {
        cluster: str_at(m, &["spec", "clusterName"]),
        node: str_at(m, &["status", "nodeRef", "name"]),
        provider_id: str_at(m, &["spec", "providerID"]),
        config_ref,
        deployment: m
            .pointer("/metadata/labels")
            .and_then(|l| l.get(DEPLOYMENT_LABEL))
            .and_then(Value::as_str),
        gate,
        paused: has_annotation(m, PAUSED_ANNOTATION),
    }
}

/// Keeps of a Machine only what [`view`], the condition planner and the
/// Event reference read: its identity (name, namespace, uid,
/// resourceVersion, generation, deletionTimestamp, the deployment label,
/// the pause annotation), `spec.clusterName`, `spec.readinessGates`,
/// `spec.providerID`,
/// `spec.bootstrap.configRef`, `status.nodeRef` and the whole of
/// `status.conditions` (the merge patch replaces the list, so every
/// writer's conditions must be kept), as their JSON text ([`conditions`]
/// reads them back): the controller reads none of them but its own, and
/// only when it reconciles, while as parsed JSON each condition is a map
/// of its own, about 1 KiB, and a CAPI v1beta2 Machine carries nine or ten
/// (most of the Machine cache's 126 MiB in a heap profile at 10,000
/// Machines; the peak fell from 316 to 168 MiB with this and the Node
/// cache's expected names). Applied before the reflector stores a Machine and to each Machine a write returns, so the controller's memory
/// follows the number of Machines, not what Cluster API and the providers
/// put on them (managed fields, owner references, addresses, nodeInfo, the
/// v1beta1 conditions).
pub fn slim(o: &mut DynamicObject) {
    let md = &mut o.metadata;
    md.managed_fields = None;
    md.owner_references = None;
    md.finalizers = None;
    if let Some(a) = md.annotations.as_mut() {
        a.retain(|k, _| k == PAUSED_ANNOTATION);
    }
    if md.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        md.annotations = None;
    }
    if let Some(labels) = md.labels.as_mut() {
        labels.retain(|k, _| k == DEPLOYMENT_LABEL);
    }
    let pick = |from: &Value, keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| Some(((*k).to_string(), from.get(*k)?.clone())))
            .collect()
    };
    let mut spec = pick(
        &o.data["spec"],
        &["clusterName", "readinessGates", "providerID"],
    );
    if let Some(r) = o.data.pointer("/spec/bootstrap/configRef") {
        let r = pick(r, &["apiGroup", "kind", "name"]);
        spec.insert(
            "bootstrap".into(),
            Value::Object(Map::from_iter([("configRef".into(), Value::Object(r))])),
        );
    }
    let mut status = pick(&o.data["status"], &["nodeRef"]);
    if let Some(c) = o.data.pointer("/status/conditions") {
        // A Value always serialises; were it not to, the list is kept as
        // it came, where [`conditions`] reads a whole Machine's.
        match serde_json::to_string(c) {
            Ok(text) => status.insert(CONDITIONS_TEXT.into(), Value::String(text)),
            Err(_) => status.insert("conditions".into(), c.clone()),
        };
    }
    let mut data = Map::new();
    data.insert("spec".into(), Value::Object(spec));
    if !status.is_empty() {
        data.insert("status".into(), Value::Object(status));
    }
    o.data = Value::Object(data);
}

/// Where [`slim`] keeps `status.conditions`, as JSON text: a key no
/// Cluster API object has (never sent: a write sends only the list).
const CONDITIONS_TEXT: &str = "conditions.text";

/// A Machine's `status.conditions`, slimmed ([`slim`]) or whole.
pub fn conditions(m: &Value) -> Vec<Value> {
    let Some(status) = m.get("status") else {
        return Vec::new();
    };
    let list = match status.get(CONDITIONS_TEXT).and_then(Value::as_str) {
        Some(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        None => status.get("conditions").cloned().unwrap_or(Value::Null),
    };
    match list {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// Keeps of a MachineDeployment or a Cluster what the controller reads:
/// its identity, the mirror, pause and proof annotations and `spec.paused`.
pub fn slim_owner(o: &mut DynamicObject) {
    let md = &mut o.metadata;
    md.managed_fields = None;
    md.owner_references = None;
    md.finalizers = None;
    md.labels = None;
    if let Some(a) = md.annotations.as_mut() {
        a.retain(|k, _| {
            k == PAUSED_ANNOTATION
                || k == MIRROR_ANNOTATION
                || k == crate::proof::request::PROVE_ANNOTATION
                || k == crate::proof::request::IMAGE_ANNOTATION
        });
    }
    let paused = o.data.pointer("/spec/paused").cloned();
    o.data = match paused {
        Some(p) => serde_json::json!({"spec": {"paused": p}}),
        None => Value::Object(Map::new()),
    };
}

/// A MachineDeployment asks to be mirrored (`sandbox-readiness.io/mirror: "true"`).
pub fn mirrored(md: &DynamicObject) -> bool {
    md.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .map(String::as_str)
        == Some("true")
}

/// A Cluster pauses its Machines with `spec.paused: true` only. Cluster
/// API's `annotations.IsPaused(cluster, o)` is `cluster.Spec.Paused ||
/// HasPaused(o)`: the pause annotation on the Cluster pauses the Cluster's
/// own reconcile, not its Machines, and a Machine condition frozen by it
/// would be acted on by a MachineHealthCheck that does not freeze.
pub fn cluster_paused(c: &Value) -> bool {
    c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
}

/// The controller looks after a Machine gated on its condition type, or
/// one whose MachineDeployment (in the same namespace) is mirrored.
pub fn selected(v: &MachineView<'_>, deployment_mirrored: impl Fn(&str) -> bool) -> bool {
    v.gated() || v.deployment.is_some_and(deployment_mirrored)
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
            "bootstrap":{"dataSecretName":"m1-boot","configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io",
                "kind":"TalosConfig","name":"m1-tc"}}},"status":{"nodeRef":{"name":"w1"}}});
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
                provider_id: None,
                config_ref: Some(ConfigRef {
                    api_group: "bootstrap.cluster.x-k8s.io",
                    kind: "TalosConfig",
                    name: "m1-tc"
                }),
                deployment: Some("md-a"),
                gate: Gate::Positive,
                paused: false,
            }
        );
        let negative =
            json!({"spec":{"readinessGates":[{"conditionType":TY,"polarity":"Negative"}]}});
        assert_eq!(view(&negative, TY).gate, Gate::Negative);
        assert!(selected(&view(&negative, TY), |_| false));
        let positive =
            json!({"spec":{"readinessGates":[{"conditionType":TY,"polarity":"Positive"}]}});
        assert_eq!(view(&positive, TY).gate, Gate::Positive);
        let paused = json!({"metadata":{"annotations":{PAUSED_ANNOTATION:""}}});
        assert!(view(&paused, TY).paused);
        let empty_ref = json!({"status":{"nodeRef":{"name":""}}});
        assert_eq!(view(&empty_ref, TY).node, None);
    }

    #[test]
    fn slim_keeps_what_is_read() {
        let full = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "t1", "uid": "u1", "resourceVersion": "7",
                "generation": 3, "labels": {DEPLOYMENT_LABEL: "md-a", "other": "x"},
                "annotations": {"a": "b", PAUSED_ANNOTATION: "true"}, "finalizers": ["machine.cluster.x-k8s.io"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "MachineSet", "name": "ms", "uid": "u0"}],
                "managedFields": [{"manager": "capi"}]},
            "spec": {"clusterName": "c1", "readinessGates": [{"conditionType": TY}],
                "bootstrap": {"dataSecretName": "m1-boot", "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                    "kind": "TalosConfig", "name": "tc"}},
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
            Value::Array(conditions(&slimmed)),
            full["status"]["conditions"]
        );
        assert_eq!(conditions(&full), conditions(&slimmed));
        // The text round-trips whatever a condition carries.
        let odd = json!({"status": {"conditions": [{"type": "T", "message": "a \"quoted\"\nline ✓",
            "observedGeneration": 3, "status": "Unknown"}]}});
        let mut o2: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": "m3"},
                "status": odd["status"]}),
        )
        .unwrap();
        slim(&mut o2);
        assert_eq!(
            conditions(&serde_json::to_value(&o2).unwrap()),
            conditions(&odd)
        );
        assert!(conditions(&json!({"status": {}})).is_empty());
        assert_eq!(
            slimmed["metadata"],
            json!({"name": "m1", "namespace": "t1", "uid": "u1", "resourceVersion": "7",
                "generation": 3, "labels": {DEPLOYMENT_LABEL: "md-a"},
                "annotations": {PAUSED_ANNOTATION: "true"}})
        );
        assert_eq!(slimmed["apiVersion"], full["apiVersion"]);
        for gone in [
            "/spec/infrastructureRef",
            "/spec/bootstrap/dataSecretName",
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
    fn paused_clusters() {
        assert!(cluster_paused(&json!({"spec":{"paused":true}})));
        assert!(!cluster_paused(&json!({"spec":{"paused":false}})));
        // The annotation on the Cluster does not pause its Machines.
        assert!(!cluster_paused(
            &json!({"metadata":{"annotations":{PAUSED_ANNOTATION:""}}})
        ));
        assert!(!cluster_paused(&json!({"metadata":{"annotations":{}}})));
        let mut c: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "annotations": {PAUSED_ANNOTATION: "", "x": "y"},
                "labels": {"a": "b"}},
            "spec": {"paused": true, "controlPlaneRef": {"name": "cp"}},
            "status": {"phase": "Provisioned"}}))
        .unwrap();
        slim_owner(&mut c);
        let v = serde_json::to_value(&c).unwrap();
        assert!(cluster_paused(&v));
        assert_eq!(v["spec"], json!({"paused": true}));
        assert_eq!(v["metadata"]["annotations"], json!({PAUSED_ANNOTATION: ""}));
    }

    #[test]
    fn mirror_annotation() {
        let md = |meta: Value| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineDeployment", "metadata": meta}))
            .unwrap()
        };
        assert!(mirrored(&md(
            json!({"name": "a", "annotations":{MIRROR_ANNOTATION:"true"}})
        )));
        assert!(!mirrored(&md(
            json!({"name": "a", "annotations":{MIRROR_ANNOTATION:"yes"}})
        )));
        assert!(!mirrored(&md(json!({"name": "a"}))));
    }
}
