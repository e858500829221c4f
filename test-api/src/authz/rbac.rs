//! RBAC as kube-apiserver's RBAC authorizer evaluates it
//! (kubernetes/kubernetes v1.32 `plugin/pkg/auth/authorizer/rbac/rbac.go`,
//! `pkg/registry/rbac/validation/rule.go` `VisitRulesFor`/`appliesTo`,
//! `pkg/apis/rbac/v1/evaluation_helpers.go`), loaded from the YAML a
//! `deploy/` directory ships. Aggregated ClusterRoles (`aggregationRule`)
//! are not expanded; non-resource URLs are not modelled.

use serde::Deserialize;
use serde_json::Value;

use crate::identity::{Attributes, User};

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("RBAC YAML document {doc}: {reason}")]
    Parse { doc: usize, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// `RuleAllows` for a resource request.
    pub fn allows(&self, attrs: &Attributes, name: &str) -> bool {
        let sub = attrs.subresource.as_deref().unwrap_or("");
        let combined = if sub.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{sub}", attrs.resource)
        };
        let verb = self.verbs.iter().any(|v| v == "*" || *v == attrs.verb);
        let group = self
            .api_groups
            .iter()
            .any(|g| g == "*" || *g == attrs.api_group);
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                // `*/status` matches every resource's status subresource.
                || (!sub.is_empty() && r.strip_prefix("*/") == Some(sub))
        });
        let names = self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name);
        verb && group && resource && names
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub api_group: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// `None` for a ClusterRole.
    pub namespace: Option<String>,
    pub name: String,
    pub rules: Vec<PolicyRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// `None` for a ClusterRoleBinding.
    pub namespace: Option<String>,
    pub name: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// The RBAC objects of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rbac {
    pub roles: Vec<Role>,
    pub bindings: Vec<Binding>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
    role_ref: Option<RoleRef>,
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
    #[serde(default)]
    items: Vec<Value>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    namespace: Option<String>,
}

impl Rbac {
    /// ClusterRoles, ClusterRoleBindings, Roles and RoleBindings from a
    /// multi-document YAML text (also inside `kind: List`); documents of any
    /// other kind (the Deployment beside them) are skipped.
    pub fn from_yaml(text: &str) -> Result<Rbac, RbacError> {
        let mut rbac = Rbac::default();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let err = |reason: String| RbacError::Parse { doc: i + 1, reason };
            let v = Value::deserialize(doc).map_err(|e| err(e.to_string()))?;
            if v.is_null() {
                continue;
            }
            rbac.add(v).map_err(err)?;
        }
        Ok(rbac)
    }

    fn add(&mut self, v: Value) -> Result<(), String> {
        let d: Doc = serde_json::from_value(v).map_err(|e| e.to_string())?;
        let need_name = |kind: &str| {
            if d.metadata.name.is_empty() {
                Err(format!("{kind} without metadata.name"))
            } else {
                Ok(())
            }
        };
        match d.kind.as_str() {
            "List" => {
                for item in d.items {
                    self.add(item)?;
                }
            }
            "ClusterRole" | "Role" => {
                need_name(&d.kind)?;
                let namespace = if d.kind == "Role" {
                    Some(d.metadata.namespace.unwrap_or_else(|| "default".into()))
                } else {
                    None
                };
                self.roles.push(Role {
                    namespace,
                    name: d.metadata.name,
                    rules: d.rules.unwrap_or_default(),
                });
            }
            "ClusterRoleBinding" | "RoleBinding" => {
                need_name(&d.kind)?;
                let role_ref = d
                    .role_ref
                    .ok_or_else(|| format!("{} {} has no roleRef", d.kind, d.metadata.name))?;
                if role_ref.kind != "ClusterRole" && role_ref.kind != "Role" {
                    return Err(format!(
                        "roleRef kind {} is neither Role nor ClusterRole",
                        role_ref.kind
                    ));
                }
                let namespace = if d.kind == "RoleBinding" {
                    Some(d.metadata.namespace.unwrap_or_else(|| "default".into()))
                } else {
                    if role_ref.kind == "Role" {
                        return Err(format!(
                            "ClusterRoleBinding {} refers to a Role",
                            d.metadata.name
                        ));
                    }
                    None
                };
                self.bindings.push(Binding {
                    namespace,
                    name: d.metadata.name,
                    role_ref,
                    subjects: d.subjects.unwrap_or_default(),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether RBAC allows the request; on no, the reason kube-apiserver's
    /// RBAC authorizer gives (`RBAC: …` for missing roles, else empty).
    pub(crate) fn allows(&self, attrs: &Attributes, name: &str) -> (bool, String) {
        let mut errors: Vec<String> = Vec::new();
        let ns = attrs.namespace.as_deref().unwrap_or("");
        // ClusterRoleBindings first, then RoleBindings of the request's namespace.
        let bindings = self
            .bindings
            .iter()
            .filter(|b| b.namespace.is_none())
            .chain(
                self.bindings
                    .iter()
                    .filter(|b| !ns.is_empty() && b.namespace.as_deref() == Some(ns)),
            );
        for b in bindings {
            let binding_ns = b.namespace.as_deref().unwrap_or("");
            if !b
                .subjects
                .iter()
                .any(|s| applies_to(&attrs.user, s, binding_ns))
            {
                continue;
            }
            let role = if b.role_ref.kind == "ClusterRole" {
                self.roles
                    .iter()
                    .find(|r| r.namespace.is_none() && r.name == b.role_ref.name)
            } else {
                self.roles.iter().find(|r| {
                    r.namespace.as_deref() == Some(binding_ns) && r.name == b.role_ref.name
                })
            };
            let Some(role) = role else {
                errors.push(if b.role_ref.kind == "ClusterRole" {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io \"{}\" not found",
                        b.role_ref.name
                    )
                } else {
                    format!(
                        "role.rbac.authorization.k8s.io \"{}\" not found",
                        b.role_ref.name
                    )
                });
                continue;
            };
            if role.rules.iter().any(|r| r.allows(attrs, name)) {
                return (true, String::new());
            }
        }
        let reason = match errors.len() {
            0 => String::new(),
            1 => format!("RBAC: {}", errors[0]),
            _ => format!("RBAC: [{}]", errors.join(", ")),
        };
        (false, reason)
    }
}

/// `appliesToUser`: a subject names the user, one of its groups, or its
/// ServiceAccount (`system:serviceaccount:NS:NAME`; a RoleBinding's subject
/// without namespace means the binding's). Every authenticated user is in
/// `system:authenticated`, as kube-apiserver's authenticators add it.
fn applies_to(user: &User, s: &Subject, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => user.name == s.name,
        "Group" => {
            user.groups.contains(&s.name)
                || (s.name == "system:authenticated" && user.name != "system:anonymous")
        }
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() {
                binding_ns
            } else {
                &s.namespace
            };
            user.name == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}
