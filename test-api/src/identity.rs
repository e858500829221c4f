//! Who is asking and what they ask for: the types shared by authentication
//! (api-core), authorization and admission (`authz`). They mirror
//! k8s.io/apiserver's `user.Info` and `authorizer.Attributes`
//! (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/authorization/authorizer/interfaces.go`, v1.32).

/// An authenticated identity: from a client certificate (CN = name, O = groups)
/// or from the bearer-token table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn new(name: &str, groups: &[&str]) -> User {
        User {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node name of a kubelet identity: `system:node:NAME` in group
    /// `system:nodes` (k8s.io/apiserver's `nodeidentifier.NodeIdentity`).
    /// Both are needed; a user named `system:node:x` outside the group is not a node.
    pub fn node_name(&self) -> Option<&str> {
        if !self.in_group("system:nodes") {
            return None;
        }
        self.name
            .strip_prefix("system:node:")
            .filter(|n| !n.is_empty())
    }
}

/// One request as the authorizers see it (resource requests only; the test
/// server answers discovery and `/version` to any authenticated user, as the
/// default `system:discovery` binding does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub user: User,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// `""` for the core group.
    pub api_group: String,
    /// Plural resource name, e.g. `nodes`, `machines`.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The raw `fieldSelector` query parameter, if any.
    pub field_selector: Option<String>,
    /// The raw `labelSelector` query parameter, if any.
    pub label_selector: Option<String>,
}

/// How the Node authorizer treats node reads of Node objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeAuthzMode {
    /// Kubernetes 1.32+ with the `AuthorizeNodeWithSelectors` feature: a node
    /// reads only its own Node (get by name, list/watch with `metadata.name=NAME`).
    #[default]
    SelectorRestricted,
    /// Before 1.32 (or the feature off): a node may read every Node.
    Legacy,
}

/// The kind of write admission looks at (k8s.io/apiserver `admission.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Update,
    Delete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_needs_the_group_and_the_prefix() {
        assert_eq!(
            User::new("system:node:w1", &["system:nodes"]).node_name(),
            Some("w1")
        );
        assert_eq!(User::new("system:node:w1", &[]).node_name(), None);
        assert_eq!(User::new("w1", &["system:nodes"]).node_name(), None);
        assert_eq!(
            User::new("system:node:", &["system:nodes"]).node_name(),
            None
        );
    }
}
