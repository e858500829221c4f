//! Table tests: each expected text is kube-apiserver 1.32's for the request.

use serde_json::json;

use super::*;
use crate::identity::{Op, User};

fn node_user(n: &str) -> User {
    User::new(
        &format!("system:node:{n}"),
        &["system:nodes", "system:authenticated"],
    )
}

fn attrs(user: User, verb: &str, group: &str, resource: &str) -> Attributes {
    Attributes {
        user,
        verb: verb.into(),
        api_group: group.into(),
        resource: resource.into(),
        subresource: None,
        namespace: None,
        name: None,
        field_selector: None,
        label_selector: None,
    }
}

fn named(mut a: Attributes, name: &str) -> Attributes {
    a.name = Some(name.into());
    a
}

fn sub(mut a: Attributes, s: &str) -> Attributes {
    a.subresource = Some(s.into());
    a
}

fn ns(mut a: Attributes, n: &str) -> Attributes {
    a.namespace = Some(n.into());
    a
}

fn fs(mut a: Attributes, s: &str) -> Attributes {
    a.field_selector = Some(s.into());
    a
}

const DEPLOY_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: controller, namespace: sandbox-readiness}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sandbox-readiness-controller}
rules:
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["machines", "machinedeployments", "machinesets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["machines/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sandbox-readiness-controller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sandbox-readiness-controller}
subjects:
- {kind: ServiceAccount, name: controller, namespace: sandbox-readiness}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease, namespace: sandbox-readiness}
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: ["sandbox-readiness-controller"]
  verbs: ["get", "update"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease, namespace: sandbox-readiness}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease}
subjects:
- {kind: ServiceAccount, name: controller}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: all-status-reader}
subjects:
- {kind: Group, name: readers}
- {kind: User, name: alice}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: all-status-reader}
rules:
- apiGroups: ["*"]
  resources: ["*/status"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dangling}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: missing-role}
subjects:
- {kind: User, name: bob}
"#;

fn rbac() -> Rbac {
    Rbac::from_yaml(DEPLOY_RBAC).expect("the RBAC loads")
}

fn decide(a: &Attributes, mode: NodeAuthzMode) -> Decision {
    authorize(a, &rbac(), mode)
}

