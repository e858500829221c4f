//! kubectl v1.32 as the operator, against the test API server: its exit codes
//! and output are what a real cluster gives (checked against kubectl's own
//! printing and error paths), through a node certificate and an admin token.
// Tests: a failed unwrap is a failed test with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const CAPI: &str = "cluster.x-k8s.io/v1beta2";

#[tokio::test]
async fn get_through_token_and_node_certificate() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    srv.create(node("worker-2")).unwrap();
    let k = Kube::new();
    let admin = k.admin(&srv);
    let out = kubectl(&admin, &["get", "nodes"]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["NAME", "STATUS", "ROLES", "AGE", "VERSION"]),
        "{out:?}"
    );
    assert!(
        lines[1].starts_with("worker-1 ")
            && lines[1].contains(" Ready ")
            && lines[1].ends_with("v1.32.4"),
        "{out:?}"
    );

    let n1 = k.node(&srv, "worker-1");
    let out = kubectl(&n1, &["get", "node", "worker-1", "-o", "json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["metadata"]["name"], "worker-1");
    assert!(
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(v["metadata"]["uid"].as_str().unwrap().len(), 36);

    let out = kubectl(&admin, &["get", "node", "nope"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Error from server (NotFound): nodes \"nope\" not found"
    );

    let rec = srv.requests();
    assert!(rec
        .iter()
        .any(|r| r.path == "/api/v1/nodes/worker-1"
            && r.user.as_deref() == Some("system:node:worker-1")));
}

#[tokio::test]
async fn a_revoked_certificate_and_an_unknown_token_are_unauthorized() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    let k = Kube::new();
    let c = srv.client_cert("system:node:worker-1", &["system:nodes"]);
    let kc = k.write("n.kubeconfig", &srv.kubeconfig_inline(&c));
    assert_eq!(kubectl(&kc, &["get", "node", "worker-1"]).code, 0);
    srv.revoke(c.serial);
    let out = kubectl(&kc, &["get", "node", "worker-1"]);
    assert_eq!(out.code, 1, "{out:?}");
    // Discovery is cached from the first call: the 401 comes on the GET, and
    // kubectl prints the Status's message.
    assert_eq!(
        out.stderr, "error: You must be logged in to the server (Unauthorized)\n",
        "{out:?}"
    );
    let bad = k.write("bad.kubeconfig", &srv.kubeconfig_token("wrong"));
    let out = kubectl(&bad, &["get", "nodes"]);
    assert_eq!(out.code, 1, "{out:?}");
    // A 401 during discovery: kubectl's own words, as against a real cluster.
    assert!(
        out.stderr.ends_with("error: You must be logged in to the server (the server has asked for the client to provide credentials)\n"),
        "{out:?}"
    );
    assert!(srv
        .requests()
        .iter()
        .any(|r| r.status == 401 && r.user.is_none()));
}

#[tokio::test]
async fn kubeconfig_files_and_kubelet_style_rotation() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    let k = Kube::new();
    let c1 = srv.client_cert("system:node:worker-1", &["system:nodes"]);
    let files = srv
        .kubeconfig_files(&k.dir.path().join("files"), &c1)
        .unwrap();
    assert_eq!(kubectl(&files, &["get", "node", "worker-1"]).code, 0);

    let dir = k.dir.path().join("kubelet");
    let kc = srv.kubeconfig_kubelet_style(&dir, &c1).unwrap();
    let current = dir.join("pki/kubelet-client-current.pem");
    let target = std::fs::read_link(&current).unwrap();
    assert!(target.is_absolute(), "{target:?}");
    let pem = std::fs::read_to_string(&current).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE") && pem.contains("PRIVATE KEY"));
    assert_eq!(kubectl(&kc, &["get", "node", "worker-1"]).code, 0);
    // Rotation: a new certificate behind the same symlink; the old one revoked.
    let c2 = srv.client_cert("system:node:worker-1", &["system:nodes"]);
    srv.kubeconfig_kubelet_style(&dir, &c2).unwrap();
    srv.revoke(c1.serial);
    let out = kubectl(&kc, &["get", "node", "worker-1"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_ne!(std::fs::read_link(&current).unwrap(), target);
    assert_eq!(kubectl(&files, &["get", "node", "worker-1"]).code, 1);
}

#[tokio::test]
async fn get_with_label_columns() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    let k = Kube::new();
    let admin = k.admin(&srv);
    let out = kubectl(
        &admin,
        &[
            "get",
            "nodes",
            "-L",
            "kubernetes.io/os",
            "-L",
            "sandbox-readiness.io/ready",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["NAME", "STATUS", "ROLES", "AGE", "VERSION", "OS", "READY"]),
        "{out:?}"
    );
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells.len(), 6, "{out:?}"); // an absent label is an empty cell
    assert_eq!(cells[5], "linux");
    let out = kubectl(
        &admin,
        &[
            "get",
            "nodes",
            "-l",
            "kubernetes.io/os in (linux,windows),!nope",
            "-o",
            "name",
        ],
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "node/worker-1\n"),
        "{out:?}"
    );
    let out = kubectl(&admin, &["get", "nodes", "-l", "kubernetes.io/os=windows"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stderr.trim(), "No resources found");
}

#[tokio::test]
async fn label_as_admin_and_as_the_node() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    let k = Kube::new();
    for (who, kc) in [("admin", k.admin(&srv)), ("node", k.node(&srv, "worker-1"))] {
        let key = format!("sandbox-readiness.io/by-{who}");
        let out = kubectl(&kc, &["label", "node", "worker-1", &format!("{key}=true")]);
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, "node/worker-1 labeled\n"),
            "{who}: {out:?}"
        );
        let n = srv.get("v1", "Node", "", "worker-1").unwrap();
        assert_eq!(n["metadata"]["labels"][&key], "true");
        let out = kubectl(&kc, &["label", "node", "worker-1", &format!("{key}=false")]);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(
            out.stderr
                .contains("already has a value (true), and --overwrite is false"),
            "{out:?}"
        );
        let out = kubectl(
            &kc,
            &[
                "label",
                "node",
                "worker-1",
                &format!("{key}=false"),
                "--overwrite",
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let out = kubectl(&kc, &["label", "node", "worker-1", &format!("{key}-")]);
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, "node/worker-1 unlabeled\n"),
            "{out:?}"
        );
    }
    // The kubelet's Ready condition survived every label write (status is not
    // the main resource's to change).
    let n = srv.get("v1", "Node", "", "worker-1").unwrap();
    assert_eq!(n["status"]["conditions"][0]["type"], "Ready");
}

