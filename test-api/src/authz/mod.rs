//! Authorization and admission for the test API server, as kube-apiserver
//! runs them with `--authorization-mode=Node,RBAC` and the NodeRestriction
//! admission plugin: `system:masters` first (the privileged-group authorizer),
//! then the Node authorizer, then RBAC; the 403 text as kube-apiserver renders
//! it (kubernetes/apiserver v0.32 `pkg/endpoints/handlers/responsewriters/errors.go`
//! `forbiddenMessage`, `pkg/authorization/union/union.go`, and
//! kubernetes/apimachinery `pkg/api/errors/errors.go` `NewForbidden`).

mod admission;
mod node;
mod rbac;

use serde_json::{json, Value};

pub use admission::admit_node_restriction;
pub use rbac::{Binding, PolicyRule, Rbac, RbacError, Role, RoleRef, Subject};

use crate::identity::{Attributes, NodeAuthzMode};
use crate::schema::go_quote;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The whole 403 message, e.g. `nodes "b" is forbidden: User
    /// "system:node:a" cannot get resource "nodes" in API group "" at the
    /// cluster scope: node 'a' cannot read 'b', only its own Node object`.
    Deny(String),
}

/// The request's object name as kube-apiserver's request-info resolver sets
/// it: a list or watch with a `metadata.name=X` field selector names X.
pub fn effective_name(attrs: &Attributes) -> String {
    if let Some(n) = attrs.name.as_deref().filter(|n| !n.is_empty()) {
        return n.to_string();
    }
    if matches!(attrs.verb.as_str(), "list" | "watch") {
        // Only a valid path segment becomes the name (`path.IsValidPathSegmentName`).
        if let Some(n) = attrs
            .field_selector
            .as_deref()
            .and_then(|fs| exact_match(fs, "metadata.name"))
            .filter(|n| *n != "." && *n != ".." && !n.contains('/') && !n.contains('%'))
        {
            return n.to_string();
        }
    }
    String::new()
}

/// `fields.Selector.RequiresExactMatch`: the value of a `field=value` or
/// `field==value` term.
pub(crate) fn exact_match<'a>(selector: &'a str, field: &str) -> Option<&'a str> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        if term.contains("!=") {
            return None;
        }
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        (k.trim() == field).then(|| v.trim())
    })
}

/// The authorization chain of kube-apiserver with `--authorization-mode=Node,RBAC`.
pub fn authorize(attrs: &Attributes, rbac: &Rbac, node_mode: NodeAuthzMode) -> Decision {
    if attrs.user.in_group("system:masters") {
        return Decision::Allow;
    }
    let name = effective_name(attrs);
    let mut reasons = Vec::new();
    match node::authorize(attrs, &name, node_mode) {
        node::NodeDecision::Allow => return Decision::Allow,
        node::NodeDecision::NoOpinion(r) if !r.is_empty() => reasons.push(r),
        node::NodeDecision::NoOpinion(_) => {}
    }
    let (allowed, reason) = rbac.allows(attrs, &name);
    if allowed {
        return Decision::Allow;
    }
    if !reason.is_empty() {
        reasons.push(reason);
    }
    Decision::Deny(forbidden_message(attrs, &name, &reasons.join("\n")))
}

/// `NewForbidden(gr, name, forbiddenMessage(attrs) + ": " + reason)`.
fn forbidden_message(attrs: &Attributes, name: &str, reason: &str) -> String {
    let sub = attrs.subresource.as_deref().unwrap_or("");
    let resource = if sub.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{sub}", attrs.resource)
    };
    let scope = match attrs.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("in the namespace {}", go_quote(ns)),
        _ => "at the cluster scope".to_string(),
    };
    let msg = format!(
        "User {} cannot {} resource {} in API group {} {scope}",
        go_quote(&attrs.user.name),
        attrs.verb,
        go_quote(&resource),
        go_quote(&attrs.api_group)
    );
    // The user-supplied part is HTML-escaped (`sanitizer`), the reason is not.
    let mut msg = msg
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    forbidden(&attrs.api_group, &attrs.resource, name, &msg)
}

/// `apierrors.NewForbidden`'s message: `RESOURCE[.GROUP] ["NAME" ]is forbidden: ERR`.
pub(crate) fn forbidden(group: &str, resource: &str, name: &str, err: &str) -> String {
    let gr = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    if gr.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{gr} is forbidden: {err}")
    } else {
        format!("{gr} {} is forbidden: {err}", go_quote(name))
    }
}

/// The `metav1.Status` body of a 403 with `message` (from `Decision::Deny` or
/// `admit_node_restriction`).
pub fn forbidden_status(group: &str, resource: &str, name: &str, message: &str) -> Value {
    let mut details = json!({"kind": resource});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    })
}

#[cfg(test)]
mod tests;