#[test]
fn node_authorizer_table() {
    use NodeAuthzMode::{Legacy, SelectorRestricted as Sel};
    let a = || node_user("a");
    let allow = Decision::Allow;
    let deny = |m: &str| Decision::Deny(m.to_string());
    let cases: Vec<(&str, Attributes, NodeAuthzMode, Decision)> = vec![
        ("get own node", named(attrs(a(), "get", "", "nodes"), "a"), Sel, allow.clone()),
        (
            "get another node",
            named(attrs(a(), "get", "", "nodes"), "b"),
            Sel,
            deny("nodes \"b\" is forbidden: User \"system:node:a\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node 'a' cannot read 'b', only its own Node object"),
        ),
        ("get another node, legacy", named(attrs(a(), "get", "", "nodes"), "b"), Legacy, allow.clone()),
        (
            "list all nodes",
            attrs(a(), "list", "", "nodes"),
            Sel,
            deny("nodes is forbidden: User \"system:node:a\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: node 'a' cannot read all nodes, only its own Node object"),
        ),
        ("list all nodes, legacy", attrs(a(), "list", "", "nodes"), Legacy, allow.clone()),
        ("watch own node by field selector", fs(attrs(a(), "watch", "", "nodes"), "metadata.name=a"), Sel, allow.clone()),
        ("list own node by == selector", fs(attrs(a(), "list", "", "nodes"), "metadata.name==a"), Sel, allow.clone()),
        (
            "watch another node by field selector",
            fs(attrs(a(), "watch", "", "nodes"), "metadata.name=b"),
            Sel,
            deny("nodes \"b\" is forbidden: User \"system:node:a\" cannot watch resource \"nodes\" in API group \"\" at the cluster scope: node 'a' cannot read 'b', only its own Node object"),
        ),
        ("patch another node's status (left to admission)", sub(named(attrs(a(), "patch", "", "nodes"), "b"), "status"), Sel, allow.clone()),
        ("update own node", named(attrs(a(), "update", "", "nodes"), "a"), Sel, allow.clone()),
        ("create a node", attrs(a(), "create", "", "nodes"), Sel, allow.clone()),
        ("patch node status, legacy", sub(named(attrs(a(), "patch", "", "nodes"), "a"), "status"), Legacy, allow.clone()),
        (
            "delete own node",
            named(attrs(a(), "delete", "", "nodes"), "a"),
            Sel,
            deny("nodes \"a\" is forbidden: User \"system:node:a\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope"),
        ),
        (
            "get node status subresource",
            sub(named(attrs(a(), "get", "", "nodes"), "a"), "status"),
            Sel,
            deny("nodes \"a\" is forbidden: User \"system:node:a\" cannot get resource \"nodes/status\" in API group \"\" at the cluster scope"),
        ),
        ("create an event", ns(attrs(a(), "create", "", "events"), "default"), Sel, allow.clone()),
        ("patch an event", named(ns(attrs(a(), "patch", "", "events"), "default"), "e1"), Sel, allow.clone()),
        (
            "delete an event",
            named(ns(attrs(a(), "delete", "", "events"), "default"), "e1"),
            Sel,
            deny("events \"e1\" is forbidden: User \"system:node:a\" cannot delete resource \"events\" in API group \"\" in the namespace \"default\""),
        ),
        ("own lease", named(ns(attrs(a(), "update", "coordination.k8s.io", "leases"), "kube-node-lease"), "a"), Sel, allow.clone()),
        (
            "another node's lease",
            named(ns(attrs(a(), "update", "coordination.k8s.io", "leases"), "kube-node-lease"), "b"),
            Sel,
            deny("leases.coordination.k8s.io \"b\" is forbidden: User \"system:node:a\" cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"kube-node-lease\": can only access node lease with the same name as the requesting node"),
        ),
        (
            "a secret",
            named(ns(attrs(a(), "get", "", "secrets"), "default"), "s1"),
            Sel,
            deny("secrets \"s1\" is forbidden: User \"system:node:a\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'a' and this object"),
        ),
        (
            "list machines",
            ns(attrs(a(), "list", "cluster.x-k8s.io", "machines"), "default"),
            Sel,
            deny("machines.cluster.x-k8s.io is forbidden: User \"system:node:a\" cannot list resource \"machines\" in API group \"cluster.x-k8s.io\" in the namespace \"default\""),
        ),
        (
            "list pods without a node selector",
            attrs(a(), "list", "", "pods"),
            Sel,
            deny("pods is forbidden: User \"system:node:a\" cannot list resource \"pods\" in API group \"\" at the cluster scope: can only list/watch pods with spec.nodeName field selector"),
        ),
        ("list own pods", fs(attrs(a(), "list", "", "pods"), "spec.nodeName=a"), Sel, allow.clone()),
        (
            "a node identity with an empty name",
            named(attrs(User::new("system:node:", &["system:nodes"]), "get", "", "nodes"), "a"),
            Sel,
            deny("nodes \"a\" is forbidden: User \"system:node:\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: unknown node for user \"system:node:\""),
        ),
        (
            "a node name outside system:nodes is no node",
            named(attrs(User::new("system:node:a", &[]), "get", "", "nodes"), "a"),
            Sel,
            deny("nodes \"a\" is forbidden: User \"system:node:a\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"),
        ),
        (
            "user names are HTML-escaped in the message",
            named(attrs(User::new("a<b>&c", &[]), "get", "", "nodes"), "n"),
            Sel,
            deny("nodes \"n\" is forbidden: User \"a&lt;b&gt;&amp;c\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"),
        ),
        (
            "a selector name that is no path segment names nothing",
            fs(attrs(a(), "list", "", "nodes"), "metadata.name=a/b"),
            Sel,
            deny("nodes is forbidden: User \"system:node:a\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: node 'a' cannot read all nodes, only its own Node object"),
        ),
        ("system:masters", named(attrs(User::new("admin", &["system:masters"]), "delete", "", "nodes"), "b"), Sel, allow.clone()),
    ];
    for (name, a, mode, want) in cases {
        assert_eq!(decide(&a, mode), want, "{name}");
    }
}

