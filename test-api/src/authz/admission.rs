//! The NodeRestriction admission plugin's checks on Node writes by kubelet
//! identities (kubernetes/kubernetes v1.32
//! `plugin/pkg/admission/noderestriction/admission.go` `admitNode`, and the
//! kubelet label list of `staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go`).
//! Other resources NodeRestriction covers (pods, leases, CSINodes, PVC
//! status, token requests) are not modelled: the test server serves no pods.

use serde_json::Value;

use crate::identity::{Op, User};
use crate::schema::go_quote;

/// Labels a kubelet may set on its own Node (`kubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
];

/// Label namespaces a kubelet may use (`kubeletLabelNamespaces`), with subdomains.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// NodeRestriction for a create, update or delete of Node `name` (or its
/// `subresource`, e.g. `status`: the same checks apply). `old` is the stored
/// Node on update. `Err` is the whole 403 message, e.g.
/// `nodes "b" is forbidden: node "a" is not allowed to modify node "b"`.
/// Users other than kubelets pass untouched.
pub fn admit_node_restriction(
    user: &User,
    op: Op,
    old: Option<&Value>,
    new: &Value,
    subresource: Option<&str>,
    name: &str,
) -> Result<(), String> {
    // Subresources get the same checks upstream (the switch is on the resource).
    let _ = subresource;
    let Some(node) = user.name.strip_prefix("system:node:") else {
        return Ok(());
    };
    if !user.in_group("system:nodes") {
        return Ok(());
    }
    let deny = |err: String| Err(super::forbidden("", "nodes", name, &err));
    if node.is_empty() {
        return deny(format!(
            "could not determine node from user {}",
            go_quote(&user.name)
        ));
    }
    if name != node {
        return deny(format!(
            "node {} is not allowed to modify node {}",
            go_quote(node),
            go_quote(name)
        ));
    }
    match op {
        Op::Create => {
            if !is_unset(new.pointer("/spec/configSource")) {
                // Upstream's text says "pods" here.
                return deny(format!(
                    "node {} is not allowed to create pods with a non-nil configSource",
                    go_quote(node)
                ));
            }
            let forbidden = forbidden_labels(&labels(Some(new)), &[]);
            if !forbidden.is_empty() {
                return deny(format!(
                    "node {} is not allowed to set the following labels: {}",
                    go_quote(node),
                    forbidden.join(", ")
                ));
            }
        }
        Op::Update => {
            let old_src = old.and_then(|o| o.pointer("/spec/configSource"));
            let new_src = new.pointer("/spec/configSource");
            if !is_unset(new_src) && !same(new_src, old_src) {
                return deny(format!(
                    "node {} is not allowed to update configSource to a new non-nil configSource",
                    go_quote(node)
                ));
            }
            if !same(
                new.pointer("/spec/taints"),
                old.and_then(|o| o.pointer("/spec/taints")),
            ) {
                return deny(format!(
                    "node {} is not allowed to modify taints",
                    go_quote(node)
                ));
            }
            if !same(
                new.pointer("/metadata/ownerReferences"),
                old.and_then(|o| o.pointer("/metadata/ownerReferences")),
            ) {
                return deny(format!(
                    "node {} is not allowed to modify ownerReferences",
                    go_quote(node)
                ));
            }
            let forbidden = forbidden_labels(&labels(Some(new)), &labels(old));
            if !forbidden.is_empty() {
                // Upstream's text has no subject here.
                return deny(format!(
                    "is not allowed to modify labels: {}",
                    forbidden.join(", ")
                ));
            }
        }
        Op::Delete => {}
    }
    Ok(())
}

/// nil, absent and empty compare equal, as apimachinery's semantic DeepEqual does.
fn is_unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    }
}

fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    (is_unset(a) && is_unset(b)) || a == b
}

fn labels(obj: Option<&Value>) -> Vec<(String, String)> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The sorted keys whose value differs between the two label sets and that
/// a kubelet may not touch.
fn forbidden_labels(new: &[(String, String)], old: &[(String, String)]) -> Vec<String> {
    let get = |set: &[(String, String)], k: &str| {
        set.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone())
    };
    let mut modified: Vec<String> = new
        .iter()
        .chain(old.iter())
        .map(|(k, _)| k.clone())
        .filter(|k| get(new, k) != get(old, k))
        .collect();
    modified.sort();
    modified.dedup();
    modified.into_iter().filter(|k| is_forbidden(k)).collect()
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn in_domain(ns: &str, domain: &str) -> bool {
    ns == domain || ns.strip_suffix(domain).is_some_and(|p| p.ends_with('.'))
}

fn is_forbidden(key: &str) -> bool {
    let ns = label_namespace(key);
    if in_domain(ns, NODE_RESTRICTION_NAMESPACE) {
        return true;
    }
    let kubernetes = in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io");
    let kubelet =
        KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|d| in_domain(ns, d));
    kubernetes && !kubelet
}