const NPD_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: npd
rules:
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["nodes/status"]
  verbs: ["get", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: npd
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: npd
subjects:
- kind: ServiceAccount
  name: npd
  namespace: kube-system
"#;

#[tokio::test]
async fn patch_status_subresource() {
    let srv = test_api::TestApiServer::builder()
        .token(
            ADMIN_TOKEN,
            test_api::User::new("admin", &["system:masters"]),
        )
        .token(
            "npd-token",
            test_api::User::new(
                "system:serviceaccount:kube-system:npd",
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                ],
            ),
        )
        .rbac_yaml(NPD_RBAC)
        .start()
        .await
        .unwrap();
    srv.create(node("worker-1")).unwrap();
    srv.create(machine("default", "m1")).unwrap();
    let k = Kube::new();
    let admin = k.admin(&srv);
    let npd = k.write("npd.kubeconfig", &srv.kubeconfig_token("npd-token"));
    // Strategic merge (kubectl's default): the new condition merges by type,
    // the kubelet's Ready survives; the spec in the patch is dropped.
    let patch = r#"{"status":{"conditions":[{"type":"SandboxReady","status":"True","reason":"Probed","message":"gvisor ok","lastHeartbeatTime":"2026-12-01T00:00:01Z","lastTransitionTime":"2026-12-01T00:00:01Z"}]},"spec":{"unschedulable":true}}"#;
    let out = kubectl(
        &npd,
        &[
            "patch",
            "node",
            "worker-1",
            "--subresource=status",
            "-p",
            patch,
        ],
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "node/worker-1 patched\n"),
        "{out:?}"
    );
    let n = srv.get("v1", "Node", "", "worker-1").unwrap();
    let types: Vec<&str> = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    // apimachinery puts new items of a merged list first (as `kubectl patch --local` shows).
    assert_eq!(types, ["SandboxReady", "Ready"]);
    assert_eq!(
        n["spec"].get("unschedulable"),
        None,
        "the status subresource changed spec"
    );
    // The same patch again changes nothing.
    let out = kubectl(
        &npd,
        &[
            "patch",
            "node",
            "worker-1",
            "--subresource=status",
            "-p",
            patch,
        ],
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "node/worker-1 patched (no change)\n"),
        "{out:?}"
    );
    // A merge patch replaces the list.
    let out = kubectl(
        &admin,
        &[
            "patch",
            "node",
            "worker-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let n = srv.get("v1", "Node", "", "worker-1").unwrap();
    assert_eq!(n["status"]["conditions"].as_array().unwrap().len(), 1);
    // The RBAC role grants no writes of the main resource.
    let out = kubectl(&npd, &["label", "node", "worker-1", "x=y"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Error from server (Forbidden): nodes \"worker-1\" is forbidden: User \"system:serviceaccount:kube-system:npd\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
    );
    // kubectl reads the status subresource before patching it, which the Node
    // authorizer does not grant a kubelet credential (it may patch it directly).
    let n1 = k.node(&srv, "worker-1");
    let out = kubectl(
        &n1,
        &[
            "patch",
            "node",
            "worker-1",
            "--subresource=status",
            "-p",
            patch,
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Error from server (Forbidden): nodes \"worker-1\" is forbidden: User \"system:node:worker-1\" cannot get resource \"nodes/status\" in API group \"\" at the cluster scope"
    );

    // A Machine (a CRD): merge patch on status; strategic is a 415.
    let mpatch = r#"{"status":{"conditions":[{"type":"example.com/SandboxReady","status":"True","reason":"Probed","message":"","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}"#;
    let out = kubectl(
        &admin,
        &[
            "patch",
            "machine.cluster.x-k8s.io",
            "m1",
            "--subresource=status",
            "--type=merge",
            "-p",
            mpatch,
        ],
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "machine.cluster.x-k8s.io/m1 patched\n"),
        "{out:?}"
    );
    let m = srv.get(CAPI, "Machine", "default", "m1").unwrap();
    assert_eq!(
        m["status"]["conditions"][0]["type"],
        "example.com/SandboxReady"
    );
    assert_eq!(
        m["metadata"]["generation"], 1,
        "a status write bumped the generation"
    );
    let out = kubectl(
        &admin,
        &[
            "patch",
            "machine.cluster.x-k8s.io",
            "m1",
            "--subresource=status",
            "--type=strategic",
            "-p",
            mpatch,
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json"),
        "{out:?}"
    );
    // A condition without a reason is a 422 from the CRD schema.
    let bad = r#"{"status":{"conditions":[{"type":"X","status":"True","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}"#;
    let out = kubectl(
        &admin,
        &[
            "patch",
            "machine.cluster.x-k8s.io",
            "m1",
            "--subresource=status",
            "--type=merge",
            "-p",
            bad,
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("The Machine \"m1\" is invalid: \n"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("\n* status.conditions[0].reason: Required value\n"),
        "{out:?}"
    );
    // A node certificate reads no Machines.
    let out = kubectl(&n1, &["get", "machine.cluster.x-k8s.io", "m1"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("User \"system:node:worker-1\" cannot get resource \"machines\" in API group \"cluster.x-k8s.io\" in the namespace \"default\""), "{out:?}");
}

#[tokio::test]
async fn node_authorizer_reads_and_node_restriction_writes() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    srv.create(node("worker-2")).unwrap();
    let k = Kube::new();
    let n1 = k.node(&srv, "worker-1");
    let out = kubectl(&n1, &["get", "node", "worker-2"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Error from server (Forbidden): nodes \"worker-2\" is forbidden: User \"system:node:worker-1\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node 'worker-1' cannot read 'worker-2', only its own Node object"
    );
    let out = kubectl(&n1, &["get", "nodes"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("node 'worker-1' cannot read all nodes, only its own Node object"),
        "{out:?}"
    );
    // Writes: the authorizer allows them, NodeRestriction checks the name.
    let out = kubectl(&n1, &["annotate", "node", "worker-2", "a=b"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("forbidden"), "{out:?}");
    let out = kubectl(
        &n1,
        &[
            "label",
            "node",
            "worker-1",
            "node-restriction.kubernetes.io/x=y",
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("is not allowed to modify labels: node-restriction.kubernetes.io/x"),
        "{out:?}"
    );
    let out = kubectl(
        &n1,
        &["taint", "node", "worker-1", "example.com/t=v:NoSchedule"],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("is not allowed to modify taints"),
        "{out:?}"
    );
    // In the legacy mode a node reads every Node.
    let legacy = test_api::TestApiServer::builder()
        .node_authz(test_api::NodeAuthzMode::Legacy)
        .start()
        .await
        .unwrap();
    legacy.create(node("worker-2")).unwrap();
    let kc = k.write(
        "legacy.kubeconfig",
        &legacy.kubeconfig_inline(&legacy.client_cert("system:node:worker-1", &["system:nodes"])),
    );
    let out = kubectl(&kc, &["get", "nodes", "-o", "name"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "node/worker-2\n"),
        "{out:?}"
    );
}

fn wait_case(kc: &std::path::Path, target: &[&str], flip: impl FnOnce()) {
    let mut args = vec!["wait", "--for=condition=SandboxReady", "--timeout=30s"];
    args.extend_from_slice(target);
    let child = kubectl_spawn(kc, &args);
    std::thread::sleep(Duration::from_millis(1500));
    flip();
    let out = wait_child(child, Duration::from_secs(40));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.ends_with("condition met\n"), "{out:?}");
}

#[tokio::test]
async fn wait_for_a_node_condition() {
    let srv = server().await;
    srv.create(node("worker-1")).unwrap();
    let k = Kube::new();
    for kc in [k.admin(&srv), k.node(&srv, "worker-1")] {
        set_condition(&srv, "v1", "Node", "", "worker-1", "SandboxReady", "False");
        // Times out while the condition stays False.
        let out = kubectl(
            &kc,
            &[
                "wait",
                "--for=condition=SandboxReady",
                "--timeout=2s",
                "node/worker-1",
            ],
        );
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(
            out.stderr.trim(),
            "error: timed out waiting for the condition on nodes/worker-1",
            "{out:?}"
        );
        // Returns when it flips during the wait.
        wait_case(&kc, &["node/worker-1"], || {
            set_condition(&srv, "v1", "Node", "", "worker-1", "SandboxReady", "True")
        });
    }
}

#[tokio::test]
async fn wait_for_a_machine_condition() {
    let srv = server().await;
    srv.create(machine("default", "m1")).unwrap();
    let k = Kube::new();
    let kc = k.admin(&srv);
    set_condition(
        &srv,
        CAPI,
        "Machine",
        "default",
        "m1",
        "SandboxReady",
        "False",
    );
    let out = kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=SandboxReady",
            "--timeout=2s",
            "machine.cluster.x-k8s.io/m1",
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "error: timed out waiting for the condition on machines/m1",
        "{out:?}"
    );
    wait_case(&kc, &["machine.cluster.x-k8s.io/m1"], || {
        set_condition(
            &srv,
            CAPI,
            "Machine",
            "default",
            "m1",
            "SandboxReady",
            "True",
        )
    });
}

#[tokio::test]
async fn get_machines_with_the_crd_printer_columns() {
    let srv = server().await;
    let mut m = machine("default", "m1");
    m["status"] = serde_json::json!({
        "phase": "Running", "nodeRef": {"name": "worker-1"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}]
    });
    srv.create(m).unwrap();
    let k = Kube::new();
    // The released v1beta2 CRD's additionalPrinterColumns (priority 0 only
    // without -o wide), cells by their JSONPath, absent values blank.
    let out = kubectl(&k.admin(&srv), &["get", "machines.cluster.x-k8s.io"]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME",
            "CLUSTER",
            "NODE",
            "NAME",
            "READY",
            "AVAILABLE",
            "UP-TO-DATE",
            "PHASE",
            "AGE",
            "VERSION"
        ],
        "{out:?}"
    );
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["m1", "c1", "worker-1", "True", "Running"],
        "{out:?}"
    );
    assert!(cells[5].ends_with('s'), "{out:?}");
    let out = kubectl(
        &k.admin(&srv),
        &["get", "machines.cluster.x-k8s.io", "-o", "wide"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.lines().next().unwrap().contains(" PROVIDER ID "),
        "{out:?}"
    );
}