#[test]
fn rbac_table() {
    let sa = || {
        User::new(
            "system:serviceaccount:sandbox-readiness:controller",
            &["system:serviceaccounts"],
        )
    };
    let mode = NodeAuthzMode::SelectorRestricted;
    let allow = Decision::Allow;
    let deny = |m: &str| Decision::Deny(m.to_string());
    let cases: Vec<(&str, Attributes, Decision)> = vec![
        ("sa lists machines", ns(attrs(sa(), "list", "cluster.x-k8s.io", "machines"), "default"), allow.clone()),
        ("sa patches machine status", sub(named(ns(attrs(sa(), "patch", "cluster.x-k8s.io", "machines"), "default"), "m1"), "status"), allow.clone()),
        (
            "sa patches a machine",
            named(ns(attrs(sa(), "patch", "cluster.x-k8s.io", "machines"), "default"), "m1"),
            deny("machines.cluster.x-k8s.io \"m1\" is forbidden: User \"system:serviceaccount:sandbox-readiness:controller\" cannot patch resource \"machines\" in API group \"cluster.x-k8s.io\" in the namespace \"default\""),
        ),
        ("sa gets a secret anywhere", named(ns(attrs(sa(), "get", "", "secrets"), "c1"), "c1-kubeconfig"), allow.clone()),
        (
            "sa lists secrets",
            ns(attrs(sa(), "list", "", "secrets"), "c1"),
            deny("secrets is forbidden: User \"system:serviceaccount:sandbox-readiness:controller\" cannot list resource \"secrets\" in API group \"\" in the namespace \"c1\""),
        ),
        ("sa updates its named lease", named(ns(attrs(sa(), "update", "coordination.k8s.io", "leases"), "sandbox-readiness"), "sandbox-readiness-controller"), allow.clone()),
        ("sa creates a lease (no name)", ns(attrs(sa(), "create", "coordination.k8s.io", "leases"), "sandbox-readiness"), allow.clone()),
        (
            "sa updates another lease",
            named(ns(attrs(sa(), "update", "coordination.k8s.io", "leases"), "sandbox-readiness"), "other"),
            deny("leases.coordination.k8s.io \"other\" is forbidden: User \"system:serviceaccount:sandbox-readiness:controller\" cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"sandbox-readiness\""),
        ),
        (
            "the Role binds in its namespace only",
            named(ns(attrs(sa(), "update", "coordination.k8s.io", "leases"), "default"), "sandbox-readiness-controller"),
            deny("leases.coordination.k8s.io \"sandbox-readiness-controller\" is forbidden: User \"system:serviceaccount:sandbox-readiness:controller\" cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""),
        ),
        (
            "another service account",
            ns(attrs(User::new("system:serviceaccount:default:controller", &[]), "list", "cluster.x-k8s.io", "machines"), "default"),
            deny("machines.cluster.x-k8s.io is forbidden: User \"system:serviceaccount:default:controller\" cannot list resource \"machines\" in API group \"cluster.x-k8s.io\" in the namespace \"default\""),
        ),
        ("group subject, */status", sub(named(attrs(User::new("carol", &["readers"]), "get", "", "nodes"), "n1"), "status"), allow.clone()),
        ("user subject, */status", sub(named(ns(attrs(User::new("alice", &[]), "get", "cluster.x-k8s.io", "machines"), "d"), "m"), "status"), allow.clone()),
        (
            "*/status is not the resource",
            named(attrs(User::new("alice", &[]), "get", "", "nodes"), "n1"),
            deny("nodes \"n1\" is forbidden: User \"alice\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"),
        ),
        (
            "a binding to a missing role",
            named(attrs(User::new("bob", &[]), "get", "", "nodes"), "n1"),
            deny("nodes \"n1\" is forbidden: User \"bob\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"missing-role\" not found"),
        ),
    ];
    for (name, a, want) in cases {
        assert_eq!(authorize(&a, &rbac(), mode), want, "{name}");
    }
}

#[test]
fn rbac_yaml_errors_are_one_line() {
    let e =
        Rbac::from_yaml("kind: ClusterRoleBinding\nmetadata: {name: x}\n").expect_err("no roleRef");
    assert_eq!(
        e.to_string(),
        "RBAC YAML document 1: ClusterRoleBinding x has no roleRef"
    );
    assert!(Rbac::from_yaml("kind: [").is_err());
    let e = Rbac::from_yaml("---\nkind: Role\nmetadata: {}\n").expect_err("no name");
    assert!(e.to_string().contains("Role without metadata.name"), "{e}");
    let list = "kind: List\nitems:\n- kind: ClusterRole\n  metadata: {name: r}\n  rules: []\n";
    assert_eq!(Rbac::from_yaml(list).map(|r| r.roles.len()).ok(), Some(1));
}

#[test]
fn forbidden_status_body() {
    assert_eq!(
        forbidden_status("", "nodes", "b", "nodes \"b\" is forbidden: x"),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "nodes \"b\" is forbidden: x", "reason": "Forbidden",
               "details": {"name": "b", "kind": "nodes"}, "code": 403})
    );
}

fn node_obj(labels: serde_json::Value, taints: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "a", "labels": labels, "annotations": {"x": "1"}},
           "spec": {"taints": taints}})
}

/// name, operation, old object, new object, target node, expected answer.
type AdmitCase = (
    &'static str,
    Op,
    Option<serde_json::Value>,
    serde_json::Value,
    &'static str,
    Result<(), String>,
);

