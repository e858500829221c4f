//! The Node authorizer for kubelet identities, as kube-apiserver 1.32 runs it
//! (kubernetes/kubernetes v1.32 `plugin/pkg/auth/authorizer/node/node_authorizer.go`;
//! the static rules are `bootstrappolicy.NodeRules()` in
//! `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`). There is no
//! pod graph here: objects reached only through a node's pods (secrets,
//! configmaps, PVCs, PVs, resource claims, volume attachments, pods by name,
//! service-account tokens) are refused as upstream refuses unrelated ones.

use crate::identity::{Attributes, NodeAuthzMode};

use super::rbac::PolicyRule;

/// What the Node authorizer says; `NoOpinion` passes the request to RBAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeDecision {
    Allow,
    NoOpinion(String),
}

use NodeDecision::{Allow, NoOpinion};

fn no(reason: &str) -> NodeDecision {
    NoOpinion(reason.to_string())
}

/// `nodeidentifier.NodeIdentity`: the node name of `system:node:NAME` in
/// `system:nodes` (possibly empty), or `None` for any other user.
pub(crate) fn node_identity(attrs: &Attributes) -> Option<&str> {
    let u = &attrs.user;
    let name = u.name.strip_prefix("system:node:")?;
    u.in_group("system:nodes").then_some(name)
}

pub(crate) fn authorize(attrs: &Attributes, name: &str, mode: NodeAuthzMode) -> NodeDecision {
    let Some(node) = node_identity(attrs) else {
        return no("");
    };
    if node.is_empty() {
        return NoOpinion(format!(
            "unknown node for user {}",
            crate::schema::go_quote(&attrs.user.name)
        ));
    }
    let unrelated = || {
        NoOpinion(format!(
            "no relationship found between node '{node}' and this object"
        ))
    };
    let selectors = mode == NodeAuthzMode::SelectorRestricted;
    let verb = attrs.verb.as_str();
    let sub = attrs.subresource.as_deref().unwrap_or("");
    match (attrs.api_group.as_str(), attrs.resource.as_str()) {
        ("", "secrets") | ("", "configmaps") => {
            if !matches!(verb, "get" | "list" | "watch") {
                return no("can only read resources of this type");
            }
            if !sub.is_empty() {
                return no("cannot read subresource");
            }
            if attrs.namespace.as_deref().unwrap_or("").is_empty() {
                return no("can only read namespaced object of this type");
            }
            if name.is_empty() {
                return no("No Object name found");
            }
            return unrelated();
        }
        ("", "persistentvolumeclaims") if sub == "status" => {
            if !matches!(verb, "update" | "patch") {
                return no("can only get/update/patch this type");
            }
            if name.is_empty() {
                return no("No Object name found");
            }
            return unrelated();
        }
        ("", "persistentvolumeclaims")
        | ("", "persistentvolumes")
        | ("resource.k8s.io", "resourceclaims")
        | ("storage.k8s.io", "volumeattachments") => {
            if verb != "get" {
                return no("can only get individual resources of this type");
            }
            if !sub.is_empty() {
                return no("cannot get subresource");
            }
            if name.is_empty() {
                return no("No Object name found");
            }
            return unrelated();
        }
        ("", "serviceaccounts") => {
            if verb != "create" || name.is_empty() {
                return no("can only create tokens for individual service accounts");
            }
            if sub != "token" {
                return no("can only create token subresource of serviceaccount");
            }
            return unrelated();
        }
        ("coordination.k8s.io", "leases") => {
            if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                return no("can only get, create, update, patch, or delete a node lease");
            }
            if attrs.namespace.as_deref() != Some("kube-node-lease") {
                return no("can only access leases in the \"kube-node-lease\" system namespace");
            }
            if verb != "create" && name != node {
                return no("can only access node lease with the same name as the requesting node");
            }
            return Allow;
        }
        ("storage.k8s.io", "csinodes") => {
            if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                return no("can only get, create, update, patch, or delete a CSINode");
            }
            if !sub.is_empty() {
                return no("cannot authorize CSINode subresources");
            }
            if verb != "create" && name != node {
                return no("can only access CSINode with the same name as the requesting node");
            }
            return Allow;
        }
        ("", "nodes") if selectors => return authorize_node(node, verb, sub, name),
        ("", "pods") if selectors => return authorize_pod(attrs, node, verb, sub, name),
        _ => {}
    }
    if static_rules().iter().any(|r| r.allows(attrs, name)) {
        Allow
    } else {
        no("")
    }
}

/// `authorizeNode` (AuthorizeNodeWithSelectors): writes are left to
/// NodeRestriction; reads only of the node's own object.
fn authorize_node(node: &str, verb: &str, sub: &str, name: &str) -> NodeDecision {
    match (sub, verb) {
        ("", "create" | "update" | "patch") => Allow,
        ("", "get" | "list" | "watch") => {
            if name == node {
                Allow
            } else if name.is_empty() {
                NoOpinion(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                ))
            } else {
                NoOpinion(format!(
                    "node '{node}' cannot read '{name}', only its own Node object"
                ))
            }
        }
        ("status", "update" | "patch") => Allow,
        _ => no(""),
    }
}

/// `authorizePod` (AuthorizeNodeWithSelectors).
fn authorize_pod(
    attrs: &Attributes,
    node: &str,
    verb: &str,
    sub: &str,
    name: &str,
) -> NodeDecision {
    match (sub, verb) {
        ("", "get") => {
            if name.is_empty() {
                no("No Object name found")
            } else {
                NoOpinion(format!(
                    "no relationship found between node '{node}' and this object"
                ))
            }
        }
        ("", "list" | "watch") => {
            let scoped = attrs
                .field_selector
                .as_deref()
                .is_some_and(|fs| super::exact_match(fs, "spec.nodeName") == Some(node));
            if scoped {
                Allow
            } else if !name.is_empty() {
                NoOpinion(format!(
                    "no relationship found between node '{node}' and this object"
                ))
            } else {
                no("can only list/watch pods with spec.nodeName field selector")
            }
        }
        ("", "create" | "delete") => Allow,
        ("status", "update" | "patch") => Allow,
        ("eviction", "create") => Allow,
        _ => no(""),
    }
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
    PolicyRule {
        verbs: s(verbs),
        api_groups: s(groups),
        resources: s(resources),
        resource_names: Vec::new(),
        non_resource_urls: Vec::new(),
    }
}

/// The part of `NodeRules()` that reaches the static check (the resources
/// handled above never get here, except nodes and pods in Legacy mode).
fn static_rules() -> Vec<PolicyRule> {
    let read = &["get", "list", "watch"];
    vec![
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews", "localsubjectaccessreviews"],
        ),
        rule(read, &[""], &["services"]),
        rule(&["create", "get", "list", "watch"], &[""], &["nodes"]),
        rule(&["update", "patch"], &[""], &["nodes/status"]),
        rule(&["update", "patch"], &[""], &["nodes"]),
        rule(&["create", "update", "patch"], &[""], &["events"]),
        rule(read, &[""], &["pods"]),
        rule(&["create", "delete"], &[""], &["pods"]),
        rule(&["update", "patch"], &[""], &["pods/status"]),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(&["get"], &[""], &["endpoints"]),
        rule(read, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            &["create", "get", "list", "watch"],
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
        ),
        rule(read, &["node.k8s.io"], &["runtimeclasses"]),
        rule(read, &["storage.k8s.io"], &["csidrivers"]),
    ]
}