#[test]
fn node_restriction_table() {
    let a = node_user("a");
    let base = node_obj(
        json!({"kubernetes.io/hostname": "a"}),
        json!([{"key": "k", "effect": "NoSchedule"}]),
    );
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut n = base.clone();
        f(&mut n);
        n
    };
    let ok: Result<(), String> = Ok(());
    let err = |m: &str| Err(m.to_string());
    let cases: Vec<AdmitCase> = vec![
        ("own status update with a new condition", Op::Update, Some(base.clone()),
            with(&|n| n["status"] = json!({"conditions": [{"type": "sandbox-readiness.io/SandboxReady", "status": "True"}]})), "a", ok.clone()),
        ("another node", Op::Update, Some(base.clone()), base.clone(), "b",
            err("nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\"")),
        ("taint removed", Op::Update, Some(base.clone()), with(&|n| n["spec"]["taints"] = json!([])), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to modify taints")),
        ("taint added", Op::Update, Some(base.clone()), with(&|n| n["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}, {"key": "j", "effect": "NoExecute"}])), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to modify taints")),
        ("ownerReferences added", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": "x", "uid": "u"}])), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to modify ownerReferences")),
        ("empty ownerReferences is none", Op::Update, Some(base.clone()), with(&|n| n["metadata"]["ownerReferences"] = json!([])), "a", ok.clone()),
        ("node-restriction label", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("x")), "a",
            err("nodes \"a\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool")),
        ("node-restriction subdomain label", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["labels"]["a.node-restriction.kubernetes.io/x"] = json!("x")), "a",
            err("nodes \"a\" is forbidden: is not allowed to modify labels: a.node-restriction.kubernetes.io/x")),
        ("unknown kubernetes.io and k8s.io labels, sorted", Op::Update, Some(base.clone()),
            with(&|n| {
                n["metadata"]["labels"]["node-role.kubernetes.io/worker"] = json!("");
                n["metadata"]["labels"]["example.k8s.io/x"] = json!("1");
            }), "a",
            err("nodes \"a\" is forbidden: is not allowed to modify labels: example.k8s.io/x, node-role.kubernetes.io/worker")),
        ("removing a kubelet label is fine", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["labels"] = json!({})), "a", ok.clone()),
        ("kubelet labels and namespaces", Op::Update, Some(base.clone()),
            with(&|n| {
                let l = &mut n["metadata"]["labels"];
                l["kubernetes.io/arch"] = json!("amd64");
                l["topology.kubernetes.io/zone"] = json!("z");
                l["node.kubernetes.io/instance-type"] = json!("t");
                l["foo.kubelet.kubernetes.io/bar"] = json!("1");
                l["node.kubernetes.io/windows-build"] = json!("1");
            }), "a", ok.clone()),
        ("custom-prefix label", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["labels"]["sandbox-readiness.io/ready"] = json!("true")), "a", ok.clone()),
        ("notkubernetes.io is not kubernetes.io", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["labels"]["notkubernetes.io/x"] = json!("1")), "a", ok.clone()),
        ("annotations allowed", Op::Update, Some(base.clone()),
            with(&|n| n["metadata"]["annotations"]["sandbox-readiness.io/desired"] = json!("{\"v\":1}")), "a", ok.clone()),
        ("create with a forbidden label", Op::Create, None,
            with(&|n| n["metadata"]["labels"]["node-restriction.kubernetes.io/x"] = json!("1")), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to set the following labels: node-restriction.kubernetes.io/x")),
        ("create own node", Op::Create, None, base.clone(), "a", ok.clone()),
        ("create with configSource", Op::Create, None, with(&|n| n["spec"]["configSource"] = json!({"configMap": {}})), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to create pods with a non-nil configSource")),
        ("update to a configSource", Op::Update, Some(base.clone()), with(&|n| n["spec"]["configSource"] = json!({"configMap": {}})), "a",
            err("nodes \"a\" is forbidden: node \"a\" is not allowed to update configSource to a new non-nil configSource")),
        ("create another node", Op::Create, None, base.clone(), "b",
            err("nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\"")),
        ("delete another node", Op::Delete, Some(base.clone()), base.clone(), "b",
            err("nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\"")),
    ];
    for (name, op, old, new, target, want) in cases {
        assert_eq!(
            admit_node_restriction(&a, op, old.as_ref(), &new, Some("status"), target),
            want,
            "{name}"
        );
        assert_eq!(
            admit_node_restriction(&a, op, old.as_ref(), &new, None, target),
            want,
            "{name} (main resource)"
        );
    }
}

#[test]
fn node_restriction_ignores_other_users_and_names_empty_nodes() {
    let base = node_obj(json!({}), json!([]));
    let tainted = node_obj(json!({}), json!([{"key": "k", "effect": "NoSchedule"}]));
    let admin = User::new("admin", &["system:masters"]);
    assert_eq!(
        admit_node_restriction(&admin, Op::Update, Some(&base), &tainted, None, "b"),
        Ok(())
    );
    let not_node = User::new("system:node:a", &[]);
    assert_eq!(
        admit_node_restriction(&not_node, Op::Update, Some(&base), &tainted, None, "b"),
        Ok(())
    );
    let empty = User::new("system:node:", &["system:nodes"]);
    assert_eq!(
        admit_node_restriction(&empty, Op::Update, Some(&base), &base, None, "a"),
        Err(
            "nodes \"a\" is forbidden: could not determine node from user \"system:node:\""
                .to_string()
        )
    );
}
